//! SQL over the history: `POST /api/sql` with DataFusion over four tables
//! (`jobs`, `stages`, `tasks`, `operators`; `tables` has their schemas).
//!
//! `jobs` is built from the list the source gives (completed jobs from the
//! in-memory index, running and abandoned ones too); the other three are
//! the Parquet files of the columnar history (`columnar`), brought up to
//! date before each query.
//!
//! **Invariants:** a query only reads: DDL, DML, `COPY`, `SET` and other
//! statements are refused before planning, URL tables are off and no other
//! catalog, file or object store is registered; it runs on its own
//! runtime, under a memory pool with spilling disabled, and is stopped at
//! the time limit, so a hostile query cannot stall the server.

pub mod columnar;
pub mod fresh;
pub mod grouping;
pub mod route;
pub mod shared;
pub mod tables;

use crate::serving::error::ApiError;
use crate::serving::source::JobSource;
use crate::serving::sql::columnar::{Columnar, Generation, TABLES};
use crate::serving::sql::tables::{JobLine, jobs_batch};
use crate::store::query::{JobFacts, ListQuery};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// The limits every query runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlLimits {
    /// Stopped after this long.
    pub timeout: Duration,
    /// Memory the query's operators may hold (bytes).
    pub memory: usize,
    /// Rows answered at most; more are cut off (and the answer says so).
    pub max_rows: usize,
}

impl Default for SqlLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory: 512 * 1024 * 1024,
            max_rows: 100_000,
        }
    }
}

/// A query's answer.
#[derive(Debug)]
pub struct Answer {
    /// Its columns.
    pub schema: SchemaRef,
    /// Its rows.
    pub batches: Vec<RecordBatch>,
    /// Whether rows were cut off at the row limit.
    pub truncated: bool,
}

/// The SQL engine of one server.
pub struct SqlEngine {
    source: Arc<dyn JobSource>,
    columnar: Arc<Columnar>,
    limits: SqlLimits,
    runtime: Runtime,
    /// Whether a query has been asked: until then nothing is built, so a
    /// server whose SQL is never used reads no log twice.
    used: std::sync::atomic::AtomicBool,
    /// The completed jobs' rows of the `jobs` table, kept between queries.
    kept_jobs: Arc<parking_lot::Mutex<Option<KeptJobs>>>,
}

/// The completed jobs' rows of the last `jobs` table asked for: used while
/// the store's completed jobs and the columnar generation are those they
/// were built from, and dropped after [`KEPT_JOBS_IDLE`] without a query
/// (245 MB at a million jobs in the SQL bench).
struct KeptJobs {
    version: u64,
    generation: std::sync::Weak<Generation>,
    batch: RecordBatch,
    used: std::time::Instant,
}

/// How long the `jobs` rows are kept without a query asking for them.
const KEPT_JOBS_IDLE: Duration = Duration::from_secs(300);

/// A runtime of its own for queries, shut down without waiting (it may be
/// dropped inside the server's runtime).
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl SqlEngine {
    /// An engine over `source`, keeping its columnar history in `dir`.
    pub fn new(source: Arc<dyn JobSource>, dir: std::path::PathBuf, limits: SqlLimits) -> Self {
        Self::with_fresh(source, dir, limits, Arc::new(fresh::Fresh::new()))
    }

    /// [`SqlEngine::new`], adding the jobs a writer hands to `fresh` from
    /// its records (a recording scheduler: their logs are not read again).
    pub fn with_fresh(
        source: Arc<dyn JobSource>,
        dir: std::path::PathBuf,
        limits: SqlLimits,
        fresh: Arc<fresh::Fresh>,
    ) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("history-sql")
            .enable_all()
            .build()
            .expect("a runtime for SQL queries");
        Self {
            source,
            columnar: Arc::new(Columnar::open_with(dir, fresh)),
            limits,
            runtime: Runtime(Some(runtime)),
            used: std::sync::atomic::AtomicBool::new(false),
            kept_jobs: Arc::new(parking_lot::Mutex::new(None)),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> SqlLimits {
        self.limits
    }

    /// The columnar history.
    pub fn columnar(&self) -> &Arc<Columnar> {
        &self.columnar
    }

    /// Brings the columnar history up to date; with `publish`, also
    /// publishes it beside the logs in an object store (done by the
    /// background refresh and the export, never on a query's path).
    pub async fn refresh(&self, publish: bool) -> Result<Arc<Generation>, ApiError> {
        self.columnar
            .refresh(&*self.source, publish)
            .await
            .map_err(|e| ApiError::Internal(format!("the columnar history cannot be built: {e}")))
    }

    /// Once SQL is in use (a query was asked, or the folder holds files
    /// from an earlier run), brings the columnar history up to date every
    /// `interval` until `stop` resolves, so jobs are in it soon after they
    /// complete and a query seldom waits for their logs to be read.
    pub async fn keep_fresh(
        self: Arc<Self>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut ticker = tokio::time::interval(interval.max(Duration::from_secs(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.forget_idle_jobs();
                    let in_use = self.used.load(std::sync::atomic::Ordering::Relaxed)
                        || self.columnar.dir().join("manifest.json").exists();
                    if in_use && let Err(e) = self.refresh(true).await {
                        log::warn!("history: {e}");
                    }
                }
                () = &mut stop => return,
            }
        }
    }

    /// Drops the kept `jobs` rows once no query asked for them for
    /// [`KEPT_JOBS_IDLE`].
    fn forget_idle_jobs(&self) {
        let mut kept = self.kept_jobs.lock();
        if kept
            .as_ref()
            .is_some_and(|k| k.used.elapsed() > KEPT_JOBS_IDLE)
        {
            *kept = None;
        }
    }

    /// The `jobs` table now: the completed jobs straight from the store's
    /// summaries (kept between queries while they do not change), then the
    /// others the source lists (unfinished logs, and the live scheduler's
    /// jobs not in the store yet).
    pub async fn jobs(&self, generation: &Arc<Generation>) -> Result<Vec<RecordBatch>, ApiError> {
        let store = self.source.store().cloned();
        let completed = match &store {
            Some(store) => {
                let (kept, store, generation) =
                    (self.kept_jobs.clone(), store.clone(), generation.clone());
                let built =
                    tokio::task::spawn_blocking(move || completed_jobs(&kept, &store, &generation));
                Some(built.await.map_err(|e| {
                    ApiError::Internal(format!("the jobs table cannot be built: {e}"))
                })?)
            }
            None => None,
        };
        let query = ListQuery {
            include_unfinished: true,
            states: store.is_some().then(|| {
                vec![
                    crate::format::JobState::Queued,
                    crate::format::JobState::Running,
                    crate::format::JobState::Abandoned,
                ]
            }),
            ..ListQuery::default()
        };
        let page = self.source.list(&query, None).await?;
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct Entry {
            job_status: String,
            num_stages: u32,
            completed_stages: u32,
        }
        let rows: Vec<_> = page
            .rows
            .iter()
            .filter(|r| !store.as_ref().is_some_and(|s| s.contains(r.facts.job_id())))
            .collect();
        let entries: Vec<Entry> = rows
            .iter()
            .map(|r| serde_json::from_slice(&r.entry).unwrap_or_default())
            .collect();
        let lines: Vec<JobLine<'_>> = rows
            .iter()
            .zip(&entries)
            .map(|(row, e)| JobLine {
                facts: &*row.facts as &dyn JobFacts,
                job_status: &e.job_status,
                stages: e.num_stages,
                completed_stages: e.completed_stages,
                log_size: store.as_ref().and_then(|s| s.log_len(row.facts.job_id())),
                totals: generation.totals.get(row.facts.job_id()),
            })
            .collect();
        let others = jobs_batch(&lines);
        // Two batches, not one: joining them would copy every row.
        Ok(completed.into_iter().chain([others]).collect())
    }

    /// Writes the four tables as Parquet under `out`: `jobs/part-00000.parquet`
    /// and, per table, one `part-NNNNN.parquet` per segment of the
    /// columnar history (rows sorted by job id). Says what it wrote.
    pub async fn export(&self, out: &std::path::Path) -> Result<String, ApiError> {
        let generation = self.refresh(true).await?;
        let jobs = datafusion::arrow::compute::concat_batches(
            &tables::JOBS,
            &self.jobs(&generation).await?,
        )
        .map_err(|e| ApiError::Internal(e.to_string()))?;
        let io = |e: std::io::Error| ApiError::Internal(format!("{}: {e}", out.display()));
        let jobs_dir = out.join("jobs");
        std::fs::create_dir_all(&jobs_dir).map_err(io)?;
        columnar::write_file(&jobs_dir.join("part-00000.parquet"), &tables::JOBS, &jobs)
            .map_err(ApiError::Internal)?;
        let mut files = 1;
        for (t, (name, _)) in TABLES.iter().enumerate() {
            let dir = out.join(name);
            std::fs::create_dir_all(&dir).map_err(io)?;
            for (i, file) in generation.files[t].iter().enumerate() {
                std::fs::copy(file, dir.join(format!("part-{i:05}.parquet"))).map_err(io)?;
                files += 1;
            }
        }
        let tasks: i64 = generation.totals.values().map(|t| t.tasks).sum();
        Ok(format!(
            "exported {} jobs and {tasks} task attempts to {} ({files} Parquet files)",
            jobs.num_rows(),
            out.display()
        ))
    }

    /// Runs `sql` (read-only) under the limits.
    pub async fn query(&self, sql: &str) -> Result<Answer, ApiError> {
        self.used.store(true, std::sync::atomic::Ordering::Relaxed);
        let generation = self.refresh(false).await?;
        let wants_jobs = sql.to_ascii_lowercase().contains("jobs");
        let jobs = if wants_jobs {
            Some(self.jobs(&generation).await?)
        } else {
            None
        };
        let limits = self.limits;
        let sql = sql.to_string();
        let held = generation.clone();
        let handle = self
            .runtime
            .0
            .as_ref()
            .expect("the runtime lives as long as the engine")
            .spawn(async move { query_files(&held, jobs, &sql, limits).await });
        let abort = handle.abort_handle();
        let answer = match tokio::time::timeout(limits.timeout, handle).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Err(ApiError::Internal(format!("the query failed: {e}"))),
            Err(_) => {
                abort.abort();
                Err(ApiError::BadRequest(format!(
                    "the query was stopped after {} s (--sql-timeout-seconds)",
                    limits.timeout.as_secs_f64()
                )))
            }
        };
        drop(generation);
        answer
    }
}

/// The completed jobs' rows of the `jobs` table, from the store's
/// summaries: the kept ones while nothing they were built from changed.
/// Building them takes a fraction of a second at a million jobs: it runs
/// on a blocking thread, never on the server's runtime.
fn completed_jobs(
    kept_jobs: &parking_lot::Mutex<Option<KeptJobs>>,
    store: &crate::store::LogStore,
    generation: &Arc<Generation>,
) -> RecordBatch {
    // Read before building: a change while building makes the next
    // query build again, never keeps stale rows under a newer number.
    let version = store.version();
    let weak = Arc::downgrade(generation);
    let mut kept = kept_jobs.lock();
    if let Some(k) = kept.as_mut()
        && k.version == version
        && k.generation.ptr_eq(&weak)
    {
        k.used = std::time::Instant::now();
        return k.batch.clone();
    }
    let batch = store.with_completed(|jobs| {
        let lines: Vec<JobLine<'_>> = jobs
            .map(|s| JobLine {
                facts: s as &dyn JobFacts,
                job_status: s.job_status(),
                stages: s.num_stages,
                completed_stages: s.completed_stages,
                log_size: Some(s.log_len()),
                totals: generation.totals.get(JobFacts::job_id(s)),
            })
            .collect();
        jobs_batch(&lines)
    });
    *kept = Some(KeptJobs {
        version,
        generation: weak,
        batch: batch.clone(),
        used: std::time::Instant::now(),
    });
    batch
}

/// Runs `sql` over the files of `generation` (and `jobs`, when given) in
/// this runtime, without the time limit: what a query does once the
/// engine has its tables (the SQL bench times it).
pub async fn query_files(
    generation: &Generation,
    jobs: Option<Vec<RecordBatch>>,
    sql: &str,
    limits: SqlLimits,
) -> Result<Answer, ApiError> {
    let ctx = context(limits, generation, jobs)?;
    run(&ctx, sql, limits.max_rows).await
}

/// Parquet footers and file statistics, kept across queries (each query
/// has its own session and memory pool). An entry is used only while its
/// file keeps the size and time it was read with, and file names are not
/// reused while the columnar manifest lives.
static CACHES: std::sync::LazyLock<CacheManagerConfig> = std::sync::LazyLock::new(|| {
    use datafusion::execution::cache::cache_manager::{
        DEFAULT_FILE_STATISTICS_MEMORY_LIMIT, DEFAULT_METADATA_CACHE_LIMIT,
    };
    use datafusion::execution::cache::default_cache::DefaultCache;
    CacheManagerConfig::default()
        .with_file_statistics_cache(Some(Arc::new(DefaultCache::new(
            DEFAULT_FILE_STATISTICS_MEMORY_LIMIT,
        ))))
        .with_file_metadata_cache(Some(Arc::new(DefaultCache::new(
            DEFAULT_METADATA_CACHE_LIMIT,
        ))))
        // Listings are not kept: a folder's files change between queries.
        .with_list_files_cache_limit(0)
});

/// A session over the tables, with the limits; nothing else registered.
fn context(
    limits: SqlLimits,
    generation: &Generation,
    jobs: Option<Vec<RecordBatch>>,
) -> Result<SessionContext, ApiError> {
    let runtime = RuntimeEnvBuilder::new()
        .with_cache_manager(CACHES.clone())
        .with_memory_limit(limits.memory, 1.0)
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build_arc()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut config = SessionConfig::new()
        .with_target_partitions(2)
        .with_information_schema(false);
    config.options_mut().execution.parquet.pushdown_filters = true;
    config.options_mut().execution.parquet.reorder_filters = true;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(grouping::StringGrouping))
        .build();
    let ctx = SessionContext::new_with_state(state);
    let internal = |e: datafusion::error::DataFusionError| ApiError::Internal(e.to_string());
    if let Some(batches) = jobs {
        let table = MemTable::try_new(tables::JOBS.clone(), vec![batches]).map_err(internal)?;
        ctx.register_table("jobs", Arc::new(table))
            .map_err(internal)?;
    } else {
        let empty = MemTable::try_new(tables::JOBS.clone(), vec![vec![]]).map_err(internal)?;
        ctx.register_table("jobs", Arc::new(empty))
            .map_err(internal)?;
    }
    for (t, (name, schema)) in TABLES.iter().enumerate() {
        let files = &generation.files[t];
        let provider: Arc<dyn datafusion::catalog::TableProvider> = if files.is_empty() {
            Arc::new(MemTable::try_new((**schema).clone(), vec![vec![]]).map_err(internal)?)
        } else {
            let urls = files
                .iter()
                .map(|p| ListingTableUrl::parse(p.to_string_lossy()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(internal)?;
            let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
                .with_file_extension(".parquet");
            let config = ListingTableConfig::new_with_multi_paths(urls)
                .with_listing_options(options)
                .with_schema((**schema).clone());
            Arc::new(ListingTable::try_new(config).map_err(internal)?)
        };
        ctx.register_table(*name, provider).map_err(internal)?;
    }
    Ok(ctx)
}

async fn run(ctx: &SessionContext, sql: &str, max_rows: usize) -> Result<Answer, ApiError> {
    let bad = |e: datafusion::error::DataFusionError| ApiError::BadRequest(e.to_string());
    let options = datafusion::execution::context::SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let frame = ctx.sql_with_options(sql, options).await.map_err(bad)?;
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let mut stream = frame.execute_stream().await.map_err(bad)?;
    let mut batches = Vec::new();
    let mut rows = 0;
    let mut truncated = false;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(bad)?;
        if rows + batch.num_rows() > max_rows {
            batches.push(batch.slice(0, max_rows - rows));
            truncated = true;
            break;
        }
        rows += batch.num_rows();
        batches.push(batch);
    }
    Ok(Answer {
        schema,
        batches,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_rows_are_built_off_the_runtime_that_asks_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(crate::store::LogStore::new(
            dir.path().join("logs"),
            Arc::new(crate::metrics::HistoryMetrics::unregistered()),
        ));
        let engine = Arc::new(SqlEngine::new(
            Arc::new(crate::serving::source::DiskSource::new(store)),
            dir.path().join("columnar"),
            SqlLimits::default(),
        ));
        // The build cannot finish while this is held.
        let held = engine.kept_jobs.lock();
        let (told, heard) = std::sync::mpsc::channel();
        let asking = engine.clone();
        let thread = std::thread::spawn(move || {
            // One thread: were the rows built on it, nothing else would run
            // on it until they were.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let building = tokio::spawn(async move {
                    let generation = Arc::new(Generation {
                        files: Default::default(),
                        totals: Default::default(),
                    });
                    asking.jobs(&generation).await.map(|b| b.len())
                });
                // Runs once `building` has started and waits for the build.
                tokio::task::yield_now().await;
                told.send(()).unwrap();
                building.await.unwrap()
            })
        });
        let ran = heard.recv_timeout(std::time::Duration::from_secs(60));
        drop(held);
        assert!(
            ran.is_ok(),
            "the runtime was held while the rows were built"
        );
        // The completed jobs' rows (none), then the others'.
        assert_eq!(thread.join().unwrap().unwrap(), 2);
    }
}
