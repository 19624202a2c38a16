//! The library entry point: a recording scheduler on an already-bound
//! listener, stopped by its shutdown future.

use crate::harness::*;
use ballista_core::config::TaskSchedulingPolicy;
use ballista_job_history::{HistoryOptions, run_scheduler};
use ballista_scheduler::config::SchedulerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_embedded_scheduler_records_and_drains_on_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 300);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = SchedulerConfig::default()
        .with_hostname("127.0.0.1")
        .with_port(port)
        .with_scheduler_policy(TaskSchedulingPolicy::PullStaged);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(run_scheduler(
        listener,
        config,
        Some(HistoryOptions::new(&logs)),
        async {
            let _ = stop_rx.await;
        },
    ));
    start_executor(port).await;
    let ctx = client(port, &data).await;
    let batches = ctx
        .sql("SELECT k, count(*) FROM t GROUP BY k")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 100);

    // Shut down as soon as the client has its answer: the job's log is
    // complete when `run_scheduler` returns, with no waiting on our side.
    stop_tx.send(()).unwrap();
    let finished = tokio::time::timeout(DEADLINE, server).await;
    finished
        .expect("the scheduler stops")
        .unwrap()
        .expect("a clean shutdown");
    // The logs (the snapshot of the list is saved beside them on shutdown,
    // now that the store takes in each log as it completes).
    let snapshot = ballista_job_history::store::snapshot::DEFAULT_FILE_NAME;
    let completed: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != snapshot)
        .collect();
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert!(completed[0].ends_with(".eventlog"), "{completed:?}");
    let text = std::fs::read_to_string(logs.join(&completed[0])).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert_whole(&lines);
}
