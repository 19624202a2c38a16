//! The routes that explain jobs, over HTTP against the real binary: the
//! diagnosis of upstream's logs, of a generated log with a planted
//! straggler, and of real jobs; recurring queries by query hash; and the
//! comparison of two runs.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;

fn line(ev: &str, data: Value) -> String {
    json!({"ev": ev, "version": 1, "data": data}).to_string() + "\n"
}

/// A completed log of 2 executors x 8 tasks of 2 s each in one stage, the
/// last task of `exec-0` running `slow_ms` instead, on the same rows.
pub(crate) fn write_straggler_log(dir: &Path, id: &str, slow_ms: u64) {
    write_run(dir, id, "TableScan: t", 2, 16, slow_ms);
}

/// A run of the query `plan` on `lanes` executors of one slot: `tasks`
/// tasks of one stage, task `i` on executor `i % lanes` after the one
/// before it there, each of `2,000 + i` ms but task 14's, which takes
/// `slow_ms`; the job starts 5 ms before the first task and ends with
/// the last.
pub(crate) fn write_run(dir: &Path, id: &str, plan: &str, lanes: usize, tasks: u32, slow_ms: u64) {
    write_run_by(dir, id, (plan, None), lanes, tasks, slow_ms);
}

/// [`write_run`] of the query `plan` by the scheduler `scheduler`.
pub(crate) fn write_run_by(
    dir: &Path,
    id: &str,
    (plan, scheduler): (&str, Option<&str>),
    lanes: usize,
    tasks: u32,
    slow_ms: u64,
) {
    let base = 1_700_000_000_000u64;
    let mut text = line(
        "JobStart",
        json!({"job_id": id, "job_name": "planted", "queued_at": base - 10,
               "submitted_at": base - 5, "logical_plan": plan,
               "physical_plan": "DataSourceExec", "scheduler_id": scheduler}),
    );
    let mut ends = vec![base; lanes];
    for task in 0..tasks {
        let lane = task as usize % lanes;
        let ms = if task == 14 {
            slow_ms
        } else {
            2_000 + u64::from(task)
        };
        let begin = ends[lane];
        ends[lane] += ms;
        text += &line(
            "TaskEnd",
            json!({"stage_id": 1, "task_id": task, "executor_id": format!("exec-{lane}"),
                   "status": "Successful", "launch_time": begin, "start_exec_time": begin,
                   "end_exec_time": begin + ms,
                   "metrics": {"input_rows": 50_000, "output_rows": 10,
                               "elapsed_compute_nanos": ms * 1_000_000}}),
        );
    }
    let end = ends.into_iter().max().unwrap();
    let index = json!({"job_id": id, "job_name": "planted", "status": "Completed",
                       "job_status": "Completed", "start_time": base - 5, "end_time": end,
                       "num_stages": 1, "completed_stages": 1, "percent_complete": 100});
    let job_end = line(
        "JobEnd",
        json!({"status": "Succeeded", "queued_at": base - 10, "started_at": base - 5,
               "completed_at": end, "index": index,
               "job": {"job_id": id, "logical_plan": plan},
               "stages": {"stages": []}, "config": {}, "dot": "digraph G {}"}),
    );
    let offset = text.len();
    text += &job_end;
    // A scheduler is named where our logs name it: the footer, which
    // locates the `JobEnd` line.
    if let Some(scheduler) = scheduler {
        text += &line(
            "Footer",
            json!({"job_end_offset": offset, "job_end_len": job_end.trim_end().len(),
                   "status": "Succeeded", "queued_at": base - 10, "index": index,
                   "dropped_records": 0, "scheduler_id": scheduler}),
        );
    }
    std::fs::write(dir.join(format!("{id}.eventlog")), text).unwrap();
}

/// No piece of a diagnosis' advice was checked by a next run.
fn no_advice_checked(diagnosis: &Value) -> bool {
    let advice = diagnosis["advice"].as_array().unwrap();
    advice.iter().all(|a| a["next_run"].is_null())
}

fn kinds(diagnosis: &Value) -> Vec<String> {
    diagnosis["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Upstream's logs are diagnosed without a false alarm (the failed job's
/// failed attempt aside), and a planted straggler is found, with the
/// evidence its log was written with.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_logs_are_healthy_and_a_planted_straggler_is_found() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(&fixtures).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if let Some(id) = name.strip_suffix(".eventlog") {
            std::fs::copy(&path, dir.join(&name)).unwrap();
            ids.push(id.to_string());
        }
    }
    write_straggler_log(dir, "planted", 9_000);
    let mut server = Proc::history(dir, &[]);
    server.wait_healthy().await;
    eventually("every log is indexed", || async {
        job_ids(&server).await.len() == ids.len() + 1
    })
    .await;

    for id in &ids {
        let d = get_json(&server.url(&format!("/api/job/{id}/diagnosis"))).await;
        let text = std::fs::read_to_string(dir.join(format!("{id}.eventlog"))).unwrap();
        // Counted apart: the log's failed task records.
        let failed = text
            .lines()
            .filter(|l| l.starts_with(r#"{"ev":"TaskEnd""#) && l.contains(r#""Failed""#))
            .count();
        let expected: Vec<&str> = if failed > 0 {
            vec!["failed_tasks"]
        } else {
            vec![]
        };
        assert_eq!(kinds(&d), expected, "{id}: {d:#}");
        assert_eq!(d["failed_attempts"], failed, "{id}");
        assert_eq!(d["partial"], false, "{id}");
    }

    let d = get_json(&server.url("/api/job/planted/diagnosis")).await;
    assert_eq!(kinds(&d), ["straggler"], "{d:#}");
    let f = &d["findings"][0];
    assert_eq!(f["stage_id"], 1);
    assert_eq!(f["tasks"], json!([14]));
    assert_eq!(f["executor"], "exec-0");
    assert_eq!(f["evidence"]["duration_ms"], 9_000);
    // The nearest-rank p75 of the 16 durations: 2,000 + task id for the
    // others, 9,000 for task 14; the 12th smallest is task 11's.
    assert_eq!(f["evidence"]["p75_ms"], 2_011);
    assert_eq!(d["query_hash"].as_str().unwrap().len(), 16);

    // Bad input: unknown jobs, odd ids, unknown parameters.
    for (path, status) in [
        ("/api/job/nope/diagnosis", 404),
        ("/api/job/%3Cscript%3E/diagnosis", 404),
        ("/api/compare?a=planted", 400),
        ("/api/compare?a=planted&b=nope", 404),
        ("/api/queries?limit=0", 400),
        ("/api/queries?limit=x", 400),
        ("/api/compare?a=planted&a=x&b=planted", 400),
        ("/api/jobs?query_hash=xyz", 400),
    ] {
        let (got, _, body) = get(&server.url(path)).await;
        assert_eq!(got, status, "{path}: {}", String::from_utf8_lossy(&body));
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["http_code"], status, "{path}");
    }
    // One policy for a parameter a route does not take, on every route:
    // ignored, the answer the same as without it, and the name in a header.
    for (path, extra) in [
        ("/api/job/planted/diagnosis", "x=1"),
        ("/api/queries", "sort=x"),
        ("/api/job/planted/timeline", "colour=red"),
        ("/api/compare?a=planted&b=planted", "c=1"),
    ] {
        let sep = if path.contains('?') { '&' } else { '?' };
        let answer = |url: String| async move {
            let r = http_client().get(url).send().await.unwrap();
            let ignored = r.headers().get("x-ballista-ignored-params").cloned();
            (r.status().as_u16(), ignored, r.bytes().await.unwrap())
        };
        let (status, ignored, body) = answer(server.url(&format!("{path}{sep}{extra}"))).await;
        let (plain_status, plain_ignored, plain) = answer(server.url(path)).await;
        assert_eq!((status, plain_status), (200, 200), "{path}");
        assert_eq!(body, plain, "{path}");
        let name = extra.split('=').next().unwrap();
        assert_eq!(ignored.unwrap(), name, "{path}");
        assert!(plain_ignored.is_none(), "{path}");
    }
}

/// Two runs of the same SQL through a real cluster share a query hash,
/// another query gets another; the list filters by it, the queries route
/// groups by it, and the comparison of the two runs says they are the same
/// query while a comparison with the other says it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recurring_queries_and_comparisons_of_real_runs() {
    let cluster = Cluster::start(&[]).await;
    let sched = &cluster.sched;
    let same = "SELECT k, count(*) FROM t WHERE v > 10 GROUP BY k";
    let other = "SELECT max(v) FROM t";
    let (first, r1) = run_job(sched, &cluster.ctx, same).await;
    let (second, r2) = run_job(sched, &cluster.ctx, same).await;
    let (third, r3) = run_job(sched, &cluster.ctx, other).await;
    assert_eq!((r1, r2, r3), (Ok(100), Ok(100), Ok(1)));
    for id in [&first, &second, &third] {
        completed_log(&cluster.logs, id).await;
    }

    let hash_of = |d: &Value| d["query_hash"].as_str().unwrap().to_string();
    let d1 = get_json(&sched.url(&format!("/api/job/{first}/diagnosis"))).await;
    let d2 = get_json(&sched.url(&format!("/api/job/{second}/diagnosis"))).await;
    let d3 = get_json(&sched.url(&format!("/api/job/{third}/diagnosis"))).await;
    assert_eq!(hash_of(&d1), hash_of(&d2));
    assert_ne!(hash_of(&d1), hash_of(&d3));
    // A healthy small job: no skew, no straggler, nothing failed.
    assert!(
        !kinds(&d1)
            .iter()
            .any(|k| ["skew", "straggler", "failed_tasks", "retry_storm"].contains(&k.as_str())),
        "{d1:#}"
    );
    // Counted apart: the log's task records.
    let lines = completed_log(&cluster.logs, &first).await;
    let tasks = lines
        .iter()
        .filter(|l| l.starts_with(r#"{"ev":"TaskEnd""#))
        .count();
    assert_eq!(d1["task_attempts"], tasks);
    // Its start recorded the cluster: the one executor the harness
    // started, with its 2 slots, as upstream's `/api/executors` names it;
    // the what-if starts from that shape rather than inferring one.
    let start: Value = serde_json::from_str(&lines[0]).unwrap();
    let registered = get_json(&sched.url("/api/executors")).await;
    let id = registered[0]["id"].as_str().unwrap();
    assert_eq!(start["data"]["executors"], json!([{"id": id, "slots": 2}]));
    let whatif = |e: u32, s: u32| {
        let url = sched.url(&format!("/api/job/{first}/whatif?executors={e}&slots={s}"));
        async move { get_json(&url).await }
    };
    let (one, two) = (whatif(1, 1).await, whatif(1, 2).await);
    assert_eq!(
        one["observed_shape"],
        json!({"executors": 1, "slots": 2, "inferred": false})
    );
    let ms = |w: &Value, k: &str| w[k].as_u64().unwrap();
    assert!(
        ms(&one, "ideal_ms") >= ms(&two, "ideal_ms"),
        "{one:#} {two:#}"
    );
    assert!(ms(&one, "critical_path_ms") <= ms(&one, "predicted_ms"));
    assert_eq!(
        ms(&one, "predicted_ms"),
        ms(&one, "ideal_ms"),
        "one slot: one at a time"
    );

    // The list, filtered by hash: the two runs, whether the scheduler
    // still holds them or not.
    let listed = get_json(&sched.url(&format!("/api/jobs?query_hash={}", hash_of(&d1)))).await;
    let mut listed: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut expected = [first.as_str(), second.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected);

    let queries = get_json(&sched.url("/api/queries")).await;
    assert_eq!(queries["total"], 2);
    let row = |hash: &str| {
        queries["queries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["query_hash"] == hash)
            .cloned()
            .unwrap()
    };
    let repeated = row(&hash_of(&d1));
    assert_eq!(repeated["runs"], 2);
    assert_eq!(repeated["last_job_id"], second.as_str());
    assert_eq!(repeated["last_status"], "Completed");
    assert_eq!(row(&hash_of(&d3))["runs"], 1);

    let c = get_json(&sched.url(&format!("/api/compare?a={first}&b={second}"))).await;
    assert_eq!(c["same_query"], true, "{c:#}");
    assert!(c["note"].is_null());
    assert_eq!(c["a"]["job_id"], first.as_str());
    assert_eq!(c["plan_diff"], "", "the same plan");
    assert!(c["unmatched_stages"]["a"].as_array().unwrap().is_empty());
    assert_eq!(
        c["stages"].as_array().unwrap().len(),
        c["a"]["stages"].as_u64().unwrap() as usize,
        "every stage pairs with its twin"
    );
    let c = get_json(&sched.url(&format!("/api/compare?a={first}&b={third}"))).await;
    assert_eq!(c["same_query"], false);
    assert!(c["note"].as_str().unwrap().contains("different queries"));
    assert!(c["plan_diff"].as_str().unwrap().starts_with("--- "));
}

/// `GET /api/job/{id}/whatif` on the planted straggler, whose answers are
/// worked out from how the log was written: 16 tasks on two executors of
/// one slot, 2,000 + id ms each but task 14's 9,000, from 5 ms after the
/// job's start; and the bounds a request cannot pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_what_if_replays_the_planted_job_as_worked_out_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_straggler_log(dir, "planted", 9_000);
    // A job still running: its log has no end.
    std::fs::write(
        dir.join("unended.eventlog.running"),
        line(
            "JobStart",
            json!({"job_id": "unended", "job_name": "x", "queued_at": 1, "submitted_at": 2,
                   "logical_plan": "TableScan: t", "physical_plan": "DataSourceExec"}),
        ),
    )
    .unwrap();
    let mut server = Proc::history(dir, &[]);
    server.wait_healthy().await;
    eventually("both logs are indexed", || async {
        job_ids_where(&server, "include_unfinished=true")
            .await
            .len()
            == 2
    })
    .await;
    let durations: Vec<u64> = (0..16u64)
        .map(|t| if t == 14 { 9_000 } else { 2_000 + t })
        .collect();
    let sum: u64 = durations.iter().sum();
    // Lane 0 ran the even tasks back to back, lane 1 the odd ones.
    let lane = |parity| -> u64 { durations.iter().skip(parity).step_by(2).sum() };
    let observed = 5 + lane(0).max(lane(1));
    let whatif = |query: &str| {
        let url = server.url(&format!("/api/job/planted/whatif{query}"));
        async move { get_json(&url).await }
    };

    let w = whatif("").await;
    assert_eq!(w["observed_ms"], observed, "{w:#}");
    assert_eq!(
        w["observed_shape"],
        json!({"executors": 2, "slots": 1, "inferred": true})
    );
    // Handed out in id order to the slot free first, the tasks fall on the
    // lanes they ran on: the replay is the run.
    assert_eq!(w["replayed_ms"], observed);
    assert_eq!(w["predicted_ms"], observed);
    assert_eq!(w["critical_path_ms"], 5 + 9_000);
    assert_eq!(w["ideal_ms"], 5 + sum.div_ceil(2));
    // Task 14 starts at once only with 15 slots; with 14 it waits for
    // task 0 (2,000 ms), beyond 10% of the floor.
    let curve = w["curve"].as_array().unwrap();
    assert_eq!(curve.len(), 15, "{w:#}");
    assert_eq!(curve[0]["predicted_ms"], 5 + sum);
    assert_eq!(curve[14]["predicted_ms"], 5 + 9_000);
    assert_eq!(curve[13]["predicted_ms"], 5 + 2_000 + 9_000);
    assert_eq!(w["knee"]["total_slots"], 15);

    // One run of one query: nothing to grade yet, and no log read.
    let graded = get_json(&server.url("/api/whatif/accuracy")).await;
    assert_eq!(graded["across_shapes"]["pairs"], 0);
    assert_eq!(graded["same_shape"]["pairs"], 0);
    assert_eq!(graded["pairs"], json!([]));

    let w = whatif("?executors=1&slots=1").await;
    assert_eq!(w["predicted_ms"], 5 + sum);
    assert_eq!(w["curve"], json!([]));
    assert_eq!(w["shape"], json!({"executors": 1, "slots": 1}));
    let w = whatif("?executors=3").await;
    assert_eq!(w["shape"], json!({"executors": 3, "slots": 1}));
    assert_eq!(w["ideal_ms"], 5 + sum.div_ceil(3));
    // Without exec-0's pace, the straggler takes exec-1's median (nearest
    // rank of 2,001, 2,003, ... 2,015: 2,007).
    let w = whatif("?without_executor=exec-0&executors=2&slots=1").await;
    let paced: u64 = (0..16u64)
        .map(|t| if t % 2 == 0 { 2_007 } else { 2_000 + t })
        .sum();
    assert_eq!(w["ideal_ms"], 5 + paced.div_ceil(2));
    assert!(
        w["predicted_ms"].as_u64().unwrap() < observed - 6_000,
        "{w:#}"
    );
    // The largest shape costs no more than the tasks: every task on a
    // slot of its own.
    let w = whatif("?executors=10000&slots=1024").await;
    assert_eq!(w["predicted_ms"], 5 + 9_000);

    for (path, status, names) in [
        ("/api/job/planted/whatif?executors=0", 400, "executors"),
        ("/api/job/planted/whatif?executors=10001", 400, "executors"),
        (
            "/api/job/planted/whatif?executors=99999999999",
            400,
            "executors",
        ),
        ("/api/job/planted/whatif?slots=1025", 400, "slots"),
        ("/api/job/planted/whatif?slots=-1", 400, "slots"),
        (
            "/api/job/planted/whatif?executors=2&executors=3",
            400,
            "executors",
        ),
        (
            "/api/job/planted/whatif?without_executor=nobody",
            400,
            "without_executor",
        ),
        ("/api/job/nope/whatif", 404, "no event log"),
        ("/api/job/%3Cscript%3E/whatif", 404, "no event log"),
        ("/api/job/unended/whatif", 409, "not finished"),
        ("/api/whatif/accuracy?limit=0", 400, "limit"),
        ("/api/whatif/accuracy?limit=201", 400, "limit"),
        ("/api/whatif/accuracy?query_hash=xyz", 400, "query_hash"),
    ] {
        let (got, _, body) = get(&server.url(path)).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(got, status, "{path}: {text}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["http_code"], status, "{path}");
        assert!(
            body["error"].as_str().unwrap().contains(names),
            "{path}: {text}"
        );
    }
}

/// Four runs of one query on one shape, alternately quick and held up by
/// a straggler: each replay predicts the run before it again, so the
/// history grades them far off (worked out from how the logs are
/// written), marks the query unreliable, and its What-if says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_query_whose_replays_missed_is_marked_unreliable() {
    let tmp = tempfile::tempdir().unwrap();
    let slow = [2_000u64, 30_000, 2_000, 30_000];
    for (i, s) in slow.iter().enumerate() {
        write_straggler_log(tmp.path(), &format!("run{i}"), *s);
    }
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    // Lane 0 ran the even tasks, lane 1 the odd ones; task 14 (even) took
    // `s`; the replay on the same shape is the run (see above).
    let observed = |s: u64| -> u64 {
        let d = |t: u64| if t == 14 { s } else { 2_000 + t };
        let lane = |p: u64| (0..16).filter(|t| t % 2 == p).map(d).sum::<u64>();
        5 + lane(0).max(lane(1))
    };
    let mut errors: Vec<f64> = slow
        .windows(2)
        .map(|w| (observed(w[0]) as f64 - observed(w[1]) as f64).abs() / observed(w[1]) as f64)
        .collect();
    errors.sort_by(f64::total_cmp);
    let median = (errors[1] * 10_000.0).round() / 10_000.0;
    assert!(median > 0.25, "the plan of this test: {errors:?}");

    let graded = get_json(&server.url("/api/whatif/accuracy")).await;
    let q = &graded["queries"][0];
    assert_eq!(q["all"]["pairs"], 3, "{graded:#}");
    assert_eq!(q["all"]["median_error"], json!(median));
    assert_eq!(q["unreliable"], true);
    assert_eq!(q["query_label"], "t");
    // The later run's what-if carries the query's record.
    let w = get_json(&server.url("/api/job/run3/whatif")).await;
    assert_eq!(w["history"]["unreliable"], true, "{w:#}");
    assert_eq!(w["history"]["all"]["pairs"], 3);
    let w = get_json(&server.url("/api/job/run3/whatif?graded=false")).await;
    assert!(w["history"].is_null());

    // The pages: the tab warns, the accuracy page lists every pair and
    // marks the query; bad parameters are a page naming them.
    let (_, _, tab) = get(&server.url("/ui/job/run3?tab=whatif")).await;
    let tab = String::from_utf8(tab).unwrap();
    assert!(tab.contains("id=\"whatif-unreliable\""), "{tab}");
    let (status, _, page) = get(&server.url("/ui/accuracy")).await;
    let page = String::from_utf8(page).unwrap();
    assert_eq!(status, 200);
    for run in ["run0", "run1", "run2", "run3"] {
        assert!(page.contains(&format!("/ui/job/{run}")), "{run}");
    }
    assert!(page.contains("class=\"warn unreliable\""));
    for (path, names) in [
        ("/ui/accuracy?limit=0", "limit"),
        ("/ui/accuracy?limit=201", "limit"),
        ("/ui/accuracy?query_hash=xyz", "query_hash"),
    ] {
        let (status, _, body) = get(&server.url(path)).await;
        assert_eq!(status, 400, "{path}");
        assert!(String::from_utf8_lossy(&body).contains(names), "{path}");
    }
}

/// The planted straggler's diagnosis advises settings with their predicted
/// effect, each worked out apart: one stage of 16 tasks handed out in id
/// order to the slot free first (the list scheduling the replay does on a
/// stage without inputs), from 5 ms after the job's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_diagnosis_advises_settings_with_their_predicted_effect() {
    let tmp = tempfile::tempdir().unwrap();
    write_straggler_log(tmp.path(), "planted", 9_000);
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let durations: Vec<u64> = (0..16u64)
        .map(|t| if t == 14 { 9_000 } else { 2_000 + t })
        .collect();
    let on = |slots: usize| -> u64 {
        let mut free = vec![0u64; slots];
        for d in &durations {
            let (i, at) = free
                .iter()
                .enumerate()
                .min_by_key(|(i, f)| (**f, *i))
                .unwrap();
            let at = *at;
            free[i] = at + d;
        }
        5 + free.into_iter().max().unwrap()
    };
    let replayed = on(2);
    let d = get_json(&server.url("/api/job/planted/diagnosis")).await;
    let advice = d["advice"].as_array().unwrap();
    let find = |setting: &str, value: &str| {
        advice
            .iter()
            .find(|a| a["setting"] == setting && a["value"] == value)
            .unwrap_or_else(|| panic!("{setting}={value} in {advice:#?}"))
            .clone()
    };
    for (setting, value, slots) in [
        ("executors", "3", 3),
        ("executors", "4", 4),
        ("--concurrent-tasks", "2", 4),
        ("executors", "15", 15),
    ] {
        let a = find(setting, value);
        assert_eq!(a["predicted_ms"], on(slots), "{setting}={value}");
        assert_eq!(a["saving_ms"], replayed as i64 - on(slots) as i64);
        let slot_seconds = on(slots) as f64 * slots as f64 / 1000.0;
        assert!((a["slot_seconds"].as_f64().unwrap() - slot_seconds).abs() < 1e-9);
        assert_eq!(a["current_slot_seconds"], replayed as f64 * 2.0 / 1000.0);
    }
    // Ranked by the time saved; one executor fewer is slower and dearer
    // in time, so it is not advised.
    let savings: Vec<i64> = advice
        .iter()
        .filter_map(|a| a["saving_ms"].as_i64())
        .collect();
    assert!(savings.windows(2).all(|w| w[0] >= w[1]), "{savings:?}");
    assert!(!advice.iter().any(|a| a["value"] == "1"));
    // The page lists the same advice.
    let (_, _, page) = get(&server.url("/ui/job/planted?tab=diagnosis")).await;
    let page = String::from_utf8(page).unwrap();
    let table = page
        .split("id=\"advice\"")
        .nth(1)
        .expect("the advice table");
    let body = table.split("<tbody>").nth(1).unwrap();
    let body = body.split("</tbody>").next().unwrap();
    let rows = body.matches("<tr>").count();
    assert_eq!(rows, advice.len(), "{body}\n{advice:#?}");
}

/// The next run checks the advice: of the planted straggler's query `t`,
/// a run on 3 executors took what the first run's replay on 3 predicted
/// (the advice "executors 3" confirmed), then a run of half the tasks
/// (8 partitions against 16: other tasks, graded apart, checking
/// nothing); of query `u`, the same straggler advised 3 executors, but
/// the run on 3 was held up by a 40 s task (contradicted). Each figure is
/// worked out here from how the logs are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_run_marks_advice_confirmed_or_contradicted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_run(dir, "t1", "TableScan: t", 2, 16, 9_000);
    write_run(dir, "t2", "TableScan: t", 3, 16, 9_000);
    write_run(dir, "t3", "TableScan: t", 3, 8, 9_000);
    write_run(dir, "u1", "TableScan: u", 2, 16, 9_000);
    write_run(dir, "u2", "TableScan: u", 3, 16, 40_000);
    let mut server = Proc::history(dir, &[]);
    server.wait_ready().await;
    eventually("every log is indexed", || async {
        job_ids(&server).await.len() == 5
    })
    .await;
    // What a run took: 5 ms, then its busiest lane (task i on lane
    // i % lanes, 2,000 + i ms, task 14 `slow` ms).
    let took = |lanes: u32, tasks: u32, slow: u64| -> u64 {
        let d = |t: u32| if t == 14 { slow } else { 2_000 + u64::from(t) };
        let lane = |l: u32| (0..tasks).filter(|t| t % lanes == l).map(d).sum::<u64>();
        5 + (0..lanes).map(lane).max().unwrap()
    };
    // The first runs' replay on 3 slots: handed out in id order to the
    // slot free first, the tasks fall on the lanes round-robin (each is
    // longer than the one before it, the straggler last on its lane), so
    // it is what 3 lanes took with the first run's tasks.
    let predicted = took(3, 16, 9_000);
    let error = |actual: u64| (predicted as f64 - actual as f64).abs() / actual as f64;
    let (t2, u2) = (took(3, 16, 9_000), took(3, 16, 40_000));
    assert!(
        error(t2) <= 0.25 && t2 < took(2, 16, 9_000),
        "the plan of this test"
    );
    assert!(error(u2) > 0.25, "the plan of this test");

    let advised = |d: &Value| -> Value {
        d["advice"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["setting"] == "executors" && a["value"] == "3")
            .unwrap_or_else(|| panic!("executors=3 in {d:#}"))
            .clone()
    };
    let diagnosis = |id: &str| {
        let url = server.url(&format!("/api/job/{id}/diagnosis"));
        async move { get_json(&url).await }
    };
    let d = diagnosis("t1").await;
    let a = advised(&d);
    assert_eq!(a["predicted_ms"], predicted, "{a:#}");
    assert_eq!(a["shape"], json!({"executors": 3, "slots": 1}));
    assert_eq!(a["next_run"]["job_id"], "t2", "{a:#}");
    assert_eq!(a["next_run"]["actual_ms"], t2);
    assert_eq!(a["next_run"]["contradicted"], false);
    assert_eq!(d["next_run"]["job_id"], "t2");
    assert_eq!(d["next_run"]["shape"], json!({"executors": 3, "slots": 1}));
    assert_eq!(d["next_run"]["predicted_ms"], predicted);
    assert_eq!(d["next_run"]["partitions"], 16);
    assert_eq!(d["next_run"]["partitions_changed"], false);
    // Advice on other shapes is not checked by a run on 3.
    for other in d["advice"].as_array().unwrap() {
        if other["value"] != "3" {
            assert!(other["next_run"].is_null(), "{other:#}");
        }
    }

    let d = diagnosis("u1").await;
    let a = advised(&d);
    assert_eq!(a["next_run"]["job_id"], "u2");
    assert_eq!(a["next_run"]["actual_ms"], u2);
    assert_eq!(a["next_run"]["contradicted"], true);
    let got = a["next_run"]["error"].as_f64().unwrap();
    assert!(
        (got - error(u2)).abs() < 1e-9,
        "{got} against {}",
        error(u2)
    );

    // Half the tasks: other partitions, nothing checked.
    let d = diagnosis("t2").await;
    assert_eq!(d["next_run"]["job_id"], "t3");
    assert_eq!(d["next_run"]["partitions"], 8);
    assert_eq!(d["next_run"]["partitions_changed"], true);
    assert!(d["next_run"]["predicted_ms"].is_null());
    assert!(no_advice_checked(&d), "{d:#}");
    assert!(diagnosis("t3").await["next_run"].is_null());

    // The history grades the change of partitions apart.
    let graded = get_json(&server.url("/api/whatif/accuracy")).await;
    assert_eq!(graded["across_shapes"]["pairs"], 2, "{graded:#}");
    assert_eq!(graded["same_shape"]["pairs"], 0);
    assert_eq!(graded["partitions_changed"]["pairs"], 1);
    assert_eq!(graded["by_kind"]["partitions"]["pairs"], 1);
    let apart = graded["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["b"] == "t3")
        .unwrap();
    assert_eq!(
        (
            apart["partitions_a"].as_u64(),
            apart["partitions_b"].as_u64()
        ),
        (Some(16), Some(8))
    );

    // The pages mark the same.
    let page = |id: &str| {
        let url = server.url(&format!("/ui/job/{id}?tab=diagnosis"));
        async move { String::from_utf8(get(&url).await.2).unwrap() }
    };
    let t1 = page("t1").await;
    assert_eq!(t1.matches("class=\"checked confirmed\"").count(), 1, "{t1}");
    assert!(!t1.contains("checked contradicted"));
    let u1 = page("u1").await;
    assert_eq!(
        u1.matches("class=\"checked contradicted\"").count(),
        1,
        "{u1}"
    );
    assert!(u1.contains("href=\"/ui/job/u2\""));
    let t2 = page("t2").await;
    assert!(t2.contains("id=\"next-run\""));
    assert!(
        t2.contains("other partitions (8 in its widest stage)"),
        "{t2}"
    );
    assert!(!t2.contains("class=\"checked"));
    let (_, _, accuracy) = get(&server.url("/ui/accuracy")).await;
    assert!(
        String::from_utf8(accuracy)
            .unwrap()
            .contains("16 → 8 partitions")
    );
}

/// On a real cluster: one query run twice with
/// `datafusion.execution.target_partitions` 4, then with 6. The first
/// pair is the noise; the second computed other partitions (its widest
/// stage, the aggregate after the shuffle, has as many as the setting),
/// graded apart and checking no advice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_of_target_partitions_is_graded_apart_on_a_real_cluster() {
    let cluster = Cluster::start(&[]).await;
    let sched = &cluster.sched;
    let sql = "SELECT k, count(*) FROM t GROUP BY k ORDER BY k";
    let mut runs = Vec::new();
    for partitions in ["4", "4", "6"] {
        let options = [("datafusion.execution.target_partitions", partitions)];
        let ctx = client_with(sched.port, &cluster.data, &options).await;
        let (job_id, result) = run_job(sched, &ctx, sql).await;
        assert!(result.is_ok(), "{result:?}");
        indexed_log(sched, &cluster.logs, &job_id).await;
        runs.push(job_id);
    }
    let graded = get_json(&sched.url("/api/whatif/accuracy")).await;
    let pairs = graded["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{graded:#}");
    let pair = |later: &str| pairs.iter().find(|p| p["b"] == later).unwrap().clone();
    let (first, second) = (pair(&runs[1]), pair(&runs[2]));
    assert_eq!(first["partitions_a"], 4, "{first:#}");
    assert_eq!(first["partitions_b"], 4);
    assert_eq!(second["partitions_a"], 4, "{second:#}");
    assert_eq!(second["partitions_b"], 6);
    assert_eq!(graded["partitions_changed"]["pairs"], 1);
    assert_eq!(
        graded["same_shape"]["pairs"].as_u64().unwrap()
            + graded["across_shapes"]["pairs"].as_u64().unwrap(),
        1
    );
    let d = get_json(&sched.url(&format!("/api/job/{}/diagnosis", runs[1]))).await;
    assert_eq!(d["next_run"]["job_id"], runs[2].as_str(), "{d:#}");
    assert_eq!(d["next_run"]["partitions_changed"], true);
    assert!(no_advice_checked(&d), "{d:#}");
    let d = get_json(&sched.url(&format!("/api/job/{}/diagnosis", runs[0]))).await;
    assert_eq!(d["next_run"]["job_id"], runs[1].as_str(), "{d:#}");
    assert_eq!(d["next_run"]["partitions_changed"], false);
}

/// The Clusters view under attack: scheduler ids that are markup or
/// quotes come back as text, the jobs naming none are one row, and a
/// directory of more schedulers than an answer lists is cut at 1,000, the
/// rest counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_clusters_view_escapes_hostile_ids_and_lists_at_most_a_thousand() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hostile = ["<script>alert(1)</script>", "a\"b", "x&y"];
    for (i, id) in hostile.iter().enumerate() {
        write_run_by(dir, &format!("h{i}"), ("TableScan: t", Some(id)), 1, 2, 1);
    }
    write_run_by(dir, "none", ("TableScan: t", None), 1, 2, 1);
    let mut server = Proc::history(dir, &[]);
    server.wait_ready().await;
    eventually("every log is indexed", || async {
        job_ids(&server).await.len() == 4
    })
    .await;
    let clusters = get_json(&server.url("/api/clusters?colour=red")).await;
    let mut ids: Vec<Value> = clusters["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["scheduler_id"].clone())
        .collect();
    ids.sort_by_key(|v| v.to_string());
    let mut want: Vec<Value> = hostile.iter().map(|h| json!(h)).collect();
    want.push(Value::Null);
    want.sort_by_key(|v| v.to_string());
    assert_eq!(ids, want, "{clusters:#}");
    let (status, _, page) = get(&server.url("/ui/clusters")).await;
    assert_eq!(status, 200);
    let page = String::from_utf8(page).unwrap();
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("x&amp;y"));
    server.terminate();

    // An empty directory has no scheduler to show.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut server = Proc::history(&empty, &[]);
    server.wait_ready().await;
    let clusters = get_json(&server.url("/api/clusters")).await;
    assert_eq!(clusters["clusters"], json!([]), "{clusters:#}");
    let (_, _, page) = get(&server.url("/ui/clusters")).await;
    assert!(
        String::from_utf8(page)
            .unwrap()
            .contains("No scheduler has recorded here yet.")
    );
    server.terminate();

    // 1,003 schedulers, one job each.
    let many = tmp.path().join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..1_003 {
        let id = format!("s{i:04}");
        write_run_by(
            &many,
            &format!("j{i:04}"),
            ("TableScan: t", Some(&id)),
            1,
            1,
            1,
        );
    }
    let mut server = Proc::history(&many, &[]);
    server.wait_ready().await;
    eventually("every log is indexed", || async {
        get_json(&server.url("/api/jobs?limit=2000"))
            .await
            .as_array()
            .unwrap()
            .len()
            == 1_003
    })
    .await;
    let clusters = get_json(&server.url("/api/clusters")).await;
    assert_eq!(clusters["clusters"].as_array().unwrap().len(), 1_000);
    assert_eq!(clusters["left_out"], 3);
}
