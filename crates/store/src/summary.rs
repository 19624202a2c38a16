//! What the store keeps per completed job, and the in-memory catalog of
//! them: one compact [`JobSummary`] per job, shared by the id set and the
//! newest-first order.

use super::*;
use bjh_format::origin::{HISTORY, is_history};

/// What the index keeps per completed job: the facts the list filters and
/// sorts on, and the rest of its list entry.
///
/// Kept small, since a directory may hold millions of jobs: the strings
/// (id, name, long status, and the short status and file name only when
/// they cannot be derived) share one allocation, and the file name is
/// derived from the id when the log is named `<id>.eventlog[.zst]`.
#[derive(Debug, Clone)]
pub struct JobSummary {
    /// Id, name, long status, short status, file name, concatenated.
    pub(super) text: Box<str>,
    /// Where the id, name, long status and short status end in `text`.
    pub(super) ends: [u32; 4],
    pub(super) queued_time: u64,
    pub(super) start_time: u64,
    pub(super) query_hash: u64,
    pub(super) end_time: u64,
    /// Progress records dropped under backpressure.
    pub dropped_records: u64,
    /// The log's size when indexed.
    pub(super) len: u64,
    /// The log's modification time when indexed: nanoseconds from the
    /// epoch, [`i64::MIN`] when unknown.
    pub(super) modified: i64,
    /// Number of stages.
    pub num_stages: u32,
    /// Number of completed stages.
    pub completed_stages: u32,
    pub(super) state: JobState,
    /// Percentage of completed stages.
    pub percent_complete: u8,
    pub(super) file: FileKind,
    /// Where each payload sits in a log without a footer, learnt when it
    /// was indexed (a log with a footer states them itself).
    pub(super) ranges: Option<Box<PayloadRanges>>,
    /// The scheduler that ran the job and its usage tags, when its log
    /// says: one pointer shared by every job with the same pair (see
    /// [`Shared`]); `None` when the log states neither.
    pub(super) shared: Option<Arc<Shared>>,
    /// Busy and failed slot-milliseconds (`format::usage`); [`UNKNOWN`]
    /// when the log does not state them.
    pub(super) slot_ms: [u64; 2],
}

/// What the jobs of one scheduler mostly have in common: its id and their
/// usage tags (a JSON object's text). Held once for each distinct pair,
/// behind one thin pointer a job: two shared strings a job cost 32 bytes
/// of pointers, this 8, and the summary's allocation falls from 192 to
/// 160 bytes.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Shared {
    scheduler: Option<Arc<str>>,
    tags: Option<Arc<str>>,
}

impl Shared {
    /// The pair, shared with every other job that has it (`None` when
    /// neither is known). Past [`MAX_SHARED_SCHEDULERS`] distinct pairs a
    /// pair is a job's own.
    fn of(scheduler: Option<&str>, tags: Option<&str>) -> Option<Arc<Self>> {
        let scheduler = scheduler.filter(|s| !s.is_empty());
        let tags = tags.filter(|t| !t.is_empty());
        if scheduler.is_none() && tags.is_none() {
            return None;
        }
        // Jobs come in runs of a few pairs (a directory, an index, a
        // segment): the last pairs this thread made answer most calls
        // without the lock or a copy of the strings.
        thread_local! {
            static RECENT: std::cell::RefCell<[Option<Arc<Shared>>; 4]> =
                const { std::cell::RefCell::new([None, None, None, None]) };
        }
        let is =
            |p: &&Arc<Shared>| p.scheduler.as_deref() == scheduler && p.tags.as_deref() == tags;
        if let Some(hit) = RECENT.with_borrow(|recent| recent.iter().flatten().find(is).cloned()) {
            return Some(hit);
        }
        static PAIRS: std::sync::LazyLock<
            parking_lot::Mutex<std::collections::HashSet<Arc<Shared>>>,
        > = std::sync::LazyLock::new(Default::default);
        let pair = Self {
            scheduler: scheduler.map(intern),
            tags: tags.map(intern),
        };
        let mut pairs = PAIRS.lock();
        let shared = match pairs.get(&pair) {
            Some(known) => known.clone(),
            None => {
                let new = Arc::new(pair);
                if pairs.len() < MAX_SHARED_SCHEDULERS {
                    pairs.insert(new.clone());
                }
                new
            }
        };
        drop(pairs);
        RECENT.with_borrow_mut(|recent| {
            recent.rotate_right(1);
            recent[0] = Some(shared.clone());
        });
        Some(shared)
    }
}

/// A slot time the log does not state.
const UNKNOWN: u64 = u64::MAX;

/// Distinct scheduler ids kept shared at most; past this a job's id is
/// its own allocation (a directory of hostile logs, each naming another
/// scheduler, costs what storing the ids per job would).
const MAX_SHARED_SCHEDULERS: usize = 4096;

/// `id`, shared with every other job that names the same scheduler.
pub fn intern(id: &str) -> Arc<str> {
    // Jobs come in runs of one scheduler (a directory, an index): the last
    // id this thread interned answers most calls without the lock.
    thread_local! {
        static LAST: std::cell::RefCell<Option<Arc<str>>> = const { std::cell::RefCell::new(None) };
    }
    if let Some(last) = LAST.with_borrow(|last| last.as_ref().filter(|l| ***l == *id).cloned()) {
        return last;
    }
    let shared = intern_shared(id);
    LAST.set(Some(shared.clone()));
    shared
}

fn intern_shared(id: &str) -> Arc<str> {
    static SHARED: std::sync::LazyLock<parking_lot::Mutex<std::collections::HashSet<Arc<str>>>> =
        std::sync::LazyLock::new(Default::default);
    let mut shared = SHARED.lock();
    if let Some(known) = shared.get(id) {
        return known.clone();
    }
    let new: Arc<str> = Arc::from(id);
    if shared.len() < MAX_SHARED_SCHEDULERS {
        shared.insert(new.clone());
    }
    new
}

/// The byte range (`[offset, length]`) of each payload inside the `JobEnd`
/// line of a plain log without a footer, as the footer would state them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PayloadRanges(pub [[u64; 2]; 5]);

impl PayloadRanges {
    /// The payloads, in the order of the array.
    pub const NAMES: [&'static str; 5] = [
        bjh_format::record::payload::JOB,
        bjh_format::record::payload::STAGES,
        bjh_format::record::payload::CONFIG,
        bjh_format::record::payload::DOT,
        bjh_format::record::payload::RESPONSES,
    ];

    /// Sets the range of `name`.
    pub(super) fn set(&mut self, name: &str, range: [u64; 2]) {
        if let Some(i) = Self::NAMES.iter().position(|n| *n == name) {
            self.0[i] = range;
        }
    }

    /// The ranges present, by name, as a footer holds them.
    pub(super) fn to_map(self) -> std::collections::BTreeMap<String, [u64; 2]> {
        Self::NAMES
            .iter()
            .zip(self.0)
            .filter(|(_, r)| r[1] > 0)
            .map(|(n, r)| (n.to_string(), r))
            .collect()
    }
}

/// How a completed log's file name is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FileKind {
    /// `<id>.eventlog`.
    Plain,
    /// `<id>.eventlog.zst`.
    Zstd,
    /// Any other name; kept at the end of the summary's text.
    Named,
}

impl FileKind {
    pub(super) fn of(id: &str, file_name: &str) -> Self {
        match file_name.strip_prefix(id) {
            Some(bjh_format::name::COMPLETED_SUFFIX) => Self::Plain,
            Some(bjh_format::name::ZST_COMPLETED_SUFFIX) => Self::Zstd,
            _ => Self::Named,
        }
    }
}

/// The parts of a [`JobSummary`], borrowed.
#[derive(Debug, Clone, Copy)]
pub struct SummaryParts<'a> {
    /// Id, name, state, queue, start and end times.
    pub facts: FactsRef<'a>,
    /// Long status text.
    pub job_status: &'a str,
    /// Short status word.
    pub status: &'a str,
    /// Stages and completed stages.
    pub stages: [u32; 2],
    /// Percentage of completed stages.
    pub percent_complete: u8,
    /// Progress records dropped under backpressure.
    pub dropped_records: u64,
    /// The log's file name within the directory.
    pub file_name: &'a str,
    /// The log's size when indexed.
    pub len: u64,
    /// The log's modification time when indexed.
    pub modified: Option<SystemTime>,
    /// Payload ranges learnt from a log without a footer.
    pub ranges: Option<PayloadRanges>,
    /// The scheduler that ran the job, when its log says.
    pub scheduler_id: Option<&'a str>,
    /// Its slot time, when its log states it.
    pub usage: Option<SlotUsage>,
    /// Its usage tags as a JSON object's text (`None`: none).
    pub tags: Option<&'a str>,
}

impl JobSummary {
    pub(super) fn new(
        summary: JobEndSummary,
        ranges: Option<PayloadRanges>,
        id: &str,
        file_name: &str,
        stamp: Stamp,
    ) -> Self {
        let summary = crate::read::bounded(summary, id);
        let query_hash = summary.query_hash();
        match (&summary.stated_label, &summary.plans.logical_plan) {
            (Some(label), _) => crate::labels::remember(query_hash, Some(label)),
            (None, Some(plan)) => {
                crate::labels::remember(query_hash, bjh_format::label::query_label(plan).as_deref())
            }
            (None, None) => {}
        }
        let i = summary.index;
        let tags = (!summary.tags.is_empty())
            .then(|| serde_json::to_string(&summary.tags).ok())
            .flatten();
        let state = match summary.status {
            JobEndStatus::Succeeded => JobState::Completed,
            JobEndStatus::Failed(_) => JobState::Failed,
            JobEndStatus::Cancelled => JobState::Cancelled,
        };
        Self::restore(SummaryParts {
            facts: FactsRef {
                job_id: id,
                job_name: &i.job_name,
                state,
                queued_time: summary.queued_at,
                start_time: i.start_time,
                end_time: i.end_time,
                query_hash,
            },
            job_status: &i.job_status,
            status: &i.status,
            stages: [i.num_stages as u32, i.completed_stages as u32],
            percent_complete: i.percent_complete,
            dropped_records: summary.dropped_records,
            file_name,
            len: stamp.len,
            modified: stamp.modified,
            ranges,
            scheduler_id: summary.scheduler_id.as_deref(),
            usage: summary.usage,
            tags: tags.as_deref(),
        })
    }

    /// Builds a summary from its parts (the persistent index does; so do
    /// benchmarks that need many jobs without many files).
    pub fn restore(p: SummaryParts<'_>) -> Self {
        let f = p.facts;
        let word = if p.status == f.state.status_word() {
            ""
        } else {
            p.status
        };
        let file = FileKind::of(f.job_id, p.file_name);
        let named = if file == FileKind::Named {
            p.file_name
        } else {
            ""
        };
        let pieces = [f.job_id, f.job_name, p.job_status, word, named];
        let mut text = String::with_capacity(pieces.iter().map(|s| s.len()).sum());
        let mut ends = [0u32; 4];
        for (i, piece) in pieces.iter().enumerate() {
            text.push_str(piece);
            if let Some(end) = ends.get_mut(i) {
                *end = u32::try_from(text.len()).unwrap_or(u32::MAX);
            }
        }
        Self {
            text: text.into_boxed_str(),
            ends,
            queued_time: f.queued_time,
            start_time: f.start_time,
            end_time: f.end_time,
            query_hash: f.query_hash,
            dropped_records: p.dropped_records,
            len: p.len,
            modified: p.modified.map_or(i64::MIN, nanos_since_epoch),
            num_stages: p.stages[0],
            completed_stages: p.stages[1],
            state: f.state,
            percent_complete: p.percent_complete,
            file,
            ranges: p.ranges.map(Box::new),
            shared: Shared::of(p.scheduler_id, p.tags),
            slot_ms: p.usage.map_or([UNKNOWN; 2], |u| {
                [u.busy_slot_ms.min(UNKNOWN - 1), u.failed_slot_ms]
            }),
        }
    }

    /// A summary that only sorts like a job with these facts (a cursor).
    pub(super) fn probe(facts: &Facts) -> Self {
        Self::restore(SummaryParts {
            facts: FactsRef {
                job_id: &facts.job_id,
                job_name: "",
                state: JobState::Completed,
                queued_time: facts.queued_time,
                start_time: facts.start_time,
                end_time: facts.end_time,
                query_hash: facts.query_hash,
            },
            job_status: "",
            status: "",
            stages: [0, 0],
            percent_complete: 0,
            dropped_records: 0,
            file_name: "",
            len: 0,
            modified: None,
            ranges: None,
            scheduler_id: None,
            usage: None,
            tags: None,
        })
    }

    pub(super) fn piece(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        let end = self.ends.get(i).map_or(self.text.len(), |&e| e as usize);
        self.text.get(start..end).unwrap_or("")
    }

    /// The log's size when it was indexed.
    pub fn log_len(&self) -> u64 {
        self.len
    }

    /// The long status text.
    pub fn job_status(&self) -> &str {
        self.piece(2)
    }

    /// The short status word of the list entry, as the log has it.
    pub fn status(&self) -> &str {
        match self.piece(3) {
            "" => self.state.status_word(),
            word => word,
        }
    }

    /// The log's file name within the directory.
    pub fn file_name(&self) -> std::borrow::Cow<'_, str> {
        match self.file {
            FileKind::Plain => {
                format!("{}{}", self.job_id(), bjh_format::name::COMPLETED_SUFFIX).into()
            }
            FileKind::Zstd => format!(
                "{}{}",
                self.job_id(),
                bjh_format::name::ZST_COMPLETED_SUFFIX
            )
            .into(),
            FileKind::Named => self.piece(4).into(),
        }
    }

    /// Whether the log is `name`.
    pub(super) fn is_file(&self, name: &str) -> bool {
        match self.file {
            FileKind::Named => self.piece(4) == name,
            kind => FileKind::of(self.job_id(), name) == kind,
        }
    }

    /// The job's slot time, when its log states it.
    pub fn usage(&self) -> Option<SlotUsage> {
        let [busy_slot_ms, failed_slot_ms] = self.slot_ms;
        (busy_slot_ms != UNKNOWN).then_some(SlotUsage {
            busy_slot_ms,
            failed_slot_ms,
        })
    }

    /// The usage tags its footer states, as a JSON object's text.
    pub fn tags(&self) -> Option<&str> {
        self.shared.as_ref()?.tags.as_deref()
    }

    /// The scheduler that ran the job, shared with its other jobs.
    pub(super) fn scheduler(&self) -> Option<&Arc<str>> {
        self.shared.as_ref()?.scheduler.as_ref()
    }

    /// Payload ranges learnt when a log without a footer was indexed.
    pub fn ranges(&self) -> Option<PayloadRanges> {
        self.ranges.as_deref().copied()
    }

    /// The log's size and modification time when it was indexed.
    pub fn stamp(&self) -> Stamp {
        Stamp {
            len: self.len,
            modified: (self.modified != i64::MIN).then(|| time_from_nanos(self.modified)),
        }
    }

    /// The job's `GET /api/jobs` entry: the scheduler's wire type
    /// (`JobResponse` without plans), serialized from borrowed fields.
    pub(crate) fn entry(&self) -> Bytes {
        let mut out = Vec::with_capacity(160 + self.text.len());
        self.write_entry(&mut out, &crate::labels::all());
        out.into()
    }

    /// Appends [`JobSummary::entry`] to `out`, its label from `labels`.
    pub(crate) fn write_entry(&self, out: &mut Vec<u8>, labels: &crate::labels::Labels) {
        /// `ballista_api_types::dto::JobResponse` as the list serializes it
        /// (plans absent), field for field.
        #[derive(serde::Serialize)]
        struct Entry<'a> {
            job_id: &'a str,
            job_name: &'a str,
            job_status: &'a str,
            status: &'a str,
            num_stages: u32,
            completed_stages: u32,
            percent_complete: u8,
            start_time: u64,
            end_time: u64,
            /// Ours: `null` when the log does not say.
            scheduler_id: Option<&'a str>,
            /// Ours: the query's label (`null`: none known).
            query_label: Option<&'a str>,
            /// Ours: slot-milliseconds (`null`: the log does not say).
            busy_slot_ms: Option<u64>,
            failed_slot_ms: Option<u64>,
            /// Ours: `"history"` for the history's own jobs (`format::origin`).
            #[serde(skip_serializing_if = "Option::is_none")]
            origin: Option<&'static str>,
        }
        let usage = self.usage();
        let entry = Entry {
            job_id: self.job_id(),
            job_name: self.job_name(),
            job_status: self.job_status(),
            status: self.status(),
            num_stages: self.num_stages,
            completed_stages: self.completed_stages,
            percent_complete: self.percent_complete,
            start_time: self.start_time,
            end_time: self.end_time,
            scheduler_id: self.scheduler().map(|s| &**s),
            query_label: labels.get(self.query_hash),
            busy_slot_ms: usage.map(|u| u.busy_slot_ms),
            failed_slot_ms: usage.map(|u| u.failed_slot_ms),
            origin: is_history(self.job_name()).then_some(HISTORY),
        };
        let _ = serde_json::to_writer(out, &entry);
    }
}

impl JobFacts for JobSummary {
    #[inline]
    fn facts(&self) -> FactsRef<'_> {
        Facts {
            job_id: self.piece(0),
            job_name: self.piece(1),
            state: self.state,
            queued_time: self.queued_time,
            start_time: self.start_time,
            end_time: self.end_time,
            query_hash: self.query_hash,
        }
    }
    // Each fact read on its own: a sort or a filter over a million jobs
    // reads one or two of them per job, through `dyn JobFacts`, where
    // `facts()` would cut both strings out of `text` every time.
    fn job_id(&self) -> &str {
        self.piece(0)
    }
    fn job_name(&self) -> &str {
        self.piece(1)
    }
    fn state(&self) -> JobState {
        self.state
    }
    fn queued_time(&self) -> u64 {
        self.queued_time
    }
    fn start_time(&self) -> u64 {
        self.start_time
    }
    fn end_time(&self) -> u64 {
        self.end_time
    }
    fn query_hash(&self) -> u64 {
        self.query_hash
    }
    fn dropped_records(&self) -> u64 {
        self.dropped_records
    }
    fn scheduler_id(&self) -> Option<&str> {
        self.scheduler().map(|s| &**s)
    }
}

/// A job a full-list pass walks: an indexed one or an unfinished one.
/// An enum, not `&dyn JobFacts`: a sort over a million jobs reads two
/// facts of each, and a match inlines what a virtual call does not
/// (`sort=duration` over 1,000,000 jobs: 45 ms with the virtual calls).
#[derive(Debug, Clone, Copy)]
pub(super) enum Listed<'a> {
    /// An indexed (completed) job.
    Done(&'a JobSummary),
    /// A job known from its `.running` log.
    Open(&'a Tagged),
}

macro_rules! listed_fact {
    ($name:ident -> $ty:ty) => {
        #[inline]
        fn $name(&self) -> $ty {
            match self {
                Listed::Done(s) => s.$name(),
                Listed::Open(t) => t.$name(),
            }
        }
    };
}

impl JobFacts for Listed<'_> {
    listed_fact!(facts -> FactsRef<'_>);
    listed_fact!(job_id -> &str);
    listed_fact!(job_name -> &str);
    listed_fact!(state -> JobState);
    listed_fact!(queued_time -> u64);
    listed_fact!(start_time -> u64);
    listed_fact!(end_time -> u64);
    listed_fact!(query_hash -> u64);
    listed_fact!(dropped_records -> u64);
    listed_fact!(scheduler_id -> Option<&str>);
}

/// The rows of `jobs`: their entries are serialized into one buffer and
/// each row's is a slice of it; their facts are the index's own.
pub(super) fn rows_of<'a>(jobs: impl Iterator<Item = &'a Arc<JobSummary>>) -> Vec<Row> {
    let mut buffer = Vec::new();
    let mut spans = Vec::new();
    let labels = crate::labels::all();
    for job in jobs {
        let start = buffer.len();
        job.write_entry(&mut buffer, &labels);
        spans.push((job.clone(), start..buffer.len()));
    }
    let buffer = Bytes::from(buffer);
    spans
        .into_iter()
        .map(|(job, span)| Row {
            facts: job,
            entry: buffer.slice(span),
        })
        .collect()
}

pub(super) fn nanos_since_epoch(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN + 1, |n| -n),
    }
}

pub(super) fn time_from_nanos(n: i64) -> SystemTime {
    let d = Duration::from_nanos(n.unsigned_abs());
    if n >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

/// The index's handle on a summary, hashed and compared by job id, so the
/// set of summaries is also the map from id to summary.
#[derive(Debug, Clone)]
pub(super) struct ById(pub(super) Arc<JobSummary>);

impl std::hash::Hash for ById {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.job_id().hash(state);
    }
}

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.job_id() == other.0.job_id()
    }
}

impl Eq for ById {}

impl std::borrow::Borrow<str> for ById {
    fn borrow(&self) -> &str {
        self.0.job_id()
    }
}

/// The same summary in the default list order: newest queued first, then id.
#[derive(Debug, Clone)]
pub(super) struct ByPosition(pub(super) Arc<JobSummary>);

impl ByPosition {
    pub(super) fn key(&self) -> (Reverse<u64>, &str) {
        (Reverse(self.0.position_key()), self.0.job_id())
    }
}

ordered_by_key!(ByPosition);

/// The in-memory catalog of a log directory: completed jobs (by id and in
/// the default order), unfinished jobs, and logs known to be unreadable.
#[derive(Default)]
pub(super) struct Catalog {
    /// Completed jobs by id.
    pub(super) jobs: HashSet<ById>,
    /// The same jobs in the default order (newest queued first, then id),
    /// so the default list pages in O(page).
    pub(super) order: BTreeSet<ByPosition>,
    /// The same jobs by duration and by query, so a list sorted by
    /// duration or filtered by query pages in O(page) (see
    /// [`crate::orders`]: after a fill in bulk, they are built on a thread
    /// of their own, and the changes made meanwhile are replayed).
    pub(super) second: SecondOrders,
    /// Whether `second` is being built (it is empty meanwhile).
    pub(super) orders_pending: bool,
    /// The changes of the completed jobs made while it is built: the job,
    /// and whether it was added (or removed); `None` when none are kept
    /// (not being built, or too many changes to replay).
    pub(super) orders_journal: Option<Vec<(Arc<JobSummary>, bool)>>,
    /// Bumped at every fill in bulk, so a build of an earlier fill's
    /// order is not installed.
    pub(super) fills: u64,
    /// Completed logs not named `<id>.eventlog[.zst]`, by file name, so a
    /// rescan finds their jobs.
    pub(super) odd_names: HashMap<Box<str>, Box<str>>,
    /// Unfinished jobs (`.running` logs) by id.
    pub(super) unfinished: HashMap<Arc<str>, Unfinished>,
    /// Logs that could not be indexed, by file name, with the stamp they
    /// had: they are retried (and reported again) only when they change.
    pub(super) bad: HashMap<String, Stamp>,
    /// How many completed jobs are in each state (by [`JobState::index`]),
    /// kept with `jobs` so the counts cost nothing to read.
    pub(super) counts: [usize; JobState::ALL.len()],
    /// The same counts per scheduler, for the jobs whose logs name one.
    pub(super) by_scheduler: HashMap<Arc<str>, [usize; JobState::ALL.len()]>,
    /// Bumped at every change of the completed jobs.
    pub(super) version: u64,
    /// How far the jobs' times lie from their positions, at most.
    pub(super) spread: TimeSpread,
    /// The ids of the jobs added and removed (`journal`).
    pub(super) journal: Arc<crate::journal::Journal>,
}

/// How far a job's position key (its queue time, else its start) lies
/// from its start and end times, at most, over every job the catalog has
/// held since it was filled (never narrowed when one leaves, so it only
/// ever errs wide). A job starts after it is queued and ends after it
/// starts, so a filter on those times bounds the positions a matching
/// job can have ([`TimeSpread::bounds`]), and a pass walks that part of
/// the default order only. A log whose times disagree (a start before
/// its queue time, a lying log) widens the spread, never the answer.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TimeSpread {
    /// The key less the start, where the start is the earlier.
    key_after_start: u64,
    /// The key less the end, where the end is the earlier.
    key_after_end: u64,
    /// The start less the key: the longest wait in the queue.
    start_after_key: u64,
}

impl TimeSpread {
    /// Widened to hold `job`.
    pub(super) fn widen(&mut self, job: &JobSummary) {
        let key = job.position_key();
        if job.start_time > 0 {
            self.key_after_start = self.key_after_start.max(key.saturating_sub(job.start_time));
            self.start_after_key = self.start_after_key.max(job.start_time.saturating_sub(key));
        }
        if job.end_time > 0 {
            self.key_after_end = self.key_after_end.max(key.saturating_sub(job.end_time));
        }
    }

    /// The part of the default order that holds every job `q`'s time
    /// filters can match (all of it when it has none).
    pub(super) fn bounds(&self, q: &ListQuery) -> (Bound<ByPosition>, Bound<ByPosition>) {
        let at = |key: u64| {
            ByPosition(Arc::new(JobSummary::probe(&Facts {
                job_id: Arc::from(""),
                job_name: Arc::from(""),
                state: JobState::Completed,
                queued_time: key,
                start_time: key,
                end_time: 0,
                query_hash: 0,
            })))
        };
        // Keys run from 1 (0 is "unknown", placed last as the largest).
        let highest = [
            q.started_before
                .map(|b| b.saturating_add(self.key_after_start)),
            q.ended_before.map(|b| b.saturating_add(self.key_after_end)),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|k| k.max(1));
        let lowest = q
            .started_after
            .map(|a| a.saturating_sub(self.start_after_key))
            .filter(|&k| k > 1);
        let start = match highest {
            Some(hi) if hi < u64::MAX => Bound::Included(at(hi)),
            _ => Bound::Unbounded,
        };
        let end = match (lowest, highest) {
            // Nothing can match: an empty part.
            (Some(lo), Some(hi)) if lo > hi => Bound::Excluded(at(hi)),
            (Some(lo), _) => Bound::Excluded(at(lo - 1)),
            (None, _) => Bound::Unbounded,
        };
        (start, end)
    }
}

/// The ordered set, the id set, the odd names and the counts of a catalog
/// filled at once (from the persistent index, or by the first rescan of a
/// directory).
#[derive(Default)]
pub(super) struct CatalogSets {
    pub(super) order: BTreeSet<ByPosition>,
    pub(super) ids: HashSet<ById>,
    pub(super) odd_names: HashMap<Box<str>, Box<str>>,
    pub(super) counts: [usize; JobState::ALL.len()],
    pub(super) by_scheduler: HashMap<Arc<str>, [usize; JobState::ALL.len()]>,
    pub(super) spread: TimeSpread,
}

impl CatalogSets {
    /// Counts `job` (the sets are filled apart).
    pub(super) fn count(&mut self, job: &JobSummary) {
        self.spread.widen(job);
        let state = job.state.index();
        self.counts[state] += 1;
        if let Some(id) = job.scheduler() {
            match self.by_scheduler.get_mut(id) {
                Some(counts) => counts[state] += 1,
                None => self.by_scheduler.entry(id.clone()).or_default()[state] += 1,
            }
        }
    }
}

impl Catalog {
    /// Adds or replaces a job; true when it is new to the catalog.
    pub(super) fn insert(&mut self, summary: JobSummary) -> bool {
        let summary = Arc::new(summary);
        let new = self.remove(summary.job_id()).is_none();
        if summary.file == FileKind::Named {
            self.odd_names
                .insert(summary.file_name().into(), summary.job_id().into());
        }
        self.order.insert(ByPosition(summary.clone()));
        self.second_change(&summary, true);
        self.spread.widen(&summary);
        self.counts[summary.state.index()] += 1;
        if let Some(id) = summary.scheduler() {
            self.by_scheduler.entry(id.clone()).or_default()[summary.state.index()] += 1;
        }
        self.version += 1;
        self.journal.note(summary.job_id());
        self.jobs.insert(ById(summary));
        new
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Arc<JobSummary>> {
        let ById(old) = self.jobs.take(id)?;
        self.order.remove(&ByPosition(old.clone()));
        self.second_change(&old, false);
        self.counts[old.state.index()] -= 1;
        if let Some(id) = old.scheduler()
            && let Some(counts) = self.by_scheduler.get_mut(id)
        {
            counts[old.state.index()] -= 1;
            if counts.iter().all(|n| *n == 0) {
                self.by_scheduler.remove(id);
            }
        }
        self.version += 1;
        self.journal.note(old.job_id());
        if old.file == FileKind::Named {
            self.odd_names.remove(&*old.file_name());
        }
        Some(old)
    }

    /// How many completed jobs a query filtered by state at most
    /// matches, leaving out the ids in `skip`: the tallies', less the
    /// skipped jobs they count.
    pub(super) fn state_total(&self, q: &ListQuery, skip: &HashSet<String>) -> usize {
        let wanted = |s: JobState| q.states.as_ref().is_none_or(|w| w.contains(&s));
        let skipped = skip
            .iter()
            .filter_map(|id| self.get(id.as_str()))
            .filter(|s| wanted(s.state()))
            .count();
        JobState::ALL
            .iter()
            .filter(|(_, s)| wanted(*s))
            .map(|(_, s)| self.counts[s.index()])
            .sum::<usize>()
            - skipped
    }

    pub(super) fn get(&self, id: &str) -> Option<&Arc<JobSummary>> {
        self.jobs.get(id).map(|j| &j.0)
    }

    /// The completed job whose log is `name` (a `LogName` with `stem`).
    pub(super) fn by_file(&self, name: &str, stem: &str) -> Option<&Arc<JobSummary>> {
        let id = self.odd_names.get(name).map_or(stem, |id| id);
        self.get(id).filter(|s| s.is_file(name))
    }

    /// Lets go of the completed jobs, noting nothing: a move keeps them
    /// (in the segments); a caller dropping them from the store calls
    /// [`crate::journal::Journal::overflow`].
    pub(super) fn clear_completed(&mut self) {
        self.jobs.clear();
        self.order.clear();
        self.second = SecondOrders::default();
        self.orders_pending = false;
        self.orders_journal = None;
        self.fills += 1;
        self.odd_names.clear();
        self.counts = Default::default();
        self.by_scheduler.clear();
        self.spread = TimeSpread::default();
        self.version += 1;
    }

    /// Replaces the completed jobs with sets built in bulk; their order
    /// by duration and by query are to be built
    /// ([`LogStore::build_orders_later`]).
    pub(super) fn set_completed(&mut self, sets: CatalogSets) {
        self.version += 1;
        self.journal.overflow();
        self.jobs = sets.ids;
        self.order = sets.order;
        self.second = SecondOrders::default();
        self.orders_pending = true;
        self.orders_journal = Some(Vec::new());
        self.fills += 1;
        self.odd_names = sets.odd_names;
        self.counts = sets.counts;
        self.by_scheduler = sets.by_scheduler;
        self.spread = sets.spread;
    }
}
