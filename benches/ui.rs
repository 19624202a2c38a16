//! The web UI's costs:
//! - server time of the jobs page over a history of 1,000,000 jobs (the
//!   router answering in process, body included), beside the JSON list
//!   of the same page (`/api/jobs?limit=50`) in the same run;
//! - in headless Chromium, the time from navigation to a drawn job page
//!   (its timeline drawn) for a job of 50,000 tasks and for a small one.
//!
//! `cargo bench --bench ui`; `SCALE_JOBS` changes the 1,000,000. The
//! browser part needs Debian's `chromium` and `chromium-driver`.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

#[path = "../tests/it/browser.rs"]
#[allow(dead_code)]
mod browser;
mod corpus;

use ballista_job_history::history_router;
use bjh_metrics::HistoryMetrics;
use bjh_store::LogStore;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One request through the router: status, body size, time.
async fn call(router: &axum::Router, uri: &str) -> (u16, usize, Duration) {
    let started = Instant::now();
    let response = router
        .clone()
        .oneshot(
            http::Request::get(uri)
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, body.len(), started.elapsed())
}

async fn jobs_page(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = corpus::indexed_store(dir.path(), n);
    let router = history_router(Arc::new(store), None, None);
    let mid = format!("0{:012X}", n / 2);
    let failed = n / 20;
    let cases: Vec<(String, String, usize)> = vec![
        (
            "`/api/jobs?limit=50` (JSON, the same page)".into(),
            "/api/jobs?limit=50".into(),
            1000,
        ),
        (
            "jobs page `/` (50 rows, counts per status)".into(),
            "/".into(),
            1000,
        ),
        ("jobs page `/?limit=100`".into(), "/?limit=100".into(), 1000),
        (
            "jobs page after a cursor half-way down".into(),
            format!("/?after={mid}"),
            1000,
        ),
        (
            "jobs page before a cursor half-way down (Previous)".into(),
            format!("/?before={mid}"),
            1000,
        ),
        (
            format!("jobs page `/?status=failed` (ordered walk; ~{failed} match)"),
            "/?status=failed".into(),
            30,
        ),
        (
            "jobs page `/?name=report+976` (one pass)".into(),
            "/?name=report+976".into(),
            30,
        ),
    ];
    println!("## Server time of the jobs page, {n} jobs\n");
    println!("| what | p50 | p99 | max | body | runs |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut base = None;
    for (what, uri, runs) in cases {
        // Warm up, then time.
        for _ in 0..runs.min(20) {
            call(&router, &uri).await;
        }
        let mut size = 0;
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            let (status, len, took) = call(&router, &uri).await;
            assert_eq!(status, 200, "{uri}");
            size = len;
            samples.push(took);
        }
        let (p50, p99, max) = corpus::percentiles(samples);
        let ratio = match base {
            None => {
                base = Some(p50);
                String::new()
            }
            Some(b) => format!(" ({:.2}x the JSON)", p50.as_secs_f64() / b.as_secs_f64()),
        };
        println!(
            "| {what} | {}{ratio} | {} | {} | {:.1} KB | {runs} |",
            corpus::ms(p50),
            corpus::ms(p99),
            corpus::ms(max),
            size as f64 / 1000.0
        );
    }
}

async fn drawn_pages() {
    let dir = tempfile::tempdir().unwrap();
    let mut sizes = [50_000usize, 20].into_iter();
    corpus::write_corpus(dir.path(), 2, 3, |_| sizes.next().unwrap());
    let store = Arc::new(LogStore::new(
        dir.path(),
        Arc::new(HistoryMetrics::unregistered()),
    ));
    store.rescan();
    assert_eq!(store.len(), 2);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let router = history_router(store, None, None);
    tokio::spawn(async move { axum::serve(listener, router).await });
    let b = browser::Browser::start().await;
    println!(
        "\n## Time to a drawn job page in headless Chromium (navigation start to timeline drawn)\n"
    );
    println!("| job | p50 | p90 | max | first contentful paint p50 | runs |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (job, what) in [("job0000000", "50,000 tasks"), ("job0000001", "20 tasks")] {
        let url = format!("http://127.0.0.1:{port}/ui/job/{job}");
        let mut drawn = Vec::new();
        let mut paint = Vec::new();
        for run in 0..11 {
            b.open(&url).await;
            b.until(
                "the timeline",
                "document.getElementById('timeline').dataset.drawn === 'true'",
            )
            .await;
            let t = b
                .js("return performance.getEntriesByName('timeline-drawn')[0].startTime;")
                .await;
            let p = b
                .js("const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : 0;")
                .await;
            if run > 0 {
                drawn.push(Duration::from_secs_f64(t.as_f64().unwrap() / 1000.0));
                paint.push(Duration::from_secs_f64(p.as_f64().unwrap_or(0.0) / 1000.0));
            }
        }
        drawn.sort();
        let (p50, _, max) = corpus::percentiles(drawn.clone());
        let p90 = drawn[(drawn.len() - 1) * 9 / 10];
        let (paint50, _, _) = corpus::percentiles(paint);
        println!(
            "| {what} | {} | {} | {} | {} | {} |",
            corpus::ms(p50),
            corpus::ms(p90),
            corpus::ms(max),
            corpus::ms(paint50),
            drawn.len()
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        jobs_page(env_usize("SCALE_JOBS", 1_000_000)).await;
        drawn_pages().await;
    });
}
