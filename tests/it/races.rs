//! Races and odd combinations: orders of events that concurrent tasks can
//! produce, and two servers in one process (an embedder's). The object
//! store pinned to its first scan is in `bucket.rs`, with moto.

use axum::body::Body;
use ballista_api_types::dto::TaskStatus;
use ballista_job_history::history_router;
use bjh_format::record::{
    JobEnd, JobEndStatus, JobIndex, JobStart, TaskEnd, TaskMetrics, raw_or_null,
};
use bjh_metrics::HistoryMetrics;
use bjh_recording::writer::{self, WriterConfig, WriterMsg};
use bjh_store::LogStore;
use http::Request;
use std::sync::Arc;
use tower::ServiceExt;

const SECRET: &str = "hunter2-AKIA-5ecret";

fn failed_task() -> TaskEnd {
    TaskEnd {
        stage_id: 1,
        task_id: 0,
        executor_id: "e1".into(),
        status: TaskStatus::Failed {
            reason: "ExecutionError".into(),
            error: format!("cannot reach s3://bucket/?key={SECRET}"),
        },
        launch_time: 1,
        start_exec_time: 2,
        end_exec_time: 3,
        metrics: TaskMetrics::default(),
        stage_attempt: 0,
    }
}

/// A job's `End` that reaches the writer before its `Secrets` (the two
/// are sent by concurrent tasks of the capturer; a job that ends at once
/// can win the race) still has its held task lines scrubbed: before, they
/// were written with the secret in them.
#[test]
fn a_jobs_end_before_its_secrets_still_scrubs_its_task_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (handle, thread) = writer::spawn(
        WriterConfig::new(dir.path()),
        Arc::new(HistoryMetrics::unregistered()),
    )
    .unwrap();
    let job = "raced";
    // A task line held (no `Start` yet), then the end, then the secrets.
    assert!(handle.try_progress(WriterMsg::Tasks {
        job_id: job.into(),
        tasks: vec![failed_task()],
    }));
    handle.send(WriterMsg::End {
        job_id: job.into(),
        fallback_start: JobStart {
            job_id: job.into(),
            ..JobStart::default()
        },
        stages: vec![],
        end: Box::new(JobEnd {
            status: JobEndStatus::Failed("failed".into()),
            queued_at: 1,
            started_at: 2,
            completed_at: 3,
            index: JobIndex {
                job_id: job.into(),
                ..JobIndex::default()
            },
            job: raw_or_null("{}"),
            stages: raw_or_null(r#"{"stages":[]}"#),
            config: raw_or_null("{}"),
            dot: String::new(),
            dropped_records: 0,
            responses: Default::default(),
        }),
        secrets: vec![SECRET.into()],
    });
    handle.send(WriterMsg::Secrets {
        job_id: job.into(),
        values: vec![SECRET.into()],
    });
    drop(handle);
    thread.join().unwrap();
    let text = std::fs::read_to_string(dir.path().join(format!("{job}.eventlog"))).unwrap();
    assert!(text.contains(r#""ev":"TaskEnd""#), "{text}");
    assert!(
        !text.contains(SECRET),
        "the secret reached the disk:\n{text}"
    );
}

/// `GET path` on `router` from `ip`: status and body.
async fn get_from(router: &axum::Router, path: &str, ip: [u8; 4]) -> (u16, axum::body::Body) {
    let mut request = Request::get(path).body(Body::empty()).unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
            ip, 1,
        ))));
    let response = router.clone().oneshot(request).await.unwrap();
    (response.status().as_u16(), response.into_body())
}

/// The history router over a directory holding the first `n` fixtures.
fn server_over(n: usize) -> (axum::Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut names: Vec<_> = std::fs::read_dir(crate::history::FIXTURES)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "eventlog"))
        .collect();
    names.sort();
    for path in names.iter().take(n) {
        std::fs::copy(path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    let store = Arc::new(LogStore::new(
        dir.path(),
        Arc::new(HistoryMetrics::unregistered()),
    ));
    store.rescan();
    (history_router(store, None, None), dir)
}

/// The jobs the job-level gauge of a `/api/metrics` answer counts, in
/// every state.
fn jobs_in_gauge(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("ballista_job_history_jobs{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Two servers in one process (an embedder's) keep their own live-page
/// streams and their own job-level series: before, both shared one stream
/// cap and the series of whichever attached first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_in_one_process_keep_their_own_streams_and_series() {
    let (a, _a_dir) = server_over(2);
    let (b, _b_dir) = server_over(5);
    for (router, jobs) in [(&a, 2), (&b, 5)] {
        let (status, body) = get_from(router, "/api/metrics", [10, 0, 0, 1]).await;
        assert_eq!(status, 200);
        let text = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let text = String::from_utf8_lossy(&text);
        assert_eq!(jobs_in_gauge(&text), jobs, "{text}");
    }
    // Server a's streams, as many as it grants, from many clients: server
    // b's are its own.
    let mut held = Vec::new();
    for i in 0..300u16 {
        let [hi, lo] = i.to_be_bytes();
        let (status, body) = get_from(&a, "/ui/events", [10, 1, hi, lo]).await;
        if status != 200 {
            assert_eq!(status, 503, "past the server's streams");
            break;
        }
        held.push(body);
    }
    assert!(
        !held.is_empty() && held.len() < 300,
        "{} streams",
        held.len()
    );
    let (status, _b_stream) = get_from(&b, "/ui/events", [10, 2, 0, 1]).await;
    assert_eq!(status, 200, "server b is not out of streams for server a's");
}
