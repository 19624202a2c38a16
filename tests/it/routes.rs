//! Route behaviour tested in process: the history server's own router
//! (`history_router`, what `--history-only` serves) over a directory of
//! crafted logs, called with `tower::ServiceExt::oneshot` as axum's
//! testing example does: no process and no socket, so each behaviour is a
//! test of its own and a failure names it. Whole-process runs stay for what
//! needs a process (crash, durability, drop-in, the browser, the cluster).
//!
//! The oracle is the crafted jobs themselves: each expected list is made
//! from their facts, independently of the server's query code.

use crate::browse::{Crafted, facts_sample, ids, write_completed, write_running};
use axum::body::Body;
use ballista_job_history::history_router;
use bjh_metrics::HistoryMetrics;
use bjh_store::LogStore;
use http::{HeaderMap, Request};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The history router over the crafted sample: 30 completed jobs, one
/// running and one abandoned log.
struct InProcess {
    router: axum::Router,
    jobs: Vec<Crafted>,
    _dir: tempfile::TempDir,
}

impl InProcess {
    /// The sample, indexed (one pass, as the server's first) and routed.
    fn sample() -> InProcess {
        let dir = tempfile::tempdir().unwrap();
        let jobs = facts_sample();
        for job in &jobs {
            write_completed(dir.path(), job);
        }
        write_running(dir.path(), "r-live", "Nightly live", 3, Duration::ZERO);
        write_running(dir.path(), "r-dead", "dead", 2, Duration::from_secs(7200));
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let store = Arc::new(LogStore::new(dir.path(), metrics));
        store.rescan();
        InProcess {
            router: history_router(store, None, None),
            jobs,
            _dir: dir,
        }
    }

    /// `GET path`: status, headers, body.
    async fn get(&self, path: &str) -> (u16, HeaderMap, Vec<u8>) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts.status.as_u16(), parts.headers, body.to_vec())
    }

    /// The job ids `GET /api/jobs?query` lists, checked against its
    /// `X-Total-Count`.
    async fn list(&self, query: &str) -> Vec<String> {
        let (status, headers, body) = self.get(&format!("/api/jobs?{query}")).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "{query}: {text}");
        let ids = ids(&serde_json::from_slice(&body).unwrap());
        let total = headers["x-total-count"].to_str().unwrap().parse::<usize>();
        assert_eq!(total.unwrap(), ids.len(), "{query}");
        ids
    }

    /// The sample's ids matching `pred`, ordered by `key` then id.
    fn expect(
        &self,
        pred: impl Fn(&Crafted) -> bool,
        key: impl Fn(&Crafted) -> i128,
    ) -> Vec<String> {
        let mut v: Vec<&Crafted> = self.jobs.iter().filter(|j| pred(j)).collect();
        v.sort_by(|a, b| key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id)));
        v.into_iter().map(|j| j.id.clone()).collect()
    }
}

/// A sort key of a crafted job.
type Key<'a> = dyn Fn(&Crafted) -> i128 + 'a;

fn newest(j: &Crafted) -> i128 {
    -i128::from(j.start)
}

const T0: u64 = 1_700_000_000_000;

#[tokio::test]
async fn the_list_filters_as_each_parameter_says() {
    let s = InProcess::sample();
    // No parameter: completed logs only, newest first.
    assert_eq!(s.list("").await, s.expect(|_| true, newest));
    assert_eq!(
        s.list("status=failed").await,
        s.expect(|j| j.state == "failed", newest)
    );
    assert_eq!(
        s.list("status=completed,cancelled").await,
        s.expect(|j| j.state != "failed", newest)
    );
    assert_eq!(
        s.list("name=NiGhT").await,
        s.expect(|j| j.name.to_lowercase().contains("night"), newest)
    );
    let after = T0 + 10 * 60_000;
    assert_eq!(
        s.list(&format!("started_after={after}")).await,
        s.expect(|j| j.start >= after, newest)
    );
    // 2023-11-14T22:13:20Z is T0; RFC 3339 and millis mean the same.
    assert_eq!(
        s.list("started_before=2023-11-14T22:18:20Z").await,
        s.expect(|j| j.start <= T0 + 300_000, newest)
    );
    let (from, to) = (T0 + 100_000, T0 + 900_000);
    assert_eq!(
        s.list(&format!("ended_after={from}&ended_before={to}"))
            .await,
        s.expect(|j| j.end >= from && j.end <= to, newest)
    );
    assert_eq!(
        s.list("min_duration_ms=30000").await,
        s.expect(|j| j.end - j.start >= 30_000, newest)
    );
}

#[tokio::test]
async fn the_list_sorts_by_each_key_either_way() {
    let s = InProcess::sample();
    let duration = |j: &Crafted| i128::from(j.end - j.start);
    let cases: [(&str, &Key<'_>); 5] = [
        ("sort=start_time&order=asc", &|j| i128::from(j.start)),
        ("sort=end_time", &|j| -i128::from(j.end)),
        ("sort=end_time&order=asc", &|j| i128::from(j.end)),
        ("sort=duration", &|j| -duration(j)),
        ("sort=duration&order=asc", &duration),
    ];
    for (query, key) in cases {
        assert_eq!(s.list(query).await, s.expect(|_| true, key), "{query}");
    }
    // Names sort case-insensitively, ascending by default.
    let lower_names = |ids: &[String]| -> Vec<String> {
        let name = |id: &String| {
            s.jobs
                .iter()
                .find(|j| &j.id == id)
                .unwrap()
                .name
                .to_lowercase()
        };
        ids.iter().map(name).collect()
    };
    let names = lower_names(&s.list("sort=name").await);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    let mut reversed = s.list("sort=name&order=desc").await;
    reversed.reverse();
    assert_eq!(lower_names(&reversed), names);
}

#[tokio::test]
async fn unfinished_jobs_are_listed_only_when_asked_for() {
    let s = InProcess::sample();
    assert_eq!(s.list("status=running").await, ["r-live"]);
    assert_eq!(s.list("status=abandoned").await, ["r-dead"]);
    let with = s.list("include_unfinished=true").await;
    assert_eq!(with.len(), s.jobs.len() + 2);
    assert_eq!(
        &with[with.len() - 2..],
        ["r-dead", "r-live"],
        "started first"
    );
    assert_eq!(
        s.list("status=running,abandoned&name=night").await,
        ["r-live"]
    );
}

#[tokio::test]
async fn a_bad_parameter_is_a_400_naming_it() {
    let s = InProcess::sample();
    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=many", "limit"),
        ("offset=-3", "offset"),
        ("status=finished", "status"),
        ("sort=size", "sort"),
        ("order=sideways", "order"),
        ("started_after=yesterday", "started_after"),
        ("ended_before=2026-13-01T00:00:00Z", "ended_before"),
        ("min_duration_ms=fast", "min_duration_ms"),
        ("include_unfinished=perhaps", "include_unfinished"),
        ("after=no-such-job", "after"),
    ] {
        let (status, _, body) = s.get(&format!("/api/jobs?{query}")).await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 400, "{query}");
        assert_eq!(body["http_code"], 400);
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(&format!("`{param}`")), "{query}: {error}");
    }
    let (status, _, body) = s.get("/api/job/f01/timeline?limit=0").await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
}

#[tokio::test]
async fn an_unknown_parameter_is_ignored_and_named_in_a_header() {
    // An old client's parameter is ignored, as upstream's route ignores
    // it, and named in a header.
    let s = InProcess::sample();
    let (status, headers, body) = s.get("/api/jobs?colour=blue&limit=3").await;
    let (plain_status, plain_headers, plain) = s.get("/api/jobs?limit=3").await;
    assert_eq!((status, plain_status), (200, 200));
    assert_eq!(body, plain);
    assert_eq!(headers["x-ballista-ignored-params"], "colour");
    assert!(plain_headers.get("x-ballista-ignored-params").is_none());
}
