//! The plugin: job history for a scheduler assembled by hand.
//!
//! A scheduler of one's own (its own codecs, UDFs, table providers) gets
//! the same durable memory our binary has through [`JobHistory`]:
//!
//! 1. [`JobHistory::new`] starts the writer over the directory (or spool)
//!    and adjusts the scheduler's config (the scheduler id its logs record;
//!    upstream's own event log off).
//! 2. [`JobHistory::cluster`] wraps the cluster, so a finished job is
//!    forgotten only once its log is stored; [`JobHistory::collector`]
//!    wraps the metrics collector with the listener that sees jobs start
//!    and end, without ever waiting (DESIGN.md, invariant 1). Both go to
//!    `SchedulerServer::new`.
//! 3. [`JobHistory::start`], once the scheduler is initialized, spawns the
//!    background tasks (capture of each finished job's answers, rescans,
//!    uploads, retention, the SQL tables) and gives a [`Running`]: the
//!    gRPC services with the task tap ([`Running::grpc`], or
//!    [`Running::tap`] around a service of one's own), the HTTP routes to
//!    serve ([`Running::router`]), and [`Running::serve`] /
//!    [`Running::stop`], which end the jobs under way, stop the
//!    background tasks and drain the writer.
//!
//! `examples/embedded.rs` is a whole scheduler built this way in under 150
//! lines; the `ballista-scheduler` binary uses exactly this API. A
//! history-only server needs no scheduler: [`crate::history_router`] and
//! [`crate::run_history`].

use crate::server::{HistoryOptions, ServerError, live_router};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::metrics::SchedulerMetricsCollector;
use bjh_columnar::fresh::Fresh;
use bjh_format::written::Takers;
use bjh_metrics::HistoryMetrics;
use bjh_recording::capture::Capturer;
use bjh_recording::cluster::ClusterRecorder;
use bjh_recording::hold::{HeldJobState, Recorded};
use bjh_recording::listener::{EventLogListener, JobEvent, TappedScheduler, TaskTap};
use bjh_recording::upload::{Bucket, Uploader, lock_spool, running_logs};
use bjh_recording::writer::{self, WriterConfig, WriterMsg};
use bjh_serving::PerServer;
use bjh_serving::live::{LiveApi, Scheduler};
use bjh_serving::source::{DiskSource, JobSource, Layered, LiveSource};
use bjh_store::LogStore;
use bjh_store::retention::{Cleaner, Protect};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use tokio::net::TcpListener;

/// Job history for one scheduler, before the scheduler starts.
///
/// ```no_run
/// # async fn f(listener: tokio::net::TcpListener) -> Result<(), Box<dyn std::error::Error>> {
/// use ballista_job_history::{HistoryOptions, JobHistory};
/// use ballista_scheduler::cluster::BallistaCluster;
/// use ballista_scheduler::config::SchedulerConfig;
/// use ballista_scheduler::scheduler_server::SchedulerServer;
/// use std::sync::Arc;
///
/// let mut config = SchedulerConfig::default();
/// let history = JobHistory::new(HistoryOptions::new("/var/lib/ballista/history"), &mut config)?;
/// let cluster = history.cluster(BallistaCluster::new_from_config(&config).await?);
/// let collector = history.collector(ballista_scheduler::metrics::default_metrics_collector()?);
/// let config = Arc::new(config);
/// let mut scheduler = SchedulerServer::new(
///     config.scheduler_endpoint(),
///     cluster,
///     ballista_core::serde::BallistaCodec::default(),
///     config.clone(),
///     collector,
/// );
/// scheduler.init().await?;
/// let running = history.start(Arc::new(scheduler), config);
/// running.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
pub struct JobHistory {
    options: HistoryOptions,
    recording: Recording,
    recorded: Arc<OnceLock<Recorded>>,
    /// One scheduler per spool (an object store's), held while this lives.
    _spool: Option<std::fs::File>,
}

impl JobHistory {
    /// Starts recording into `options`' directory (the writer thread; no
    /// job is read or written until the scheduler runs). `config` is
    /// adjusted: its `scheduler_id` becomes the one the logs record (given
    /// in `options`, else kept in the directory across restarts), and
    /// upstream's own event log is turned off (jobs are not recorded
    /// twice).
    pub fn new(
        mut options: HistoryOptions,
        config: &mut SchedulerConfig,
    ) -> Result<Self, ServerError> {
        // A SQL query runs in a worker process started from this same
        // executable: when this process is one, it answers its query and
        // exits here, before it writes anything (an embedder's `main` need
        // not know).
        bjh_sql::worker::exit_if_worker();
        config.event_log_dir = None;
        let spool = match options.remote {
            Some(_) => Some(lock_spool(&options.event_log_dir).map_err(ServerError::Config)?),
            None => None,
        };
        let id = options.scheduler_id.as_deref();
        config.scheduler_id = bjh_recording::scheduler_id::resolve(id, &options.event_log_dir)
            .map_err(ServerError::Config)?;
        // The id the logs record is the one summaries are published under.
        options.scheduler_id = Some(config.scheduler_id.clone());
        if options.sql_cluster.is_none() {
            // The cluster engine runs on this scheduler's own executors.
            options.sql_cluster = Some(own_address(config));
        }
        options.check_sql_cluster()?;
        let recording = Recording::start(&options)?;
        Ok(Self {
            options,
            recording,
            recorded: Arc::new(OnceLock::new()),
            _spool: spool,
        })
    }

    /// The cluster the scheduler is built over, its job state held so that
    /// a finished job is forgotten only once its log is stored.
    pub fn cluster(&self, cluster: BallistaCluster) -> BallistaCluster {
        let held = HeldJobState::new(cluster.job_state(), self.recorded.clone());
        BallistaCluster::new(cluster.cluster_state(), Arc::new(held))
    }

    /// The metrics collector the scheduler is built with: `inner`, with
    /// the listener that hands each job's start and end to the recorder
    /// in front of it. It never waits.
    pub fn collector(
        &self,
        inner: Arc<dyn SchedulerMetricsCollector>,
    ) -> Arc<dyn SchedulerMetricsCollector> {
        Arc::new(EventLogListener::new(
            inner,
            self.recording.events_tx.clone(),
        ))
    }

    /// Once the scheduler is initialized: spawns the background tasks on
    /// the current Tokio runtime and gives what serves and stops them.
    pub fn start(self, scheduler: Arc<Scheduler>, config: Arc<SchedulerConfig>) -> Running {
        let JobHistory {
            options,
            recording,
            recorded,
            _spool,
        } = self;
        let api = LiveApi::new(scheduler.clone());
        let (stop_tx, stop) = Stop::new();
        let mut background = Vec::new();
        let fresh = recording.fresh.clone();
        let (source, store, tap, writer) = recording.spawn(&options, &api, &stop, &mut background);
        let held = store.clone();
        let _ = recorded.set(Arc::new(move |id: &str| held.contains(id)));
        let sql = options.sql_engine(source.clone(), store.clone(), Some(fresh));
        background.push(tokio::spawn(
            sql.clone()
                .keep_fresh(options.update_interval, stop.stopped()),
        ));
        let per_server = PerServer::new(Some(&store), options.metrics_top_queries)
            .with_usage(options.usage_settings());
        Running {
            options,
            scheduler,
            config,
            api,
            source,
            store,
            tap,
            sql,
            per_server,
            stop_tx,
            background,
            writer,
            _spool,
        }
    }
}

/// Job history for a running scheduler: its routes, its tap, and its stop.
pub struct Running {
    options: HistoryOptions,
    scheduler: Arc<Scheduler>,
    config: Arc<SchedulerConfig>,
    api: LiveApi,
    source: Arc<dyn JobSource>,
    store: Arc<LogStore>,
    tap: TaskTap,
    sql: Arc<bjh_sql::SqlEngine>,
    per_server: PerServer,
    stop_tx: tokio::sync::watch::Sender<bool>,
    background: Vec<tokio::task::JoinHandle<()>>,
    writer: WriterParts,
    _spool: Option<std::fs::File>,
}

impl Running {
    /// `grpc` (the scheduler's gRPC service, or one of one's own wrapping
    /// it) with the task tap in front: each finished task an executor
    /// reports is handed to the writer on its way in; every call is
    /// delegated unchanged.
    pub fn tap<S>(&self, grpc: S) -> TappedScheduler<S> {
        TappedScheduler::new(grpc, Some(self.tap.clone()))
    }

    /// The scheduler's gRPC services (and its Flight proxy when enabled),
    /// tapped, as a router: what executors and clients connect to.
    pub fn grpc(&self) -> axum::Router {
        bjh_serving::live::grpc_router(&self.scheduler, &self.config, Some(self.tap.clone()))
    }

    /// Everything the port answers, as our binary serves it: the job
    /// routes over the scheduler then its logs, the web pages, SQL, MCP,
    /// OpenAPI, metrics and health, then the scheduler's own REST routes,
    /// then gRPC ([`Running::grpc`]); behind the API token when there is
    /// one, else behind the allowed hosts.
    pub fn router(&self) -> axum::Router {
        let router = live_router(
            &self.scheduler,
            &self.config,
            &self.api,
            Some((self.source.clone(), self.store.clone())),
            Some(self.tap.clone()),
            Some(&self.options),
            Some(self.sql.clone()),
            &self.per_server,
        );
        crate::server::protected(router, Some(&self.options))
    }

    /// The index of the logs (completed jobs, read and searched).
    pub fn store(&self) -> &Arc<LogStore> {
        &self.store
    }

    /// Serves [`Running::router`] on `listener`, within the options' limits
    /// per client and per port, until `shutdown` resolves; then stops as
    /// [`Running::stop`] does.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let router = self.router();
        let (api, wait) = (self.api.clone(), self.options.jobs_end_timeout);
        let shutdown = async move {
            shutdown.await;
            end_jobs(&api, wait).await;
        };
        let served = crate::server::serve(
            listener,
            router,
            Some(&self.options),
            self.per_server.stopping.clone(),
            shutdown,
        )
        .await;
        self.finish().await;
        served.map_err(ServerError::from)
    }

    /// Stops: the jobs still queued or running are cancelled and recorded
    /// as cancelled (waiting at most the options' `jobs_end_timeout`),
    /// every stream the routes serve ends, the background tasks stop, and
    /// the writer's queue is drained and flushed before this returns.
    pub async fn stop(self) {
        end_jobs(&self.api, self.options.jobs_end_timeout).await;
        self.per_server.stopping.cancel();
        self.finish().await;
    }

    /// Stops the background tasks and drains the writer.
    async fn finish(self) {
        let _ = self.stop_tx.send(true);
        for task in self.background {
            let _ = task.await;
        }
        let (writer, thread) = self.writer;
        writer.send(WriterMsg::Shutdown);
        drop(writer);
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

/// Cancels the jobs under way, so their logs end with a terminal record
/// rather than as abandoned `.running` files.
async fn end_jobs(api: &LiveApi, wait: std::time::Duration) {
    let ended = api.cancel_unfinished(wait).await;
    if ended > 0 {
        log::info!("stopping: cancelled {ended} jobs under way; recording them");
    }
}

/// A broadcast "stop" for the background tasks of a server.
#[derive(Clone)]
pub(crate) struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    pub(crate) fn new() -> (tokio::sync::watch::Sender<bool>, Self) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Self(rx))
    }

    /// Resolves once the server stops.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
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
    traces: Option<bjh_traces::exporter::TraceSender>,
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
        if let Some(secret) = options
            .usage_tags
            .iter()
            .find(|k| options.redactor.is_secret(k))
        {
            return Err(ServerError::Config(format!(
                "--usage-tags: {secret:?} is a redacted key (it matches the redaction pattern): \
                 its values are never written, so it cannot tag usage; name another key"
            )));
        }
        let mut wc = WriterConfig::new(&options.event_log_dir);
        wc.usage_tags = options.usage_tags.clone();
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
                bjh_traces::exporter::queue(endpoint, metrics.clone())
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
        // The cluster's executors, beside the jobs (`DIR/.cluster/`).
        let mut cluster = ClusterRecorder::new(Arc::new(api.clone()), &options.event_log_dir);
        if let Some(remote) = &options.remote {
            let (client, prefix) = remote.client();
            cluster = cluster.uploading_to(Bucket::new(client, prefix, remote.url()));
        }
        let contacts = cluster.contacts();
        background.push(tokio::spawn(cluster.run(stop.stopped())));
        let mut store = options.store(metrics.clone());
        if let Some(id) = &options.scheduler_id {
            store = store.with_publishing(id);
        }
        let store = Arc::new(store);
        match &options.remote {
            Some(remote) => {
                // The summaries of the jobs it uploads, so readers need
                // not list their logs (`bjh_store::published`).
                background.push(tokio::spawn(
                    store.clone().publish_every(PUBLISH_EVERY, stop.stopped()),
                ));
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
        let tap = TaskTap::new(writer.clone()).with_contacts(contacts);
        (source, store, tap, (writer, thread))
    }
}

/// How often a recording scheduler over an object store publishes the
/// summaries of the jobs it uploaded (one segment at most per period).
const PUBLISH_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The writer's handle and thread, kept to drain it on shutdown.
type WriterParts = (writer::WriterHandle, std::thread::JoinHandle<()>);

/// The scheduler's own gRPC address, as its SQL's cluster engine reaches
/// it: its bind host (this machine when it binds every address) and port.
fn own_address(config: &SchedulerConfig) -> String {
    let host = match config.bind_host.as_str() {
        "" | "0.0.0.0" | "::" | "[::]" => "127.0.0.1".to_string(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.to_string(),
    };
    format!("df://{host}:{}", config.bind_port)
}
