//! Several clusters in one history: what every server over a shared
//! prefix must say of which scheduler ran each job, in the list (entries
//! and filter), the recurring queries, SQL, the metrics and the pages.
//! Called by `bucket.rs`' two-cluster test, which knows independently
//! which cluster ran each job (it submitted it there) and each cluster's
//! id (given on its command line, or read from its spool's id file).

use crate::harness::*;
use serde_json::Value;

/// `ids[i]` is the scheduler id of the cluster that `live[i]` is; `jobs`
/// pairs each job with the index of the cluster it was submitted to.
pub async fn schedulers_are_told_apart(
    servers: &[Proc],
    live: &[&Proc],
    jobs: &[(usize, String)],
    ids: &[String],
) {
    let ran_by = |i: usize| -> Vec<String> {
        let mut out: Vec<String> = jobs
            .iter()
            .filter(|(c, _)| *c == i)
            .map(|(_, id)| id.clone())
            .collect();
        out.sort();
        out
    };
    for server in servers.iter().chain(live.iter().copied()) {
        // Every entry names the scheduler that ran it.
        let list = get_json(&server.url("/api/jobs")).await;
        for entry in list.as_array().unwrap() {
            let job = entry["job_id"].as_str().unwrap();
            let (cluster, _) = jobs.iter().find(|(_, id)| id == job).unwrap();
            assert_eq!(entry["scheduler_id"], ids[*cluster].as_str(), "{job}");
        }
        // The filter keeps one cluster's jobs.
        for (i, id) in ids.iter().enumerate() {
            let url = server.url(&format!("/api/jobs?scheduler_id={id}"));
            let mut listed: Vec<String> = get_json(&url)
                .await
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["job_id"].as_str().unwrap().to_string())
                .collect();
            listed.sort();
            assert_eq!(listed, ran_by(i), "?scheduler_id={id}");
        }
    }
    let server = &servers[0];
    // Both clusters ran each query once: each query names both, and a
    // filter by one scheduler groups its run alone.
    let mut both = ids.to_vec();
    both.sort();
    let queries = get_json(&server.url("/api/queries")).await;
    let rows = queries["queries"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{queries}");
    for row in rows {
        assert_eq!(row["runs"], 2, "{row}");
        assert_eq!(row["scheduler_ids"], serde_json::json!(both), "{row}");
    }
    let one = get_json(&server.url(&format!("/api/queries?scheduler_id={}", ids[1]))).await;
    for row in one["queries"].as_array().unwrap() {
        assert_eq!(row["runs"], 1, "{row}");
        assert_eq!(row["recent"][0]["scheduler_id"], ids[1].as_str(), "{row}");
    }
    // SQL: the `jobs` table's column.
    let rows = crate::sql::sql(
        server,
        "SELECT scheduler_id, count(*) AS n FROM jobs GROUP BY scheduler_id ORDER BY scheduler_id",
    )
    .await;
    let got: Vec<(String, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["scheduler_id"].as_str().unwrap().to_string(),
                r["n"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<(String, i64)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), ran_by(i).len() as i64))
        .collect();
    want.sort();
    assert_eq!(got, want);
    // Metrics: jobs by state and scheduler.
    let metrics = String::from_utf8(get(&server.url("/api/metrics")).await.2).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("ballista_job_history_jobs{")
                    && l.contains(&format!("scheduler_id=\"{id}\""))
                    && l.contains("status=\"completed\"")
            })
            .unwrap_or_else(|| panic!("no series for {id}:\n{metrics}"));
        let n: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(n, ran_by(i).len(), "{line}");
    }
    // The Clusters view: each scheduler, its jobs.
    for server in servers {
        let clusters = get_json(&server.url("/api/clusters")).await;
        for (i, id) in ids.iter().enumerate() {
            let row = clusters["clusters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["scheduler_id"] == id.as_str())
                .unwrap_or_else(|| panic!("{id} in {clusters:#}"));
            assert_eq!(row["total_jobs"], ran_by(i).len(), "{row:#}");
            assert!(row["last_seen"].as_u64() >= row["last_job_at"].as_u64());
        }
        let (_, _, page) = get(&server.url("/ui/clusters")).await;
        let page = String::from_utf8(page).unwrap();
        for id in ids {
            assert!(page.contains(&format!("<code>{id}</code>")), "{page}");
        }
    }
    pages_tell_them_apart(server, ids, &ran_by(1)).await;
}

/// Whether Chromium and its driver are here.
fn has_browser() -> bool {
    let runs = |program: String| {
        std::process::Command::new(program)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    runs(std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into()))
        && runs(std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into()))
}

/// The jobs page, filtered by the second scheduler, in Chromium: its rows
/// are that scheduler's jobs and their scheduler column says so.
async fn pages_tell_them_apart(server: &Proc, ids: &[String], second: &[String]) {
    if !has_browser() {
        skip(
            "bucket::two_clusters_record_into_one_bucket_and_two_servers_serve_it (pages)",
            "chromium and chromium-driver (Debian) are not installed",
        );
        return;
    }
    let b = crate::browser::Browser::start().await;
    b.open(&server.url(&format!("/?scheduler_id={}", ids[1])))
        .await;
    let mut shown = b.texts("table.jobs td.id").await;
    shown.sort();
    assert_eq!(shown, second);
    let cells = b.texts("table.jobs td.scheduler").await;
    assert_eq!(cells, vec![ids[1].clone(); second.len()]);
    // Unfiltered, both are named; a scheduler's name links to its jobs.
    b.open(&server.url("/")).await;
    let mut cells = b.texts("table.jobs td.scheduler").await;
    cells.sort();
    cells.dedup();
    let mut both = ids.to_vec();
    both.sort();
    assert_eq!(cells, both);
    b.open(&server.url("/ui/queries")).await;
    let named: Value = b
        .js("return [...document.querySelectorAll('td.scheduler a')].map(a => a.textContent)")
        .await;
    let mut named: Vec<String> = serde_json::from_value(named).unwrap();
    named.sort();
    named.dedup();
    assert_eq!(named, both);
    // The Clusters page: one row each, each linking to its jobs.
    b.open(&server.url("/ui/clusters")).await;
    let mut rows = b.texts("table#clusters td.name code").await;
    rows.sort();
    assert_eq!(rows, both);
    let links: Value = b
        .js("return [...document.querySelectorAll('table#clusters tbody tr')].map(r => r.querySelector('td.num a').getAttribute('href'))")
        .await;
    let mut links: Vec<String> = serde_json::from_value(links).unwrap();
    links.sort();
    let want: Vec<String> = both
        .iter()
        .map(|id| format!("/?scheduler_id={id}"))
        .collect();
    assert_eq!(links, want);
    b.shot("clusters").await;
}
