//! SQL that cannot hurt the scheduler: hostile queries against a live,
//! recording scheduler with a real executor, one after another and all at
//! once, while the scheduler keeps answering and a real job runs; and the
//! SQL page's row cap.

use crate::harness::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// An attack, the status it must get and what its message must say.
struct Attack {
    what: &'static str,
    sql: &'static str,
    status: u16,
    says: &'static str,
}

/// The issue's attacks, each with its answer (`--sql-timeout-seconds 4`).
const ATTACKS: [Attack; 5] = [
    Attack {
        what: "an allocation that aborts the process",
        sql: "SELECT length(repeat(arrow_cast('x','LargeUtf8'), 4611686018427387903))",
        status: 400,
        says: "more memory than its worker may use",
    },
    Attack {
        what: "a 2 GiB string outside the memory pool",
        sql: "SELECT length(repeat('x', 2147483647))",
        status: 400,
        says: "more memory than its worker may use",
    },
    Attack {
        what: "two long levenshteins",
        sql: "SELECT levenshtein(repeat('ab', 40000), repeat('ba', 40000)), \
              levenshtein(repeat('cd', 40000), repeat('dc', 40000))",
        status: 400,
        says: "stopped after 10 s",
    },
    Attack {
        what: "a generate_series cross join",
        sql: "SELECT count(*) FROM generate_series(1, 1000000000) a \
              CROSS JOIN generate_series(1, 1000000000) b",
        status: 400,
        says: "stopped after 10 s",
    },
    Attack {
        what: "a 1 GB answer",
        sql: "SELECT repeat('x', 10000) AS s FROM generate_series(1, 100000)",
        status: 400,
        says: "--sql-max-answer-bytes",
    },
];

/// The heavy query sent 50 times at once.
const HEAVY: &str = "SELECT count(*) FROM generate_series(1, 1000000000) a \
                     CROSS JOIN generate_series(1, 1000000000) b";

async fn post_sql(proc: &Proc, sql: &str) -> (u16, String) {
    let r = http_client()
        .post(proc.url("/api/sql"))
        .header("content-type", "application/sql")
        .body(sql.to_string())
        .send()
        .await
        .expect("the query is answered");
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The resident memory of process `pid` now, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

async fn outcome(proc: &Proc, outcome: &str) -> u64 {
    let (_, _, body) = get(&proc.url("/api/metrics")).await;
    counter(
        &String::from_utf8_lossy(&body),
        &format!("ballista_job_history_sql_queries_total{{outcome=\"{outcome}\"}}"),
    )
}

/// Asks `/api/jobs` and `/healthz` in turn until `stop`; the slowest
/// answer, and every answer that was not a 200.
fn watch(proc: &Proc, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(Duration, Vec<String>)> {
    let urls = [proc.url("/api/jobs"), proc.url("/healthz")];
    tokio::spawn(async move {
        let client = http_client();
        let mut slowest = Duration::ZERO;
        let mut bad = Vec::new();
        let mut asked = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let url = &urls[(asked % 2) as usize];
            asked += 1;
            let start = Instant::now();
            match client
                .get(url)
                .timeout(Duration::from_secs(30))
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => {}
                Ok(r) => bad.push(format!("{url}: {}", r.status())),
                Err(e) => bad.push(format!("{url}: {e}")),
            }
            slowest = slowest.max(start.elapsed());
            tokio::task::yield_now().await;
        }
        assert!(asked > 10, "the watcher asked {asked} times");
        (slowest, bad)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_query_stops_the_scheduler_scheduling_or_the_server_serving() {
    // The time limit counts from the request, so it covers the first
    // query's build of the columnar history too: 10 s leaves a debug build
    // on a loaded two-core machine room for that, while every attack that
    // should run out of time still does.
    let cluster = Cluster::start(&[
        "--sql-timeout-seconds",
        "10",
        "--sql-queue",
        "4",
        "--sql-max-answer-bytes",
        "16MiB",
    ])
    .await;
    let sched = &cluster.sched;
    let (first, ok) = run_job(sched, &cluster.ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
    assert_eq!(ok, Ok(100));
    completed_log(&cluster.logs, &first).await;
    let tasks_in_logs = || -> i64 { crate::sql::task_lines(&cluster.logs).values().sum() };
    let count_tasks = || async {
        let (status, body) = post_sql(sched, "SELECT count(*) AS n FROM tasks").await;
        assert_eq!(status, 200, "{body}");
        let rows: serde_json::Value = serde_json::from_str(&body).unwrap();
        rows[0]["n"].as_i64().unwrap()
    };
    assert_eq!(count_tasks().await, tasks_in_logs());
    let rss_before = rss_kib(sched.pid());

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(sched, stop.clone());

    // One after another: each gets its own status and message.
    for attack in &ATTACKS {
        let (status, body) = post_sql(sched, attack.sql).await;
        assert_eq!(status, attack.status, "{}: {body}", attack.what);
        assert!(body.contains(attack.says), "{}: {body}", attack.what);
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["http_code"], attack.status, "{}", attack.what);
    }
    assert_eq!(outcome(sched, "memory_limit").await, 2);
    assert_eq!(outcome(sched, "timeout").await, 2);
    assert_eq!(outcome(sched, "too_large").await, 1);

    // A client that goes away after a second: its query is killed then,
    // not at the time limit.
    let gone = Instant::now();
    let left = http_client()
        .post(sched.url("/api/sql"))
        .header("content-type", "application/sql")
        .body(HEAVY)
        .timeout(Duration::from_secs(1))
        .send()
        .await;
    assert!(left.is_err(), "the client gave up");
    eventually("the query of the client that left is stopped", || async {
        outcome(sched, "client_gone").await == 1
    })
    .await;
    let gone_at = gone.elapsed();
    assert!(
        gone_at < Duration::from_secs(4),
        "stopped {gone_at:?} after it was sent, not when its client left"
    );
    assert_eq!(
        outcome(sched, "timeout").await,
        2,
        "not counted as a timeout"
    );

    // All at once: every attack, 50 heavy queries, and a real job.
    let busy_before = outcome(sched, "busy").await;
    let attacks = futures::future::join_all(ATTACKS.iter().map(|a| post_sql(sched, a.sql)));
    let heavy = futures::future::join_all((0..50).map(|_| post_sql(sched, HEAVY)));
    let job = run_job(sched, &cluster.ctx, "SELECT k, sum(v) FROM t GROUP BY k");
    let (attacks, heavy, (job, ran)) = tokio::join!(attacks, heavy, job);
    // Each gets its own answer, or is turned away, or (on a machine this
    // loaded) runs past its limit and is stopped: a clear answer each.
    for (attack, (status, body)) in ATTACKS.iter().zip(&attacks) {
        let own = *status == attack.status && body.contains(attack.says);
        let busy = *status == 503 && body.contains("try again shortly");
        let stopped = *status == 400 && body.contains("stopped after 10 s");
        assert!(own || busy || stopped, "{}: {status} {body}", attack.what);
    }
    for (status, body) in &heavy {
        let stopped = *status == 400 && body.contains("stopped after 10 s");
        let busy = *status == 503 && body.contains("try again shortly");
        assert!(stopped || busy, "{status} {body}");
    }
    // Two run and four wait at a time; the others are turned away (a few
    // more get in where a quick refusal frees a slot as they arrive), and
    // the server counted each one it turned away.
    let busy = attacks
        .iter()
        .chain(&heavy)
        .filter(|(s, _)| *s == 503)
        .count();
    assert!((40..=49).contains(&busy), "{busy} of 55 were turned away");
    assert_eq!(outcome(sched, "busy").await - busy_before, busy as u64);
    // The job ran through it all and is recorded.
    assert_eq!(ran, Ok(100));
    assert_whole(&completed_log(&cluster.logs, &job).await);

    stop.store(true, Ordering::Relaxed);
    let (slowest, bad) = watcher.await.unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert!(
        slowest < Duration::from_secs(2),
        "the scheduler took {slowest:?} to answer /api/jobs or /healthz"
    );
    // Afterwards: the right count, and the memory back where it was.
    eventually("the columnar history holds the new job", || async {
        count_tasks().await == tasks_in_logs()
    })
    .await;
    let rss_after = rss_kib(sched.pid());
    assert!(
        rss_after < rss_before + 50 * 1024,
        "the server's RSS went from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(get(&sched.url("/api/state")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sql_page_shows_the_first_thousand_rows_and_links_the_whole_answer() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_healthy().await;
    let q = "SELECT value FROM generate_series(1, 2500)";
    let url = server.url(&format!("/ui/sql?q={}", q.replace(' ', "+")));
    let (status, _, page) = get(&url).await;
    let page = String::from_utf8(page).unwrap();
    assert_eq!(status, 200, "{page}");
    let body = page.split("<tbody>").nth(1).unwrap();
    assert_eq!(body.matches("<tr>").count(), 1000);
    assert!(page.contains("The first 1,000 rows are shown"), "{page}");
    // The link is to the whole answer.
    let href = page
        .split("href=\"/ui/sql.csv")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to the CSV");
    let (status, _, csv) =
        get(&server.url(&format!("/ui/sql.csv{}", href.replace("&amp;", "&")))).await;
    assert_eq!(status, 200);
    assert_eq!(String::from_utf8(csv).unwrap().lines().count(), 1 + 2500);
    server.terminate();
}

/// A page of another site that tries every way a page can make a server
/// run SQL, and says what its own requests saw.
fn attacking_page(target: &str) -> String {
    format!(
        r#"<!doctype html><title>elsewhere</title>
<form id="f" method="post" enctype="text/plain" action="{target}/api/sql" target="sink">
<input name="SELECT 1 --" value="x"></form>
<iframe name="sink"></iframe>
<iframe id="page" src="{target}/ui/sql?q=SELECT+2"></iframe>
<img id="csv" src="{target}/ui/sql.csv?q=SELECT+3">
<script>
const seen = {{}};
const tried = [
  ["plain", fetch("{target}/api/sql", {{method: "POST", mode: "no-cors", body: "SELECT 4"}})],
  ["untyped", fetch("{target}/api/sql", {{method: "POST", mode: "no-cors", body: new Blob(["SELECT 5"])}})],
  ["sql", fetch("{target}/api/sql", {{method: "POST", headers: {{"content-type": "application/sql"}}, body: "SELECT 6"}})],
  ["json", fetch("{target}/api/sql", {{method: "POST", credentials: "include", headers: {{"content-type": "application/json"}}, body: '{{"sql": "SELECT 7"}}'}})],
].map(([name, p]) => p.then(r => seen[name] = "sent:" + r.type, e => seen[name] = "refused"));
document.getElementById("f").submit();
const loaded = (el) => new Promise(done => {{ el.onload = el.onerror = done; }});
Promise.all([...tried, loaded(document.getElementById("page")), loaded(document.getElementById("csv")),
             loaded(document.querySelector("iframe[name=sink]"))])
  .then(() => {{ window.seen = seen; }});
</script>"#
    )
}

/// Serves `page` at `/` on a port of its own; its address.
async fn serve_page(page: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    // Another site: another host name, not just another port.
    format!("http://localhost:{port}/")
}

async fn outcomes(proc: &Proc, token: Option<&str>) -> std::collections::BTreeMap<String, u64> {
    let mut request = http_client().get(proc.url("/api/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let text = request.send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("ballista_job_history_sql_queries_total{outcome=\""))
        .filter_map(|l| {
            let (name, n) = l.split_once("\"} ")?;
            Some((name.to_string(), n.trim().parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_chromium,
    ignore = "chromium and chromium-driver (Debian) are not installed"
)]
async fn a_page_of_another_site_cannot_make_the_server_run_sql() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let b = crate::browser::Browser::start().await;
    for token in [None, Some("s3cret")] {
        let mut args = vec![];
        if token.is_some() {
            args = vec!["--api-token-file", token_file.to_str().unwrap()];
        }
        let mut server = Proc::history(tmp.path(), &args);
        server.wait_healthy().await;
        let target = server.url("").trim_end_matches('/').to_string();
        if let Some(token) = token {
            // Signed in: the browser holds the pages' cookie.
            b.open(&format!("{target}/ui/login")).await;
            let field = b
                .client
                .find(fantoccini::Locator::Id("token"))
                .await
                .unwrap();
            field.send_keys(&format!("{token}\n")).await.unwrap();
            b.until("signed in", "location.pathname === '/'").await;
        }
        let before = outcomes(&server, token).await;
        let elsewhere = serve_page(attacking_page(&target)).await;
        b.open(&elsewhere).await;
        b.until("the page tried everything", "window.seen !== undefined")
            .await;
        let seen = b.js("return window.seen;").await;
        // Requests a page may send unasked went out; those that need the
        // server's leave were not granted it, so never sent.
        assert_eq!(seen["plain"], "sent:opaque", "{seen}");
        assert_eq!(seen["untyped"], "sent:opaque", "{seen}");
        assert_eq!(seen["sql"], "refused", "{seen}");
        assert_eq!(seen["json"], "refused", "{seen}");
        let after = outcomes(&server, token).await;
        let ran: u64 = [
            "answered",
            "refused",
            "too_large",
            "timeout",
            "memory_limit",
            "cpu_limit",
            "crashed",
            "busy",
        ]
        .iter()
        .map(|o| after[*o] - before[*o])
        .sum();
        assert_eq!(ran, 0, "{token:?}: {before:?} -> {after:?}");
        if token.is_none() {
            // They reached the server and were turned away there: the
            // form and the two fetches by their type, the framed page and
            // the embedded CSV as another site's.
            assert_eq!(after["wrong_type"] - before["wrong_type"], 3, "{after:?}");
            assert_eq!(after["cross_site"] - before["cross_site"], 2, "{after:?}");
        }
        // The same query from the user, in this browser, runs.
        b.open(&format!("{target}/ui/sql?q=SELECT+2")).await;
        b.until(
            "the answer",
            "document.querySelector('table.result') !== null",
        )
        .await;
        let mine = outcomes(&server, token).await;
        assert_eq!(mine["answered"], after["answered"] + 1);
        server.terminate();
    }
}
