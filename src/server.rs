//! Process assembly: a live scheduler that records (and never forgets), or a
//! history-only server. Both serve on an already-bound listener until a
//! shutdown future resolves.
//!
//! A live scheduler is assembled as upstream's `start_grpc_service` does
//! (gRPC, Flight proxy, REST and health on one port), with three changes:
//! the metrics collector is wrapped by the `EventLogListener`, the gRPC
//! service by the [`TaskTap`], and the job routes are ours, over a
//! `Layered` source, with the scheduler's own router behind them for
//! everything else. Upstream's built-in event-log writer is always off.

use crate::columnar::fresh::Fresh;
use crate::metrics::HistoryMetrics;
use crate::recording::capture::Capturer;
use crate::recording::hold::{HeldJobState, Recorded};
use crate::recording::listener::{EventLogListener, JobEvent, TaskTap};
use crate::recording::redact::Redactor;
use crate::recording::takers::Takers;
use crate::recording::upload::{Bucket, Uploader, lock_spool, running_logs};
use crate::recording::writer::{self, Compression, WriterConfig, WriterMsg};
use crate::serving::headers::{cors, under_our_cors, with_history_headers, with_version_headers};
use crate::serving::live::{LiveApi, grpc_router, health_router};
use crate::serving::source::{DiskSource, JobSource, Layered, LiveSource};
use crate::serving::{PerServer, error::ApiError, openapi, router};
use crate::store::LogStore;
use crate::store::remote::RemoteDir;
use crate::store::retention::{Cleaner, Protect, RetentionPolicy};
use axum::Router;
use axum::response::IntoResponse;
use ballista_core::BALLISTA_VERSION;
use ballista_core::serde::{
    BallistaCodec, BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec,
};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_server::SchedulerServer;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Why a server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The scheduler could not be built or initialized.
    #[error("scheduler: {0}")]
    Scheduler(#[from] ballista_core::error::BallistaError),
    /// Serving failed.
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
    /// A bad option.
    #[error("{0}")]
    Config(String),
    /// `--export-parquet` could not write the tables.
    #[error("export: {0}")]
    Export(String),
}

/// Recording and history options shared by both modes.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// The event-log directory.
    pub event_log_dir: PathBuf,
    /// How often the directory is rescanned; zero pins the list to startup.
    pub update_interval: Duration,
    /// Writer queue capacity (progress messages).
    pub queue_capacity: usize,
    /// Files the writer keeps open at once.
    pub max_open_files: usize,
    /// Config keys to redact.
    pub redactor: Redactor,
    /// How long a `.running` log may go unwritten before its job is listed
    /// as abandoned.
    pub abandoned_after: Duration,
    /// Plain or zstd logs.
    pub compression: Compression,
    /// The cleaner's limits; `None` runs no cleaner.
    pub retention: Option<RetentionPolicy>,
    /// The persistent index file; `None` keeps none.
    pub index_file: Option<PathBuf>,
    /// The bearer token the REST API requires (see [`ApiToken`](crate::ApiToken));
    /// `None` leaves it open, as upstream's is.
    pub api_token: Option<crate::serving::auth::ApiToken>,
    /// The object-store prefix the logs live under, when they are not
    /// local; `event_log_dir` is then the local spool where a recording
    /// scheduler writes logs before uploading them.
    pub remote: Option<RemoteDir>,
    /// The limits of `POST /api/sql`.
    pub sql: crate::serving::sql::SqlLimits,
    /// The bounds of the port: header timeout, connection cap.
    pub http: crate::serving::http::HttpLimits,
    /// Without a token: the host names answered besides addresses,
    /// `localhost` and this machine's name (see `serving::hosts`).
    pub allowed_hosts: Vec<String>,
    /// The executable SQL queries run in (its `main` calls
    /// [`crate::serving::sql::worker::run_if_worker`] first); `None` is
    /// this process's own executable.
    pub sql_worker: Option<PathBuf>,
    /// How many recurring queries (those with the most runs) get series
    /// of their own on `/api/metrics`; 0 exports none.
    pub metrics_top_queries: usize,
    /// The OTLP/gRPC receiver a recording scheduler sends each finished
    /// job's trace to (`crate::traces`); `None` sends none.
    pub otlp_endpoint: Option<String>,
    /// The id a recording scheduler runs under and records in every log
    /// (it replaces `SchedulerConfig::scheduler_id`); `None` keeps one in
    /// the directory (see [`crate::recording::scheduler_id`]).
    pub scheduler_id: Option<String>,
    /// The origins (comma-separated, or `*`) whose pages may read the job
    /// routes across sites (CORS); `None` grants none: upstream's default
    /// list (`http://localhost:8080`, `https://nightlies.apache.org`) is
    /// not granted unless an operator names it.
    pub cors_allowed_origins: Option<String>,
    /// How long a stopping scheduler waits for the jobs it cancels to be
    /// recorded as ended (its connections then have
    /// `http.drain_timeout`).
    pub jobs_end_timeout: Duration,
}

impl HistoryOptions {
    /// Defaults for `dir`: rescans every 10 s.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let defaults = WriterConfig::new("");
        let dir = dir.into();
        Self {
            index_file: Some(dir.join(crate::store::snapshot::DEFAULT_FILE_NAME)),
            event_log_dir: dir,
            update_interval: Duration::from_secs(10),
            queue_capacity: defaults.queue_capacity,
            max_open_files: defaults.max_open_files,
            redactor: Redactor::default(),
            abandoned_after: crate::store::DEFAULT_ABANDONED_AFTER,
            compression: Compression::None,
            retention: None,
            api_token: None,
            remote: None,
            sql: crate::serving::sql::SqlLimits::default(),
            sql_worker: None,
            http: crate::serving::http::HttpLimits::default(),
            allowed_hosts: Vec::new(),
            metrics_top_queries: crate::serving::job_metrics::DEFAULT_TOP_QUERIES,
            otlp_endpoint: None,
            scheduler_id: None,
            cors_allowed_origins: None,
            jobs_end_timeout: Duration::from_secs(10),
        }
    }

    /// Where the columnar history lives: beside the persistent index (in
    /// the directory, or the spool for an object store); `None` without
    /// one, when it is kept in a private folder of this process's own (a
    /// fresh random name under the system's temporary directory).
    pub fn columnar_dir(&self) -> Option<PathBuf> {
        self.index_file
            .as_ref()
            .and_then(|p| p.parent())
            .map(|parent| parent.join(COLUMNAR_DIR))
    }

    /// The SQL engine over `source`; on a recording scheduler, `fresh`
    /// holds the jobs the writer hands over.
    fn sql_engine(
        &self,
        source: Arc<dyn JobSource>,
        store: Arc<LogStore>,
        fresh: Option<Arc<Fresh>>,
    ) -> Arc<crate::serving::sql::SqlEngine> {
        let worker = self.sql_worker.clone().unwrap_or_else(|| {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
        });
        Arc::new(crate::serving::sql::SqlEngine::new(
            source,
            store,
            self.columnar_dir(),
            self.sql,
            worker,
            fresh,
        ))
    }

    /// Defaults for logs under an object-store prefix, with `spool` as the
    /// local directory for logs being written and not yet uploaded (and for
    /// the persistent index).
    pub fn remote(remote: RemoteDir, spool: impl Into<PathBuf>) -> Self {
        let mut options = Self::new(spool);
        options.remote = Some(remote);
        options
    }

    /// Where the logs are, for messages.
    fn shown(&self) -> String {
        match &self.remote {
            Some(remote) => format!("{} (spool {})", remote.url(), self.event_log_dir.display()),
            None => self.event_log_dir.display().to_string(),
        }
    }

    /// The index over the logs, local or remote.
    /// (`abandoned_after` applies to local logs: an unfinished object is
    /// always a leftover, see [`LogStore::remote`].)
    fn store(&self, metrics: Arc<HistoryMetrics>) -> LogStore {
        match &self.remote {
            Some(remote) => LogStore::remote(remote.clone(), metrics),
            None => LogStore::new(&self.event_log_dir, metrics)
                .with_abandoned_after(self.abandoned_after),
        }
        .with_index_file(self.index_file.clone())
    }
}

/// The spool a recording scheduler on port `port` uses for an object
/// store when none is named: `ballista-job-history-spool/<port>` under
/// the system's temporary directory, created private (`0700`); refused
/// when a level of it exists with another owner, as a link, or open to
/// others (another local user could read every log, or feed the uploader
/// files of their choosing).
pub fn default_spool(port: u16) -> Result<PathBuf, ServerError> {
    let shared = std::env::temp_dir();
    let spool = shared
        .join(crate::recording::upload::DEFAULT_SPOOL_DIR)
        .join(port.to_string());
    crate::files::private_dir(&shared, &spool)
        .map_err(|e| ServerError::Config(format!("{e} (or name one with --event-log-spool)")))?;
    Ok(spool)
}

/// The name of the columnar history's folder.
pub use crate::columnar::shared::FOLDER as COLUMNAR_DIR;

/// The one-shot export of `--history-only --export-parquet OUT`: indexes
/// the logs, brings the columnar history up to date and writes the four
/// tables under `out` (`docs/sql.md`); says what it wrote.
pub async fn export_parquet(options: HistoryOptions, out: &Path) -> Result<String, ServerError> {
    let metrics = HistoryMetrics::global();
    if options.remote.is_some() {
        let _ = std::fs::create_dir_all(&options.event_log_dir);
    }
    let store = Arc::new(options.store(metrics));
    let scan_store = store.clone();
    tokio::task::spawn_blocking(move || scan_store.rescan())
        .await
        .map_err(|e| ServerError::Export(e.to_string()))?;
    let source: Arc<dyn JobSource> = Arc::new(DiskSource::new(store.clone()));
    let engine = options.sql_engine(source, store, None);
    engine
        .export(out)
        .await
        .map_err(|e| ServerError::Export(e.to_string()))
}

/// The one-shot of `--history-only --export-otlp`: indexes the logs and
/// sends every completed job's trace to `endpoint` (OTLP over gRPC); says
/// how many.
pub async fn export_otlp(options: HistoryOptions, endpoint: &str) -> Result<String, ServerError> {
    if options.remote.is_some() {
        let _ = std::fs::create_dir_all(&options.event_log_dir);
    }
    let store = Arc::new(options.store(HistoryMetrics::global()));
    let scan_store = store.clone();
    tokio::task::spawn_blocking(move || scan_store.rescan())
        .await
        .map_err(|e| ServerError::Export(e.to_string()))?;
    crate::traces::exporter::export_store(store, endpoint)
        .await
        .map_err(ServerError::Export)
}

/// A broadcast "stop" for the background tasks of a server.
#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    fn new() -> (tokio::sync::watch::Sender<bool>, Self) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Self(rx))
    }

    /// Resolves once the server stops.
    fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }
}

/// The recording half of a live scheduler, from the writer thread's start
/// until its tasks are spawned.
struct Recording {
    writer: writer::WriterHandle,
    thread: std::thread::JoinHandle<()>,
    events_tx: tokio::sync::mpsc::UnboundedSender<JobEvent>,
    events_rx: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    metrics: Arc<HistoryMetrics>,
    /// Each log the writer completes: for a directory, taken into the
    /// catalog at once; for an object store, uploaded.
    completed: tokio::sync::mpsc::UnboundedReceiver<PathBuf>,
    /// For an object store: unfinished logs an earlier run left in the
    /// spool.
    orphans: Vec<PathBuf>,
    /// The jobs the writer hands to the SQL tables.
    fresh: Arc<Fresh>,
    /// With an OTLP receiver: what sends the jobs' traces.
    traces: Option<crate::traces::exporter::TraceSender>,
}

impl Recording {
    /// Starts the writer thread over the directory (or spool), and the
    /// channel from the listener to the capturer.
    fn start(options: &HistoryOptions) -> Result<Self, ServerError> {
        // Created now so a newcomer sees it; a failure is not fatal (the
        // writer retries per job and counts its errors).
        if let Err(e) = std::fs::create_dir_all(&options.event_log_dir) {
            log::error!(
                "event log: cannot create {}: {e}; jobs run but are not recorded until it can be",
                options.event_log_dir.display()
            );
        }
        let metrics = HistoryMetrics::global();
        let mut wc = WriterConfig::new(&options.event_log_dir);
        wc.queue_capacity = options.queue_capacity;
        wc.max_open_files = options.max_open_files;
        wc.compression = options.compression;
        // Each completed log is taken into the catalog at once (a local
        // directory) or uploaded (an object store: logs are written to the
        // spool first). Unfinished logs already in a spool were left by a
        // run that died: they are uploaded too, to be listed as abandoned.
        // One path per completed job, taken as it comes.
        #[allow(clippy::disallowed_methods)]
        let (tx, completed) = tokio::sync::mpsc::unbounded_channel();
        wc.completed = Some(tx);
        // Once SQL is in use, each completed job's records go to the
        // columnar history as well, so its log is not read again.
        // And, with an OTLP receiver, to the trace exporter.
        let fresh = Arc::new(Fresh::new());
        let traces = match &options.otlp_endpoint {
            Some(endpoint) => Some(
                crate::traces::exporter::queue(endpoint, metrics.clone())
                    .map_err(ServerError::Config)?,
            ),
            None => None,
        };
        wc.written = Some(match &traces {
            Some((queue, _)) => Arc::new(Takers(vec![fresh.clone(), queue.clone()])),
            None => fresh.clone(),
        });
        let orphans = match options.remote {
            Some(_) => running_logs(&options.event_log_dir),
            None => Vec::new(),
        };
        let (writer, thread) = writer::spawn(wc, metrics.clone())?;
        // Two events per job; the listener is called on the scheduler's
        // event loop and must never wait (DESIGN.md, invariant 1).
        #[allow(clippy::disallowed_methods)]
        let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok(Self {
            writer,
            thread,
            events_tx,
            events_rx,
            metrics,
            completed,
            orphans,
            fresh,
            traces: traces.map(|(_, sender)| sender),
        })
    }

    /// Spawns the capturer, the uploader, the rescans and the cleaner, and
    /// gives the source that serves live answers first, then the logs.
    fn spawn(
        self,
        options: &HistoryOptions,
        api: &LiveApi,
        stop: &Stop,
        background: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> (Arc<dyn JobSource>, Arc<LogStore>, TaskTap, WriterParts) {
        let Recording {
            writer,
            thread,
            events_rx,
            metrics,
            completed,
            orphans,
            traces,
            ..
        } = self;
        if let Some(traces) = traces {
            background.push(tokio::spawn(traces.run(stop.stopped())));
        }
        let capturer = Capturer {
            api: Arc::new(api.clone()),
            writer: writer.clone(),
            redactor: options.redactor.clone(),
        };
        background.push(tokio::spawn(capturer.run(events_rx, stop.stopped())));
        let store = Arc::new(options.store(metrics.clone()));
        match &options.remote {
            Some(remote) => {
                let (client, prefix) = remote.client();
                let bucket = Bucket::new(client, prefix, remote.url());
                let uploaded = store.clone();
                let uploader = Uploader::new(bucket, &options.event_log_dir, metrics.clone())
                    .with_orphans(orphans)
                    .telling(Arc::new(move |name: String| {
                        let store = uploaded.clone();
                        tokio::task::spawn_blocking(move || store.take_in_object(&name));
                    }));
                background.push(tokio::spawn(uploader.run(completed, stop.stopped())));
            }
            None => background.push(tokio::spawn(
                store.clone().take_in_completed(completed, stop.stopped()),
            )),
        }
        background.push(tokio::spawn(
            store
                .clone()
                .rescan_every(options.update_interval, stop.stopped()),
        ));
        if let Some(policy) = &options.retention {
            let open = writer.clone();
            let protect: Protect = Arc::new(move |id: &str| open.is_open(id));
            let cleaner = Cleaner::new(store.clone(), policy.clone(), Some(protect), metrics);
            background.push(tokio::spawn(cleaner.run(stop.stopped())));
        }
        let source = Arc::new(Layered::new(
            LiveSource::new(api.clone()),
            DiskSource::new(store.clone()),
        ));
        let tap = TaskTap::new(writer.clone());
        (source, store, tap, (writer, thread))
    }
}

/// The writer's handle and thread, kept to drain it on shutdown.
type WriterParts = (writer::WriterHandle, std::thread::JoinHandle<()>);

/// The plan codecs of the scheduler: its config's overrides, else
/// Ballista's defaults.
fn codec(config: &SchedulerConfig) -> BallistaCodec {
    let logical = config
        .override_logical_codec
        .clone()
        .unwrap_or_else(|| Arc::new(BallistaLogicalExtensionCodec::default()));
    let physical = config
        .override_physical_codec
        .clone()
        .unwrap_or_else(|| Arc::new(BallistaPhysicalExtensionCodec::default()));
    BallistaCodec::new(logical, physical)
}

/// Runs a full scheduler on `listener` until `shutdown` resolves. With
/// `history`, every job is recorded to its directory and finished jobs stay
/// visible from there; without it the scheduler behaves as upstream's.
///
/// On shutdown (recording): the jobs still queued or running are
/// cancelled and recorded as cancelled (waiting at most
/// `jobs_end_timeout`), every stream the server serves ends, the
/// connections have `http.drain_timeout` to finish and are then closed,
/// and the writer's queue is drained and flushed before this returns.
pub async fn run_scheduler(
    listener: TcpListener,
    mut config: SchedulerConfig,
    history: Option<HistoryOptions>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    // Our writer records jobs; upstream's must not record them a second time.
    config.event_log_dir = None;
    // One scheduler per spool (held until this function returns).
    let spooled = history.as_ref().filter(|h| h.remote.is_some());
    let _spool = spooled.map(|h| lock_spool(&h.event_log_dir)).transpose();
    let _spool = _spool.map_err(ServerError::Config)?;
    // Recording, the scheduler's id is the one its logs record: given, or
    // kept in the directory across restarts.
    if let Some(h) = &history {
        let id = h.scheduler_id.as_deref();
        config.scheduler_id = crate::recording::scheduler_id::resolve(id, &h.event_log_dir)
            .map_err(ServerError::Config)?;
    }
    let (scheduler, recording, recorded, config) =
        start_scheduler(config, history.as_ref()).await?;
    let api = LiveApi::new(scheduler.clone());
    let parts = LiveParts {
        scheduler: scheduler.clone(),
        config: config.clone(),
        api: api.clone(),
    };

    let (stop_tx, stop) = Stop::new();
    let mut background = Vec::new();
    let fresh = recording.as_ref().map(|r| r.fresh.clone());
    let (source, tap, writer_parts) = match (&history, recording) {
        (Some(options), Some(recording)) => {
            let (source, store, tap, parts) =
                recording.spawn(options, &parts.api, &stop, &mut background);
            let held = store.clone();
            let _ = recorded.set(Arc::new(move |id: &str| held.contains(id)));
            (Some((source, store)), Some(tap), Some(parts))
        }
        _ => (None, None, None),
    };
    let sql = match (&history, &source) {
        (Some(options), Some((source, store))) => {
            let engine = options.sql_engine(source.clone(), store.clone(), fresh.clone());
            let fresh = engine
                .clone()
                .keep_fresh(options.update_interval, stop.stopped());
            background.push(tokio::spawn(fresh));
            Some(engine)
        }
        _ => None,
    };
    let per_server = PerServer::new(
        source.as_ref().map(|(_, store)| store),
        history.as_ref().map_or(0, |h| h.metrics_top_queries),
    );
    let router = protected(
        live_router(parts, source, tap, history.as_ref(), sql, &per_server),
        history.as_ref(),
    );
    // Recording, a stop first ends the jobs under way, so their logs end
    // with a terminal record rather than as abandoned `.running` files.
    let shutdown = {
        let wait = history.as_ref().map(|h| h.jobs_end_timeout);
        async move {
            shutdown.await;
            if let Some(wait) = wait {
                let ended = api.cancel_unfinished(wait).await;
                if ended > 0 {
                    log::info!("stopping: cancelled {ended} jobs under way; recording them");
                }
            }
        }
    };
    let served = serve(
        listener,
        router,
        history.as_ref(),
        per_server.stopping,
        shutdown,
    )
    .await;
    let _ = stop_tx.send(true);
    for task in background {
        let _ = task.await;
    }
    if let Some((writer, thread)) = writer_parts {
        writer.send(WriterMsg::Shutdown);
        drop(writer);
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
    served.map_err(ServerError::from)
}

/// The scheduler of `config`, started; recording (with `history`), its
/// collector wrapped by the listener, its job state by the hold, and the
/// recording half started.
async fn start_scheduler(
    config: SchedulerConfig,
    history: Option<&HistoryOptions>,
) -> Result<
    (
        Arc<Scheduler>,
        Option<Recording>,
        Arc<std::sync::OnceLock<Recorded>>,
        Arc<SchedulerConfig>,
    ),
    ServerError,
> {
    config.validate()?;
    let cluster = BallistaCluster::new_from_config(&config).await?;
    // Recording, a finished job is forgotten only once its log is stored.
    let recorded = Arc::new(std::sync::OnceLock::<Recorded>::new());
    let cluster = match history {
        Some(_) => BallistaCluster::new(
            cluster.cluster_state(),
            Arc::new(HeldJobState::new(cluster.job_state(), recorded.clone())),
        ),
        None => cluster,
    };
    let config = Arc::new(config);
    let default_collector = ballista_scheduler::metrics::default_metrics_collector()?;
    let recording = history.map(Recording::start).transpose()?;
    let collector: Arc<dyn ballista_scheduler::metrics::SchedulerMetricsCollector> =
        match &recording {
            Some(r) => Arc::new(EventLogListener::new(
                default_collector,
                r.events_tx.clone(),
            )),
            None => default_collector,
        };
    let mut scheduler = SchedulerServer::new(
        config.scheduler_endpoint(),
        cluster,
        codec(&config),
        config.clone(),
        collector,
    );
    scheduler.init().await?;
    Ok((Arc::new(scheduler), recording, recorded, config))
}

/// `router` behind the token, when there is one, else (recording) behind
/// the allowed hosts.
fn protected(router: Router, history: Option<&HistoryOptions>) -> Router {
    let token = history.and_then(|h| h.api_token.clone());
    let router = crate::serving::auth::protect(router, token.clone());
    match history {
        Some(h) if token.is_none() => crate::serving::hosts::guard(
            router,
            crate::serving::hosts::AllowedHosts::new(&h.allowed_hosts),
        ),
        _ => router,
    }
}

/// Serves `router` on `listener` until `shutdown`: with a log directory
/// through our connection limits (ending the streams of `stopping`),
/// without one as upstream serves it.
async fn serve(
    listener: TcpListener,
    router: Router,
    history: Option<&HistoryOptions>,
    stopping: tokio_util::sync::CancellationToken,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    log::info!(
        "Ballista scheduler v{BALLISTA_VERSION} listening on {:?}{}",
        listener.local_addr().ok(),
        match history {
            Some(h) => format!(", recording jobs to {}", h.shown()),
            None => String::new(),
        }
    );
    match history {
        Some(h) => {
            let refused = HistoryMetrics::global().connections_refused.clone();
            crate::serving::http::serve(listener, router, h.http, refused, stopping, shutdown).await
        }
        None => {
            let service = router.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, service)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// The running scheduler, its configuration and its REST adapter.
struct LiveParts {
    scheduler: Arc<Scheduler>,
    config: Arc<SchedulerConfig>,
    api: LiveApi,
}

type Scheduler = SchedulerServer<
    datafusion_proto::protobuf::LogicalPlanNode,
    datafusion_proto::protobuf::PhysicalPlanNode,
>;

fn live_router(
    parts: LiveParts,
    source: Option<(Arc<dyn JobSource>, Arc<LogStore>)>,
    tap: Option<TaskTap>,
    history: Option<&HistoryOptions>,
    sql: Option<Arc<crate::serving::sql::SqlEngine>>,
    per_server: &PerServer,
) -> Router {
    let LiveParts {
        scheduler,
        config,
        api,
    } = parts;
    let config = &config;
    let grpc = grpc_router(&scheduler, config, tap);
    let health = health_router(scheduler.clone());
    let our_cors = || {
        cors(
            history.and_then(|h| h.cors_allowed_origins.as_deref()),
            config,
        )
    };

    // Unmatched requests fall through: our job routes (when recording) and
    // health first, then the scheduler's own REST routes, then gRPC, then a
    // JSON 404. Without a source, every /api answer is the scheduler's own.
    let grpc = grpc.fallback(|| async { ApiError::NotFound });
    let recording = source.is_some();
    let front = match source {
        _ if config.disable_rest_api => health.route(
            "/api/{*path}",
            axum::routing::any(|| async {
                ApiError::Missing("REST API has been disabled at startup".into()).into_response()
            }),
        ),
        Some((source, store)) => router::job_routes(source.clone(), Some(store.clone()))
            .merge(openapi::routes(openapi::Mode::Live))
            .merge(router::metrics_route(per_server.gauges.clone()))
            .layer(our_cors())
            // Outside the CORS layer: no origin is granted SQL or the tools.
            .merge(crate::serving::mcp::over(
                source.clone(),
                store.clone(),
                sql.clone(),
            ))
            .merge(
                sql.clone()
                    .map(crate::serving::sql::route::routes)
                    .unwrap_or_default(),
            )
            .merge(health)
            .merge(crate::serving::ui::routes(crate::serving::ui::Ui {
                source,
                store: Some(store),
                live: true,
                scheduler_id: scheduler.scheduler_id.clone(),
                token: history.and_then(|h| h.api_token.clone()),
                sql,
                hub: per_server.hub.clone(),
            })),
        None => health,
    };
    let behind = match (config.disable_rest_api, recording) {
        (true, _) => grpc,
        // Recording, upstream's routes answer under our CORS policy.
        (false, true) => under_our_cors(api.router(), our_cors()).fallback_service(grpc),
        (false, false) => api.router().fallback_service(grpc),
    };
    let router = with_version_headers(front.fallback_service(behind));
    // Without a log directory, every answer is upstream's own.
    if recording {
        with_history_headers(router)
    } else {
        router
    }
}

/// What a history-only server answers over `store`: the job routes, state,
/// version, executors (none), metrics, health, the web pages and, with an
/// `sql` engine, `POST /api/sql`, behind `token` when there is one. [`run_history`] serves it; an embedding
/// process may serve it itself.
pub fn history_router(
    store: Arc<LogStore>,
    token: Option<crate::serving::auth::ApiToken>,
    sql: Option<Arc<crate::serving::sql::SqlEngine>>,
) -> Router {
    let per_server = PerServer::new(
        Some(&store),
        crate::serving::job_metrics::DEFAULT_TOP_QUERIES,
    );
    history_router_with(store, token, sql, None, &per_server)
}

/// [`history_router`], granting `cors_origins` (none without) and with
/// the shares of `per_server`.
fn history_router_with(
    store: Arc<LogStore>,
    token: Option<crate::serving::auth::ApiToken>,
    sql: Option<Arc<crate::serving::sql::SqlEngine>>,
    cors_origins: Option<&str>,
    per_server: &PerServer,
) -> Router {
    let started = u128::from(crate::format::now_millis());
    let ready_store = store.clone();
    let source: Arc<dyn JobSource> = Arc::new(DiskSource::new(store.clone()));
    let mcp = crate::serving::mcp::over(source.clone(), store.clone(), sql.clone());
    let router = router::job_routes(source.clone(), Some(store.clone()))
        .merge(router::history_routes(
            started,
            Arc::new(move || ready_store.is_ready()),
        ))
        .merge(router::metrics_route(per_server.gauges.clone()))
        .merge(openapi::routes(openapi::Mode::History))
        .layer(cors(cors_origins, &SchedulerConfig::default()))
        // Outside the CORS layer: no origin is granted SQL or the tools.
        .merge(mcp)
        .merge(
            sql.clone()
                .map(crate::serving::sql::route::routes)
                .unwrap_or_default(),
        )
        .merge(crate::serving::ui::routes(crate::serving::ui::Ui {
            source,
            store: Some(store),
            live: false,
            scheduler_id: "history-server".into(),
            token: token.clone(),
            sql,
            hub: per_server.hub.clone(),
        }));
    crate::serving::auth::protect(with_history_headers(with_version_headers(router)), token)
}

/// Runs a history-only server on `listener` until `shutdown` resolves: the
/// job routes over the directory, plus state, version, executors (none),
/// metrics and health. No cluster, no gRPC. On shutdown every stream
/// ends, and connections have `http.drain_timeout` to finish.
pub async fn run_history(
    listener: TcpListener,
    options: HistoryOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let metrics = HistoryMetrics::global();
    if options.remote.is_some() {
        // The local directory holds the persistent index of the store.
        let _ = std::fs::create_dir_all(&options.event_log_dir);
    }
    let store = Arc::new(options.store(metrics.clone()));
    let per_server = PerServer::new(Some(&store), options.metrics_top_queries);
    let (stop_tx, stop) = Stop::new();
    let mut background = vec![tokio::spawn(
        store
            .clone()
            .rescan_every(options.update_interval, stop.stopped()),
    )];
    if let Some(policy) = &options.retention {
        let cleaner = Cleaner::new(store.clone(), policy.clone(), None, metrics);
        background.push(tokio::spawn(cleaner.run(stop.stopped())));
    }
    let sql = options.sql_engine(
        Arc::new(DiskSource::new(store.clone())),
        store.clone(),
        None,
    );
    background.push(tokio::spawn(
        sql.clone()
            .keep_fresh(options.update_interval, stop.stopped()),
    ));
    let mut router = history_router_with(
        store,
        options.api_token.clone(),
        Some(sql),
        options.cors_allowed_origins.as_deref(),
        &per_server,
    );
    if options.api_token.is_none() {
        router = crate::serving::hosts::guard(
            router,
            crate::serving::hosts::AllowedHosts::new(&options.allowed_hosts),
        );
    }
    log::info!(
        "Ballista job history server listening on {:?}, serving {}",
        listener.local_addr().ok(),
        options.shown()
    );
    let served = crate::serving::http::serve(
        listener,
        router,
        options.http,
        HistoryMetrics::global().connections_refused.clone(),
        per_server.stopping,
        shutdown,
    )
    .await;
    let _ = stop_tx.send(true);
    for task in background {
        let _ = task.await;
    }
    served.map_err(ServerError::from)
}
