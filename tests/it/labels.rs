//! Recognisable queries: a job without a name is known by its query's
//! label (the tables its plan reads, then its outermost operators inside
//! out) in `/api/jobs`, `/api/queries`, `/api/compare`, SQL and the pages,
//! recorded by a real scheduler from real queries, kept across a restart
//! (the persistent index), made from the plan for logs that do not state
//! it, and escaped where a hostile log's plan names HTML.

use crate::harness::*;
use crate::sql::sql;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// A label's tables (as a set: the plan decides their order) and its
/// operators in order.
fn parts(label: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut pieces = label.split(" · ");
    let tables = pieces
        .next()
        .unwrap()
        .split(", ")
        .map(str::to_string)
        .collect();
    (tables, pieces.map(str::to_string).collect())
}

fn labels_of(jobs: &Value) -> Vec<(String, String, Option<String>)> {
    jobs.as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["job_id"].as_str().unwrap().to_string(),
                j["job_name"].as_str().unwrap().to_string(),
                j["query_label"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// The oracle is the SQL the test wrote: the tables in its FROM clauses
/// and, inside out, join, aggregate, sort and limit.
#[tokio::test(flavor = "multi_thread")]
async fn unnamed_queries_are_known_by_their_tables_and_operators_everywhere() {
    let mut c = Cluster::start(&[]).await;
    let u = write_csv(c.tmp.path(), "u.csv", 300);
    c.ctx
        .register_csv("u", u.to_str().unwrap(), Default::default())
        .await
        .unwrap();
    let top = "SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k LIMIT 5";
    let joined = "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k";
    let (a, ra) = run_job(&c.sched, &c.ctx, top).await;
    let (b, rb) = run_job(&c.sched, &c.ctx, joined).await;
    let (a2, _) = run_job(&c.sched, &c.ctx, top).await;
    assert_eq!((ra, rb.is_ok()), (Ok(5), true));
    let named_ctx = client_with(c.sched.port, &c.data, &[("ballista.job.name", "nightly")]).await;
    let (named, rn) = run_job(&c.sched, &named_ctx, top).await;
    assert_eq!(rn, Ok(5));
    for id in [&a, &b, &a2, &named] {
        completed_log(&c.logs, id).await;
    }
    let want_top = (
        BTreeSet::from(["t".to_string()]),
        vec!["aggregate".to_string(), "sort".into(), "limit 5".into()],
    );
    let want_join = (
        BTreeSet::from(["t".to_string(), "u".into()]),
        vec!["join".to_string(), "aggregate".into()],
    );
    let check = |jobs: &Value, what: &str| {
        let got = labels_of(jobs);
        for (id, want) in [
            (&a, &want_top),
            (&b, &want_join),
            (&a2, &want_top),
            (&named, &want_top),
        ] {
            let (_, _, label) = got
                .iter()
                .find(|(j, _, _)| j == id)
                .unwrap_or_else(|| panic!("{what}: {id} listed"));
            let label = label
                .as_deref()
                .unwrap_or_else(|| panic!("{what}: {id} has a label"));
            assert_eq!(&parts(label), want, "{what}: {id}: {label}");
        }
    };
    let listed = wait_for("the four jobs are listed from their logs", || async {
        let jobs = get_json(&c.sched.url("/api/jobs")).await;
        (labels_of(&jobs)
            .iter()
            .filter(|(_, _, l)| l.is_some())
            .count()
            >= 4)
            .then_some(jobs)
    })
    .await;
    check(&listed, "live /api/jobs");
    let label_a = labels_of(&listed)
        .into_iter()
        .find(|(j, _, _)| *j == a)
        .and_then(|(_, _, l)| l)
        .unwrap();

    // The recurring query: the same label, whatever the runs' names.
    let queries = get_json(&c.sched.url("/api/queries")).await;
    let row = queries["queries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["runs"] == 3)
        .expect("the three runs of `top` are one query");
    assert_eq!(row["query_label"], json!(label_a));
    // The comparison names each side.
    let compared = get_json(&c.sched.url(&format!("/api/compare?a={a}&b={named}"))).await;
    assert_eq!(
        (&compared["a"]["job_name"], &compared["a"]["query_label"]),
        (&json!(""), &json!(label_a))
    );
    assert_eq!(compared["b"]["job_name"], "nightly");
    // SQL's `jobs`, one row per job.
    let rows = sql(
        &c.sched,
        &format!(
            "SELECT job_id, query_label FROM jobs WHERE job_id IN ('{a}', '{b}') ORDER BY job_id"
        ),
    )
    .await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        let want = if r["job_id"] == json!(a) {
            &want_top
        } else {
            &want_join
        };
        assert_eq!(&parts(r["query_label"].as_str().unwrap()), want, "{r}");
    }
    // The pages: a label where there is no name, set apart; the name
    // where there is one.
    let (status, _, page) = get(&c.sched.url("/?limit=100")).await;
    let page = String::from_utf8(page).unwrap();
    assert_eq!(status, 200);
    let qlabel =
        format!("class=\"qlabel\" title=\"A label made from the query's plan\">{label_a}<");
    assert!(page.contains(&qlabel), "the jobs page shows the label");
    assert!(page.contains(">nightly<"), "and the name");
    let (_, _, queries_page) = get(&c.sched.url("/ui/queries")).await;
    assert!(String::from_utf8(queries_page).unwrap().contains(&label_a));
    let (_, _, job_page) = get(&c.sched.url(&format!("/ui/job/{a}"))).await;
    assert!(String::from_utf8(job_page).unwrap().contains(&qlabel));

    // A restart: a history server over the same directory lists them from
    // the persistent index the scheduler kept, labels included.
    let index = c.logs.join(".ballista-job-history.index");
    c.sched.terminate();
    assert!(index.exists(), "the scheduler kept its index");
    let mut history = Proc::history(&c.logs, &[]);
    history.wait_ready().await;
    check(
        &get_json(&history.url("/api/jobs")).await,
        "after a restart",
    );
    history.terminate();

    // A footer written before labels (its `query_label` taken out) gets
    // its label from the plan, and so does a log without a footer.
    let path = c.logs.join(format!("{b}.eventlog"));
    let text = std::fs::read_to_string(&path).unwrap();
    let (body, footer) = text.trim_end().rsplit_once('\n').unwrap();
    let mut footer: Value = serde_json::from_str(footer).unwrap();
    assert!(
        footer["data"]["query_label"].is_string(),
        "the footer states it"
    );
    footer["data"]
        .as_object_mut()
        .unwrap()
        .remove("query_label");
    std::fs::write(&path, format!("{body}\n{footer}\n")).unwrap();
    let path = c.logs.join(format!("{a}.eventlog"));
    let text = std::fs::read_to_string(&path).unwrap();
    let (body, _) = text.trim_end().rsplit_once('\n').unwrap();
    std::fs::write(&path, format!("{body}\n")).unwrap();
    let mut fresh = Proc::history(&c.logs, &["--no-history-index"]);
    fresh.wait_ready().await;
    check(
        &get_json(&fresh.url("/api/jobs")).await,
        "older and upstream logs",
    );
}

/// A log's plan names a table `<script>…`: the label carries it as text,
/// and every page shows it escaped.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_plan_makes_a_label_that_is_only_text() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = "Limit: skip=0, fetch=3\n  TableScan: <script>alert(1)</script> projection=[x]";
    let line =
        |ev: &str, data: Value| json!({"ev": ev, "version": 1, "data": data}).to_string() + "\n";
    let log = line(
        "JobStart",
        json!({"job_id": "hostile", "job_name": "", "queued_at": 999, "submitted_at": 1_000,
               "logical_plan": plan, "physical_plan": "x"}),
    ) + &line(
        "JobEnd",
        json!({"status": "Succeeded", "queued_at": 999, "started_at": 1_000, "completed_at": 2_000,
               "index": {"job_id": "hostile", "job_name": "", "status": "Completed",
                         "job_status": "Completed", "start_time": 1_000, "end_time": 2_000,
                         "num_stages": 1, "completed_stages": 1, "percent_complete": 100},
               "job": {"job_id": "hostile", "job_name": "", "logical_plan": plan},
               "stages": {"stages": []}, "config": {}, "dot": "digraph G {}"}),
    );
    std::fs::write(tmp.path().join("hostile.eventlog"), log).unwrap();
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let jobs = get_json(&server.url("/api/jobs")).await;
    assert_eq!(
        jobs[0]["query_label"], "<script>alert(1)</script> · limit 3",
        "the label is the plan's text, as text"
    );
    for page in ["/", "/ui/queries", "/ui/job/hostile"] {
        let (status, _, body) = get(&server.url(page)).await;
        let body = String::from_utf8(body).unwrap();
        assert_eq!(status, 200, "{page}");
        assert!(!body.contains("<script>alert"), "{page} shows it escaped");
        assert!(
            body.contains("&lt;script&gt;alert(1)&lt;/script&gt; · limit 3"),
            "{page}"
        );
    }
}
