//! The plugin, embedded: `examples/embedded.rs` (a scheduler built by hand
//! with its own codec and `JobHistory`) records a real job from a real
//! executor and serves it, and a history-only server serves the same log.

use crate::harness::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The example's executable.
fn example() -> PathBuf {
    example_binary("embedded")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_example_scheduler_records_a_real_job_and_serves_it() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 300);
    let port = free_port();
    let out = tmp.path().join("stdout");
    let child = Command::new(example())
        .args([port.to_string(), logs.display().to_string()])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .expect("the example starts");
    let mut scheduler = Proc::adopt(child, port);
    scheduler.wait_healthy().await;
    start_executor(port).await;
    let ctx = client(port, &data).await;
    let (job_id, rows) = run_job(&scheduler, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
    assert_eq!(rows, Ok(100));

    // Recorded: a whole log with the job's tasks, as the executor ran them.
    let lines = completed_log(&logs, &job_id).await;
    assert_whole(&lines);
    assert!(
        kinds(&lines).iter().any(|k| k == "TaskEnd"),
        "{:?}",
        kinds(&lines)
    );
    assert_eq!(job_end(&lines)["status"], "Succeeded");

    // Served: the job's page and answers through the plugin's routes.
    let (status, _, body) = get(&scheduler.url(&format!("/ui/job/{job_id}"))).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains(&job_id));
    let stages = get_json(&scheduler.url(&format!("/api/job/{job_id}/stages"))).await;
    assert!(!stages["stages"].as_array().unwrap().is_empty(), "{stages}");
    // SQL: its worker is the example's own executable, which never calls
    // `run_if_worker` (a regression test: the worker ran the example as a
    // second scheduler, killed by the limit on files, "signal 25").
    let rows = crate::sql::sql(
        &scheduler,
        "SELECT job_id, count(*) AS n FROM jobs GROUP BY job_id",
    )
    .await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["job_id"], job_id.as_str());
    assert_eq!(rows[0]["n"], 1);

    // Stopped by SIGTERM: a clean exit, and the scheduler's own codec wrote
    // the plans the executor ran.
    let status = scheduler.terminate();
    assert!(status.success(), "{status:?}");
    let said = std::fs::read_to_string(&out).unwrap();
    let plans: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("stopped; "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the example says how many plans it encoded: {said}"));
    assert!(plans > 0, "{said}");

    // The same log, served by our binary with no cluster.
    let mut history = Proc::history(&logs, &[]);
    history.wait_healthy().await;
    assert_eq!(job_ids(&history).await, [job_id]);
}
