//! Slot time: each job's busy and failed slot-milliseconds, as the list,
//! the SQL `jobs` table and the job page give them, against the sum over
//! the job's `TaskEnd` records read with upstream's own types.

use crate::harness::*;
use crate::sql::sql;
use ballista_api_types::dto::TaskStatus;
use ballista_history::event::{LogRecord, TaskEnd};
use std::collections::BTreeMap;

/// `(busy, failed)` slot-milliseconds of a log with one-slot tasks: each
/// attempt from its launch to its end, summed; computed here from
/// upstream's record types.
fn oracle(lines: &[String]) -> (u64, u64) {
    let mut busy = 0;
    let mut failed = 0;
    for line in lines {
        let record: LogRecord = serde_json::from_str(line).unwrap();
        if record.ev != "TaskEnd" {
            continue;
        }
        let task: TaskEnd = record.decode().unwrap();
        let span = task.end_exec_time - task.launch_time;
        busy += span;
        if !matches!(task.status, TaskStatus::Successful) {
            failed += span;
        }
    }
    (busy, failed)
}

fn slots_of(entry: &serde_json::Value) -> (u64, u64) {
    (
        entry["busy_slot_ms"].as_u64().expect("busy_slot_ms"),
        entry["failed_slot_ms"].as_u64().expect("failed_slot_ms"),
    )
}

/// The list's slot times, by job id.
async fn listed(proc: &Proc) -> BTreeMap<String, (u64, u64)> {
    let jobs = get_json(&proc.url("/api/jobs")).await;
    jobs.as_array()
        .unwrap()
        .iter()
        .map(|j| (j["job_id"].as_str().unwrap().to_string(), slots_of(j)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_jobs_slot_time_is_the_sum_of_its_attempts_spans_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 20_000);
    let mut sched = Proc::scheduler(&logs, &[]);
    sched.wait_healthy().await;
    // One slot: every task holds exactly one, so the oracle needs no rule
    // for how many a task holds.
    start_executor_with(sched.port, 1).await;
    let ctx = client_with(
        sched.port,
        &data,
        &[("datafusion.execution.target_partitions", "4")],
    )
    .await;
    let (ok, result) = run_job(&sched, &ctx, "SELECT k, count(*), sum(v) FROM t GROUP BY k").await;
    assert_eq!(result, Ok(100));
    let (bad, result) = run_job(&sched, &ctx, "SELECT CAST(s AS INT) FROM t").await;
    assert!(result.is_err());
    let mut want = BTreeMap::new();
    for id in [&ok, &bad] {
        let lines = completed_log(&logs, id).await;
        let footer: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
        want.insert(id.clone(), oracle(&lines));
        assert_eq!(slots_of(&footer["data"]), want[id], "{id}: the footer");
    }
    let (busy, failed) = want[&ok];
    assert!(busy > 0 && failed == 0, "{busy} {failed}");
    let (busy, failed) = want[&bad];
    assert!(failed > 0 && failed <= busy, "{busy} {failed}");

    // The live scheduler's list, once each log is complete.
    let live = wait_for("the list states both jobs' slot times", || async {
        let got = listed(&sched).await;
        (got.len() == 2).then_some(got)
    })
    .await;
    assert_eq!(live, want, "the live list");
    // SQL's `jobs`, made from the records rather than the footer.
    let rows = sql(
        &sched,
        "SELECT job_id, busy_slot_ms, failed_slot_ms FROM jobs ORDER BY job_id",
    )
    .await;
    let from_sql: BTreeMap<String, (u64, u64)> = rows
        .iter()
        .map(|r| (r["job_id"].as_str().unwrap().to_string(), slots_of(r)))
        .collect();
    assert_eq!(from_sql, want, "SQL");
    // The job page says it, from the records too.
    let (_, _, page) = get(&sched.url(&format!("/ui/job/{bad}"))).await;
    let page = String::from_utf8(page).unwrap();
    assert!(page.contains("Slot time"), "{page}");
    assert!(page.contains("in failed attempts"), "{page}");
    assert!(sched.terminate().success());

    // A history server over the directory, then again from its index.
    for round in ["indexed from the logs", "loaded from the index"] {
        let mut hist = Proc::history(&logs, &[]);
        hist.wait_healthy().await;
        assert_eq!(listed(&hist).await, want, "{round}");
        assert!(hist.terminate().success());
    }
}
