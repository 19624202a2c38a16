//! `--history-memory-jobs`: completed jobs moved to summary segments on
//! disk, served from them, and opened again by a restart without reading a
//! log.

use crate::harness::*;
use std::path::Path;

/// The `/api/jobs` answers compared: the body and the total, for the
/// default list and a filter, a sort and a page after a cursor.
async fn lists(proc: &Proc, after: &str) -> Vec<(String, Option<String>, Vec<u8>)> {
    let mut out = Vec::new();
    for query in [
        String::new(),
        "?status=completed".to_string(),
        "?sort=duration".to_string(),
        format!("?limit=1&after={after}"),
    ] {
        let r = http_client()
            .get(proc.url(&format!("/api/jobs{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{query}");
        let total = (r.headers().get("x-total-count")).map(|v| v.to_str().unwrap().to_string());
        out.push((query, total, r.bytes().await.unwrap().to_vec()));
    }
    out
}

/// The completed logs of `dir`.
fn logs_of(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_str().unwrap().ends_with(".eventlog"))
        .collect();
    logs.sort();
    logs
}

/// A recording scheduler keeping one job in memory moves the others to
/// segments beside its persistent index and lists them all; after it
/// stops, the index itself holds fewer jobs than the list, and a history
/// server over the directory, started with every log's bytes overwritten
/// (sizes and times kept), lists every job as a server that read the
/// intact logs does: the list came from the segments, not the logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spilled_jobs_are_listed_from_disk_and_a_restart_reads_no_log() {
    let memory = [
        "--history-memory-jobs",
        "1",
        "--update-interval-seconds",
        "1",
    ];
    let Cluster {
        tmp,
        logs,
        mut sched,
        ctx,
        ..
    } = Cluster::start(&memory).await;
    let mut ids = Vec::new();
    for sql in [
        "SELECT k, avg(v) FROM t GROUP BY k",
        "SELECT count(*) FROM t",
        "SELECT k FROM t WHERE v > 10 ORDER BY k LIMIT 5",
    ] {
        let (id, result) = run_job(&sched, &ctx, sql).await;
        assert!(result.is_ok(), "{sql}");
        completed_log(&logs, &id).await;
        ids.push(id);
    }
    let segments = logs.join(".ballista-job-history.index.segments");
    eventually("the jobs moved to segments", || async {
        std::fs::read_dir(&segments).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_str().unwrap().starts_with("spill-"))
        })
    })
    .await;
    let listed = job_ids(&sched).await;
    assert!(ids.iter().all(|id| listed.contains(id)), "{listed:?}");
    assert!(sched.terminate().success(), "a clean shutdown on SIGTERM");
    let index = logs.join(".ballista-job-history.index");
    let in_index = bjh_store::snapshot::load(&index).unwrap().len();
    assert!(in_index < ids.len(), "{in_index} jobs in the index itself");

    // The oracle: a server over a copy of the intact logs, no index.
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for log in logs_of(&logs) {
        std::fs::copy(&log, copy.join(log.file_name().unwrap())).unwrap();
    }
    let mut oracle = Proc::history(&copy, &["--no-history-index"]);
    oracle.wait_ready().await;
    let want = lists(&oracle, &ids[1]).await;

    // Every log overwritten with other bytes of its size, its time kept.
    let mut kept = Vec::new();
    for log in logs_of(&logs) {
        let bytes = std::fs::read(&log).unwrap();
        let modified = std::fs::metadata(&log).unwrap().modified().unwrap();
        std::fs::write(&log, vec![b'#'; bytes.len()]).unwrap();
        let file = std::fs::File::options().write(true).open(&log).unwrap();
        file.set_modified(modified).unwrap();
        kept.push((log, bytes, modified));
    }
    let mut again = Proc::history(&logs, &["--history-memory-jobs", "1"]);
    again.wait_ready().await;
    assert_eq!(lists(&again, &ids[1]).await, want);
    again.terminate();
    for (log, bytes, modified) in kept {
        std::fs::write(&log, bytes).unwrap();
        let file = std::fs::File::options().write(true).open(&log).unwrap();
        file.set_modified(modified).unwrap();
    }
    // The logs back, a job's page is read from its log as before.
    let mut third = Proc::history(&logs, &["--history-memory-jobs", "1"]);
    third.wait_ready().await;
    let route = format!("/api/job/{}", ids[0]);
    assert_eq!(
        get(&third.url(&route)).await,
        get(&oracle.url(&route)).await
    );
    assert_eq!(lists(&third, &ids[1]).await, want);
}

/// The flag needs the persistent index it writes beside.
#[test]
fn memory_jobs_without_an_index_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args(["--history-only", "--event-log-dir"])
        .arg(dir.path())
        .args(["--no-history-index", "--history-memory-jobs", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--history-memory-jobs") && err.contains("--no-history-index"),
        "{err}"
    );
}
