//! The shipped alerting rules (`docs/alerts/*.yml`) and Grafana dashboard
//! against the real Prometheus server (Debian's `prometheus` and
//! `promtool`) scraping the real binary: `promtool` accepts the rules; a
//! history with a planted regression makes the regression alert fire with
//! the ratio the crafted durations give; a healthy history, scraped and
//! evaluated by the same server, fires nothing; every panel's query of the
//! dashboard is one Prometheus evaluates.

use crate::harness::{Proc, eventually, free_port, get, http_client, skip, wait_for};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TEST: &str = "alerts::the_shipped_rules_fire_on_a_regression_and_not_on_a_healthy_history";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn has(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Five runs of one query (one logical plan, so one query hash), ten
/// seconds each, the last one `last_s` seconds.
fn runs(dir: &Path, name: &str, last_s: u64) {
    let line = |ev: &str, data: Value| json!({"ev": ev, "version": 1, "data": data}).to_string();
    let plan = "Projection: t.k\n  TableScan: t";
    for i in 0..5u64 {
        let id = format!("run-{i}");
        let start = 1_700_000_000_000 + i * 3_600_000;
        let end = start + if i == 4 { last_s } else { 10 } * 1000;
        let text = [
            line(
                "JobStart",
                json!({"job_id": id, "job_name": name, "queued_at": start - 1,
                       "submitted_at": start, "logical_plan": plan}),
            ),
            line(
                "JobEnd",
                json!({"status": "Succeeded", "queued_at": start - 1, "started_at": start,
                       "completed_at": end,
                       "index": {"job_id": id, "job_name": name, "status": "Completed",
                                 "job_status": "Completed", "start_time": start, "end_time": end,
                                 "num_stages": 1, "completed_stages": 1, "percent_complete": 100},
                       "job": {"job_id": id, "logical_plan": plan},
                       "stages": {"stages": []}, "config": {}, "dot": "digraph G {}"}),
            ),
        ]
        .join("\n");
        std::fs::write(dir.join(format!("{id}.eventlog")), text + "\n").unwrap();
    }
}

/// Prometheus' answer to `path` (its JSON `data`); `None` when the
/// connection fails.
async fn prometheus(port: u16, path: &str) -> Option<Value> {
    let url = format!("http://127.0.0.1:{port}{path}");
    let answer: Value = http_client()
        .get(&url)
        .send()
        .await
        .ok()?
        .json()
        .await
        .unwrap();
    assert_eq!(answer["status"], "success", "{url}: {answer}");
    Some(answer["data"].clone())
}

/// The alerts of scrape job `job`, firing or pending.
async fn alerts_of(port: u16, job: &str) -> Option<Vec<Value>> {
    let data = prometheus(port, "/api/v1/alerts").await?;
    Some(
        data["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["labels"]["job"] == job)
            .cloned()
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shipped_rules_fire_on_a_regression_and_not_on_a_healthy_history() {
    if !has("prometheus") || !has("promtool") {
        skip(
            TEST,
            "prometheus or promtool is not installed (apt-get install prometheus)",
        );
        return;
    }
    let rules = repo("docs/alerts/ballista-job-history.yml");
    let check = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool check rules: {}",
        String::from_utf8_lossy(&check.stdout)
    );

    let tmp = tempfile::tempdir().unwrap();
    let (planted, healthy) = (tmp.path().join("planted"), tmp.path().join("healthy"));
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::create_dir_all(&healthy).unwrap();
    // The last run took 40 s against a median of 10 s before it.
    runs(&planted, "Nightly <ETL>", 40);
    runs(&healthy, "Nightly <ETL>", 11);
    let mut servers = Vec::new();
    for dir in [&planted, &healthy] {
        let mut server = Proc::history(dir, &[]);
        server.wait_ready().await;
        servers.push(server);
    }
    // The endpoint itself: the jobs by state, counted from the files (these
    // logs name no scheduler, so the scheduler label is empty).
    let (_, _, metrics) = get(&servers[0].url("/api/metrics")).await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("ballista_job_history_jobs{scheduler_id=\"\",status=\"completed\"} 5"),
        "{metrics}"
    );

    let port = free_port();
    let config = tmp.path().join("prometheus.yml");
    let target = |s: &Proc| format!("'127.0.0.1:{}'", s.port);
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: ['{}']\n\
             scrape_configs:\n\
             - {{job_name: planted, metrics_path: /api/metrics, static_configs: [{{targets: [{}]}}]}}\n\
             - {{job_name: healthy, metrics_path: /api/metrics, static_configs: [{{targets: [{}]}}]}}\n",
            rules.display(),
            target(&servers[0]),
            target(&servers[1]),
        ),
    )
    .unwrap();
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );

    // Prometheus answers 503 in plain text until it has loaded its rules.
    eventually("prometheus is ready", || async move {
        http_client()
            .get(format!("http://127.0.0.1:{port}/-/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;

    // The planted regression fires, with the ratio the durations give.
    let fired = wait_for("the regression alert fires", || async move {
        alerts_of(port, "planted").await?.into_iter().find(|a| {
            a["labels"]["alertname"] == "BallistaRecurringQueryRegressed" && a["state"] == "firing"
        })
    })
    .await;
    assert_eq!(fired["labels"]["job_name"], "Nightly <ETL>");
    let ratio: f64 = fired["value"].as_str().unwrap().parse().unwrap();
    assert_eq!(ratio, 40.0 / 10.0);

    // The healthy history: once Prometheus holds its regression flag (0)
    // and has evaluated the rules after that sample, nothing fires or is
    // pending for it.
    let sampled: f64 = wait_for("the healthy history's flag is scraped", || async move {
        let data = prometheus(
            port,
            "/api/v1/query?query=ballista_job_history_query_regressed%7Bjob%3D%22healthy%22%7D",
        )
        .await?;
        let sample = data["result"].as_array()?.first()?.clone();
        assert_eq!(sample["value"][1], "0", "{sample}");
        sample["value"][0].as_f64()
    })
    .await;
    eventually("the rules are evaluated after that sample", || async move {
        let groups = prometheus(port, "/api/v1/rules").await.unwrap()["groups"].clone();
        groups.as_array().unwrap().iter().all(|g| {
            let at = g["lastEvaluation"].as_str().unwrap_or("");
            chrono::DateTime::parse_from_rfc3339(at)
                .is_ok_and(|t| t.timestamp_millis() as f64 / 1000.0 > sampled + 1.0)
        })
    })
    .await;
    assert_eq!(alerts_of(port, "healthy").await, Some(Vec::new()));

    // Every query of the shipped dashboard evaluates.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("docs/grafana/ballista-job-history.json")).unwrap(),
    )
    .unwrap();
    let mut exprs = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap().replace("$job", ".*");
            let path = format!(
                "/api/v1/query?query={}",
                url::form_urlencoded::byte_serialize(expr.as_bytes()).collect::<String>()
            );
            prometheus(port, &path).await.expect("prometheus answers");
            exprs += 1;
        }
    }
    assert!(exprs >= 8, "{exprs}");
}

/// A child process killed when dropped (also when the test fails).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
