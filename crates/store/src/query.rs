//! The job list's query (paging, filters, sorting) and the one
//! filter-order-page pass every source uses. The query has no wire
//! format here: the serving layer parses `GET /api/jobs`' parameters
//! into it.
//!
//! The default query is the whole list, newest first; every field set
//! narrows or orders it.
//!
//! **Invariant:** the order is total: the sort key, then the job id. A
//! cursor (`after=<job_id>`) therefore names one position, and pages taken
//! with it never shift however many jobs arrive meanwhile. The default
//! key, the queue time, is fixed from the moment a job exists, so a cursor
//! walk in the default order neither skips nor repeats a job while jobs
//! start and end; under `sort=start_time`, `end_time` or `duration` a job
//! that starts or ends moves, as those keys say it should.

use bjh_format::JobState;
use bytes::Bytes;
use std::cmp::Ordering;
use std::sync::Arc;

/// What a list is sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// When the job was queued (its start time where the queue time is
    /// unknown): the default, since it is known from the moment a job
    /// exists and never changes, so pages of a live list do not shift as
    /// jobs start and end.
    #[default]
    QueuedTime,
    /// Start time; jobs not started yet count as the newest.
    StartTime,
    /// End time; jobs not ended yet count as the newest.
    EndTime,
    /// End minus start; jobs not ended yet count as the longest.
    Duration,
    /// Job name, case-insensitive.
    Name,
}

/// Ascending or descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Smallest first.
    Asc,
    /// Largest first.
    Desc,
}

/// The facts about one job that filters and sorting use, with owned
/// strings (`Facts`) or borrowed ones ([`FactsRef`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts<S = Arc<str>> {
    /// The job.
    pub job_id: S,
    /// Its name.
    pub job_name: S,
    /// Its state.
    pub state: JobState,
    /// When it was queued (epoch millis; 0 when unknown).
    pub queued_time: u64,
    /// Start time (epoch millis; 0 when not started).
    pub start_time: u64,
    /// End time (epoch millis; 0 when not ended).
    pub end_time: u64,
    /// The query hash of its logical plan (0 when unknown).
    pub query_hash: u64,
}

/// [`Facts`] with borrowed strings.
pub type FactsRef<'a> = Facts<&'a str>;

impl Facts {
    /// Copies the facts of `job`.
    pub fn of(job: &(impl JobFacts + ?Sized)) -> Self {
        Self {
            job_id: Arc::from(job.job_id()),
            job_name: Arc::from(job.job_name()),
            state: job.state(),
            queued_time: job.queued_time(),
            start_time: job.start_time(),
            end_time: job.end_time(),
            query_hash: job.query_hash(),
        }
    }
}

/// Owned facts with the scheduler that ran the job (a live job, or one
/// known from its `.running` log).
#[derive(Debug, Clone)]
pub struct Tagged {
    /// The facts.
    pub facts: Facts,
    /// The scheduler, when known.
    pub scheduler_id: Option<Arc<str>>,
}

impl Tagged {
    /// Copies the facts and scheduler of `job`.
    pub fn of(job: &(impl JobFacts + ?Sized)) -> Self {
        Self {
            facts: Facts::of(job),
            scheduler_id: job.scheduler_id().map(Arc::from),
        }
    }
}

impl JobFacts for Tagged {
    #[inline]
    fn facts(&self) -> FactsRef<'_> {
        self.facts.facts()
    }
    fn scheduler_id(&self) -> Option<&str> {
        self.scheduler_id.as_deref()
    }
}

/// What filters and sorting read about a job: from owned facts, borrowed
/// ones, or an index entry, whose strings are only touched when a filter
/// or a tie needs them.
pub trait JobFacts: std::fmt::Debug {
    /// The facts, strings borrowed: the one accessor each kind of job
    /// implements; the others read it.
    fn facts(&self) -> FactsRef<'_>;

    /// The job.
    fn job_id(&self) -> &str {
        self.facts().job_id
    }
    /// Its name.
    fn job_name(&self) -> &str {
        self.facts().job_name
    }
    /// Its state.
    fn state(&self) -> JobState {
        self.facts().state
    }
    /// When it was queued (epoch millis; 0 when unknown).
    fn queued_time(&self) -> u64 {
        self.facts().queued_time
    }
    /// Start time (epoch millis; 0 when not started).
    fn start_time(&self) -> u64 {
        self.facts().start_time
    }
    /// End time (epoch millis; 0 when not ended).
    fn end_time(&self) -> u64 {
        self.facts().end_time
    }
    /// The query hash of its logical plan (0 when unknown).
    fn query_hash(&self) -> u64 {
        self.facts().query_hash
    }

    /// Progress records its log lost under backpressure (0 when none or
    /// unknown).
    fn dropped_records(&self) -> u64 {
        0
    }

    /// The scheduler that ran it, when known (logs written before the
    /// scheduler id was recorded, and upstream's, do not say).
    fn scheduler_id(&self) -> Option<&str> {
        None
    }

    /// End minus start, when both are known.
    fn duration(&self) -> Option<u64> {
        let (start, end) = (self.start_time(), self.end_time());
        (start > 0 && end > 0).then(|| end.saturating_sub(start))
    }

    /// The default position key (the queue time, else the start time).
    fn position_key(&self) -> u64 {
        numeric(self, Sort::QueuedTime)
    }
}

fn numeric(f: &(impl JobFacts + ?Sized), sort: Sort) -> u64 {
    let open = |t: u64| if t == 0 { u64::MAX } else { t };
    match sort {
        Sort::QueuedTime => match f.queued_time() {
            0 => open(f.start_time()),
            queued => queued,
        },
        Sort::StartTime => open(f.start_time()),
        Sort::EndTime => open(f.end_time()),
        Sort::Duration => f.duration().unwrap_or(u64::MAX),
        Sort::Name => 0,
    }
}

impl<S: AsRef<str> + std::fmt::Debug> JobFacts for Facts<S> {
    #[inline]
    fn facts(&self) -> FactsRef<'_> {
        Facts {
            job_id: self.job_id.as_ref(),
            job_name: self.job_name.as_ref(),
            state: self.state,
            queued_time: self.queued_time,
            start_time: self.start_time,
            end_time: self.end_time,
            query_hash: self.query_hash,
        }
    }
}

/// Every accessor forwarded, not only `facts()`: a kind of job may read a
/// single fact more cheaply than all of them (an index entry does).
macro_rules! forward_facts {
    ($s:tt => $($inner:tt)+) => {
        #[inline]
        fn facts(&$s) -> FactsRef<'_> {
            $($inner)+.facts()
        }
        #[inline]
        fn job_id(&$s) -> &str {
            $($inner)+.job_id()
        }
        #[inline]
        fn job_name(&$s) -> &str {
            $($inner)+.job_name()
        }
        #[inline]
        fn state(&$s) -> JobState {
            $($inner)+.state()
        }
        #[inline]
        fn queued_time(&$s) -> u64 {
            $($inner)+.queued_time()
        }
        #[inline]
        fn start_time(&$s) -> u64 {
            $($inner)+.start_time()
        }
        #[inline]
        fn end_time(&$s) -> u64 {
            $($inner)+.end_time()
        }
        #[inline]
        fn query_hash(&$s) -> u64 {
            $($inner)+.query_hash()
        }
    };
}

impl<T: JobFacts + ?Sized> JobFacts for &T {
    forward_facts!(self => (**self));
    fn dropped_records(&self) -> u64 {
        (**self).dropped_records()
    }
    fn scheduler_id(&self) -> Option<&str> {
        (**self).scheduler_id()
    }
}

impl JobFacts for Row {
    forward_facts!(self => self.facts);
    fn dropped_records(&self) -> u64 {
        self.facts.dropped_records()
    }
    fn scheduler_id(&self) -> Option<&str> {
        self.facts.scheduler_id()
    }
}

/// One job of a list: its facts and its entry's JSON bytes.
#[derive(Debug, Clone)]
pub struct Row {
    /// Filter and sort facts: shared with the index for an indexed job.
    pub facts: Arc<dyn JobFacts + Send + Sync>,
    /// The `GET /api/jobs` entry, verbatim.
    pub entry: Bytes,
}

impl Row {
    /// A row of owned facts.
    #[cfg(test)]
    pub(crate) fn new(facts: Facts, entry: Bytes) -> Self {
        Self {
            facts: Arc::new(facts),
            entry,
        }
    }
}

/// One page of a list.
#[derive(Debug, Default)]
pub struct Page {
    /// The rows of the page, in order.
    pub rows: Vec<Row>,
    /// How many jobs match the filters (all pages).
    pub total: usize,
}

/// The fewest candidates [`ListQuery::pick`] gathers before cutting them
/// back to the page.
const PICK_BUFFER: usize = 4096;

/// A list query: which jobs, in which order, which page.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// At most this many rows.
    pub limit: Option<usize>,
    /// Skip this many rows (after the cursor, if any).
    pub offset: usize,
    /// Start after this job (in the query's order).
    pub after: Option<String>,
    /// End just before this job (in the query's order): the page before
    /// the one this job starts, for walking back. Excludes `after`.
    pub before: Option<String>,
    /// Only these states; `None` is every state.
    pub states: Option<Vec<JobState>>,
    /// List unfinished jobs known only from `.running` logs.
    pub include_unfinished: bool,
    /// Name substring, lowercased.
    pub name: Option<String>,
    /// Started at or after (epoch millis).
    pub started_after: Option<u64>,
    /// Started at or before.
    pub started_before: Option<u64>,
    /// Ended at or after.
    pub ended_after: Option<u64>,
    /// Ended at or before.
    pub ended_before: Option<u64>,
    /// At least this long (end minus start).
    pub min_duration_ms: Option<u64>,
    /// Only runs of this query (see `format::query_hash`).
    pub query_hash: Option<u64>,
    /// Only jobs these schedulers ran.
    pub scheduler_ids: Option<Vec<String>>,
    /// Sort key.
    pub sort: Sort,
    /// Sort direction; `None` is the default for the key.
    pub order: Option<Order>,
}

/// The most rows one page may ask for.
pub const MAX_LIMIT: usize = 100_000;

impl ListQuery {
    /// The job id the page is cut at (`after` or `before`), if any.
    pub fn cursor_id(&self) -> Option<&str> {
        self.after.as_deref().or(self.before.as_deref())
    }

    /// The direction in effect: as asked, else descending for times and
    /// durations (newest, longest first) and ascending for names.
    pub fn order(&self) -> Order {
        self.order.unwrap_or(match self.sort {
            Sort::Name => Order::Asc,
            _ => Order::Desc,
        })
    }

    /// Whether the query filters nothing (every row matches).
    pub(crate) fn filters_nothing(&self) -> bool {
        self.states.is_none()
            && self.name.is_none()
            && self.started_after.is_none()
            && self.started_before.is_none()
            && self.ended_after.is_none()
            && self.ended_before.is_none()
            && self.min_duration_ms.is_none()
            && self.query_hash.is_none()
            && self.scheduler_ids.is_none()
    }

    /// Whether the query filters on states only (no other filter).
    pub(crate) fn filters_states_only(&self) -> bool {
        ListQuery {
            states: None,
            ..self.clone()
        }
        .filters_nothing()
    }

    /// Whether the order is the default one (newest queued first).
    pub(crate) fn default_order(&self) -> bool {
        self.sort == Sort::QueuedTime && self.order() == Order::Desc
    }

    /// Whether jobs known only from `.running` logs are asked for.
    pub fn wants_unfinished(&self) -> bool {
        self.include_unfinished
            || self
                .states
                .as_ref()
                .is_some_and(|s| s.iter().any(|s| s.is_unfinished()))
    }

    /// Whether `facts` passes every filter.
    pub(crate) fn matches(&self, facts: &(impl JobFacts + ?Sized)) -> bool {
        if let Some(states) = &self.states
            && !states.contains(&facts.state())
        {
            return false;
        }
        if let Some(needle) = &self.name
            && !contains_ignore_case(facts.job_name(), needle)
        {
            return false;
        }
        let within = |t: u64, after: Option<u64>, before: Option<u64>| {
            after.is_none_or(|a| t != 0 && t >= a) && before.is_none_or(|b| t != 0 && t <= b)
        };
        if !within(facts.start_time(), self.started_after, self.started_before)
            || !within(facts.end_time(), self.ended_after, self.ended_before)
        {
            return false;
        }
        if let Some(min) = self.min_duration_ms
            && facts.duration().is_none_or(|d| d < min)
        {
            return false;
        }
        if let Some(hash) = self.query_hash
            && facts.query_hash() != hash
        {
            return false;
        }
        if let Some(ids) = &self.scheduler_ids
            && !facts
                .scheduler_id()
                .is_some_and(|id| ids.iter().any(|i| i == id))
        {
            return false;
        }
        true
    }

    /// The numeric sort key of a job (0 for a sort by name).
    fn key(&self, job: &(impl JobFacts + ?Sized)) -> u64 {
        match self.sort {
            Sort::Name => 0,
            sort => numeric(job, sort),
        }
    }

    /// The query's total order over jobs (sort key, then job id), with both
    /// keys already known, so a sort reads each job's facts once rather
    /// than at every comparison.
    fn compare_keyed(
        &self,
        key_a: u64,
        a: &(impl JobFacts + ?Sized),
        key_b: u64,
        b: &(impl JobFacts + ?Sized),
    ) -> Ordering {
        let primary = match self.sort {
            // Lowercase, char by char (the order of the lowercased
            // strings, without allocating them), then as written.
            Sort::Name => a
                .job_name()
                .chars()
                .flat_map(char::to_lowercase)
                .cmp(b.job_name().chars().flat_map(char::to_lowercase))
                .then_with(|| a.job_name().cmp(b.job_name())),
            _ => key_a.cmp(&key_b),
        };
        let primary = match self.order() {
            Order::Asc => primary,
            Order::Desc => primary.reverse(),
        };
        primary.then_with(|| a.job_id().cmp(b.job_id()))
    }

    /// Filters, orders and pages `jobs`: the one pass every list takes
    /// (the catalog's default order aside, which pages without it). Gives
    /// the page and how many jobs matched. `cursor` is the job of `after`
    /// or, when the query has `before`, of `before`.
    ///
    /// With a limit, the candidates are kept in a buffer of a few pages,
    /// cut back to the best page whenever it fills, rather than collected
    /// whole: a sort over a million jobs then writes a few kilobytes, not
    /// tens of megabytes, and partitions small slices that stay in cache.
    pub(crate) fn pick<T: JobFacts>(
        &self,
        jobs: impl Iterator<Item = T>,
        cursor: Option<&Facts>,
    ) -> (Vec<T>, usize) {
        let backwards = self.before.is_some();
        // Walking back, the page is taken in the reverse order, then turned.
        let order = |a: &(u64, T), b: &(u64, T)| {
            let o = self.compare_keyed(a.0, &a.1, b.0, &b.1);
            if backwards { o.reverse() } else { o }
        };
        let keep = if backwards {
            Ordering::Less
        } else {
            Ordering::Greater
        };
        let at = cursor.map(|c| (self.key(c), c));
        let wanted = self.limit.map(|l| self.offset.saturating_add(l));
        let cap = wanted.map(|w| w.saturating_mul(2).max(PICK_BUFFER));
        let (mut matching, mut total) = (Vec::new(), 0);
        for j in jobs.filter(|j| self.matches(j)) {
            // Every match counts, on either side of the cursor.
            total += 1;
            let k = self.key(&j);
            if at.is_some_and(|(at, c)| self.compare_keyed(k, &j, at, c) != keep) {
                continue;
            }
            matching.push((k, j));
            if let (Some(wanted @ 1..), Some(cap)) = (wanted, cap)
                && matching.len() >= cap
            {
                matching.select_nth_unstable_by(wanted - 1, order);
                matching.truncate(wanted);
            }
        }
        let end = wanted.unwrap_or(matching.len()).min(matching.len());
        if end > 0 && end < matching.len() {
            matching.select_nth_unstable_by(end - 1, order);
            matching.truncate(end);
        }
        matching.sort_by(order);
        let mut page: Vec<T> = matching
            .into_iter()
            .skip(self.offset)
            .map(|(_, j)| j)
            .collect();
        if backwards {
            page.reverse();
        }
        (page, total)
    }

    /// `ListQuery::pick` over rows a source holds in memory (the live
    /// scheduler's, a merge of pages).
    pub fn select(&self, rows: Vec<Row>, cursor: Option<&Facts>) -> Page {
        let (rows, total) = self.pick(rows.into_iter(), cursor);
        Page { rows, total }
    }
}

/// The longest `?name=` term, in characters: a job name is searched in
/// time linear in both, and a term longer than any name is no question.
pub const MAX_NAME_TERM: usize = 256;

/// Case-insensitive substring test; `needle` is already lowercase. Linear
/// in both lengths (`memchr::memmem` over the name lowercased into a
/// buffer this thread keeps, so a million names allocate nothing).
pub(crate) fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    thread_local! {
        static LOWER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    if needle.is_empty() {
        return true;
    }
    if haystack.is_ascii() {
        if haystack.len() < needle.len() {
            return false;
        }
        return LOWER.with_borrow_mut(|lower| {
            lower.clear();
            lower.extend(haystack.bytes().map(|b| b.to_ascii_lowercase()));
            memchr::memmem::find(lower, needle.as_bytes()).is_some()
        });
    }
    haystack.to_lowercase().contains(needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, name: &str, state: JobState, start: u64, end: u64) -> Row {
        // Queued 10 ms before it started; a job not started yet, at 1,000.
        let queued = if start == 0 { 1_000 } else { start - 10 };
        Row::new(
            Facts {
                job_id: id.into(),
                job_name: name.into(),
                state,
                queued_time: queued,
                start_time: start,
                end_time: end,
                query_hash: 0,
            },
            Bytes::from(id.to_string()),
        )
    }

    fn ids(page: &Page) -> Vec<&str> {
        page.rows.iter().map(|r| r.facts.job_id()).collect()
    }

    fn sample() -> Vec<Row> {
        vec![
            row("a", "Nightly ETL", JobState::Completed, 100, 400),
            row("b", "adhoc", JobState::Failed, 200, 250),
            row("c", "nightly report", JobState::Completed, 300, 310),
            row("d", "", JobState::Running, 350, 0),
            row("e", "queued one", JobState::Queued, 0, 0),
        ]
    }

    /// Pages of more jobs than the pass's buffer holds are the pages a
    /// full sort gives (the oracle: every job sorted by key then id).
    #[test]
    fn a_page_cut_from_a_buffer_is_the_page_of_a_full_sort() {
        let mut seed = 0x9e37_79b9_u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            seed >> 33
        };
        let jobs: Vec<Row> = (0..10_000)
            .map(|i| {
                // Few distinct durations: ties are broken by id.
                let start = 1_000 + next() % 5_000;
                let end = if next() % 10 == 0 {
                    0
                } else {
                    start + next() % 40
                };
                let id = format!("j{:05}", next() % 100_000 * 10 + i % 10);
                row(&id, "x", JobState::Completed, start, end)
            })
            .collect();
        let key = |r: &Row| r.facts.duration().unwrap_or(u64::MAX);
        for order in [Order::Desc, Order::Asc] {
            let mut all: Vec<&Row> = jobs.iter().collect();
            all.sort_by(|a, b| {
                let primary = key(a).cmp(&key(b));
                let primary = if order == Order::Desc {
                    primary.reverse()
                } else {
                    primary
                };
                primary.then_with(|| a.facts.job_id().cmp(b.facts.job_id()))
            });
            let want_ids = |rows: &[&Row]| -> Vec<String> {
                rows.iter().map(|r| r.facts.job_id().to_string()).collect()
            };
            for limit in [Some(1), Some(100), Some(5_000), None] {
                for offset in [0, 7] {
                    for at in [None, Some(0), Some(4_321), Some(9_999)] {
                        for backwards in [false, true] {
                            if backwards && at.is_none() {
                                continue;
                            }
                            let cursor = at.map(|p| {
                                let f = &all[p].facts;
                                Facts {
                                    job_id: f.job_id().into(),
                                    job_name: f.job_name().into(),
                                    state: f.state(),
                                    queued_time: f.queued_time(),
                                    start_time: f.start_time(),
                                    end_time: f.end_time(),
                                    query_hash: 0,
                                }
                            });
                            let q = ListQuery {
                                sort: Sort::Duration,
                                order: Some(order),
                                limit,
                                offset,
                                before: backwards.then(|| "x".into()),
                                ..ListQuery::default()
                            };
                            let page = q.select(jobs.clone(), cursor.as_ref());
                            let take = limit.unwrap_or(usize::MAX);
                            let want: Vec<&Row> = match (at, backwards) {
                                (None, _) => all.iter().skip(offset).take(take).copied().collect(),
                                (Some(p), false) => all[p + 1..]
                                    .iter()
                                    .skip(offset)
                                    .take(take)
                                    .copied()
                                    .collect(),
                                (Some(p), true) => {
                                    let mut w: Vec<&Row> = all[..p]
                                        .iter()
                                        .rev()
                                        .skip(offset)
                                        .take(take)
                                        .copied()
                                        .collect();
                                    w.reverse();
                                    w
                                }
                            };
                            let what = format!("{order:?} {limit:?} +{offset} {at:?} {backwards}");
                            assert_eq!(ids(&page), want_ids(&want), "{what}");
                            assert_eq!(page.total, jobs.len(), "{what}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn no_parameter_lists_everything_newest_first() {
        let q = ListQuery::default();
        assert!(q.filters_nothing() && q.default_order());
        let page = q.select(sample(), None);
        assert_eq!(ids(&page), ["e", "d", "c", "b", "a"]);
        assert_eq!(page.total, 5);
    }

    #[test]
    fn filters_and_sorts() {
        let select = |q: ListQuery| {
            let page = q.select(sample(), None);
            ids(&page).iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let d = ListQuery::default;
        let sorted = |sort, order| ListQuery { sort, order, ..d() };
        use JobState::*;
        let states = Some(vec![Completed, Failed]);
        assert_eq!(select(ListQuery { states, ..d() }), ["c", "b", "a"]);
        let name = Some("nightly".into());
        assert_eq!(select(ListQuery { name, ..d() }), ["c", "a"]);
        let (started_after, started_before) = (Some(200), Some(300));
        let started = ListQuery {
            started_after,
            started_before,
            ..d()
        };
        assert_eq!(select(started), ["c", "b"]);
        let ended_after = Some(300);
        assert_eq!(select(ListQuery { ended_after, ..d() }), ["c", "a"]);
        let ended_before = Some(300);
        assert_eq!(
            select(ListQuery {
                ended_before,
                ..d()
            }),
            ["b"]
        );
        let min_duration_ms = Some(50);
        assert_eq!(
            select(ListQuery {
                min_duration_ms,
                ..d()
            }),
            ["b", "a"]
        );
        let (asc, desc) = (Some(Order::Asc), Some(Order::Desc));
        let by_duration = select(sorted(Sort::Duration, None));
        assert_eq!(by_duration, ["d", "e", "a", "b", "c"]);
        let by_duration = select(sorted(Sort::Duration, asc));
        assert_eq!(by_duration, ["c", "b", "a", "d", "e"]);
        let by_end = select(sorted(Sort::EndTime, asc));
        assert_eq!(by_end, ["b", "c", "a", "d", "e"]);
        assert_eq!(select(sorted(Sort::Name, None)), ["d", "b", "a", "c", "e"]);
        let last_name = ListQuery {
            limit: Some(1),
            ..sorted(Sort::Name, desc)
        };
        assert_eq!(select(last_name), ["e"]);
        let by_queue = select(sorted(Sort::QueuedTime, asc));
        assert_eq!(by_queue, ["a", "b", "c", "d", "e"]);
    }

    /// A queued job that starts keeps its place in the default order, and
    /// a cursor taken before it started still names the same position:
    /// under a start-time order the same walk skips a job.
    #[test]
    fn the_default_order_does_not_move_when_jobs_start() {
        let job = |id: &str, queued: u64, start: u64| {
            let state = if start == 0 {
                JobState::Queued
            } else {
                JobState::Running
            };
            let mut r = row(id, "", state, start, 0);
            r.facts = Arc::new(Facts {
                queued_time: queued,
                ..Facts::of(&*r.facts)
            });
            r
        };
        let walk = |sort| {
            let q = ListQuery {
                limit: Some(1),
                sort,
                ..ListQuery::default()
            };
            // Two jobs queued (at 20 and 30), one done (queued at 10).
            let before = vec![job("q1", 20, 0), job("q2", 30, 0), job("a", 10, 11)];
            let first = q.select(before, None);
            let cursor = Facts::of(&*first.rows[0].facts);
            // The first page's job starts first, then the other one.
            let (early, late) = if cursor.job_id.as_ref() == "q1" {
                (("q1", 20), ("q2", 30))
            } else {
                (("q2", 30), ("q1", 20))
            };
            let after = vec![
                job(early.0, early.1, 40),
                job(late.0, late.1, 50),
                job("a", 10, 11),
            ];
            let cursor = after
                .iter()
                .find(|r| r.facts.job_id() == cursor.job_id.as_ref())
                .map(|r| Facts::of(&*r.facts))
                .unwrap();
            let unlimited = ListQuery {
                limit: None,
                ..q.clone()
            };
            let rest = unlimited.select(after, Some(&cursor));
            let mut seen: Vec<String> = ids(&first).iter().map(|s| s.to_string()).collect();
            seen.extend(ids(&rest).iter().map(|s| s.to_string()));
            seen
        };
        assert_eq!(walk(Sort::QueuedTime), ["q2", "q1", "a"]);
        assert_eq!(
            walk(Sort::StartTime),
            ["q1", "a"],
            "the moving key skips q2"
        );
    }

    #[test]
    fn pages_and_cursor() {
        let q = ListQuery {
            limit: Some(2),
            offset: 1,
            ..ListQuery::default()
        };
        let page = q.select(sample(), None);
        assert_eq!(ids(&page), ["d", "c"]);
        assert_eq!(page.total, 5);
        let q = ListQuery { offset: 0, ..q };
        let cursor = Facts::of(&*sample()[2].facts);
        assert_eq!(ids(&q.select(sample(), Some(&cursor))), ["b", "a"]);
    }

    /// Regression: a long term against a long name was compared at every
    /// offset (quadratic), under the catalog's read lock.
    #[test]
    fn the_name_search_is_bounded_and_finds_what_a_plain_search_finds() {
        for (name, term, found) in [
            ("Nightly ETL", "etl", true),
            ("Nightly ETL", "ly e", true),
            ("Nightly ETL", "etl!", false),
            ("Ünïcode Läuft", "läuft", true),
            ("Ünïcode Läuft", "LÄUFT", false),
            ("short", "much longer than it", false),
        ] {
            let plain = name.to_lowercase().contains(term);
            assert_eq!(plain, found, "{name} {term}");
            assert_eq!(contains_ignore_case(name, term), found, "{name} {term}");
        }
        let hay = format!("{}b", "a".repeat(100_000));
        assert!(contains_ignore_case(&hay, &format!("{}b", "a".repeat(255))));
        assert!(!contains_ignore_case(
            &hay,
            &format!("{}c", "a".repeat(255))
        ));
    }
}
