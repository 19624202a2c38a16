//! The columnar history: `stages`, `tasks` and `operators` as Parquet
//! files, derived from the logs and rebuildable from them.
//!
//! Layout, under the columnar folder (beside the persistent index, so a
//! read-only log directory stays untouched):
//!
//! ```text
//! manifest.json                 the segments and the index (no job: version 2)
//! index/index-00000002.parquet  every job the segments hold, by id (`held`)
//! stages/seg-00000001.parquet   one file per segment and table
//! tasks/seg-00000001.parquet
//! operators/seg-00000001.parquet
//! ```
//!
//! A refresh (in rounds, `rounds`) appends segments for the completed
//! jobs no segment holds (rows sorted by job id, then stage, in row groups
//! of 64 Ki rows, so a predicate on the job id or on time skips row
//! groups); rewrites the segments that hold jobs the store no longer
//! lists (retention); merges
//! small segments into one; and drops a segment whose file is missing or
//! unreadable, so its jobs are read from their logs again (its files are
//! deleted). A log that cannot be read is tried again later (after 1 s,
//! then twice as long each time up to an hour), never left out for good:
//! a file unreadable for a moment costs its jobs a moment; a refresh tries
//! at most [`RETRIES_PER_REFRESH`] of them, so a directory of many
//! unreadable logs does not make every query read them all again. The
//! manifest is replaced atomically (written aside, then renamed), after
//! the index it names. Files a refresh
//! replaces are deleted once no query holds the generation that listed
//! them.
//!
//! This is a derived store, the layer between `analysis` and `serving`:
//! fed by the [`LogStore`] (the completed jobs it lists, their logs and
//! stored responses) and by the writer's records (`fresh`), never by
//! serving's sources or HTTP answers. It imports `format`, `metrics`,
//! `recording` (only the writer's hand-over trait), `store` and
//! `analysis`, nothing above. The SQL worker reads its files.
//!
//! **Invariant:** the logs are the truth: deleting the folder loses
//! nothing, and the next query rebuilds it.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

use bjh_analysis::plan_metrics::plan_metrics;
use bjh_format::record::WrittenJob;
use bjh_format::stages::StagesAnswer;
use bjh_metrics::HistoryMetrics;
use bjh_store::records::JobRecords;
use bjh_store::{LogStore, StoreError};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;
use fresh::Fresh;
use futures::StreamExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use shared::{Hashing, Shared};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use tables::{JobRows, JobTotals, OPERATORS, STAGES, TASKS, job_rows};

pub mod fresh;
mod held;
mod rounds;
mod segment;
pub mod shared;
pub mod tables;

pub use held::Totals;
use segment::{intact, merge_segments, readable, seg_path, write_manifest, write_segment};
pub use segment::{write_file, write_parquet};

/// Why the columnar history could not be brought up to date. Messages
/// name tables and segments, never a path.
#[derive(Debug, thiserror::Error)]
pub enum ColumnarError {
    /// A file of the folder could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Encoding or decoding a Parquet file.
    #[error("Parquet: {0}")]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
    /// Assembling the rows.
    #[error("Arrow: {0}")]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// A manifest (local or published) that does not parse.
    #[error("the manifest: {0}")]
    Manifest(#[from] serde_json::Error),
    /// A job's log could not be read.
    #[error("the event log of job {job}: {source}")]
    Log {
        /// The job.
        job: String,
        /// Why.
        source: StoreError,
    },
    /// The store lists the job but has no completed log of it.
    #[error("job {0} has no completed event log")]
    NoLog(String),
    /// The object store the history is published to.
    #[error("the object store: {0}")]
    Remote(#[from] object_store::Error),
    /// A published file whose bytes are not the ones its name promises.
    #[error("{0}")]
    Refused(String),
    /// A blocking read or write was cut short (the runtime shut down).
    #[error("a background task stopped: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl From<std::io::Error> for ColumnarError {
    /// An error of the safe write itself (its temporary file, the rename).
    fn from(source: std::io::Error) -> Self {
        ColumnarError::Io {
            what: "writing a columnar file".into(),
            source,
        }
    }
}

/// An I/O error while doing `what`.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ColumnarError {
    let what = what.into();
    move |source| ColumnarError::Io { what, source }
}

/// The three tables kept as files, by folder name.
pub const TABLES: [(&str, &std::sync::LazyLock<SchemaRef>); 3] = [
    ("stages", &STAGES),
    ("tasks", &TASKS),
    ("operators", &OPERATORS),
];

/// Rows per row group.
const ROW_GROUP: usize = 64 * 1024;

/// The largest manifest read (about 100 bytes a job: ten million jobs).
const MAX_MANIFEST_BYTES: u64 = 1 << 30;

/// The largest segment file read whole (to publish it) when the manifest
/// does not say its size.
const MAX_SEGMENT_BYTES: u64 = 4 << 30;
/// Jobs read from their logs at once.
const READERS: usize = 4;
/// Segments of fewer task rows are merged, in groups of at most this many
/// rows, when there are more than a few.
const SMALL: u64 = 256 * 1024;
/// New jobs read into one segment at most.
const CHUNK: usize = 500;

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct Segment {
    pub(crate) seq: u64,
    pub(crate) rows: u64,
    /// Its files' sizes, by table.
    #[serde(default)]
    pub(crate) sizes: Vec<u64>,
    /// Its files' BLAKE3 hashes, by table (their names in an object store).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sums: Vec<String>,
    /// How many jobs it holds (the index names them).
    #[serde(default)]
    pub(crate) held: u64,
    /// Each job it holds, with its totals: manifests of version 1 only,
    /// read to write their index ([`Manifest::upgrade`]), never written.
    #[serde(default, skip_serializing)]
    pub(crate) jobs: Option<BTreeMap<String, OldTotals>>,
}

/// A job's totals as version 1 manifests held them.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
pub(crate) struct OldTotals {
    tasks: i64,
    failed: i64,
    rows: i64,
    #[serde(default)]
    scheduler: Option<String>,
    #[serde(default)]
    slot_ms: Option<[u64; 2]>,
}

/// The index file of a manifest (`held`).
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub(crate) struct IndexFile {
    /// Its number: `index/index-NNNNNNNN.parquet`.
    pub(crate) seq: u64,
    pub(crate) size: u64,
    /// Its BLAKE3 hash (its name in an object store).
    pub(crate) sum: String,
}

/// The manifest's version: 2 names an index file and no job; 1 listed
/// every job in each segment.
const VERSION: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct Manifest {
    version: u32,
    next_seq: u64,
    pub(crate) segments: Vec<Segment>,
    /// The jobs the segments hold; `None` when they hold none.
    #[serde(default)]
    pub(crate) index: Option<IndexFile>,
}

impl Manifest {
    /// The next segment's number, taken.
    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    /// The segments' numbers.
    fn live(&self) -> HashSet<u64> {
        self.segments.iter().map(|s| s.seq).collect()
    }

    /// A version 1 manifest (every job listed in its segment) made one of
    /// version 2: the jobs written to an index file under `dir`, their
    /// lists let go. Whether it was one; an index that cannot be written
    /// lets every segment go (their files removed, their jobs read from
    /// their logs).
    fn upgrade(&mut self, dir: &Path) -> bool {
        if self.segments.iter().all(|s| s.jobs.is_none()) {
            return false;
        }
        let mut rows: Vec<held::Held> = Vec::new();
        for s in &mut self.segments {
            let jobs = s.jobs.take().unwrap_or_default();
            s.held = jobs.len() as u64;
            rows.extend(jobs.into_iter().map(|(id, t)| held::Held {
                id,
                seq: s.seq,
                totals: JobTotals {
                    tasks: t.tasks,
                    failed_tasks: t.failed,
                    output_rows: t.rows,
                    scheduler_id: t.scheduler,
                    usage: t.slot_ms.map(|[busy_slot_ms, failed_slot_ms]| {
                        bjh_format::usage::SlotUsage {
                            busy_slot_ms,
                            failed_slot_ms,
                        }
                    }),
                },
            }));
        }
        rows.sort_by(|a, b| a.id.cmp(&b.id));
        let seq = self.take_seq();
        match held::write(&held::index_path(dir, seq), rows.into_iter().map(Ok)) {
            Ok((size, sum)) => self.index = Some(IndexFile { seq, size, sum }),
            Err(e) => {
                log::warn!("history: the columnar index cannot be written ({e}); reading the logs");
                // No generation reads them yet: their files go now.
                for s in self.segments.drain(..) {
                    for (table, _) in TABLES {
                        let _ = std::fs::remove_file(seg_path(dir, table, s.seq));
                    }
                }
                self.index = None;
            }
        }
        self.version = VERSION;
        true
    }
}

/// What a query reads: the files of one generation, kept on disk while
/// the query holds this.
#[derive(Debug, Default)]
pub struct Generation {
    /// Per table (in the order of the tables), its segment files.
    pub files: [Vec<PathBuf>; 3],
    /// The index of the jobs the segments hold, when they hold any.
    index: Option<PathBuf>,
    /// Task attempts the segments hold.
    pub task_rows: u64,
    /// Where the history's journal of changed totals stood when this
    /// generation was made ([`Columnar::totals_changed_since`]).
    pub changes_at: u64,
}

impl Generation {
    /// The totals of the jobs the segments hold (`tasks`, `failed_tasks`,
    /// `output_rows`, `scheduler_id` and slot time of `jobs`), asked for
    /// by increasing id.
    pub fn totals(&self) -> Totals {
        Totals::of(self.index.as_deref(), None)
    }

    /// [`Generation::totals`] of `ids` (sorted) alone: only the index's
    /// row groups whose range holds one are read.
    pub fn totals_near(&self, ids: &[String]) -> Totals {
        Totals::of(self.index.as_deref(), Some(ids))
    }

    /// The index file, when the segments hold any job.
    pub fn index_path(&self) -> Option<&Path> {
        self.index.as_deref()
    }
}

/// The columnar history in one folder.
pub struct Columnar {
    dir: PathBuf,
    /// The private folder `dir` is, when there was no folder to keep the
    /// history in (deleted with the history).
    _private: Option<tempfile::TempDir>,
    /// The lock that makes `dir` this process's alone (`segment::folder`),
    /// held while the history lives.
    _owner: Option<std::fs::File>,
    fresh: Arc<Fresh>,
    metrics: Arc<HistoryMetrics>,
    state: tokio::sync::Mutex<State>,
    retired: Mutex<Vec<(Weak<Generation>, PathBuf)>>,
    /// The ids of the jobs whose index rows were added or dropped (noted
    /// as each index is written; ended when every segment goes or
    /// segments are fetched), so that a reader of the totals (the SQL
    /// `jobs` table) reads again only theirs.
    changes: bjh_store::journal::Journal,
}

struct State {
    manifest: Manifest,
    current: Arc<Generation>,
    /// Jobs whose log could not be read into rows: how many times, and
    /// when to try again (reported once).
    unreadable: HashMap<String, (u32, std::time::Instant)>,
    /// The store's version the files were last brought up to.
    seen: Option<u64>,
    /// A merge failed in the last refresh, or it left jobs for later: the
    /// next one is not skipped.
    again: bool,
    /// Whether the files as they are were published (object stores).
    published: bool,
    /// The published files known whole: fetched and checked, or uploaded
    /// by this process.
    remote_files: HashSet<String>,
    /// Where the store's journal stood at the last refresh (`rounds`).
    journal: Option<rounds::Journal>,
    /// Refreshes that read every job (for the tests).
    full_reads: u64,
}

impl Columnar {
    /// The history in `dir` (created when missing; a damaged manifest is
    /// logged and started afresh; files no manifest names removed);
    /// `None`, a folder that cannot be created (a read-only log
    /// directory), or one another process holds (a scheduler and a
    /// history server over one directory), keeps it in a private folder
    /// of this process's own instead: a fresh random name under the
    /// system's temporary directory, `0700`, never a predictable path
    /// another local user could have made first.
    pub fn open(dir: Option<PathBuf>, metrics: Arc<HistoryMetrics>) -> Self {
        Self::open_with(dir, Arc::new(Fresh::new()), metrics)
    }

    /// [`Columnar::open`], taking jobs the writer hands to `fresh`.
    pub fn open_with(
        dir: Option<PathBuf>,
        fresh: Arc<Fresh>,
        metrics: Arc<HistoryMetrics>,
    ) -> Self {
        let (dir, private, owner) = segment::folder(dir);
        let manifest = match bjh_files::read_capped(&dir.join("manifest.json"), MAX_MANIFEST_BYTES)
        {
            Ok(bytes) => {
                // In use since an earlier run: keep the writer's records.
                fresh.start();
                bytes
            }
            Err(_) => Vec::new(),
        };
        let manifest = match (!manifest.is_empty()).then_some(manifest) {
            Some(bytes) => serde_json::from_slice::<Manifest>(&bytes).unwrap_or_else(|e| {
                log::warn!(
                    "history: the columnar manifest in {} is damaged ({e}); rebuilding it from \
                     the logs",
                    dir.display()
                );
                Manifest::default()
            }),
            None => Manifest::default(),
        };
        let mut manifest = manifest;
        if manifest.upgrade(&dir)
            && let Err(e) = write_manifest(&dir, &manifest)
        {
            log::warn!("history: the columnar manifest cannot be written ({e})");
        }
        // The folder is this process's alone: a file its manifest does not
        // name was left by one that stopped between writing the file and
        // naming it, or before deleting it.
        if owner.is_some() {
            let swept = segment::sweep_unnamed(&dir, &manifest);
            if swept > 0 {
                log::info!("history: {swept} columnar files no manifest names removed");
            }
        }
        let current = Arc::new(generation(&dir, &manifest, 0));
        Self {
            dir,
            _private: private,
            _owner: owner,
            fresh,
            metrics,
            state: tokio::sync::Mutex::new(State {
                manifest,
                current,
                unreadable: HashMap::new(),
                again: false,
                seen: None,
                published: false,
                remote_files: HashSet::new(),
                journal: None,
                full_reads: 0,
            }),
            retired: Mutex::new(Vec::new()),
            changes: bjh_store::journal::Journal::default(),
        }
    }

    /// The ids of the jobs whose totals (their index rows) changed since
    /// the generation whose [`Generation::changes_at`] is `at` (sorted,
    /// each once), and the position after them; `None` when the history
    /// no longer knows (every segment went or was fetched, or more than
    /// [`bjh_store::journal::CAP`] changed).
    pub fn totals_changed_since(&self, at: u64) -> Option<(Vec<String>, u64)> {
        self.changes.since(at)
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Brings the files up to the completed jobs `store` lists, and gives
    /// the generation to query. With `publish` (and an object store),
    /// publishes them too; without it, leaves that to a later refresh.
    pub async fn refresh(
        &self,
        store: &Arc<LogStore>,
        publish: bool,
    ) -> Result<Arc<Generation>, ColumnarError> {
        self.fresh.start();
        let mut state = self.state.lock().await;
        let state = &mut *state;
        // Before the first index pass the store lists too little: what the
        // files hold stays as it is.
        if !store.is_ready() {
            return Ok(state.current.clone());
        }
        let shared = Shared::of(store, self.metrics.clone());
        let version = Some(store.version());
        let settled = self.settled(state, version, shared.is_some(), publish);
        if settled && !state.retry_due() {
            return Ok(state.current.clone());
        }
        let mut changed = false;
        if settled {
            // Nothing changed but logs that failed before are due: those
            // alone are read again (no pass over every job).
            let now = std::time::Instant::now();
            let mut due: Vec<String> = state
                .unreadable
                .iter()
                .filter(|(id, (_, at))| *at <= now && store.contains(id))
                .map(|(id, _)| id.clone())
                .take(RETRIES_PER_REFRESH)
                .collect();
            due.sort();
            let mut round = held::Rewrite::new();
            if self.add_from_logs(state, store, &due, &mut round).await? {
                changed = true;
                self.write_index(state, round).await;
            }
        } else {
            // A job the store no longer lists is not tried again.
            state.unreadable.retain(|id, _| store.contains(id));
            let mut every = false;
            if let Some(shared) = &shared {
                every |= self.start_from_published(state, shared).await;
            }
            state.again = false;
            // Segments dropped or fetched: their jobs are not in the
            // journal, so every job is read.
            every |= self.forget_damaged(state);
            if every {
                self.changes.overflow();
            }
            changed |= every;
            changed |= self.catch_up(state, store, every).await?;
        }
        state.seen = version.filter(|_| !state.again);
        if changed {
            state.published = false;
        }
        if let Some(shared) = &shared
            && publish
        {
            changed |= self.publish(state, shared).await;
        }
        if changed {
            state.manifest.version = VERSION;
            write_manifest(&self.dir, &state.manifest)?;
            state.current = Arc::new(generation(
                &self.dir,
                &state.manifest,
                self.changes.position(),
            ));
        }
        self.collect_retired();
        Ok(state.current.clone())
    }

    /// Nothing changed in the store, every file is where it was and (object
    /// stores) published: the files are up to date but for the logs that
    /// failed before and are due to be read again.
    fn settled(&self, state: &State, version: Option<u64>, shared: bool, publish: bool) -> bool {
        version.is_some()
            && version == state.seen
            && (!shared || state.published || !publish)
            && state.manifest.segments.iter().all(|s| intact(&self.dir, s))
            && (state.manifest.index.as_ref()).is_none_or(|i| {
                std::fs::symlink_metadata(held::index_path(&self.dir, i.seq))
                    .is_ok_and(|m| m.len() == i.size)
            })
    }

    /// An object store: a new spool starts from what another server
    /// published, not from every log.
    async fn start_from_published(&self, state: &mut State, shared: &Shared) -> bool {
        if state.seen.is_some() || !state.manifest.segments.is_empty() {
            return false;
        }
        let mut next = state.manifest.next_seq;
        let fetched = shared
            .fetch(&self.dir, &mut next, &mut state.remote_files)
            .await;
        state.manifest.next_seq = next;
        let Some((segments, index)) = fetched else {
            return false;
        };
        if let Some(old) = state.manifest.index.replace(index) {
            self.retire(&state.current, held::index_path(&self.dir, old.seq));
        }
        state.manifest.segments.extend(segments);
        true
    }

    /// Damaged or missing files: forget their segments (their files go
    /// once no query holds them, so a file unreadable for a moment is not
    /// left behind for ever). A damaged or missing index forgets every
    /// segment: which jobs they hold is not known.
    fn forget_damaged(&self, state: &mut State) -> bool {
        let index_ok = match &state.manifest.index {
            None => state.manifest.segments.is_empty(),
            Some(i) => readable(&held::index_path(&self.dir, i.seq)),
        };
        if !index_ok {
            log::warn!(
                "history: the columnar index is missing or damaged; every job is read from its \
                 log again"
            );
            return self.forget_all(state);
        }
        let before = state.manifest.segments.len();
        let mut damaged = Vec::new();
        state.manifest.segments.retain(|s| {
            let ok = TABLES.iter().all(|(table, _)| {
                let path = seg_path(&self.dir, table, s.seq);
                let ok = readable(&path);
                if !ok {
                    log::warn!(
                        "history: columnar file {:?} is missing or damaged; its jobs are read \
                         from their logs again",
                        path.display()
                    );
                }
                ok
            });
            if !ok {
                damaged.push(s.seq);
            }
            ok
        });
        for seq in damaged {
            for (table, _) in TABLES {
                self.retire(&state.current, seg_path(&self.dir, table, seq));
            }
        }
        state.manifest.segments.len() != before
    }

    /// Lets every segment and the index go (their files once no query
    /// holds them): every job is read from its log again. Whether there
    /// was anything.
    fn forget_all(&self, state: &mut State) -> bool {
        self.changes.overflow();
        let segments = std::mem::take(&mut state.manifest.segments);
        let index = state.manifest.index.take();
        for s in &segments {
            for (table, _) in TABLES {
                self.retire(&state.current, seg_path(&self.dir, table, s.seq));
            }
        }
        if let Some(i) = &index {
            self.retire(&state.current, held::index_path(&self.dir, i.seq));
        }
        !segments.is_empty() || index.is_some()
    }

    /// Publishes the files beside the logs after every file is written; a
    /// failure is retried by the next refresh. Whether the manifest
    /// changed (the store's copies filled in).
    async fn publish(&self, state: &mut State, shared: &Shared) -> bool {
        if state.published {
            return false;
        }
        let State {
            manifest,
            remote_files,
            ..
        } = state;
        match shared.publish(&self.dir, manifest, remote_files).await {
            Ok(filled) => {
                state.published = true;
                filled
            }
            Err(e) => {
                state.published = false;
                log::warn!(
                    "history: the columnar history is not published beside the logs \
                     ({e}); retried at the next refresh"
                );
                false
            }
        }
    }

    /// Deletes `path` once no query holds `generation`.
    fn retire(&self, generation: &Arc<Generation>, path: PathBuf) {
        self.retired.lock().push((Arc::downgrade(generation), path));
    }

    fn collect_retired(&self) {
        self.retired.lock().retain(|(held, path)| {
            if held.strong_count() > 1 {
                return true;
            }
            let _ = std::fs::remove_file(path);
            false
        });
    }
}

/// How long a log that could not be read waits before it is read again,
/// the first time; each failure doubles it, up to [`UNREADABLE_RETRY_MAX`].
const UNREADABLE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
const UNREADABLE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(3600);
/// Logs that failed before read again by one refresh at most (the rest
/// wait for the next): each refresh runs before a query, so its cost is
/// bounded whatever the directory holds.
pub const RETRIES_PER_REFRESH: usize = 256;

/// The wait after the `tries`th failure in a row (`backon`'s exponential
/// schedule, without jitter: a retry here is no stampede).
fn retry_wait(tries: u32) -> std::time::Duration {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::new()
        .with_min_delay(UNREADABLE_RETRY)
        .with_max_delay(UNREADABLE_RETRY_MAX)
        .without_max_times()
        .build()
        .nth(tries.clamp(1, 64) as usize - 1)
        .unwrap_or(UNREADABLE_RETRY_MAX)
}

impl State {
    /// Whether a log that failed is due to be read again.
    fn retry_due(&self) -> bool {
        let now = std::time::Instant::now();
        self.unreadable.values().any(|(_, at)| *at <= now)
    }
}

/// Groups of two or more small segments (by index) whose rows together stay
/// within [`SMALL`], when more than four segments are small.
fn small_groups(segments: &[Segment]) -> Vec<Vec<usize>> {
    let small: Vec<usize> = (0..segments.len())
        .filter(|&i| segments[i].rows < SMALL)
        .collect();
    if small.len() <= 4 {
        return Vec::new();
    }
    let mut groups = Vec::new();
    let mut group: Vec<usize> = Vec::new();
    let mut rows = 0;
    for i in small {
        if rows + segments[i].rows > SMALL && !group.is_empty() {
            groups.push(std::mem::take(&mut group));
            rows = 0;
        }
        rows += segments[i].rows;
        group.push(i);
    }
    groups.push(group);
    groups.retain(|g| g.len() > 1);
    groups
}

fn generation(dir: &Path, m: &Manifest, changes_at: u64) -> Generation {
    let files = [0, 1, 2].map(|t| {
        m.segments
            .iter()
            .map(|s| seg_path(dir, TABLES[t].0, s.seq))
            .collect()
    });
    Generation {
        files,
        index: (m.index.as_ref()).map(|i| held::index_path(dir, i.seq)),
        task_rows: m.segments.iter().map(|s| s.rows).sum(),
        changes_at,
    }
}

/// The rows of one completed job, from its log and its stored
/// `/stages?plan_format=metrics` answer (read on the blocking pool).
pub async fn rows_of(store: &Arc<LogStore>, job_id: &str) -> Result<JobRows, ColumnarError> {
    let store = store.clone();
    let id = job_id.to_string();
    tokio::task::spawn_blocking(move || {
        let log = store
            .log_of(&id)
            .ok_or_else(|| ColumnarError::NoLog(id.clone()))?;
        let failed = |source| ColumnarError::Log {
            job: id.clone(),
            source,
        };
        let records = JobRecords::read(&log).map_err(failed)?;
        // Without its metrics plans a job still has its tasks' rows.
        let metrics = store
            .stored_stages(&id, Some("metrics"))
            .ok()
            .flatten()
            .unwrap_or_default();
        Ok(rows_from(&id, &records, metrics.as_bytes()))
    })
    .await?
}

/// The rows of a job whose records the writer kept.
pub fn rows_of_written(job: WrittenJob) -> (String, JobRows) {
    let id = job.start.job_id.clone();
    let metrics = bjh_format::record::Variant::pick(
        job.end.stages.get(),
        &job.end.responses.stages,
        Some("metrics"),
    )
    .unwrap_or_default();
    let records = JobRecords::of_written(job.start, job.stages, job.tasks);
    let rows = rows_from(&id, &records, metrics.as_bytes());
    (id, rows)
}

/// The rows of a job from its records and its `/stages?plan_format=metrics`
/// response (each stage's status, the operators' metrics).
fn rows_from(job_id: &str, records: &JobRecords, metrics: &[u8]) -> JobRows {
    // One pass over the answer (it lists every task) for both.
    let stages = StagesAnswer::parse(metrics).stages;
    let status: BTreeMap<u32, String> = stages
        .iter()
        .filter(|s| !s.stage_status.is_empty())
        .map(|s| (s.stage_id, s.stage_status.clone()))
        .collect();
    let operators = plan_metrics(stages.iter().map(|s| (s.stage_id, s.plan())));
    let slots = bjh_format::stages::task_slots(&stages);
    job_rows(job_id, records, &status, &slots, &operators)
}

/// The index's reads over a store, for the benches (no logs, no
/// segment files): not an interface.
#[doc(hidden)]
pub mod bench {
    use super::*;

    /// Writes an index at `path` holding every completed job of `store`
    /// (in segment 0, one task each); gives how many.
    pub fn write_index(store: &LogStore, path: &Path) -> Result<usize, ColumnarError> {
        let mut n = 0;
        store.with_completed_by_id(|jobs| {
            let rows = jobs.map(|j| {
                n += 1;
                Ok(held::Held {
                    id: bjh_store::query::JobFacts::job_id(&*j).to_string(),
                    seq: 0,
                    totals: JobTotals {
                        tasks: 1,
                        ..JobTotals::default()
                    },
                })
            });
            held::write(path, rows)
        })?;
        Ok(n)
    }

    /// A generation whose index is the file at `path` (no segments).
    pub fn generation(path: &Path) -> Generation {
        Generation {
            index: Some(path.to_path_buf()),
            ..Generation::default()
        }
    }

    /// A refresh's round over `store` and the index at `path` (segment 0
    /// live): how many jobs are new and how many gone.
    pub fn round(store: &LogStore, path: &Path) -> Result<(usize, usize), ColumnarError> {
        let live = HashSet::from([0]);
        let diff = store.with_completed_by_id(|jobs| {
            let mut ids = jobs.map(|j| bjh_store::query::JobFacts::job_id(&*j).to_string());
            held::reconcile(&mut ids, Some(held::Reader::open(path)?), &live, |_| true)
        })?;
        Ok((diff.new.len(), diff.gone.values().map(HashSet::len).sum()))
    }

    /// A refresh's round over the jobs `changed` alone (sorted, as the
    /// store's journal gives them) and the index's rows near them: how
    /// many are new and how many gone.
    pub fn round_changed(
        store: &LogStore,
        path: &Path,
        changed: &[String],
    ) -> Result<(usize, usize), ColumnarError> {
        let live = HashSet::from([0]);
        let held = held::Reader::open_near(path, changed)?;
        let diff = held::reconcile_changed(
            changed,
            Some(held),
            &live,
            |id| store.contains(id),
            |_| true,
        )?;
        Ok((diff.new.len(), diff.gone.values().map(HashSet::len).sum()))
    }

    /// The totals of every completed job, read beside the store's walk by
    /// id as the SQL `jobs` table reads them: how many were found.
    pub fn totals_by_id(store: &LogStore, path: &Path) -> usize {
        let mut totals = Totals::of(Some(path), None);
        store.with_completed_by_id(|jobs| {
            jobs.filter(|j| {
                totals
                    .get(bjh_store::query::JobFacts::job_id(&**j))
                    .is_some()
            })
            .count()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: the wait stopped doubling at 128 s, where the design
    /// says an hour.
    #[test]
    fn an_unreadable_log_waits_from_a_second_doubling_up_to_an_hour() {
        for tries in 1..=12u32 {
            assert_eq!(retry_wait(tries).as_secs(), 1 << (tries - 1), "{tries}");
        }
        assert_eq!(retry_wait(13), UNREADABLE_RETRY_MAX);
        assert_eq!(retry_wait(u32::MAX), UNREADABLE_RETRY_MAX);
    }

    /// Regression: every unreadable log was read again by the first
    /// refresh after its wait, so a directory of a million of them made
    /// each query read a million logs (13 s a query in the SQL bench).
    #[tokio::test]
    async fn a_refresh_reads_a_bounded_number_of_failed_logs_again() {
        let dir = tempfile::tempdir().unwrap();
        let n = RETRIES_PER_REFRESH + 44;
        for i in 0..n {
            let id = format!("j{i:04}");
            let end = serde_json::json!({"ev": "JobEnd", "version": 1, "data": {
                "status": "Succeeded", "queued_at": 1, "started_at": 2, "completed_at": 3,
                "index": {"job_id": id, "job_name": "", "status": "Completed",
                          "job_status": "Completed", "start_time": 2, "end_time": 3,
                          "num_stages": 0, "completed_stages": 0, "percent_complete": 100},
                "job": {}, "stages": {"stages": []}, "config": {}, "dot": ""}});
            std::fs::write(
                dir.path().join(format!("{id}.eventlog")),
                format!("{end}\n"),
            )
            .unwrap();
        }
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let store = Arc::new(LogStore::new(dir.path(), metrics.clone()));
        store.rescan();
        assert_eq!(store.len(), n);
        // The logs go after indexing: each read of one fails.
        for i in 0..n {
            std::fs::remove_file(dir.path().join(format!("j{i:04}.eventlog"))).unwrap();
        }
        let columnar = Columnar::open(Some(dir.path().join("columnar")), metrics);
        columnar.refresh(&store, false).await.unwrap();
        let tries = |state: &State| {
            let mut t: Vec<u32> = state.unreadable.values().map(|(n, _)| *n).collect();
            t.sort();
            t
        };
        assert_eq!(
            tries(&*columnar.state.lock().await),
            vec![1; n],
            "each tried once"
        );
        // All due again: one refresh tries the bound's worth, the next the rest.
        for (_, at) in columnar.state.lock().await.unreadable.values_mut() {
            *at = std::time::Instant::now() - std::time::Duration::from_secs(1);
        }
        columnar.refresh(&store, false).await.unwrap();
        let after = tries(&*columnar.state.lock().await);
        assert_eq!(
            after.iter().filter(|&&t| t == 2).count(),
            RETRIES_PER_REFRESH
        );
        columnar.refresh(&store, false).await.unwrap();
        assert_eq!(tries(&*columnar.state.lock().await), vec![2; n]);
    }

    /// A manifest of version 1 whose index cannot be written (the index's
    /// folder is a file): its segments are let go and their files
    /// removed, none left behind.
    #[test]
    fn an_upgrade_that_cannot_write_the_index_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index"), b"a file, not a folder").unwrap();
        let jobs = BTreeMap::from([("j1".to_string(), OldTotals::default())]);
        let mut m = Manifest {
            version: 1,
            next_seq: 6,
            segments: vec![Segment {
                seq: 5,
                jobs: Some(jobs),
                ..Segment::default()
            }],
            index: None,
        };
        for (table, _) in TABLES {
            let path = seg_path(dir.path(), table, 5);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"PAR1").unwrap();
        }
        assert!(m.upgrade(dir.path()));
        assert!(m.segments.is_empty() && m.index.is_none());
        for (table, _) in TABLES {
            assert!(!seg_path(dir.path(), table, 5).exists(), "{table}");
        }
    }

    fn segs(rows: &[u64]) -> Vec<Segment> {
        rows.iter()
            .enumerate()
            .map(|(i, &rows)| Segment {
                seq: i as u64,
                rows,
                sizes: Vec::new(),
                ..Segment::default()
            })
            .collect()
    }

    #[test]
    fn small_segments_merge_in_bounded_groups_and_never_alone() {
        assert_eq!(
            small_groups(&segs(&[100_000; 6])),
            [vec![0, 1], vec![2, 3], vec![4, 5]]
        );
        // Few small ones: left as they are.
        assert!(small_groups(&segs(&[10, 10, 10, 10, 1_000_000])).is_empty());
        // Small ones that cannot pair within the bound: no rewrite at all,
        // so a refresh does not rewrite them again and again.
        assert!(small_groups(&segs(&[200_000; 6])).is_empty());
        // Large segments are never merged.
        assert_eq!(
            small_groups(&segs(&[5, 1_000_000, 5, 5, 5, 5])),
            [vec![0, 2, 3, 4, 5]]
        );
    }
}
