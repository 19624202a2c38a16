//! Recording: a real scheduler process, a real executor, real SQL.

use crate::harness::*;
use std::path::Path;

const SECRET: &str = "SUPERSECRET-7f3a9c";
const TOKEN: &str = "SESSIONTOKEN-0b1d";
const ACCESS_KEY: &str = "AKIAEXAMPLEKEY42";

/// Every stored response equals what the live scheduler serves for the job.
async fn assert_stored_equals_live(proc: &Proc, lines: &[String], job_id: &str) {
    for (field, path) in [("job", ""), ("stages", "/stages")] {
        let (status, _, live) = get(&proc.url(&format!("/api/job/{job_id}{path}"))).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(
            raw_field(lines, field),
            String::from_utf8(live).unwrap(),
            "stored {field} differs from the live response"
        );
    }
    // The scheduler renders `/config` from a hash map, so its key order
    // differs from call to call; the content must be equal.
    let (_, _, live) = get(&proc.url(&format!("/api/job/{job_id}/config"))).await;
    let live: serde_json::Value = serde_json::from_slice(&live).unwrap();
    let stored: serde_json::Value = serde_json::from_str(&raw_field(lines, "config")).unwrap();
    assert_eq!(stored, live);
    let (_, _, dot) = get(&proc.url(&format!("/api/job/{job_id}/dot"))).await;
    assert_eq!(
        job_end(lines)["dot"].as_str().unwrap(),
        String::from_utf8(dot).unwrap()
    );
}

fn upstream_reads(dir: &Path, job_id: &str) -> ballista_history::reader::ReplayedJob {
    ballista_history::reader::read_completed_job(&dir.join(format!("{job_id}.eventlog")))
        .expect("upstream's reader accepts the log")
        .expect("upstream's reader finds the terminal record")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_job_is_recorded_with_its_live_responses() {
    let Cluster {
        tmp: _tmp,
        logs,
        data,
        sched,
        ctx,
    } = Cluster::start(&[]).await;

    // A successful job.
    let (ok_id, result) = run_job(
        &sched,
        &ctx,
        "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k ORDER BY k",
    )
    .await;
    assert_eq!(result, Ok(100));
    let lines = completed_log(&logs, &ok_id).await;
    let kinds_ok = kinds(&lines);
    assert_eq!(kinds_ok.first().map(String::as_str), Some("JobStart"));
    assert_eq!(&kinds_ok[kinds_ok.len() - 2..], ["JobEnd", "Footer"]);
    assert!(
        kinds_ok.iter().filter(|k| *k == "TaskEnd").count() >= 2,
        "{kinds_ok:?}"
    );
    assert!(
        kinds_ok.contains(&"StageStart".to_string()) && kinds_ok.contains(&"StageEnd".to_string())
    );
    let end = job_end(&lines);
    assert_eq!(end["status"], "Succeeded");
    assert_eq!(end["index"]["job_id"], ok_id.as_str());
    assert_eq!(end["dropped_records"], 0);
    assert_stored_equals_live(&sched, &lines, &ok_id).await;
    // Every stage's DOT graph is stored too.
    let stage_dots = end["responses"]["stage_dots"].as_object().unwrap();
    assert!(!stage_dots.is_empty());
    for (stage, dot) in stage_dots {
        let (_, _, live) = get(&sched.url(&format!("/api/job/{ok_id}/stage/{stage}/dot"))).await;
        assert_eq!(dot.as_str().unwrap(), String::from_utf8(live).unwrap());
    }
    // Task records carry what the task did.
    let start: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert!(
        start["data"]["physical_plan"]
            .as_str()
            .unwrap()
            .contains("AggregateExec")
    );
    let task: serde_json::Value =
        serde_json::from_str(lines.iter().find(|l| l.contains("\"TaskEnd\"")).unwrap()).unwrap();
    assert_eq!(task["data"]["status"], "Successful");
    assert!(
        task["data"]["end_exec_time"].as_u64().unwrap()
            >= task["data"]["start_exec_time"].as_u64().unwrap()
    );
    assert!(!task["data"]["executor_id"].as_str().unwrap().is_empty());
    let replayed = upstream_reads(&logs, &ok_id);
    assert_eq!(replayed.job.get(), raw_field(&lines, "job"));

    // A job that fails at run time.
    let (bad_id, result) = run_job(&sched, &ctx, "SELECT CAST(s AS INT) FROM t").await;
    assert!(result.is_err());
    let lines = completed_log(&logs, &bad_id).await;
    let end = job_end(&lines);
    assert!(
        end["status"]["Failed"].as_str().is_some(),
        "{:?}",
        end["status"]
    );
    assert_eq!(end["index"]["status"], "Failed");
    let (_, _, live_job) = get(&sched.url(&format!("/api/job/{bad_id}"))).await;
    assert_eq!(
        raw_field(&lines, "job"),
        String::from_utf8(live_job).unwrap()
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"TaskEnd\"") && l.contains("\"Failed\""))
    );
    upstream_reads(&logs, &bad_id);

    // A job that fails during planning on the scheduler: DataFusion refuses
    // to insert into a table backed by a single file when it builds the
    // physical plan.
    let (plan_id, result) = run_job(&sched, &ctx, "INSERT INTO t VALUES (1, 2, 'y')").await;
    assert!(result.is_err(), "{result:?}");
    let lines = completed_log(&logs, &plan_id).await;
    assert_eq!(kinds(&lines).first().map(String::as_str), Some("JobStart"));
    let end = job_end(&lines);
    assert!(
        end["status"]["Failed"].as_str().is_some(),
        "{:?}",
        end["status"]
    );
    assert_eq!(end["index"]["job_id"], plan_id.as_str());
    upstream_reads(&logs, &plan_id);

    // A cancelled job: a cross join that would run for hours.
    let before = job_ids(&sched).await;
    let heavy = spawn_heavy(&ctx);
    let cancel_id: String = wait_for("the heavy job is running", || {
        let before = before.clone();
        let url = sched.url("/api/jobs");
        async move {
            let jobs = get_json(&url).await;
            jobs.as_array()
                .unwrap()
                .iter()
                .find(|j| {
                    j["status"] == "Running"
                        && !before.contains(&j["job_id"].as_str().unwrap().to_string())
                })
                .map(|j| j["job_id"].as_str().unwrap().to_string())
        }
    })
    .await;
    let r = http_client()
        .patch(sched.url(&format!("/api/job/{cancel_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        heavy.await.unwrap().is_err(),
        "the cancelled query fails for its client"
    );
    let lines = completed_log(&logs, &cancel_id).await;
    assert_eq!(job_end(&lines)["status"], "Cancelled");
    upstream_reads(&logs, &cancel_id);

    // A job whose session holds Ballista's object-store credentials.
    let secret_ctx = client_with(
        sched.port,
        &data,
        &[
            ("s3.secret_access_key", SECRET),
            ("s3.session_token", TOKEN),
            ("s3.access_key_id", ACCESS_KEY),
        ],
    )
    .await;
    let (secret_id, result) = run_job(&sched, &secret_ctx, "SELECT count(*) FROM t").await;
    assert_eq!(result, Ok(1));
    let secret_lines = completed_log(&logs, &secret_id).await;
    // A job of that session failing on the executors with a message that
    // quotes the secret: its task failures and its own failure message are
    // written scrubbed.
    let quoting = format!("SELECT CAST(concat(s, '{SECRET}') AS INT) FROM t");
    let (failed_id, result) = run_job(&sched, &secret_ctx, &quoting).await;
    assert!(result.is_err(), "the cast fails");
    let failed_lines = completed_log(&logs, &failed_id).await;
    assert!(job_end(&failed_lines)["status"]["Failed"].is_string());
    let records: Vec<serde_json::Value> = failed_lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failures: Vec<&serde_json::Value> = records
        .iter()
        .filter(|l| l["ev"] == "TaskEnd" && l["data"]["status"]["Failed"].is_object())
        .collect();
    assert!(!failures.is_empty(), "the executors' failures are recorded");
    for failure in failures {
        let error = failure["data"]["status"]["Failed"]["error"]
            .as_str()
            .unwrap();
        assert!(error.contains(bjh_recording::redact::REDACTED), "{error}");
    }
    // No secret reached the disk, in any file.
    for entry in std::fs::read_dir(&logs).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            continue;
        }
        let bytes = std::fs::read(path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for secret in [SECRET, TOKEN, ACCESS_KEY] {
            if let Some(at) = text.find(secret) {
                panic!(
                    "a secret reached the log directory: ...{}...",
                    &text[at.saturating_sub(300)..at + secret.len()]
                );
            }
        }
    }
    // ...but the keys are there, redacted.
    let config = raw_field(&secret_lines, "config");
    assert!(config.contains("s3.secret_access_key"), "{config}");
    assert!(config.contains(bjh_recording::redact::REDACTED));
    assert!(!logs.join(format!("{ok_id}.eventlog.running")).exists());
}
