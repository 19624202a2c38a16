//! Replays that cannot stall the port: the what-if, the accuracy grades
//! and the diagnosis of logs worth a million replay units (tasks times
//! the partitions each computed) run off the async threads behind one
//! gate, each client with its share, and what they compute is kept by the
//! logs' identity. Against the real binary: `/healthz` answers within
//! 100 ms while they run, and the same question about unchanged logs is
//! computed once (the server's own counters say which).

use crate::harness::*;
use crate::neighbours::healthy_during;
use serde_json::json;
use std::path::Path;

fn line(kind: &str, data: serde_json::Value) -> String {
    format!("{}\n", json!({"ev": kind, "version": 1, "data": data}))
}

/// A run of the query `plan`: `tasks` tasks of one stage on four
/// executors of many slots, each computing `partitions` partitions (as its
/// stored `/stages` answer says), `tasks * partitions` replay units in
/// all; `slow` makes every task that much longer. Dated in the past.
fn write_heavy_run(dir: &Path, id: &str, plan: &str, (tasks, partitions): (u32, u32), slow: u64) {
    let base = 1_700_000_000_000u64;
    let mut text = line(
        "JobStart",
        json!({"job_id": id, "job_name": "heavy", "queued_at": base - 10,
               "submitted_at": base - 5, "logical_plan": plan,
               "physical_plan": "DataSourceExec"}),
    );
    let mut answers = Vec::new();
    let mut ends = [base; 4];
    for task in 0..tasks {
        let lane = task as usize % ends.len();
        let ms = 100 + u64::from(task % 7) + slow;
        let begin = ends[lane];
        ends[lane] += ms;
        text += &line(
            "TaskEnd",
            json!({"stage_id": 1, "task_id": task, "executor_id": format!("exec-{lane}"),
                   "status": "Successful", "launch_time": begin, "start_exec_time": begin,
                   "end_exec_time": begin + ms,
                   "metrics": {"input_rows": 1_000, "output_rows": 10,
                               "elapsed_compute_nanos": ms * 1_000_000}}),
        );
        let first = task * partitions;
        answers.push(
            json!({"id": task, "partition_id": (first..first + partitions).collect::<Vec<_>>(),
                            "launch_time": begin, "start_exec_time": begin,
                            "end_exec_time": begin + ms, "finish_time": begin + ms}),
        );
    }
    let end = ends.into_iter().max().unwrap();
    let index = json!({"job_id": id, "job_name": "heavy", "status": "Completed",
                       "job_status": "Completed", "start_time": base - 5, "end_time": end,
                       "num_stages": 1, "completed_stages": 1, "percent_complete": 100});
    let stages = json!({"stages": [{"stage_id": "1", "stage_status": "Completed",
                                    "stage_plan": "ShuffleWriterExec\n  DataSourceExec",
                                    "tasks": answers}]});
    text += &line(
        "JobEnd",
        json!({"status": "Succeeded", "queued_at": base - 10, "started_at": base - 5,
               "completed_at": end, "index": index,
               "job": {"job_id": id, "logical_plan": plan},
               "stages": stages, "config": {}, "dot": "digraph G {}"}),
    );
    std::fs::write(dir.join(format!("{id}.eventlog")), text).unwrap();
}

/// A client whose connections come from `from`, another address of the
/// loopback network.
fn client_from(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from(from))
        .build()
        .unwrap()
}

async fn heavy_counters(server: &Proc) -> (u64, u64) {
    let (_, _, body) = get(&server.url("/api/metrics")).await;
    let body = String::from_utf8_lossy(&body);
    (
        counter(&body, "ballista_job_history_heavy_computed_total"),
        counter(&body, "ballista_job_history_heavy_kept_total"),
    )
}

/// A regression test: the what-if of a log worth a million replay units
/// was computed again for every request (1.05 to 1.35 s of CPU each,
/// none kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_what_if_of_an_unchanged_log_is_computed_once_and_the_port_answers_meanwhile() {
    let _heavy = HEAVY.write().await;
    let tmp = tempfile::tempdir().unwrap();
    write_heavy_run(tmp.path(), "heavy", "TableScan: heavy", (1_000, 1_000), 0);
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let url = server.url("/api/job/heavy/whatif?graded=false");
    let (computed, _) = heavy_counters(&server).await;
    let first = healthy_during(&server, 10, get_json(&url)).await;
    assert_eq!(first["job_id"], "heavy", "{first}");
    assert!(!first["curve"].as_array().unwrap().is_empty(), "{first}");
    let (after_first, kept) = heavy_counters(&server).await;
    assert!(after_first > computed, "the first request computes");
    // Asked again, of the same log: kept, nothing computed.
    let second = get_json(&url).await;
    assert_eq!(second, first);
    let (after_second, kept_after) = heavy_counters(&server).await;
    assert_eq!(
        after_second, after_first,
        "the second request computed again"
    );
    assert!(kept_after > kept);
    // The diagnosis of the same log reads its tasks once more at most,
    // and is kept too.
    let d = get_json(&server.url("/api/job/heavy/diagnosis")).await;
    let (after_diagnosis, _) = heavy_counters(&server).await;
    assert_eq!(get_json(&server.url("/api/job/heavy/diagnosis")).await, d);
    assert_eq!(heavy_counters(&server).await.0, after_diagnosis);
    server.terminate();
}

/// A regression test: six `/api/whatif/accuracy` requests at once over 16
/// runs of one query replayed on the async threads and stalled `/healthz`
/// for 3.7 to 4.0 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn six_accuracy_requests_at_once_leave_the_port_answering_and_grade_each_pair_once() {
    let _heavy = HEAVY.write().await;
    let tmp = tempfile::tempdir().unwrap();
    for run in 0..16u64 {
        let id = format!("run-{run:02}");
        write_heavy_run(
            tmp.path(),
            &id,
            "TableScan: recurring",
            (400, 1_000),
            run * 3,
        );
    }
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let url = server.url("/api/whatif/accuracy");
    // Six clients (addresses), one request each.
    let asked = futures::future::join_all(
        (0..6u8).map(|i| client_from([127, 0, 0, 30 + i]).get(&url).send()),
    );
    let answers = healthy_during(&server, 20, asked).await;
    let mut graded = Vec::new();
    for answer in answers {
        let answer = answer.expect("answered");
        assert_eq!(answer.status(), 200);
        let body: serde_json::Value = answer.json().await.unwrap();
        graded.push(body["pairs"].as_array().map_or(0, Vec::len));
    }
    // Fifteen pairs of consecutive runs, each answer whole.
    assert!(graded.iter().all(|&n| n == 15), "{graded:?}");
    // One client asking six at once: its share (four) answered, the rest
    // told to ask again.
    let one = client_from([127, 0, 0, 40]);
    let statuses: Vec<u16> = futures::future::join_all((0..6).map(|_| one.get(&url).send()))
        .await
        .into_iter()
        .map(|r| r.expect("answered").status().as_u16())
        .collect();
    assert!(
        statuses.iter().filter(|&&s| s == 200).count() >= 4,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 429),
        "{statuses:?}"
    );
    let (computed, _) = heavy_counters(&server).await;
    // Each pair graded once and each log read once at most (the logs'
    // inputs are kept eight at a time, the pairs walked in order).
    assert!(
        computed <= 15 + 16,
        "{computed} pieces computed for 15 pairs of 16 logs"
    );
    server.terminate();
}
