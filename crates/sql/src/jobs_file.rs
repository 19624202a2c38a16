//! The completed jobs' rows of the `jobs` table as a Parquet file that
//! the worker reads itself. Built from the store's summaries when its
//! completed jobs or the columnar generation change, kept while they do
//! not, and named in each query's request: a query sends only the jobs
//! the store has not completed over the worker's pipe (the completed
//! ones were 245 MB a query there at a million jobs), and the worker
//! reads only the columns and row groups the query needs.
//!
//! Parquet, written by the columnar history's own writer
//! (`bjh_columnar::write_parquet`), rather than Arrow's IPC file: the
//! other tables are Parquet, so one reader (DataFusion's listing table)
//! serves all of them, its row-group statistics skip what a filter on
//! `job_id` or a time cannot match, and the cluster engine's executors
//! read the same file.
//!
//! Each build is a file of its own, `<columnar>/sql-jobs/jobs-*.parquet`,
//! removed when it is replaced and the last query that named it has its
//! answer. A file left by a process that died is removed by the next
//! engine's start once an hour old ([`crate::cluster::sweep`]); a kept
//! file found missing or changed is built again. Where it cannot be
//! written (a folder planted as a link, an unwritable or full disk), the
//! rows go over the pipe as before: a query never fails for it.
//!
//! **Between builds, a change.** Once built, the file (the base) stays
//! while jobs complete or go: a query after a change is given the base
//! less its rows of the jobs changed since (a filter on `job_id` the
//! worker's plan applies to that file alone) and a second file of those
//! jobs' rows as they are now. The base alone has a column
//! (`BASE_MARK`, true in every row) the other files read as null, so
//! one scan of every file tells the base's rows apart (`worker::
//! completed_jobs_table`). Which jobs changed comes from the store's
//! journal (completed jobs added or removed) and the columnar history's
//! (jobs whose task totals were added or dropped), both read at the
//! base's positions. The second file is built from the last one: its
//! rows but those of the jobs changed since it (read at the last one's
//! positions), and those jobs' rows built (each a lookup in the store,
//! the index's row groups near them read), so a query after one more
//! change builds one row, however many changed since the base.
//! The base is built again, by a walk over every job, when either
//! journal no longer reaches back or more than `CHANGED_MAX` jobs (or
//! one in `CHANGED_PER_JOB`, when that is over `CHANGED_ANYWAY`)
//! changed since it.
//!
//! **A base built off the query's path.** A walk over every job takes
//! seconds at millions of jobs (24 s at 10,000,000 on disk), so the
//! background refresh builds the base (`prepare`) before a query
//! would have to: once half the changes a base takes have come (or a
//! journal no longer reaches back), and at a start when an earlier run
//! of the server's SQL named `jobs` (its folder is there). A base is
//! built by one thread at a time (`Keeper`'s build lock): a query that
//! needs one while the background builds it waits for that build and
//! is served from it. A stop ends a background build between batches,
//! keeping nothing of it.

use bjh_columnar::Generation;
use bjh_columnar::tables::{JobLine, jobs_batch};
use bjh_store::query::JobFacts;
use datafusion::arrow::array::RecordBatch;
use std::path::Path;
use std::sync::Arc;

/// The folder of the files, under the columnar history's.
pub const JOBS_DIR: &str = "sql-jobs";

/// The column only a base file has, true in each of its rows; never shown
/// (the `jobs` table projects it away).
pub(crate) const BASE_MARK: &str = "__history_base_row";

/// The `jobs` columns and [`BASE_MARK`]: a base file's schema, and the
/// schema of a scan over it and the files of the jobs changed since.
pub(crate) static WITH_MARK: std::sync::LazyLock<datafusion::arrow::datatypes::SchemaRef> =
    std::sync::LazyLock::new(|| {
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let mut fields: Vec<_> = bjh_columnar::tables::JOBS
            .fields()
            .iter()
            .cloned()
            .collect();
        fields.push(Arc::new(Field::new(BASE_MARK, DataType::Boolean, true)));
        Arc::new(Schema::new(fields))
    });

/// Jobs changed since the base was built at most, for a second file
/// beside it (about 40 bytes each in the worker's request and in the
/// filter it plans); past them, the base is built again. A few in unit
/// tests.
pub(crate) const CHANGED_MAX: usize = if cfg!(test) { 4 } else { 16_384 };

/// A base is kept while at most one job in this many changed since it: a
/// changed job's row costs a lookup in the store, tens of times a step
/// of a build of every job (`docs/performance.md`). One in unit tests,
/// whose stores hold a few jobs.
const CHANGED_PER_JOB: usize = if cfg!(test) { 1 } else { 64 };

/// Changed jobs a base is kept for however few the jobs (a few
/// milliseconds of lookups).
const CHANGED_ANYWAY: usize = 64;

/// Rows of the `jobs` table built at a time from the store's walk (the
/// Parquet writer's row group): what a build holds of it at most. A few
/// in unit tests, so theirs are built in many batches.
const JOBS_BATCH: usize = if cfg!(test) { 3 } else { 64 * 1024 };

/// One build of the completed jobs' rows, as a file; removed when
/// dropped.
#[derive(Debug)]
pub(crate) struct JobsFile {
    path: tempfile::TempPath,
    /// Its inode, length and modification time as written.
    written: Written,
    /// Its name relative to the columnar folder, as requests name files.
    pub(crate) relative: String,
}

/// What tells a file apart from another put in its place.
type Written = (u64, u64, Option<std::time::SystemTime>);

fn written(meta: &std::fs::Metadata) -> Written {
    use std::os::unix::fs::MetadataExt;
    (meta.ino(), meta.len(), meta.modified().ok())
}

impl JobsFile {
    /// Writes `batches` as a new file under `root`'s [`JOBS_DIR`], each
    /// taken as the one before is written.
    pub(crate) fn write(
        root: &Path,
        batches: impl IntoIterator<Item = RecordBatch>,
    ) -> Result<Self, String> {
        Self::write_as(root, &bjh_columnar::tables::JOBS, batches)
    }

    /// A base file: `batches` with [`BASE_MARK`].
    pub(crate) fn write_base(
        root: &Path,
        batches: impl IntoIterator<Item = RecordBatch>,
    ) -> Result<Self, String> {
        use datafusion::arrow::array::BooleanArray;
        let marked = batches.into_iter().map(|b| {
            let mut columns = b.columns().to_vec();
            columns.push(Arc::new(BooleanArray::from(vec![true; b.num_rows()])));
            RecordBatch::try_new(WITH_MARK.clone(), columns)
        });
        let mut failed = None;
        let written = Self::write_as(
            root,
            &WITH_MARK,
            marked.map_while(|b| b.map_err(|e| failed = Some(e.to_string())).ok()),
        );
        match failed {
            Some(e) => Err(e),
            None => written,
        }
    }

    fn write_as(
        root: &Path,
        schema: &datafusion::arrow::datatypes::SchemaRef,
        batches: impl IntoIterator<Item = RecordBatch>,
    ) -> Result<Self, String> {
        // Executors of the cluster engine read the files too.
        let dir = crate::cluster::shared_folder(root, JOBS_DIR)?;
        let mut file = tempfile::Builder::new()
            .prefix("jobs-")
            .suffix(".parquet")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(&dir)
            .map_err(|e| e.to_string())?;
        let mut out = std::io::BufWriter::new(file.as_file_mut());
        bjh_columnar::write_parquet(&mut out, schema, batches).map_err(|e| e.to_string())?;
        std::io::Write::flush(&mut out).map_err(|e| e.to_string())?;
        drop(out);
        let written = written(&file.as_file().metadata().map_err(|e| e.to_string())?);
        let path = file.into_temp_path();
        let relative = path
            .strip_prefix(root)
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            path,
            written,
            relative,
        })
    }

    /// Whether the file is still there as it was written (a sweep by
    /// another process over the same folder may have removed it; a file
    /// put in its place, even of its length, is not it).
    pub(crate) fn is_there(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.is_file() && written(&m) == self.written)
    }
}

/// The completed jobs' rows as files: the base less its rows of the
/// jobs `left_out`, and the rows of those still completed in `changed`.
#[derive(Debug)]
pub(crate) struct JobsFiles {
    pub(crate) base: Arc<JobsFile>,
    pub(crate) changed: Option<Arc<JobsFile>>,
    /// Sorted.
    pub(crate) left_out: Vec<String>,
}

impl JobsFiles {
    fn is_there(&self) -> bool {
        self.base.is_there() && self.changed.as_deref().is_none_or(JobsFile::is_there)
    }

    /// The files, the base first, as requests name them.
    pub(crate) fn relative(&self) -> Vec<String> {
        std::iter::once(&*self.base)
            .chain(self.changed.as_deref())
            .map(|f| f.relative.clone())
            .collect()
    }
}

/// The completed jobs' rows: files the worker reads, or, where none can
/// be written, the rows themselves, sent over the pipe (245 MB at a
/// million jobs in the SQL bench).
#[derive(Debug, Clone)]
pub(crate) enum Completed {
    Files(Arc<JobsFiles>),
    Rows(Vec<RecordBatch>),
}

impl Completed {
    fn is_there(&self) -> bool {
        match self {
            Completed::Files(files) => files.is_there(),
            Completed::Rows(_) => true,
        }
    }
}

/// The `jobs` table's kept rows, and the lock every build of a base
/// holds, so a query and the background never build two at once.
#[derive(Default)]
pub(crate) struct Keeper {
    pub(crate) kept: parking_lot::Mutex<Option<KeptJobs>>,
    building: parking_lot::Mutex<()>,
    /// The background's last build failed (a full disk, a planted
    /// folder): not tried again until a query keeps rows of its own.
    failed: std::sync::atomic::AtomicBool,
}

impl Keeper {
    /// Keeps `rows`, built by a query.
    fn keep(&self, kept: &mut Option<KeptJobs>, rows: KeptJobs) {
        *kept = Some(rows);
        self.failed
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The completed jobs' rows of the last `jobs` table asked for: used while
/// the store's completed jobs and the columnar generation are those they
/// were built from, and dropped after [`crate::KEPT_JOBS_IDLE`] without a
/// query.
pub(crate) struct KeptJobs {
    version: u64,
    generation: std::sync::Weak<Generation>,
    rows: Completed,
    pub(crate) used: std::time::Instant,
    /// Where the store's journal and the columnar history's stood when
    /// the base was built, and when the file of the jobs changed was.
    base_at: (u64, u64),
    changed_at: (u64, u64),
}

/// What changed since a kept base: the jobs changed since it (sorted,
/// each once: the base's rows left out), those of them changed since
/// the file of changed jobs was built (their rows built again), and
/// that file.
struct Changes<'a> {
    base: Arc<JobsFile>,
    since_base: Vec<String>,
    since_last: Vec<String>,
    last: Option<&'a Arc<JobsFile>>,
}

impl KeptJobs {
    /// A base, `rows`, built at the store's `version` from `generation`,
    /// the journals at `at`.
    fn base(version: u64, generation: &Arc<Generation>, rows: Completed, at: (u64, u64)) -> Self {
        Self {
            version,
            generation: Arc::downgrade(generation),
            rows,
            used: std::time::Instant::now(),
            base_at: at,
            changed_at: at,
        }
    }

    /// The jobs changed since `at` (where the store's journal and the
    /// columnar history's stood), sorted, each once; `None` when either
    /// no longer reaches back.
    fn since(
        store: &bjh_store::LogStore,
        totals_changed: &dyn Fn(u64) -> Option<(Vec<String>, u64)>,
        (store_at, totals_at): (u64, u64),
    ) -> Option<Vec<String>> {
        let (mut ids, _) = store.changed_since(store_at)?;
        ids.extend(totals_changed(totals_at)?.0);
        ids.sort_unstable();
        ids.dedup();
        Some(ids)
    }

    /// What changed since the base, when both journals reach back to it,
    /// `generation` is not older than the last build, and few enough
    /// changed (of `jobs`).
    fn changes(
        &self,
        store: &bjh_store::LogStore,
        generation: &Generation,
        totals_changed: &dyn Fn(u64) -> Option<(Vec<String>, u64)>,
    ) -> Option<Changes<'_>> {
        let Completed::Files(files) = &self.rows else {
            return None;
        };
        if !files.base.is_there() || generation.changes_at < self.changed_at.1 {
            return None;
        }
        let since_base = Self::since(store, totals_changed, self.base_at)?;
        if since_base.len() > changed_bound(store) {
            return None;
        }
        let last = (files.changed.as_ref()).filter(|f| f.is_there());
        let since_last = match last {
            Some(_) => Self::since(store, totals_changed, self.changed_at)?,
            None => since_base.clone(),
        };
        Some(Changes {
            base: files.base.clone(),
            since_base,
            since_last,
            last,
        })
    }

    /// Whether a new base is due: the base is gone, a journal no longer
    /// reaches back to it, or more than half the changes it takes came.
    /// Rows kept in memory (no file could be written) are never due: a
    /// query builds them again after a change.
    fn due(
        &self,
        store: &bjh_store::LogStore,
        totals_changed: &dyn Fn(u64) -> Option<(Vec<String>, u64)>,
    ) -> bool {
        let Completed::Files(files) = &self.rows else {
            return false;
        };
        !files.base.is_there()
            || Self::since(store, totals_changed, self.base_at)
                .is_none_or(|ids| ids.len() > changed_bound(store) / 2)
    }
}

/// Jobs changed since a base at most for it to serve: [`CHANGED_MAX`], or
/// one in [`CHANGED_PER_JOB`] of the store's when that is fewer (never
/// under [`CHANGED_ANYWAY`]).
fn changed_bound(store: &bjh_store::LogStore) -> usize {
    CHANGED_MAX.min((store.len() / CHANGED_PER_JOB).max(CHANGED_ANYWAY))
}

/// The completed jobs' rows of the `jobs` table, from the store's
/// summaries: the kept ones while nothing they were built from changed
/// (and their files are there as written); after a few changes, the kept
/// base and a file of the jobs changed (the last one's rows, but for the
/// jobs changed since it, and those jobs' rows built); else built again
/// and written as a file under `root` (kept as rows where it cannot be
/// written), or, while the background builds a base, that one once
/// built. `totals_changed` is the columnar history's journal
/// (`Columnar::totals_changed_since`). Building every job's rows takes
/// seconds at millions of jobs: it runs on a blocking thread, never on
/// the server's runtime.
pub(crate) fn completed_jobs(
    keeper: &Keeper,
    store: &bjh_store::LogStore,
    generation: &Arc<Generation>,
    totals_changed: &dyn Fn(u64) -> Option<(Vec<String>, u64)>,
    root: &Path,
    metrics: &bjh_metrics::HistoryMetrics,
) -> Completed {
    let from = Inputs {
        store,
        totals_changed,
        root,
        metrics,
    };
    let served = || kept_or_changed(keeper, generation, &from);
    if let Some(rows) = served() {
        return rows;
    }
    // One build of every job at a time: one under way (the background's)
    // is waited for, then served from.
    let _building = keeper.building.lock();
    if let Some(rows) = served() {
        return rows;
    }
    // Read before building: a change while building makes the next
    // query build again, never keeps stale rows under a newer number.
    let (version, at) = (store.version(), positions(store, generation));
    let rows = whole(store, generation, root, metrics);
    let kept = KeptJobs::base(version, generation, rows.clone(), at);
    keeper.keep(&mut keeper.kept.lock(), kept);
    rows
}

/// What a build of the table's rows reads, and where it writes.
pub(crate) struct Inputs<'a> {
    pub(crate) store: &'a bjh_store::LogStore,
    /// The columnar history's journal (`Columnar::totals_changed_since`).
    pub(crate) totals_changed: &'a dyn Fn(u64) -> Option<(Vec<String>, u64)>,
    /// The columnar folder, the files' root.
    pub(crate) root: &'a Path,
    pub(crate) metrics: &'a bjh_metrics::HistoryMetrics,
}

/// Where the store's journal and the columnar history's stand.
fn positions(store: &bjh_store::LogStore, generation: &Generation) -> (u64, u64) {
    (store.changes_at(), generation.changes_at)
}

/// The kept rows, while nothing they were built from changed, or the kept
/// base and a file of the jobs changed since it, kept in their place;
/// `None` when a base is to be built. Kept rows built from a generation
/// newer than `generation` (the background's) are served with theirs.
fn kept_or_changed(
    keeper: &Keeper,
    generation: &Arc<Generation>,
    from: &Inputs<'_>,
) -> Option<Completed> {
    let mut kept = keeper.kept.lock();
    let k = kept.as_mut()?;
    let newer = (k.generation.upgrade()).filter(|g| g.changes_at > generation.changes_at);
    let generation = newer.as_ref().unwrap_or(generation);
    let (version, at, weak) = (
        from.store.version(),
        positions(from.store, generation),
        Arc::downgrade(generation),
    );
    if k.version == version && k.generation.ptr_eq(&weak) && k.rows.is_there() {
        k.used = std::time::Instant::now();
        return Some(k.rows.clone());
    }
    let changes = k.changes(from.store, generation, from.totals_changed)?;
    let files = with_changes(from.root, from.store, generation, changes, from.metrics)
        .map_err(|e| log::warn!("history: the SQL jobs table is built again: {e}"))
        .ok()?;
    // The replaced files go once no query holds them.
    let rows = Completed::Files(Arc::new(files));
    let changed = KeptJobs {
        version,
        generation: weak,
        rows: rows.clone(),
        used: std::time::Instant::now(),
        base_at: k.base_at,
        changed_at: at,
    };
    keeper.keep(&mut kept, changed);
    Some(rows)
}

/// Builds a base off any query's path when one is due (the kept one's
/// [`KeptJobs::due`]; with none kept, when a query is `expected`), unless
/// a base is being built or the last such build failed: whether it built
/// one. A query waits for it rather than building another. `stop` ends
/// the build between batches, keeping nothing (not an error).
pub(crate) fn prepare(
    keeper: &Keeper,
    generation: &Arc<Generation>,
    from: &Inputs<'_>,
    expected: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<bool, String> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(_building) = keeper.building.try_lock() else {
        return Ok(false);
    };
    if keeper.failed.load(Relaxed) {
        return Ok(false);
    }
    let used = match keeper.kept.lock().as_ref() {
        None if expected => std::time::Instant::now(),
        None => return Ok(false),
        Some(k) if k.due(from.store, from.totals_changed) => k.used,
        Some(_) => return Ok(false),
    };
    let (version, at) = (from.store.version(), positions(from.store, generation));
    let files = match base(from.store, generation, from.root, from.metrics, stop) {
        Ok(files) => files,
        Err(_) if stop.load(Relaxed) => return Ok(false),
        Err(e) => {
            keeper.failed.store(true, Relaxed);
            return Err(e);
        }
    };
    // Kept as long after the last query as the rows it replaces: a
    // server nobody asks still forgets them.
    let rows = Completed::Files(Arc::new(files));
    *keeper.kept.lock() = Some(KeptJobs {
        used,
        ..KeptJobs::base(version, generation, rows, at)
    });
    Ok(true)
}

/// Every completed job's rows, as a base file (as rows where none can be
/// written).
fn whole(
    store: &bjh_store::LogStore,
    generation: &Generation,
    root: &Path,
    metrics: &bjh_metrics::HistoryMetrics,
) -> Completed {
    let never = std::sync::atomic::AtomicBool::new(false);
    match base(store, generation, root, metrics, &never) {
        Ok(files) => Completed::Files(Arc::new(files)),
        Err(e) => {
            log::warn!("history: the SQL jobs table is sent to each query: no file of it: {e}");
            Completed::Rows(completed_rows(store, generation))
        }
    }
}

/// Every completed job's rows as a base file, written as the store's
/// walk reads the jobs: a batch's rows at a time in memory, however many
/// jobs the store keeps on disk. Ended between batches once `stop` is
/// set (an error; the file removed).
fn base(
    store: &bjh_store::LogStore,
    generation: &Generation,
    root: &Path,
    metrics: &bjh_metrics::HistoryMetrics,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<JobsFiles, String> {
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    let base = store.with_completed_by_id(|jobs| {
        let batches = completed_batches(jobs, generation.totals()).take_while(|_| !stopped());
        let counted = batches.inspect(|b| metrics.sql_jobs_rows_built.inc_by(b.num_rows() as u64));
        JobsFile::write_base(root, counted)
    })?;
    if stopped() {
        return Err("stopped".into());
    }
    Ok(JobsFiles {
        base: Arc::new(base),
        changed: None,
        left_out: Vec::new(),
    })
}

/// The base less the jobs changed since it, and a file of the rows of
/// those the store has completed now: the last such file's rows but for
/// the jobs changed since it, and theirs built (a lookup each).
fn with_changes(
    root: &Path,
    store: &bjh_store::LogStore,
    generation: &Generation,
    changes: Changes<'_>,
    metrics: &bjh_metrics::HistoryMetrics,
) -> Result<JobsFiles, String> {
    let kept = match changes.last {
        // Nothing changed since the last file (a generation made by a
        // merge alone): it serves again as written.
        Some(last) if changes.since_last.is_empty() => {
            return Ok(JobsFiles {
                base: changes.base,
                changed: Some(last.clone()),
                left_out: changes.since_base,
            });
        }
        Some(last) => last.rows_but(&changes.since_last)?,
        None => Vec::new(),
    };
    let ids = &changes.since_last;
    let jobs: Vec<_> = ids.iter().filter_map(|id| store.summary(id)).collect();
    metrics.sql_jobs_rows_built.inc_by(jobs.len() as u64);
    let kept_rows: usize = kept.iter().map(RecordBatch::num_rows).sum();
    let changed = match jobs.is_empty() && kept_rows == 0 {
        true => None,
        false => {
            let mut jobs = jobs.into_iter();
            let built = completed_batches(&mut jobs, generation.totals_near(ids));
            Some(Arc::new(JobsFile::write(
                root,
                kept.into_iter().chain(built),
            )?))
        }
    };
    Ok(JobsFiles {
        base: changes.base,
        changed,
        left_out: changes.since_base,
    })
}

impl JobsFile {
    /// The file's rows but those of the jobs `ids` (sorted).
    fn rows_but(&self, ids: &[String]) -> Result<Vec<RecordBatch>, String> {
        use datafusion::arrow::array::{Array, AsArray, BooleanArray};
        use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let (file, _) = bjh_files::open_regular(&self.path).map_err(|e| e.to_string())?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        for batch in reader {
            let batch = batch.map_err(|e| e.to_string())?;
            let col = batch.column(0);
            let keep: BooleanArray = (0..col.len())
                .map(|i| {
                    let id = col.as_string_view().value(i);
                    Some(ids.binary_search_by(|x| x.as_str().cmp(id)).is_err())
                })
                .collect();
            let kept = datafusion::arrow::compute::filter_record_batch(&batch, &keep)
                .map_err(|e| e.to_string())?;
            rows.push(kept);
        }
        Ok(rows)
    }
}

/// The completed jobs' rows, built from the store's summaries, in
/// batches.
pub(crate) fn completed_rows(
    store: &bjh_store::LogStore,
    generation: &Generation,
) -> Vec<RecordBatch> {
    store.with_completed_by_id(|jobs| completed_batches(jobs, generation.totals()).collect())
}

/// The rows of the jobs a walk by id gives, in batches of [`JOBS_BATCH`]
/// (the last shorter, and one even when there are none), each built when
/// it is asked for, with the `totals` the columnar index holds (read
/// beside the walk, in step: by id).
fn completed_batches<'a>(
    jobs: &'a mut dyn Iterator<Item = Arc<bjh_store::JobSummary>>,
    mut totals: bjh_columnar::Totals,
) -> impl Iterator<Item = RecordBatch> + 'a {
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let chunk: Vec<_> = (&mut *jobs).take(JOBS_BATCH).collect();
        done = chunk.len() < JOBS_BATCH;
        let held: Vec<_> = (chunk.iter())
            .map(|s| totals.get(JobFacts::job_id(&**s)))
            .collect();
        let lines: Vec<JobLine<'_>> = (chunk.iter().zip(&held))
            .map(|(s, t)| JobLine {
                facts: &**s as &dyn JobFacts,
                job_status: s.job_status(),
                stages: s.num_stages,
                completed_stages: s.completed_stages,
                log_size: Some(s.log_len()),
                totals: t.as_ref(),
            })
            .collect();
        Some(jobs_batch(&lines))
    })
}

/// The builds, for the scale bench.
#[doc(hidden)]
pub mod bench {
    use super::*;

    /// Builds the base from every job of `store` under `root` (removed
    /// again): how many rows.
    pub fn jobs_whole(store: &bjh_store::LogStore, generation: &Generation, root: &Path) -> u64 {
        let metrics = bjh_metrics::HistoryMetrics::unregistered();
        let Completed::Files(_) = whole(store, generation, root, &metrics) else {
            panic!("no file written under {}", root.display());
        };
        metrics.sql_jobs_rows_built.get()
    }

    /// A base and a file of changed jobs beside it.
    pub struct Built(JobsFiles);

    /// Builds the file of the jobs `ids` (sorted) beside an empty base
    /// under `root` (removed again with what it gives): how many rows it
    /// built.
    pub fn jobs_changed(
        store: &bjh_store::LogStore,
        generation: &Generation,
        root: &Path,
        ids: &[String],
    ) -> (u64, Built) {
        let metrics = bjh_metrics::HistoryMetrics::unregistered();
        let changes = Changes {
            base: Arc::new(JobsFile::write(root, []).expect("a base")),
            since_base: ids.to_vec(),
            since_last: ids.to_vec(),
            last: None,
        };
        let files = with_changes(root, store, generation, changes, &metrics).expect("a file");
        assert!(files.changed.is_some());
        (metrics.sql_jobs_rows_built.get(), Built(files))
    }

    /// Builds the next file of changed jobs from `last`'s, the jobs
    /// `again` (sorted, among those it holds) changed since: how many
    /// rows it built, and how many it holds.
    pub fn jobs_changed_again(
        store: &bjh_store::LogStore,
        generation: &Generation,
        root: &Path,
        last: &Built,
        again: &[String],
    ) -> (u64, usize) {
        let metrics = bjh_metrics::HistoryMetrics::unregistered();
        let changes = Changes {
            base: last.0.base.clone(),
            since_base: last.0.left_out.clone(),
            since_last: again.to_vec(),
            last: last.0.changed.as_ref(),
        };
        let files = with_changes(root, store, generation, changes, &metrics).expect("a file");
        let held = (files.changed.as_ref()).map_or(0, |f| {
            f.rows_but(&[])
                .expect("read")
                .iter()
                .map(RecordBatch::num_rows)
                .sum()
        });
        (metrics.sql_jobs_rows_built.get(), held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn batch() -> RecordBatch {
        bjh_columnar::tables::jobs_batch(&[])
    }

    #[test]
    fn a_file_goes_with_its_last_holder_and_a_planted_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let file = std::sync::Arc::new(JobsFile::write(root.path(), [batch()]).unwrap());
        let path = root.path().join(&file.relative);
        assert!(file.is_there() && path.is_file());
        assert!(file.relative.starts_with(JOBS_DIR));
        let held = file.clone();
        drop(file);
        assert!(path.is_file(), "a query still holds it");
        drop(held);
        assert!(!path.exists(), "removed with its last holder");

        // Swapped under us for a file of the same length: not it (the
        // caller builds it again).
        let file = JobsFile::write(root.path(), [batch()]).unwrap();
        let path = root.path().join(&file.relative);
        let swapped = root.path().join("swapped");
        std::fs::write(
            &swapped,
            vec![b'x'; std::fs::metadata(&path).unwrap().len() as usize],
        )
        .unwrap();
        std::fs::rename(&swapped, &path).unwrap();
        assert!(!file.is_there());
        drop(file);

        // Left by a process that died: swept at an engine's start once old.
        let left = JobsFile::write(root.path(), [batch()])
            .unwrap()
            .path
            .keep()
            .unwrap();
        assert_eq!(
            crate::cluster::sweep(root.path(), crate::cluster::STAGED_LEFTOVER),
            0
        );
        assert!(left.is_file());
        assert_eq!(
            crate::cluster::sweep(root.path(), std::time::Duration::ZERO),
            1
        );
        assert!(!left.exists());

        // A link planted in the folder's place: nothing written through it.
        let elsewhere = tempfile::tempdir().unwrap();
        let planted = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), planted.path().join(JOBS_DIR)).unwrap();
        let refused = JobsFile::write(planted.path(), [batch()]).unwrap_err();
        assert!(refused.contains("not a folder"), "{refused}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }

    /// The upstream fixtures: each one's id, text and task records
    /// (counted in the text).
    fn fixtures() -> Vec<(String, String, i64)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/upstream");
        let mut all: Vec<_> = (std::fs::read_dir(dir).unwrap())
            .map(|e| e.unwrap().path())
            .filter_map(|path| {
                let name = path.file_name()?.to_str()?.strip_suffix(".eventlog")?;
                let id = (!name.contains('-')).then(|| name.to_string())?;
                let text = std::fs::read_to_string(&path).unwrap();
                let tasks = text.lines().filter(|l| l.contains(r#""ev":"TaskEnd""#));
                let tasks = tasks.count() as i64;
                Some((id, text, tasks))
            })
            .collect();
        all.sort();
        all
    }

    /// A folder of the upstream fixtures' logs under new ids, a store over
    /// it keeping three jobs in memory (the rest on disk), and a columnar
    /// history.
    struct History {
        _dir: tempfile::TempDir,
        logs: std::path::PathBuf,
        fixtures: Vec<(String, String, i64)>,
        store: Arc<bjh_store::LogStore>,
        columnar: bjh_columnar::Columnar,
    }

    impl History {
        /// With `jobs` logs, read by the store, in `want`.
        fn new(jobs: usize, want: &mut BTreeMap<String, Option<i64>>) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let logs = dir.path().join("logs");
            std::fs::create_dir(&logs).unwrap();
            let metrics = Arc::new(bjh_metrics::HistoryMetrics::unregistered());
            let index = dir.path().join("store-index");
            let store = Arc::new(
                bjh_store::LogStore::new(&logs, metrics.clone())
                    .with_index_file(Some(index.clone()))
                    .with_memory_jobs(Some(3), Some(&index)),
            );
            let columnar = bjh_columnar::Columnar::open(Some(dir.path().join("columnar")), metrics);
            let history = Self {
                _dir: dir,
                logs,
                fixtures: fixtures(),
                store,
                columnar,
            };
            for k in 0..jobs {
                history.write("a", k, want);
            }
            history.store.rescan();
            history
        }

        /// Writes the `k`th fixture (cycled) under a new id of `tag` and
        /// `k`, into `want`: the id.
        fn write(&self, tag: &str, k: usize, want: &mut BTreeMap<String, Option<i64>>) -> String {
            let (id, text, tasks) = &self.fixtures[k % self.fixtures.len()];
            let new = format!("{tag}{k:03}{}", &id[4..]);
            let path = self.logs.join(format!("{new}.eventlog"));
            std::fs::write(path, text.replace(id, &new)).unwrap();
            want.insert(new.clone(), Some(*tasks));
            new
        }
    }

    /// The `jobs` rows the worker's view over `files` gives: each job's
    /// task total (each job once).
    async fn table(root: &Path, files: &JobsFiles) -> BTreeMap<String, Option<i64>> {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::Int64Type;
        let ctx = datafusion::prelude::SessionContext::new();
        let store = object_store::local::LocalFileSystem::new_with_prefix(root).unwrap();
        ctx.register_object_store(
            &url::Url::parse(crate::worker::ROOT_URL).unwrap(),
            Arc::new(store),
        );
        let urls = (files.relative().into_iter())
            .map(|f| format!("{}{f}", crate::worker::ROOT_URL))
            .map(|u| datafusion::datasource::listing::ListingTableUrl::parse(u).unwrap())
            .collect();
        let table = crate::worker::completed_jobs_table(urls, &files.left_out).unwrap();
        ctx.register_table("jobs", table).unwrap();
        let batches = (ctx.sql("SELECT job_id, tasks FROM jobs").await.unwrap())
            .collect()
            .await
            .unwrap();
        let mut rows = BTreeMap::new();
        for b in &batches {
            let ids = b.column(0).as_string_view();
            let tasks = b.column(1).as_primitive::<Int64Type>();
            for (id, n) in ids.iter().zip(tasks.iter()) {
                let id = id.unwrap().to_string();
                assert!(rows.insert(id.clone(), n).is_none(), "{id} twice");
            }
        }
        rows
    }

    /// Jobs added (before and after the columnar history read them) and
    /// removed, with some of the store's jobs on disk: the `jobs` table
    /// keeps its base, adds a file of the jobs changed (the next built
    /// from the last, the rows of the jobs changed since it built), and
    /// reads as the logs say; more changes than [`CHANGED_MAX`], or every segment
    /// dropped, build the base again. The oracle: the logs on disk, each
    /// one's task records counted in its text.
    #[tokio::test]
    async fn after_a_few_changes_the_base_stays_and_the_table_is_what_the_logs_say() {
        let mut want = BTreeMap::new();
        let history = History::new(6, &mut want);
        let write = |tag: &str, k: usize, want: &mut BTreeMap<String, Option<i64>>| {
            history.write(tag, k, want)
        };
        let (logs, store, columnar) = (&history.logs, &history.store, &history.columnar);
        let root = columnar.dir().to_path_buf();
        let kept = Keeper::default();
        let changed = |at| columnar.totals_changed_since(at);
        let counted = bjh_metrics::HistoryMetrics::unregistered();
        let build = |g: &Arc<Generation>| match completed_jobs(
            &kept, store, g, &changed, &root, &counted,
        ) {
            Completed::Files(files) => files,
            Completed::Rows(_) => panic!("rows, not files"),
        };
        let g0 = columnar.refresh(store, false).await.unwrap();

        // A job completed that the columnar history has not read yet: in
        // the base, without its totals.
        let late = write("b", 0, &mut want);
        store.rescan();
        assert!(store.spilled() > 0, "some of the store's jobs on disk");
        let built = || counted.sql_jobs_rows_built.get();
        let base = build(&g0);
        assert!(base.changed.is_none() && base.left_out.is_empty());
        assert_eq!(built(), 7, "every job's row");
        let mut early = want.clone();
        early.insert(late.clone(), None);
        assert_eq!(table(&root, &base).await, early);

        // Read: its totals come in the file of the jobs changed, though
        // the store did not change.
        let g1 = columnar.refresh(store, false).await.unwrap();
        let files = build(&g1);
        assert!(Arc::ptr_eq(&files.base, &base.base));
        assert_eq!(files.left_out, std::slice::from_ref(&late));
        assert_eq!(table(&root, &files).await, want);
        assert_eq!(built(), 8, "the one changed job's row");
        let first_changed = root.join(&files.changed.as_ref().unwrap().relative);
        drop(files);

        // One removed (retention) and one added: the base still.
        let gone = want.keys().nth(1).unwrap().clone();
        std::fs::remove_file(logs.join(format!("{gone}.eventlog"))).unwrap();
        want.remove(&gone);
        let new = write("b", 1, &mut want);
        store.rescan();
        let g2 = columnar.refresh(store, false).await.unwrap();
        let files = build(&g2);
        assert!(Arc::ptr_eq(&files.base, &base.base));
        let mut left_out = vec![gone, late, new];
        left_out.sort();
        assert_eq!(files.left_out, left_out);
        assert_eq!(table(&root, &files).await, want);
        assert!(!first_changed.exists(), "the replaced file went");
        assert_eq!(
            built(),
            9,
            "the row of the one job listed that changed since the last file (the other's kept)"
        );
        // Asked again, nothing changed: the same files.
        let again = build(&g2);
        assert!(Arc::ptr_eq(&files, &again));
        assert_eq!(built(), 9);
        // No job changed since the last file (a generation a merge
        // alone made): that file serves again, nothing written.
        let last = files.changed.as_ref().unwrap();
        let changes = Changes {
            base: files.base.clone(),
            since_base: files.left_out.clone(),
            since_last: Vec::new(),
            last: Some(last),
        };
        let same = with_changes(&root, store, &g2, changes, &counted).unwrap();
        assert!(Arc::ptr_eq(same.changed.as_ref().unwrap(), last));
        assert_eq!(same.left_out, files.left_out);
        assert_eq!(built(), 9);
        drop((files, again, same));

        // Past the bound since the base: built again.
        for k in 2..=CHANGED_MAX {
            write("b", k, &mut want);
        }
        store.rescan();
        let g3 = columnar.refresh(store, false).await.unwrap();
        let files = build(&g3);
        assert!(!Arc::ptr_eq(&files.base, &base.base));
        assert!(files.changed.is_none() && files.left_out.is_empty());
        assert_eq!(table(&root, &files).await, want);
        let base = files;

        // The columnar history starts again (its index damaged): built
        // again, though the store's journal reaches back.
        write("c", 0, &mut want);
        store.rescan();
        std::fs::write(g3.index_path().unwrap(), b"not an index").unwrap();
        drop(g3);
        let g4 = columnar.refresh(store, false).await.unwrap();
        let files = build(&g4);
        assert!(!Arc::ptr_eq(&files.base, &base.base));
        assert!(files.changed.is_none());
        assert_eq!(table(&root, &files).await, want);
        drop((g0, g1, g2));
    }

    /// The files under the `jobs` table's folder.
    fn files_in(root: &Path) -> usize {
        std::fs::read_dir(root.join(JOBS_DIR)).map_or(0, |d| d.count())
    }

    /// The background builds a base before a query needs one: at a start
    /// where a query is expected, and once half the changes a base takes
    /// came; the queries after it build no row of the jobs it holds. A
    /// stop ends its build and keeps nothing. The oracle: the logs on
    /// disk, as above.
    #[tokio::test]
    async fn the_background_builds_the_base_so_a_query_need_not() {
        let mut want = BTreeMap::new();
        let history = History::new(6, &mut want);
        let (store, columnar) = (&*history.store, &history.columnar);
        let root = columnar.dir().to_path_buf();
        let keeper = Keeper::default();
        let changed = |at| columnar.totals_changed_since(at);
        let counted = bjh_metrics::HistoryMetrics::unregistered();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let on = Inputs {
            store,
            totals_changed: &changed,
            root: &root,
            metrics: &counted,
        };
        let prepare =
            |g: &Arc<Generation>, expected| prepare(&keeper, g, &on, expected, &stop).unwrap();
        let query = |g: &Arc<Generation>| match completed_jobs(
            &keeper, store, g, &changed, &root, &counted,
        ) {
            Completed::Files(files) => files,
            Completed::Rows(_) => panic!("rows, not files"),
        };
        let built = || counted.sql_jobs_rows_built.get();
        let g0 = columnar.refresh(&history.store, false).await.unwrap();

        // Nothing kept and no query expected: nothing built.
        assert!(!prepare(&g0, false));
        assert_eq!((built(), files_in(&root)), (0, 0));
        // Expected: every job's row; the query after it builds none.
        assert!(prepare(&g0, true));
        assert_eq!(built(), 6);
        let first = query(&g0);
        assert_eq!(
            built(),
            6,
            "the query was served from the background's base"
        );
        assert!(first.changed.is_none() && first.left_out.is_empty());
        assert_eq!(table(&root, &first).await, want);
        assert!(!prepare(&g0, false), "nothing changed: not due");

        // Two jobs (half the bound of four): not due; a query builds theirs.
        for k in 0..2 {
            history.write("b", k, &mut want);
        }
        store.rescan();
        let g1 = columnar.refresh(&history.store, false).await.unwrap();
        assert!(!prepare(&g1, false));
        let files = query(&g1);
        assert!(Arc::ptr_eq(&files.base, &first.base));
        assert_eq!(built(), 8);
        assert_eq!(table(&root, &files).await, want);

        // One more: due; the background builds the base again, and the
        // query after it builds nothing.
        history.write("b", 2, &mut want);
        store.rescan();
        let g2 = columnar.refresh(&history.store, false).await.unwrap();
        assert!(prepare(&g2, false));
        assert_eq!(built(), 8 + 9);
        let files = query(&g2);
        assert_eq!(built(), 8 + 9);
        assert!(!Arc::ptr_eq(&files.base, &first.base));
        assert!(files.changed.is_none() && files.left_out.is_empty());
        assert_eq!(table(&root, &files).await, want);
        drop(first);

        // A stop: the build ends, nothing of it kept or left on disk.
        for k in 3..6 {
            history.write("b", k, &mut want);
        }
        store.rescan();
        let g3 = columnar.refresh(&history.store, false).await.unwrap();
        let on_disk = files_in(&root);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(!prepare(&g3, false));
        assert_eq!(files_in(&root), on_disk);
        let after = query(&g3);
        assert!(Arc::ptr_eq(&after.base, &files.base), "the base kept");
        assert_eq!(table(&root, &after).await, want);
        drop((files, after));

        // The base gone and no file can be written (a file planted in the
        // folder's place): the build fails once and is not tried again
        // until a query keeps rows (here, in memory: never due).
        stop.store(false, std::sync::atomic::Ordering::Relaxed);
        let folder = root.join(JOBS_DIR);
        std::fs::rename(&folder, root.join("moved")).unwrap();
        std::fs::write(&folder, b"planted").unwrap();
        let failed = super::prepare(&keeper, &g3, &on, false, &stop);
        assert!(failed.unwrap_err().contains("not a folder"));
        assert!(!prepare(&g3, false), "not tried again");
        let Completed::Rows(rows) = completed_jobs(&keeper, store, &g3, &changed, &root, &counted)
        else {
            panic!("a file written through a planted one");
        };
        assert_eq!(
            rows.iter().map(RecordBatch::num_rows).sum::<usize>(),
            want.len()
        );
        assert!(!prepare(&g3, false), "rows in memory are never due");
        assert_eq!(std::fs::read(&folder).unwrap(), b"planted");
    }

    /// A query and the background asking for a base at once build one
    /// between them, however they interleave (the query waits for the
    /// background's build, or the background finds the query's).
    #[tokio::test]
    async fn a_query_and_the_background_build_one_base_between_them() {
        let mut want = BTreeMap::new();
        let history = History::new(5, &mut want);
        let (store, columnar) = (&*history.store, &history.columnar);
        let root = columnar.dir().to_path_buf();
        let generation = columnar.refresh(&history.store, false).await.unwrap();
        let changed = |at| columnar.totals_changed_since(at);
        let stop = std::sync::atomic::AtomicBool::new(false);
        for round in 0..20 {
            let (keeper, counted) = (
                Keeper::default(),
                bjh_metrics::HistoryMetrics::unregistered(),
            );
            let barrier = std::sync::Barrier::new(2);
            let served = std::thread::scope(|s| {
                let background = s.spawn(|| {
                    barrier.wait();
                    let on = Inputs {
                        store,
                        totals_changed: &changed,
                        root: &root,
                        metrics: &counted,
                    };
                    prepare(&keeper, &generation, &on, true, &stop).unwrap()
                });
                barrier.wait();
                let served = completed_jobs(&keeper, store, &generation, &changed, &root, &counted);
                background.join().unwrap();
                served
            });
            assert_eq!(counted.sql_jobs_rows_built.get(), 5, "round {round}");
            let Completed::Files(files) = served else {
                panic!("rows, not files");
            };
            let kept_base = match keeper.kept.lock().as_ref() {
                Some(KeptJobs {
                    rows: Completed::Files(kept),
                    ..
                }) => kept.base.clone(),
                _ => panic!("nothing kept"),
            };
            assert!(Arc::ptr_eq(&kept_base, &files.base), "round {round}");
            if round == 0 {
                assert_eq!(table(&root, &files).await, want);
            }
        }
    }
}
