//! Segments under a head of recent changes: the jobs added or replaced
//! since the segments were written live in memory, and the segments' jobs
//! removed or replaced since are hidden by id (with their segment
//! summaries, so a query counts them out without reading the disk).
//! Memory grows with the changes, not with the jobs; writing the head out
//! as a segment (and merging segments) is what bounds it.

use super::{Candidate, Found, STATES, Segment, Segments, SortedOut, Standing};
use crate::location::Stamp;
use crate::published::Covered;
use crate::query::{Facts, JobFacts, ListQuery};
use crate::snapshot::IndexError;
use crate::summary::JobSummary;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The default order's key: newest queued first, then id.
fn order_key(j: &JobSummary) -> (Reverse<u64>, &str) {
    (Reverse(j.position_key()), j.job_id())
}

/// Whether `a` comes before `b` in a merge of streams ordered by `key`:
/// an error first, so that a caller hears of it as soon as it is met.
fn errors_first<'a, K: Ord>(
    a: &'a Result<Arc<JobSummary>, IndexError>,
    b: &'a Result<Arc<JobSummary>, IndexError>,
    key: impl Fn(&'a JobSummary) -> K,
) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => key(a) < key(b),
        (a, _) => a.is_err(),
    }
}

/// [`errors_first`] in the default order.
fn sooner(
    a: &Result<Arc<JobSummary>, IndexError>,
    b: &Result<Arc<JobSummary>, IndexError>,
) -> bool {
    errors_first(a, b, order_key)
}

/// [`errors_first`] by id.
fn lower_id(
    a: &Result<Arc<JobSummary>, IndexError>,
    b: &Result<Arc<JobSummary>, IndexError>,
) -> bool {
    errors_first(a, b, JobSummary::job_id)
}

/// [`errors_first`] by query hash.
fn lower_hash(
    a: &Result<Arc<JobSummary>, IndexError>,
    b: &Result<Arc<JobSummary>, IndexError>,
) -> bool {
    errors_first(a, b, |j| j.query_hash())
}

/// Segments and the changes made since they were written.
#[derive(Debug, Default)]
pub struct Layered {
    segments: Segments,
    /// Jobs added or replaced since, by id.
    head: HashMap<Arc<str>, Arc<JobSummary>>,
    /// The segments' jobs removed or replaced since, as the segments
    /// hold them, by id.
    hidden: HashMap<Arc<str>, Arc<JobSummary>>,
}

impl Layered {
    /// `segments` with no change yet.
    pub fn new(segments: Segments) -> Self {
        Self {
            segments,
            ..Self::default()
        }
    }

    /// `segments` with these of their jobs hidden (as a head saved them).
    pub fn with_hidden(segments: Segments, hidden: Vec<JobSummary>) -> Self {
        let hidden = hidden
            .into_iter()
            .map(|j| (Arc::from(j.job_id()), Arc::new(j)))
            .collect();
        Self {
            segments,
            hidden,
            ..Self::default()
        }
    }

    /// The segments' jobs hidden, as the segments hold them.
    pub fn hidden_jobs(&self) -> impl Iterator<Item = &Arc<JobSummary>> {
        self.hidden.values()
    }

    /// How many jobs there are.
    pub fn len(&self) -> usize {
        self.segments.len() - self.hidden.len() + self.head.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many of the segments' jobs are hidden.
    pub fn hidden_len(&self) -> usize {
        self.hidden.len()
    }

    /// How many changes the head holds (jobs added or replaced, and the
    /// segments' jobs hidden).
    pub fn changes(&self) -> usize {
        self.head.len() + self.hidden.len()
    }

    /// Hides the segments' job `id`, when they hold one not hidden yet.
    fn hide(&mut self, id: &str) -> Result<(), IndexError> {
        if !self.hidden.contains_key(id)
            && let Some(old) = self.segments.get(id)?
        {
            self.hidden.insert(Arc::from(id), old);
        }
        Ok(())
    }

    /// Adds `job`, or replaces the job of its id.
    pub fn insert(&mut self, job: JobSummary) -> Result<(), IndexError> {
        self.hide(job.job_id())?;
        let id: Arc<str> = Arc::from(job.job_id());
        self.head.insert(id, Arc::new(job));
        Ok(())
    }

    /// Removes the job `id`; whether there was one.
    pub fn remove(&mut self, id: &str) -> Result<bool, IndexError> {
        let in_head = self.head.remove(id).is_some();
        let before = self.hidden.len();
        self.hide(id)?;
        Ok(in_head || self.hidden.len() > before)
    }

    /// The job `id`.
    pub fn get(&self, id: &str) -> Result<Option<Arc<JobSummary>>, IndexError> {
        if let Some(job) = self.head.get(id) {
            return Ok(Some(job.clone()));
        }
        if self.hidden.contains_key(id) {
            return Ok(None);
        }
        self.segments.get(id)
    }

    /// The same layers, the segments opened again: a copy to read while
    /// this one changes.
    pub fn reopen(&self) -> Result<Self, IndexError> {
        Ok(Self {
            segments: Segments::open(self.segments.paths())?,
            head: self.head.clone(),
            hidden: self.hidden.clone(),
        })
    }

    /// How many jobs each segment file holds (hidden ones included), in
    /// the order of [`Layered::paths`].
    pub fn sizes(&self) -> Vec<usize> {
        self.segments.iter().map(Segment::len).collect()
    }

    /// The segments (by index) holding a hidden job of these ids: those
    /// a move writing their jobs anew must rewrite (a lookup by id in
    /// each segment, for the hidden ones only).
    pub fn holders<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<HashSet<usize>, IndexError> {
        let mut out = HashSet::new();
        for id in ids {
            if !self.hidden.contains_key(id) {
                continue;
            }
            for (i, s) in self.segments.iter().enumerate() {
                if s.get(id)?.is_some() {
                    out.insert(i);
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Takes out the segments that fail [`Segment::check`], keeping the
    /// others with the hidden jobs they hold (a hidden job of a segment
    /// taken out is held nowhere now); the files taken out, for the
    /// caller to set aside.
    pub fn without_damaged(&mut self) -> Result<Vec<PathBuf>, IndexError> {
        let bad: Vec<usize> = (self.segments.iter().enumerate())
            .filter(|(_, s)| s.check().is_err())
            .map(|(i, _)| i)
            .collect();
        if bad.is_empty() {
            return Ok(Vec::new());
        }
        let paths = self.segments.paths();
        let (out, keep): (Vec<_>, Vec<_>) =
            (paths.iter().cloned().enumerate()).partition(|(i, _)| bad.contains(i));
        let keep: Vec<PathBuf> = keep.into_iter().map(|(_, p)| p).collect();
        let segments = Segments::open(&keep)?;
        self.hidden
            .retain(|id, _| segments.get(id).ok().flatten().is_some());
        self.segments = segments;
        Ok(out.into_iter().map(|(_, p)| p).collect())
    }

    /// The files of the segments.
    pub fn paths(&self) -> &[PathBuf] {
        self.segments.paths()
    }

    /// Whether the job `id` of the segments is hidden.
    pub fn hides(&self, id: &str) -> bool {
        self.hidden.contains_key(id)
    }

    /// The ids the head hides.
    pub fn hidden_ids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.hidden.keys()
    }

    /// The job whose log is `name`, as the layers hold it now.
    pub fn by_file(&self, name: &str) -> Result<Option<Arc<JobSummary>>, IndexError> {
        if let Some(j) = self.head.values().find(|j| j.file_name() == name) {
            return Ok(Some(j.clone()));
        }
        let found = self.segments.by_file(name)?;
        Ok(found.filter(|j| !self.hidden.contains_key(j.job_id())))
    }

    /// Which of `names` the layers hold a log of now (see
    /// [`Segments::holding`]).
    pub fn holding(&self, names: &[&str]) -> Result<Vec<bool>, IndexError> {
        let mut out = self.segments.holding(names)?;
        let hidden: HashSet<std::borrow::Cow<'_, str>> =
            self.hidden.values().map(|j| j.file_name()).collect();
        let head: HashSet<std::borrow::Cow<'_, str>> =
            self.head.values().map(|j| j.file_name()).collect();
        for (held, name) in out.iter_mut().zip(names) {
            if head.contains(*name) {
                *held = true;
            } else if hidden.contains(*name) {
                *held = false;
            }
        }
        Ok(out)
    }

    /// The job of row `row` of segment `segment`, as [`SortedOut::gone`]
    /// names it.
    pub fn summary_at(&self, segment: usize, row: u32) -> Result<Arc<JobSummary>, IndexError> {
        self.segments.summary_at(segment, row)
    }

    /// [`Layered::page`] without the jobs of the ids in `skip` (jobs
    /// another source lists), neither on the page nor in the count.
    pub fn page_skipping(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        skip: &std::collections::HashSet<String>,
    ) -> Result<Found, IndexError> {
        if skip.is_empty() {
            return self.page(q, cursor);
        }
        let mut skipped = Vec::new();
        for id in skip {
            if let Some(j) = self.get(id)? {
                skipped.push(j);
            }
        }
        let (page, total) = self.page(
            &ListQuery {
                offset: 0,
                limit: q
                    .limit
                    .map(|l| q.offset.saturating_add(l).saturating_add(skipped.len())),
                ..q.clone()
            },
            cursor,
        )?;
        let matching = skipped.iter().filter(|j| q.matches(&***j)).count();
        let kept = page.into_iter().filter(|j| !skip.contains(j.job_id()));
        let (page, _) = q.pick(kept.map(Candidate::Read), cursor);
        let page = page.into_iter().filter_map(|c| match c {
            Candidate::Read(s) => Some(s),
            Candidate::Row(_) => None,
        });
        Ok((page.collect(), total - matching.min(total)))
    }

    /// Every job as it is now, in the default order, written as new
    /// segments of at most `per_segment` jobs each (`dir/{prefix}-{i}`,
    /// newest first), and opened with no change: the head merged into the
    /// segments, read block by block (a segment's jobs at most in memory).
    /// The old segments' files are the caller's to remove.
    pub fn rewrite(
        &self,
        dir: &Path,
        prefix: &str,
        per_segment: usize,
    ) -> Result<(Self, Vec<PathBuf>), IndexError> {
        self.rewrite_with(&[], dir, prefix, per_segment)
    }

    /// [`Layered::rewrite`] with `extra` jobs besides (as the head's: the
    /// caller's, whose ids the head hides already when the segments hold
    /// them).
    pub fn rewrite_with(
        &self,
        extra: &[Arc<JobSummary>],
        dir: &Path,
        prefix: &str,
        per_segment: usize,
    ) -> Result<(Self, Vec<PathBuf>), IndexError> {
        let every: Vec<usize> = (0..self.segments.paths().len()).collect();
        self.rewrite_some(extra, &every, dir, prefix, per_segment, &|| false)
    }

    /// The segments `merge` (by index) merged with the head's jobs and
    /// `extra` into new segments (as [`Layered::rewrite_with`]), the
    /// others kept as they are with the jobs they hide: a move that
    /// rewrites part of what is on disk. Each job must be written once:
    /// a segment holding a job of the head or of `extra` (hidden by it)
    /// must be among `merge` (see [`Layered::holders`]). `stop` is asked
    /// every 4,096 jobs written: when it says so, the rewrite ends with an
    /// error of kind `Interrupted` (the files written so far are the
    /// caller's to remove, as after any error: a manifest saved names
    /// none of them).
    pub fn rewrite_some(
        &self,
        extra: &[Arc<JobSummary>],
        merge: &[usize],
        dir: &Path,
        prefix: &str,
        per_segment: usize,
        stop: &dyn Fn() -> bool,
    ) -> Result<(Self, Vec<PathBuf>), IndexError> {
        use itertools::Itertools;
        let mut head: Vec<Arc<JobSummary>> = self.head.values().chain(extra).cloned().collect();
        head.sort_unstable_by(|a, b| order_key(a).cmp(&order_key(b)));
        let merged: HashSet<usize> = merge.iter().copied().collect();
        // The hidden jobs the merged segments held: written no more, nor
        // hidden after.
        let dropped: std::cell::RefCell<HashSet<Arc<str>>> = Default::default();
        let shown = |j: &Result<Arc<JobSummary>, IndexError>| {
            let Ok(j) = j else { return true };
            match self.hidden.get_key_value(j.job_id()) {
                Some((id, _)) => {
                    dropped.borrow_mut().insert(id.clone());
                    false
                }
                None => true,
            }
        };
        let below = (self.segments.iter().enumerate())
            .filter(|(i, _)| merged.contains(i))
            .map(|(_, s)| s.jobs().filter(shown));
        let all = (head.into_iter().map(Ok)).merge_by(itertools::kmerge_by(below, sooner), sooner);
        let (mut paths, mut chunk) = (Vec::new(), Vec::new());
        let mut flush = |chunk: &mut Vec<Arc<JobSummary>>| -> Result<(), IndexError> {
            let path = dir.join(format!("{prefix}-{}", paths.len()));
            let refs: Vec<&JobSummary> = chunk.iter().map(|j| &**j).collect();
            Segment::write(&path, &refs)?;
            paths.push(path);
            chunk.clear();
            Ok(())
        };
        for (n, job) in all.enumerate() {
            if n % 4096 == 0 && stop() {
                let stopping = std::io::ErrorKind::Interrupted;
                return Err(std::io::Error::new(stopping, "the server is stopping").into());
            }
            chunk.push(job?);
            if chunk.len() >= per_segment.max(1) {
                flush(&mut chunk)?;
            }
        }
        if !chunk.is_empty() {
            flush(&mut chunk)?;
        }
        let kept: Vec<&PathBuf> = (self.segments.paths().iter().enumerate())
            .filter(|(i, _)| !merged.contains(i))
            .map(|(_, p)| p)
            .collect();
        let serving: Vec<&PathBuf> = kept.into_iter().chain(&paths).collect();
        let dropped = dropped.into_inner();
        let hidden = (self.hidden.iter())
            .filter(|(id, _)| !dropped.contains(*id))
            .map(|(id, j)| (id.clone(), j.clone()))
            .collect();
        let rewritten = Self {
            segments: Segments::open(&serving)?,
            head: HashMap::new(),
            hidden,
        };
        Ok((rewritten, paths))
    }

    /// How many jobs are in each state (by [`bjh_format::JobState::index`]):
    /// the segments' (from their statistics), less the hidden, with the
    /// head's. Reads nothing.
    pub fn counts(&self) -> [usize; STATES] {
        let mut out = [0; STATES];
        for s in self.segments.iter() {
            for (n, c) in out.iter_mut().zip(s.counts()) {
                *n += c;
            }
        }
        for j in self.hidden.values() {
            out[j.state().index()] -= 1;
        }
        for j in self.head.values() {
            out[j.state().index()] += 1;
        }
        out
    }

    /// [`Layered::counts`] per scheduler, by id (the jobs whose logs name
    /// none under `None`), in the order of the ids, `None` last; a
    /// scheduler with no job left is left out.
    pub fn counts_by_scheduler(&self) -> Vec<(Option<Arc<str>>, [usize; STATES])> {
        let mut by: BTreeMap<(bool, Option<Arc<str>>), [usize; STATES]> = BTreeMap::new();
        for s in self.segments.iter() {
            for (id, counts) in s.counts_by_scheduler() {
                let mine = by.entry((id.is_none(), id)).or_default();
                for (n, c) in mine.iter_mut().zip(counts) {
                    *n += c;
                }
            }
        }
        let key = |j: &JobSummary| {
            let id: Option<Arc<str>> = j.scheduler_id().map(Arc::from);
            (id.is_none(), id)
        };
        for j in self.hidden.values() {
            if let Some(counts) = by.get_mut(&key(j)) {
                counts[j.state().index()] -= 1;
            }
        }
        for j in self.head.values() {
            by.entry(key(j)).or_default()[j.state().index()] += 1;
        }
        by.into_iter()
            .filter(|(_, counts)| counts.iter().any(|&n| n > 0))
            .map(|((_, id), counts)| (id, counts))
            .collect()
    }

    /// Every job: the head's, then the segments' not hidden, read block
    /// by block.
    pub fn jobs(&self) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        self.jobs_in(|_| true)
    }

    /// Every job in the default order (newest queued first): the head's
    /// and each segment's (not hidden), merged as they are read, one
    /// block of each segment at a time in memory. A block that cannot
    /// be read is an error in its place, and the walk goes on after it.
    pub fn jobs_in_order(&self) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        let mut head: Vec<Arc<JobSummary>> = self.head.values().cloned().collect();
        head.sort_unstable_by(|a, b| order_key(a).cmp(&order_key(b)));
        let shown = |j: &Result<Arc<JobSummary>, IndexError>| {
            j.as_ref()
                .map_or(true, |j| !self.hidden.contains_key(j.job_id()))
        };
        let below = self.segments.iter().map(move |s| s.jobs().filter(shown));
        use itertools::Itertools;
        let below = itertools::kmerge_by(below, sooner);
        head.into_iter().map(Ok).merge_by(below, sooner)
    }

    /// The jobs whose query hash is in `hashes`, by query hash (lowest
    /// first; one query's runs in no promised order): the head's and
    /// each segment's (not hidden), merged as they are read, one block of
    /// each segment at a time in memory. A read that fails is an error in
    /// its place, and the walk goes on after it.
    pub fn jobs_by_query(
        &self,
        hashes: RangeInclusive<u64>,
    ) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        let mut head: Vec<Arc<JobSummary>> = (self.head.values())
            .filter(|j| hashes.contains(&j.query_hash()))
            .cloned()
            .collect();
        head.sort_unstable_by_key(|j| j.query_hash());
        let shown = |j: &Result<Arc<JobSummary>, IndexError>| {
            j.as_ref()
                .map_or(true, |j| !self.hidden.contains_key(j.job_id()))
        };
        let below =
            (self.segments.iter()).map(move |s| s.jobs_by_query(hashes.clone()).filter(shown));
        use itertools::Itertools;
        let below = itertools::kmerge_by(below, lower_hash);
        head.into_iter().map(Ok).merge_by(below, lower_hash)
    }

    /// Every job by id (bytewise): the head's and each segment's (not
    /// hidden), merged as they are read, as [`Layered::jobs_by_query`].
    pub fn jobs_by_id(&self) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        let mut head: Vec<Arc<JobSummary>> = self.head.values().cloned().collect();
        head.sort_unstable_by(|a, b| a.job_id().cmp(b.job_id()));
        let shown = |j: &Result<Arc<JobSummary>, IndexError>| {
            j.as_ref()
                .map_or(true, |j| !self.hidden.contains_key(j.job_id()))
        };
        let below = (self.segments.iter()).map(move |s| s.jobs_by_id().filter(shown));
        use itertools::Itertools;
        let below = itertools::kmerge_by(below, lower_id);
        head.into_iter().map(Ok).merge_by(below, lower_id)
    }

    /// The jobs that ran at some time in `[from, to)` (started before
    /// `to`, ended, or started, at or after `from`) and others of the
    /// same blocks: the head's, then the segments' blocks whose
    /// statistics allow one, not hidden. The caller filters each job.
    pub fn ran_between(
        &self,
        from: u64,
        to: u64,
    ) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        // Ranges: position key, start, end, duration.
        self.jobs_in(move |r| r[1][0] < to && r[2][1].max(r[1][1]) >= from)
    }

    fn jobs_in(
        &self,
        keep: impl Fn(&[[u64; 2]; 4]) -> bool + Copy + 'static,
    ) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        let below = self.segments.iter().flat_map(move |s| {
            s.jobs_in(keep).filter(|j| {
                j.as_ref()
                    .map_or(true, |j| !self.hidden.contains_key(j.job_id()))
            })
        });
        self.head.values().cloned().map(Ok).chain(below)
    }

    /// [`Segments::sort_out`] over the jobs as they are now: a log the
    /// head holds stands by the head's stamp; a hidden job's log is not
    /// the segments' to hold (listed, it is new unless the head holds
    /// it; unlisted, it is not gone again); the head's logs the listing
    /// covered and did not name are gone too (segment index
    /// `usize::MAX`, row 0).
    pub fn sort_out(
        &self,
        listing: &[(String, Stamp)],
        whole_seconds: bool,
        covered: &Covered,
    ) -> Result<SortedOut, IndexError> {
        let mut out = self.segments.sort_out(listing, whole_seconds, covered)?;
        let head: HashMap<std::borrow::Cow<'_, str>, &Arc<JobSummary>> =
            self.head.values().map(|j| (j.file_name(), j)).collect();
        let hidden: HashSet<std::borrow::Cow<'_, str>> =
            self.hidden.values().map(|j| j.file_name()).collect();
        let mut listed_head = HashSet::new();
        for ((name, stamp), standing) in listing.iter().zip(&mut out.standing) {
            if let Some(j) = head.get(name.as_str()) {
                listed_head.insert(name.as_str());
                *standing = if j.stamp().same(*stamp, whole_seconds) {
                    Standing::Unchanged
                } else {
                    Standing::Changed
                };
            } else if hidden.contains(name.as_str()) {
                *standing = Standing::New;
            }
        }
        out.gone.retain(|(_, l)| !hidden.contains(l.name.as_str()));
        for (name, j) in &head {
            if covered.covers(name) && !listed_head.contains(&**name) {
                let log = super::Listed {
                    name: name.to_string(),
                    stamp: j.stamp(),
                    row: 0,
                };
                out.gone.push((usize::MAX, log));
            }
        }
        Ok(out)
    }

    /// `q`'s page and how many jobs match it: the segments' page without
    /// the hidden jobs (left out where the segments read them, so hiding
    /// neither shortens the page nor widens what is read) and the head's
    /// jobs, through the list's own pass; the count less the hidden jobs
    /// that match.
    pub fn page(&self, q: &ListQuery, cursor: Option<&Facts>) -> Result<Found, IndexError> {
        let wider = ListQuery {
            offset: 0,
            limit: q.limit.map(|l| q.offset.saturating_add(l)),
            ..q.clone()
        };
        let hidden = |id: &str| self.hidden.contains_key(id);
        let (below, below_total) = self.segments.page_hiding(&wider, cursor, &hidden)?;
        let hidden_matching = self.hidden.values().filter(|j| q.matches(&***j)).count();
        let head_matching = self.head.values().filter(|j| q.matches(&***j)).count();
        let candidates = below
            .into_iter()
            .chain(self.head.values().cloned())
            .map(Candidate::Read);
        let (page, _) = q.pick(candidates, cursor);
        let page = page.into_iter().filter_map(|c| match c {
            Candidate::Read(s) => Some(s),
            Candidate::Row(_) => None,
        });
        let total = below_total - hidden_matching.min(below_total) + head_matching;
        Ok((page.collect(), total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ondisk::names::tests::{covered, listing};
    use crate::ondisk::tests::{assert_same, job, jobs, random_query, segments};
    use crate::tests::{below, rows_for};
    use std::collections::BTreeMap;

    /// The jobs that ran in a window, over segments cut in runs of the
    /// default order (so blocks are skipped by their times), are those a
    /// filter over every job finds, jobs not started or not ended
    /// included.
    #[test]
    fn the_jobs_of_a_window_are_those_a_filter_over_every_job_finds() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(3_000, 31);
        // And segments of started jobs that never ended alone: a block's
        // ends say nothing of them, its starts do.
        let unended: Vec<Arc<JobSummary>> = (all.iter())
            .filter(|j| j.end_time() == 0 && j.start_time() > 0)
            .cloned()
            .collect();
        let only = dir.path().join("unended");
        std::fs::create_dir(&only).unwrap();
        for (all, layered) in [
            (&all, Layered::new(segments(dir.path(), &all, 4, None))),
            (&unended, Layered::new(segments(&only, &unended, 2, None))),
        ] {
            windows(all, &layered);
        }
    }

    fn windows(all: &[Arc<JobSummary>], layered: &Layered) {
        let mut r = below(37);
        for _ in 0..300 {
            let from = 900 + r(2_500);
            let to = from + [1, 5, 40, 3_000][r(4) as usize];
            let ran =
                |j: &JobSummary| j.start_time() < to && j.end_time().max(j.start_time()) >= from;
            let mut got: Vec<String> = (layered.ran_between(from, to))
                .map(Result::unwrap)
                .filter(|j| ran(j))
                .map(|j| j.job_id().to_string())
                .collect();
            let mut want: Vec<String> = (all.iter())
                .filter(|j| ran(j))
                .map(|j| j.job_id().to_string())
                .collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "{from}..{to}");
        }
    }

    /// Counts (all, by scheduler), every job, and a listing sorted out,
    /// each against the map of the jobs as they are.
    fn the_rest_as_the_map_says(
        layered: &Layered,
        now: &BTreeMap<String, Arc<JobSummary>>,
        all: &[Arc<JobSummary>],
        r: &mut impl FnMut(u64) -> u64,
        round: usize,
    ) {
        let jobs: Vec<Arc<JobSummary>> = now.values().cloned().collect();
        let mut counts = [0; STATES];
        let mut by: BTreeMap<(bool, Option<String>), [usize; STATES]> = BTreeMap::new();
        for j in &jobs {
            counts[j.state().index()] += 1;
            let id = j.scheduler_id().map(str::to_string);
            by.entry((id.is_none(), id)).or_default()[j.state().index()] += 1;
        }
        assert_eq!(layered.counts(), counts, "round {round}");
        let got: Vec<(Option<String>, [usize; STATES])> = (layered.counts_by_scheduler())
            .into_iter()
            .map(|(id, c)| (id.map(|i| i.to_string()), c))
            .collect();
        let want: Vec<_> = by.into_iter().map(|((_, id), c)| (id, c)).collect();
        assert_eq!(got, want, "round {round}");
        let mut every: Vec<bytes::Bytes> = (layered.jobs()).map(|j| j.unwrap().entry()).collect();
        let mut want: Vec<bytes::Bytes> = jobs.iter().map(|j| j.entry()).collect();
        every.sort();
        want.sort();
        assert_eq!(every, want, "round {round}");
        // In order: newest queued first, then by id.
        let mut sorted = jobs.clone();
        sorted.sort_by(|a, b| {
            (Reverse(a.position_key()), a.job_id()).cmp(&(Reverse(b.position_key()), b.job_id()))
        });
        let in_order: Vec<bytes::Bytes> = (layered.jobs_in_order())
            .map(|j| j.unwrap().entry())
            .collect();
        let want: Vec<bytes::Bytes> = sorted.iter().map(|j| j.entry()).collect();
        assert_eq!(in_order, want, "round {round}: in order");
        // By query hash, over a range of hashes (0 to 4 in these jobs):
        // the range's jobs, each once, the hashes never falling.
        let (a, b) = (r(6), r(6));
        let hashes = a.min(b)..=a.max(b);
        let by_query: Vec<Arc<JobSummary>> = (layered.jobs_by_query(hashes.clone()))
            .map(Result::unwrap)
            .collect();
        assert!(
            (by_query.windows(2)).all(|w| w[0].query_hash() <= w[1].query_hash()),
            "round {round}: by query"
        );
        let mut got: Vec<bytes::Bytes> = by_query.iter().map(|j| j.entry()).collect();
        let mut want: Vec<bytes::Bytes> = (jobs.iter())
            .filter(|j| hashes.contains(&j.query_hash()))
            .map(|j| j.entry())
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "round {round}: by query {hashes:?}");
        // By id: every job shown, in the ids' byte order.
        let by_id: Vec<bytes::Bytes> = (layered.jobs_by_id()).map(|j| j.unwrap().entry()).collect();
        let mut want = jobs.clone();
        want.sort_by(|a, b| a.job_id().as_bytes().cmp(b.job_id().as_bytes()));
        let want: Vec<bytes::Bytes> = want.iter().map(|j| j.entry()).collect();
        assert_eq!(by_id, want, "round {round}: by id");
        let names: Vec<String> = jobs.iter().map(|j| j.file_name().to_string()).collect();
        let mut listed = listing(&jobs, r);
        // Logs of jobs removed (or renamed by a replacement) listed again:
        // new, whatever the segments held of them.
        let current: HashSet<&str> = names.iter().map(String::as_str).collect();
        for j in all.iter().step_by(7) {
            let name = j.file_name();
            if !current.contains(&*name) {
                listed.push((name.to_string(), j.stamp(), [Standing::New; 2]));
            }
        }
        // Which names the layers hold: the jobs' as they are now.
        let probe: Vec<&str> = listed.iter().map(|l| l.0.as_str()).collect();
        let held = layered.holding(&probe).unwrap();
        for (name, held) in probe.iter().zip(held) {
            assert_eq!(held, current.contains(name), "round {round}: {name}");
        }
        let covered = covered(&names, r);
        let plain: Vec<(String, Stamp)> = listed.iter().map(|(n, s, _)| (n.clone(), *s)).collect();
        for (objects, whole) in [(0, false), (1, true)] {
            let got = layered.sort_out(&plain, whole, &covered).unwrap();
            let want: Vec<Standing> = listed.iter().map(|l| l.2[objects]).collect();
            assert_eq!(got.standing, want, "round {round} {covered:?}");
            let listed: HashSet<&str> = listed.iter().map(|l| l.0.as_str()).collect();
            let mut gone: Vec<&str> = got.gone.iter().map(|g| g.1.name.as_str()).collect();
            let mut want: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|n| covered.covers(n) && !listed.contains(n))
                .collect();
            gone.sort_unstable();
            want.sort_unstable();
            assert_eq!(gone, want, "round {round} {covered:?}");
        }
    }

    /// Through inserts of new jobs, replacements of the segments' jobs
    /// and of the head's, and removals of either (and of absent ids),
    /// every page and total is the one the list's pass gives over the
    /// jobs as they are (the oracle: `ListQuery::select` over a map kept
    /// beside), and every lookup finds what the map holds.
    /// A walk in order meets a damaged block as one error in its place
    /// and goes on: every other job, in order.
    #[test]
    fn a_walk_in_order_goes_on_past_a_damaged_block() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(1_000, 41);
        let set = segments(dir.path(), &all, 2, Some(43));
        let first = &set.segments[0];
        let lost: HashSet<String> = (first.jobs().take(super::super::BLOCK))
            .map(|j| j.unwrap().job_id().to_string())
            .collect();
        // A row of the first segment's first block flipped, under it.
        let at = first.at[0] + 8;
        let mut bytes = std::fs::read(&set.paths()[0]).unwrap();
        bytes[at as usize] ^= 1;
        std::fs::write(&set.paths()[0], bytes).unwrap();
        let layered = Layered::new(set);
        let walked: Vec<_> = layered.jobs_in_order().collect();
        assert_eq!(walked.iter().filter(|j| j.is_err()).count(), 1);
        let got: Vec<bytes::Bytes> = walked.into_iter().flatten().map(|j| j.entry()).collect();
        let mut want: Vec<&Arc<JobSummary>> =
            all.iter().filter(|j| !lost.contains(j.job_id())).collect();
        want.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
        let want: Vec<bytes::Bytes> = want.into_iter().map(|j| j.entry()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_head_over_segments_answers_as_a_pass_over_the_jobs_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(2_000, 21);
        let (written, fresh) = all.split_at(1_500);
        let mut layered = Layered::new(segments(dir.path(), written, 3, Some(25)));
        let mut now: BTreeMap<String, Arc<JobSummary>> = written
            .iter()
            .map(|j| (j.job_id().to_string(), j.clone()))
            .collect();
        let mut fresh = fresh.iter();
        let mut r = below(23);
        for round in 0..400 {
            let ids: Vec<String> = now.keys().cloned().collect();
            let pick = |r: &mut dyn FnMut(u64) -> u64| ids[r(ids.len() as u64) as usize].clone();
            match r(4) {
                0 => {
                    if let Some(j) = fresh.next() {
                        layered.insert((**j).clone()).unwrap();
                        now.insert(j.job_id().to_string(), j.clone());
                    }
                }
                1 => {
                    let id = pick(&mut r);
                    let changed = job(&mut r, &id);
                    layered.insert((*changed).clone()).unwrap();
                    now.insert(id, changed);
                }
                2 => {
                    let id = pick(&mut r);
                    assert!(layered.remove(&id).unwrap(), "{id}");
                    now.remove(&id);
                }
                _ => {
                    let id = format!("absent-{round}");
                    assert!(!layered.remove(&id).unwrap());
                }
            }
            assert_eq!(layered.len(), now.len(), "round {round}");
            let jobs: Vec<Arc<JobSummary>> = now.values().cloned().collect();
            let (q, cursor) = random_query(&mut r, &all);
            let want = q.select(rows_for(&jobs), cursor.as_ref());
            let got = layered.page(&q, cursor.as_ref()).unwrap();
            assert_same(got, &want, &format!("round {round}: {q:?}"));
            let id = all[r(all.len() as u64) as usize].job_id();
            let found = layered.get(id).unwrap().map(|j| j.entry());
            assert_eq!(found, now.get(id).map(|j| j.entry()), "{id}");
            if round % 20 == 0 {
                the_rest_as_the_map_says(&layered, &now, &all, &mut r, round);
            }
        }
        assert!(layered.changes() > 100, "{}", layered.changes());
        // Rewritten: the same jobs, in segments of at most 300, newest
        // first, with no change left; every query answers as before.
        let (rewritten, paths) = layered.rewrite(dir.path(), "merged", 300).unwrap();
        assert_eq!((rewritten.len(), rewritten.changes()), (now.len(), 0));
        assert_eq!(paths.len(), now.len().div_ceil(300));
        let jobs: Vec<Arc<JobSummary>> = now.values().cloned().collect();
        for round in 0..100 {
            let (q, cursor) = random_query(&mut r, &all);
            let want = q.select(rows_for(&jobs), cursor.as_ref());
            let got = rewritten.page(&q, cursor.as_ref()).unwrap();
            assert_same(got, &want, &format!("rewritten {round}: {q:?}"));
        }
        // Each segment newer than the next: the default order cut in runs.
        let newest: Vec<Option<u64>> = rewritten.segments.iter().map(|s| s.newest()).collect();
        assert!(newest.windows(2).all(|w| w[0] >= w[1]), "{newest:?}");
    }
}
