//! Summaries on disk: sorted, immutable segment files that answer the job
//! list's query (every filter, sort, cursor and count `/api/jobs` takes)
//! without holding a job in memory. A segment's resident cost is its block
//! statistics (about 100 bytes a block of 4,096 jobs: 0.02 bytes a job)
//! and its scheduler and label tables; the jobs stay in the file and are
//! read by page.
//!
//! Completed jobs move here from the catalog past
//! `--history-memory-jobs` (`cold`); `benches/scale.rs` measures it
//! beside the catalog over the same jobs.
//!
//! Format (little-endian): the magic `BJHSEG01`, the header's length
//! (u64), the header, its checksum (u64), then five regions:
//!
//! - the rows, in the default order (newest queued first, then id): 48
//!   bytes each: the position key, start, end, query hash, the record's
//!   offset in the record region (u64 each), the record's length (the low
//!   24 bits of a u32 whose high 8 are the state's index) and the
//!   scheduler's index in the header's table (u32; `u32::MAX` none);
//! - the rows by duration (the list's duration key, then id), by query
//!   hash (then the default order) and by id: a u32 row number each;
//! - the records, each a job's record in the persistent index's format
//!   (`snapshot`), in row order;
//! - the listing table (`names`): each job's log name (u32 length, bytes),
//!   row (u32), size (u64) and modification time (i64 nanoseconds from
//!   the epoch, `i64::MIN` none), in the names' byte order.
//!
//! The header: the rows a block holds (4,096), the row count, each
//! region's offset and the end of the last, then per block the minimum
//! and maximum of its position key, start, end and duration, its count
//! of each state, and a checksum of its rows; then the schedulers' ids,
//! each with its count of each state; the queries' labels; and per block
//! of the listing table its offset, checksum and first name.
//!
//! **Why our own format, read by page.** The rows a filter reads are
//! fixed-width, so a block is one read and a row is found by arithmetic;
//! the permutations make a walk by duration or by query one read a row;
//! nothing is decoded at open but the header (a restart over 10,000,000
//! jobs opens in milliseconds, where the persistent index decodes in
//! seconds). Parquet (which the columnar history uses) reads a row
//! group's pages to find one row and holds no order beside the one it is
//! written in; an embedded key-value store (`redb`, `fjall`) would hold
//! each of the three orders as another tree of the same size, with its
//! own write path, for reads we answer by binary search. The file is read
//! with `pread` (`FileExt::read_exact_at`), not memory-mapped: a segment
//! truncated by another process under a mapping kills the reader with
//! `SIGBUS`; under `pread` it is an error of that read.
//!
//! A job id is in one segment at most (`Layered::rewrite` keeps it so;
//! segments of several schedulers whose ids collide are a question for
//! the store that opens them, as they are for the catalog today).
//!
//! **Invariant:** nothing read from a segment is trusted: the header is
//! checksummed, each block's rows are checked against their checksum when
//! read whole, every row number and offset is bounds-checked (no read
//! reaches past the file, nor allocates more than it holds), and a
//! record must agree with its row (state, times, query hash, scheduler),
//! so a damaged, truncated or lying file gives an error or, where its lie
//! is consistent, its own wrong answer; never a panic.

use crate::query::{Facts, FactsRef, JobFacts, ListQuery, Sort};
use crate::snapshot::{Cursor, IndexError, checksum, decode_record};
use crate::summary::JobSummary;
use bjh_format::JobState;
use std::cmp::Reverse;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

mod duration;
mod head;
mod layout;
mod names;
mod walks;
use duration::merge_by_duration;
pub use head::Layered;
use layout::{Fixed, Stats, decode_header, encode};
use names::NameBlock;
pub use names::{Listed, SortedOut, Standing};
#[cfg(test)]
pub(crate) use tests::random_query;

const MAGIC: &[u8; 8] = b"BJHSEG01";
/// Rows a block of statistics covers.
#[cfg(not(test))]
const BLOCK: usize = 4096;
#[cfg(test)]
const BLOCK: usize = 64;
/// Bytes of a row.
const ROW: usize = 48;
/// The largest header read (a block's statistics are 96 bytes).
const MAX_HEADER: u64 = 64 << 20;
/// The longest record read (a job's strings are capped long before).
const MAX_RECORD: u32 = 1 << 20;
const STATES: usize = JobState::ALL.len();
/// The offsets the header states: each region's start, and the end of
/// the last.
const REGIONS: usize = 7;

/// How many jobs a page needs from a segment, and which of its jobs to
/// leave out of them (those a head of changes hides; still counted: the
/// head subtracts them from the count).
#[derive(Clone, Copy)]
pub struct Want<'a> {
    /// Jobs wanted (`offset + limit`).
    pub count: usize,
    /// Whether the job of this id is to be left out.
    pub hidden: &'a dyn Fn(&str) -> bool,
}

impl std::fmt::Debug for Want<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Want").field("count", &self.count).finish()
    }
}

/// Jobs of a page (or its candidates) and how many jobs match the query.
pub type Found = (Vec<Arc<JobSummary>>, usize);

/// A row read for the filters: its facts, strings empty (the fast paths
/// never filter by name), and its scheduler.
#[derive(Debug)]
struct Probe<'a> {
    facts: FactsRef<'a>,
    sched: Option<&'a str>,
}

impl JobFacts for Probe<'_> {
    fn facts(&self) -> FactsRef<'_> {
        self.facts
    }
    fn scheduler_id(&self) -> Option<&str> {
        self.sched
    }
}

/// A row of a block read whole, with its id and name cut from its record.
#[derive(Debug)]
struct Named<'a> {
    probe: Probe<'a>,
    row: usize,
}

impl JobFacts for Named<'_> {
    fn facts(&self) -> FactsRef<'_> {
        self.probe.facts
    }
    fn scheduler_id(&self) -> Option<&str> {
        self.probe.sched
    }
}

/// A candidate of the pass: a job already read, or a row of the block.
#[derive(Debug)]
enum Candidate<'a> {
    Read(Arc<JobSummary>),
    Row(Named<'a>),
}

impl JobFacts for Candidate<'_> {
    fn facts(&self) -> FactsRef<'_> {
        match self {
            Candidate::Read(s) => s.facts(),
            Candidate::Row(r) => r.facts(),
        }
    }
    fn scheduler_id(&self) -> Option<&str> {
        match self {
            Candidate::Read(s) => s.scheduler_id(),
            Candidate::Row(r) => r.scheduler_id(),
        }
    }
}

/// One segment file, open: its header in memory, its rows on disk.
#[derive(Debug)]
pub struct Segment {
    file: File,
    /// Its size when opened.
    size: u64,
    rows: usize,
    /// Offsets of the rows, the three orders, the records and the
    /// listing table, and the end of the table.
    at: [u64; REGIONS],
    blocks: Vec<Stats>,
    schedulers: Vec<Arc<str>>,
    /// Each scheduler's count of each state.
    by_sched: Vec<[u32; STATES]>,
    /// The listing table's blocks.
    name_blocks: Vec<NameBlock>,
}

/// Which order a permutation region holds.
#[derive(Debug, Clone, Copy)]
enum Perm {
    Duration = 1,
    Query = 2,
    Id = 3,
}

impl Segment {
    /// Writes `jobs` as a segment at `path` (whole or not at all).
    pub fn write(path: &Path, jobs: &[&JobSummary]) -> Result<(), IndexError> {
        let bytes = encode(jobs)?;
        bjh_files::replace::<std::io::Error>(path, 0o600, |f| {
            use std::io::Write;
            f.write_all(&bytes)
        })?;
        Ok(())
    }

    /// Opens the segment at `path`: reads and checks its header only.
    pub fn open(path: &Path) -> Result<Self, IndexError> {
        let (file, meta) = bjh_files::open_regular(path)?;
        let mut head = [0u8; 16];
        file.read_exact_at(&mut head, 0)
            .map_err(|_| IndexError::Foreign)?;
        if &head[..8] != MAGIC {
            return Err(IndexError::Foreign);
        }
        let len = u64::from_le_bytes(head[8..].try_into().expect("8"));
        if len > MAX_HEADER || 24 + len > meta.len() {
            return Err(IndexError::Damaged("the header runs past the end"));
        }
        let mut header = vec![0u8; len as usize + 8];
        file.read_exact_at(&mut header, 16)?;
        let (body, sum) = header.split_at(len as usize);
        if checksum(body) != u64::from_le_bytes(sum.try_into().expect("8")) {
            return Err(IndexError::Damaged("header checksum mismatch"));
        }
        let mut segment = decode_header(file, body)?;
        segment.size = meta.len();
        let at = segment.at;
        let rows = segment.rows as u64;
        let sizes = [ROW as u64, 4, 4, 4];
        for (i, size) in sizes.iter().enumerate() {
            if at[i].checked_add(rows * size) != Some(at[i + 1]) {
                return Err(IndexError::Damaged("regions out of place"));
            }
        }
        if at[4] > at[5] || at[5] > at[6] || at[6] != meta.len() || at[0] < 24 + len {
            return Err(IndexError::Damaged("regions out of place"));
        }
        let states = segment.counts();
        for (i, all) in states.iter().enumerate() {
            let named: u64 = segment.by_sched.iter().map(|c| u64::from(c[i])).sum();
            if named > *all as u64 {
                return Err(IndexError::Damaged("more jobs by scheduler than in all"));
            }
        }
        segment.blocks.shrink_to_fit();
        Ok(segment)
    }

    /// The newest position key it holds (its first row's).
    fn newest(&self) -> Option<u64> {
        self.blocks.first().map(|b| b.ranges[0][1])
    }

    /// How many jobs the segment holds.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Bytes the segment keeps in memory (its header, decoded).
    pub fn resident_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.blocks.capacity() * std::mem::size_of::<Stats>()
            + self.schedulers.iter().map(|s| s.len() + 16).sum::<usize>()
            + self.by_sched.capacity() * std::mem::size_of::<[u32; STATES]>()
            + (self.name_blocks.iter())
                .map(|b| std::mem::size_of::<NameBlock>() + b.first.len())
                .sum::<usize>()
    }

    /// How many of its jobs are in each state (by [`JobState::index`]),
    /// from its blocks' statistics.
    pub fn counts(&self) -> [usize; STATES] {
        let mut out = [0; STATES];
        for b in &self.blocks {
            for (n, c) in out.iter_mut().zip(b.states) {
                *n += c as usize;
            }
        }
        out
    }

    /// [`Segment::counts`] per scheduler, by id; the jobs whose logs name
    /// none under `None` (left out when there are none).
    pub fn counts_by_scheduler(&self) -> Vec<(Option<Arc<str>>, [usize; STATES])> {
        let mut unnamed = self.counts();
        let mut out = Vec::with_capacity(self.schedulers.len() + 1);
        for (id, counts) in self.schedulers.iter().zip(&self.by_sched) {
            let counts = counts.map(|c| c as usize);
            for (all, theirs) in unnamed.iter_mut().zip(counts) {
                *all -= theirs;
            }
            out.push((Some(id.clone()), counts));
        }
        if unnamed.iter().any(|&n| n > 0) {
            out.push((None, unnamed));
        }
        out
    }

    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>, IndexError> {
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, at)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    IndexError::Damaged("the segment is truncated")
                }
                _ => IndexError::Io(e),
            })?;
        Ok(buf)
    }

    fn fixed(&self, row: usize) -> Result<Fixed, IndexError> {
        if row >= self.rows {
            return Err(IndexError::Damaged("a row number past the end"));
        }
        Fixed::decode(&self.read(self.at[0] + (row * ROW) as u64, ROW)?)
    }

    /// The rows of block `b`, checked against its checksum.
    fn block(&self, b: usize) -> Result<Vec<Fixed>, IndexError> {
        let first = b * BLOCK;
        let n = BLOCK.min(self.rows - first);
        let bytes = self.read(self.at[0] + (first * ROW) as u64, n * ROW)?;
        if checksum(&bytes) != self.blocks[b].sum {
            return Err(IndexError::Damaged("a block's checksum mismatch"));
        }
        bytes.chunks_exact(ROW).map(Fixed::decode).collect()
    }

    fn perm(&self, which: Perm, i: usize) -> Result<usize, IndexError> {
        let b = self.read(self.at[which as usize] + (i * 4) as u64, 4)?;
        let row = u32::from_le_bytes(b.try_into().expect("4")) as usize;
        if row >= self.rows {
            return Err(IndexError::Damaged("a row number past the end"));
        }
        Ok(row)
    }

    fn record(&self, f: &Fixed) -> Result<Vec<u8>, IndexError> {
        if f.rec_len > MAX_RECORD {
            return Err(IndexError::Damaged("a record too long"));
        }
        let at = (self.at[4].checked_add(f.rec))
            .filter(|at| at + u64::from(f.rec_len) <= self.at[5])
            .ok_or(IndexError::Damaged("a record past the end"))?;
        self.read(at, f.rec_len as usize)
    }

    /// The id (and name) a record starts with, without decoding the rest.
    fn names(record: &[u8]) -> Result<(&str, &str), IndexError> {
        let mut c = Cursor::new(record);
        let _file = c.str()?;
        Ok((c.str()?, c.str()?))
    }

    fn id_of(&self, row: usize) -> Result<(Fixed, String), IndexError> {
        let f = self.fixed(row)?;
        let record = self.record(&f)?;
        let id = Self::names(&record)?.0.to_string();
        Ok((f, id))
    }

    /// The job of `row`, read whole and checked against its row.
    fn summary(&self, row: usize) -> Result<Arc<JobSummary>, IndexError> {
        let f = self.fixed(row)?;
        self.summary_of(&f)
    }

    fn summary_of(&self, f: &Fixed) -> Result<Arc<JobSummary>, IndexError> {
        let record = self.record(f)?;
        let mut c = Cursor::new(&record);
        let (s, _) = decode_record(&mut c)?;
        let agrees = s.state() == f.state
            && s.start_time() == f.start
            && s.end_time() == f.end
            && s.query_hash() == f.hash
            && s.position_key() == f.key
            && s.scheduler_id() == self.sched(f.sched);
        if !agrees {
            return Err(IndexError::Damaged("a record disagrees with its row"));
        }
        Ok(Arc::new(s))
    }

    fn sched(&self, i: u32) -> Option<&str> {
        self.schedulers.get(i as usize).map(|s| &**s)
    }

    fn probe(&self, f: &Fixed) -> Probe<'_> {
        Probe {
            facts: Facts {
                job_id: "",
                job_name: "",
                state: f.state,
                queued_time: f.key,
                start_time: f.start,
                end_time: f.end,
                query_hash: f.hash,
            },
            sched: self.sched(f.sched),
        }
    }

    /// Every job, in the default order, read block by block.
    fn jobs(&self) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        self.jobs_in(|_| true)
    }

    /// The jobs of the blocks whose statistics `keep` accepts (each
    /// block's ranges of position key, start, end and duration), in the
    /// default order, read block by block.
    fn jobs_in<'a>(
        &'a self,
        keep: impl Fn(&[[u64; 2]; 4]) -> bool + 'a,
    ) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + 'a {
        let kept = (0..self.blocks.len()).filter(move |&b| keep(&self.blocks[b].ranges));
        kept.flat_map(move |b| {
            let rows = match self.block(b) {
                Ok(rows) => rows,
                Err(e) => return vec![Err(e)],
            };
            rows.iter().map(|f| self.summary_of(f)).collect()
        })
    }

    /// The job `id`, when the segment holds it.
    pub fn get(&self, id: &str) -> Result<Option<Arc<JobSummary>>, IndexError> {
        let at = partition(self.rows, |i| {
            let (_, have) = self.id_of(self.perm(Perm::Id, i)?)?;
            Ok(have.as_str() < id)
        })?;
        if at == self.rows {
            return Ok(None);
        }
        let row = self.perm(Perm::Id, at)?;
        let (_, have) = self.id_of(row)?;
        if have != id {
            return Ok(None);
        }
        self.summary(row).map(Some)
    }

    /// The jobs of `q`'s page in this segment (at most `offset + limit`
    /// of them, any order) and how many jobs here match `q`.
    pub fn candidates(&self, q: &ListQuery, cursor: Option<&Facts>) -> Result<Found, IndexError> {
        let want = Want {
            count: q.limit.map_or(usize::MAX, |l| q.offset.saturating_add(l)),
            hidden: &|_| false,
        };
        self.candidates_of(q, cursor, want)
    }

    /// [`Segment::candidates`], `want.count` of them at most, without the
    /// hidden jobs (which still count).
    fn candidates_of(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        want: Want<'_>,
    ) -> Result<Found, IndexError> {
        let walks = q.before.is_none() && q.name.is_none();
        if walks && q.query_hash.is_some() && q.default_order() {
            return self.walk_query(q, cursor, want);
        }
        if walks && q.query_hash.is_none() && q.default_order() {
            return self.walk_default(q, cursor, want);
        }
        if walks && q.sort == Sort::Duration && q.filters_states_only() {
            return self.walk_duration(q, cursor, want);
        }
        self.pass(q, cursor, want)
    }

    /// Whether block `b` may hold a job `q` matches.
    fn may_match(&self, q: &ListQuery, b: usize) -> bool {
        let s = &self.blocks[b];
        if let Some(states) = &q.states
            && !states.iter().any(|st| s.states[st.index()] > 0)
        {
            return false;
        }
        let meets = |[lo, hi]: [u64; 2], after: Option<u64>, before: Option<u64>| {
            after.is_none_or(|a| hi >= a) && before.is_none_or(|b| lo <= b && hi > 0)
        };
        meets(s.ranges[1], q.started_after, q.started_before)
            && meets(s.ranges[2], q.ended_after, q.ended_before)
            && q.min_duration_ms.is_none_or(|m| {
                // The duration key of a job not ended is `u64::MAX`; the
                // filter wants a known duration: a block of such jobs alone
                // may still hold none, which its rows decide.
                s.ranges[3][1] >= m
            })
    }

    /// How many jobs of block `b` match `q`, from its statistics alone
    /// when they decide it (no filter but states and times every job of
    /// the block meets).
    fn block_count(&self, q: &ListQuery, b: usize) -> Option<usize> {
        let s = &self.blocks[b];
        let only_states_and_times = ListQuery {
            started_after: None,
            started_before: None,
            ended_after: None,
            ended_before: None,
            ..q.clone()
        }
        .filters_states_only();
        let within = |[lo, hi]: [u64; 2], after: Option<u64>, before: Option<u64>| {
            (after.is_none() && before.is_none())
                || (lo > 0 && after.is_none_or(|a| lo >= a) && before.is_none_or(|b| hi <= b))
        };
        let whole = only_states_and_times
            && within(s.ranges[1], q.started_after, q.started_before)
            && within(s.ranges[2], q.ended_after, q.ended_before);
        whole.then(|| match &q.states {
            None => s.states.iter().map(|&c| c as usize).sum(),
            // Each state once, however often the query names it.
            Some(states) => JobState::ALL
                .iter()
                .filter(|(_, st)| states.contains(st))
                .map(|(_, st)| s.states[st.index()] as usize)
                .sum(),
        })
    }

    /// How many jobs match `q` (its states and times, its other filters
    /// but the name).
    fn count(&self, q: &ListQuery) -> Result<usize, IndexError> {
        let mut total = 0;
        for b in 0..self.blocks.len() {
            if !self.may_match(q, b) {
                continue;
            }
            total += match self.block_count(q, b) {
                Some(n) => n,
                None => {
                    let rows = self.block(b)?;
                    rows.iter().filter(|f| q.matches(&self.probe(f))).count()
                }
            };
        }
        Ok(total)
    }

    /// The first row after `cursor` in the default order.
    fn seek_default(&self, cursor: &Facts) -> Result<usize, IndexError> {
        let want = (Reverse(cursor.position_key()), cursor.job_id.as_ref());
        partition(self.rows, |row| {
            let f = self.fixed(row)?;
            if f.key != cursor.position_key() {
                return Ok(Reverse(f.key) <= want.0);
            }
            Ok(self.id_of(row)?.1.as_str() <= want.1)
        })
    }

    /// The default order walked from the cursor, blocks skipped by their
    /// statistics; the count from the statistics where they decide it.
    fn walk_default(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        want: Want<'_>,
    ) -> Result<Found, IndexError> {
        let from = cursor.map_or(Ok(0), |c| self.seek_default(c))?;
        let (wanted, mut out) = (want.count, Vec::new());
        for b in from / BLOCK..self.blocks.len() {
            if out.len() >= wanted {
                break;
            }
            if !self.may_match(q, b) {
                continue;
            }
            let rows = self.block(b)?;
            let skip = from.saturating_sub(b * BLOCK);
            for f in rows.iter().skip(skip) {
                if out.len() >= wanted {
                    break;
                }
                if q.matches(&self.probe(f)) {
                    let job = self.summary_of(f)?;
                    if !(want.hidden)(job.job_id()) {
                        out.push(job);
                    }
                }
            }
        }
        Ok((out, self.count(q)?))
    }

    /// The rows of one query (by the order by query hash), walked in the
    /// default order from the cursor.
    fn walk_query(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        want: Want<'_>,
    ) -> Result<Found, IndexError> {
        let hash = q.query_hash.unwrap_or_default();
        let hash_of = |i: usize| -> Result<u64, IndexError> {
            Ok(self.fixed(self.perm(Perm::Query, i)?)?.hash)
        };
        let lo = partition(self.rows, |i| Ok(hash_of(i)? < hash))?;
        let hi = partition(self.rows, |i| Ok(hash_of(i)? <= hash))?;
        let from = cursor.map_or(Ok(0), |c| self.seek_default(c))?;
        // The query's rows in the default order: the first at or past
        // the cursor's row.
        let start = lo + partition(hi - lo, |i| Ok(self.perm(Perm::Query, lo + i)? < from))?;
        let only_hash = ListQuery {
            query_hash: None,
            ..q.clone()
        }
        .filters_nothing();
        let (wanted, mut out, mut total) = (want.count, Vec::new(), 0);
        if only_hash {
            // Every run of the query matches: the count is the range's.
            for i in start..hi {
                if out.len() >= wanted {
                    break;
                }
                let job = self.summary(self.perm(Perm::Query, i)?)?;
                if !(want.hidden)(job.job_id()) {
                    out.push(job);
                }
            }
            return Ok((out, hi - lo));
        }
        for i in lo..hi {
            let f = self.fixed(self.perm(Perm::Query, i)?)?;
            if !q.matches(&self.probe(&f)) {
                continue;
            }
            total += 1;
            if i >= start && out.len() < wanted {
                let job = self.summary_of(&f)?;
                if !(want.hidden)(job.job_id()) {
                    out.push(job);
                }
            }
        }
        Ok((out, total))
    }

    /// The order by duration walked (see [`merge_by_duration`]).
    fn walk_duration(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        want: Want<'_>,
    ) -> Result<Found, IndexError> {
        merge_by_duration(&[self], q, cursor, want)
    }

    /// The duration key of the permutation's `i`th row.
    fn duration_at(&self, i: usize) -> Result<u64, IndexError> {
        Ok(self.fixed(self.perm(Perm::Duration, i)?)?.duration_key())
    }

    /// Any query: every block that may match read whole, its rows with
    /// their names, through the list's own pass, keeping only the page's
    /// jobs between blocks.
    fn pass(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        want: Want<'_>,
    ) -> Result<Found, IndexError> {
        let wanted = want.count;
        let keep = ListQuery {
            limit: Some(wanted).filter(|&w| w != usize::MAX),
            offset: 0,
            ..q.clone()
        };
        let (mut best, mut total) = (Vec::<Arc<JobSummary>>::new(), 0);
        for b in 0..self.blocks.len() {
            if !self.may_match(q, b) {
                continue;
            }
            let rows = self.block(b)?;
            let first = b * BLOCK;
            let (Some(start), Some(last)) = (rows.first(), rows.last()) else {
                continue;
            };
            let from = start.rec;
            let span = (last.rec + u64::from(last.rec_len)).checked_sub(from);
            // Never more than the file holds (a lying row cannot make a
            // read allocate more than the segment's size).
            let span = span.filter(|&s| {
                let end = self.at[4].checked_add(from).and_then(|a| a.checked_add(s));
                end.is_some_and(|end| end <= self.at[5])
            });
            let span = span.ok_or(IndexError::Damaged("records out of order"))?;
            let bytes = self.read(self.at[4] + from, span as usize)?;
            let mut named = Vec::with_capacity(rows.len());
            for (i, f) in rows.iter().enumerate() {
                let lo = (f.rec.checked_sub(from))
                    .ok_or(IndexError::Damaged("records out of order"))?
                    as usize;
                let record = bytes
                    .get(lo..lo + f.rec_len as usize)
                    .ok_or(IndexError::Damaged("records out of order"))?;
                let (job_id, job_name) = Self::names(record)?;
                let mut probe = self.probe(f);
                probe.facts.job_id = job_id;
                probe.facts.job_name = job_name;
                if (want.hidden)(job_id) {
                    // Left out of the page, still counted.
                    total += usize::from(q.matches(&probe));
                    continue;
                }
                named.push(Named {
                    probe,
                    row: first + i,
                });
            }
            let before = best.len();
            let candidates = best
                .drain(..)
                .map(Candidate::Read)
                .chain(named.into_iter().map(Candidate::Row));
            let (mut page, matched) = keep.pick(candidates, cursor);
            // A pick of no rows (a segment that only counts) keeps none.
            page.truncate(wanted);
            // The jobs kept from earlier blocks were counted there.
            total += matched - before.min(matched);
            for c in page {
                best.push(match c {
                    Candidate::Read(s) => s,
                    Candidate::Row(r) => self.summary(r.row)?,
                });
            }
        }
        Ok((best, total))
    }
}

/// The first index in `0..n` where `before` is false (`before` true on a
/// prefix), by binary search; the first error `before` meets ends it.
fn partition(
    n: usize,
    mut before: impl FnMut(usize) -> Result<bool, IndexError>,
) -> Result<usize, IndexError> {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid)? {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Segments answering together: each gives its candidates, and the list's
/// own pass orders and pages their union.
#[derive(Debug, Default)]
pub struct Segments {
    segments: Vec<Segment>,
    /// Where each was opened from.
    paths: Vec<std::path::PathBuf>,
}

impl Segments {
    /// The segments at `paths`, opened.
    pub fn open(paths: &[impl AsRef<Path>]) -> Result<Self, IndexError> {
        let segments = paths
            .iter()
            .map(|p| Segment::open(p.as_ref()))
            .collect::<Result<_, _>>()?;
        let paths = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
        Ok(Self { segments, paths })
    }

    /// The files they were opened from.
    pub fn paths(&self) -> &[std::path::PathBuf] {
        &self.paths
    }

    /// The job of row `row` of segment `segment` (as [`SortedOut::gone`]
    /// names them).
    pub fn summary_at(&self, segment: usize, row: u32) -> Result<Arc<JobSummary>, IndexError> {
        let s =
            (self.segments.get(segment)).ok_or(IndexError::Damaged("a segment past the end"))?;
        s.summary(row as usize)
    }

    /// The segments, in the order they were opened.
    fn iter(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter()
    }

    /// How many jobs they hold.
    pub fn len(&self) -> usize {
        self.segments.iter().map(Segment::len).sum()
    }

    /// Whether they hold none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes they keep in memory.
    pub fn resident_bytes(&self) -> usize {
        self.segments.iter().map(Segment::resident_bytes).sum()
    }

    /// The job `id`.
    pub fn get(&self, id: &str) -> Result<Option<Arc<JobSummary>>, IndexError> {
        for s in &self.segments {
            if let Some(found) = s.get(id)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Each segment's candidates for `q`, and the count. In the default
    /// order, segments newest first: once the page is full of jobs newer
    /// than everything a segment holds, that segment only counts (from
    /// its statistics, mostly).
    fn gather(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        want: Want<'_>,
    ) -> Result<Found, IndexError> {
        let (wanted, mut all, mut total) = (want.count, Vec::<Arc<JobSummary>>::new(), 0);
        let newest_first = q.default_order() && q.before.is_none();
        let counting = Want { count: 0, ..want };
        let mut order: Vec<&Segment> = self.segments.iter().collect();
        if newest_first {
            order.sort_by_key(|s| Reverse(s.newest()));
        }
        for s in order {
            let full = newest_first
                && all.len() >= wanted
                && s.newest().is_some_and(|newest| {
                    let mut keys: Vec<u64> = all.iter().map(|j| j.position_key()).collect();
                    let (_, &mut last, _) =
                        keys.select_nth_unstable_by(wanted - 1, |a, b| b.cmp(a));
                    newest < last
                });
            let (jobs, matched) = s.candidates_of(q, cursor, if full { counting } else { want })?;
            all.extend(jobs);
            total += matched;
        }
        Ok((all, total))
    }

    /// `q`'s page and how many jobs match it.
    pub fn page(&self, q: &ListQuery, cursor: Option<&Facts>) -> Result<Found, IndexError> {
        self.page_hiding(q, cursor, &|_| false)
    }

    /// [`Segments::page`] without the jobs `hidden` names, which are still
    /// counted (the caller knows them, and subtracts those that match).
    pub fn page_hiding(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        hidden: &dyn Fn(&str) -> bool,
    ) -> Result<Found, IndexError> {
        let want = Want {
            count: q.limit.map_or(usize::MAX, |l| q.offset.saturating_add(l)),
            hidden,
        };
        let (all, total) = if q.sort == Sort::Duration
            && q.before.is_none()
            && q.name.is_none()
            && q.filters_states_only()
        {
            // Merged lazily: the page's jobs alone are read whole.
            let segments: Vec<&Segment> = self.segments.iter().collect();
            merge_by_duration(&segments, q, cursor, want)?
        } else {
            self.gather(q, cursor, want)?
        };
        let (page, _) = q.pick(all.into_iter().map(Candidate::Read), cursor);
        let page = page.into_iter().filter_map(|c| match c {
            Candidate::Read(s) => Some(s),
            Candidate::Row(_) => None,
        });
        Ok((page.collect(), total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SummaryParts;
    use crate::query::{Order, Page};
    use crate::tests::{below, page_ids, rows_for};

    const NAMES: [&str; 4] = ["Nightly ETL", "adhoc", "nightly report", "Ünïcode"];
    const SCHEDULERS: [Option<&str>; 3] = [None, Some("east"), Some("west")];

    /// Jobs whose facts collide often: few times, durations and queries,
    /// jobs not started or not ended, queue times unknown.
    pub(super) fn jobs(n: usize, seed: u64) -> Vec<Arc<JobSummary>> {
        let mut r = below(seed);
        (0..n)
            .map(|i| {
                // Unique, in an order unrelated to the times.
                let id = format!("job-{:03}{i:05}", r(1_000));
                job(&mut r, &id)
            })
            .collect()
    }

    /// A job `id` of random facts.
    pub(super) fn job(r: &mut impl FnMut(u64) -> u64, id: &str) -> Arc<JobSummary> {
        let start = [0, 1_000 + r(200) * 10][usize::from(r(8) > 0)];
        let end = match r(6) {
            0 => 0,
            _ if start == 0 => 0,
            // Most durations shared by many jobs, some by none.
            1 => start + r(10_000),
            _ => start + r(5) * 7,
        };
        let queued = [0, start.saturating_sub(r(3))][usize::from(r(4) > 0)];
        let state = JobState::ALL[r(6) as usize].1;
        Arc::new(JobSummary::restore(SummaryParts {
            facts: FactsRef {
                job_id: id,
                job_name: NAMES[r(4) as usize],
                state,
                queued_time: queued,
                start_time: start,
                end_time: end,
                query_hash: r(5),
            },
            job_status: "",
            status: state.status_word(),
            stages: [2, 1],
            percent_complete: 50,
            dropped_records: r(2),
            // Plain, compressed and odd names; stamps with and without a
            // modification time.
            file_name: &match r(4) {
                0 => format!("{id}.eventlog.zst"),
                1 => format!("odd-{id}.eventlog"),
                _ => format!("{id}.eventlog"),
            },
            len: 10 + r(1_000),
            modified: (r(3) > 0)
                .then(|| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(r(1 << 50))),
            ranges: None,
            scheduler_id: SCHEDULERS[r(3) as usize],
            usage: None,
            tags: None,
        }))
    }

    /// `got` is the page and total `want` has, row for row.
    pub(super) fn assert_same(got: Found, want: &Page, what: &str) {
        let (rows, total) = got;
        let got = Page {
            rows: rows_for(&rows),
            total,
        };
        assert_eq!(page_ids(&got), page_ids(want), "{what}");
        assert_eq!(got.total, want.total, "{what}");
        for (g, w) in got.rows.iter().zip(&want.rows) {
            assert_eq!(g.entry, w.entry, "{what}");
        }
    }

    /// `jobs` written as `parts` segments (split at random) and opened.
    /// With `seed`, at random; without, in runs of the default order (as
    /// a scheduler publishes them: each segment newer than the last).
    pub(super) fn segments(
        dir: &Path,
        jobs: &[Arc<JobSummary>],
        parts: usize,
        seed: Option<u64>,
    ) -> Segments {
        let mut split: Vec<Vec<&JobSummary>> = vec![Vec::new(); parts];
        match seed {
            Some(seed) => {
                let mut r = below(seed);
                for j in jobs {
                    split[r(parts as u64) as usize].push(j);
                }
            }
            None => {
                let mut order: Vec<&JobSummary> = jobs.iter().map(|j| &**j).collect();
                order.sort_by_key(|j| Reverse(j.position_key()));
                for (i, j) in order.into_iter().enumerate() {
                    split[i * parts / jobs.len()].push(j);
                }
            }
        }
        let tag = seed.map_or("t".to_string(), |s| s.to_string());
        let paths: Vec<_> = split
            .iter()
            .enumerate()
            .map(|(i, part)| {
                let path = dir.join(format!("s{tag}-{i}"));
                Segment::write(&path, part).unwrap();
                path
            })
            .collect();
        Segments::open(&paths).unwrap()
    }

    pub(crate) fn random_query(
        r: &mut impl FnMut(u64) -> u64,
        all: &[Arc<JobSummary>],
    ) -> (ListQuery, Option<Facts>) {
        let time = |r: &mut dyn FnMut(u64) -> u64| Some(1_000 + r(220) * 10);
        let mut q = ListQuery {
            limit: [None, Some(1), Some(7), Some(100)][r(4) as usize],
            offset: [0, 0, 3][r(3) as usize],
            ..ListQuery::default()
        };
        let filters = r(8);
        if filters & 1 == 1 {
            q.states = Some(
                (0..1 + r(2))
                    .map(|_| JobState::ALL[r(6) as usize].1)
                    .collect(),
            );
        }
        if filters & 2 == 2 {
            match r(4) {
                0 => q.started_after = time(r),
                1 => q.started_before = time(r),
                2 => q.ended_after = time(r),
                _ => (q.started_after, q.started_before) = (time(r), time(r)),
            }
        }
        if filters & 4 == 4 {
            match r(4) {
                0 => q.name = Some("nightly".into()),
                1 => q.min_duration_ms = Some(r(30)),
                2 => q.scheduler_ids = Some(vec!["east".into()]),
                _ => q.query_hash = Some(r(6)),
            }
        }
        if r(3) == 0 {
            q.query_hash = Some(r(6));
        }
        q.sort = [
            Sort::QueuedTime,
            Sort::QueuedTime,
            Sort::Duration,
            Sort::Duration,
            Sort::StartTime,
            Sort::EndTime,
            Sort::Name,
        ][r(7) as usize];
        q.order = [None, None, Some(Order::Asc), Some(Order::Desc)][r(4) as usize];
        let cursor = match r(4) {
            0 | 1 => None,
            _ => {
                let at = Facts::of(&*all[r(all.len() as u64) as usize]);
                if r(4) == 0 {
                    q.before = Some(at.job_id.to_string());
                } else {
                    q.after = Some(at.job_id.to_string());
                }
                Some(at)
            }
        };
        (q, cursor)
    }

    /// Every page and total the segments give is the one the list's pass
    /// over every job in memory gives (the oracle: `ListQuery::select`,
    /// the catalog's own pass), for 500 queries of every filter, sort,
    /// order, cursor and page size, over jobs split across three segments at random and four in
    /// runs of the default order.
    #[test]
    fn segments_answer_every_query_as_a_pass_over_every_job() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(3_000, 7);
        let random = segments(dir.path(), &all, 3, Some(11));
        let by_time = segments(dir.path(), &all, 4, None);
        assert_eq!((random.len(), by_time.len()), (all.len(), all.len()));
        let mut r = below(5);
        let mut walked = [0usize; 4];
        for i in 0..500 {
            let (mut q, cursor) = random_query(&mut r, &all);
            if i >= 350 {
                // The last 150: the walks by duration, from cursors.
                q = ListQuery {
                    sort: Sort::Duration,
                    states: q.states.clone(),
                    before: None,
                    after: q.cursor_id().map(str::to_string),
                    ..ListQuery::default()
                };
                q.limit = Some(1 + i % 20);
            }
            let want = q.select(rows_for(&all), cursor.as_ref());
            for set in [&random, &by_time] {
                let got = set.page(&q, cursor.as_ref()).unwrap();
                assert_same(got, &want, &format!("query {i}: {q:?} after {cursor:?}"));
            }
            let walks = q.before.is_none() && q.name.is_none();
            walked[match () {
                _ if walks && q.query_hash.is_some() && q.default_order() => 0,
                _ if walks && q.query_hash.is_none() && q.default_order() => 1,
                _ if walks && q.sort == Sort::Duration && q.filters_states_only() => 2,
                _ => 3,
            }] += 1;
        }
        // Each way of answering was taken many times.
        assert!(walked.iter().all(|&n| n >= 20), "{walked:?}");
        let mut r = below(9);
        for _ in 0..200 {
            let id = format!("job-{:03}{:05}", r(1_000), r(4_000));
            let want = all.iter().find(|j| j.job_id() == id).map(|j| j.entry());
            let got = random.get(&id).unwrap().map(|j| j.entry());
            assert_eq!(got, want, "{id}");
        }
        for j in all.iter().step_by(97) {
            assert_eq!(by_time.get(j.job_id()).unwrap().unwrap().entry(), j.entry());
        }
    }

    fn one(dir: &Path) -> (std::path::PathBuf, Vec<Arc<JobSummary>>) {
        let all = jobs(500, 3);
        let path = dir.join("seg");
        let refs: Vec<&JobSummary> = all.iter().map(|j| &**j).collect();
        Segment::write(&path, &refs).unwrap();
        (path, all)
    }

    fn patch(path: &Path, at: u64, bytes: &[u8]) {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.write_all_at(bytes, at).unwrap();
    }

    fn every_way(s: &Segment) -> Vec<Result<Found, IndexError>> {
        let sorts = [
            ListQuery::default(),
            ListQuery {
                sort: Sort::Duration,
                ..ListQuery::default()
            },
            ListQuery {
                query_hash: Some(1),
                ..ListQuery::default()
            },
            ListQuery {
                sort: Sort::Name,
                ..ListQuery::default()
            },
        ];
        sorts.iter().map(|q| s.candidates(q, None)).collect()
    }

    /// A foreign, damaged, truncated or lying segment is an error of its
    /// open or of the read that meets the damage, never a panic nor
    /// another job's answer.
    #[test]
    fn a_damaged_or_lying_segment_is_an_error_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = one(dir.path());
        let good = std::fs::read(&path).unwrap();
        let reset = || std::fs::write(&path, &good).unwrap();
        // Foreign, and a header flipped.
        patch(&path, 0, b"BJHSEG99");
        assert!(matches!(Segment::open(&path), Err(IndexError::Foreign)));
        reset();
        patch(&path, 20, &[good[20] ^ 1]);
        let err = Segment::open(&path).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        reset();
        // Blocks of another size (a test build's against a release
        // build's), the header's checksum made to agree: foreign.
        let len = u64::from_le_bytes(good[8..16].try_into().unwrap()) as usize;
        let mut other = good.clone();
        other[16..24].copy_from_slice(&4096u64.to_le_bytes());
        let sum = checksum(&other[16..16 + len]);
        other[16 + len..24 + len].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(&path, &other).unwrap();
        assert!(matches!(Segment::open(&path), Err(IndexError::Foreign)));
        reset();
        // A header length past the end.
        patch(&path, 8, &u64::MAX.to_le_bytes());
        assert!(matches!(Segment::open(&path), Err(IndexError::Damaged(_))));
        reset();
        let s = Segment::open(&path).unwrap();
        assert!(every_way(&s).iter().all(Result::is_ok));
        // A row flipped: its block's checksum.
        patch(&path, s.at[0] + 8, &[good[s.at[0] as usize + 8] ^ 1]);
        let err = s
            .candidates(&ListQuery::default(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("checksum"), "{err}");
        // The same with the checksum made to agree: the record disagrees.
        let mut lying = Segment::open(&path).unwrap();
        let block = lying.read(lying.at[0], BLOCK * ROW).unwrap();
        lying.blocks[0].sum = checksum(&block);
        let err = lying
            .candidates(&ListQuery::default(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("disagrees"), "{err}");
        reset();
        // Orders naming rows past the end.
        for which in [Perm::Duration, Perm::Query, Perm::Id] {
            let at = s.at[which as usize];
            for i in 0..s.len() as u64 {
                patch(&path, at + i * 4, &u32::MAX.to_le_bytes());
            }
        }
        let ways = every_way(&s);
        assert!(ways[1].is_err() && ways[2].is_err(), "{ways:?}");
        assert!(s.get("job-0001").is_err());
        reset();
        // Truncated under an open segment (a `pread` past the end, not a
        // signal): every way of reading is an error.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(s.at[0] + 10)
            .unwrap();
        assert!(every_way(&s).iter().all(Result::is_err));
        assert!(matches!(Segment::open(&path), Err(IndexError::Damaged(_))));
    }

    /// A segment keeps in memory its header only: the statistics of its
    /// blocks, not its jobs (the bound the module states).
    #[test]
    fn a_segment_holds_its_header_not_its_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(20_000, 13);
        let refs: Vec<&JobSummary> = all.iter().map(|j| &**j).collect();
        let path = dir.path().join("seg");
        Segment::write(&path, &refs).unwrap();
        let s = Segment::open(&path).unwrap();
        let file = std::fs::metadata(&path).unwrap().len() as usize;
        let blocks = all.len().div_ceil(BLOCK);
        assert_eq!(s.blocks.len(), blocks);
        assert!(
            s.resident_bytes() < 512 + blocks * 200,
            "{}",
            s.resident_bytes()
        );
        assert!(
            s.resident_bytes() * 20 < file,
            "{} of {file}",
            s.resident_bytes()
        );
    }
}
