//! The recording path: the scheduler-side hook (`TaskTap::observe`, one
//! finished task per call) and the writer thread's throughput in `TaskEnd`
//! records per second (batches of 64, 100,000 records per iteration).
//! Then what the columnar history of the SQL tables costs per job: the
//! writer's time for a whole job (start, tasks, responses, fsync and
//! rename) with and without handing its records over, and the work done
//! off the writer's thread to add the job to the Parquet files, from the
//! handed records or from its log read again. Last, what sending traces
//! (`--otlp-endpoint`) costs the writer: a job of 50,000 tasks with no
//! traces, with its records handed to a trace queue that sends nothing
//! (the hand-over alone), and with the trace of the job before it being
//! sent while it is written, to a receiver in this process
//! (opentelemetry-proto's trace service, on a thread of its own at the
//! lowest priority, standing in for a collector on another machine).
//! Between jobs, untimed, the previous trace is sent and the disk synced,
//! in every variant.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use ballista_core::serde::protobuf::{self as pb, SuccessfulTask, task_status};
use bjh_columnar::fresh::Fresh;
use bjh_format::record::WrittenJob;
use bjh_format::record::{JobStart, TaskEnd, TaskMetrics};
use bjh_metrics::HistoryMetrics;
use bjh_recording::listener::TaskTap;
use bjh_recording::writer::{self, WriterConfig, WriterMsg};
use bjh_store::records::JobRecords;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;

fn status(task_id: u32) -> pb::TaskStatus {
    pb::TaskStatus {
        task_id,
        job_id: "job".into(),
        stage_id: 1,
        stage_attempt_num: 0,
        launch_time: 1,
        start_exec_time: 2,
        end_exec_time: 3,
        metrics: vec![],
        status: Some(task_status::Status::Successful(SuccessfulTask::default())),
    }
}

fn hook(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (handle, thread) = writer::spawn(
        WriterConfig::new(dir.path()),
        Arc::new(HistoryMetrics::unregistered()),
    )
    .unwrap();
    handle.send(WriterMsg::Start(JobStart {
        job_id: "job".into(),
        ..Default::default()
    }));
    let tap = TaskTap::new(handle.clone());
    let batch = [status(0)];
    c.bench_function("hook: TaskTap::observe, one finished task", |b| {
        b.iter(|| tap.observe("executor", &batch))
    });
    drop(tap);
    handle.send(WriterMsg::Shutdown);
    drop(handle);
    thread.join().unwrap();
}

fn throughput(c: &mut Criterion) {
    const RECORDS: u64 = 100_000;
    let task = |t: u32| TaskEnd {
        stage_id: 1,
        task_id: t,
        executor_id: "executor-0a1b2c3d".into(),
        status: ballista_api_types::dto::TaskStatus::Successful,
        launch_time: 1_700_000_000_001,
        start_exec_time: 1_700_000_000_002,
        end_exec_time: 1_700_000_000_005,
        metrics: TaskMetrics {
            input_rows: 1000,
            output_rows: 100,
            elapsed_compute_nanos: 3_000_000,
        },
        stage_attempt: 0,
    };
    let mut group = c.benchmark_group("writer");
    group.throughput(Throughput::Elements(RECORDS));
    group.sample_size(10);
    group.bench_function("TaskEnd records through the writer thread", |b| {
        b.iter(|| {
            let dir = tempfile::tempdir().unwrap();
            let mut config = WriterConfig::new(dir.path());
            config.queue_capacity = usize::MAX;
            let (handle, thread) =
                writer::spawn(config, Arc::new(HistoryMetrics::unregistered())).unwrap();
            handle.send(WriterMsg::Start(JobStart {
                job_id: "job".into(),
                ..Default::default()
            }));
            for chunk in 0..(RECORDS / 64) as u32 {
                handle.try_progress(WriterMsg::Tasks {
                    job_id: "job".into(),
                    tasks: (0..64).map(|i| task(chunk * 64 + i)).collect(),
                });
            }
            handle.send(WriterMsg::Shutdown);
            drop(handle);
            thread.join().unwrap();
        })
    });
    group.finish();
}

/// Sends one job's messages to a new writer over `dir` (handing its
/// records to `fresh` when given) and waits for the writer to finish;
/// gives the time from the first message to the writer done.
fn record_job(
    dir: &std::path::Path,
    tasks: usize,
    fresh: Option<Arc<Fresh>>,
) -> std::time::Duration {
    record_job_for(dir, tasks, fresh.map(|f| f as Arc<dyn writer::WrittenJobs>))
}

/// [`record_job`] with any taker of the written records.
fn record_job_for(
    dir: &std::path::Path,
    tasks: usize,
    taker: Option<Arc<dyn writer::WrittenJobs>>,
) -> std::time::Duration {
    let mut config = WriterConfig::new(dir);
    config.queue_capacity = usize::MAX;
    config.written = taker;
    let messages = corpus::job_messages("job", tasks, 1_700_000_000_000);
    let (handle, thread) = writer::spawn(config, Arc::new(HistoryMetrics::unregistered())).unwrap();
    let started = std::time::Instant::now();
    corpus::send_all(&handle, messages);
    handle.send(WriterMsg::Shutdown);
    drop(handle);
    thread.join().unwrap();
    started.elapsed()
}

/// The records a writer hands over for one job of `tasks` tasks, and the
/// log it wrote in `dir`.
fn handed(dir: &std::path::Path, tasks: usize) -> WrittenJob {
    let fresh = Arc::new(Fresh::new());
    fresh.start();
    record_job(dir, tasks, Some(fresh.clone()));
    Arc::unwrap_or_clone(fresh.take(|_| true).pop().unwrap())
}

/// Writes one job's rows as the three Parquet files of a segment.
fn write_rows(dir: &std::path::Path, rows: &bjh_columnar::tables::JobRows) {
    use bjh_columnar::tables::{OPERATORS, STAGES, TASKS};
    for (name, schema, batch) in [
        ("stages", &STAGES, &rows.stages),
        ("tasks", &TASKS, &rows.tasks),
        ("operators", &OPERATORS, &rows.operators),
    ] {
        bjh_columnar::write_file(&dir.join(format!("{name}.parquet")), schema, batch).unwrap();
    }
}

fn columnar_cost(c: &mut Criterion) {
    const TASKS: usize = 50_000;
    let mut group = c.benchmark_group("columnar");
    group.sample_size(10);
    let dir = tempfile::tempdir().unwrap();
    for (name, kept) in [
        ("writer: a job of 50,000 tasks, records not kept", false),
        ("writer: a job of 50,000 tasks, records handed over", true),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let fresh = kept.then(|| {
                            let f = Arc::new(Fresh::new());
                            f.start();
                            f
                        });
                        let took = record_job(dir.path(), TASKS, fresh.clone());
                        // Taken (and freed) by the SQL side, off the writer's time.
                        drop(fresh);
                        took
                    })
                    .sum()
            })
        });
    }
    group.bench_function(
        "off the writer: rows and Parquet of the job, from the handed records",
        |b| {
            b.iter_batched(
                || handed(dir.path(), TASKS),
                |job| {
                    let (_, rows) = bjh_columnar::rows_of_written(job);
                    assert_eq!(rows.tasks.num_rows(), TASKS);
                    write_rows(dir.path(), &rows);
                },
                criterion::BatchSize::PerIteration,
            )
        },
    );
    group.bench_function(
        "off the writer: rows and Parquet of the job, from its log read again",
        |b| {
            record_job(dir.path(), TASKS, None);
            let log = dir.path().join("job.eventlog");
            b.iter(|| {
                let records = JobRecords::read(log.as_path()).unwrap();
                let rows = bjh_columnar::tables::job_rows(
                    "job",
                    &records,
                    &Default::default(),
                    &Default::default(),
                    &[],
                );
                assert_eq!(rows.tasks.num_rows(), TASKS);
                write_rows(dir.path(), &rows);
            })
        },
    );
    group.finish();
}

/// An OTLP trace receiver in this process that counts the spans it gets.
#[derive(Default, Clone)]
struct Sink(Arc<std::sync::atomic::AtomicUsize>);

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
        >,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
        >,
        tonic::Status,
    > {
        let spans: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0
            .fetch_add(spans, std::sync::atomic::Ordering::Relaxed);
        Ok(tonic::Response::new(Default::default()))
    }
}

fn otlp_cost(c: &mut Criterion) {
    use bjh_traces;
    const TASKS: usize = 50_000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sink = Sink::default();
    // The receiver stands in for a collector on another machine: it runs
    // on a thread of its own at the lowest CPU priority, so decoding the
    // spans competes as little as it can with what is measured here.
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let receiving = sink.clone();
    std::thread::spawn(move || {
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            port_tx
                .send(format!("http://{}", listener.local_addr().unwrap()))
                .unwrap();
            let service = opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer::new(receiving);
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
    });
    let endpoint = port_rx.recv().unwrap();
    let mut group = c.benchmark_group("otlp");
    group.sample_size(10);
    let dir = tempfile::tempdir().unwrap();
    for (name, traced, sent) in [
        ("writer: a job of 50,000 tasks, no traces", false, false),
        (
            "writer: a job of 50,000 tasks, handed to a trace queue that sends nothing",
            true,
            false,
        ),
        (
            "writer: a job of 50,000 tasks, its trace sent over OTLP",
            true,
            true,
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let _runtime = rt.enter();
                // The job whose trace is being sent while the next is written.
                let mut previous: Option<tokio::task::JoinHandle<()>> = None;
                let took = (0..iters)
                    .map(|_| {
                        let mut sending = None;
                        let taker = traced.then(|| {
                            let (queue, sender) = bjh_traces::exporter::queue(
                                &endpoint,
                                Arc::new(HistoryMetrics::unregistered()),
                            )
                            .unwrap();
                            if sent {
                                // Ends once the writer lets go of the queue
                                // and the job is sent.
                                sending = Some(rt.spawn(sender.run(std::future::pending())));
                            } else {
                                // The thread stops; the job is handed over
                                // and let go.
                                rt.block_on(sender.run(std::future::ready(())));
                            }
                            queue as Arc<dyn writer::WrittenJobs>
                        });
                        let took = record_job_for(dir.path(), TASKS, taker);
                        // Untimed: the trace of the job before this one is
                        // sent before the next job is written, as when the
                        // exporter keeps up with the jobs (when it cannot,
                        // jobs are dropped and counted): each job written
                        // overlaps the sending of one trace.
                        if let Some(p) = previous.take() {
                            rt.block_on(p).unwrap();
                        }
                        previous = sending;
                        // Untimed too, in every variant: the disk is
                        // flushed, so each job's fsync waits for its own
                        // pages only.
                        rustix::fs::sync();
                        took
                    })
                    .sum();
                if let Some(p) = previous.take() {
                    rt.block_on(p).unwrap();
                }
                took
            })
        });
    }
    group.finish();
    assert!(
        sink.0.load(std::sync::atomic::Ordering::Relaxed) > TASKS,
        "the receiver got the traces"
    );
}

criterion_group!(benches, hook, throughput, columnar_cost, otlp_cost);
criterion_main!(benches);
