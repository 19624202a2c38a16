//! The store: a log directory or object-store prefix, indexed. It owns the
//! in-memory catalog of completed jobs and its rescans, one job's reads,
//! unfinished jobs, the persistent snapshot of the catalog, object-store
//! reading, the summaries published beside a prefix's logs, retention,
//! the job list's query, and the summaries on disk (`ondisk`) that
//! completed jobs move to past `--history-memory-jobs` (`cold`).
//!
//! **Rule:** this crate imports only `format`, `files` and `metrics`. It never
//! imports `recording` (the writer is another process's business as far as
//! reading goes) nor `serving`, and nothing here knows about HTTP.
//!
//! **Invariant:** the catalog holds only each job's list summary. A request
//! for a job reads that job's payload and nothing else: through the byte
//! ranges of the `Footer` our writer appends (one small read from the end
//! of the file, one seek per payload). A log without ranges has its
//! `JobEnd` line read whole: located by the footer, or, for logs without
//! one (upstream's), by reading backwards from the end to the start of the
//! last line. Only a log whose last record is neither falls back to a
//! forward scan. Indexing such a log reads less: a last line of 2 MiB or
//! more (a job of thousands of tasks) is read by its first and last
//! 256 KiB, which hold every field a summary needs; the `stages` payload
//! between them is only searched through for the line's start.
//!
//! **Invariant:** job ids from requests are looked up in the catalog and
//! never joined into a path; only names read from the directory become
//! paths.
//!
//! **Invariant:** one unreadable log is logged once (until it changes) and
//! hides nothing but itself.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

/// Equality and order of a handle by its `key()` (the handles the
/// catalog's ordered sets hold).
macro_rules! ordered_by_key {
    ($handle:ty) => {
        impl PartialEq for $handle {
            fn eq(&self, other: &Self) -> bool {
                self.key() == other.key()
            }
        }

        impl Eq for $handle {}

        impl PartialOrd for $handle {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $handle {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.key().cmp(&other.key())
            }
        }
    };
}

pub mod cluster;
mod cold;
pub mod labels;
pub mod ondisk;
pub mod published;
pub mod query;
pub mod records;
pub mod remote;
pub mod retention;
pub mod snapshot;

mod heap;
pub mod journal;
mod locate;
mod location;
mod orders;
mod parallel;
mod read;
mod scan;
mod stop;
mod summary;
mod tail;
mod unfinished;

use crate::query::{Facts, FactsRef, JobFacts, ListQuery, Page, Row, Tagged};
use crate::remote::RemoteDir;
use ballista_api_types::dto::JobResponse;
use bjh_format::footer::{FOOTER_FRAME_MAGIC, FOOTER_FRAME_TAG};
use bjh_format::record::{
    Envelope, Footer, JobEnd, JobEndStatus, JobEndSummary, JobStart, PlansOfJob, SCHEMA_VERSION,
    kind,
};
use bjh_format::usage::SlotUsage;
use bjh_format::{JobState, LogName, epoch_millis};
use bjh_metrics::HistoryMetrics;
use bytes::Bytes;
use parking_lot::RwLock;
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

pub use cold::spill_dir_of;
pub(crate) use location::ReadSeek;
pub use location::{LogRef, Stamp};
use orders::SecondOrders;
pub use read::open_decoded;
pub use read::{
    Line, MAX_LINE, read_job_start, read_line, read_summary, read_summary_located, terminal_line,
};
use read::{Ranges, Tolerant};
pub use summary::intern;
use summary::{ById, ByPosition, Catalog, CatalogSets, FileKind, Listed, rows_of};
pub use summary::{JobSummary, PayloadRanges, SummaryParts};
pub use unfinished::*;

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
    /// The log's terminal record names another job than its file name.
    #[error(
        "the event log's terminal record is of job {claimed:?}, not of the job its file is \
         named for; it is not served as either"
    )]
    NotItsName {
        /// The job id inside the log.
        claimed: String,
    },
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
    catalog: Arc<RwLock<Catalog>>,
    /// The catalog's journal of changes, reached without its lock.
    journal: Arc<journal::Journal>,
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
    /// Logs left out for a twin, already said (`scan::twins_left_out`).
    twins_warned: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// The cluster logs read so far.
    cluster: parking_lot::Mutex<cluster::ClusterCache>,
    /// What rescans of a prefix took from its published summaries, and
    /// where its listing pass goes on (`published`).
    reading: parking_lot::Mutex<published::Reading>,
    /// Listing pages a rescan of a prefix reads (`0`: all), of this many
    /// names each.
    listing_pages: usize,
    page_keys: usize,
    /// The summaries this process publishes, when it records.
    publishing: Option<published::Publishing>,
    /// Jobs taken in (`take_in_found`) while a rescan of a prefix runs:
    /// its listing may predate their objects, and they are not gone.
    taken_in: parking_lot::Mutex<Option<HashSet<Arc<str>>>>,
    /// Completed jobs moved to segments on disk (`cold`), less those the
    /// catalog holds again or forgot (hidden).
    cold: parking_lot::RwLock<ondisk::Layered>,
    /// Where and from how many jobs in memory to move them, if anywhere.
    spill: Option<cold::Spill>,
    /// Changes whenever the segments' jobs do.
    cold_version: std::sync::atomic::AtomicU64,
    /// The last error reading the segments, so a lasting one is logged once.
    cold_error: parking_lot::Mutex<Option<String>>,
    /// A read of the segments failed since they were last checked.
    cold_damaged: AtomicBool,
    /// Segments no longer serving, to remove once a saved manifest no
    /// longer names them.
    retired: parking_lot::Mutex<Vec<PathBuf>>,
    /// Whether segments were loaded from beside the index (its manifest
    /// is then kept up to date even with nothing spilled).
    spilled_before: AtomicBool,
    /// Whether passes are to stop (`stop`).
    stopping: AtomicBool,
}

/// The least time between two saves of the persistent index (a save of a
/// million jobs writes about 150 MB).
pub(crate) const INDEX_SAVE_SPACING: Duration = Duration::from_secs(30);

/// A completed log, as retention sees it.
#[derive(Debug, Clone)]
pub struct CompletedFile {
    /// The job.
    pub job_id: Arc<str>,
    /// The log's file name within the directory.
    pub file_name: Arc<str>,
    /// Its size in bytes.
    pub len: u64,
    /// When the job ended (epoch millis): the earlier of the end time its
    /// log claims and the log's modification time.
    pub end_time: u64,
}

impl LogStore {
    /// An empty index of `dir`; call [`LogStore::rescan`] to fill it.
    pub fn new(dir: impl Into<PathBuf>, metrics: Arc<HistoryMetrics>) -> Self {
        heap::fix_thresholds();
        let catalog = Catalog::default();
        let store = Self {
            dir: dir.into(),
            remote: None,
            ranges: parking_lot::Mutex::new(HashMap::new()),
            journal: catalog.journal.clone(),
            catalog: Arc::new(RwLock::new(catalog)),
            ready: AtomicBool::new(false),
            metrics,
            abandoned_after: DEFAULT_ABANDONED_AFTER,
            list_error: parking_lot::Mutex::new(None),
            index_file: None,
            dirty: AtomicBool::new(false),
            last_saved: parking_lot::Mutex::new(None),
            save_error: parking_lot::Mutex::new(None),
            twins_warned: parking_lot::Mutex::new(std::collections::HashSet::new()),
            cluster: parking_lot::Mutex::new(cluster::ClusterCache::default()),
            reading: parking_lot::Mutex::new(published::Reading::default()),
            listing_pages: published::DEFAULT_LISTING_PAGES,
            page_keys: published::PAGE_KEYS,
            publishing: None,
            taken_in: parking_lot::Mutex::new(None),
            cold: parking_lot::RwLock::new(ondisk::Layered::default()),
            spill: None,
            cold_version: std::sync::atomic::AtomicU64::new(0),
            cold_error: parking_lot::Mutex::new(None),
            cold_damaged: AtomicBool::new(false),
            retired: parking_lot::Mutex::new(Vec::new()),
            spilled_before: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        };
        #[cfg(test)]
        let store = store.spill_under_test();
        store
    }

    /// The cluster logs beside the job logs (`DIR/.cluster/`, or
    /// `<prefix>/.cluster/`), read as of `now` (epoch millis); only the
    /// files that changed since the last call are read again.
    pub fn cluster(&self, now: u64) -> cluster::ClusterHistory {
        let source = match &self.remote {
            Some(remote) => cluster::Source::Remote(remote),
            None => cluster::Source::Local(&self.dir),
        };
        self.cluster.lock().read(source, now)
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

    /// The completed log named `file_name` as it was indexed with `stamp`:
    /// read only while it is that file.
    pub(crate) fn log_indexed(&self, file_name: &str, stamp: Stamp) -> LogRef {
        match &self.remote {
            Some(_) => self.log(file_name, stamp.len),
            None => LogRef::Indexed {
                path: self.dir.join(file_name),
                stamp,
            },
        }
    }

    /// Deletes the log named `file_name`; one already gone is `NotFound`.
    pub fn remove_log(&self, file_name: &str) -> std::io::Result<()> {
        match &self.remote {
            Some(dir) => {
                dir.delete(file_name)?;
                // Readers of the published summaries learn it from the
                // manifest, not only when their listing reaches the name.
                self.removed_log(file_name);
                Ok(())
            }
            None => std::fs::remove_file(self.dir.join(file_name)),
        }
    }

    /// The footer of job `job_id`'s completed log, when it has one (one
    /// small read from the end of the file or object).
    pub fn footer(&self, job_id: &str) -> Option<bjh_format::record::Footer> {
        let log = self.log_of(job_id)?;
        read::footer_of(&log)
            .ok()
            .flatten()
            .map(|(footer, _)| footer)
    }

    /// The cluster logs' names (`DIR/.cluster/`, or `<prefix>/.cluster/`).
    pub fn cluster_log_names(&self) -> Vec<String> {
        let listed = match &self.remote {
            Some(remote) => remote.cluster_objects().unwrap_or_default(),
            None => cluster::local_files(&self.dir),
        };
        listed.into_iter().map(|(name, _)| name).collect()
    }

    /// Deletes the cluster log `name`.
    pub fn remove_cluster_log(&self, name: &str) -> std::io::Result<()> {
        match &self.remote {
            Some(dir) => dir.delete_cluster_object(name),
            None => {
                std::fs::remove_file(self.dir.join(bjh_format::cluster::CLUSTER_DIR).join(name))
            }
        }
    }

    /// Keeps a persistent index at `path` (its format: ARCHITECTURE.md).
    pub fn with_index_file(mut self, path: Option<PathBuf>) -> Self {
        // Segments spill beside the index, where a restart finds them.
        if let (Some(spill), Some(index)) = (&mut self.spill, &path) {
            spill.dir = cold::spill_dir_of(index);
        }
        self.index_file = path;
        self
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

    /// The completed jobs that ran at some time in `[from, to)`: started
    /// before `to` and ended at or after `from`.
    pub fn ran_between(&self, from: u64, to: u64) -> Vec<Arc<JobSummary>> {
        let ran = |s: &Arc<JobSummary>| s.start_time < to && s.end_time.max(s.start_time) >= from;
        // The segments read under the catalog's lock: a spill's swap
        // cannot fall between them (a job twice, or not at all).
        let index = self.catalog.read();
        let mut out: Vec<Arc<JobSummary>> = (index.jobs.iter())
            .map(|ById(s)| s)
            .filter(|s| ran(s))
            .cloned()
            .collect();
        if self.has_cold() {
            // Only the blocks whose times allow such a job are read.
            self.each_cold_in(Some((from, to)), |j| {
                if ran(&j) {
                    out.push(j);
                }
            });
        }
        out
    }

    /// Every completed log the index holds: id, file name, size, end time
    /// (epoch millis; the file's modification time when the log has none).
    pub fn completed_files(&self) -> Vec<CompletedFile> {
        let file = |s: &JobSummary| CompletedFile {
            job_id: s.job_id().into(),
            file_name: s.file_name().into(),
            len: s.len,
            // The earlier of what the log claims and what the file
            // system says: a log claiming to end in 2200 cannot make
            // the cleaner delete real ones first.
            end_time: match (s.end_time, s.stamp().modified.map(epoch_millis)) {
                (0, modified) => modified.unwrap_or(0),
                (claimed, Some(modified)) => claimed.min(modified),
                (claimed, None) => claimed,
            },
        };
        // As in `ran_between`: a job counted twice would make the cleaner
        // delete more than its limit asks.
        let index = self.catalog.read();
        let mut out: Vec<CompletedFile> = index.jobs.iter().map(|ById(s)| file(s)).collect();
        if self.has_cold() {
            self.each_cold(|s| out.push(file(&s)));
        }
        out
    }

    /// Drops a completed job from the index at once (its log was deleted).
    pub fn forget(&self, job_id: &str) {
        let mut catalog = self.catalog.write();
        if catalog.remove(job_id).is_some() || self.cold_hide(job_id) {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Every unfinished log the index holds: job id, file name, and when
    /// it was last modified.
    pub fn unfinished_files(&self) -> Vec<(Arc<str>, Arc<str>, Option<SystemTime>)> {
        self.catalog
            .read()
            .unfinished
            .values()
            .map(|u| (u.job_id.clone(), u.file_name.clone(), u.stamp.modified))
            .collect()
    }

    /// Drops an unfinished job from the index at once.
    pub fn forget_unfinished(&self, job_id: &str) {
        self.catalog.write().unfinished.remove(job_id);
    }

    /// Whether `job_id` is indexed as completed.
    pub fn contains(&self, job_id: &str) -> bool {
        self.completed(job_id).is_some()
    }

    /// Number of completed jobs indexed.
    pub fn len(&self) -> usize {
        self.catalog.read().jobs.len() + self.spilled()
    }

    /// Whether no completed job is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The completed job's summary, if indexed.
    pub fn summary(&self, job_id: &str) -> Option<Arc<JobSummary>> {
        self.completed(job_id)
    }

    /// The unfinished job's index entry and state, if indexed (and not
    /// also completed).
    pub fn unfinished(&self, job_id: &str) -> Option<(Unfinished, JobState)> {
        let index = self.catalog.read();
        if index.jobs.contains(job_id) {
            return None;
        }
        let u = index.unfinished.get(job_id)?.clone();
        drop(index);
        if self.cold_get(job_id).is_some() {
            return None;
        }
        let state = u.state(SystemTime::now(), self.abandoned_after);
        Some((u, state))
    }

    /// A job's log, completed or unfinished.
    pub fn log_of(&self, job_id: &str) -> Option<LogRef> {
        if let Some(s) = self.completed(job_id) {
            return Some(self.log_indexed(&s.file_name(), s.stamp()));
        }
        let index = self.catalog.read();
        let u = index.unfinished.get(job_id)?;
        Some(self.log(&u.file_name, u.stamp.len))
    }

    /// A number that changes whenever the completed jobs change (one is
    /// added, replaced or forgotten), so a reader can tell nothing did.
    pub fn version(&self) -> u64 {
        self.catalog
            .read()
            .version
            .wrapping_add(self.cold_version() << 32)
    }

    /// The size of a job's log when it was last indexed.
    pub fn log_len(&self, job_id: &str) -> Option<u64> {
        if let Some(s) = self.completed(job_id) {
            return Some(s.len);
        }
        let index = self.catalog.read();
        index.unfinished.get(job_id).map(|u| u.stamp.len)
    }

    /// Runs `f` over every completed job's summary, newest queued first,
    /// as the store held them when the walk began. No lock is held while
    /// `f` runs (a rescan or a move goes on meanwhile): the walk holds
    /// the catalog's jobs (shared, not copied) and reads the segments'
    /// again, one block of each at a time, so what it keeps in memory
    /// besides what `f` keeps does not grow with the jobs on disk. A
    /// segment's block that cannot be read is logged and left out.
    pub fn with_completed<T>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = Arc<JobSummary>>) -> T,
    ) -> T {
        let (hot, cold) = self.walk_copies(|_| true);
        let Some(cold) = cold else {
            return f(&mut hot.into_iter());
        };
        let below = cold
            .jobs_in_order()
            .filter_map(|j| j.map_err(|e| self.cold_failed(&e)).ok());
        use itertools::Itertools;
        let mut all = hot.into_iter().merge_by(below, |a, b| {
            (Reverse(a.position_key()), a.job_id()) < (Reverse(b.position_key()), b.job_id())
        });
        f(&mut all)
    }

    /// Runs `f` over the completed jobs whose query hash is in `hashes`,
    /// by query hash (lowest first; one query's runs together, in no
    /// promised order), as the store held them when the walk began: as
    /// [`LogStore::with_completed`] walks, holding no lock while `f`
    /// runs, reading each segment's order by query a block at a time. A
    /// caller grouping by query keeps one query's runs at a time.
    pub fn with_completed_by_query<T>(
        &self,
        hashes: std::ops::RangeInclusive<u64>,
        f: impl FnOnce(&mut dyn Iterator<Item = Arc<JobSummary>>) -> T,
    ) -> T {
        let (mut hot, cold) = self.walk_copies(|s| hashes.contains(&s.query_hash()));
        hot.sort_unstable_by_key(|s| s.query_hash());
        let Some(cold) = cold else {
            return f(&mut hot.into_iter());
        };
        let below =
            (cold.jobs_by_query(hashes)).filter_map(|j| j.map_err(|e| self.cold_failed(&e)).ok());
        use itertools::Itertools;
        let mut all = (hot.into_iter()).merge_by(below, |a, b| a.query_hash() <= b.query_hash());
        f(&mut all)
    }

    /// Where the journal of changes stands: given to
    /// [`LogStore::changed_since`] later, it tells which completed jobs
    /// were added or removed meanwhile.
    pub fn changes_at(&self) -> u64 {
        self.journal.position()
    }

    /// The ids of the completed jobs added or removed since `at` (sorted,
    /// each once; listed now or not), and the position after them; `None`
    /// when the store no longer knows (more than [`journal::CAP`] changes,
    /// or one in bulk): a reader reads every job then.
    pub fn changed_since(&self, at: u64) -> Option<(Vec<String>, u64)> {
        self.journal.since(at)
    }

    /// Runs `f` over the completed jobs by id (bytewise), as the store
    /// held them when the walk began: as [`LogStore::with_completed`]
    /// walks, holding no lock while `f` runs, reading each segment's
    /// order by id a block at a time. A caller joining the jobs with a
    /// list sorted by id reads both in step.
    pub fn with_completed_by_id<T>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = Arc<JobSummary>>) -> T,
    ) -> T {
        let (mut hot, cold) = self.walk_copies(|_| true);
        hot.sort_unstable_by(|a, b| a.job_id().cmp(b.job_id()));
        let Some(cold) = cold else {
            return f(&mut hot.into_iter());
        };
        let below = (cold.jobs_by_id()).filter_map(|j| j.map_err(|e| self.cold_failed(&e)).ok());
        use itertools::Itertools;
        let mut all = (hot.into_iter()).merge_by(below, |a, b| a.job_id() <= b.job_id());
        f(&mut all)
    }

    /// What a walk reads: the catalog's jobs `keep` accepts (shared, in
    /// the default order) and a copy of the segments, both taken under
    /// the catalog's lock, so that a move's swap cannot fall between them.
    fn walk_copies(
        &self,
        keep: impl Fn(&JobSummary) -> bool,
    ) -> (Vec<Arc<JobSummary>>, Option<ondisk::Layered>) {
        let index = self.catalog.read();
        let hot = (index.order.iter())
            .map(|ByPosition(s)| s)
            .filter(|s| keep(s))
            .cloned()
            .collect();
        (hot, self.cold_copy())
    }

    /// The ids of up to `n` completed jobs, newest queued first, after
    /// the job of `after` (from the first when none), and the cursor of
    /// the next call (none after the last job): a caller that must let
    /// go of the store between pages (an export sending each job)
    /// pages through every job as `GET /api/jobs` does, holding a page.
    pub fn completed_ids(&self, after: Option<&Facts>, n: usize) -> (Vec<String>, Option<Facts>) {
        let q = ListQuery {
            limit: Some(n),
            ..ListQuery::default()
        };
        let page = self.page(&q, after, &HashSet::new());
        let next = (page.rows.len() == n && n > 0)
            .then(|| page.rows.last().map(|r| Facts::of(&*r.facts)))
            .flatten();
        let ids = page.rows.iter().map(|r| r.facts.job_id().to_string());
        (ids.collect(), next)
    }

    /// The facts of a job, completed or unfinished (for a list cursor).
    pub fn facts(&self, job_id: &str) -> Option<Facts> {
        if let Some(s) = self.completed(job_id) {
            return Some(Facts::of(&*s));
        }
        let index = self.catalog.read();
        let u = index.unfinished.get(job_id)?;
        Some(u.facts(u.state(SystemTime::now(), self.abandoned_after)))
    }

    /// How many jobs are in each state (by [`JobState::index`]): completed
    /// jobs, and unfinished ones when `unfinished`, leaving out the ids in
    /// `skip`. Costs O(skip + unfinished), not O(jobs).
    pub fn counts(&self, skip: &HashSet<String>, unfinished: bool) -> [usize; 6] {
        // Both read under the catalog's lock: a spill's swap (under its
        // write lock) cannot fall between them.
        let index = self.catalog.read();
        let cold = self.has_cold();
        let cold_skip: HashSet<String> = (skip.iter())
            .filter(|id| cold && !index.jobs.contains(id.as_str()))
            .cloned()
            .collect();
        let spilled = self.cold_counts(&cold_skip);
        let mut counts = index.counts;
        for (n, c) in counts.iter_mut().zip(spilled) {
            *n += c;
        }
        for id in skip {
            if let Some(s) = index.get(id) {
                counts[s.state().index()] -= 1;
            }
        }
        if unfinished {
            let now = SystemTime::now();
            for u in index.unfinished.values() {
                let done =
                    index.jobs.contains(&*u.job_id) || (cold && self.cold_get(&u.job_id).is_some());
                if !done && !skip.contains(&*u.job_id) {
                    counts[u.state(now, self.abandoned_after).index()] += 1;
                }
            }
        }
        counts
    }

    /// [`LogStore::counts`] (unfinished logs included) per scheduler, by
    /// id; the jobs whose logs name none under `None`.
    pub fn counts_by_scheduler(&self) -> Vec<(Option<Arc<str>>, [usize; 6])> {
        let index = self.catalog.read();
        let cold = self.has_cold();
        let spilled = self.cold_counts_by_scheduler();
        let mut named = index.by_scheduler.clone();
        let mut unnamed = index.counts;
        for counts in named.values() {
            for (all, theirs) in unnamed.iter_mut().zip(counts) {
                *all -= theirs;
            }
        }
        for (id, counts) in spilled {
            let mine = match id {
                Some(id) => named.entry(id).or_default(),
                None => &mut unnamed,
            };
            for (n, c) in mine.iter_mut().zip(counts) {
                *n += c;
            }
        }
        let now = SystemTime::now();
        for u in index.unfinished.values() {
            if index.jobs.contains(&*u.job_id) || (cold && self.cold_get(&u.job_id).is_some()) {
                continue;
            }
            let state = u.state(now, self.abandoned_after).index();
            match &u.scheduler_id {
                Some(id) => named.entry(id.clone()).or_default()[state] += 1,
                None => unnamed[state] += 1,
            }
        }
        let mut out: Vec<_> = named.into_iter().map(|(id, c)| (Some(id), c)).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        if unnamed.iter().any(|n| *n > 0) || out.is_empty() {
            out.push((None, unnamed));
        }
        out
    }

    /// One page of the list: completed jobs, and unfinished ones when the
    /// query asks for them, leaving out the ids in `skip` (jobs another
    /// source lists). The default order without filters costs O(page);
    /// anything else one pass over the summaries.
    pub fn page(&self, q: &ListQuery, cursor: Option<&Facts>, skip: &HashSet<String>) -> Page {
        // Both sources' pages as far as this one's end, merged by the
        // list's own pass, under the catalog's lock: a spill's swap (under
        // its write lock) cannot fall between them.
        let _both = self.catalog.read_recursive();
        if !self.has_cold() {
            return self.page_catalog(q, cursor, skip);
        }
        let wider = ListQuery {
            offset: 0,
            limit: q.limit.map(|l| q.offset.saturating_add(l)),
            ..q.clone()
        };
        let mine = self.page_catalog(&wider, cursor, skip);
        let Some((theirs, their_total)) = self.cold_page(&wider, cursor, skip) else {
            return mine;
        };
        let theirs = theirs.into_iter().map(|s| Row {
            entry: s.entry(),
            facts: s,
        });
        let (rows, _) = q.pick(mine.rows.into_iter().chain(theirs), cursor);
        Page {
            rows,
            total: mine.total + their_total,
        }
    }

    /// [`LogStore::page`] of the catalog's jobs alone.
    fn page_catalog(&self, q: &ListQuery, cursor: Option<&Facts>, skip: &HashSet<String>) -> Page {
        // Recursive: `page` may hold it already (a plain read would wait
        // behind a queued writer, which waits for `page`).
        let index = self.catalog.read_recursive();
        let unfinished = q.wants_unfinished();
        // The default order filtered by state at most: walk the ordered set
        // and stop at the page's end; the total is the tallies'.
        if q.filters_states_only() && q.default_order() && !unfinished {
            let wanted_state = |s: JobState| q.states.as_ref().is_none_or(|w| w.contains(&s));
            let total = index.state_total(q, skip);
            let at = cursor.map(|c| ByPosition(Arc::new(JobSummary::probe(c))));
            let wanted = |s: &&ByPosition| {
                wanted_state(s.0.state()) && (skip.is_empty() || !skip.contains(s.0.job_id()))
            };
            let take = q.limit.unwrap_or(usize::MAX);
            let rows = match (at, q.before.is_some()) {
                (Some(at), true) => {
                    let mut jobs: Vec<&Arc<JobSummary>> = index
                        .order
                        .range(..at)
                        .rev()
                        .filter(wanted)
                        .skip(q.offset)
                        .take(take)
                        .map(|ByPosition(s)| s)
                        .collect();
                    jobs.reverse();
                    rows_of(jobs.into_iter())
                }
                (at, _) => {
                    let from = at.map_or(Bound::Unbounded, Bound::Excluded);
                    let jobs = index
                        .order
                        .range((from, Bound::Unbounded))
                        .filter(wanted)
                        .skip(q.offset)
                        .take(take)
                        .map(|ByPosition(s)| s);
                    rows_of(jobs)
                }
            };
            return Page { rows, total };
        }
        // Sorted by duration, or one query's runs: walk a second order.
        if !unfinished && let Some(page) = Self::second_page(&index, q, cursor, skip) {
            return page;
        }
        let now = SystemTime::now();
        let states: Vec<Tagged> = if unfinished {
            index
                .unfinished
                .values()
                .filter(|u| !index.jobs.contains(&*u.job_id))
                .map(|u| u.tagged(u.state(now, self.abandoned_after)))
                .collect()
        } else {
            Vec::new()
        };
        // Only unfinished states asked for: no completed job can match,
        // so they are not walked (the `jobs` table asks this per query);
        // a time filter walks only the part of the order it can match.
        let completed = q
            .states
            .as_ref()
            .is_none_or(|w| w.iter().any(|s| !s.is_unfinished()))
            .then(|| index.order.range(index.spread.bounds(q)))
            .into_iter()
            .flatten();
        let jobs = completed
            .map(|ByPosition(s)| Listed::Done(s))
            .chain(states.iter().map(Listed::Open))
            .filter(|j| skip.is_empty() || !skip.contains(j.job_id()));
        let (picked, total) = q.pick(jobs, cursor);
        let rows = picked
            .into_iter()
            .map(|j| match index.get(j.job_id()) {
                Some(s) => Row {
                    facts: s.clone(),
                    entry: s.entry(),
                },
                None => {
                    let u = &index.unfinished[j.job_id()];
                    Row {
                        facts: Arc::new(Tagged::of(&j)),
                        entry: u.response(j.state(), None),
                    }
                }
            })
            .collect();
        Page { rows, total }
    }

    /// The path of a completed job's log.
    fn completed_path(&self, job_id: &str) -> Option<LogRef> {
        let s = self.completed(job_id)?;
        Some(self.log_indexed(&s.file_name(), s.stamp()))
    }
}

#[cfg(test)]
mod tests {
    use super::read::bounded_line;
    use super::scan::ScanReport;
    use super::*;
    use bjh_format::record::{Footer, JobIndex, encode_line};

    fn job_end_line(id: &str, version: u32) -> String {
        format!(
            r#"{{"ev":"JobEnd","version":{version},"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"n","status":"Completed","job_status":"Completed.","start_time":2,"end_time":3,"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{"job_id":"{id}"}},"stages":{{"stages":[]}},"config":{{"k":"v"}},"dot":"digraph G {{}}"}}}}"#
        )
    }

    /// A seeded generator of numbers below its argument (a linear
    /// congruential one: the tests' random queries are the same each run).
    pub(crate) fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        }
    }

    /// The list rows of `jobs`, as a source holding them would give them.
    pub(crate) fn rows_for(jobs: &[Arc<JobSummary>]) -> Vec<Row> {
        jobs.iter()
            .map(|j| Row {
                facts: j.clone(),
                entry: j.entry(),
            })
            .collect()
    }

    /// The ids of a page's rows, in order.
    pub(crate) fn page_ids(p: &Page) -> Vec<String> {
        p.rows
            .iter()
            .map(|r| r.facts.job_id().to_string())
            .collect()
    }

    pub(crate) fn store(dir: &Path) -> LogStore {
        LogStore::new(dir, Arc::new(HistoryMetrics::unregistered()))
    }

    /// A job's scheduler and tags are one shared pointer: jobs with the
    /// same pair hold the same one, a job with neither holds none, and the
    /// summary stays at the size that puts it in the allocator's 160-byte
    /// class (two shared strings put it in the 192-byte one).
    #[test]
    fn a_scheduler_and_its_tags_are_held_once_for_all_their_jobs() {
        let job = |id: &str, scheduler: Option<&str>, tags: Option<&str>| {
            summary_of(id, JobState::Completed, [1, 2, 3], 0, [scheduler, tags])
        };
        let a = job("a", Some("s1"), Some(r#"{"team":"etl"}"#));
        let b = job("b", Some("s1"), Some(r#"{"team":"etl"}"#));
        let c = job("c", Some("s1"), None);
        let d = job("d", None, Some(r#"{"team":"etl"}"#));
        let e = job("e", Some(""), Some(""));
        let ptr = |j: &JobSummary| j.shared.as_ref().map(Arc::as_ptr);
        assert_eq!(ptr(&a), ptr(&b));
        assert_ne!(ptr(&a), ptr(&c));
        assert_ne!(ptr(&c), ptr(&d));
        assert_eq!(ptr(&e), None);
        assert_eq!((c.scheduler_id(), c.tags()), (Some("s1"), None));
        assert_eq!(
            (d.scheduler_id(), d.tags()),
            (None, Some(r#"{"team":"etl"}"#))
        );
        assert_eq!((e.scheduler_id(), e.tags()), (None, None));
        // The scheduler id itself is shared with every pair naming it (the
        // per-scheduler counts key on it).
        assert!(Arc::ptr_eq(a.scheduler().unwrap(), c.scheduler().unwrap()));
        // An `Arc`'s counts (16 bytes) and the allocator's 8-byte header
        // fit the summary in 160 bytes.
        assert!(std::mem::size_of::<JobSummary>() + 16 + 8 <= 160);
    }

    /// A completed job's summary with these facts (`times`: queued,
    /// started, ended), named `<id>.eventlog`.
    pub(crate) fn summary_at(
        id: &str,
        state: JobState,
        times: [u64; 3],
        query_hash: u64,
    ) -> JobSummary {
        summary_of(id, state, times, query_hash, [None, None])
    }

    /// [`summary_at`] with a scheduler id and usage tags.
    fn summary_of(
        id: &str,
        state: JobState,
        times: [u64; 3],
        query_hash: u64,
        [scheduler_id, tags]: [Option<&str>; 2],
    ) -> JobSummary {
        let [queued_time, start_time, end_time] = times;
        JobSummary::restore(SummaryParts {
            facts: FactsRef {
                job_id: id,
                job_name: "n",
                state,
                queued_time,
                start_time,
                end_time,
                query_hash,
            },
            job_status: "",
            status: state.status_word(),
            stages: [1, 1],
            percent_complete: 100,
            dropped_records: 0,
            file_name: &format!("{id}.eventlog"),
            len: 1,
            modified: None,
            ranges: None,
            scheduler_id,
            usage: None,
            tags,
        })
    }

    /// A time filter walks only the part of the default order its jobs
    /// can be in: every page and total are those of a pass over every
    /// job (the oracle: `ListQuery::select` over all rows), for jobs
    /// whose times agree and jobs whose times lie (a start before the
    /// queue time, an end before the start, times unknown).
    #[test]
    fn a_time_filter_walks_part_of_the_order_and_answers_as_a_full_pass() {
        use crate::query::{Order, Sort};
        let mut next = below(7);
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut all = Vec::new();
        for i in 0..3000u64 {
            let queued = if next(10) == 0 { 0 } else { 10_000 + i * 10 };
            let start = match next(20) {
                0 => 0,
                1 => queued.saturating_sub(next(5_000)),
                _ => queued + next(2_000),
            };
            let end = match next(20) {
                0 => 0,
                1 => start.saturating_sub(next(5_000)),
                _ => start + next(3_000),
            };
            let id = format!("j{i:05}");
            let state =
                [JobState::Completed, JobState::Failed, JobState::Cancelled][next(3) as usize];
            s.catalog
                .write()
                .insert(summary_at(&id, state, [queued, start, end], 0));
            all.push(s.summary(&id).unwrap());
        }
        let rows = rows_for(&all);
        let time = |next: &mut dyn FnMut(u64) -> u64| (next(2) == 0).then(|| 8_000 + next(36_000));
        let mut narrowed = 0;
        for round in 0..600 {
            let q = ListQuery {
                limit: (next(4) > 0).then(|| 1 + next(60) as usize),
                offset: next(3) as usize,
                started_after: time(&mut next),
                started_before: time(&mut next),
                ended_after: time(&mut next),
                ended_before: time(&mut next),
                states: (next(3) == 0).then(|| vec![JobState::Failed]),
                sort: [
                    Sort::QueuedTime,
                    Sort::StartTime,
                    Sort::EndTime,
                    Sort::Duration,
                    Sort::Name,
                ][next(5) as usize],
                order: [None, Some(Order::Asc), Some(Order::Desc)][next(3) as usize],
                ..ListQuery::default()
            };
            let cursor = (next(4) == 0).then(|| Facts::of(&*all[next(3000) as usize]));
            let got = s.page(&q, cursor.as_ref(), &HashSet::new());
            let want = q.select(rows.clone(), cursor.as_ref());
            assert_eq!(page_ids(&got), page_ids(&want), "round {round}: {q:?}");
            assert_eq!(got.total, want.total, "round {round}: {q:?}");
            let bounds = s.catalog.read().spread.bounds(&q);
            narrowed += usize::from(!matches!(bounds, (Bound::Unbounded, Bound::Unbounded)));
        }
        assert!(narrowed > 100, "the filters narrowed {narrowed} walks");
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
    fn a_log_not_named_after_its_job_is_unreadable_and_hides_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // x.eventlog claims to be j2's log; the real j2 is beside it.
        std::fs::write(dir.path().join("x.eventlog"), job_end_line("j2", 1) + "\n").unwrap();
        std::fs::write(dir.path().join("j2.eventlog"), job_end_line("j2", 1) + "\n").unwrap();
        let zst = zstd::encode_all((job_end_line("j3", 1) + "\n").as_bytes(), 3).unwrap();
        std::fs::write(dir.path().join("j3.eventlog.zst"), zst).unwrap();
        let index = dir.path().join("index");
        let s = store(dir.path()).with_index_file(Some(index.clone()));
        let report = s.rescan();
        assert_eq!((report.read, report.bad), (3, 1));
        let names =
            |s: &LogStore| ["j2", "j3"].map(|id| s.summary(id).unwrap().file_name().into_owned());
        assert_eq!(names(&s), ["j2.eventlog", "j3.eventlog.zst"]);
        assert!(s.summary("x").is_none());
        assert_eq!(s.len(), 2);
        // Unchanged files are not read again, the liar included.
        assert_eq!(s.rescan(), ScanReport::default());
        s.persist(true);
        let restored = store(dir.path()).with_index_file(Some(index));
        assert_eq!(restored.load_persisted(), 2);
        assert_eq!(names(&restored), names(&s));
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
                        query_hash: None,
                        query_label: None,
                        scheduler_id: None,
                        busy_slot_ms: None,
                        failed_slot_ms: None,
                        busy_by_executor: Default::default(),
                        tags: Default::default(),
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

    /// Regression: the reader of `.running` logs failed a whole log on a
    /// progress record of a newer schema that the timeline's reader
    /// skips; both now read a line the one way and agree.
    #[test]
    fn a_newer_progress_record_is_skipped_by_every_pass_alike() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/upstream");
        let log = std::fs::read_to_string(root.join("038HEXYE9M000.eventlog")).unwrap();
        let mut tasks = 0;
        let lines: Vec<String> = log
            .lines()
            .take_while(|l| !l.starts_with("{\"ev\":\"JobEnd\""))
            .map(|l| {
                if l.starts_with("{\"ev\":\"TaskEnd\",\"version\":1") {
                    tasks += 1;
                    if tasks == 2 {
                        return l.replacen("\"version\":1", "\"version\":2", 1);
                    }
                }
                l.to_string()
            })
            .collect();
        assert!(tasks > 2, "the fixture has tasks");
        let path = dir.path().join("038HEXYE9M000.eventlog.running");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let s = store(dir.path());
        s.rescan();
        let (unfinished, _) = s.unfinished("038HEXYE9M000").expect("listed, not failed");
        let records = crate::records::JobRecords::read(&path).unwrap();
        assert_eq!(unfinished.tasks, tasks - 1);
        assert_eq!(records.tasks.len() as u64, tasks - 1);
        // A newer `JobStart` opening the log is the one line no pass can
        // do without: the log is refused with the upgrade message.
        let other = tempfile::tempdir().unwrap();
        let newer = lines
            .join("\n")
            .replacen("\"version\":1", "\"version\":2", 1);
        std::fs::write(other.path().join(path.file_name().unwrap()), newer + "\n").unwrap();
        let s = store(other.path());
        assert_eq!(s.rescan().bad, 1);
        assert!(s.unfinished("038HEXYE9M000").is_none());
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
            let mut line = job_end_at(&id, 1 + i / 4);
            if i % 3 == 0 {
                line = line
                    .replace("\"status\":\"Completed\"", "\"status\":\"Failed\"")
                    .replace(
                        "\"status\":\"Succeeded\"",
                        "\"status\":{\"Failed\":\"boom\"}",
                    );
            }
            std::fs::write(dir.path().join(format!("{id}.eventlog")), line + "\n").unwrap();
        }
        let s = store(dir.path());
        s.rescan();
        let ids = |p: &Page| -> Vec<String> {
            p.rows
                .iter()
                .map(|r| r.facts.job_id().to_string())
                .collect()
        };
        let none = HashSet::new();
        // `min_duration_ms=0` filters nothing but forces the full pass.
        let limit = |n| ListQuery {
            limit: Some(n),
            ..ListQuery::default()
        };
        let full_pass = |q: &ListQuery| ListQuery {
            min_duration_ms: Some(0),
            ..q.clone()
        };
        let fast = ListQuery {
            offset: 3,
            ..limit(7)
        };
        let slow = full_pass(&fast);
        assert!(fast.filters_nothing() && !slow.filters_nothing());
        let cursor = s.facts("j101").unwrap();
        for c in [None, Some(&cursor)] {
            let (a, b) = (s.page(&fast, c, &none), s.page(&slow, c, &none));
            assert_eq!(ids(&a), ids(&b));
            assert_eq!(a.total, b.total);
            assert_eq!(a.rows.len(), 7);
        }
        // Filtered by state only, and walking back: the ordered walk and
        // the tallies against the full pass.
        let everything = ids(&s.page(&ListQuery::default(), None, &none));
        let failed = Some(vec![JobState::Failed]);
        let before = |id: &str| Some(id.to_string());
        for fq in [
            ListQuery {
                states: failed.clone(),
                ..limit(5)
            },
            ListQuery {
                states: Some(vec![JobState::Completed, JobState::Failed]),
                ..limit(5)
            },
            ListQuery {
                before: before("j101"),
                ..limit(7)
            },
            ListQuery {
                states: failed.clone(),
                before: before("j102"),
                ..limit(4)
            },
        ] {
            let sq = full_pass(&fq);
            let fast = format!("{fq:?}");
            let c = fq.cursor_id().map(|id| s.facts(id).unwrap());
            let (a, b) = (
                s.page(&fq, c.as_ref(), &none),
                s.page(&sq, c.as_ref(), &none),
            );
            assert_eq!(ids(&a), ids(&b), "{fast}");
            assert_eq!(a.total, b.total, "{fast}");
        }
        // `before` is the page just above the cursor in the whole list.
        let at = everything.iter().position(|id| id == "j101").unwrap();
        let back = ListQuery {
            before: before("j101"),
            ..limit(7)
        };
        let page = s.page(&back, s.facts("j101").as_ref(), &none);
        assert_eq!(ids(&page), everything[at - 7..at]);
        let failed = s.page(
            &ListQuery {
                states: failed,
                ..ListQuery::default()
            },
            None,
            &none,
        );
        assert_eq!(failed.total, 67);
        let counts = s.counts(&none, false);
        assert_eq!(counts[JobState::Failed.index()], 67);
        assert_eq!(counts[JobState::Completed.index()], 133);
        let skip: HashSet<String> = ["j199".to_string(), "nope".to_string()].into();
        let page = s.page(&fast, None, &skip);
        assert_eq!(page.total, 199);
        assert!(!ids(&page).contains(&"j199".to_string()));
        let skip_failed: HashSet<String> = ["j198".to_string()].into();
        assert_eq!(s.counts(&skip_failed, false)[JobState::Failed.index()], 66);
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
        assert_eq!(u.tasks, 2);
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
    fn written(dir: &Path, compression: bjh_recording::writer::Compression) -> PathBuf {
        use bjh_format::record::{JobStart, raw_or_null};
        use bjh_recording::writer::{WriterConfig, WriterMsg, spawn};
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
            secrets: Vec::new(),
        });
        drop(handle);
        thread.join().unwrap();
        let name = match compression {
            bjh_recording::writer::Compression::None => "p.eventlog",
            bjh_recording::writer::Compression::Zstd(_) => "p.eventlog.zst",
        };
        dir.join(name)
    }

    #[test]
    fn payload_ranges_read_one_payload_and_a_moved_one_is_never_served() {
        use bjh_format::record::payload::{CONFIG, DOT, JOB, STAGES};
        use bjh_recording::writer::{Compression, DEFAULT_ZSTD_LEVEL};
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

    /// A log without a footer (as upstream's scheduler writes them) has its
    /// payload ranges learnt at index time, kept in the persistent index,
    /// and read one payload at a time; a log changed since is never served
    /// from them.
    #[test]
    fn a_footerless_log_is_read_by_remembered_ranges_and_a_changed_one_is_not() {
        use bjh_format::record::payload::{CONFIG, DOT, JOB, STAGES};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.eventlog");
        let start = "{\"ev\":\"JobStart\",\"version\":1,\"data\":{\"job_id\":\"u\"}}\n";
        let end = job_end_line("u", 1);
        std::fs::write(&path, format!("{start}{end}\n")).unwrap();
        let s = store(dir.path());
        s.rescan();
        let ranges = s
            .summary("u")
            .unwrap()
            .ranges()
            .expect("learnt at index time");
        // Counted apart: each payload as the line's own JSON holds it.
        let line: serde_json::Value = serde_json::from_str(&end).unwrap();
        let want = |name: &str| serde_json::to_vec(&line["data"][name]).unwrap();
        let parts = s
            .read_payloads("u", &[JOB, STAGES, CONFIG, DOT])
            .unwrap()
            .expect("read by the remembered ranges");
        for (part, name) in parts.iter().zip([JOB, STAGES, CONFIG, DOT]) {
            assert_eq!(part, &want(name), "{name}");
        }
        // The persistent index keeps them.
        let summary = s.summary("u").unwrap();
        let bytes = crate::snapshot::encode(std::iter::once(&*summary));
        let restored = crate::snapshot::decode(&bytes).unwrap();
        assert_eq!(restored[0].ranges(), Some(ranges));

        // Rewritten in place, same length and modification time, with the
        // payloads moved by two bytes: the ranges no longer sit after their
        // keys, so nothing is served from them.
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        let moved = format!(
            "{start}{}\n",
            end.replace("\"job_name\":\"n\"", "\"job_name\":\"nnn\"")
                .replace("{\"k\":\"v\"}", "{\"\":\"\"}")
        );
        assert_eq!(moved.len(), start.len() + end.len() + 1);
        std::fs::write(&path, &moved).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(modified).unwrap();
        assert_eq!(s.read_payloads("u", &[CONFIG]).unwrap(), None);
        // Grown: not the file that was indexed, so nothing of it is read
        // until a rescan indexes it again.
        std::fs::write(&path, format!(" {start}{end}\n")).unwrap();
        let refused = s.read_payloads("u", &[CONFIG]).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("not the file that was indexed"),
            "{refused}"
        );
        // The next rescan learns the ranges anew.
        s.rescan();
        let parts = s.read_payloads("u", &[CONFIG]).unwrap().unwrap();
        assert_eq!(parts[0], want(CONFIG));
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
        // Upstream's bytes, then ours: the scheduler, the query's label and
        // the slot time (none in this log).
        let upstream = String::from_utf8(serde_json::to_vec(&wire).unwrap()).unwrap();
        let ours = format!(
            "{},\"scheduler_id\":null,\"query_label\":null,\"busy_slot_ms\":null,\"failed_slot_ms\":null}}",
            upstream.strip_suffix('}').unwrap()
        );
        assert_eq!(ours.as_bytes(), &summary.entry()[..]);
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
