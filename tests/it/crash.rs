//! Crashes and backpressure.

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_job_leaves_running_files_and_whole_completed_logs() {
    let Cluster {
        tmp: _tmp,
        logs,
        mut sched,
        ctx,
        ..
    } = Cluster::start(&[]).await;

    let mut finished = Vec::new();
    for sql in [
        "SELECT count(*) FROM t",
        "SELECT k, max(v) FROM t GROUP BY k",
        "SELECT min(s) FROM t",
    ] {
        let (id, result) = run_job(&sched, &ctx, sql).await;
        assert!(result.is_ok());
        finished.push(id);
    }
    let before = job_ids(&sched).await;
    let heavy = spawn_heavy(&ctx);
    let running: String = wait_for("the heavy job's log is on disk", || {
        let before = before.clone();
        let logs = logs.clone();
        let sched = &sched;
        async move {
            let id = job_ids(sched)
                .await
                .into_iter()
                .find(|j| !before.contains(j))?;
            let path = logs.join(format!("{id}.eventlog.running"));
            (std::fs::metadata(&path).ok()?.len() > 0).then_some(id)
        }
    })
    .await;
    sched.kill();
    heavy.abort();

    for id in &finished {
        assert_whole(&completed_log(&logs, id).await);
        assert!(!logs.join(format!("{id}.eventlog.running")).exists());
    }
    assert!(!logs.join(format!("{running}.eventlog")).exists());
    let partial =
        std::fs::read_to_string(logs.join(format!("{running}.eventlog.running"))).unwrap();
    assert!(partial.starts_with("{\"ev\":\"JobStart\""));

    // A restarted scheduler on the same directory lists the finished jobs,
    // and not the one it never finished.
    let mut again = Proc::scheduler(&logs, &[]);
    again.wait_healthy().await;
    eventually("the finished jobs are listed after the restart", || async {
        let ids = job_ids(&again).await;
        finished.iter().all(|f| ids.contains(f))
    })
    .await;
    assert!(!job_ids(&again).await.contains(&running));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_queue_drops_and_counts_progress_but_every_job_ends() {
    // A queue of zero keeps no progress record at all: every task report is
    // dropped, deterministically.
    let Cluster {
        tmp: _tmp,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&["--event-log-queue-capacity", "0"]).await;
    let mut total_dropped = 0;
    for _ in 0..3 {
        let (id, result) = run_job(&sched, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
        assert_eq!(result, Ok(100));
        let lines = completed_log(&logs, &id).await;
        assert_whole(&lines);
        assert!(!kinds(&lines).contains(&"TaskEnd".to_string()));
        let dropped = job_end(&lines)["dropped_records"].as_u64().unwrap();
        let tasks: usize = serde_json::from_str::<serde_json::Value>(&raw_field(&lines, "stages"))
            .unwrap()["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["tasks"].as_array().unwrap().len())
            .sum();
        assert_eq!(
            dropped as usize, tasks,
            "every finished task was counted as dropped"
        );
        total_dropped += dropped;
    }
    let metrics = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("ballista_job_history_dropped_records_total "))
        .expect("the drop counter is exported");
    let counted: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(counted, total_dropped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unusable_log_directory_never_stops_scheduling() {
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 500);
    // The log directory's parent is a regular file: nothing can be created.
    let blocker = tmp.path().join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let logs = blocker.join("logs");
    let mut sched = Proc::scheduler(&logs, &[]);
    sched.wait_healthy().await;
    start_executor(sched.port).await;
    let ctx = client(sched.port, &data).await;
    for _ in 0..3 {
        let (_, result) = run_job(&sched, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
        assert_eq!(result, Ok(100), "jobs complete for their client");
    }
    let errors: u64 = wait_for("the failures are counted", || async {
        let metrics = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
        let n: u64 = metrics
            .lines()
            .find(|l| l.starts_with("ballista_job_history_write_errors_total "))?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()?;
        (n >= 3).then_some(n)
    })
    .await;
    assert!(errors >= 3);
    // The live scheduler still serves its jobs.
    assert_eq!(job_ids(&sched).await.len(), 3);
}
