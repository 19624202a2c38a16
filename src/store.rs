//! A log directory: the in-memory index of completed jobs, its rescans, and
//! reads of one job's terminal record.
//!
//! **Invariant:** the index holds only each job's list summary. A request
//! for a job reads that job's payload and nothing else: through the byte
//! ranges of the `Footer` our writer appends (one small read from the end
//! of the file, one seek per payload). A log without ranges has its
//! `JobEnd` line read whole: located by the footer, or, for logs without
//! one (upstream's), by reading backwards from the end to the start of the
//! last line. Only a log whose last record is neither falls back to a
//! forward scan.
//!
//! **Invariant:** a rescan of an unchanged directory costs one `stat` per
//! file and opens nothing. A `*.eventlog.running` file that grew is read
//! from where the last pass stopped, complete lines only.
//!
//! **Invariant:** job ids from requests are looked up in the index and never
//! joined into a path; only names read from the directory become paths.
//!
//! **Invariant:** one unreadable log is logged once (until it changes) and
//! hides nothing but itself.

use crate::metrics::HistoryMetrics;
use crate::query::{Facts, FactsRef, JobFacts, JobState, ListQuery, Page, Row};
use crate::record::{
    Envelope, Footer, JobEnd, JobEndStatus, JobEndSummary, JobStart, SCHEMA_VERSION, TaskEnd, kind,
};
use crate::remote::RemoteDir;
use crate::writer::{FOOTER_FRAME_MAGIC, FOOTER_FRAME_TAG, LogName};
use ballista_api_types::dto::JobResponse;
use bytes::Bytes;
use parking_lot::RwLock;
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::fs::ReadDir;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// Why a log could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be read.
    #[error("cannot read the event log: {0}")]
    Io(#[from] std::io::Error),
    /// The terminal record was written by a newer schema.
    #[error(
        "the event log's terminal record has schema version {found}, newer than the \
         supported version {SCHEMA_VERSION}; upgrade ballista-job-history to read it"
    )]
    NewerSchema {
        /// The version found.
        found: u32,
    },
    /// The terminal record is present but cannot be decoded.
    #[error("the event log's terminal record is malformed: {0}")]
    Malformed(String),
    /// The file has no terminal record (truncated, empty, or not a log).
    #[error("the event log has no terminal record (truncated or not an event log)")]
    NoTerminalRecord,
}

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
    text: Box<str>,
    /// Where the id, name, long status and short status end in `text`.
    ends: [u32; 4],
    start_time: u64,
    end_time: u64,
    /// Progress records dropped under backpressure.
    pub dropped_records: u64,
    /// The log's size when indexed.
    len: u64,
    /// The log's modification time when indexed: nanoseconds from the
    /// epoch, [`i64::MIN`] when unknown.
    modified: i64,
    /// Number of stages.
    pub num_stages: u32,
    /// Number of completed stages.
    pub completed_stages: u32,
    state: JobState,
    /// Percentage of completed stages.
    pub percent_complete: u8,
    file: FileKind,
}

/// How a completed log's file name is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    /// `<id>.eventlog`.
    Plain,
    /// `<id>.eventlog.zst`.
    Zstd,
    /// Any other name; kept at the end of the summary's text.
    Named,
}

impl FileKind {
    fn of(id: &str, file_name: &str) -> Self {
        match file_name.strip_prefix(id) {
            Some(crate::writer::COMPLETED_SUFFIX) => Self::Plain,
            Some(crate::writer::ZST_COMPLETED_SUFFIX) => Self::Zstd,
            _ => Self::Named,
        }
    }
}

/// The parts of a [`JobSummary`], borrowed.
#[derive(Debug, Clone, Copy)]
pub struct SummaryParts<'a> {
    /// Id, name, state, start and end.
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
}

impl JobSummary {
    fn new(summary: JobEndSummary, id: &str, file_name: &str, stamp: Stamp) -> Self {
        let i = summary.index;
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
                start_time: i.start_time,
                end_time: i.end_time,
            },
            job_status: &i.job_status,
            status: &i.status,
            stages: [i.num_stages as u32, i.completed_stages as u32],
            percent_complete: i.percent_complete,
            dropped_records: summary.dropped_records,
            file_name,
            len: stamp.len,
            modified: stamp.modified,
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
            start_time: f.start_time,
            end_time: f.end_time,
            dropped_records: p.dropped_records,
            len: p.len,
            modified: p.modified.map_or(i64::MIN, nanos_since_epoch),
            num_stages: p.stages[0],
            completed_stages: p.stages[1],
            state: f.state,
            percent_complete: p.percent_complete,
            file,
        }
    }

    /// A summary that only sorts like a job with these facts (a cursor).
    fn probe(start_time: u64, job_id: &str) -> Self {
        Self::restore(SummaryParts {
            facts: FactsRef {
                job_id,
                job_name: "",
                state: JobState::Completed,
                start_time,
                end_time: 0,
            },
            job_status: "",
            status: "",
            stages: [0, 0],
            percent_complete: 0,
            dropped_records: 0,
            file_name: "",
            len: 0,
            modified: None,
        })
    }

    fn piece(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        let end = self.ends.get(i).map_or(self.text.len(), |&e| e as usize);
        self.text.get(start..end).unwrap_or("")
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
                format!("{}{}", self.job_id(), crate::writer::COMPLETED_SUFFIX).into()
            }
            FileKind::Zstd => {
                format!("{}{}", self.job_id(), crate::writer::ZST_COMPLETED_SUFFIX).into()
            }
            FileKind::Named => self.piece(4).into(),
        }
    }

    /// Whether the log is `name`.
    fn is_file(&self, name: &str) -> bool {
        match self.file {
            FileKind::Named => self.piece(4) == name,
            kind => FileKind::of(self.job_id(), name) == kind,
        }
    }

    pub(crate) fn stamp(&self) -> Stamp {
        Stamp {
            len: self.len,
            modified: (self.modified != i64::MIN).then(|| time_from_nanos(self.modified)),
        }
    }

    /// The job's `GET /api/jobs` entry: the scheduler's wire type
    /// (`JobResponse` without plans), serialized from borrowed fields.
    pub fn entry(&self) -> Bytes {
        let mut out = Vec::with_capacity(160 + self.text.len());
        self.write_entry(&mut out);
        out.into()
    }

    /// Appends [`JobSummary::entry`] to `out`.
    pub fn write_entry(&self, out: &mut Vec<u8>) {
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
        }
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
        };
        let _ = serde_json::to_writer(out, &entry);
    }
}

impl JobFacts for JobSummary {
    fn job_id(&self) -> &str {
        self.piece(0)
    }
    fn job_name(&self) -> &str {
        self.piece(1)
    }
    fn state(&self) -> JobState {
        self.state
    }
    fn start_time(&self) -> u64 {
        self.start_time
    }
    fn end_time(&self) -> u64 {
        self.end_time
    }
}

/// The rows of `jobs`: their entries are serialized into one buffer and
/// each row's is a slice of it; their facts are the index's own.
fn rows_of<'a>(jobs: impl Iterator<Item = &'a Arc<JobSummary>>) -> Vec<Row> {
    let mut buffer = Vec::new();
    let mut spans = Vec::new();
    for job in jobs {
        let start = buffer.len();
        job.write_entry(&mut buffer);
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

fn nanos_since_epoch(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN + 1, |n| -n),
    }
}

fn time_from_nanos(n: i64) -> SystemTime {
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
struct ById(Arc<JobSummary>);

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

/// The same summary in the default list order: newest start first, then id.
#[derive(Debug, Clone)]
struct ByStart(Arc<JobSummary>);

impl ByStart {
    fn key(&self) -> (Reverse<u64>, &str) {
        (Reverse(self.0.start_key()), self.0.job_id())
    }
}

impl PartialEq for ByStart {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for ByStart {}

impl PartialOrd for ByStart {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByStart {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// What the index keeps per unfinished job (a `.running` log): its
/// `JobStart` fields and a running count of its progress records, read
/// incrementally as the file grows.
#[derive(Debug, Clone, Default)]
pub struct Unfinished {
    /// The job.
    pub job_id: Arc<str>,
    /// Its name, from `JobStart`.
    pub job_name: Arc<str>,
    /// When it was queued.
    pub queued_at: u64,
    /// When it was submitted (planning done).
    pub submitted_at: u64,
    /// Task attempts recorded so far.
    pub tasks: u64,
    /// Of which failed.
    pub failed_tasks: u64,
    /// Stages seen in task records.
    pub stages: std::collections::BTreeSet<u32>,
    /// The latest task end recorded (epoch millis).
    pub last_task_end: u64,
    /// The log's file name within the directory.
    pub file_name: Arc<str>,
    /// Bytes of complete lines read so far.
    scanned: u64,
    /// The log's size and modification time when it was read.
    pub(crate) stamp: Stamp,
}

impl Unfinished {
    /// `Running` while the log was written to within `abandoned_after`,
    /// `Abandoned` after that.
    pub fn state(&self, now: SystemTime, abandoned_after: Duration) -> JobState {
        match self.stamp.modified {
            _ if abandoned_after.is_zero() => JobState::Abandoned,
            Some(modified) if modified + abandoned_after < now => JobState::Abandoned,
            _ => JobState::Running,
        }
    }

    /// Filter and sort facts.
    pub fn facts(&self, state: JobState) -> Facts {
        Facts {
            job_id: self.job_id.clone(),
            job_name: self.job_name.clone(),
            state,
            start_time: if self.submitted_at > 0 {
                self.submitted_at
            } else {
                self.queued_at
            },
            end_time: 0,
        }
    }

    /// The long status text of the list entry and `GET /api/job/{id}`.
    pub fn job_status(&self, state: JobState) -> String {
        let progress = format!(
            "{} task attempts recorded ({} failed) in {} stages",
            self.tasks,
            self.failed_tasks,
            self.stages.len()
        );
        match state {
            JobState::Abandoned => {
                let since = self
                    .stamp
                    .modified
                    .map(|m| chrono::DateTime::<chrono::Utc>::from(m).to_rfc3339())
                    .unwrap_or_else(|| "an unknown time".into());
                format!(
                    "Abandoned: its event log was last written at {since} and never \
                     completed (the scheduler running it stopped); {progress}"
                )
            }
            _ => format!("Running (from its event log): {progress}"),
        }
    }

    /// The job's `GET /api/jobs` entry; with `plans`, its `GET /api/job/{id}`.
    pub fn response(&self, state: JobState, plans: Option<&JobStart>) -> Bytes {
        let facts = self.facts(state);
        let entry = JobResponse {
            job_id: self.job_id.to_string(),
            job_name: self.job_name.to_string(),
            job_status: self.job_status(state),
            status: state.status_word().to_string(),
            num_stages: self.stages.len(),
            completed_stages: 0,
            percent_complete: 0,
            start_time: facts.start_time,
            end_time: 0,
            logical_plan: plans.and_then(|p| p.logical_plan.clone()),
            physical_plan: plans.and_then(|p| p.physical_plan.clone()),
            stage_plan: None,
        };
        serde_json::to_vec(&entry).unwrap_or_default().into()
    }
}

/// A file's size and modification time, to tell whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Stamp {
    pub(crate) len: u64,
    pub(crate) modified: Option<SystemTime>,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// Where one log's bytes are: a local file, or an object in a store.
#[derive(Debug, Clone)]
pub enum LogRef {
    /// A local file.
    File(PathBuf),
    /// An object under a store's prefix, with its length as listed.
    Object {
        /// The store and prefix.
        dir: RemoteDir,
        /// The object's name under the prefix.
        name: Arc<str>,
        /// Its length.
        len: u64,
    },
}

/// A log opened for reading: a file, or an object read with ranged requests.
pub trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

impl LogRef {
    /// Opens the log, with its length.
    fn open(&self) -> std::io::Result<(Box<dyn ReadSeek>, u64)> {
        match self {
            Self::File(path) => {
                let file = File::open(path)?;
                let len = file.metadata()?.len();
                Ok((Box::new(file), len))
            }
            Self::Object { dir, name, len } => {
                let object = dir.open(name, *len);
                let len = object.len();
                Ok((Box::new(object), len))
            }
        }
    }

    /// The log's file name.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::File(path) => path.file_name().and_then(|n| n.to_str()),
            Self::Object { name, .. } => Some(name),
        }
    }

    /// Whether the log is zstd-compressed (by its name).
    pub fn is_zstd(&self) -> bool {
        self.name().and_then(LogName::parse).is_some_and(|n| n.zstd)
    }

    /// The log for messages: its path, or the store's URL and its name.
    fn shown(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Object { dir, name, .. } => format!("{}/{name}", dir.url().trim_end_matches('/')),
        }
    }
}

impl From<&Path> for LogRef {
    fn from(path: &Path) -> Self {
        Self::File(path.to_path_buf())
    }
}

impl From<&PathBuf> for LogRef {
    fn from(path: &PathBuf) -> Self {
        Self::File(path.clone())
    }
}

impl From<PathBuf> for LogRef {
    fn from(path: PathBuf) -> Self {
        Self::File(path)
    }
}

impl From<&LogRef> for LogRef {
    fn from(log: &LogRef) -> Self {
        log.clone()
    }
}

/// The log-named entries of a directory or a store prefix, with stamps.
enum Entries {
    Local(ReadDir),
    Remote(std::vec::IntoIter<crate::remote::Listed>),
}

impl Iterator for Entries {
    type Item = (String, Stamp);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Local(entries) => loop {
                let entry = entries.next()?;
                let Ok(entry) = entry else { continue };
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if LogName::parse(&name).is_none() {
                    continue;
                }
                // Follows symlinks: a link to a log is a log.
                let Ok(meta) = std::fs::metadata(entry.path()) else {
                    continue;
                };
                if meta.is_file() {
                    return Some((name, Stamp::of(&meta)));
                }
            },
            Self::Remote(listed) => listed.next().map(|l| (l.name, l.stamp)),
        }
    }
}

/// How long a `.running` log may go unwritten before its job counts as
/// abandoned, by default.
pub const DEFAULT_ABANDONED_AFTER: Duration = Duration::from_secs(600);

/// The index of one log directory.
pub struct LogStore {
    dir: PathBuf,
    /// The store prefix the logs live under, instead of `dir`.
    remote: Option<RemoteDir>,
    /// Payload ranges (and lengths) from the footers of objects read
    /// lately, by object name, so a request for a job already looked at
    /// costs one ranged read, not two.
    ranges: parking_lot::Mutex<HashMap<Arc<str>, Arc<Ranges>>>,
    inner: RwLock<Index>,
    ready: AtomicBool,
    metrics: Arc<HistoryMetrics>,
    abandoned_after: Duration,
    /// The last error listing the directory, so a lasting one is logged once.
    list_error: parking_lot::Mutex<Option<String>>,
    /// Where the persistent index lives, if anywhere.
    index_file: Option<PathBuf>,
    /// Whether the completed jobs changed since the index was last saved.
    dirty: AtomicBool,
    /// When the index was last saved.
    last_saved: parking_lot::Mutex<Option<std::time::Instant>>,
    /// The last error saving the index, so a lasting one is logged once.
    save_error: parking_lot::Mutex<Option<String>>,
}

/// The least time between two saves of the persistent index (a save of a
/// million jobs writes about 150 MB).
pub const INDEX_SAVE_SPACING: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Index {
    /// Completed jobs by id.
    jobs: HashSet<ById>,
    /// The same jobs in the default order (newest start first, then id),
    /// so the default list pages in O(page).
    order: BTreeSet<ByStart>,
    /// Completed logs not named `<id>.eventlog[.zst]`, by file name, so a
    /// rescan finds their jobs.
    odd_names: HashMap<Box<str>, Box<str>>,
    /// Unfinished jobs (`.running` logs) by id.
    unfinished: HashMap<Arc<str>, Unfinished>,
    /// Logs that could not be indexed, by file name, with the stamp they
    /// had: they are retried (and reported again) only when they change.
    bad: HashMap<String, Stamp>,
}

impl Index {
    fn insert(&mut self, summary: JobSummary) {
        let summary = Arc::new(summary);
        self.remove(summary.job_id());
        if summary.file == FileKind::Named {
            self.odd_names
                .insert(summary.file_name().into(), summary.job_id().into());
        }
        self.order.insert(ByStart(summary.clone()));
        self.jobs.insert(ById(summary));
    }

    fn remove(&mut self, id: &str) -> Option<Arc<JobSummary>> {
        let ById(old) = self.jobs.take(id)?;
        self.order.remove(&ByStart(old.clone()));
        if old.file == FileKind::Named {
            self.odd_names.remove(&*old.file_name());
        }
        Some(old)
    }

    fn get(&self, id: &str) -> Option<&Arc<JobSummary>> {
        self.jobs.get(id).map(|j| &j.0)
    }

    /// The completed job whose log is `name` (a `LogName` with `stem`).
    fn by_file(&self, name: &str, stem: &str) -> Option<&Arc<JobSummary>> {
        let id = self.odd_names.get(name).map_or(stem, |id| id);
        self.get(id).filter(|s| s.is_file(name))
    }

    fn clear_completed(&mut self) {
        self.jobs.clear();
        self.order.clear();
        self.odd_names.clear();
    }
}

/// A completed log, as retention sees it.
#[derive(Debug, Clone)]
pub struct CompletedFile {
    /// The job.
    pub job_id: Arc<str>,
    /// The log's file name within the directory.
    pub file_name: Arc<str>,
    /// Its size in bytes.
    pub len: u64,
    /// When the job ended (epoch millis).
    pub end_time: u64,
}

/// Milliseconds since the Unix epoch.
pub fn epoch_millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What one rescan did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanReport {
    /// Logs read because they were new or changed.
    pub read: usize,
    /// Jobs that left the index because their log is gone.
    pub removed: usize,
    /// Logs skipped as unreadable (newly reported).
    pub bad: usize,
}

enum Found {
    Completed(JobSummary),
    Unfinished(Unfinished),
}

impl LogStore {
    /// An empty index of `dir`; call [`LogStore::rescan`] to fill it.
    pub fn new(dir: impl Into<PathBuf>, metrics: Arc<HistoryMetrics>) -> Self {
        Self {
            dir: dir.into(),
            remote: None,
            ranges: parking_lot::Mutex::new(HashMap::new()),
            inner: RwLock::new(Index::default()),
            ready: AtomicBool::new(false),
            metrics,
            abandoned_after: DEFAULT_ABANDONED_AFTER,
            list_error: parking_lot::Mutex::new(None),
            index_file: None,
            dirty: AtomicBool::new(false),
            last_saved: parking_lot::Mutex::new(None),
            save_error: parking_lot::Mutex::new(None),
        }
    }

    /// An empty index of the logs under an object-store prefix.
    /// Objects are never appended to: an unfinished log in a store was
    /// uploaded by a scheduler restarting after it died mid-job, so its job
    /// is abandoned at once.
    pub fn remote(dir: RemoteDir, metrics: Arc<HistoryMetrics>) -> Self {
        let mut store = Self::new(PathBuf::new(), metrics);
        store.remote = Some(dir);
        store.abandoned_after = Duration::ZERO;
        store
    }

    /// The object-store prefix the logs live under, if they are not local.
    pub fn remote_dir(&self) -> Option<&RemoteDir> {
        self.remote.as_ref()
    }

    /// The log named `file_name` (as listed, with its length).
    pub fn log(&self, file_name: &str, len: u64) -> LogRef {
        match &self.remote {
            Some(dir) => LogRef::Object {
                dir: dir.clone(),
                name: Arc::from(file_name),
                len,
            },
            None => LogRef::File(self.dir.join(file_name)),
        }
    }

    /// Deletes the log named `file_name`; one already gone is `NotFound`.
    pub fn remove_log(&self, file_name: &str) -> std::io::Result<()> {
        match &self.remote {
            Some(dir) => dir.delete(file_name),
            None => std::fs::remove_file(self.dir.join(file_name)),
        }
    }

    fn entries(&self) -> std::io::Result<Entries> {
        match &self.remote {
            Some(dir) => dir
                .list()
                .map(|listed| Entries::Remote(listed.into_iter()))
                .map_err(|e| match e {
                    object_store::Error::NotFound { .. } => {
                        std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
                    }
                    e => std::io::Error::other(e.to_string()),
                }),
            None => std::fs::read_dir(&self.dir).map(Entries::Local),
        }
    }

    /// Keeps a persistent index at `path` (see [`crate::persist`]).
    pub fn with_index_file(mut self, path: Option<PathBuf>) -> Self {
        self.index_file = path;
        self
    }

    /// Fills an empty index from the persistent index, if there is a usable
    /// one, and marks the store ready: the list is served at once, and the
    /// next rescan verifies it against the directory. Returns the number of
    /// jobs loaded.
    pub fn load_persisted(&self) -> usize {
        let Some(path) = &self.index_file else {
            return 0;
        };
        match crate::persist::load(path) {
            Ok(jobs) => {
                let n = jobs.len();
                let mut index = self.inner.write();
                if !index.jobs.is_empty() {
                    return 0;
                }
                let jobs: Vec<Arc<JobSummary>> = jobs.into_iter().map(Arc::new).collect();
                // The ordered set and the id set are built side by side.
                let (order, (ids, odd_names)) = std::thread::scope(|scope| {
                    // Saved in this order, so the sort is one pass.
                    let order = scope.spawn(|| {
                        jobs.iter()
                            .map(|j| ByStart(j.clone()))
                            .collect::<BTreeSet<_>>()
                    });
                    let mut ids = HashSet::with_capacity(n);
                    let mut odd_names = HashMap::new();
                    for job in &jobs {
                        if job.file == FileKind::Named {
                            odd_names.insert(job.file_name().into(), job.job_id().into());
                        }
                        ids.insert(ById(job.clone()));
                    }
                    let order = order
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p));
                    (order, (ids, odd_names))
                });
                if order.len() != n || ids.len() != n {
                    log::warn!(
                        "history: the persistent index {} lists a job twice; rebuilding it \
                         from the directory",
                        path.display()
                    );
                    self.dirty.store(true, Ordering::Release);
                    return 0;
                }
                index.jobs = ids;
                index.order = order;
                index.odd_names = odd_names;
                drop(index);
                self.ready.store(true, Ordering::Release);
                log::info!(
                    "history: listed {n} jobs from the persistent index {}; verifying the \
                     directory in the background",
                    path.display()
                );
                n
            }
            // No index yet, or a directory that cannot be read (reported by
            // the rescan): nothing to load.
            Err(crate::persist::IndexError::Io(e)) => {
                log::debug!("history: no persistent index at {}: {e}", path.display());
                0
            }
            Err(e) => {
                log::warn!(
                    "history: the persistent index {} is unusable: {e}; rebuilding it from the \
                     directory",
                    path.display()
                );
                self.dirty.store(true, Ordering::Release);
                0
            }
        }
    }

    /// Saves the persistent index if the jobs changed since the last save
    /// and (unless `now`) the last save is [`INDEX_SAVE_SPACING`] old.
    pub fn persist(&self, now: bool) {
        let Some(path) = &self.index_file else {
            return;
        };
        if !self.dirty.load(Ordering::Acquire) {
            return;
        }
        let mut last = self.last_saved.lock();
        if !now && last.is_some_and(|at| at.elapsed() < INDEX_SAVE_SPACING) {
            return;
        }
        self.dirty.store(false, Ordering::Release);
        let bytes = {
            let index = self.inner.read();
            crate::persist::encode(index.order.iter().map(|j| &*j.0))
        };
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let written = std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, path));
        *last = Some(std::time::Instant::now());
        let mut save_error = self.save_error.lock();
        match written {
            Ok(()) => *save_error = None,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                self.dirty.store(true, Ordering::Release);
                // A lasting failure (a read-only directory) is logged once.
                let message = e.to_string();
                if save_error.as_ref() != Some(&message) {
                    log::warn!(
                        "history: cannot save the persistent index {}: {e} (it is a cache; \
                         nothing is lost, the next start indexes the directory)",
                        path.display()
                    );
                }
                *save_error = Some(message);
            }
        }
    }

    /// Sets how long a `.running` log may go unwritten before its job
    /// counts as abandoned.
    pub fn with_abandoned_after(mut self, after: Duration) -> Self {
        self.abandoned_after = after;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the first pass over the directory is done.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Brings the index up to date with the directory. A directory that
    /// does not exist is an empty one.
    pub fn rescan(&self) -> ScanReport {
        let mut report = ScanReport::default();
        let entries = match self.entries() {
            Ok(entries) => entries,
            Err(e) => {
                let message = e.to_string();
                let mut last = self.list_error.lock();
                if let Some(remote) = &self.remote {
                    // A store that cannot be reached for a while: serve
                    // what is indexed, say so once, try again next time.
                    if last.is_none() {
                        log::warn!(
                            "history: cannot list {}: {e}; serving the {} jobs already indexed \
                             until it answers again",
                            remote.url(),
                            self.len()
                        );
                    }
                    *last = Some(message);
                    drop(last);
                    self.ready.store(true, Ordering::Release);
                    return report;
                }
                if e.kind() != std::io::ErrorKind::NotFound && last.as_ref() != Some(&message) {
                    log::warn!("history: cannot list {}: {e}", self.dir.display());
                }
                *last = Some(message);
                drop(last);
                let mut index = self.inner.write();
                report.removed = index.jobs.len() + index.unfinished.len();
                if !index.jobs.is_empty() {
                    self.dirty.store(true, Ordering::Release);
                }
                index.clear_completed();
                index.unfinished.clear();
                drop(index);
                self.ready.store(true, Ordering::Release);
                return report;
            }
        };
        if self.list_error.lock().take().is_some()
            && let Some(remote) = &self.remote
        {
            log::info!("history: {} answers again", remote.url());
        }
        // Snapshot the unfinished jobs; stat outside the lock.
        let known_unfinished: HashMap<Arc<str>, Unfinished> = self
            .inner
            .read()
            .unfinished
            .values()
            .map(|u| (u.file_name.clone(), u.clone()))
            .collect();
        let mut seen: HashSet<ById> = HashSet::new();
        let mut seen_unfinished: HashSet<Arc<str>> = HashSet::new();
        let mut fresh = Vec::new();
        let mut newly_bad = Vec::new();
        let mut seen_bad = HashSet::new();
        let mut to_read: Vec<(String, Stamp)> = Vec::new();
        for (name, stamp) in entries {
            let name = name.as_str();
            let Some(LogName { stem, running, .. }) = LogName::parse(name) else {
                continue;
            };
            if running {
                if let Some(known) = known_unfinished.get(name)
                    && known.stamp == stamp
                {
                    seen_unfinished.insert(known.job_id.clone());
                    continue;
                }
            } else if let Some(known) = self
                .inner
                .read()
                .by_file(name, stem)
                .filter(|s| s.stamp() == stamp)
            {
                seen.insert(ById(known.clone()));
                continue;
            }
            if self.inner.read().bad.get(name) == Some(&stamp) {
                seen_bad.insert(name.to_string());
                continue;
            }
            to_read.push((name.to_string(), stamp));
        }
        report.read = to_read.len();
        let read_one = |(name, stamp): &(String, Stamp)| {
            let LogName {
                stem,
                running,
                zstd,
            } = LogName::parse(name).expect("a log name");
            let path = self.log(name, stamp.len);
            if running {
                scan_running(
                    &path,
                    stem,
                    name,
                    *stamp,
                    zstd,
                    known_unfinished.get(&**name),
                )
                .map(Found::Unfinished)
            } else {
                read_summary(&path).map(|summary| {
                    let id = if summary.index.job_id.is_empty() {
                        stem.to_string()
                    } else {
                        summary.index.job_id.clone()
                    };
                    Found::Completed(JobSummary::new(summary, &id, name, *stamp))
                })
            }
        };
        // An object store answers each read in milliseconds, not
        // microseconds: new objects are read many at a time.
        let results: Vec<Result<Found, StoreError>> = if self.remote.is_some() {
            parallel_map(&to_read, REMOTE_READERS, read_one)
        } else {
            to_read.iter().map(read_one).collect()
        };
        for ((name, stamp), found) in to_read.iter().zip(results) {
            let (name, stamp) = (name.as_str(), *stamp);
            match found {
                Ok(Found::Completed(summary)) => {
                    fresh.push(Found::Completed(summary));
                }
                Ok(Found::Unfinished(unfinished)) => {
                    seen_unfinished.insert(unfinished.job_id.clone());
                    fresh.push(Found::Unfinished(unfinished));
                }
                Err(e) => {
                    log::warn!("history: skipping event log {name}: {e}");
                    self.metrics.unreadable_logs.inc();
                    report.bad += 1;
                    seen_bad.insert(name.to_string());
                    newly_bad.push((name.to_string(), stamp));
                }
            }
        }
        let mut index = self.inner.write();
        // Jobs whose log changed are replaced, not gone.
        let reread: HashSet<&str> = fresh
            .iter()
            .filter_map(|f| match f {
                Found::Completed(s) => Some(s.job_id()),
                Found::Unfinished(_) => None,
            })
            .collect();
        let gone: Vec<Arc<JobSummary>> = index
            .jobs
            .iter()
            .filter(|j| !seen.contains(*j) && !reread.contains(j.0.job_id()))
            .map(|j| j.0.clone())
            .collect();
        drop((seen, reread));
        report.removed = gone.len();
        if !gone.is_empty() {
            self.dirty.store(true, Ordering::Release);
        }
        for job in gone {
            index.remove(job.job_id());
        }
        for found in fresh {
            match found {
                Found::Completed(summary) => {
                    self.dirty.store(true, Ordering::Release);
                    index.insert(summary);
                }
                Found::Unfinished(unfinished) => {
                    index
                        .unfinished
                        .insert(unfinished.job_id.clone(), unfinished);
                }
            }
        }
        // A job whose log was renamed to `.eventlog` is completed, once.
        let Index {
            jobs, unfinished, ..
        } = &mut *index;
        unfinished.retain(|id, _| seen_unfinished.contains(id) && !jobs.contains(&**id));
        index.bad.retain(|name, _| seen_bad.contains(name));
        for (name, stamp) in newly_bad {
            index.bad.insert(name, stamp);
        }
        drop(index);
        self.ready.store(true, Ordering::Release);
        report
    }

    /// Every completed log the index holds: id, file name, size, end time
    /// (epoch millis; the file's modification time when the log has none).
    pub fn completed_files(&self) -> Vec<CompletedFile> {
        self.inner
            .read()
            .jobs
            .iter()
            .map(|ById(s)| CompletedFile {
                job_id: s.job_id().into(),
                file_name: s.file_name().into(),
                len: s.len,
                end_time: if s.end_time > 0 {
                    s.end_time
                } else {
                    s.stamp().modified.map(epoch_millis).unwrap_or(0)
                },
            })
            .collect()
    }

    /// Drops a completed job from the index at once (its log was deleted).
    pub fn forget(&self, job_id: &str) {
        if self.inner.write().remove(job_id).is_some() {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Every unfinished log the index holds: job id, file name, and when
    /// it was last modified.
    pub fn unfinished_files(&self) -> Vec<(Arc<str>, Arc<str>, Option<SystemTime>)> {
        self.inner
            .read()
            .unfinished
            .values()
            .map(|u| (u.job_id.clone(), u.file_name.clone(), u.stamp.modified))
            .collect()
    }

    /// Drops an unfinished job from the index at once.
    pub fn forget_unfinished(&self, job_id: &str) {
        self.inner.write().unfinished.remove(job_id);
    }

    /// Whether `job_id` is indexed as completed.
    pub fn contains(&self, job_id: &str) -> bool {
        self.inner.read().jobs.contains(job_id)
    }

    /// Number of completed jobs indexed.
    pub fn len(&self) -> usize {
        self.inner.read().jobs.len()
    }

    /// Whether no completed job is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The completed job's summary, if indexed.
    pub fn summary(&self, job_id: &str) -> Option<Arc<JobSummary>> {
        self.inner.read().get(job_id).cloned()
    }

    /// The unfinished job's index entry and state, if indexed (and not
    /// also completed).
    pub fn unfinished(&self, job_id: &str) -> Option<(Unfinished, JobState)> {
        let index = self.inner.read();
        if index.jobs.contains(job_id) {
            return None;
        }
        let u = index.unfinished.get(job_id)?;
        Some((u.clone(), u.state(SystemTime::now(), self.abandoned_after)))
    }

    /// A job's log, completed or unfinished.
    pub fn log_of(&self, job_id: &str) -> Option<LogRef> {
        let index = self.inner.read();
        match index.get(job_id) {
            Some(s) => Some(self.log(&s.file_name(), s.len)),
            None => {
                let u = index.unfinished.get(job_id)?;
                Some(self.log(&u.file_name, u.stamp.len))
            }
        }
    }

    /// The facts of a job, completed or unfinished (for a list cursor).
    pub fn facts(&self, job_id: &str) -> Option<Facts> {
        let index = self.inner.read();
        if let Some(s) = index.get(job_id) {
            return Some(Facts::of(&**s));
        }
        let u = index.unfinished.get(job_id)?;
        Some(u.facts(u.state(SystemTime::now(), self.abandoned_after)))
    }

    /// One page of the list: completed jobs, and unfinished ones when the
    /// query asks for them, leaving out the ids in `skip` (jobs another
    /// source lists). The default order without filters costs O(page);
    /// anything else one pass over the summaries.
    pub fn page(&self, q: &ListQuery, cursor: Option<&Facts>, skip: &HashSet<String>) -> Page {
        let index = self.inner.read();
        let unfinished = q.wants_unfinished();
        if q.filters_nothing() && q.default_order() && !unfinished {
            let skipped = skip
                .iter()
                .filter(|id| index.jobs.contains(id.as_str()))
                .count();
            let total = index.jobs.len() - skipped;
            let from = match cursor {
                Some(c) => Bound::Excluded(ByStart(Arc::new(JobSummary::probe(
                    c.start_time,
                    &c.job_id,
                )))),
                None => Bound::Unbounded,
            };
            let jobs = index
                .order
                .range((from, Bound::Unbounded))
                .filter(|ByStart(s)| skip.is_empty() || !skip.contains(s.job_id()))
                .skip(q.offset)
                .take(q.limit.unwrap_or(usize::MAX))
                .map(|ByStart(s)| s);
            return Page {
                rows: rows_of(jobs),
                total,
            };
        }
        let now = SystemTime::now();
        let states: Vec<(Facts, &Unfinished)> = if unfinished {
            index
                .unfinished
                .values()
                .filter(|u| !index.jobs.contains(&*u.job_id))
                .map(|u| (u.facts(u.state(now, self.abandoned_after)), u))
                .collect()
        } else {
            Vec::new()
        };
        #[derive(Debug)]
        enum Ref<'a> {
            Done(&'a Arc<JobSummary>),
            Open(&'a Facts, &'a Unfinished),
        }
        impl JobFacts for Ref<'_> {
            fn job_id(&self) -> &str {
                match self {
                    Ref::Done(s) => s.job_id(),
                    Ref::Open(f, _) => &f.job_id,
                }
            }
            fn job_name(&self) -> &str {
                match self {
                    Ref::Done(s) => s.job_name(),
                    Ref::Open(f, _) => &f.job_name,
                }
            }
            fn state(&self) -> JobState {
                match self {
                    Ref::Done(s) => s.state,
                    Ref::Open(f, _) => f.state,
                }
            }
            fn start_time(&self) -> u64 {
                match self {
                    Ref::Done(s) => s.start_time,
                    Ref::Open(f, _) => f.start_time,
                }
            }
            fn end_time(&self) -> u64 {
                match self {
                    Ref::Done(s) => s.end_time,
                    Ref::Open(f, _) => f.end_time,
                }
            }
        }
        let mut matching: Vec<Ref> = index
            .order
            .iter()
            .map(|ByStart(s)| Ref::Done(s))
            .chain(states.iter().map(|(f, u)| Ref::Open(f, u)))
            .filter(|r| q.matches(r) && (skip.is_empty() || !skip.contains(r.job_id())))
            .collect();
        let total = matching.len();
        if let Some(c) = cursor {
            matching.retain(|r| q.compare(r, c) == std::cmp::Ordering::Greater);
        }
        let end = q
            .limit
            .map_or(matching.len(), |l| q.offset.saturating_add(l))
            .min(matching.len());
        if end > 0 && end < matching.len() {
            matching.select_nth_unstable_by(end - 1, |a, b| q.compare(a, b));
            matching.truncate(end);
        }
        matching.sort_by(|a, b| q.compare(a, b));
        let rows = matching
            .into_iter()
            .skip(q.offset)
            .map(|r| match r {
                Ref::Done(s) => Row {
                    facts: s.clone(),
                    entry: s.entry(),
                },
                Ref::Open(f, u) => Row::new(f.clone(), u.response(f.state, None)),
            })
            .collect();
        Page { rows, total }
    }

    /// The path of a completed job's log.
    fn completed_path(&self, job_id: &str) -> Option<LogRef> {
        let index = self.inner.read();
        let s = index.get(job_id)?;
        Some(self.log(&s.file_name(), s.len))
    }

    /// Reads the job's terminal record. `Ok(None)` when the job is not
    /// indexed as completed.
    pub fn read_job_end(&self, job_id: &str) -> Result<Option<JobEnd>, StoreError> {
        let Some(path) = self.completed_path(job_id) else {
            return Ok(None);
        };
        let line = terminal_line(&path)?;
        decode_job_end(&line).map(Some)
    }

    /// Reads the named payloads (see [`crate::record::payload`]) of a
    /// completed job through its footer's byte ranges: one small read from
    /// the end of the file, then one read per payload. `Ok(None)` when the
    /// job is not indexed, or its footer does not locate every one of them
    /// (an upstream or older log, a response the job had no answer for):
    /// the caller then reads the whole terminal record. A range that does
    /// not hold what it should (a log rewritten in place) is logged and
    /// answered `None` too, never served.
    pub fn read_payloads(
        &self,
        job_id: &str,
        names: &[&str],
    ) -> Result<Option<Vec<Vec<u8>>>, StoreError> {
        let Some(path) = self.completed_path(job_id) else {
            return Ok(None);
        };
        let zstd = path.is_zstd();
        let Some(ranges) = self.ranges_of(&path)? else {
            return Ok(None);
        };
        let file_len = ranges.file_len;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Some(&[offset, len]) = ranges.payloads.get(*name) else {
                return Ok(None);
            };
            let bytes = if zstd {
                read_at(&path, offset, len, file_len).and_then(|frame| decompress_all(&frame))
            } else {
                read_located(&path, name, offset, len, file_len)
            };
            match bytes {
                Ok(bytes) if plausible(name, &bytes) => out.push(bytes),
                _ => {
                    if let Some(object) = path.name() {
                        self.ranges.lock().remove(object);
                    }
                    log::warn!(
                        "history: the footer of {} does not match the file (rewritten in \
                         place?); reading it the slow way",
                        path.shown()
                    );
                    return Ok(None);
                }
            }
        }
        Ok(Some(out))
    }

    /// The payload ranges of a completed log's footer: remembered for
    /// objects (a read costs a request), read each time for files.
    fn ranges_of(&self, path: &LogRef) -> Result<Option<Arc<Ranges>>, StoreError> {
        let LogRef::Object { name, len, .. } = path else {
            return Ok(footer_of(path)?.map(|(footer, file_len)| {
                Arc::new(Ranges {
                    payloads: footer.payloads,
                    file_len,
                })
            }));
        };
        if let Some(known) = self.ranges.lock().get(name)
            && known.file_len == *len
        {
            return Ok(Some(known.clone()));
        }
        let Some((footer, file_len)) = footer_of(path)? else {
            return Ok(None);
        };
        let ranges = Arc::new(Ranges {
            payloads: footer.payloads,
            file_len,
        });
        let mut known = self.ranges.lock();
        if known.len() >= REMEMBERED_FOOTERS {
            known.clear();
        }
        known.insert(name.clone(), ranges.clone());
        Ok(Some(ranges))
    }

    /// Rescans every `interval` until `stop` resolves. An interval of zero
    /// scans once (the list is pinned to startup).
    pub async fn rescan_every(
        self: Arc<Self>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let this = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            this.load_persisted();
            this.rescan();
            this.persist(true);
        })
        .await;
        if interval.is_zero() {
            return;
        }
        tokio::pin!(stop);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let this = self.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        this.rescan();
                        this.persist(false);
                    })
                    .await;
                }
                () = &mut stop => {
                    let this = self.clone();
                    let _ = tokio::task::spawn_blocking(move || this.persist(true)).await;
                    return;
                }
            }
        }
    }
}

/// Where a log's payloads are, from its footer.
struct Ranges {
    payloads: std::collections::BTreeMap<String, [u64; 2]>,
    file_len: u64,
}

/// Footers of objects remembered at most (about 1 KiB each).
const REMEMBERED_FOOTERS: usize = 4096;

/// Threads reading new logs of an object store at once.
const REMOTE_READERS: usize = 16;

/// `f` over `items` on up to `threads` threads, results in order.
fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(items.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return mine;
                        };
                        mine.push((i, f(item)));
                    }
                })
            })
            .collect();
        for worker in workers {
            for (i, r) in worker.join().expect("a reader thread") {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter()
        .map(|r| r.expect("every item is read"))
        .collect()
}

/// The longest line of a `.running` log that is read (a `JobStart` with
/// very long plans); longer lines are skipped.
const MAX_RUNNING_LINE: usize = 64 * 1024 * 1024;

/// Reads the new complete lines of a `.running` log, continuing from
/// `known` when the file only grew.
fn scan_running(
    path: &LogRef,
    stem: &str,
    file_name: &str,
    stamp: Stamp,
    zstd: bool,
    known: Option<&Unfinished>,
) -> Result<Unfinished, StoreError> {
    // A plain log that only grew is read from where the last pass stopped;
    // a compressed one is decoded from the start.
    let mut state = match known {
        Some(k) if !zstd && stamp.len >= k.scanned => k.clone(),
        _ => Unfinished {
            job_id: Arc::from(stem),
            file_name: Arc::from(file_name),
            ..Default::default()
        },
    };
    let (mut file, _) = path.open()?;
    let mut reader: Box<dyn BufRead> = if zstd {
        Box::new(BufReader::new(Tolerant::new(
            zstd::stream::read::Decoder::new(file.take(stamp.len))?,
        )))
    } else {
        file.seek(SeekFrom::Start(state.scanned))?;
        Box::new(BufReader::new(file.take(stamp.len - state.scanned)))
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .take(MAX_RUNNING_LINE as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            if n > MAX_RUNNING_LINE {
                // Skip the rest of an overlong line.
                state.scanned += n as u64;
                let (rest, ended) = skip_line(&mut reader)?;
                if !ended {
                    break;
                }
                state.scanned += rest;
                continue;
            }
            break; // a line still being written
        }
        let first = state.scanned == 0;
        state.scanned += n as u64;
        let Ok(env) = serde_json::from_slice::<Envelope>(&line) else {
            if first {
                return Err(StoreError::Malformed(
                    "the first line of a .running log is not a JobStart record".into(),
                ));
            }
            continue;
        };
        if env.version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema { found: env.version });
        }
        match env.ev.as_str() {
            kind::JOB_START => {
                if let Ok(start) = serde_json::from_str::<JobStart>(env.data.get()) {
                    state.job_name = Arc::from(start.job_name);
                    state.queued_at = start.queued_at;
                    state.submitted_at = start.submitted_at;
                }
            }
            kind::TASK_END => {
                if let Ok(task) = serde_json::from_str::<TaskEnd>(env.data.get()) {
                    state.tasks += 1;
                    if matches!(task.status, crate::record::TaskOutcome::Failed { .. }) {
                        state.failed_tasks += 1;
                    }
                    state.stages.insert(task.stage_id);
                    state.last_task_end = state.last_task_end.max(task.end_exec_time);
                }
            }
            _ if first => {
                return Err(StoreError::Malformed(
                    "the first line of a .running log is not a JobStart record".into(),
                ));
            }
            _ => {}
        }
    }
    state.stamp = stamp;
    Ok(state)
}

/// A reader of a log's decoded bytes: the file itself, or its zstd stream
/// (skippable frames skipped; a torn last frame, as a crash leaves it, ends
/// the stream quietly).
pub fn open_decoded(log: impl Into<LogRef>) -> std::io::Result<Box<dyn BufRead + Send>> {
    let log = log.into();
    let (file, _) = log.open()?;
    if log.is_zstd() {
        Ok(Box::new(BufReader::with_capacity(
            64 * 1024,
            Tolerant::new(zstd::stream::read::Decoder::new(file)?),
        )))
    } else {
        Ok(Box::new(BufReader::with_capacity(64 * 1024, file)))
    }
}

/// A reader that ends quietly at its first error (a torn zstd frame).
struct Tolerant<R> {
    inner: R,
    failed: bool,
}

impl<R> Tolerant<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            failed: false,
        }
    }
}

impl<R: Read> Read for Tolerant<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.failed {
            return Ok(0);
        }
        match self.inner.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(_) => {
                self.failed = true;
                Ok(0)
            }
            ok => ok,
        }
    }
}

/// The `JobStart` record of a log (its first line).
pub fn read_job_start(log: impl Into<LogRef>) -> Result<JobStart, StoreError> {
    let mut reader = open_decoded(log)?.take(MAX_RUNNING_LINE as u64);
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    let env = envelope(&line)?;
    if env.ev != kind::JOB_START {
        return Err(StoreError::Malformed(
            "the first line is not a JobStart record".into(),
        ));
    }
    serde_json::from_str(env.data.get()).map_err(|e| StoreError::Malformed(e.to_string()))
}

/// The summary of a completed log, from its footer when it has one.
pub fn read_summary(log: impl Into<LogRef>) -> Result<JobEndSummary, StoreError> {
    let path: &LogRef = &log.into();
    if path.is_zstd() {
        if let Some((footer, _)) = zst_footer(path)? {
            return Ok(JobEndSummary {
                status: footer.status,
                queued_at: footer.queued_at,
                index: footer.index,
                dropped_records: footer.dropped_records,
            });
        }
        let line = forward_scan(open_decoded(path)?)?;
        let env = envelope(&line)?;
        return serde_json::from_str(env.data.get())
            .map_err(|e| StoreError::Malformed(e.to_string()));
    }
    let tail = TailLine::read(path)?;
    if let Some(footer) = tail.footer()? {
        return Ok(JobEndSummary {
            status: footer.status,
            queued_at: footer.queued_at,
            index: footer.index,
            dropped_records: footer.dropped_records,
        });
    }
    let line = tail.job_end_line(path)?;
    let env = envelope(&line)?;
    serde_json::from_str(env.data.get()).map_err(|e| StoreError::Malformed(e.to_string()))
}

/// The bytes of the log's `JobEnd` line.
pub fn terminal_line(log: impl Into<LogRef>) -> Result<Vec<u8>, StoreError> {
    let path: &LogRef = &log.into();
    if path.is_zstd() {
        if let Some((footer, file_len)) = zst_footer(path)? {
            let frame = read_at(path, footer.job_end_offset, footer.job_end_len, file_len);
            match frame.and_then(|frame| decompress_line(&frame)) {
                Ok(line) if is_job_end_line(&line) => return Ok(line),
                _ => log::warn!(
                    "history: the footer of {} does not match the file (rewritten in place?); \
                     reading it the slow way",
                    path.shown()
                ),
            }
        }
        return forward_scan(open_decoded(path)?);
    }
    let tail = TailLine::read(path)?;
    if let Some(footer) = tail.footer()? {
        match read_at(
            path,
            footer.job_end_offset,
            footer.job_end_len,
            tail.file_len,
        ) {
            Ok(line) if is_job_end_line(&line) => return Ok(line),
            _ => log::warn!(
                "history: the footer of {} does not match the file (rewritten in place?); \
                 reading it the slow way",
                path.shown()
            ),
        }
        return forward_scan(open_decoded(path)?);
    }
    tail.job_end_line(path)
}

/// A payload of a plain log at `[offset, offset + len)`, checked to sit
/// right after its `"name":` key and before a `,` or `}`.
fn read_located(
    path: &LogRef,
    name: &str,
    offset: u64,
    len: u64,
    file_len: u64,
) -> std::io::Result<Vec<u8>> {
    let key = format!("\"{name}\":");
    let before = key.len() as u64;
    let start = offset
        .checked_sub(before)
        .ok_or_else(|| std::io::Error::other("payload offset before the file"))?;
    let mut bytes = read_at(path, start, before + len + 1, file_len)?;
    let after = bytes.pop();
    if !bytes.starts_with(key.as_bytes()) || !matches!(after, Some(b',' | b'}')) {
        return Err(std::io::Error::other(
            "payload range does not match its key",
        ));
    }
    bytes.drain(..before as usize);
    Ok(bytes)
}

/// Whether `bytes` look like the payload `name`: a JSON string for the
/// graph, a JSON object for the others.
fn plausible(name: &str, bytes: &[u8]) -> bool {
    let (open, close) = if name == crate::record::payload::DOT {
        (b'"', b'"')
    } else {
        (b'{', b'}')
    };
    bytes.len() >= 2 && bytes[0] == open && bytes[bytes.len() - 1] == close
}

/// Decodes zstd frames (bounded by [`MAX_LINE`]).
fn decompress_all(frames: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(frames)?
        .take(MAX_LINE + 1)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// One zstd frame holding one line, decoded, without its newline.
fn decompress_line(frame: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    zstd::stream::read::Decoder::new(frame)?
        .take(MAX_LINE + 1)
        .read_to_end(&mut line)?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    Ok(line)
}

/// The footer of a log of either format, with the file's length.
fn footer_of(path: &LogRef) -> Result<Option<(Footer, u64)>, StoreError> {
    if path.is_zstd() {
        return zst_footer(path);
    }
    let tail = TailLine::read(path)?;
    Ok(tail.footer()?.map(|f| (f, tail.file_len)))
}

/// The footer of a compressed log, from the skippable frame at its end,
/// with the file's length. `None` when the file does not end with one.
fn zst_footer(path: &LogRef) -> Result<Option<(Footer, u64)>, StoreError> {
    let (mut file, file_len) = path.open()?;
    if file_len < 16 {
        return Ok(None);
    }
    let mut trailer = [0u8; 8];
    file.seek(SeekFrom::Start(file_len - 8))?;
    file.read_exact(&mut trailer)?;
    if &trailer[4..] != FOOTER_FRAME_TAG {
        return Ok(None);
    }
    let total = u64::from(u32::from_le_bytes(
        trailer[..4].try_into().expect("4 bytes"),
    ));
    if !(16..=file_len.min(MAX_FOOTER_FRAME)).contains(&total) {
        return Ok(None);
    }
    let mut frame = vec![0u8; total as usize];
    file.seek(SeekFrom::Start(file_len - total))?;
    file.read_exact(&mut frame)?;
    let magic = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes"));
    let size = u64::from(u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes")));
    if magic != FOOTER_FRAME_MAGIC || size != total - 8 {
        return Ok(None);
    }
    let line = frame[8..frame.len() - 8].trim_ascii_end();
    Ok(parse_footer(line)?.map(|f| (f, file_len)))
}

fn decode_job_end(line: &[u8]) -> Result<JobEnd, StoreError> {
    let env = envelope(line)?;
    serde_json::from_str(env.data.get()).map_err(|e| StoreError::Malformed(e.to_string()))
}

fn envelope(line: &[u8]) -> Result<Envelope<'_>, StoreError> {
    let env: Envelope =
        serde_json::from_slice(line).map_err(|e| StoreError::Malformed(e.to_string()))?;
    if env.version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: env.version });
    }
    Ok(env)
}

fn is_job_end_line(line: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        ev: &'a str,
    }
    line.starts_with(b"{")
        && serde_json::from_slice::<Kind>(line)
            .map(|k| k.ev == kind::JOB_END)
            .unwrap_or(false)
}

/// The largest footer frame of a compressed log that is read.
const MAX_FOOTER_FRAME: u64 = 4 * 1024 * 1024;
/// Bytes read from the end of a file first (then doubling). A footer line
/// is well under 4 KiB, so indexing a log costs one small read whatever
/// its size.
const TAIL_CHUNK: u64 = 4 * 1024;
/// The longest line read whole (a `JobEnd` line of a very large job).
pub const MAX_LINE: u64 = 512 * 1024 * 1024;

/// The last line of a file, read backwards from the end.
struct TailLine {
    file_len: u64,
    /// The last non-blank line, without its newline.
    line: Vec<u8>,
}

impl TailLine {
    fn read(path: &LogRef) -> Result<Self, StoreError> {
        let (mut file, file_len) = path.open()?;
        // Backwards in chunks that grow from 4 KiB to 1 MiB, remembering
        // only where the line ends; then the line is read once. Memory is
        // one chunk plus the line, whatever the file holds.
        let mut chunk = Vec::new();
        let mut step = TAIL_CHUNK;
        let mut end: Option<u64> = None;
        let mut pos = file_len;
        while pos > 0 {
            let from = pos.saturating_sub(step);
            chunk.resize((pos - from) as usize, 0);
            file.seek(SeekFrom::Start(from))?;
            file.read_exact(&mut chunk)?;
            let mut search = &chunk[..];
            let mut ends_here = false;
            if end.is_none()
                && let Some(last) = chunk.iter().rposition(|b| !b.is_ascii_whitespace())
            {
                end = Some(from + last as u64 + 1);
                search = &chunk[..last];
                ends_here = true;
            }
            if let Some(end) = end {
                if let Some(nl) = search.iter().rposition(|&b| b == b'\n') {
                    if ends_here {
                        // The whole line is in this chunk (the usual case:
                        // a footer in the last 4 KiB).
                        let line = chunk[nl + 1..(end - from) as usize].to_vec();
                        return Ok(Self { file_len, line });
                    }
                    return Self::line_at(&mut *file, file_len, from + nl as u64 + 1, end);
                }
                if end - from > MAX_LINE {
                    return Err(StoreError::Malformed(format!(
                        "the last line is longer than {MAX_LINE} bytes"
                    )));
                }
            }
            pos = from;
            step = (step * 2).min(1024 * 1024);
        }
        match end {
            Some(end) => Self::line_at(&mut *file, file_len, 0, end),
            None => Err(StoreError::NoTerminalRecord),
        }
    }

    fn line_at(
        file: &mut dyn ReadSeek,
        file_len: u64,
        start: u64,
        end: u64,
    ) -> Result<Self, StoreError> {
        if end - start > MAX_LINE {
            return Err(StoreError::Malformed(format!(
                "the last line is longer than {MAX_LINE} bytes"
            )));
        }
        let mut line = vec![0; (end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut line)?;
        Ok(Self { file_len, line })
    }

    /// The footer, when the last line is one.
    fn footer(&self) -> Result<Option<Footer>, StoreError> {
        parse_footer(&self.line)
    }

    /// The `JobEnd` line of a log without a footer: the last line when it
    /// is one, else found by a forward scan.
    fn job_end_line(&self, path: &LogRef) -> Result<Vec<u8>, StoreError> {
        if is_job_end_line(&self.line) {
            Ok(self.line.clone())
        } else {
            forward_scan(open_decoded(path)?)
        }
    }
}

/// The footer record in `line`, if it is one.
fn parse_footer(line: &[u8]) -> Result<Option<Footer>, StoreError> {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        ev: &'a str,
        version: u32,
    }
    let Ok(k) = serde_json::from_slice::<Kind>(line) else {
        return Ok(None);
    };
    if k.ev != kind::FOOTER {
        return Ok(None);
    }
    if k.version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: k.version });
    }
    let env = envelope(line)?;
    match serde_json::from_str::<Footer>(env.data.get()) {
        Ok(footer) => Ok(Some(footer)),
        Err(e) => Err(StoreError::Malformed(format!("footer: {e}"))),
    }
}

fn read_at(path: &LogRef, offset: u64, len: u64, file_len: u64) -> std::io::Result<Vec<u8>> {
    if offset.checked_add(len).is_none_or(|end| end > file_len) || len > MAX_LINE {
        return Err(std::io::Error::other("footer offsets are outside the file"));
    }
    let (mut file, _) = path.open()?;
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0; len as usize];
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// The first `JobEnd` line, scanning from the start: the slow path, for
/// logs whose last record is something else.
fn forward_scan(mut reader: impl BufRead) -> Result<Vec<u8>, StoreError> {
    let mut line = Vec::new();
    while let Some(whole) = bounded_line(&mut reader, &mut line, MAX_LINE)? {
        if whole && line.starts_with(b"{") && is_job_end_line(&line) {
            return Ok(line);
        }
    }
    Err(StoreError::NoTerminalRecord)
}

/// Reads the next line (without its `\n`) into `line`, buffering at most
/// `max` bytes: `Some(false)` for a longer line, whose rest is skipped
/// unread into memory; `None` at the end.
fn bounded_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: u64,
) -> std::io::Result<Option<bool>> {
    line.clear();
    let n = reader.by_ref().take(max + 1).read_until(b'\n', line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        return Ok(Some(true));
    }
    if (line.len() as u64) <= max {
        return Ok(Some(true)); // the last line, without a newline
    }
    line.clear();
    skip_line(reader)?;
    Ok(Some(false))
}

/// Consumes the rest of the current line, newline included, without
/// keeping it: the bytes consumed, and whether a newline ended them.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<(u64, bool)> {
    let mut skipped = 0;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok((skipped, false));
        }
        let (n, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (chunk.len(), false),
        };
        reader.consume(n);
        skipped += n as u64;
        if ended {
            return Ok((skipped, true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Footer, JobIndex, encode_line};

    fn job_end_line(id: &str, version: u32) -> String {
        format!(
            r#"{{"ev":"JobEnd","version":{version},"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"n","status":"Completed","job_status":"Completed.","start_time":2,"end_time":3,"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{"job_id":"{id}"}},"stages":{{"stages":[]}},"config":{{"k":"v"}},"dot":"digraph G {{}}"}}}}"#
        )
    }

    fn store(dir: &Path) -> LogStore {
        LogStore::new(dir, Arc::new(HistoryMetrics::unregistered()))
    }

    #[test]
    fn a_log_without_footer_is_served_from_its_last_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.eventlog"),
            format!(
                "{{\"ev\":\"JobStart\",\"version\":1,\"data\":{{}}}}\n{}\n",
                job_end_line("a", 1)
            ),
        )
        .unwrap();
        let s = store(dir.path());
        assert_eq!(s.rescan().read, 1);
        let end = s.read_job_end("a").unwrap().unwrap();
        assert_eq!(end.job.get(), r#"{"job_id":"a"}"#);
        assert_eq!(end.dot, "digraph G {}");
    }

    #[test]
    fn a_log_not_named_after_its_job_is_found_by_its_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.eventlog"), job_end_line("j1", 1) + "\n").unwrap();
        std::fs::write(dir.path().join("j2.eventlog"), job_end_line("j2", 1) + "\n").unwrap();
        let zst = zstd::encode_all((job_end_line("j3", 1) + "\n").as_bytes(), 3).unwrap();
        std::fs::write(dir.path().join("j3.eventlog.zst"), zst).unwrap();
        let index = dir.path().join("index");
        let s = store(dir.path()).with_index_file(Some(index.clone()));
        assert_eq!(s.rescan().read, 3);
        let names = |s: &LogStore| {
            ["j1", "j2", "j3"].map(|id| s.summary(id).unwrap().file_name().into_owned())
        };
        assert_eq!(names(&s), ["x.eventlog", "j2.eventlog", "j3.eventlog.zst"]);
        assert_eq!(
            s.read_job_end("j1").unwrap().unwrap().job.get(),
            r#"{"job_id":"j1"}"#
        );
        // Unchanged files are not read again, whatever their names.
        assert_eq!(s.rescan(), ScanReport::default());
        s.persist(true);
        let restored = store(dir.path()).with_index_file(Some(index));
        assert_eq!(restored.load_persisted(), 3);
        assert_eq!(names(&restored), names(&s));
        assert_eq!(restored.rescan(), ScanReport::default());
        // A log whose name now belongs to another job is read again.
        std::fs::remove_file(dir.path().join("x.eventlog")).unwrap();
        std::fs::write(dir.path().join("x.eventlog"), job_end_line("j4", 1) + "\n").unwrap();
        let report = restored.rescan();
        assert_eq!((report.read, report.removed), (1, 1));
        assert!(restored.summary("j1").is_none());
        assert_eq!(restored.summary("j4").unwrap().file_name(), "x.eventlog");
    }

    #[test]
    fn an_overlong_line_is_skipped_without_buffering_it() {
        let text = b"short\nxxxxxxxxxxxxxxxxxxxx\n{\"a\":1}\nlast";
        let mut reader = std::io::BufReader::with_capacity(4, &text[..]);
        let mut line = Vec::new();
        let mut seen = Vec::new();
        while let Some(whole) = bounded_line(&mut reader, &mut line, 8).unwrap() {
            assert!(line.len() <= 9);
            seen.push((whole, String::from_utf8(line.clone()).unwrap()));
        }
        let want = [
            (true, "short"),
            (false, ""),
            (true, "{\"a\":1}"),
            (true, "last"),
        ];
        assert_eq!(seen, want.map(|(w, l)| (w, l.to_string())));
    }

    #[test]
    fn a_footer_locates_the_job_end_and_a_wrong_one_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let end = job_end_line("b", 1);
        let start = "{\"ev\":\"JobStart\",\"version\":1,\"data\":{}}\n";
        let footer = |offset: u64| {
            String::from_utf8(
                encode_line(
                    kind::FOOTER,
                    &Footer {
                        job_end_offset: offset,
                        job_end_len: end.len() as u64,
                        status: JobEndStatus::Succeeded,
                        queued_at: 1,
                        index: JobIndex {
                            job_id: "b".into(),
                            ..Default::default()
                        },
                        dropped_records: 0,
                        payloads: Default::default(),
                    },
                )
                .unwrap(),
            )
            .unwrap()
        };
        let path = dir.path().join("b.eventlog");
        std::fs::write(
            &path,
            format!("{start}{end}\n{}", footer(start.len() as u64)),
        )
        .unwrap();
        assert_eq!(terminal_line(&path).unwrap(), end.as_bytes());
        // A log rewritten in place: the footer points into the wrong bytes.
        std::fs::write(&path, format!("{start}{start}{end}\n{}", footer(3))).unwrap();
        assert_eq!(terminal_line(&path).unwrap(), end.as_bytes());
    }

    #[test]
    fn bad_logs_are_skipped_and_hide_no_other_job() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("good.eventlog"),
            job_end_line("good", 1) + "\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("empty.eventlog"), "").unwrap();
        std::fs::write(
            dir.path().join("garbage.eventlog"),
            [0xff, 0x00, 0x13, b'\n'],
        )
        .unwrap();
        std::fs::write(
            dir.path().join("truncated.eventlog"),
            &job_end_line("truncated", 1)[..50],
        )
        .unwrap();
        std::fs::write(
            dir.path().join("newer.eventlog"),
            job_end_line("newer", 9) + "\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("running.eventlog.running"), "{").unwrap();
        let s = store(dir.path());
        let report = s.rescan();
        assert_eq!(report.bad, 4);
        assert_eq!(s.len(), 1);
        assert!(s.contains("good"));
        // Unchanged bad logs are not read (nor reported) again.
        assert_eq!(s.rescan(), ScanReport::default());
    }

    #[test]
    fn a_newer_schema_says_to_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.eventlog");
        std::fs::write(&path, job_end_line("n", 2) + "\n").unwrap();
        let err = read_summary(&path).unwrap_err();
        assert!(matches!(err, StoreError::NewerSchema { found: 2 }));
        assert!(err.to_string().contains("upgrade"));
    }

    #[test]
    fn deleted_logs_leave_the_index_on_the_next_pass() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.eventlog"), job_end_line("x", 1) + "\n").unwrap();
        let s = store(dir.path());
        s.rescan();
        assert!(s.contains("x"));
        std::fs::remove_file(dir.path().join("x.eventlog")).unwrap();
        assert_eq!(s.rescan().removed, 1);
        assert!(s.is_empty());
    }

    #[test]
    fn a_missing_directory_is_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir.path().join("later"));
        assert_eq!(s.rescan(), ScanReport::default());
        assert!(s.is_ready());
        std::fs::create_dir(dir.path().join("later")).unwrap();
        std::fs::write(
            dir.path().join("later/y.eventlog"),
            job_end_line("y", 1) + "\n",
        )
        .unwrap();
        s.rescan();
        assert!(s.contains("y"));
    }

    #[test]
    fn a_long_last_line_is_read_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(300_000);
        let line = job_end_line("big", 1).replace("digraph G {}", &big);
        let path = dir.path().join("big.eventlog");
        std::fs::write(
            &path,
            format!("{{\"ev\":\"JobStart\",\"version\":1,\"data\":{{}}}}\n{line}\n"),
        )
        .unwrap();
        assert_eq!(terminal_line(&path).unwrap(), line.as_bytes());
    }

    fn job_end_at(id: &str, start: u64) -> String {
        job_end_line(id, 1).replace("\"start_time\":2", &format!("\"start_time\":{start}"))
    }

    #[test]
    fn the_ordered_index_pages_like_a_full_pass() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..200u64 {
            let id = format!("j{i:03}");
            std::fs::write(
                dir.path().join(format!("{id}.eventlog")),
                job_end_at(&id, 1 + i / 4) + "\n",
            )
            .unwrap();
        }
        let s = store(dir.path());
        s.rescan();
        let pairs = |q: &str| -> Vec<(String, String)> {
            q.split('&')
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap();
                    (k.into(), v.into())
                })
                .collect()
        };
        let ids = |p: &Page| -> Vec<String> {
            p.rows
                .iter()
                .map(|r| r.facts.job_id().to_string())
                .collect()
        };
        let none = HashSet::new();
        // `min_duration_ms=0` filters nothing but forces the full pass.
        let fast = ListQuery::parse(&pairs("limit=7&offset=3")).unwrap();
        let slow = ListQuery::parse(&pairs("limit=7&offset=3&min_duration_ms=0")).unwrap();
        assert!(fast.filters_nothing() && !slow.filters_nothing());
        let cursor = s.facts("j101").unwrap();
        for c in [None, Some(&cursor)] {
            let (a, b) = (s.page(&fast, c, &none), s.page(&slow, c, &none));
            assert_eq!(ids(&a), ids(&b));
            assert_eq!(a.total, b.total);
            assert_eq!(a.rows.len(), 7);
        }
        let skip: HashSet<String> = ["j199".to_string(), "nope".to_string()].into();
        let page = s.page(&fast, None, &skip);
        assert_eq!(page.total, 199);
        assert!(!ids(&page).contains(&"j199".to_string()));
    }

    #[test]
    fn running_logs_are_unfinished_then_abandoned_then_completed_once() {
        let dir = tempfile::tempdir().unwrap();
        let start = String::from_utf8(
            encode_line(
                kind::JOB_START,
                &JobStart {
                    job_id: "u".into(),
                    job_name: "named".into(),
                    submitted_at: 7,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
        .unwrap();
        let running = dir.path().join("u.eventlog.running");
        std::fs::write(&running, &start).unwrap();
        let fresh = store(dir.path()).with_abandoned_after(Duration::from_secs(3600));
        fresh.rescan();
        let (u, state) = fresh.unfinished("u").unwrap();
        assert_eq!(
            (state, &*u.job_name, u.tasks),
            (JobState::Running, "named", 0)
        );
        assert!(!fresh.contains("u"));
        let stale = store(dir.path()).with_abandoned_after(Duration::ZERO);
        stale.rescan();
        assert_eq!(stale.unfinished("u").unwrap().1, JobState::Abandoned);

        // The file grows: only the new lines are read.
        let task = r#"{"ev":"TaskEnd","version":1,"data":{"stage_id":3,"task_id":0,"executor_id":"e","status":"Successful","launch_time":1,"start_exec_time":1,"end_exec_time":9,"metrics":{"input_rows":1,"output_rows":1,"elapsed_compute_nanos":1}}}"#;
        std::fs::write(&running, format!("{start}{task}\n{task}\n{{\"ev\"")).unwrap();
        fresh.rescan();
        let (u, _) = fresh.unfinished("u").unwrap();
        assert_eq!((u.tasks, u.last_task_end), (2, 9));
        assert_eq!(u.stages.iter().copied().collect::<Vec<_>>(), [3]);

        // Renamed with its terminal record: completed, and unfinished no more.
        std::fs::write(&running, format!("{start}{}\n", job_end_line("u", 1))).unwrap();
        std::fs::rename(&running, dir.path().join("u.eventlog")).unwrap();
        fresh.rescan();
        assert!(fresh.contains("u"));
        assert!(fresh.unfinished("u").is_none());
        let all = ListQuery {
            include_unfinished: true,
            ..Default::default()
        };
        assert_eq!(fresh.page(&all, None, &HashSet::new()).total, 1);
    }

    /// Writes job `p` through the real writer with `compression`.
    fn written(dir: &Path, compression: crate::writer::Compression) -> PathBuf {
        use crate::record::{JobStart, raw_or_null};
        use crate::writer::{WriterConfig, WriterMsg, spawn};
        let mut config = WriterConfig::new(dir);
        config.compression = compression;
        let (handle, thread) = spawn(config, Arc::new(HistoryMetrics::unregistered())).unwrap();
        let start = JobStart {
            job_id: "p".into(),
            ..Default::default()
        };
        handle.send(WriterMsg::Start(start.clone()));
        handle.send(WriterMsg::End {
            job_id: "p".into(),
            fallback_start: start,
            stages: vec![],
            end: Box::new(JobEnd {
                status: JobEndStatus::Succeeded,
                queued_at: 1,
                started_at: 2,
                completed_at: 3,
                index: JobIndex {
                    job_id: "p".into(),
                    ..Default::default()
                },
                job: raw_or_null(r#"{"job_id":"p"}"#),
                stages: raw_or_null(r#"{"stages":[{"config":{"a":1}}]}"#),
                config: raw_or_null(r#"{"a":"1","b":"2"}"#),
                dot: "digraph \"p\" {}".into(),
                dropped_records: 0,
                responses: Default::default(),
            }),
        });
        drop(handle);
        thread.join().unwrap();
        let name = match compression {
            crate::writer::Compression::None => "p.eventlog",
            crate::writer::Compression::Zstd(_) => "p.eventlog.zst",
        };
        dir.join(name)
    }

    #[test]
    fn payload_ranges_read_one_payload_and_a_moved_one_is_never_served() {
        use crate::record::payload::{CONFIG, DOT, JOB, STAGES};
        use crate::writer::{Compression, DEFAULT_ZSTD_LEVEL};
        for compression in [Compression::None, Compression::Zstd(DEFAULT_ZSTD_LEVEL)] {
            let dir = tempfile::tempdir().unwrap();
            let path = written(dir.path(), compression);
            let s = store(dir.path());
            s.rescan();
            let parts = s
                .read_payloads("p", &[CONFIG, DOT, JOB, STAGES])
                .unwrap()
                .expect("the footer locates every payload");
            assert_eq!(parts[0], br#"{"a":"1","b":"2"}"#);
            assert_eq!(parts[1], br#""digraph \"p\" {}""#);
            assert_eq!(parts[2], br#"{"job_id":"p"}"#);
            assert_eq!(parts[3], br#"{"stages":[{"config":{"a":1}}]}"#);

            // Rewritten in place with every byte shifted: the ranges point at
            // the wrong bytes, which are detected and not served.
            let mut bytes = std::fs::read(&path).unwrap();
            if compression == Compression::None {
                bytes.insert(0, b' ');
            } else {
                // Shift the frames (not the footer) by one byte.
                let footer_len =
                    u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap())
                        as usize;
                let at = bytes.len() - footer_len - 1;
                bytes.remove(at);
                bytes.insert(0, 0);
            }
            std::fs::write(&path, &bytes).unwrap();
            s.rescan();
            assert_eq!(s.read_payloads("p", &[CONFIG]).unwrap(), None);
            assert_eq!(s.read_payloads("p", &[DOT]).unwrap(), None);
        }
    }

    #[test]
    fn a_list_entry_is_the_schedulers_wire_type() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("w.eventlog"),
            job_end_line("w", 1).replace("\"job_name\":\"n\"", "\"job_name\":\"ü \\\"q\\\"\"")
                + "\n",
        )
        .unwrap();
        let s = store(dir.path());
        s.rescan();
        let summary = s.summary("w").unwrap();
        let wire: JobResponse = serde_json::from_slice(&summary.entry()).unwrap();
        assert_eq!(wire.job_name, "ü \"q\"");
        assert_eq!(serde_json::to_vec(&wire).unwrap(), summary.entry());
    }

    #[tokio::test(start_paused = true)]
    async fn rescans_pick_up_new_logs_on_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(store(dir.path()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(s.clone().rescan_every(Duration::from_secs(10), async {
            let _ = stop_rx.await;
        }));
        while !s.is_ready() {
            tokio::task::yield_now().await;
        }
        std::fs::write(dir.path().join("z.eventlog"), job_end_line("z", 1) + "\n").unwrap();
        assert!(!s.contains("z"));
        tokio::time::sleep(Duration::from_secs(11)).await;
        for _ in 0..100 {
            if s.contains("z") {
                break;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(s.contains("z"));
        stop_tx.send(()).unwrap();
        task.await.unwrap();
    }
}
