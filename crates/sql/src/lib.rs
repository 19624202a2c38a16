//! SQL over the history: `POST /api/sql` with DataFusion over seven tables
//! (`jobs`, `stages`, `tasks`, `operators`, whose schemas `tables` has;
//! `usage`, from the cluster logs; `whatif` and `whatif_pairs`, the
//! replays and graded pairs the server works out, whose schemas `whatif`
//! has).
//!
//! `jobs` is built from the list the source gives (completed jobs from the
//! in-memory index, running and abandoned ones too); the other three are
//! the Parquet files of the columnar history (`columnar`), brought up to
//! date before each query.
//!
//! A query runs in a worker process (`worker`, started and limited by
//! `pool`), never in the server: whatever it does (an allocation that
//! aborts, a function that never yields, an answer of a gigabyte), the
//! server and a live scheduler beside it keep serving. On the cluster
//! engine (`cluster`) the worker submits it as a Ballista job instead of
//! executing it, the tables staged as Parquet the executors read.
//!
//! **Rule:** this crate imports `format`, `files`, `metrics`, `store` and
//! `columnar`; it knows nothing of HTTP (its errors are its own,
//! [`SqlError`]; `serving` answers them), and the jobs the store has not
//! completed come through [`OtherJobs`], which `serving` implements.
//!
//! **Invariants:** a query only reads: DDL, DML, `COPY`, `SET` and other
//! statements are refused before planning, URL tables are off and no other
//! catalog, file or object store is registered; it runs in a process of
//! its own under the kernel's limits (address space, CPU time, no files
//! written) and a memory pool with spilling disabled, and that process is
//! killed at the time limit or when the client goes away.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod cluster;
pub mod jobs_file;
pub mod pool;
pub mod whatif;
pub mod worker;

use crate::worker::{Format, Request};
use bjh_columnar::tables::{self, JobLine, jobs_batch};
use bjh_columnar::{self, Columnar, Generation, TABLES, fresh};
use bjh_store::LogStore;
use bjh_store::query::{JobFacts, ListQuery};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use futures::StreamExt;
use jobs_file::{Completed, Keeper, completed_jobs, completed_rows};
use std::sync::Arc;
use std::time::Duration;

/// Why a query got no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SqlError {
    /// The query cannot be run as written (refused, failed, too large or
    /// too slow); the message says why.
    #[error("{0}")]
    BadRequest(String),
    /// Every worker is busy and the queue is full; try again soon.
    #[error("{0}")]
    Busy(String),
    /// Something failed on our side; the message says what, without paths.
    #[error("{0}")]
    Internal(String),
}

/// Where a query runs.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// In a worker process of this server's (the default).
    #[default]
    Local,
    /// As a Ballista job on a cluster's executors ([`cluster`]).
    Cluster,
}

/// The jobs of the `jobs` table that are not the store's completed ones:
/// unfinished logs, and a live scheduler's jobs not in the store yet.
#[async_trait::async_trait]
pub trait OtherJobs: Send + Sync {
    /// The jobs `query` matches, in one page.
    async fn others(&self, query: &ListQuery) -> Result<bjh_store::query::Page, SqlError>;

    /// The `whatif` table's rows (the replays of each recurring query's
    /// newest run, [`whatif`]); none where the server replays nothing.
    async fn whatif(&self, _store: Arc<LogStore>) -> Result<Vec<whatif::WhatIfRow>, SqlError> {
        Ok(Vec::new())
    }

    /// The `whatif_pairs` table's rows (the newest [`whatif::MAX_PAIRS`]
    /// graded pairs of runs); none where the server grades nothing.
    async fn whatif_pairs(&self, _store: Arc<LogStore>) -> Result<Vec<whatif::PairRow>, SqlError> {
        Ok(Vec::new())
    }
}

/// The limits every query runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlLimits {
    /// Stopped after this long (its worker killed), counted from its
    /// arrival: waiting in the queue counts.
    pub timeout: Duration,
    /// Memory the query's operators may hold (bytes).
    pub memory: usize,
    /// Rows answered at most; more are cut off (and the answer says so).
    pub max_rows: usize,
    /// Bytes of encoded answer at most; a larger answer is refused.
    pub max_answer_bytes: usize,
    /// Queries run at once, each in a worker process of its own.
    pub workers: usize,
    /// Queries waiting for a worker at most; more are answered 503.
    pub queue: usize,
}

impl Default for SqlLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory: 512 * 1024 * 1024,
            max_rows: 100_000,
            max_answer_bytes: 64 * 1024 * 1024,
            workers: 2,
            queue: 8,
        }
    }
}

/// A query's answer, decoded (for the pages).
#[derive(Debug)]
pub struct RowsAnswer {
    /// Its columns.
    pub schema: SchemaRef,
    /// Its rows.
    pub batches: Vec<RecordBatch>,
    /// Whether rows were cut off at the row limit.
    pub truncated: bool,
}

/// An answer on its way from its worker: how many rows, whether they were
/// cut, its length, and its bytes.
pub struct Streaming {
    /// Rows in the answer.
    pub rows: usize,
    /// Whether rows were cut off at the row limit.
    pub truncated: bool,
    /// The answer's length in bytes.
    pub bytes: usize,
    /// The bytes, as the worker sends them.
    pub body: futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
}

/// The SQL engine of one server.
pub struct SqlEngine {
    source: Arc<dyn OtherJobs>,
    /// The log directory behind `source`: its completed jobs are read in
    /// place for the columnar history and the `jobs` table.
    store: Arc<LogStore>,
    columnar: Arc<Columnar>,
    limits: SqlLimits,
    workers: pool::Workers,
    /// Whether a query has been asked: until then nothing is built, so a
    /// server whose SQL is never used reads no log twice.
    used: std::sync::atomic::AtomicBool,
    /// The completed jobs' rows of the `jobs` table, kept between queries.
    kept_jobs: Arc<Keeper>,
    /// Whether a query naming `jobs` is expected before one asks: an
    /// earlier run's SQL named it (its folder is there). The background's
    /// first refresh then builds the table's base (once).
    jobs_expected: std::sync::atomic::AtomicBool,
    /// The scheduler the cluster engine submits to (`http://host:port`).
    cluster: Option<String>,
    /// The engine a query that names none runs on.
    default_engine: Engine,
}

/// How long the `jobs` rows are kept without a query asking for them.
pub(crate) const KEPT_JOBS_IDLE: Duration = Duration::from_secs(300);

impl SqlEngine {
    /// An engine over `store` (the log directory) and `source` (the jobs
    /// it has not completed),
    /// keeping its columnar history in `dir` (or, `None`, in a private
    /// folder of this process's own), running queries in `worker`
    /// processes (an executable whose `main` calls
    /// [`worker::run_if_worker`] first: this crate's binary). On a
    /// recording scheduler, `fresh` holds the jobs the writer hands over
    /// with their records, whose logs are then not read again.
    pub fn new(
        source: Arc<dyn OtherJobs>,
        store: Arc<LogStore>,
        dir: impl Into<Option<std::path::PathBuf>>,
        limits: SqlLimits,
        worker: std::path::PathBuf,
        fresh: Option<Arc<fresh::Fresh>>,
    ) -> Self {
        let fresh = fresh.unwrap_or_default();
        let columnar =
            Columnar::open_with(dir.into(), fresh, bjh_metrics::HistoryMetrics::global());
        cluster::sweep(columnar.dir(), cluster::STAGED_LEFTOVER);
        let jobs_expected = columnar.dir().join(jobs_file::JOBS_DIR).is_dir();
        Self {
            source,
            store,
            columnar: Arc::new(columnar),
            limits,
            workers: pool::Workers::new(worker, limits, bjh_metrics::HistoryMetrics::global()),
            used: std::sync::atomic::AtomicBool::new(false),
            kept_jobs: Arc::default(),
            jobs_expected: jobs_expected.into(),
            cluster: None,
            default_engine: Engine::Local,
        }
    }

    /// With a cluster for [`Engine::Cluster`]: `scheduler` as an operator
    /// writes it (`df://host:port`), and the engine a query that names
    /// none runs on. Refused when the address is not one, or when the
    /// default is the cluster and there is none.
    pub fn with_cluster(
        &mut self,
        scheduler: Option<&str>,
        default_engine: Engine,
    ) -> Result<(), String> {
        self.cluster = cluster::setting(scheduler, default_engine)?;
        self.default_engine = default_engine;
        Ok(())
    }

    /// The scheduler the cluster engine submits to, and the default engine.
    pub fn engines(&self) -> (Option<&str>, Engine) {
        (self.cluster.as_deref(), self.default_engine)
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
    pub async fn refresh(&self, publish: bool) -> Result<Arc<Generation>, SqlError> {
        self.columnar
            .refresh(&self.store, publish)
            .await
            .map_err(|e| SqlError::Internal(format!("the columnar history cannot be built: {e}")))
    }

    /// Once SQL is in use (a query was asked, or the folder holds files
    /// from an earlier run), brings the columnar history up to date every
    /// `interval` until `stop` resolves, so jobs are in it soon after they
    /// complete and a query seldom waits for their logs to be read; then
    /// builds the `jobs` table's base when one is due
    /// (`jobs_file::prepare`), so a query seldom waits for that either.
    /// A stop ends that build.
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
                    if !in_use {
                        continue;
                    }
                    let generation = match self.refresh(true).await {
                        Ok(generation) => generation,
                        Err(e) => {
                            log::warn!("history: {e}");
                            continue;
                        }
                    };
                    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let preparing = tokio::task::spawn_blocking({
                        let (engine, stopped) = (self.clone(), stopped.clone());
                        move || engine.prepare_jobs(&generation, &stopped)
                    });
                    tokio::select! {
                        _ = preparing => {}
                        () = &mut stop => {
                            stopped.store(true, std::sync::atomic::Ordering::Relaxed);
                            return;
                        }
                    }
                }
                () = &mut stop => return,
            }
        }
    }

    /// Builds the `jobs` table's base off any query's path when one is
    /// due.
    fn prepare_jobs(&self, generation: &Arc<Generation>, stopped: &std::sync::atomic::AtomicBool) {
        let expected = (self.jobs_expected).swap(false, std::sync::atomic::Ordering::Relaxed);
        let changed = |at| self.columnar.totals_changed_since(at);
        let metrics = bjh_metrics::HistoryMetrics::global();
        let root = self.columnar.dir();
        let from = jobs_file::Inputs {
            store: &self.store,
            totals_changed: &changed,
            root,
            metrics: &metrics,
        };
        let prepared = jobs_file::prepare(&self.kept_jobs, generation, &from, expected, stopped);
        if let Err(e) = prepared {
            log::warn!("history: the SQL jobs table's base is left to the next query: {e}");
        }
    }

    /// Drops the kept `jobs` rows once no query asked for them for
    /// [`KEPT_JOBS_IDLE`].
    fn forget_idle_jobs(&self) {
        let mut kept = self.kept_jobs.kept.lock();
        if kept
            .as_ref()
            .is_some_and(|k| k.used.elapsed() > KEPT_JOBS_IDLE)
        {
            *kept = None;
        }
    }

    /// The `jobs` table now, as rows: the completed jobs straight from the
    /// store's summaries, then the others the source lists (unfinished
    /// logs, and the live scheduler's jobs not in the store yet). Built
    /// afresh (an export's); a query's are kept as a file (`jobs_file`).
    pub async fn jobs(&self, generation: &Arc<Generation>) -> Result<Vec<RecordBatch>, SqlError> {
        let (store, held) = (self.store.clone(), generation.clone());
        let built = tokio::task::spawn_blocking(move || completed_rows(&store, &held));
        let mut batches = built
            .await
            .map_err(|e| SqlError::Internal(format!("the jobs table cannot be built: {e}")))?;
        // Batches, not one: joining them would copy every row.
        batches.push(self.other_jobs().await?);
        Ok(batches)
    }

    /// The `jobs` table for a query: the completed jobs' rows, kept
    /// between queries while they do not change (as a file the worker
    /// reads, where one can be written), and the others' rows.
    async fn jobs_table(
        &self,
        generation: &Arc<Generation>,
    ) -> Result<(Completed, RecordBatch), SqlError> {
        let (kept, store, held) = (
            self.kept_jobs.clone(),
            self.store.clone(),
            generation.clone(),
        );
        let columnar = self.columnar.clone();
        let built = tokio::task::spawn_blocking(move || {
            let changed = |at| columnar.totals_changed_since(at);
            let metrics = bjh_metrics::HistoryMetrics::global();
            completed_jobs(&kept, &store, &held, &changed, columnar.dir(), &metrics)
        });
        let completed = built
            .await
            .map_err(|e| SqlError::Internal(format!("the jobs table cannot be built: {e}")))?;
        Ok((completed, self.other_jobs().await?))
    }

    /// The rows of the jobs the store has not completed.
    async fn other_jobs(&self) -> Result<RecordBatch, SqlError> {
        let store = &self.store;
        // The completed jobs come from the store; the rest from the source.
        let query = ListQuery {
            include_unfinished: true,
            states: Some(vec![
                bjh_format::JobState::Queued,
                bjh_format::JobState::Running,
                bjh_format::JobState::Abandoned,
            ]),
            ..ListQuery::default()
        };
        let page = self.source.others(&query).await?;
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
            .filter(|r| !store.contains(r.facts.job_id()))
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
                log_size: store.log_len(row.facts.job_id()),
                // The columnar history holds completed jobs alone.
                totals: None,
            })
            .collect();
        Ok(jobs_batch(&lines))
    }

    /// Writes the four tables as Parquet under `out`: `jobs/part-00000.parquet`
    /// and, per table, one `part-NNNNN.parquet` per segment of the
    /// columnar history (rows sorted by job id). Says what it wrote.
    pub async fn export(&self, out: &std::path::Path) -> Result<String, SqlError> {
        let generation = self.refresh(true).await?;
        let jobs = datafusion::arrow::compute::concat_batches(
            &tables::JOBS,
            &self.jobs(&generation).await?,
        )
        .map_err(|e| SqlError::Internal(e.to_string()))?;
        let io = |e: std::io::Error| SqlError::Internal(format!("{}: {e}", out.display()));
        let jobs_dir = out.join("jobs");
        std::fs::create_dir_all(&jobs_dir).map_err(io)?;
        bjh_columnar::write_file(&jobs_dir.join("part-00000.parquet"), &tables::JOBS, &jobs)
            .map_err(|e| SqlError::Internal(e.to_string()))?;
        let mut files = 1;
        for (t, (name, _)) in TABLES.iter().enumerate() {
            let dir = out.join(name);
            std::fs::create_dir_all(&dir).map_err(io)?;
            for (i, file) in generation.files[t].iter().enumerate() {
                std::fs::copy(file, dir.join(format!("part-{i:05}.parquet"))).map_err(io)?;
                files += 1;
            }
        }
        let tasks = generation.task_rows;
        Ok(format!(
            "exported {} jobs and {tasks} task attempts to {} ({files} Parquet files)",
            jobs.num_rows(),
            out.display()
        ))
    }

    /// Runs `sql` (read-only) in a worker under the limits, answering at
    /// most `max_rows` rows (and never more than the limit) in `format`,
    /// on the default engine.
    pub async fn query(
        &self,
        sql: &str,
        format: Format,
        max_rows: usize,
    ) -> Result<Streaming, SqlError> {
        self.query_on(sql, format, max_rows, None).await
    }

    /// [`SqlEngine::query`] on `engine` (`None`: the default).
    pub async fn query_on(
        &self,
        sql: &str,
        format: Format,
        max_rows: usize,
        engine: Option<Engine>,
    ) -> Result<Streaming, SqlError> {
        let started = tokio::time::Instant::now();
        let scheduler = self.scheduler_for(engine)?;
        self.used.store(true, std::sync::atomic::Ordering::Relaxed);
        let generation = self.refresh(false).await?;
        let lower = sql.to_ascii_lowercase();
        let with_jobs = lower.contains("jobs");
        let (jobs_files, jobs) = match with_jobs {
            false => (None, Vec::new()),
            true => match self.jobs_table(&generation).await? {
                (Completed::Files(files), others) => (Some(files), vec![others]),
                // Two batches, not one: joining them would copy every row.
                (Completed::Rows(mut rows), others) => {
                    rows.push(others);
                    (None, rows)
                }
            },
        };
        let with_usage = lower.contains("usage");
        let usage = self.usage_rows(with_usage).await?;
        let with_pairs = lower.contains("whatif_pairs");
        let with_whatif = lower.replace("whatif_pairs", "").contains("whatif");
        let (whatif, pairs) = self
            .replays(with_whatif, with_pairs, started + self.limits.timeout)
            .await?;
        let root = self.columnar.dir().to_path_buf();
        let files = generation.files.each_ref().map(|files| {
            files
                .iter()
                .filter_map(|f| f.strip_prefix(&root).ok())
                .map(|f| f.to_string_lossy().into_owned())
                .collect()
        });
        let mut request = Request {
            sql: sql.to_string(),
            format,
            max_rows: max_rows.min(self.limits.max_rows),
            memory: self.limits.memory,
            max_answer_bytes: self.limits.max_answer_bytes,
            root,
            files,
            with_jobs,
            jobs_files: jobs_files
                .as_ref()
                .map(|f| f.relative())
                .unwrap_or_default(),
            jobs_left_out: (jobs_files.as_ref()).map_or_else(Vec::new, |f| f.left_out.clone()),
            with_usage,
            with_whatif,
            with_pairs,
            cluster: None,
        };
        let mut rows = worker::Rows {
            jobs,
            usage,
            whatif,
            pairs,
        };
        let mut staged = None;
        if let Some(scheduler) = scheduler {
            let (folder, on) = self.stage(&request, rows, scheduler, started).await?;
            (request.with_jobs, request.with_usage) = (false, false);
            request.jobs_files.clear();
            request.jobs_left_out.clear();
            (request.with_whatif, request.with_pairs) = (false, false);
            request.cluster = Some(on);
            rows = worker::Rows::default();
            staged = Some(folder);
        }
        let answer = self.workers.ask(request, rows, started).await?;
        // The generation is held until the worker has read its files: a
        // refresh deletes replaced files only once no query holds them;
        // so is the completed jobs' file; the folder staged for a cluster
        // goes once the answer has.
        let body = answer
            .body
            .map(move |chunk| {
                let _held = (&generation, &jobs_files, &staged);
                chunk
            })
            .boxed();
        Ok(Streaming {
            rows: answer.head.rows,
            truncated: answer.head.truncated,
            bytes: answer.head.bytes,
            body,
        })
    }

    /// The scheduler a query on `engine` (`None`: the default) is
    /// submitted to; `None`: it runs here.
    fn scheduler_for(&self, engine: Option<Engine>) -> Result<Option<String>, SqlError> {
        match engine.unwrap_or(self.default_engine) {
            Engine::Local => Ok(None),
            Engine::Cluster => self.cluster.clone().map(Some).ok_or_else(|| {
                SqlError::BadRequest(
                    "this server has no cluster to run SQL on (--sql-cluster); \
                     ask for the local engine"
                        .into(),
                )
            }),
        }
    }

    /// The `usage` rows when `wanted`: the cluster logs, read (or found
    /// unchanged) off the runtime.
    async fn usage_rows(&self, wanted: bool) -> Result<Vec<RecordBatch>, SqlError> {
        if !wanted {
            return Ok(Vec::new());
        }
        let store = self.store.clone();
        let now = bjh_format::now_millis();
        tokio::task::spawn_blocking(move || tables::usage_batch(&store.cluster(now).intervals))
            .await
            .map(|b| vec![b])
            .map_err(|e| SqlError::Internal(format!("the usage table cannot be built: {e}")))
    }

    /// For the cluster engine: the tables the server holds in memory (and
    /// an empty file for a table with none) written as Parquet into a
    /// folder of this query's own under the columnar folder, readable by
    /// executors as the segments are; the folder goes when the returned
    /// guard does.
    async fn stage(
        &self,
        request: &Request,
        rows: worker::Rows,
        scheduler: String,
        started: tokio::time::Instant,
    ) -> Result<(tempfile::TempDir, cluster::OnCluster), SqlError> {
        let root = request.root.clone();
        let files = request.files.clone();
        let jobs_files = request.jobs_files.clone();
        let staged =
            tokio::task::spawn_blocking(move || cluster::stage(&root, &files, &jobs_files, rows))
                .await
                .map_err(|e| SqlError::Internal(format!("the tables cannot be staged: {e}")))?
                .map_err(|e| SqlError::Internal(format!("the tables cannot be staged: {e}")))?;
        // The worker cancels the job a little before it would be killed.
        let timeout = self.limits.timeout;
        let margin = (timeout / 4).min(Duration::from_secs(2));
        let budget = timeout
            .saturating_sub(started.elapsed())
            .saturating_sub(margin);
        let on = cluster::OnCluster {
            scheduler,
            job_name: cluster::job_name(&request.sql),
            budget_ms: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX).max(1),
            tables: staged.1,
            jobs_left_out: request.jobs_left_out.clone(),
        };
        Ok((staged.0, on))
    }

    /// The `whatif` and `whatif_pairs` tables, as asked: replays worked
    /// out by the server from the logs by `deadline` (the query's time
    /// limit; what was worked out is kept by the source, so asking again
    /// goes further).
    async fn replays(
        &self,
        with_whatif: bool,
        with_pairs: bool,
        deadline: tokio::time::Instant,
    ) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>), SqlError> {
        let slow = |table: &str| {
            SqlError::BadRequest(format!(
                "the {table} table was not worked out within the query's time limit \
                 ({:?}); the replays made so far are kept, so asking again goes further",
                self.limits.timeout
            ))
        };
        let mut whatif = Vec::new();
        if with_whatif {
            let rows = self.source.whatif(self.store.clone());
            let rows = tokio::time::timeout_at(deadline, rows)
                .await
                .map_err(|_| slow("whatif"))??;
            whatif.push(whatif::whatif_batch(&rows));
        }
        let mut pairs = Vec::new();
        if with_pairs {
            let rows = self.source.whatif_pairs(self.store.clone());
            let rows = tokio::time::timeout_at(deadline, rows)
                .await
                .map_err(|_| slow("whatif_pairs"))??;
            pairs.push(whatif::pairs_batch(&rows));
        }
        Ok((whatif, pairs))
    }

    /// Counts a query refused before it was run (its body's type, or a
    /// page of another site asking).
    pub fn refused(&self, outcome: pool::Outcome) {
        self.workers.count(outcome);
    }

    /// [`SqlEngine::query`] decoded, for a page: at most `max_rows` rows.
    pub async fn query_rows(&self, sql: &str, max_rows: usize) -> Result<RowsAnswer, SqlError> {
        self.query_rows_on(sql, max_rows, None).await
    }

    /// [`SqlEngine::query_rows`] on `engine` (`None`: the default).
    pub async fn query_rows_on(
        &self,
        sql: &str,
        max_rows: usize,
        engine: Option<Engine>,
    ) -> Result<RowsAnswer, SqlError> {
        let mut answer = self.query_on(sql, Format::Arrow, max_rows, engine).await?;
        let mut bytes = Vec::with_capacity(answer.bytes);
        while let Some(chunk) = answer.body.next().await {
            bytes.extend_from_slice(&chunk.map_err(|e| SqlError::Internal(e.to_string()))?);
        }
        let internal = |e: datafusion::arrow::error::ArrowError| SqlError::Internal(e.to_string());
        let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(
            std::io::Cursor::new(bytes),
            None,
        )
        .map_err(internal)?;
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>().map_err(internal)?;
        Ok(RowsAnswer {
            schema,
            batches,
            truncated: answer.truncated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoOthers;

    #[async_trait::async_trait]
    impl OtherJobs for NoOthers {
        async fn others(&self, _: &ListQuery) -> Result<bjh_store::query::Page, SqlError> {
            Ok(bjh_store::query::Page {
                rows: Vec::new(),
                total: 0,
            })
        }
    }

    /// A source whose replays never finish.
    struct Stuck;

    #[async_trait::async_trait]
    impl OtherJobs for Stuck {
        async fn others(&self, q: &ListQuery) -> Result<bjh_store::query::Page, SqlError> {
            NoOthers.others(q).await
        }

        async fn whatif(&self, _: Arc<LogStore>) -> Result<Vec<whatif::WhatIfRow>, SqlError> {
            std::future::pending().await
        }

        async fn whatif_pairs(&self, _: Arc<LogStore>) -> Result<Vec<whatif::PairRow>, SqlError> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn replays_that_never_finish_are_cut_at_the_querys_time_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(bjh_store::LogStore::new(
            dir.path().join("logs"),
            Arc::new(bjh_metrics::HistoryMetrics::unregistered()),
        ));
        let limits = SqlLimits {
            timeout: Duration::from_millis(200),
            ..SqlLimits::default()
        };
        let engine = SqlEngine::new(
            Arc::new(Stuck),
            store,
            dir.path().join("columnar"),
            limits,
            "/nonexistent".into(),
            None,
        );
        for (sql, table) in [
            ("SELECT * FROM whatif", "whatif table"),
            ("SELECT * FROM whatif_pairs", "whatif_pairs table"),
        ] {
            let answer =
                tokio::time::timeout(Duration::from_secs(60), engine.query(sql, Format::Json, 10))
                    .await
                    .expect("the query ends at its own limit");
            match answer {
                Err(SqlError::BadRequest(m)) => {
                    assert!(m.contains(table) && m.contains("time limit"), "{m}")
                }
                Err(e) => panic!("{sql}: {e}"),
                Ok(_) => panic!("{sql}: answered"),
            }
        }
    }

    #[test]
    fn the_jobs_rows_are_built_off_the_runtime_that_asks_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(bjh_store::LogStore::new(
            dir.path().join("logs"),
            Arc::new(bjh_metrics::HistoryMetrics::unregistered()),
        ));
        let engine = Arc::new(SqlEngine::new(
            Arc::new(NoOthers),
            store,
            dir.path().join("columnar"),
            SqlLimits::default(),
            "/nonexistent".into(),
            None,
        ));
        // The build cannot finish while this is held.
        let held = engine.kept_jobs.kept.lock();
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
                    let generation = Arc::new(Generation::default());
                    asking
                        .jobs_table(&generation)
                        .await
                        .map(|(completed, _)| matches!(completed, Completed::Files(_)))
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
        // The completed jobs' rows (none), as a file.
        assert!(thread.join().unwrap().unwrap());
    }

    /// The `jobs` rows (as the file and as rows) are the store's jobs,
    /// by id (the columnar index's order, read beside them), built a
    /// batch at a time ([`JOBS_BATCH`] is 3 here: ten jobs are four
    /// batches).
    #[test]
    fn the_jobs_rows_are_built_a_batch_at_a_time_in_the_walks_order() {
        use datafusion::arrow::array::AsArray;
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        // Queued in an order their ids do not follow.
        let queued = |i: u64| 1_000 + (i * 7) % 10;
        let write = |ids: std::ops::Range<u64>| {
            for i in ids {
                let (id, q) = (format!("job-{i}"), queued(i));
                let line = format!(
                    r#"{{"ev":"JobEnd","version":1,"data":{{"status":"Succeeded","queued_at":{q},"started_at":{q},"completed_at":{e},"index":{{"job_id":"{id}","job_name":"n","status":"Completed","job_status":"Completed.","start_time":{q},"end_time":{e},"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{}},"stages":{{}},"config":{{}},"dot":"","dropped_records":0}}}}"#,
                    e = q + 5
                );
                std::fs::write(logs.join(format!("{id}.eventlog")), line + "\n").unwrap();
            }
        };
        // Six moved to segments on disk, four in memory: the walk merges
        // them.
        write(0..6);
        let index = dir.path().join("index");
        let store =
            bjh_store::LogStore::new(&logs, Arc::new(bjh_metrics::HistoryMetrics::unregistered()))
                .with_index_file(Some(index.clone()))
                .with_memory_jobs(Some(5), Some(&index));
        store.rescan();
        write(6..10);
        store.rescan();
        assert_eq!((store.spilled(), store.len()), (6, 10));
        // Queued in another order: by id, not as queued.
        assert!((0..9).any(|i| queued(i) > queued(i + 1)));
        let want: Vec<String> = (0..10).map(|i| format!("job-{i}")).collect();
        let ids = |batches: &[RecordBatch]| -> Vec<String> {
            (batches.iter())
                .flat_map(|b| {
                    let ids = b.column(0).as_string_view();
                    ids.iter()
                        .map(|id| id.unwrap().to_string())
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let generation = Generation::default();
        let rows = completed_rows(&store, &generation);
        assert_eq!(rows.len(), 4);
        assert_eq!(ids(&rows), want);
        let root = dir.path().join("columnar");
        std::fs::create_dir(&root).unwrap();
        let kept = Keeper::default();
        let Completed::Files(files) = completed_jobs(
            &kept,
            &store,
            &Arc::new(generation),
            &|_| None,
            &root,
            &bjh_metrics::HistoryMetrics::unregistered(),
        ) else {
            panic!("rows, not a file");
        };
        let opened = std::fs::File::open(root.join(&files.base.relative)).unwrap();
        let read =
            datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                opened,
            )
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(ids(&read), want);
    }

    #[test]
    fn the_jobs_file_is_kept_while_nothing_changes_and_rows_are_sent_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = bjh_store::LogStore::new(
            dir.path().join("logs"),
            Arc::new(bjh_metrics::HistoryMetrics::unregistered()),
        );
        let root = dir.path().join("columnar");
        std::fs::create_dir(&root).unwrap();
        let kept = Keeper::default();
        let generation = Arc::new(Generation::default());
        let metrics = bjh_metrics::HistoryMetrics::unregistered();
        let file = |g: &Arc<Generation>| match completed_jobs(
            &kept,
            &store,
            g,
            &|_| None,
            &root,
            &metrics,
        ) {
            Completed::Files(f) => f.base.clone(),
            Completed::Rows(_) => panic!("rows, not a file"),
        };
        let first = file(&generation);
        let again = file(&generation);
        assert!(Arc::ptr_eq(&first, &again), "kept while nothing changed");
        // Another generation: built again, the first file kept for the
        // query that holds it, then gone.
        let other = Arc::new(Generation::default());
        let second = file(&other);
        assert_ne!(first.relative, second.relative);
        let first_path = root.join(&first.relative);
        assert!(first_path.is_file());
        drop((first, again));
        assert!(!first_path.exists());
        // Removed under us (another server's sweep): built again.
        std::fs::remove_file(root.join(&second.relative)).unwrap();
        let third = file(&other);
        assert!(third.is_there() && third.relative != second.relative);
        drop((second, third));

        // No file can be written there: the rows, to send.
        let planted = dir.path().join("planted");
        std::fs::create_dir(&planted).unwrap();
        std::os::unix::fs::symlink(dir.path(), planted.join(jobs_file::JOBS_DIR)).unwrap();
        let kept = Keeper::default();
        let rows = completed_jobs(
            &kept,
            &store,
            &generation,
            &|_| None,
            &planted,
            &bjh_metrics::HistoryMetrics::unregistered(),
        );
        assert!(
            matches!(rows, Completed::Rows(b) if b.iter().map(|b| b.num_rows()).sum::<usize>() == 0)
        );
    }
}
