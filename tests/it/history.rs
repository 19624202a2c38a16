//! `--history-only`: the real binary serving a directory over HTTP.

use crate::harness::*;
use ballista_api_types::dto::{JobResponse, QueryStagesResponse};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/upstream");

/// A live answer: status, content type, body.
pub(crate) type Captured = (u16, String, Vec<u8>);

/// Every route of one job, as the live scheduler answers it.
pub(crate) async fn capture_routes(
    proc: &Proc,
    job_id: &str,
    stages: &[String],
) -> BTreeMap<String, Captured> {
    let mut paths = vec![
        format!("/api/job/{job_id}"),
        format!("/api/job/{job_id}?plan_format=default"),
        format!("/api/job/{job_id}?plan_format=tree"),
        format!("/api/job/{job_id}?plan_format=metrics"),
        format!("/api/job/{job_id}/stages"),
        format!("/api/job/{job_id}/stages?plan_format=tree"),
        format!("/api/job/{job_id}/stages?plan_format=metrics"),
        format!("/api/job/{job_id}/dot"),
        format!("/api/job/{job_id}?plan_format=bogus"),
    ];
    for s in stages {
        paths.push(format!("/api/job/{job_id}/stage/{s}/dot"));
    }
    let mut out = BTreeMap::new();
    for path in paths {
        out.insert(path.clone(), get(&proc.url(&path)).await);
    }
    out
}

pub(crate) fn copy_fixtures(to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(FIXTURES).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "eventlog") {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// Jobs a real cluster recorded once, shared by the history server's
/// tests below: a succeeded and a failed job with the live scheduler's
/// answers to every route, and a third job's log kept aside, to arrive in a
/// directory after a server has started.
struct Recorded {
    /// `logs/` (the first two jobs) and `later/` (the third).
    dir: PathBuf,
    ok_id: String,
    bad_id: String,
    new_id: String,
    /// The live scheduler's answers to every route of the succeeded job.
    live: BTreeMap<String, Captured>,
    /// Its answer for the failed job.
    live_bad: Vec<u8>,
}

static RECORDED: tokio::sync::OnceCell<Recorded> = tokio::sync::OnceCell::const_new();

/// The recording, made by the first test that asks (in a directory of
/// cargo's target, replaced on each run) and then read by all.
async fn recorded() -> &'static Recorded {
    RECORDED
        .get_or_init(|| async {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("history-recorded");
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("logs")).unwrap();
            std::fs::create_dir_all(dir.join("later")).unwrap();
            let Cluster {
                tmp: _tmp,
                logs,
                sched,
                ctx,
                ..
            } = Cluster::start(&[]).await;
            let sql = "SELECT k, sum(v) FROM t GROUP BY k ORDER BY k";
            let (ok_id, result) = run_job(&sched, &ctx, sql).await;
            assert!(result.is_ok());
            let lines = completed_log(&logs, &ok_id).await;
            let stage_dots = job_end(&lines)["responses"]["stage_dots"].clone();
            let stage_ids: Vec<String> = stage_dots.as_object().unwrap().keys().cloned().collect();
            let live = capture_routes(&sched, &ok_id, &stage_ids).await;
            let (bad_id, _) = run_job(&sched, &ctx, "SELECT CAST(s AS INT) FROM t").await;
            completed_log(&logs, &bad_id).await;
            let (_, _, live_bad) = get(&sched.url(&format!("/api/job/{bad_id}"))).await;
            let (new_id, _) = run_job(&sched, &ctx, "SELECT count(*) FROM t").await;
            completed_log(&logs, &new_id).await;
            for (id, to) in [(&ok_id, "logs"), (&bad_id, "logs"), (&new_id, "later")] {
                let name = format!("{id}.eventlog");
                std::fs::copy(logs.join(&name), dir.join(to).join(&name)).unwrap();
            }
            Recorded {
                dir,
                ok_id,
                bad_id,
                new_id,
                live,
                live_bad,
            }
        })
        .await
}

/// A directory of the recorded jobs, upstream's fixtures, and damage that
/// must hide nothing else: garbage, an empty log, a newer schema, an
/// unfinished log, a directory with a log's name.
fn served_dir(r: &Recorded) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path();
    for entry in std::fs::read_dir(r.dir.join("logs")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, logs.join(path.file_name().unwrap())).unwrap();
    }
    copy_fixtures(logs);
    std::fs::write(
        logs.join("garbage.eventlog"),
        [0xde, 0xad, 0xbe, 0xef, b'\n'],
    )
    .unwrap();
    std::fs::write(logs.join("empty.eventlog"), b"").unwrap();
    let future = "{\"ev\":\"JobEnd\",\"version\":99,\"data\":{}}\n";
    std::fs::write(logs.join("future.eventlog"), future).unwrap();
    std::fs::write(logs.join("orphan.eventlog.running"), "{\"ev\":\"JobStart\"").unwrap();
    std::fs::create_dir(logs.join("a-directory.eventlog")).unwrap();
    tmp
}

/// A history server over `dir`, rescanning every second, its first index
/// pass done.
async fn history_over(dir: &Path) -> Proc {
    let mut hist = Proc::history(dir, &["--update-interval-seconds", "1"]);
    hist.wait_ready().await;
    hist
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recorded_jobs_are_served_with_the_live_schedulers_bytes() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    for (path, (status, ct, body)) in &r.live {
        let (h_status, h_ct, h_body) = get(&hist.url(path)).await;
        assert_eq!(h_status, *status, "{path}");
        if *status == 200 {
            assert_eq!(&h_ct, ct, "{path}");
        }
        assert_eq!(
            String::from_utf8_lossy(&h_body),
            String::from_utf8_lossy(body),
            "{path} differs from the live response"
        );
    }
    let (_, _, h_bad) = get(&hist.url(&format!("/api/job/{}", r.bad_id))).await;
    assert_eq!(h_bad, r.live_bad);
}

/// Real jobs' pages draw their whole stage graph, no edge through a box.
/// The succeeded job ends in an `ORDER BY`: its last stage reads through a
/// range shuffle that the scheduler's DOT has no edge for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recorded_jobs_draw_their_whole_stage_graph() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    for id in [&r.ok_id, &r.bad_id] {
        // The stage graph, and the profile's frames around the operators.
        for path in [format!("/ui/job/{id}"), format!("/ui/job/{id}?tab=profile")] {
            let (status, _, page) = get(&hist.url(&path)).await;
            assert_eq!(status, 200, "{path}");
            let page = String::from_utf8(page).unwrap();
            assert!(page.contains("<svg class=\"graph"), "{path} draws no graph");
            let faults = crate::graph::stage_graph_faults(&page);
            assert!(faults.is_empty(), "{path}: {faults:?}");
        }
    }
}

/// A stage page is a query profile: each operator's box carries the rows
/// and compute the live scheduler's metrics plan gives it (read here with
/// upstream's own answer type), and the operator with the most compute is
/// marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stage_pages_carry_each_operators_metrics_from_the_live_plan() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    let live = &r.live[&format!("/api/job/{}/stages?plan_format=metrics", r.ok_id)].2;
    let live: ballista_api_types::dto::QueryStagesResponse = serde_json::from_slice(live).unwrap();
    let mut checked = 0;
    for stage in &live.stages {
        // The oracle: each plan line's operator, rows out and compute.
        let mut operators: Vec<(String, Option<u64>, f64)> = Vec::new();
        for line in stage.stage_plan.as_deref().unwrap_or("").lines() {
            let name = line
                .trim()
                .split([':', ','])
                .next()
                .unwrap()
                .trim()
                .to_string();
            let metric = |key: &str| {
                let at = [format!("[{key}="), format!(" {key}=")]
                    .iter()
                    .find_map(|k| line.find(k.as_str()))?
                    + key.len()
                    + 2;
                let value = &line[at..];
                Some(value[..value.find([',', ']']).unwrap()].to_string())
            };
            let rows = metric("output_rows").and_then(|v| v.parse().ok());
            let compute = metric("elapsed_compute").map_or(0.0, |v| {
                let (n, scale) = [("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)]
                    .into_iter()
                    .find_map(|(u, k)| v.strip_suffix(u).map(|n| (n, k)))
                    .unwrap();
                n.parse::<f64>().unwrap() * scale
            });
            operators.push((name, rows, compute));
        }
        let path = format!("/ui/job/{}/stage/{}", r.ok_id, stage.stage_id);
        let (status, _, page) = get(&hist.url(&path)).await;
        assert_eq!(status, 200, "{path}");
        let boxes = crate::graph::drawn_boxes(&String::from_utf8(page).unwrap());
        assert_eq!(boxes.len(), operators.len(), "{path}: {boxes:?}");
        for (name, rows, _) in &operators {
            let Some(rows) = rows.filter(|&n| n < 1_000) else {
                continue;
            };
            let drawn = boxes.iter().filter(|b| b.title.starts_with(name.as_str()));
            let want = format!("{rows} rows");
            assert!(
                drawn
                    .clone()
                    .any(|b| b.lines.iter().any(|l| l.starts_with(&want))),
                "{path}: {name} should say {want}: {boxes:?}"
            );
            checked += 1;
        }
        let hottest = operators.iter().max_by(|a, b| a.2.total_cmp(&b.2)).unwrap();
        let hot: Vec<&crate::graph::Drawn> = boxes.iter().filter(|b| b.class == "hot").collect();
        if hottest.2 > 0.0 {
            assert_eq!(hot.len(), 1, "{path}: {boxes:?}");
            assert!(
                hot[0].title.starts_with(&hottest.0),
                "{path}: {hottest:?} {hot:?}"
            );
        } else {
            assert!(hot.is_empty(), "{path}");
        }
    }
    assert!(checked >= 3, "only {checked} row counts checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tuis_wire_types_read_the_list_and_every_answer() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    let (_, _, list) = get(&hist.url("/api/jobs")).await;
    let jobs: Vec<JobResponse> = serde_json::from_slice(&list).unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
    for id in [
        r.ok_id.as_str(),
        r.bad_id.as_str(),
        "038HEXYE9M000",
        "038HEXYEEG000",
        "038HEXYEMR000",
        "038HEY2RDJ000",
        "038HEY38ER000",
        "golden-v1",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    assert_eq!(
        jobs.len(),
        8,
        "damaged and unfinished logs are not listed: {ids:?}"
    );
    let starts: Vec<u64> = jobs.iter().map(|j| j.start_time).collect();
    assert!(
        starts.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {starts:?}"
    );
    let ok = &r.ok_id;
    let _: JobResponse =
        serde_json::from_slice(&get(&hist.url(&format!("/api/job/{ok}"))).await.2).unwrap();
    let _: QueryStagesResponse =
        serde_json::from_slice(&get(&hist.url(&format!("/api/job/{ok}/stages"))).await.2).unwrap();
    let (status, _, config) = get(&hist.url(&format!("/api/job/{ok}/config"))).await;
    assert_eq!(status, 200);
    let _: BTreeMap<String, String> = serde_json::from_slice(&config).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_logs_are_served_from_their_stored_responses() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    for id in ["038HEXYE9M000", "038HEY38ER000", "golden-v1"] {
        let (status, ct, body) = get(&hist.url(&format!("/api/job/{id}"))).await;
        assert_eq!((status, ct.as_str()), (200, "application/json"));
        let stored = ballista_history::reader::read_completed_job(
            &Path::new(FIXTURES).join(format!("{id}.eventlog")),
        )
        .unwrap()
        .unwrap();
        assert_eq!(String::from_utf8(body).unwrap(), stored.job.get());
        let (_, _, dot) = get(&hist.url(&format!("/api/job/{id}/dot"))).await;
        assert_eq!(String::from_utf8(dot).unwrap(), stored.dot);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_history_servers_own_routes_say_so_and_count_the_damage() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    assert_eq!(
        get_json(&hist.url("/api/executors")).await,
        serde_json::json!([])
    );
    let state = get_json(&hist.url("/api/state")).await;
    assert_eq!(state["history_only"], true);
    assert!(state["version"].is_string() && state["started"].is_u64());
    assert!(get_json(&hist.url("/api/version")).await["version"].is_string());
    // Garbage, empty and a newer schema: three logs that cannot be read.
    let metrics = String::from_utf8(get(&hist.url("/api/metrics")).await.2).unwrap();
    assert!(
        metrics.contains("ballista_job_history_unreadable_logs_total 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_a_recorded_job_is_a_conflict_with_a_reason() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    let r = http_client()
        .patch(hist.url(&format!("/api/job/{}", r.ok_id)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["cancelled"], false);
    assert!(body["reason"].as_str().unwrap().contains("read-only"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_and_hostile_ids_get_upstreams_404_and_a_running_log_its_own() {
    let r = recorded().await;
    let dir = served_dir(r);
    let hist = history_over(dir.path()).await;
    // No paths in the body. The oracle: upstream's own history server
    // asked for a job it lacks.
    let upstream_404 = {
        use tower::ServiceExt;
        let empty = tempfile::tempdir().unwrap();
        let upstream = ballista_scheduler::history::history_router(std::sync::Arc::new(
            ballista_scheduler::history::HistoryStore::load(empty.path()).unwrap(),
        ));
        let request = http::Request::get("/api/job/nope/config")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = upstream.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 404);
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
    };
    let long = "x".repeat(10_000);
    for id in [
        "nope",
        "..%2F..%2Fetc%2Fpasswd",
        "%2e%2e",
        "%2Fetc%2Fpasswd",
        "a%00b",
        &long,
        "garbage",
    ] {
        let (status, _, body) = get(&hist.url(&format!("/api/job/{id}/config"))).await;
        assert_eq!(status, 404, "{id}");
        assert_eq!(body, upstream_404, "{id}");
    }
    // A `.running` log is an unfinished job: it has no stored responses.
    let (status, _, body) = get(&hist.url("/api/job/orphan/config")).await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("has not finished"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rescan_lists_a_new_log_and_drops_a_deleted_one_but_a_pinned_server_does_not() {
    let r = recorded().await;
    let dir = served_dir(r);
    let logs = dir.path();
    let hist = history_over(logs).await;
    // The third job's log arrives after the server started, under its
    // final name at once (as the writer's rename makes it appear).
    let name = format!("{}.eventlog", r.new_id);
    std::fs::copy(r.dir.join("later").join(&name), logs.join(".arriving")).unwrap();
    std::fs::rename(logs.join(".arriving"), logs.join(&name)).unwrap();
    let mut pinned = Proc::history(logs, &["--update-interval-seconds", "0"]);
    pinned.wait_ready().await;
    let (new_id, bad_id) = (&r.new_id, &r.bad_id);
    eventually("the new job is listed", || async {
        get(&hist.url(&format!("/api/job/{new_id}"))).await.0 == 200
    })
    .await;
    std::fs::remove_file(logs.join(format!("{bad_id}.eventlog"))).unwrap();
    eventually("the deleted job leaves the list", || async {
        get(&hist.url(&format!("/api/job/{bad_id}"))).await.0 == 404
    })
    .await;
    // The pinned server still lists what it saw at startup.
    let (_, _, pinned_list) = get(&pinned.url("/api/jobs")).await;
    let pinned_jobs: Vec<JobResponse> = serde_json::from_slice(&pinned_list).unwrap();
    assert!(pinned_jobs.iter().any(|j| &j.job_id == bad_id));
    let (ok_status, _, _) = get(&pinned.url(&format!("/api/job/{new_id}"))).await;
    assert_eq!(
        ok_status, 200,
        "the pinned index was built after the new log arrived"
    );
    let (gone_status, _, gone_body) = get(&pinned.url(&format!("/api/job/{bad_id}"))).await;
    assert_eq!(
        gone_status, 500,
        "a log deleted behind a pinned index fails that request"
    );
    assert!(
        !String::from_utf8_lossy(&gone_body).contains(logs.to_str().unwrap()),
        "no paths in errors"
    );
}

#[tokio::test]
async fn a_history_server_starts_before_its_directory_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("not-yet");
    let mut hist = Proc::history(&logs, &["--update-interval-seconds", "1"]);
    hist.wait_healthy().await;
    assert_eq!(get(&hist.url("/api/jobs")).await.2, b"[]");
    copy_fixtures(&logs);
    eventually("the fixtures are listed", || async {
        get(&hist.url("/api/job/golden-v1")).await.0 == 200
    })
    .await;
}

/// Upstream's own history server over `dir`, asked in process.
pub(crate) async fn upstream_answer(dir: &Path, path: &str) -> (u16, Vec<u8>) {
    use tower::ServiceExt;
    let upstream = ballista_scheduler::history::history_router(std::sync::Arc::new(
        ballista_scheduler::history::HistoryStore::load(dir).unwrap(),
    ));
    let request = http::Request::get(path)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = upstream.oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body.to_vec())
}

/// Equal as upstream answers, byte for byte.
pub(crate) fn same_answer(ours: &[u8], theirs: &[u8]) -> bool {
    ours == theirs
}

/// Logs written by upstream's scheduler (no footer) answer every payload
/// as upstream's own history server does, read through the ranges learnt
/// when they were indexed; a log rewritten in place afterwards (same
/// length and time, payloads moved or changed) is served as it now is.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_written_logs_answer_as_upstream_does_for_every_payload() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    copy_fixtures(dir);
    let ids: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".eventlog").map(str::to_string))
        .collect();
    // No rescan while the test runs: what was learnt at the first one is
    // what answers.
    let mut hist = Proc::history(dir, &["--update-interval-seconds", "3600"]);
    hist.wait_healthy().await;
    eventually("the fixtures are indexed", || async {
        job_ids(&hist).await.len() == ids.len()
    })
    .await;
    let routes = ["", "/stages", "/config", "/dot"];
    let check = |id: String| {
        let hist = &hist;
        async move {
            for route in routes {
                let path = format!("/api/job/{id}{route}");
                let (status, _, ours) = get(&hist.url(&path)).await;
                let (their_status, theirs) = upstream_answer(dir, &path).await;
                assert_eq!(status, their_status, "{path}");
                assert!(
                    same_answer(&ours, &theirs),
                    "{path}: ours {} / upstream's {}",
                    String::from_utf8_lossy(&ours),
                    String::from_utf8_lossy(&theirs)
                );
            }
        }
    };
    for id in &ids {
        check(id.clone()).await;
    }

    // Rewritten in place, keeping its length and modification time: a
    // config value changed in place, then the payloads moved.
    let id = "038HEXYE9M000";
    let path = dir.join(format!("{id}.eventlog"));
    let rewrite = |edits: &[(&str, &str)]| {
        let meta = std::fs::metadata(&path).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        for (from, to) in edits {
            assert_eq!(text.matches(from).count(), 1, "{from}");
            text = text.replace(from, to);
        }
        assert_eq!(text.len() as u64, meta.len(), "the same length");
        std::fs::write(&path, text).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(meta.modified().unwrap()).unwrap();
    };
    rewrite(&[(
        r#""datafusion.execution.batch_size":"8192""#,
        r#""datafusion.execution.batch_size":"4096""#,
    )]);
    check(id.to_string()).await;
    let (_, _, config) = get(&hist.url(&format!("/api/job/{id}/config"))).await;
    assert!(
        String::from_utf8_lossy(&config).contains(r#""datafusion.execution.batch_size":"4096""#)
    );
    // The config three bytes shorter and the graph after it three longer:
    // the graph's range now starts three bytes late, the config's ends
    // three bytes late.
    rewrite(&[
        (
            r#""datafusion.execution.batch_size":"4096""#,
            r#""datafusion.execution.batch_size":"1""#,
        ),
        ("digraph G {", "digraph Gxyz {"),
    ]);
    check(id.to_string()).await;
    let (_, _, dot) = get(&hist.url(&format!("/api/job/{id}/dot"))).await;
    assert!(String::from_utf8_lossy(&dot).starts_with("digraph Gxyz {"));
}
