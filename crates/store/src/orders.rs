//! The catalog's second orders, over the same completed jobs as the
//! default order, so that two more kinds of page walk to their end and
//! stop instead of passing over every job (45 ns a job: 0.5 s at
//! 10,000,000 jobs; `docs/performance.md`):
//!
//! - **By duration** ([`ByDuration`]): `sort=duration`, filtered by state
//!   at most. Ordered by the list's key for the sort (end minus start; a
//!   job whose start or end is unknown counts as the longest), then by id
//!   ascending. The list orders ties by id ascending in both directions
//!   (`query::ListQuery`'s total order), so a walk longest first is not
//!   this set backwards: it hops from one duration to the next shorter
//!   one and reads each one's jobs forwards ([`walk`]), one `O(log n)`
//!   descent a distinct duration.
//! - **By query** ([`ByQuery`]): `query_hash=`, filtered by state at most,
//!   in the default order: a query's runs (the job page's "previous run
//!   of this query", the runs of a recurring query). By hash, then in
//!   the default order, so a page is a range of the set; its total a
//!   count of that range (the query's runs, not every job).
//!
//! Each is a B-tree of shared handles, like the default order (about 10
//! bytes a job each, measured with the scale bench); the keys are read
//! through the handle. Kept by every change of the catalog
//! (`summary::Catalog`). A fill in bulk (the persistent index at a
//! restart, a first rescan) does not build them: sorting a million jobs
//! by duration took longer than the rest of the restart (1,257-1,471
//! against 727 ms to the first page, built beside the other sets). They are
//! built afterwards, on a thread of their own (one order each), from a
//! snapshot of the jobs taken under the read lock; the changes made
//! meanwhile are journalled and replayed when they are installed (each
//! change sets or removes one key, so replaying one the snapshot already
//! holds changes nothing). Until then those pages take the pass over
//! every job, as they did before the orders existed.

use super::*;
use std::collections::btree_set;

/// A summary in duration order: shortest first, then by id. The handle
/// alone (8 bytes): the key is read through it, which costs the build
/// its sort's time (in the background) and saves 8 bytes a job.
#[derive(Debug, Clone)]
pub(super) struct ByDuration {
    pub(super) job: Arc<JobSummary>,
}

impl ByDuration {
    pub(super) fn of(job: &Arc<JobSummary>) -> Self {
        Self { job: job.clone() }
    }

    fn duration(&self) -> u64 {
        self.job.duration().unwrap_or(u64::MAX)
    }

    pub(super) fn key(&self) -> (u64, &str) {
        (self.duration(), self.job.job_id())
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

ordered_by_key!(ByDuration);

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
            let d = next?.duration();
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

/// A summary in the order of its query's runs: by query hash, then in
/// the default order (newest queued first, then id). The handle alone,
/// like [`ByDuration`].
#[derive(Debug, Clone)]
pub(super) struct ByQuery {
    pub(super) job: Arc<JobSummary>,
}

impl ByQuery {
    pub(super) fn of(job: &Arc<JobSummary>) -> Self {
        Self { job: job.clone() }
    }

    fn key(&self) -> (u64, Reverse<u64>, &str) {
        let job = &self.job;
        (job.query_hash(), Reverse(job.position_key()), job.job_id())
    }

    /// A handle that sorts as a run of `hash` at `position` with id `id`
    /// would (positions run from 1; `u64::MAX` sorts first, as the
    /// default order's largest key).
    fn probe(hash: u64, position: u64, id: &str) -> Self {
        Self::of(&Arc::new(JobSummary::probe(&Facts {
            job_id: Arc::from(id),
            job_name: Arc::from(""),
            state: JobState::Completed,
            queued_time: position,
            start_time: position,
            end_time: 0,
            query_hash: hash,
        })))
    }
}

ordered_by_key!(ByQuery);

/// Changes journalled at most while the second orders are built (a
/// build takes seconds at millions of jobs; this bound is reached only if
/// it never ends).
#[cfg(not(test))]
const MAX_JOURNAL: usize = 1 << 20;
#[cfg(test)]
const MAX_JOURNAL: usize = 1_000;

/// The catalog's second orders, each over every completed job.
#[derive(Default)]
pub(super) struct SecondOrders {
    pub(super) by_duration: BTreeSet<ByDuration>,
    pub(super) by_query: BTreeSet<ByQuery>,
}

impl SecondOrders {
    /// Both orders of `jobs`, built side by side.
    fn of(jobs: &[Arc<JobSummary>]) -> Self {
        std::thread::scope(|scope| {
            let by_query = scope.spawn(|| jobs.iter().map(ByQuery::of).collect());
            let by_duration = jobs.iter().map(ByDuration::of).collect();
            let by_query = by_query
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            Self {
                by_duration,
                by_query,
            }
        })
    }

    /// Sets (`added`) or removes `job` in both orders.
    fn change(&mut self, job: &Arc<JobSummary>, added: bool) {
        if added {
            self.by_duration.replace(ByDuration::of(job));
            self.by_query.replace(ByQuery::of(job));
        } else {
            self.by_duration.remove(&ByDuration::of(job));
            self.by_query.remove(&ByQuery::of(job));
        }
    }
}

impl Catalog {
    /// Keeps the second orders with a change of the completed jobs (or
    /// journals it while they are being built).
    pub(super) fn second_change(&mut self, job: &Arc<JobSummary>, added: bool) {
        if self.orders_pending {
            // A build that never ends (its thread died) must not hold
            // every change from then on: past the bound the build in
            // flight is not installed; it starts again from the jobs as
            // they are then (`restart_build`), and if it is not coming,
            // those pages take the pass until the next fill in bulk.
            if let Some(journal) = &mut self.orders_journal {
                if journal.len() < MAX_JOURNAL {
                    journal.push((job.clone(), added));
                } else {
                    log::warn!(
                        "history: {MAX_JOURNAL} changes while the jobs were ordered by \
                         duration and query; ordering them again"
                    );
                    self.orders_journal = None;
                }
            }
        } else {
            self.second.change(job, added);
        }
    }

    /// The completed jobs and the fill they belong to, when the second
    /// orders are to be built.
    fn orders_to_build(&self) -> Option<(Vec<Arc<JobSummary>>, u64)> {
        self.orders_pending.then(|| {
            let jobs = self.order.iter().map(|p| p.0.clone()).collect();
            (jobs, self.fills)
        })
    }

    /// The completed jobs to build the second orders from again, when the
    /// build of fill `fill` was outrun (its journal overflowed) and no
    /// other fill has come since; the journal starts anew with them.
    fn restart_build(&mut self, fill: u64) -> Option<Vec<Arc<JobSummary>>> {
        if !self.orders_pending || self.fills != fill || self.orders_journal.is_some() {
            return None;
        }
        self.orders_journal = Some(Vec::new());
        self.orders_to_build().map(|(jobs, _)| jobs)
    }

    /// Installs the second orders built from the jobs of fill `fill`,
    /// replaying the changes made since; false (nothing done) when
    /// another fill replaced those jobs meanwhile.
    fn install_orders(&mut self, mut orders: SecondOrders, fill: u64) -> bool {
        if !self.orders_pending || self.fills != fill {
            return false;
        }
        let Some(journal) = self.orders_journal.take() else {
            return false;
        };
        for (job, added) in journal {
            orders.change(&job, added);
        }
        self.second = orders;
        self.orders_pending = false;
        true
    }
}

/// Builds the second orders of `catalog`'s completed jobs, if they are
/// to be built, and installs them.
fn build_orders(catalog: &RwLock<Catalog>) {
    let Some((jobs, fill)) = catalog.read().orders_to_build() else {
        return;
    };
    let mut jobs = Some(jobs);
    // A build the changes outran starts again from the jobs as they are
    // then, twice at most (each restart copies the handles under the
    // write lock: a rare event, not a loop of them).
    for attempt in 1..=3 {
        let orders = SecondOrders::of(&jobs.take().expect("jobs to order"));
        let mut index = catalog.write();
        if index.install_orders(orders, fill) {
            drop(index);
            // The snapshot and the sort's buffers were freed among the sets.
            crate::heap::release_slack();
            return;
        }
        if attempt < 3 {
            jobs = index.restart_build(fill);
        }
        if jobs.is_none() {
            if index.fills == fill && index.orders_pending {
                log::warn!(
                    "history: the jobs changed faster than they could be ordered by duration \
                     and query; pages sorted by duration or filtered by query pass over every \
                     job until the next full load"
                );
            }
            return;
        }
    }
}

impl LogStore {
    /// Builds the second orders of a catalog just filled in bulk, on a
    /// thread of its own (which waits for a write lock the caller holds).
    /// Where no thread can be had, they stay unbuilt and the pages they
    /// serve take the pass over every job.
    pub(super) fn build_orders_later(&self) {
        let catalog = self.catalog.clone();
        let spawned = std::thread::Builder::new()
            .name("history-orders".into())
            .spawn(move || build_orders(&catalog));
        if let Err(e) = spawned {
            log::warn!(
                "history: no thread to order the jobs by duration and query ({e}); \
                 pages sorted by duration or filtered by query pass over every job"
            );
        }
    }

    /// Whether the second orders are built (pages sorted by duration or
    /// filtered by query walk them); false while they are built after a
    /// fill in bulk.
    pub fn second_orders_built(&self) -> bool {
        !self.catalog.read().orders_pending
    }

    /// A page of completed jobs one of the second orders serves, when it
    /// can: sorted by duration, or one query's runs in the default order,
    /// each filtered by state at most, once the orders are built.
    pub(super) fn second_page(
        index: &Catalog,
        q: &ListQuery,
        cursor: Option<&Facts>,
        skip: &HashSet<String>,
    ) -> Option<Page> {
        if index.orders_pending {
            return None;
        }
        if q.filters_states_only() && q.sort == crate::query::Sort::Duration {
            return Some(Self::duration_page(index, q, cursor, skip));
        }
        let hash = q.query_hash?;
        let others = ListQuery {
            query_hash: None,
            ..q.clone()
        };
        (others.filters_states_only() && q.default_order())
            .then(|| Self::query_page(index, q, hash, cursor, skip))
    }

    /// A page of one query's runs (`query_hash`, filtered by state at
    /// most, in the default order), completed jobs only: the walk of that
    /// query's part of the order to the page's end; the total is a count
    /// of that part (its runs, not every job).
    fn query_page(
        index: &Catalog,
        q: &ListQuery,
        hash: u64,
        cursor: Option<&Facts>,
        skip: &HashSet<String>,
    ) -> Page {
        let first = Bound::Included(ByQuery::probe(hash, u64::MAX, ""));
        let after_last = match hash.checked_add(1) {
            Some(next) => Bound::Excluded(ByQuery::probe(next, u64::MAX, "")),
            None => Bound::Unbounded,
        };
        let wanted = |s: &&ByQuery| {
            q.states.as_ref().is_none_or(|w| w.contains(&s.job.state()))
                && (skip.is_empty() || !skip.contains(s.job.job_id()))
        };
        let runs = &index.second.by_query;
        let total = runs
            .range((first.clone(), after_last.clone()))
            .filter(wanted)
            .count();
        let at = cursor.map(|c| ByQuery::probe(hash, c.position_key(), &c.job_id));
        let take = q.limit.unwrap_or(usize::MAX);
        let rows = match (at, q.before.is_some()) {
            (Some(at), true) => {
                let mut jobs: Vec<&Arc<JobSummary>> = runs
                    .range((first, Bound::Excluded(at)))
                    .rev()
                    .filter(wanted)
                    .skip(q.offset)
                    .take(take)
                    .map(|r| &r.job)
                    .collect();
                jobs.reverse();
                rows_of(jobs.into_iter())
            }
            (at, _) => {
                let from = at.map_or(first, Bound::Excluded);
                let jobs = runs
                    .range((from, after_last))
                    .filter(wanted)
                    .skip(q.offset)
                    .take(take)
                    .map(|r| &r.job);
                rows_of(jobs)
            }
        };
        Page { rows, total }
    }

    /// A page sorted by duration, filtered by state at most, completed
    /// jobs only: the walk of the duration order to the page's end; the
    /// total is the tallies'.
    fn duration_page(
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
        let jobs = walk(&index.second.by_duration, longest_first, back, from)
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

    /// Pages sorted by duration and pages of one query's runs, from the
    /// second orders, are the pages of a pass over every job (the oracle:
    /// `ListQuery::select` over all rows), through inserts, replacements
    /// and removals, a build from a stale fill (refused) and a build
    /// installed after 100 rounds of changes (replayed): for durations
    /// shared by many jobs (the walk hops between them), unknown ones and
    /// lying ones (an end before the start), queue times shared and
    /// unknown, the highest hash, a hash no job has; either direction,
    /// after and before a cursor, with offsets, state filters and skipped
    /// ids.
    #[test]
    fn second_orders_page_as_a_full_pass_through_changes_and_builds() {
        let mut next = crate::tests::below(11);
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
            let queued = [0, 100, 200][next(3) as usize] + next(4);
            let hash = [0, 1, 2, 3, u64::MAX][next(5) as usize];
            let times = [queued, start, end];
            crate::tests::summary_at(&format!("j{i:04}"), state, times, hash)
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
        let stale = s.catalog.read().orders_to_build().unwrap();
        s.catalog.write().set_completed(CatalogSets::default());
        // A build of an earlier fill's jobs is not installed.
        let order = |jobs: &[Arc<JobSummary>]| SecondOrders::of(jobs);
        assert!(!s.catalog.write().install_orders(order(&stale.0), stale.1));
        assert!(!s.second_orders_built());
        let (none, fill) = s.catalog.read().orders_to_build().unwrap();
        assert!(s.catalog.write().install_orders(order(&none), fill));
        for j in stale.0 {
            s.catalog.write().insert(Arc::unwrap_or_clone(j));
        }
        let (mut building, mut fast) = (None, [0, 0]);
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
                building = s.catalog.read().orders_to_build();
            }
            if round == 250 {
                let (jobs, fill) = building.take().unwrap();
                assert!(s.catalog.write().install_orders(order(&jobs), fill));
                assert!(s.second_orders_built());
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
            let all: Vec<Arc<JobSummary>> = s.with_completed(|jobs| jobs.collect());
            let rows = crate::tests::rows_for(&all);
            let id = |i: u64| all[i as usize].job_id().to_string();
            let cursor_id = (next(3) > 0).then(|| id(next(all.len() as u64)));
            let back = next(3) == 0;
            let by_query = next(2) == 0;
            let q = ListQuery {
                limit: (next(5) > 0).then(|| 1 + next(40) as usize),
                offset: next(3) as usize,
                states: match next(3) {
                    0 => Some(vec![JobState::Failed]),
                    1 => Some(vec![JobState::Completed, JobState::Cancelled]),
                    _ => None,
                },
                query_hash: by_query.then(|| [0, 1, 3, 7, u64::MAX][next(5) as usize]),
                sort: if by_query {
                    [Sort::QueuedTime, Sort::QueuedTime, Sort::Duration][next(3) as usize]
                } else {
                    Sort::Duration
                },
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
            let ids = crate::tests::page_ids;
            assert_eq!(ids(&got), ids(&want), "round {round}: {q:?}");
            assert_eq!(got.total, want.total, "round {round}: {q:?}");
            if !s.catalog.read().orders_pending {
                fast[0] += usize::from(q.filters_states_only() && q.sort == Sort::Duration);
                fast[1] += usize::from(by_query && q.default_order());
            }
        }
        assert!(
            fast[0] > 100 && fast[1] > 50,
            "{fast:?} pages took the orders"
        );
        // The order holds every job the catalog does, and nothing else.
        let index = s.catalog.read();
        let held =
            |job: &Arc<JobSummary>| index.get(job.job_id()).is_some_and(|j| Arc::ptr_eq(j, job));
        let second = &index.second;
        assert_eq!(second.by_duration.len(), index.jobs.len());
        assert_eq!(second.by_query.len(), index.jobs.len());
        assert!(second.by_duration.iter().all(|d| held(&d.job)));
        assert!(second.by_query.iter().all(|d| held(&d.job)));
    }

    /// A build that never ends does not keep every change: past the
    /// journal's bound the build in flight is refused and pages sorted by
    /// duration still answer (by the pass); a build that was only outrun
    /// starts again from the jobs as they are and is installed.
    #[test]
    fn a_build_that_never_ends_keeps_a_bounded_journal() {
        let dir = tempfile::tempdir().unwrap();
        let s = crate::tests::store(dir.path());
        s.catalog.write().set_completed(CatalogSets::default());
        let (jobs, fill) = s.catalog.read().orders_to_build().unwrap();
        for i in 0..=MAX_JOURNAL as u64 {
            let times = [10 + i, 10 + i, 20 + 2 * i];
            let job = crate::tests::summary_at(&format!("j{i:05}"), JobState::Completed, times, 1);
            s.catalog.write().insert(job);
        }
        assert!(s.catalog.read().orders_journal.is_none());
        let built = SecondOrders::of(&jobs);
        assert!(!s.catalog.write().install_orders(built, fill));
        assert!(!s.second_orders_built());
        let q = ListQuery {
            limit: Some(3),
            sort: crate::query::Sort::Duration,
            ..ListQuery::default()
        };
        let page = s.page(&q, None, &HashSet::new());
        let longest = (MAX_JOURNAL - 2..=MAX_JOURNAL).rev();
        let want: Vec<String> = longest.map(|i| format!("j{i:05}")).collect();
        assert_eq!(crate::tests::page_ids(&page), want);
        assert_eq!(page.total, MAX_JOURNAL + 1);
        // The build starts again from the jobs as they are now (not for
        // another fill), its new journal replayed at install: the pages
        // then walk the order, with the same answer.
        assert!(s.catalog.write().restart_build(fill + 1).is_none());
        let again = s.catalog.write().restart_build(fill).unwrap();
        assert_eq!(again.len(), MAX_JOURNAL + 1);
        assert!(
            s.catalog.write().restart_build(fill).is_none(),
            "one restart at a time"
        );
        let last = crate::tests::summary_at("k", JobState::Completed, [5, 5, 1 << 40], 1);
        s.catalog.write().insert(last);
        assert!(
            s.catalog
                .write()
                .install_orders(SecondOrders::of(&again), fill)
        );
        assert!(s.second_orders_built());
        let walked = s.page(&q, None, &HashSet::new());
        let mut want = want;
        want.insert(0, "k".into());
        want.pop();
        assert_eq!(crate::tests::page_ids(&walked), want);
        assert_eq!(walked.total, MAX_JOURNAL + 2);
    }
}
