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

use crate::plugin::{JobHistory, Stop};
use axum::Router;
use axum::response::IntoResponse;
use ballista_core::BALLISTA_VERSION;
use ballista_core::serde::{
    BallistaCodec, BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec,
};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_server::SchedulerServer;
use bjh_columnar::fresh::Fresh;
use bjh_metrics::HistoryMetrics;
use bjh_recording::listener::TaskTap;
use bjh_recording::redact::Redactor;
use bjh_recording::writer::{Compression, WriterConfig};
use bjh_serving::headers::{cors, under_our_cors, with_history_headers, with_version_headers};
use bjh_serving::live::{LiveApi, Scheduler, grpc_router, health_router};
use bjh_serving::source::{DiskSource, JobSource};
use bjh_serving::{PerServer, error::ApiError, openapi, router};
use bjh_store::LogStore;
use bjh_store::remote::RemoteDir;
use bjh_store::retention::{Cleaner, RetentionPolicy};
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
    /// Listing pages of 1,000 names a rescan of an object-store prefix
    /// reads (`bjh_store::published`); 0: the whole prefix.
    pub listing_pages: usize,
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
    /// How many completed jobs the history keeps in memory before moving
    /// them to summary segments on disk beside the persistent index
    /// (`<index>.segments/`); `None` keeps every job in memory. Needs
    /// `index_file`.
    pub memory_jobs: Option<usize>,
    /// The bearer token the REST API requires (see [`ApiToken`](crate::ApiToken));
    /// `None` leaves it open, as upstream's is.
    pub api_token: Option<bjh_serving::auth::ApiToken>,
    /// The object-store prefix the logs live under, when they are not
    /// local; `event_log_dir` is then the local spool where a recording
    /// scheduler writes logs before uploading them.
    pub remote: Option<RemoteDir>,
    /// The limits of `POST /api/sql`.
    pub sql: bjh_sql::SqlLimits,
    /// The bounds of the port: header timeout, connection cap.
    pub http: bjh_serving::http::HttpLimits,
    /// Without a token: the host names answered besides addresses,
    /// `localhost` and this machine's name (see `serving::hosts`).
    pub allowed_hosts: Vec<String>,
    /// The executable SQL queries run in (its `main` calls
    /// [`bjh_sql::worker::run_if_worker`] first); `None` is
    /// this process's own executable.
    pub sql_worker: Option<PathBuf>,
    /// How many recurring queries (those with the most runs) get series
    /// of their own on `/api/metrics`; 0 exports none.
    pub metrics_top_queries: usize,
    /// The price of one task-slot hour, for the costs of `/api/usage`
    /// and the Usage page; `None` shows none.
    pub slot_hour_price: Option<f64>,
    /// Session-config keys whose values a recording scheduler states in
    /// each job's footer as its usage tags (`/api/usage?group_by=tag`); a
    /// key the redaction pattern matches is refused.
    pub usage_tags: Vec<String>,
    /// The OTLP/gRPC receiver a recording scheduler sends each finished
    /// job's trace to (`bjh_traces`); `None` sends none.
    pub otlp_endpoint: Option<String>,
    /// The id a recording scheduler runs under and records in every log
    /// (it replaces `SchedulerConfig::scheduler_id`); `None` keeps one in
    /// the directory (see [`bjh_recording::scheduler_id`]).
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
    /// The scheduler `POST /api/sql`'s cluster engine submits jobs to
    /// (`df://host:port`); `None` on a recording scheduler is the
    /// scheduler itself, and on a history server no cluster.
    pub sql_cluster: Option<String>,
    /// The engine a query that names none runs on.
    pub sql_engine: bjh_sql::Engine,
}

impl HistoryOptions {
    /// How the usage routes price slot time.
    pub fn usage_settings(&self) -> bjh_serving::usage::UsageSettings {
        bjh_serving::usage::UsageSettings {
            slot_hour_price: self.slot_hour_price,
        }
    }

    /// Defaults for `dir`: rescans every 10 s.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let defaults = WriterConfig::new("");
        let dir = dir.into();
        Self {
            index_file: Some(dir.join(bjh_store::snapshot::DEFAULT_FILE_NAME)),
            memory_jobs: None,
            event_log_dir: dir,
            update_interval: Duration::from_secs(10),
            listing_pages: bjh_store::published::DEFAULT_LISTING_PAGES,
            queue_capacity: defaults.queue_capacity,
            max_open_files: defaults.max_open_files,
            redactor: Redactor::default(),
            abandoned_after: bjh_store::DEFAULT_ABANDONED_AFTER,
            compression: Compression::None,
            retention: None,
            api_token: None,
            remote: None,
            sql: bjh_sql::SqlLimits::default(),
            sql_worker: None,
            http: bjh_serving::http::HttpLimits::default(),
            allowed_hosts: Vec::new(),
            metrics_top_queries: bjh_serving::job_metrics::DEFAULT_TOP_QUERIES,
            slot_hour_price: None,
            usage_tags: Vec::new(),
            otlp_endpoint: None,
            scheduler_id: None,
            cors_allowed_origins: None,
            jobs_end_timeout: Duration::from_secs(10),
            sql_cluster: None,
            sql_engine: bjh_sql::Engine::Local,
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
    pub(crate) fn sql_engine(
        &self,
        source: Arc<dyn JobSource>,
        store: Arc<LogStore>,
        fresh: Option<Arc<Fresh>>,
    ) -> Arc<bjh_sql::SqlEngine> {
        let worker = self.sql_worker.clone().unwrap_or_else(|| {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
        });
        let mut engine = bjh_sql::SqlEngine::new(
            Arc::new(bjh_serving::source::OthersOf::new(source)),
            store,
            self.columnar_dir(),
            self.sql,
            worker,
            fresh,
        );
        // Checked when the server started (`check_sql_cluster`).
        if let Err(e) = engine.with_cluster(self.sql_cluster.as_deref(), self.sql_engine) {
            log::warn!("history: SQL on a cluster is off: {e}");
        }
        Arc::new(engine)
    }

    /// Whether the SQL engines' settings hold together: the cluster is
    /// a scheduler's address, and the cluster engine as the default has
    /// one.
    pub(crate) fn check_sql_cluster(&self) -> Result<(), ServerError> {
        bjh_sql::cluster::setting(self.sql_cluster.as_deref(), self.sql_engine)
            .map(drop)
            .map_err(|e| ServerError::Config(format!("--sql-cluster/--sql-engine: {e}")))
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
    pub(crate) fn shown(&self) -> String {
        match &self.remote {
            Some(remote) => format!("{} (spool {})", remote.url(), self.event_log_dir.display()),
            None => self.event_log_dir.display().to_string(),
        }
    }

    /// The index over the logs, local or remote.
    /// (`abandoned_after` applies to local logs: an unfinished object is
    /// always a leftover, see [`LogStore::remote`].)
    pub(crate) fn store(&self, metrics: Arc<HistoryMetrics>) -> LogStore {
        match &self.remote {
            Some(remote) => LogStore::remote(remote.clone(), metrics),
            None => LogStore::new(&self.event_log_dir, metrics)
                .with_abandoned_after(self.abandoned_after),
        }
        .with_index_file(self.index_file.clone())
        .with_listing_pages(self.listing_pages)
        .with_memory_jobs(self.memory_jobs, self.index_file.as_deref())
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
        .join(bjh_recording::upload::DEFAULT_SPOOL_DIR)
        .join(port.to_string());
    bjh_files::private_dir(&shared, &spool)
        .map_err(|e| ServerError::Config(format!("{e} (or name one with --event-log-spool)")))?;
    Ok(spool)
}

/// The name of the columnar history's folder.
pub use bjh_columnar::shared::FOLDER as COLUMNAR_DIR;

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
    bjh_traces::exporter::export_store(store, endpoint)
        .await
        .map_err(ServerError::Export)
}

/// Runs a full scheduler on `listener` until `shutdown` resolves. With
/// `history`, every job is recorded to its directory and finished jobs stay
/// visible from there (through [`JobHistory`], as an embedding scheduler
/// would); without it the scheduler behaves as upstream's.
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
    let Some(options) = history else {
        // Upstream's scheduler, answer for answer.
        config.event_log_dir = None;
        config.validate()?;
        let cluster = BallistaCluster::new_from_config(&config).await?;
        let collector = ballista_scheduler::metrics::default_metrics_collector()?;
        let config = Arc::new(config);
        let scheduler = init(cluster, collector, config.clone()).await?;
        let api = LiveApi::new(scheduler.clone());
        let router = live_router(
            &scheduler,
            &config,
            &api,
            None,
            None,
            None,
            None,
            &PerServer::new(None, 0),
        );
        return serve(listener, router, None, Default::default(), shutdown)
            .await
            .map_err(ServerError::from);
    };
    let history = JobHistory::new(options, &mut config)?;
    config.validate()?;
    let cluster = history.cluster(BallistaCluster::new_from_config(&config).await?);
    let collector = history.collector(ballista_scheduler::metrics::default_metrics_collector()?);
    let config = Arc::new(config);
    let scheduler = init(cluster, collector, config.clone()).await?;
    history
        .start(scheduler, config)
        .serve(listener, shutdown)
        .await
}

/// The scheduler over `cluster`, built with Ballista's codecs (or the
/// config's overrides) and initialized.
async fn init(
    cluster: BallistaCluster,
    collector: Arc<dyn ballista_scheduler::metrics::SchedulerMetricsCollector>,
    config: Arc<SchedulerConfig>,
) -> Result<Arc<Scheduler>, ServerError> {
    let mut scheduler = SchedulerServer::new(
        config.scheduler_endpoint(),
        cluster,
        codec(&config),
        config.clone(),
        collector,
    );
    scheduler.init().await?;
    Ok(Arc::new(scheduler))
}

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

/// `router` behind the token, when there is one, else (recording) behind
/// the allowed hosts.
pub(crate) fn protected(router: Router, history: Option<&HistoryOptions>) -> Router {
    let token = history.and_then(|h| h.api_token.clone());
    let router = bjh_serving::auth::protect(router, token.clone());
    match history {
        Some(h) if token.is_none() => bjh_serving::hosts::guard(
            router,
            bjh_serving::hosts::AllowedHosts::new(&h.allowed_hosts),
        ),
        _ => router,
    }
}

/// Serves `router` on `listener` until `shutdown`: with a log directory
/// through our connection limits (ending the streams of `stopping`),
/// without one as upstream serves it.
pub(crate) async fn serve(
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
            bjh_serving::http::serve(listener, router, h.http, refused, stopping, shutdown).await
        }
        None => {
            let service = router.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, service)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// The port's router on a live scheduler: with a `source` (recording),
/// our job routes, pages, SQL, MCP and metrics before the scheduler's own
/// REST routes and gRPC; without one, upstream's answers alone.
#[allow(clippy::too_many_arguments)]
pub(crate) fn live_router(
    scheduler: &Arc<Scheduler>,
    config: &Arc<SchedulerConfig>,
    api: &LiveApi,
    source: Option<(Arc<dyn JobSource>, Arc<LogStore>)>,
    tap: Option<TaskTap>,
    history: Option<&HistoryOptions>,
    sql: Option<Arc<bjh_sql::SqlEngine>>,
    per_server: &PerServer,
) -> Router {
    let grpc = grpc_router(scheduler, config, tap);
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
        Some((source, store)) => our_routes(Ours {
            source,
            store,
            sql,
            live: Some(scheduler.scheduler_id.clone()),
            cors: our_cors(),
            token: history.and_then(|h| h.api_token.clone()),
            per_server,
            inside_cors: Router::new(),
            outside_cors: health,
        }),
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
    token: Option<bjh_serving::auth::ApiToken>,
    sql: Option<Arc<bjh_sql::SqlEngine>>,
) -> Router {
    let per_server = PerServer::new(Some(&store), bjh_serving::job_metrics::DEFAULT_TOP_QUERIES);
    history_router_with(store, token, sql, None, &per_server)
}

/// [`history_router`], granting `cors_origins` (none without) and with
/// the shares of `per_server`.
fn history_router_with(
    store: Arc<LogStore>,
    token: Option<bjh_serving::auth::ApiToken>,
    sql: Option<Arc<bjh_sql::SqlEngine>>,
    cors_origins: Option<&str>,
    per_server: &PerServer,
) -> Router {
    let started = u128::from(bjh_format::now_millis());
    let ready_store = store.clone();
    let router = our_routes(Ours {
        source: Arc::new(DiskSource::new(store.clone())),
        store,
        sql,
        live: None,
        cors: cors(cors_origins, &SchedulerConfig::default()),
        token: token.clone(),
        per_server,
        inside_cors: router::history_routes(started, Arc::new(move || ready_store.is_ready())),
        outside_cors: Router::new(),
    });
    bjh_serving::auth::protect(with_history_headers(with_version_headers(router)), token)
}

/// What [`our_routes`] serves, and how.
struct Ours<'a> {
    source: Arc<dyn JobSource>,
    store: Arc<LogStore>,
    sql: Option<Arc<bjh_sql::SqlEngine>>,
    /// A live scheduler's id; `None` on a history-only server.
    live: Option<String>,
    cors: bjh_serving::headers::CorsLayer,
    token: Option<bjh_serving::auth::ApiToken>,
    per_server: &'a PerServer,
    /// The mode's own routes under the CORS policy (a history server's
    /// state, version and probes).
    inside_cors: Router,
    /// The mode's own routes outside it (a live scheduler's probes).
    outside_cors: Router,
}

/// Our routes, the same in both modes: the job routes, metrics and the
/// API's description under the CORS policy; MCP, SQL and the web pages
/// outside it (no origin is granted SQL or the tools); every route's
/// ignored parameters named in a header.
fn our_routes(o: Ours<'_>) -> Router {
    let mode = match o.live {
        Some(_) => openapi::Mode::Live,
        None => openapi::Mode::History,
    };
    let ui = bjh_serving::ui::Ui {
        source: o.source.clone(),
        store: Some(o.store.clone()),
        live: o.live.is_some(),
        scheduler_id: o.live.unwrap_or_else(|| "history-server".into()),
        token: o.token,
        sql: o.sql.clone(),
        hub: o.per_server.hub.clone(),
        usage: o.per_server.usage.clone(),
    };
    router::job_routes(o.source.clone(), Some(o.store.clone()))
        .layer(axum::Extension(o.per_server.usage.clone()))
        .merge(o.inside_cors)
        .merge(router::metrics_route(o.per_server.gauges.clone()))
        .merge(openapi::routes(mode))
        .layer(o.cors)
        .merge(bjh_serving::mcp::over(o.source, o.store, o.sql.clone()))
        .merge(
            o.sql
                .map(bjh_serving::sql_route::routes)
                .unwrap_or_default(),
        )
        .merge(o.outside_cors)
        .merge(bjh_serving::ui::routes(ui))
        .layer(axum::middleware::from_fn(bjh_serving::params::name_ignored))
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
    options.check_sql_cluster()?;
    let metrics = HistoryMetrics::global();
    if options.remote.is_some() {
        // The local directory holds the persistent index of the store.
        let _ = std::fs::create_dir_all(&options.event_log_dir);
    }
    let store = Arc::new(options.store(metrics.clone()));
    let per_server = PerServer::new(Some(&store), options.metrics_top_queries)
        .with_usage(options.usage_settings());
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
        router = bjh_serving::hosts::guard(
            router,
            bjh_serving::hosts::AllowedHosts::new(&options.allowed_hosts),
        );
    }
    log::info!(
        "Ballista job history server listening on {:?}, serving {}",
        listener.local_addr().ok(),
        options.shown()
    );
    let served = bjh_serving::http::serve(
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
