//! Traces against the real binary. The receiver is built on
//! opentelemetry-proto's own types (the OTLP trace service, served in this
//! process); it takes what a recording scheduler sends as its jobs end and
//! what `--history-only --export-otlp` sends for the directory. The
//! spans are checked against the job's log, read here: one job span, a
//! span per stage the task records name, a span per task record, each
//! task under its stage and each stage under the job, with the log's times.

use crate::harness::{Cluster, completed_log, counter, get, run_job};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// A span as received, with its resource's attributes.
#[derive(Debug, Clone)]
struct Received {
    span: Span,
    resource: Vec<KeyValue>,
}

/// Keeps every span it is sent (but those of a job it refuses, when it is
/// told one).
#[derive(Debug, Default, Clone)]
struct Receiver(Arc<Mutex<Vec<Received>>>, Option<&'static str>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        if let Some(refused) = self.1 {
            let names_it = request.resource_spans.iter().any(|rs| {
                rs.scope_spans.iter().any(|ss| {
                    ss.spans
                        .iter()
                        .any(|s| text(&s.attributes, "ballista.job.id").as_deref() == Some(refused))
                })
            });
            if names_it {
                return Err(tonic::Status::invalid_argument(
                    "this receiver refuses that job",
                ));
            }
        }
        let mut kept = self.0.lock().unwrap();
        for rs in request.resource_spans {
            let resource = rs.resource.map(|r| r.attributes).unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    kept.push(Received {
                        span,
                        resource: resource.clone(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A receiver on a loopback port, and its URL.
async fn receiver() -> (Receiver, String) {
    receiver_refusing(None).await
}

/// A receiver (with tonic's default 4 MiB message limit) that refuses the
/// requests carrying spans of job `refused`, and its URL.
async fn receiver_refusing(refused: Option<&'static str>) -> (Receiver, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let receiver = Receiver(Arc::default(), refused);
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (receiver, url)
}

fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    match attr(attributes, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(attributes: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attributes, key)? {
        any_value::Value::IntValue(i) => Some(*i),
        _ => None,
    }
}

/// The spans of job `job_id`'s trace, once its job span has arrived.
async fn trace_of(receiver: &Receiver, job_id: &str, spans: usize) -> Vec<Received> {
    crate::harness::wait_for(&format!("{spans} spans of job {job_id}"), || {
        let all = receiver.0.lock().unwrap().clone();
        async move {
            let job = all.iter().find(|r| {
                r.span.name == "ballista.job"
                    && text(&r.span.attributes, "ballista.job.id").as_deref() == Some(job_id)
            })?;
            let trace: Vec<Received> = all
                .iter()
                .filter(|r| r.span.trace_id == job.span.trace_id)
                .cloned()
                .collect();
            (trace.len() >= spans).then_some(trace)
        }
    })
    .await
}

const MS: u64 = 1_000_000;

/// What the log says, read from its lines.
struct FromLog {
    /// (stage id, launch, end on the executor) per task record.
    tasks: Vec<(i64, u64, u64)>,
    stages: BTreeSet<i64>,
    start: u64,
    end: u64,
}

fn from_log(lines: &[String]) -> FromLog {
    let mut tasks = Vec::new();
    let (mut start, mut end) = (0, 0);
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap();
        match v["ev"].as_str().unwrap() {
            "TaskEnd" => {
                let d = &v["data"];
                tasks.push((
                    d["stage_id"].as_i64().unwrap(),
                    d["launch_time"].as_u64().unwrap(),
                    d["end_exec_time"].as_u64().unwrap(),
                ));
            }
            "JobEnd" => {
                start = v["data"]["index"]["start_time"].as_u64().unwrap();
                end = v["data"]["index"]["end_time"].as_u64().unwrap();
            }
            _ => {}
        }
    }
    let stages = tasks.iter().map(|t| t.0).collect();
    FromLog {
        tasks,
        stages,
        start,
        end,
    }
}

/// The trace is the log's: counts, parentage and times.
fn assert_trace_is_the_logs(trace: &[Received], log: &FromLog, job_id: &str) {
    let named =
        |name: &str| -> Vec<&Received> { trace.iter().filter(|r| r.span.name == name).collect() };
    let (jobs, stages, tasks) = (
        named("ballista.job"),
        named("ballista.stage"),
        named("ballista.task"),
    );
    assert_eq!(jobs.len(), 1, "{job_id}");
    assert_eq!(
        trace.len(),
        1 + stages.len() + tasks.len(),
        "{job_id}: no other spans"
    );
    let job = &jobs[0].span;
    assert!(job.parent_span_id.is_empty(), "the job span is the root");
    assert_eq!(
        (job.start_time_unix_nano, job.end_time_unix_nano),
        (log.start * MS, log.end * MS)
    );
    assert_eq!(
        text(&job.attributes, "ballista.job.status").as_deref(),
        Some("Completed")
    );
    assert_eq!(
        text(&jobs[0].resource, "service.name").as_deref(),
        Some("ballista-scheduler")
    );
    // A span per stage the task records name, each under the job.
    let stage_ids: BTreeSet<i64> = stages
        .iter()
        .map(|s| int(&s.span.attributes, "ballista.stage.id").unwrap())
        .collect();
    assert_eq!(stage_ids, log.stages);
    assert_eq!(stages.len(), log.stages.len());
    let mut stage_span = BTreeMap::new();
    for s in &stages {
        assert_eq!(s.span.parent_span_id, job.span_id);
        stage_span.insert(
            int(&s.span.attributes, "ballista.stage.id").unwrap(),
            s.span.span_id.clone(),
        );
    }
    // A span per task record, under its stage, with the record's times.
    assert_eq!(tasks.len(), log.tasks.len());
    let mut got: Vec<(i64, u64, u64)> = tasks
        .iter()
        .map(|t| {
            let stage = int(&t.span.attributes, "ballista.stage.id").unwrap();
            assert_eq!(
                t.span.parent_span_id, stage_span[&stage],
                "task under its stage"
            );
            (
                stage,
                t.span.start_time_unix_nano / MS,
                t.span.end_time_unix_nano / MS,
            )
        })
        .collect();
    let mut want = log.tasks.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_job_is_sent_as_it_ends_and_a_directory_on_demand_as_its_logs_say() {
    let (receiver, url) = receiver().await;
    let Cluster {
        tmp: _tmp,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&["--otlp-endpoint", &url]).await;
    let sql = "SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k";
    let (job_id, rows) = run_job(&sched, &ctx, sql).await;
    assert_eq!(rows, Ok(100));
    let log = from_log(&completed_log(&logs, &job_id).await);
    assert!(
        log.tasks.len() >= 2 && log.stages.len() >= 2,
        "a job of several stages"
    );
    let spans = 1 + log.stages.len() + log.tasks.len();
    let live = trace_of(&receiver, &job_id, spans).await;
    assert_trace_is_the_logs(&live, &log, &job_id);
    // The scheduler id the scheduler itself states.
    let job = live.iter().find(|r| r.span.name == "ballista.job").unwrap();
    let state = crate::harness::get_json(&sched.url("/api/state")).await;
    assert_eq!(
        text(&job.span.attributes, "ballista.scheduler_id").as_deref(),
        state["scheduler_id"].as_str()
    );
    let (_, _, metrics) = get(&sched.url("/api/metrics")).await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert_eq!(
        counter(&metrics, "ballista_job_history_otlp_export_errors_total"),
        0
    );
    assert_eq!(
        counter(&metrics, "ballista_job_history_otlp_jobs_dropped_total"),
        0
    );

    // The directory, sent by a one-shot: the same trace (ids come from the
    // job id), checked against the log again.
    receiver.0.lock().unwrap().clear();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args(["--history-only", "--export-otlp", "--otlp-endpoint", &url])
        .arg("--event-log-dir")
        .arg(&logs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("sent the traces of 1 jobs"), "{said}");
    let again = trace_of(&receiver, &job_id, spans).await;
    assert_trace_is_the_logs(&again, &log, &job_id);
    let ids = |t: &[Received]| -> BTreeSet<(Vec<u8>, Vec<u8>)> {
        t.iter()
            .map(|r| (r.span.trace_id.clone(), r.span.span_id.clone()))
            .collect()
    };
    assert_eq!(ids(&again), ids(&live));
}

/// A receiver that is not there costs the scheduler nothing: jobs run and
/// are recorded, and the failed sends are counted. (The two jobs are also
/// the finished-job series' oracle: two completed, two durations.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_that_is_down_never_stops_a_job() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let Cluster {
        tmp: _tmp,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&["--otlp-endpoint", &url]).await;
    for _ in 0..2 {
        let (job_id, rows) = run_job(&sched, &ctx, "SELECT count(*) FROM t").await;
        assert_eq!(rows, Ok(1));
        completed_log(&logs, &job_id).await;
    }
    crate::harness::eventually("both failed sends are counted", || async {
        let (_, _, metrics) = get(&sched.url("/api/metrics")).await;
        let metrics = String::from_utf8(metrics).unwrap();
        counter(&metrics, "ballista_job_history_otlp_export_errors_total") == 2
            && counter(
                &metrics,
                "ballista_job_history_jobs_finished_total{status=\"completed\"}",
            ) == 2
            && counter(
                &metrics,
                "ballista_job_history_job_duration_seconds_count{status=\"completed\"}",
            ) == 2
    })
    .await;
}

/// Gives the upstream log `id` in `dir` a job name of `len` letters.
fn long_named(dir: &std::path::Path, id: &str, len: usize) {
    let path = dir.join(format!("{id}.eventlog"));
    let text = std::fs::read_to_string(&path).unwrap();
    let name = "n".repeat(len);
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            match v["ev"].as_str().unwrap() {
                "JobStart" => v["data"]["job_name"] = Value::from(name.clone()),
                "JobEnd" => v["data"]["index"]["job_name"] = Value::from(name.clone()),
                _ => return line.to_string(),
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

/// `--history-only --export-otlp` of `dir` to `url`.
fn export(dir: &std::path::Path, url: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args(["--history-only", "--export-otlp", "--otlp-endpoint", url])
        .arg("--event-log-dir")
        .arg(dir)
        .output()
        .unwrap()
}

/// The ids of the jobs whose job span `receiver` holds.
fn jobs_received(receiver: &Receiver) -> BTreeSet<String> {
    receiver
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.span.name == "ballista.job")
        .filter_map(|r| text(&r.span.attributes, "ballista.job.id"))
        .collect()
}

/// One job with a 5 MB name, once a request the receiver refused for its
/// size and the end of the whole export, is sent with its name cut; and a
/// job a receiver refuses for its own reasons costs only that job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_export_sends_every_job_a_receiver_takes_and_names_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let all: BTreeSet<String> = crate::sql::task_lines(tmp.path()).into_keys().collect();
    long_named(tmp.path(), "038HEXYEEG000", 5_000_000);
    let (receiver, url) = receiver().await;
    let out = export(tmp.path(), &url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(jobs_received(&receiver), all);
    let cut = receiver
        .0
        .lock()
        .unwrap()
        .iter()
        .find(|r| {
            text(&r.span.attributes, "ballista.job.id").as_deref() == Some("038HEXYEEG000")
                && r.span.name == "ballista.job"
        })
        .and_then(|r| text(&r.span.attributes, "ballista.job.name"))
        .unwrap();
    assert!(
        cut.len() <= 4096 && cut.ends_with('…'),
        "{} bytes",
        cut.len()
    );

    // A receiver that refuses one job: every other is sent, and the exit
    // status and the message say which was not.
    let (receiver, url) = receiver_refusing(Some("038HEY2RDJ000")).await;
    let out = export(tmp.path(), &url);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("038HEY2RDJ000"), "{said}");
    let mut rest = all.clone();
    rest.remove("038HEY2RDJ000");
    assert_eq!(jobs_received(&receiver), rest);
}
