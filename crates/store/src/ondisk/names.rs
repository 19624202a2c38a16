//! A segment's listing table: its jobs' log names in the order a listing
//! gives them (byte order: a sorted directory, an object store's `LIST`),
//! each with the stamp (size, modification time) it was indexed at and its
//! row. The header holds each block's first name, offset and checksum.
//!
//! A rescan compares a listing with it in one merge
//! ([`Segments::sort_out`]): which listed logs the segments hold
//! unchanged, which they hold with another stamp, and which of theirs the
//! listing, over the names it covered, no longer names. There is no
//! lookup by id per log (a lookup through the id order costs about ten
//! reads; ten million of them would be hours): the merge reads each
//! segment's table once, in order, from the listing's first covered name
//! to its last.

use super::{BLOCK, Segment, Segments};
use crate::location::Stamp;
use crate::published::Covered;
use crate::snapshot::{Cursor, IndexError, checksum};
use crate::summary::{JobSummary, time_from_nanos};
use std::borrow::Cow;
use std::sync::Arc;

/// A block of the listing table, as the header holds it.
#[derive(Debug, Clone)]
pub(super) struct NameBlock {
    /// Its offset in the table's region.
    pub(super) at: u64,
    /// The checksum of its bytes.
    pub(super) sum: u64,
    /// Its first name.
    pub(super) first: Box<str>,
}

/// One log of a segment's listing table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The log's name.
    pub name: String,
    /// Its size and modification time when it was indexed.
    pub stamp: Stamp,
    /// The job's row in its segment.
    pub row: u32,
}

/// Where a listed log stands against the segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No segment holds it: to read.
    New,
    /// A segment holds it with the stamp it is listed with.
    Unchanged,
    /// A segment holds it with another stamp: to read again.
    Changed,
}

/// A listing sorted out against the segments.
#[derive(Debug, Default)]
pub struct SortedOut {
    /// Each listed log's standing, in the listing's order.
    pub standing: Vec<Standing>,
    /// The segments' logs the listing covered and did not name: the
    /// segment's index (in the order they were opened) and the log.
    pub gone: Vec<(usize, Listed)>,
}

/// The listing table of `order` (jobs in row order): its bytes and its
/// blocks.
pub(super) fn encode_names(order: &[&JobSummary]) -> Result<(Vec<u8>, Vec<NameBlock>), IndexError> {
    let mut names: Vec<(Cow<'_, str>, usize)> = order
        .iter()
        .enumerate()
        .map(|(row, s)| (s.file_name(), row))
        .collect();
    names.sort_unstable();
    let (mut out, mut blocks) = (Vec::new(), Vec::new());
    for chunk in names.chunks(BLOCK) {
        let at = out.len();
        for (name, row) in chunk {
            let s = order[*row];
            let len = u32::try_from(name.len())
                .map_err(|_| IndexError::Damaged("a log name too long"))?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(*row as u32).to_le_bytes());
            out.extend_from_slice(&s.len.to_le_bytes());
            out.extend_from_slice(&s.modified.to_le_bytes());
        }
        blocks.push(NameBlock {
            at: at as u64,
            sum: checksum(&out[at..]),
            first: chunk[0].0.as_ref().into(),
        });
    }
    Ok((out, blocks))
}

impl Segment {
    /// Every row, record and listing block read and checked against the
    /// header: `Ok` when the whole file is as it says (a file truncated
    /// or overwritten in place is not).
    pub fn check(&self) -> Result<(), IndexError> {
        for job in self.jobs() {
            job?;
        }
        for b in 0..self.name_blocks.len() {
            self.name_block(b)?;
        }
        Ok(())
    }

    /// The logs of block `b` of the listing table, checked: against the
    /// block's checksum, its first name, the order, the row count.
    fn name_block(&self, b: usize) -> Result<Vec<Listed>, IndexError> {
        let damaged = IndexError::Damaged("the listing table is damaged");
        let region = self.at[6] - self.at[5];
        let from = self.name_blocks[b].at;
        let to = self.name_blocks.get(b + 1).map_or(region, |n| n.at);
        if from > to || to > region {
            return Err(damaged);
        }
        let bytes = self.read(self.at[5] + from, (to - from) as usize)?;
        if checksum(&bytes) != self.name_blocks[b].sum {
            return Err(IndexError::Damaged("a name block's checksum mismatch"));
        }
        let count = BLOCK.min(self.rows - b * BLOCK);
        let mut c = Cursor::new(&bytes);
        let mut out: Vec<Listed> = Vec::with_capacity(count);
        for _ in 0..count {
            let name = c.str()?.to_string();
            let row = c.u32()?;
            let len = c.u64()?;
            let modified = c.u64()? as i64;
            let ordered = out
                .last()
                .map_or(*self.name_blocks[b].first == *name, |l| l.name <= name);
            if !ordered || row as usize >= self.rows {
                return Err(damaged);
            }
            let modified = (modified != i64::MIN).then(|| time_from_nanos(modified));
            out.push(Listed {
                name,
                stamp: Stamp { len, modified },
                row,
            });
        }
        if !c.done() {
            return Err(damaged);
        }
        Ok(out)
    }

    /// The row of the job whose log is `name`, if the segment holds one.
    pub(super) fn row_of_name(&self, name: &str) -> Result<Option<u32>, IndexError> {
        let b = self.name_blocks.partition_point(|b| *b.first <= *name);
        if b == 0 {
            return Ok(None);
        }
        let logs = self.name_block(b - 1)?;
        Ok(logs.iter().find(|l| l.name == name).map(|l| l.row))
    }

    /// The listing table's logs whose names `covered` covers, in name
    /// order, read block by block from the first block that can hold one.
    pub fn listing<'a>(
        &'a self,
        covered: &'a Covered,
    ) -> impl Iterator<Item = Result<Listed, IndexError>> + 'a {
        let (after, upto) = match covered {
            Covered::All => (None, None),
            Covered::Range { after, upto } => (after.as_deref(), upto.as_deref()),
        };
        let first = after.map_or(0, |a| {
            self.name_blocks
                .partition_point(|b| *b.first <= *a)
                .saturating_sub(1)
        });
        (first..self.name_blocks.len())
            .map(move |b| self.name_block(b))
            .take_while(move |block| match (block, upto) {
                // A block starting past the covered names ends the walk.
                (Ok(logs), Some(u)) => logs.first().is_none_or(|l| l.name.as_str() <= u),
                _ => true,
            })
            .flat_map(|block| match block {
                Ok(logs) => logs.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
            .filter(move |l| l.as_ref().map_or(true, |l| covered.covers(&l.name)))
    }
}

impl Segments {
    /// The job whose log is `name`, found through the listing tables (a
    /// block's read and a record's a segment that may hold it).
    pub fn by_file(&self, name: &str) -> Result<Option<Arc<JobSummary>>, IndexError> {
        for s in &self.segments {
            if let Some(row) = s.row_of_name(name)? {
                return s.summary(row as usize).map(Some);
            }
        }
        Ok(None)
    }

    /// Which of `names` (any order) the segments hold a log of: each
    /// segment's listing table read once, only the blocks that may hold
    /// one of them.
    pub fn holding(&self, names: &[&str]) -> Result<Vec<bool>, IndexError> {
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_unstable_by(|&a, &b| names[a].cmp(names[b]));
        let mut out = vec![false; names.len()];
        for s in self.iter() {
            let mut at = 0;
            while at < order.len() {
                let name = names[order[at]];
                let b = s.name_blocks.partition_point(|b| *b.first <= *name);
                if b == 0 {
                    at += 1;
                    continue;
                }
                let logs = s.name_block(b - 1)?;
                let last = logs.last().map_or("", |l| l.name.as_str());
                // Every name up to the block's last is answered by it.
                while at < order.len() && names[order[at]] <= last {
                    let name = names[order[at]];
                    if logs.binary_search_by(|l| l.name.as_str().cmp(name)).is_ok() {
                        out[order[at]] = true;
                    }
                    at += 1;
                }
                if at < order.len() && names[order[at]] == name {
                    at += 1;
                }
            }
        }
        Ok(out)
    }

    /// Sorts `listing` (names with their stamps, any order) out against
    /// the segments' listing tables: each log's standing, and the
    /// segments' logs `covered` covers that it does not name. Only the
    /// covered names are read when the listing names no other. Stamps
    /// compare by size and modification time (`whole_seconds` for objects). A
    /// name two segments hold (ids of two schedulers colliding) is
    /// unchanged if either holds it unchanged.
    pub fn sort_out(
        &self,
        listing: &[(String, Stamp)],
        whole_seconds: bool,
        covered: &Covered,
    ) -> Result<SortedOut, IndexError> {
        let mut order: Vec<usize> = (0..listing.len()).collect();
        if !listing.windows(2).all(|w| w[0].0 <= w[1].0) {
            order.sort_unstable_by(|&a, &b| listing[a].0.cmp(&listing[b].0));
        }
        let mut out = SortedOut {
            standing: vec![Standing::New; listing.len()],
            gone: Vec::new(),
        };
        // The tables are read over the covered names, or whole when the
        // listing names others too (which then stand as they are).
        let all = Covered::All;
        let read = if listing.iter().all(|(name, _)| covered.covers(name)) {
            covered
        } else {
            &all
        };
        for (index, segment) in self.iter().enumerate() {
            let mut next = order.iter().peekable();
            for held in segment.listing(read) {
                let held = held?;
                while next.next_if(|&&i| listing[i].0 < held.name).is_some() {}
                match next.peek() {
                    Some(&&i) if listing[i].0 == held.name => {
                        let standing = &mut out.standing[i];
                        if listing[i].1.same(held.stamp, whole_seconds) {
                            *standing = Standing::Unchanged;
                        } else if *standing == Standing::New {
                            *standing = Standing::Changed;
                        }
                    }
                    _ if covered.covers(&held.name) => out.gone.push((index, held)),
                    _ => {}
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ondisk::tests::{jobs, segments};
    use crate::query::JobFacts;
    use crate::tests::below;
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    /// A listing of `all`'s logs as a rescan might see it (at random:
    /// unchanged, grown, touched within the same second, gone) and new
    /// logs, shuffled; with what each listed log is (the oracle).
    pub(in crate::ondisk) fn listing(
        all: &[Arc<JobSummary>],
        r: &mut impl FnMut(u64) -> u64,
    ) -> Vec<(String, Stamp, [Standing; 2])> {
        let mut out = Vec::new();
        for j in all {
            let (name, stamp) = (j.file_name().to_string(), j.stamp());
            match r(5) {
                0 => {}
                1 => {
                    let grown = Stamp {
                        len: stamp.len + 1,
                        ..stamp
                    };
                    out.push((name, grown, [Standing::Changed; 2]));
                }
                2 => {
                    // Touched a nanosecond later: changed for a file, the
                    // same for an object (listed to the millisecond, its
                    // uploader's word to the second) unless it crosses a
                    // second.
                    let Some(m) = stamp.modified else { continue };
                    let touched = Stamp {
                        modified: Some(m + Duration::from_nanos(1)),
                        ..stamp
                    };
                    let whole = if stamp.same(touched, true) {
                        Standing::Unchanged
                    } else {
                        Standing::Changed
                    };
                    out.push((name, touched, [Standing::Changed, whole]));
                }
                _ => out.push((name, stamp, [Standing::Unchanged; 2])),
            }
        }
        for i in 0..r(300) {
            let stamp = Stamp {
                len: r(100),
                modified: None,
            };
            out.push((format!("new-{i}.eventlog"), stamp, [Standing::New; 2]));
        }
        for i in (1..out.len()).rev() {
            out.swap(i, r(i as u64 + 1) as usize);
        }
        out
    }

    /// A covered range of names between two picked at random (some
    /// absent), or all of them.
    pub(in crate::ondisk) fn covered(names: &[String], r: &mut impl FnMut(u64) -> u64) -> Covered {
        let mut pick = || match r(4) {
            0 => None,
            1 => Some(format!("job-{:03}", r(1_000))),
            _ => Some(names[r(names.len() as u64) as usize].clone()),
        };
        match (pick(), pick()) {
            (None, None) => Covered::All,
            (Some(a), Some(b)) if a > b => Covered::Range {
                after: Some(b),
                upto: Some(a),
            },
            (after, upto) => Covered::Range { after, upto },
        }
    }

    /// Over segments split at random and in runs of the default order,
    /// every listed log's standing and every gone log is what a map of
    /// the jobs by name says; each gone log's row holds that log.
    #[test]
    fn a_listing_sorts_out_as_a_map_of_the_jobs_by_name_says() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(3_000, 41);
        let names: Vec<String> = all.iter().map(|j| j.file_name().to_string()).collect();
        let by_name: BTreeMap<&str, &Arc<JobSummary>> =
            names.iter().map(|n| n.as_str()).zip(&all).collect();
        let mut r = below(43);
        for (split, seed) in [(3, Some(5)), (4, None), (1, None)] {
            let set = segments(dir.path(), &all, split, seed);
            // A range ending at, or following, a block's first name: that
            // log is covered in the first case only.
            let edge = set.segments[0].name_blocks[1].first.to_string();
            let stamp = by_name[edge.as_str()].stamp();
            for (covered, held) in [
                (
                    Covered::Range {
                        after: None,
                        upto: Some(edge.clone()),
                    },
                    true,
                ),
                (
                    Covered::Range {
                        after: Some(edge.clone()),
                        upto: None,
                    },
                    false,
                ),
            ] {
                let got = set.sort_out(&[], false, &covered).unwrap();
                let gone = got.gone.iter().any(|(_, l)| l.name == edge);
                assert_eq!(gone, held, "{covered:?}");
                // Listed, it stands as it is either way (a listed name
                // the range leaves out has the tables read whole).
                let listed = [(edge.clone(), stamp)];
                let got = set.sort_out(&listed, false, &covered).unwrap();
                assert_eq!(got.standing, [Standing::Unchanged], "{covered:?}");
            }
            for round in 0..40 {
                let mut listed = listing(&all, &mut r);
                let covered = covered(&names, &mut r);
                if round % 2 == 0 {
                    // As a listing pass lists: the covered names alone
                    // (the tables are read over those only).
                    listed.retain(|l| covered.covers(&l.0));
                }
                let plain: Vec<(String, Stamp)> =
                    listed.iter().map(|(n, s, _)| (n.clone(), *s)).collect();
                for (objects, whole) in [(0, false), (1, true)] {
                    let got = set.sort_out(&plain, whole, &covered).unwrap();
                    let want: Vec<Standing> = listed.iter().map(|l| l.2[objects]).collect();
                    assert_eq!(got.standing, want, "{split} {round} {covered:?}");
                    let listed_names: BTreeSet<&str> =
                        listed.iter().map(|l| l.0.as_str()).collect();
                    let want_gone: BTreeSet<&str> = by_name
                        .keys()
                        .copied()
                        .filter(|n| covered.covers(n) && !listed_names.contains(n))
                        .collect();
                    let gone: BTreeSet<&str> = got.gone.iter().map(|g| g.1.name.as_str()).collect();
                    assert_eq!(gone, want_gone, "{split} {round} {covered:?}");
                    assert_eq!(got.gone.len(), want_gone.len());
                    for (segment, log) in got.gone.iter().take(20) {
                        let s = set.segments[*segment].summary(log.row as usize).unwrap();
                        assert_eq!(s.file_name(), log.name);
                        assert_eq!(
                            (s.stamp(), by_name[log.name.as_str()].stamp()),
                            (log.stamp, log.stamp)
                        );
                    }
                }
            }
        }
    }

    /// Each segment's count of each state by scheduler is a count of the
    /// jobs made another way.
    #[test]
    fn a_segment_counts_its_jobs_by_scheduler() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(2_000, 47);
        let set = segments(dir.path(), &all, 3, Some(9));
        let mut got: BTreeMap<Option<String>, [usize; 6]> = BTreeMap::new();
        for s in set.iter() {
            for (id, counts) in s.counts_by_scheduler() {
                let mine = got.entry(id.map(|i| i.to_string())).or_default();
                for (a, b) in mine.iter_mut().zip(counts) {
                    *a += b;
                }
            }
        }
        let mut want: BTreeMap<Option<String>, [usize; 6]> = BTreeMap::new();
        for j in &all {
            want.entry(j.scheduler_id().map(str::to_string))
                .or_default()[j.state().index()] += 1;
        }
        assert_eq!(got, want);
    }

    fn patch(path: &Path, at: u64, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.write_all_at(bytes, at).unwrap();
    }

    /// A listing table flipped, or lying (names out of order, a row past
    /// the end, each with the block's checksum made to agree), or cut
    /// short, is an error, never a panic nor a wrong standing.
    #[test]
    fn a_damaged_or_lying_listing_table_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(500, 3);
        let refs: Vec<&JobSummary> = all.iter().map(|j| &**j).collect();
        let path = dir.path().join("seg");
        Segment::write(&path, &refs).unwrap();
        let good = std::fs::read(&path).unwrap();
        let s = Segment::open(&path).unwrap();
        let set = Segments {
            segments: vec![s],
            paths: Vec::new(),
        };
        let listing: Vec<(String, Stamp)> = all
            .iter()
            .map(|j| (j.file_name().to_string(), j.stamp()))
            .collect();
        let sort_out = |set: &Segments| set.sort_out(&listing, false, &Covered::All);
        let ok = sort_out(&set).unwrap();
        assert!(ok.standing.iter().all(|s| *s == Standing::Unchanged) && ok.gone.is_empty());
        let at = set.segments[0].at[5];
        // A name's byte flipped: the block's checksum.
        patch(&path, at + 5, &[good[at as usize + 5] ^ 1]);
        let err = sort_out(&set).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        let block = |s: &Segment| s.read(s.at[5], s.name_blocks[1].at as usize).unwrap();
        // The segment as patched, its first table block's checksum made
        // to agree: refused by the table's own checks.
        let lying_is_refused = || {
            let mut lying = Segment::open(&path).unwrap();
            lying.name_blocks[0].sum = checksum(&block(&lying));
            let lying = Segments {
                segments: vec![lying],
                paths: Vec::new(),
            };
            let err = sort_out(&lying).unwrap_err().to_string();
            assert!(err.contains("listing table"), "{err}");
        };
        // The first two names swapped, the checksum made to agree: out of
        // order.
        std::fs::write(&path, &good).unwrap();
        let mut bytes = block(&set.segments[0]);
        let first = 4 + u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize + 20;
        let second =
            4 + u32::from_le_bytes(bytes[first..first + 4].try_into().unwrap()) as usize + 20;
        let swapped = [&bytes[first..first + second], &bytes[..first]].concat();
        bytes[..first + second].copy_from_slice(&swapped);
        patch(&path, at, &bytes);
        lying_is_refused();
        // A row past the end, the checksum made to agree.
        std::fs::write(&path, &good).unwrap();
        let name = u32::from_le_bytes(good[at as usize..at as usize + 4].try_into().unwrap());
        patch(&path, at + 4 + u64::from(name), &u32::MAX.to_le_bytes());
        lying_is_refused();
        // Cut short under the open segment, and at open.
        std::fs::write(&path, &good).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(good.len() as u64 - 1).unwrap();
        let err = sort_out(&set).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        assert!(matches!(Segment::open(&path), Err(IndexError::Damaged(_))));
    }
}
