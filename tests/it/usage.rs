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
    // The partitions setting the client sets, a usage tag.
    let tag = "datafusion.execution.target_partitions";
    let mut sched = Proc::scheduler(&logs, &["--usage-tags", tag]);
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
    // Grouped by the tag: both jobs ran with 4 partitions.
    for (query, key) in [
        (format!("group_by=tag&tag={tag}"), "4".to_string()),
        ("group_by=tag".to_string(), format!("{tag}=4")),
    ] {
        let u = get_json(&sched.url(&format!("/api/usage?{query}"))).await;
        assert_eq!(u["groups"].as_array().unwrap().len(), 1, "{u}");
        assert_eq!(u["groups"][0]["key"], key.as_str(), "{u}");
        assert_eq!(u["groups"][0]["jobs"], 2, "{u}");
    }
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
    // The metrics: the one slot up now, and the last hour's utilisation
    // (worked out with the grouping, so waited for).
    let utilisation = wait_for("the utilisation is exported", || async {
        let text = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
        let value = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{name}{{")))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        };
        // The executor's coming is sampled within a second.
        if value("ballista_job_history_slots") != Some(1.0) {
            return None;
        }
        value("ballista_job_history_slot_utilisation")
    })
    .await;
    assert!(utilisation > 0.0 && utilisation <= 1.0, "{utilisation}");
    assert!(sched.terminate().success());

    // A history server over the directory, then again from its index.
    for round in ["indexed from the logs", "loaded from the index"] {
        let mut hist = Proc::history(&logs, &[]);
        hist.wait_healthy().await;
        assert_eq!(listed(&hist).await, want, "{round}");
        assert!(hist.terminate().success());
    }
}

/// An executor on a runtime of its own, stopped by dropping the runtime:
/// it vanishes without a word, as a killed process does.
struct Doomed {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Doomed {
    /// Built and started on a thread of its own (a runtime cannot be
    /// entered from the test's).
    fn start(port: u16, slots: usize) -> Self {
        let runtime = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(start_executor_with(port, slots));
            runtime
        })
        .join()
        .unwrap();
        Self {
            runtime: Some(runtime),
        }
    }

    fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The executors the scheduler lists.
async fn executors(proc: &Proc) -> Vec<String> {
    let list = get_json(&proc.url("/api/executors")).await;
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

/// `GET /api/usage` over `[from, to)`.
async fn usage_of(proc: &Proc, from: u64, to: u64) -> serde_json::Value {
    get_json(&proc.url(&format!("/api/usage?from={from}&to={to}&group_by=query"))).await
}

fn n(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}")) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_slot_second_the_cluster_had_is_accounted_for() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 20_000);
    // An executor that stops heartbeating is dropped after 3 s.
    let flags = [
        "--executor-timeout-seconds",
        "3",
        "--expire-dead-executor-interval-seconds",
        "1",
    ];
    let mut sched = Proc::scheduler(&logs, &flags);
    sched.wait_healthy().await;
    let t0 = bjh_format::now_millis();
    start_executor_with(sched.port, 2).await;
    let port = sched.port;
    let mut doomed = tokio::task::spawn_blocking(move || Doomed::start(port, 3))
        .await
        .unwrap();
    let both = wait_for("two executors are registered", || async {
        let ids = executors(&sched).await;
        (ids.len() == 2).then_some(ids)
    })
    .await;
    let up_at = bjh_format::now_millis();
    let ctx = client(sched.port, &data).await;
    let mut jobs = Vec::new();
    for sql in [
        "SELECT k, count(*) FROM t GROUP BY k",
        "SELECT k, sum(v) FROM t GROUP BY k ORDER BY k",
    ] {
        let (id, result) = run_job(&sched, &ctx, sql).await;
        assert!(result.is_ok(), "{sql}");
        jobs.push(id);
    }
    let killed_at = bjh_format::now_millis();
    doomed.kill();
    wait_for("the silent executor is dropped", || async {
        (executors(&sched).await.len() == 1).then_some(())
    })
    .await;
    let (id, result) = run_job(&sched, &ctx, "SELECT count(*) FROM t").await;
    assert!(result.is_ok());
    jobs.push(id);
    for id in &jobs {
        completed_log(&logs, id).await;
    }
    let stopped_from = bjh_format::now_millis();
    assert!(sched.terminate().success());
    let stopped_to = bjh_format::now_millis();
    let busy_want: u64 = jobs
        .iter()
        .map(|id| {
            let lines = std::fs::read_to_string(logs.join(format!("{id}.eventlog"))).unwrap();
            let footer: serde_json::Value =
                serde_json::from_str(lines.lines().last().unwrap()).unwrap();
            footer["data"]["busy_slot_ms"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(both.len(), 2);

    let mut hist = Proc::history(&logs, &[]);
    hist.wait_healthy().await;
    let end = stopped_to + 1_000;
    let whole = usage_of(&hist, t0 - 60_000, end).await;
    // The Clusters view: this one scheduler, its three jobs, the one
    // executor (2 slots) still up when it stopped, and its day's slot
    // time, all of it within the range above.
    let clusters = get_json(&hist.url("/api/clusters")).await;
    let rows = clusters["clusters"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{clusters:#}");
    let c = &rows[0];
    let listed = get_json(&hist.url("/api/jobs")).await;
    assert_eq!(c["scheduler_id"], listed[0]["scheduler_id"], "{c:#}");
    assert_eq!(c["total_jobs"], 3);
    assert_eq!(c["jobs"]["completed"], 3);
    assert_eq!(c["recording"], false);
    assert_eq!(
        (c["executors"].as_u64(), c["slots"].as_u64()),
        (Some(1), Some(2)),
        "{c:#}"
    );
    assert_eq!(c["capacity_slot_ms"], whole["capacity_slot_ms"]);
    assert_eq!(c["busy_slot_ms"], busy_want);
    let last_seen = c["last_seen"].as_u64().unwrap();
    assert!((up_at..=end).contains(&last_seen), "{c:#}: {up_at}..{end}");
    let (_, _, page) = get(&hist.url("/ui/clusters")).await;
    let page = String::from_utf8(page).unwrap();
    let id = c["scheduler_id"].as_str().unwrap();
    assert!(
        page.contains(&format!("href=\"/?scheduler_id={id}\"")),
        "{page}"
    );
    // Capacity as the test saw it: 2 slots from registration (between t0
    // and `up_at`) until the stop, 3 slots from registration until the
    // kill, whose end is the executor's last call: within its poll
    // interval before the kill (a second allowed).
    let low = 2.0 * (stopped_from - up_at) as f64 + 3.0 * (killed_at - up_at - 1_000) as f64;
    let high = 2.0 * (stopped_to - t0 + 1_000) as f64 + 3.0 * (killed_at - t0 + 1_000) as f64;
    let capacity = n(&whole, "capacity_slot_ms");
    let cluster_log = || {
        let dir = logs.join(".cluster");
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect::<String>()
    };
    assert!(
        low <= capacity && capacity <= high,
        "{low} <= {capacity} <= {high}: {whole}\n{}\nt0 {t0} up {up_at} killed {killed_at} stop {stopped_from}..{stopped_to}",
        cluster_log()
    );
    assert_eq!(n(&whole, "busy_slot_ms") as u64, busy_want, "{whole}");
    // The books balance for three ranges: the whole, the time both
    // executors were up, and a range cut through a job-free stretch.
    let mid = (up_at + killed_at) / 2;
    for (from, to) in [(t0 - 60_000, end), (up_at, killed_at), (mid, end)] {
        let u = usage_of(&hist, from, to).await;
        let shares: f64 = u["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| n(g, "idle_share_slot_ms"))
            .sum();
        let idle = n(&u, "idle_slot_ms");
        let within = |a: f64, b: f64| (a - b).abs() <= 0.01 * b.max(1.0);
        assert!(
            within(shares + n(&u, "unattributed_idle_slot_ms"), idle),
            "{u}"
        );
        let accounted = n(&u, "busy_slot_ms") - n(&u, "over_capacity_slot_ms") + idle;
        assert!(within(accounted, n(&u, "capacity_slot_ms")), "{u}");
    }
    // By executor: the two executors, their busy time from the jobs'
    // footers, the same totals.
    let by = get_json(&hist.url(&format!(
        "/api/usage?from={}&to={end}&group_by=executor",
        t0 - 60_000
    )))
    .await;
    let groups = by["groups"].as_array().unwrap();
    let mut keys: Vec<&str> = groups.iter().map(|g| g["key"].as_str().unwrap()).collect();
    keys.sort();
    let mut want_keys: Vec<&str> = both.iter().map(String::as_str).collect();
    want_keys.sort();
    assert_eq!(keys, want_keys, "{by}");
    assert_eq!(n(&by, "capacity_slot_ms"), capacity, "{by}");
    assert_eq!(n(&by, "busy_slot_ms") as u64, busy_want, "{by}");
    let shares: f64 = groups.iter().map(|g| n(g, "idle_share_slot_ms")).sum();
    let idle = n(&by, "idle_slot_ms");
    assert!(
        (shares + n(&by, "unattributed_idle_slot_ms") - idle).abs() <= 0.01 * idle,
        "{by}"
    );
    // SQL's `usage`, by hour and executor, adds up to the same capacity.
    let rows = sql(
        &hist,
        "SELECT executor_id, max(slots) AS slots, sum(capacity_slot_ms) AS capacity \
         FROM usage GROUP BY executor_id ORDER BY slots",
    )
    .await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        (rows[0]["slots"].as_i64(), rows[1]["slots"].as_i64()),
        (Some(2), Some(3))
    );
    let by_sql: f64 = rows.iter().map(|r| r["capacity"].as_f64().unwrap()).sum();
    assert_eq!(by_sql, capacity, "{rows:?}");
    // A range before anything ran has nothing.
    let before = usage_of(&hist, t0 - 120_000, t0 - 60_000).await;
    assert_eq!(n(&before, "capacity_slot_ms"), 0.0);
    // Bad ranges are refused, naming the parameter.
    let (status, _, body) = get(&hist.url("/api/usage?from=9&to=3")).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("from"));
    let (status, _, _) = get(&hist.url("/api/usage?group_by=colour")).await;
    assert_eq!(status, 400);
    assert!(hist.terminate().success());
    // The scheduler restarted over the same directory answers the same.
    let mut again = Proc::scheduler(&logs, &flags);
    again.wait_healthy().await;
    let after = usage_of(&again, t0 - 60_000, end).await;
    for key in [
        "capacity_slot_ms",
        "busy_slot_ms",
        "idle_slot_ms",
        "unattributed_idle_slot_ms",
    ] {
        assert_eq!(after[key], whole[key], "{key}: {after}");
    }
    assert_eq!(after["groups"], whole["groups"]);
    assert!(again.terminate().success());
}

/// The Usage page in a browser: the API's groups row for row (a hostile
/// job name as text), its totals, and each group linking to its runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_chromium,
    ignore = "chromium and chromium-driver (Debian) are not installed"
)]
async fn the_usage_page_shows_who_used_the_cluster_in_a_browser() {
    use crate::browser::Browser;
    use fantoccini::Locator;
    const HOSTILE: &str = "<img src=x onerror=window.pwned=1> nightly";
    let cluster = Cluster::start(&["--slot-hour-price", "3.6"]).await;
    let sched = &cluster.sched;
    let named = client_with(sched.port, &cluster.data, &[("ballista.job.name", HOSTILE)]).await;
    let mut ids = Vec::new();
    for (ctx, sql) in [
        (&named, "SELECT k, count(*) FROM t GROUP BY k"),
        (
            &cluster.ctx,
            "SELECT k, sum(v) FROM t GROUP BY k ORDER BY k",
        ),
    ] {
        let (id, result) = run_job(sched, ctx, sql).await;
        assert!(result.is_ok());
        ids.push(id);
    }
    for id in &ids {
        completed_log(&cluster.logs, id).await;
    }
    wait_for("the list states both jobs' slot times", || async {
        (listed(sched).await.len() == 2).then_some(())
    })
    .await;
    let b = Browser::start().await;
    b.open(&sched.url("/")).await;
    b.click(Locator::LinkText("Usage")).await;
    b.until("the page", "location.pathname === '/ui/usage'")
        .await;
    b.click(Locator::LinkText("name")).await;
    b.until(
        "grouped by name",
        "location.search.includes('group_by=name')",
    )
    .await;
    // The page's own range, as JSON: the same groups in the same order.
    let json_link = b
        .js("return document.querySelector('a[href^=\"/api/usage\"]').getAttribute('href');")
        .await;
    let api = get_json(&sched.url(json_link.as_str().unwrap())).await;
    let groups = api["groups"].as_array().unwrap();
    let rows = b.texts("main table tbody tr td.name").await;
    let keys: Vec<&str> = groups.iter().map(|g| g["key"].as_str().unwrap()).collect();
    let shown: Vec<&str> = keys
        .iter()
        .map(|k| if k.is_empty() { "(none)" } else { k })
        .collect();
    assert_eq!(rows, shown, "{api}");
    assert!(rows.contains(&HOSTILE.to_string()), "{rows:?}");
    assert_eq!(b.js("return window.pwned === undefined;").await, true);
    // Costs at 3.6 a slot-hour: a thousandth of a slot-second each.
    let cost = api["cost"].as_f64().unwrap();
    let capacity = api["capacity_slot_ms"].as_f64().unwrap();
    // The running scheduler's executor is up until now.
    assert!(capacity > 0.0 && api["utilisation"].is_f64(), "{api}");
    assert!((cost - capacity / 1_000_000.0).abs() < 0.001, "{api}");
    let facts = b.text("dl.usage-totals").await;
    assert!(facts.contains(&format!("{cost:.2}")), "{facts}");
    let bars = b
        .js("return document.querySelectorAll('figure.usage-chart svg rect.busy').length;")
        .await;
    assert!(bars.as_u64().unwrap() >= 1, "{bars}");
    b.shot("usage").await;
    // A group links to its runs.
    b.click(Locator::LinkText(HOSTILE)).await;
    b.until("the job list", "location.pathname === '/'").await;
    let listed_ids = b.texts("table.jobs tbody td.id").await;
    assert_eq!(listed_ids, vec![ids[0].clone()]);
}

/// A recording scheduler that has no executor and has run no job yet is
/// on the Clusters view from its cluster log's first mark: recording,
/// with no executor, no slot and no job; its id is the one it records.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduler_with_no_executor_and_no_job_is_listed_as_recording() {
    let tmp = tempfile::tempdir().unwrap();
    let mut sched = Proc::scheduler(tmp.path(), &["--scheduler-id", "lonely-1"]);
    sched.wait_healthy().await;
    let row = wait_for("the scheduler is listed", || async {
        let answer = get_json(&sched.url("/api/clusters")).await;
        answer["clusters"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(row["scheduler_id"], "lonely-1", "{row}");
    assert_eq!(row["recording"], true, "{row}");
    assert_eq!(
        (row["executors"].as_u64(), row["slots"].as_u64()),
        (Some(0), Some(0)),
        "{row}"
    );
    assert_eq!(row["total_jobs"], 0, "{row}");
    assert!(row["last_seen"].as_u64().is_some_and(|t| t > 0), "{row}");
    // The page says so too.
    let (code, _, page) = get(&sched.url("/ui/clusters")).await;
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&page).contains("lonely-1"));
    sched.terminate();
}
