//! The catalog's second order: completed jobs by duration, so a page
//! sorted by duration (`sort=duration`, filtered by state at most) walks
//! to its end and stops, as the default order does, instead of passing
//! over every job (504 ms p99 at 10,000,000 jobs; `docs/performance.md`).
//!
//! The set is ordered by the list's key for the sort (end minus start;
//! a job whose start or end is unknown counts as the longest) and then by
//! job id, ascending. The list orders ties by id ascending in both
//! directions (`query::ListQuery`'s total order), so a walk longest first
//! is not this set backwards: it hops from one duration to the next
//! shorter one and reads each one's jobs forwards ([`walk`]), one
//! `O(log n)` descent a distinct duration.
//!
//! A B-tree of shared handles and their durations, like the default
//! order: 11 bytes a job more in all, measured with the scale bench
//! (`docs/performance.md`). Kept beside the default order by every
//! change of the catalog (`summary::Catalog`). A fill in bulk (the
//! persistent index at a restart, a first rescan) does not build it:
//! sorting a million jobs by duration took longer than the rest of the
//! restart (1,257 against 727 ms to the first page, built beside the
//! other sets). It is built afterwards on a thread of its own, from a
//! snapshot of the jobs taken under the read lock; the changes made
//! meanwhile are journalled and replayed onto it when it is installed
//! (each change sets or removes one key, so replaying one the snapshot
//! already holds changes nothing). Until then a page sorted by duration
//! takes the pass over every job, as it did before the order existed.

use super::*;
use std::collections::btree_set;

/// A summary in duration order: shortest first, then by id. The
/// duration is kept beside the handle, so most comparisons read no
/// summary.
#[derive(Debug, Clone)]
pub(super) struct ByDuration {
    duration: u64,
    pub(super) job: Arc<JobSummary>,
}

impl ByDuration {
    pub(super) fn of(job: &Arc<JobSummary>) -> Self {
        Self {
            duration: job.duration().unwrap_or(u64::MAX),
            job: job.clone(),
        }
    }

    pub(super) fn key(&self) -> (u64, &str) {
        (self.duration, self.job.job_id())
    }

    /// A handle that sorts as a job of `duration` with id `id` would.
    fn probe(duration: u64, id: &str) -> Self {
        // Started at 1 and ended `duration` later; never started when
        // the duration is the unknown one.
        let (start_time, end_time) = match duration {
            u64::MAX => (0, 0),
            d => (1, d + 1),
        };
        Self::of(&Arc::new(JobSummary::probe(&Facts {
            job_id: Arc::from(id),
            job_name: Arc::from(""),
            state: JobState::Completed,
            queued_time: 0,
            start_time,
            end_time,
            query_hash: 0,
        })))
    }
}

impl PartialEq for ByDuration {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for ByDuration {}

impl PartialOrd for ByDuration {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByDuration {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.duration
            .cmp(&other.duration)
            .then_with(|| self.job.job_id().cmp(other.job.job_id()))
    }
}

/// Where the jobs of `duration` end in the set: before the first job of
/// the next duration (there is none after the unknown one).
fn group_end(duration: u64) -> Bound<ByDuration> {
    match duration {
        u64::MAX => Bound::Unbounded,
        d => Bound::Excluded(ByDuration::probe(d + 1, "")),
    }
}

/// The jobs of `set` in the list's order by duration (`longest_first` or
/// shortest first, ties by id ascending), strictly after `from` (a
/// duration key and an id; the start when `None`); when `back`, strictly
/// before it, walking backwards (nearest first).
pub(super) fn walk<'a>(
    set: &'a BTreeSet<ByDuration>,
    longest_first: bool,
    back: bool,
    from: Option<(u64, &str)>,
) -> Box<dyn Iterator<Item = &'a Arc<JobSummary>> + 'a> {
    let durations_up = longest_first == back;
    let ids_up = !back;
    let at = from.map(|(d, id)| ByDuration::probe(d, id));
    if durations_up == ids_up {
        // The set's own order (shortest first), or exactly its reverse.
        let jobs = match (at, durations_up) {
            (None, true) => Box::new(set.iter()) as Box<dyn Iterator<Item = _>>,
            (None, false) => Box::new(set.iter().rev()),
            (Some(at), true) => Box::new(set.range((Bound::Excluded(at), Bound::Unbounded))),
            (Some(at), false) => Box::new(set.range(..at).rev()),
        };
        return Box::new(jobs.map(|d| &d.job));
    }
    // Durations one way, ids the other: a duration at a time.
    let (mut edge, mut group) = match from {
        None => (None, None),
        Some((d, id)) => {
            let rest = if ids_up {
                set.range((Bound::Excluded(ByDuration::probe(d, id)), group_end(d)))
            } else {
                set.range((
                    Bound::Included(ByDuration::probe(d, "")),
                    Bound::Excluded(ByDuration::probe(d, id)),
                ))
            };
            (Some(d), Some(rest))
        }
    };
    Box::new(std::iter::from_fn(move || {
        loop {
            if let Some(rest) = group.as_mut() {
                let next = if ids_up {
                    rest.next()
                } else {
                    rest.next_back()
                };
                if let Some(d) = next {
                    return Some(&d.job);
                }
            }
            let next: Option<&ByDuration> = match (edge, durations_up) {
                (None, true) => set.first(),
                (None, false) => set.last(),
                (Some(u64::MAX), true) => None,
                (Some(d), true) => set.range(ByDuration::probe(d + 1, "")..).next(),
                (Some(d), false) => set.range(..ByDuration::probe(d, "")).next_back(),
            };
            let d = next?.duration;
            edge = Some(d);
            group = Some(whole_group(set, d));
        }
    }))
}

/// Every job of `duration`, by id.
fn whole_group(set: &BTreeSet<ByDuration>, duration: u64) -> btree_set::Range<'_, ByDuration> {
    set.range((
        Bound::Included(ByDuration::probe(duration, "")),
        group_end(duration),
    ))
}

impl Catalog {
    /// Keeps the duration order with a change of the completed jobs (or
    /// journals it while the order is being built).
    pub(super) fn duration_change(&mut self, job: &Arc<JobSummary>, added: bool) {
        if self.durations_pending {
            self.durations_journal.push((job.clone(), added));
        } else if added {
            self.by_duration.replace(ByDuration::of(job));
        } else {
            self.by_duration.remove(&ByDuration::of(job));
        }
    }

    /// The completed jobs and the fill they belong to, when the duration
    /// order is to be built.
    fn durations_to_build(&self) -> Option<(Vec<Arc<JobSummary>>, u64)> {
        self.durations_pending.then(|| {
            let jobs = self.order.iter().map(|p| p.0.clone()).collect();
            (jobs, self.fills)
        })
    }

    /// Installs the duration order built from the jobs of fill `fill`,
    /// replaying the changes made since; false (nothing done) when
    /// another fill replaced those jobs meanwhile.
    fn install_durations(&mut self, mut set: BTreeSet<ByDuration>, fill: u64) -> bool {
        if !self.durations_pending || self.fills != fill {
            return false;
        }
        for (job, added) in std::mem::take(&mut self.durations_journal) {
            if added {
                set.replace(ByDuration::of(&job));
            } else {
                set.remove(&ByDuration::of(&job));
            }
        }
        self.by_duration = set;
        self.durations_pending = false;
        true
    }
}

/// Builds the duration order of `catalog`'s completed jobs, if it is to
/// be built, and installs it.
fn build_durations(catalog: &RwLock<Catalog>) {
    let Some((jobs, fill)) = catalog.read().durations_to_build() else {
        return;
    };
    let set: BTreeSet<ByDuration> = jobs.iter().map(ByDuration::of).collect();
    drop(jobs);
    if catalog.write().install_durations(set, fill) {
        // The snapshot and the sort's buffers were freed among the sets.
        crate::heap::release_slack();
    }
}

impl LogStore {
    /// Builds the duration order of a catalog just filled in bulk, on a
    /// thread of its own (which waits for a write lock the caller holds).
    /// Where no thread can be had, the order stays unbuilt and pages
    /// sorted by duration take the pass over every job.
    pub(super) fn build_durations_later(&self) {
        let catalog = self.catalog.clone();
        let spawned = std::thread::Builder::new()
            .name("history-durations".into())
            .spawn(move || build_durations(&catalog));
        if let Err(e) = spawned {
            log::warn!(
                "history: no thread to order the jobs by duration ({e}); sorting by it passes over every job"
            );
        }
    }

    /// Whether the order by duration is built (pages sorted by duration
    /// walk it); false while it is built after a fill in bulk.
    pub fn durations_ordered(&self) -> bool {
        !self.catalog.read().durations_pending
    }

    /// A page sorted by duration, filtered by state at most, completed
    /// jobs only: the walk of the duration order to the page's end; the
    /// total is the tallies'.
    pub(super) fn duration_page(
        index: &Catalog,
        q: &ListQuery,
        cursor: Option<&Facts>,
        skip: &HashSet<String>,
    ) -> Page {
        let longest_first = q.order() == crate::query::Order::Desc;
        let back = q.before.is_some();
        let from = cursor.map(|c| (c.duration().unwrap_or(u64::MAX), &*c.job_id));
        let wanted = |s: &&Arc<JobSummary>| {
            q.states.as_ref().is_none_or(|w| w.contains(&s.state()))
                && (skip.is_empty() || !skip.contains(s.job_id()))
        };
        let jobs = walk(&index.by_duration, longest_first, back, from)
            .filter(wanted)
            .skip(q.offset)
            .take(q.limit.unwrap_or(usize::MAX));
        let rows = if back {
            let mut jobs: Vec<_> = jobs.collect();
            jobs.reverse();
            rows_of(jobs.into_iter())
        } else {
            rows_of(jobs)
        };
        Page {
            rows,
            total: index.state_total(q, skip),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{Order, Sort};

    /// Pages sorted by duration from the duration order are the pages of
    /// a pass over every job (the oracle: `ListQuery::select` over all
    /// rows), through inserts, replacements and removals, for durations
    /// shared by many jobs (the walk hops between them), unknown ones and
    /// lying ones (an end before the start), either direction, after and
    /// before a cursor, with offsets, state filters and skipped ids.
    #[test]
    fn a_duration_page_walks_its_order_and_answers_as_a_full_pass() {
        let mut seed = 11u64;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let dir = tempfile::tempdir().unwrap();
        let s = crate::tests::store(dir.path());
        let states = [JobState::Completed, JobState::Failed, JobState::Cancelled];
        let job = |i: u64, next: &mut dyn FnMut(u64) -> u64| {
            let start = [0, 1_000, 5_000][next(3) as usize] + next(3);
            let end = match next(10) {
                0 => 0,
                1 => start.saturating_sub(1 + next(3)),
                _ => start + [0, 10, 20, 30][next(4) as usize],
            };
            let state = states[next(3) as usize];
            crate::tests::summary_at(&format!("j{i:04}"), state, [0, start, end])
        };
        // Filled in bulk, as a restart fills it: the order is to be built.
        let mut sets = CatalogSets::default();
        for i in 0..1500 {
            let j = Arc::new(job(i, &mut next));
            sets.count(&j);
            sets.ids.insert(ById(j.clone()));
            sets.order.insert(ByPosition(j));
        }
        s.catalog.write().set_completed(sets);
        let stale = s.catalog.read().durations_to_build().unwrap();
        s.catalog.write().set_completed(CatalogSets::default());
        // A build of an earlier fill's jobs is not installed.
        let order = |jobs: &[Arc<JobSummary>]| jobs.iter().map(ByDuration::of).collect();
        assert!(
            !s.catalog
                .write()
                .install_durations(order(&stale.0), stale.1)
        );
        assert!(!s.durations_ordered());
        let (none, fill) = s.catalog.read().durations_to_build().unwrap();
        assert!(s.catalog.write().install_durations(order(&none), fill));
        for j in stale.0 {
            s.catalog.write().insert(Arc::unwrap_or_clone(j));
        }
        let (mut building, mut fast) = (None, 0);
        for round in 0..500 {
            // Built from a snapshot taken at round 100 and installed at
            // round 250, the changes made meanwhile replayed onto it.
            if round == 100 {
                s.catalog.write().clear_completed();
                let jobs: Vec<Arc<JobSummary>> =
                    (0..1500).map(|i| Arc::new(job(i, &mut next))).collect();
                let mut sets = CatalogSets::default();
                for j in &jobs {
                    sets.count(j);
                    sets.ids.insert(ById(j.clone()));
                    sets.order.insert(ByPosition(j.clone()));
                }
                s.catalog.write().set_completed(sets);
            }
            if round == 150 {
                building = s.catalog.read().durations_to_build();
            }
            if round == 250 {
                let (jobs, fill) = building.take().unwrap();
                assert!(s.catalog.write().install_durations(order(&jobs), fill));
                assert!(s.durations_ordered());
            }
            // Change the catalog: a new job, a replaced one, a removed one.
            match next(3) {
                0 => {
                    s.catalog.write().insert(job(1500 + round, &mut next));
                }
                1 => {
                    s.catalog.write().insert(job(next(1500), &mut next));
                }
                _ => {
                    s.catalog.write().remove(&format!("j{:04}", next(1500)));
                }
            }
            let all: Vec<Arc<JobSummary>> =
                s.with_completed(|jobs| jobs.map(|j| Arc::new(j.clone())).collect());
            let rows: Vec<Row> = all
                .iter()
                .map(|j| Row {
                    facts: j.clone(),
                    entry: j.entry(),
                })
                .collect();
            let id = |i: u64| all[i as usize].job_id().to_string();
            let cursor_id = (next(3) > 0).then(|| id(next(all.len() as u64)));
            let back = next(3) == 0;
            let q = ListQuery {
                limit: (next(5) > 0).then(|| 1 + next(40) as usize),
                offset: next(3) as usize,
                states: match next(3) {
                    0 => Some(vec![JobState::Failed]),
                    1 => Some(vec![JobState::Completed, JobState::Cancelled]),
                    _ => None,
                },
                sort: Sort::Duration,
                order: [None, Some(Order::Asc), Some(Order::Desc)][next(3) as usize],
                after: cursor_id.clone().filter(|_| !back),
                before: cursor_id.clone().filter(|_| back),
                ..ListQuery::default()
            };
            let skip: HashSet<String> = (0..next(3)).map(|_| id(next(all.len() as u64))).collect();
            let cursor = cursor_id.map(|c| s.facts(&c).unwrap());
            let got = s.page(&q, cursor.as_ref(), &skip);
            let others: Vec<Row> = rows
                .iter()
                .filter(|r| !skip.contains(r.facts.job_id()))
                .cloned()
                .collect();
            let want = q.select(others, cursor.as_ref());
            let ids = |p: &Page| {
                p.rows
                    .iter()
                    .map(|r| r.facts.job_id().to_string())
                    .collect::<Vec<_>>()
            };
            assert_eq!(ids(&got), ids(&want), "round {round}: {q:?}");
            assert_eq!(got.total, want.total, "round {round}: {q:?}");
            fast += usize::from(q.filters_states_only() && !s.catalog.read().durations_pending);
        }
        assert_eq!(fast, 350);
        // The order holds every job the catalog does, and nothing else.
        let index = s.catalog.read();
        assert_eq!(index.by_duration.len(), index.jobs.len());
        assert!(index.by_duration.iter().all(|d| {
            index
                .get(d.job.job_id())
                .is_some_and(|j| Arc::ptr_eq(j, &d.job))
        }));
    }
}
