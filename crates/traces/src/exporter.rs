//! Sending traces: a live scheduler's jobs as they end, and a directory's
//! jobs in one pass (`--history-only --export-otlp`).
//!
//! **Live, never in the way.** The writer hands each completed job's
//! records to a [`TraceQueue`] (the writer's hand-over, the one the SQL
//! tables use: records shared, not copied). Taking one is a bounded
//! `try_send`: when [`MAX_QUEUED_JOBS`] jobs or [`MAX_QUEUED_TASKS`] task
//! records wait, the job is dropped and counted
//! (`ballista_job_history_otlp_jobs_dropped_total`), as the writer drops
//! progress records rather than wait. A thread of its own builds the spans
//! and sends them, [`CHUNK`] spans per request, each request bounded by
//! [`TIMEOUT`], on a single-threaded runtime of its own at a lower CPU
//! priority ([`NICE`]): building and encoding a large job's spans (50,000
//! tasks take about 40 ms of a core) never takes a core from the
//! scheduler's runtime or the writer, which run at the process's priority.
//! A failed request is counted
//! (`ballista_job_history_otlp_export_errors_total`) and logged, and its
//! job's spans are let go (a receiver that is down does not grow memory).

use crate::{TracedJob, spans_of_written};
use bjh_format::record::WrittenJob;
use bjh_format::written::WrittenJobs;
use bjh_metrics::HistoryMetrics;
use bjh_store::LogStore;
use bjh_store::query::JobFacts;
use bjh_store::records::JobRecords;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Jobs waiting to be sent, at most.
pub const MAX_QUEUED_JOBS: usize = 1_024;
/// Task records waiting, at most, over all jobs.
pub const MAX_QUEUED_TASKS: usize = 1_000_000;
/// Spans per request.
pub const CHUNK: usize = 2_048;
/// The longest a request may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How much lower the sending thread's CPU priority is than the process's
/// (a nice value added to it; Linux sets it per thread).
pub const NICE: i32 = 10;

/// The exporter for `endpoint` (OTLP over gRPC, e.g.
/// `http://collector:4317`), its resource naming the service.
pub(crate) fn exporter(endpoint: &str) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(TIMEOUT)
        .build()
        .map_err(|e| format!("--otlp-endpoint {endpoint:?}: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("ballista-scheduler")
        .build();
    exporter.set_resource(&resource);
    Ok(exporter)
}

/// Sends `spans` in requests of [`CHUNK`]; the first error stops it.
async fn send(
    exporter: &opentelemetry_otlp::SpanExporter,
    mut spans: Vec<SpanData>,
) -> Result<usize, String> {
    let total = spans.len();
    while !spans.is_empty() {
        let rest = spans.split_off(spans.len().min(CHUNK));
        exporter
            .export(std::mem::replace(&mut spans, rest))
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(total)
}

/// The writer's side: jobs waiting to be sent.
#[derive(Debug)]
pub struct TraceQueue {
    tx: tokio::sync::mpsc::Sender<Arc<WrittenJob>>,
    tasks: Arc<AtomicUsize>,
    metrics: Arc<HistoryMetrics>,
}

/// The sending side of a [`TraceQueue`]: its thread, told to stop when
/// [`TraceSender::run`]'s future resolves or the sender is dropped.
pub struct TraceSender {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// A queue and its sender to `endpoint` (each job's span names the
/// scheduler that ran it, from its log). The sending thread starts now; an
/// endpoint the exporter refuses is an error here.
pub fn queue(
    endpoint: &str,
    metrics: Arc<HistoryMetrics>,
) -> Result<(Arc<TraceQueue>, TraceSender), String> {
    let (tx, rx) = tokio::sync::mpsc::channel(MAX_QUEUED_JOBS);
    let tasks = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let (ready, built) = std::sync::mpsc::sync_channel(1);
    let sending = Sending {
        rx,
        tasks: tasks.clone(),
        metrics: metrics.clone(),
    };
    let endpoint = endpoint.to_string();
    let thread = std::thread::Builder::new()
        .name("otlp-traces".into())
        .spawn(move || {
            if let Err(e) = rustix::process::setpriority_process(
                Some(rustix::thread::gettid()),
                rustix::process::getpriority_process(None).unwrap_or(0) + NICE,
            ) {
                log::debug!("traces: the sending thread keeps the process's priority: {e}");
            }
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready.send(Err(format!("traces: no runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                // Built here: its connection's tasks run on this runtime.
                let exporter = match exporter(&endpoint) {
                    Ok(exporter) => exporter,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(Ok(()));
                sending.run(exporter, stopped).await;
            });
        })
        .map_err(|e| format!("traces: no thread: {e}"))?;
    match built.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("traces: the sending thread ended at once".to_string()),
    }
    Ok((
        Arc::new(TraceQueue { tx, tasks, metrics }),
        TraceSender { stop, thread },
    ))
}

/// What the sending thread holds.
struct Sending {
    rx: tokio::sync::mpsc::Receiver<Arc<WrittenJob>>,
    tasks: Arc<AtomicUsize>,
    metrics: Arc<HistoryMetrics>,
}

fn tasks_of(job: &WrittenJob) -> usize {
    job.tasks.iter().map(Vec::len).sum()
}

impl WrittenJobs for TraceQueue {
    /// Every job is wanted: the bounds are applied when it is handed over.
    fn wanted(&self) -> bool {
        true
    }

    fn completed(&self, job: Arc<WrittenJob>) {
        let n = tasks_of(&job);
        if self.tasks.load(Ordering::Relaxed) + n > MAX_QUEUED_TASKS {
            self.metrics.otlp_jobs_dropped.inc();
            return;
        }
        match self.tx.try_send(job) {
            Ok(()) => {
                self.tasks.fetch_add(n, Ordering::Relaxed);
            }
            Err(_) => self.metrics.otlp_jobs_dropped.inc(),
        }
    }
}

impl TraceSender {
    /// Waits until `stop` resolves (then tells the thread to stop after the
    /// job it is sending) or the writer is gone and every job is sent.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let TraceSender { stop: tell, thread } = self;
        let mut joined = tokio::task::spawn_blocking(move || thread.join());
        tokio::select! {
            _ = stop => {
                let _ = tell.send(());
                let _ = joined.await;
            }
            _ = &mut joined => {}
        }
    }
}

impl Sending {
    /// Sends each job handed over until `stopped` resolves (or its sender
    /// is dropped) or the writer is gone.
    async fn run(
        mut self,
        exporter: opentelemetry_otlp::SpanExporter,
        mut stopped: tokio::sync::oneshot::Receiver<()>,
    ) {
        loop {
            let job = tokio::select! {
                _ = &mut stopped => break,
                job = self.rx.recv() => match job {
                    Some(job) => job,
                    None => break,
                },
            };
            let n = tasks_of(&job);
            // The one copy, unless the SQL tables' taker still holds it.
            let spans = spans_of_written(Arc::unwrap_or_clone(job));
            self.tasks.fetch_sub(n, Ordering::Relaxed);
            match send(&exporter, spans).await {
                Ok(_) => self.metrics.otlp_jobs_exported.inc(),
                Err(e) => {
                    self.metrics.otlp_export_errors.inc();
                    log::warn!("traces: a job's spans were not sent: {e}");
                }
            }
        }
        let _ = exporter.shutdown();
    }
}

/// The jobs an export asks the store for at a time.
const EXPORT_PAGE: usize = 1_000;

/// The ids of every completed job of a store, newest first, asked
/// [`EXPORT_PAGE`] at a time on a blocking thread (`LogStore::completed_ids`).
struct Pages {
    store: Arc<LogStore>,
    ids: std::vec::IntoIter<String>,
    /// The cursor of the next page.
    after: Option<bjh_store::query::Facts>,
    /// Whether the last page was asked for.
    done: bool,
}

impl Pages {
    async fn next(&mut self) -> Result<Option<String>, String> {
        loop {
            if let Some(id) = self.ids.next() {
                return Ok(Some(id));
            }
            if self.done {
                return Ok(None);
            }
            let (store, after) = (self.store.clone(), self.after.take());
            let page = tokio::task::spawn_blocking(move || {
                store.completed_ids(after.as_ref(), EXPORT_PAGE)
            });
            let (ids, next) = page
                .await
                .map_err(|e| format!("listing the jobs failed: {e}"))?;
            (self.ids, self.done) = (ids.into_iter(), next.is_none());
            self.after = next;
        }
    }
}

/// Sends the trace of every completed job `store` lists to `endpoint`;
/// says how many jobs and spans were sent. A log that cannot be read is
/// skipped and named; a job the receiver refuses is named and the others
/// are still sent (then the answer is an error naming it, so the exit
/// status says the export is not whole).
pub async fn export_store(store: Arc<LogStore>, endpoint: &str) -> Result<String, String> {
    let exporter = exporter(endpoint)?;
    let (mut jobs, mut sent, mut skipped) = (0usize, 0usize, Vec::new());
    let mut refused: Vec<(String, String)> = Vec::new();
    // A page of ids at a time, newest first, as the list pages: what the
    // export holds does not grow with the jobs.
    let mut pages = Pages {
        store: store.clone(),
        ids: Vec::new().into_iter(),
        after: None,
        done: false,
    };
    while let Some(id) = pages.next().await? {
        let (Some(summary), Some(log)) = (store.summary(&id), store.log_of(&id)) else {
            continue;
        };
        let records = match tokio::task::spawn_blocking(move || JobRecords::read(log)).await {
            Ok(Ok(records)) => records,
            _ => {
                skipped.push(id);
                continue;
            }
        };
        let traced = TracedJob {
            job_id: &id,
            job_name: summary.job_name(),
            status: summary.state().status_word(),
            failure: None,
            queued_at: summary.queued_time(),
            start_time: summary.start_time(),
            end_time: summary.end_time(),
            query_hash: summary.query_hash(),
            dropped_records: summary.dropped_records(),
            scheduler_id: records.start.scheduler_id.as_deref(),
        };
        let trace = crate::spans(&traced, &records);
        match send(&exporter, trace).await {
            Ok(n) => {
                sent += n;
                jobs += 1;
            }
            Err(e) => refused.push((id, e)),
        }
    }
    let _ = exporter.shutdown();
    let mut said = format!("sent the traces of {jobs} jobs ({sent} spans) to {endpoint}");
    if !skipped.is_empty() {
        said += &format!(
            "; skipped {} unreadable logs: {}",
            skipped.len(),
            skipped.join(", ")
        );
    }
    if refused.is_empty() {
        return Ok(said);
    }
    let named: Vec<String> = refused
        .iter()
        .take(10)
        .map(|(id, e)| format!("{id:?} ({e})"))
        .collect();
    Err(format!(
        "{said}; {} jobs were not sent: {}{}",
        refused.len(),
        named.join(", "),
        if refused.len() > 10 { ", ..." } else { "" }
    ))
}
