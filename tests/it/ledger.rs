//! A ledger no log can lie to: cluster logs and footers planted by a
//! neighbour (dated years ahead, naming a thousand executors, stating
//! 10^19 slot-ms) against the real binary's `/api/usage`, `/api/clusters`
//! and SQL `usage` table; and two clusters in one directory, each one's
//! idle time shared among its own jobs. Each figure is checked against
//! one counted here from what was planted.

use crate::harness::*;
use crate::history::copy_fixtures;
use std::path::Path;

const HOUR: u64 = 3_600_000;
const MINUTE: u64 = 60_000;

fn now() -> u64 {
    bjh_format::now_millis()
}

/// A cluster log's line.
fn line(kind: &str, data: serde_json::Value) -> String {
    format!(
        "{}\n",
        serde_json::json!({"ev": kind, "version": 1, "data": data})
    )
}

fn mark(scheduler: &str, at: u64, executors: &[(&str, u32)]) -> String {
    let executors: Vec<_> = executors
        .iter()
        .map(|(id, slots)| serde_json::json!({"executor_id": id, "slots": slots}))
        .collect();
    line(
        "ClusterMark",
        serde_json::json!({"scheduler_id": scheduler, "at": at, "executors": executors}),
    )
}

/// Plants `text` as scheduler `hash`'s cluster log for the day of `at`.
fn plant_cluster_log(dir: &Path, at: u64, hash: &str, text: &str) {
    let folder = dir.join(".cluster");
    std::fs::create_dir_all(&folder).unwrap();
    let day = bjh_format::cluster::day_text(at);
    std::fs::write(
        folder.join(format!("cluster-{day}-{hash}.clusterlog")),
        text,
    )
    .unwrap();
}

/// A mark a minute over `[from, to]`, listing `executors`.
fn marks(scheduler: &str, from: u64, to: u64, executors: &[(&str, u32)]) -> String {
    (0..=(to - from) / MINUTE)
        .map(|i| mark(scheduler, from + i * MINUTE, executors))
        .collect()
}

/// Appends a footer to the upstream fixture `name` in `dir` (its `JobEnd`
/// line located by hand), stating `scheduler`, `busy` slot-ms and `by`.
fn add_footer(dir: &Path, name: &str, scheduler: &str, busy: u64, by: &[(&str, u64)]) {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let body = text.trim_end_matches('\n');
    let start = body.rfind('\n').map_or(0, |i| i + 1);
    let end_line = &body[start..];
    let end: serde_json::Value = serde_json::from_str(end_line).unwrap();
    assert_eq!(end["ev"], "JobEnd");
    let by: serde_json::Map<String, serde_json::Value> = by
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    let footer = serde_json::json!({
        "job_end_offset": start,
        "job_end_len": end_line.len(),
        "status": end["data"]["status"],
        "queued_at": end["data"]["queued_at"],
        "index": end["data"]["index"],
        "dropped_records": 0,
        "scheduler_id": scheduler,
        // A query hash of its own, as our writer states one.
        "query_hash": format!("{:016x}", name.bytes().map(u64::from).sum::<u64>()),
        "busy_slot_ms": busy,
        "failed_slot_ms": 0,
        "busy_by_executor": by,
    });
    let mut out = format!("{body}\n");
    out.push_str(&line("Footer", footer));
    std::fs::write(&path, out).unwrap();
}

/// The start and end of a fixture's job.
fn span_of(dir: &Path, name: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let end = text
        .lines()
        .find(|l| l.starts_with(r#"{"ev":"JobEnd""#))
        .unwrap();
    let end: serde_json::Value = serde_json::from_str(end).unwrap();
    let index = &end["data"]["index"];
    (
        index["start_time"].as_u64().unwrap(),
        index["end_time"].as_u64().unwrap(),
    )
}

fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// A regression test: an `ExecutorDown` two years ahead made the SQL
/// `usage` table 17,534 hourly rows, `/api/usage` for tomorrow a day of
/// capacity, and `/api/clusters` a scheduler seen in 2028.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_log_dated_years_ahead_adds_no_capacity_after_now() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let t = now();
    let two_years = 2 * 365 * 24 * HOUR;
    // Recorded for the last hour, one executor of 4 slots; then a record
    // that says it left two years from now.
    let mut text = line(
        "ExecutorUp",
        serde_json::json!({"executor_id": "e", "slots": 4, "at": t - HOUR}),
    );
    text.push_str(&marks("liar", t - HOUR, t - MINUTE, &[("e", 4)]));
    text.push_str(&line(
        "ExecutorDown",
        serde_json::json!({"executor_id": "e", "at": t + two_years, "reason": "removed"}),
    ));
    plant_cluster_log(tmp.path(), t, "0badc10c", &text);
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    // Tomorrow has no capacity: nothing is up after now.
    let tomorrow = get_json(&server.url(&format!(
        "/api/usage?from={}&to={}",
        t + HOUR,
        t + 25 * HOUR
    )))
    .await;
    assert_eq!(u(&tomorrow, "capacity_slot_ms"), 0, "{tomorrow}");
    // The last hour has what was recorded: 4 slots for at most an hour
    // and a minute (the skew), counted here from the marks.
    let hour =
        get_json(&server.url(&format!("/api/usage?from={}&to={}", t - 2 * HOUR, now()))).await;
    assert!(
        u(&hour, "capacity_slot_ms") <= 4 * (HOUR + MINUTE),
        "{hour}"
    );
    assert!(
        u(&hour, "capacity_slot_ms") >= 4 * (HOUR - 2 * MINUTE),
        "{hour}"
    );
    // The SQL table: an executor-hour a row, none after now.
    let rows = crate::sql::sql(
        &server,
        "SELECT count(*) AS n, CAST(max(hour) AS BIGINT) AS last FROM usage",
    )
    .await;
    let n = rows[0]["n"].as_u64().unwrap();
    assert!(n <= 3, "{n} executor-hours for an hour recorded");
    let last_hour_ms = rows[0]["last"].as_i64().unwrap();
    assert!(
        last_hour_ms.unsigned_abs() <= now(),
        "a row for an hour after now: {last_hour_ms}"
    );
    // The scheduler is not seen after now.
    let clusters = get_json(&server.url("/api/clusters")).await;
    let liar = clusters["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["scheduler_id"] == "liar")
        .unwrap_or_else(|| panic!("{clusters}"));
    assert!(u(liar, "last_seen") <= now(), "{liar}");
    server.terminate();
}

/// A regression test: `group_by=executor` over 400 days of a log naming
/// 1,000 executors (49 KB) cost 337 to 367 MiB a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grouping_by_a_thousand_executors_over_400_days_costs_no_more_than_one() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let t = now();
    let ids: Vec<String> = (0..1_000).map(|i| format!("e{i:04}")).collect();
    let executors: Vec<(&str, u32)> = ids.iter().map(|id| (id.as_str(), 1)).collect();
    let text = marks("many", t - 3 * MINUTE, t - MINUTE, &executors);
    plant_cluster_log(tmp.path(), t, "0000beef", &text);
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let url = server.url(&format!(
        "/api/usage?group_by=executor&from={}&to={}",
        t - 400 * 24 * HOUR,
        t
    ));
    // The cluster log read once (by a day's usage), then the peak of the
    // request: one executor's hours at a time.
    get_json(&server.url("/api/usage")).await;
    let before = server.peak_rss_kib();
    let again = get_json(&url).await;
    let grew = server.peak_rss_kib().saturating_sub(before);
    assert_eq!(
        again["groups"].as_array().unwrap().len(),
        1_000,
        "every executor a group"
    );
    // Capacity, counted from the marks: 1,000 slots for two minutes at
    // least (the last mark is alive until now).
    assert!(
        u(&again, "capacity_slot_ms") >= 1_000 * 2 * MINUTE,
        "{}",
        again["capacity_slot_ms"]
    );
    println!("the request's peak grew by {grew} KiB");
    assert!(
        grew < 64 * 1024,
        "the request's peak grew by {} MiB",
        grew / 1024
    );
    server.terminate();
}

/// A regression test: two footers stating 1.2e19 slot-ms on one executor
/// each summed to 5.55e18, less than either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn footers_stating_huge_slot_times_are_bounded_and_sums_never_wrap() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let huge = 12_000_000_000_000_000_000u64;
    let logs = ["038HEXYE9M000.eventlog", "038HEXYEEG000.eventlog"];
    for (name, executor) in logs.iter().zip(["a", "b"]) {
        add_footer(tmp.path(), name, "s", huge, &[(executor, huge)]);
    }
    let spans: Vec<(u64, u64)> = logs.iter().map(|n| span_of(tmp.path(), n)).collect();
    let from = spans.iter().map(|s| s.0).min().unwrap() - HOUR;
    let to = spans.iter().map(|s| s.1).max().unwrap() + HOUR;
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    for by in ["executor", "query"] {
        let usage =
            get_json(&server.url(&format!("/api/usage?group_by={by}&from={from}&to={to}"))).await;
        let parts: Vec<u64> = usage["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| u(g, "busy_slot_ms"))
            .collect();
        let total = u(&usage, "busy_slot_ms");
        assert!(
            parts.iter().all(|&p| p <= total),
            "{by}: {total} < a part of {parts:?}"
        );
        // Each job's slot time is at most its span times a million slots:
        // what no cluster has, but not 10^19.
        let most: u64 = spans.iter().map(|(s, e)| (e - s).max(1) << 20).sum();
        assert!(total <= most, "{by}: {total} slot-ms over {spans:?}");
    }
    server.terminate();
}

/// Two clusters record into one directory: one executor of 1 slot, and
/// one of 3; one job each, as long. Each cluster's idle hour goes to its
/// own job (1 and 3 slot-hours); pooled, they split the 4 evenly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_clusters_idle_time_is_shared_among_its_own_jobs_only() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let logs = ["038HEXYE9M000.eventlog", "038HEXYEEG000.eventlog"];
    add_footer(tmp.path(), logs[0], "small", 10, &[("s1", 10)]);
    add_footer(tmp.path(), logs[1], "large", 10, &[("l1", 10)]);
    let (start, _) = span_of(tmp.path(), logs[0]);
    let hour = start - start % HOUR;
    for (scheduler, hash, executor, slots) in [
        ("small", "00005a11", "s1", 1),
        ("large", "0000b16e", "l1", 3),
    ] {
        let mut text = line(
            "ExecutorUp",
            serde_json::json!({"executor_id": executor, "slots": slots, "at": hour}),
        );
        text.push_str(&marks(scheduler, hour, hour + HOUR, &[(executor, slots)]));
        text.push_str(&line(
            "ExecutorDown",
            serde_json::json!({"executor_id": executor, "at": hour + HOUR, "reason": "removed"}),
        ));
        plant_cluster_log(tmp.path(), hour, hash, &text);
    }
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let range = format!("from={hour}&to={}", hour + HOUR);
    let all = get_json(&server.url(&format!("/api/usage?group_by=scheduler&{range}"))).await;
    assert_eq!(u(&all, "capacity_slot_ms"), 4 * HOUR, "{all}");
    let total = |usage: &serde_json::Value, key: &str| {
        usage["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["key"] == key)
            .map(|g| u(g, "total_slot_ms"))
            .unwrap_or_else(|| panic!("{key} in {usage}"))
    };
    assert_eq!(total(&all, "small"), HOUR, "{all}");
    assert_eq!(total(&all, "large"), 3 * HOUR, "{all}");
    // One cluster: its capacity, its jobs.
    let large = get_json(&server.url(&format!(
        "/api/usage?group_by=scheduler&scheduler_id=large&{range}"
    )))
    .await;
    assert_eq!(u(&large, "capacity_slot_ms"), 3 * HOUR, "{large}");
    assert_eq!(u(&large, "jobs"), 1, "{large}");
    assert_eq!(large["groups"].as_array().unwrap().len(), 1, "{large}");
    // The page takes it too, and keeps it in its links.
    let (status, _, page) =
        get(&server.url(&format!("/ui/usage?scheduler_id=large&{range}"))).await;
    assert_eq!(status, 200);
    let page = String::from_utf8(page).unwrap();
    assert!(
        page.contains("scheduler_id=large"),
        "the page's links drop the cluster"
    );
    server.terminate();
}

/// A regression test: an executor stopped with SIGINT (upstream's
/// executor says in a heartbeat that it is terminating, then exits) stayed
/// capacity until the scheduler expired it: on a 22-second window with
/// one of two executors stopped 2 s before its end, capacity was 19% above
/// the slots times the time each was really up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_stopped_by_its_operator_stops_counting_as_capacity_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let mut sched = Proc::scheduler(&logs, &[]);
    sched.wait_healthy().await;
    start_executor_with(sched.port, 2).await;
    let mut stopped = std::process::Command::new(example_binary("executor"))
        .args([
            sched.port.to_string(),
            "2".into(),
            free_port().to_string(),
            free_port().to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the executor starts");
    // Both recorded up: the cluster log's last sight lists two.
    eventually("both executors are recorded", || async {
        let clusters = get_json(&sched.url("/api/clusters")).await;
        clusters["clusters"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["executors"] == 2))
    })
    .await;
    // Time passes with both up, then the operator stops one; then time
    // passes with one. The windows are measured here, not assumed.
    let t0 = now();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let stopped_at = now();
    let signalled = std::process::Command::new("kill")
        .args(["-INT", &stopped.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let exited = tokio::task::spawn_blocking(move || stopped.wait())
        .await
        .unwrap();
    assert!(exited.is_ok());
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let t1 = now();
    // The scheduler still lists it (its grace period is 30 s).
    let listed = get_json(&sched.url("/api/executors")).await;
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let usage = get_json(&sched.url(&format!("/api/usage?from={t0}&to={t1}"))).await;
    let capacity = u(&usage, "capacity_slot_ms") as f64;
    // Slots times the time each was really up, from this test's clock.
    let truth = (2 * (t1 - t0) + 2 * (stopped_at - t0)) as f64;
    let error = (capacity - truth).abs() / truth;
    println!(
        "capacity {capacity} slot-ms against {truth} really up: {:.1}% off",
        error * 100.0
    );
    assert!(
        error <= 0.10,
        "capacity {capacity} against {truth}: {:.1}% off",
        error * 100.0
    );
    sched.terminate();
}

/// A regression test: the history's own SQL jobs (run on the cluster,
/// named `history SQL: ...`) were counted as a user's work: they took
/// idle time in usage, and stood in the recurring queries as if a user
/// had run them. Two runs of one hour on one executor of 1 slot: a
/// user's job and one of the history's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_historys_own_jobs_are_marked_and_kept_apart_from_users_work() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let logs = ["038HEXYE9M000.eventlog", "038HEXYEEG000.eventlog"];
    // The second is the history's: its name, as the cluster engine gives it.
    let path = tmp.path().join(logs[1]);
    let text = std::fs::read_to_string(&path).unwrap();
    let named = r#""job_name":"history SQL: SELECT count(*) FROM jobs""#;
    std::fs::write(&path, text.replace(r#""job_name":"""#, named)).unwrap();
    add_footer(tmp.path(), logs[0], "s", 1_000, &[("e", 1_000)]);
    add_footer(tmp.path(), logs[1], "s", 3_000, &[("e", 3_000)]);
    let (start, _) = span_of(tmp.path(), logs[0]);
    let hour = start - start % HOUR;
    let mut text = line(
        "ExecutorUp",
        serde_json::json!({"executor_id": "e", "slots": 1, "at": hour}),
    );
    text.push_str(&marks("s", hour, hour + HOUR, &[("e", 1)]));
    plant_cluster_log(tmp.path(), hour, "0000000e", &text);
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    // Marked in the list.
    let jobs = get_json(&server.url("/api/jobs")).await;
    let origin = |id: &str| {
        let job = jobs
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job_id"] == id)
            .unwrap();
        job.get("origin").cloned()
    };
    assert_eq!(origin("038HEXYEEG000"), Some(serde_json::json!("history")));
    assert_eq!(origin("038HEXYE9M000"), None);
    // Usage: the history's busy time a group of its own with no idle
    // share; the user's job takes the hour's idle time.
    let usage = get_json(&server.url(&format!(
        "/api/usage?group_by=name&from={hour}&to={}",
        hour + HOUR
    )))
    .await;
    let group = |key: &str| {
        usage["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} in {usage}"))
    };
    assert_eq!(u(&group("(history)"), "busy_slot_ms"), 3_000);
    assert_eq!(u(&group("(history)"), "idle_share_slot_ms"), 0);
    assert_eq!(u(&group(""), "idle_share_slot_ms"), HOUR - 4_000, "{usage}");
    // Recurring queries and what-if pairs leave it out unless asked.
    let queries = |query: &'static str| {
        let url = server.url(&format!("/api/queries{query}"));
        async move {
            let answer = get_json(&url).await;
            answer["queries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|q| q["last_job_id"].as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        }
    };
    assert!(!queries("").await.contains(&"038HEXYEEG000".to_string()));
    assert!(
        queries("?include_history=true")
            .await
            .contains(&"038HEXYEEG000".to_string())
    );
    server.terminate();
}
