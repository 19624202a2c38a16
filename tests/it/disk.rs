//! Disk use: zstd-compressed logs and the retention cleaner, against the
//! real binary.

use crate::harness::*;
use crate::history::capture_routes;
use bjh_format::record::{Envelope, JobEnd, JobStart, StageEnd, StageStart, TaskEnd, kind};
use bjh_metrics::HistoryMetrics;
use bjh_recording::writer::{self, Compression, WriterConfig, WriterMsg};
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

/// Writes the records of one decoded log again through the real writer,
/// with `compression`, into `dir`.
fn rewrite(lines: &[String], dir: &Path, compression: Compression) {
    let mut config = WriterConfig::new(dir);
    config.compression = compression;
    let (handle, thread) = writer::spawn(config, Arc::new(HistoryMetrics::unregistered())).unwrap();
    let mut job_id = String::new();
    let mut fallback = JobStart::default();
    let mut stage_starts = Vec::new();
    let mut stages = Vec::new();
    for line in lines {
        let env: Envelope = serde_json::from_str(line).unwrap();
        let data = env.data.get();
        match env.ev.as_str() {
            kind::JOB_START => {
                let start: JobStart = serde_json::from_str(data).unwrap();
                job_id = start.job_id.clone();
                fallback = start.clone();
                handle.send(WriterMsg::Start(start));
            }
            kind::TASK_END => {
                let task: TaskEnd = serde_json::from_str(data).unwrap();
                assert!(handle.try_progress(WriterMsg::Tasks {
                    job_id: job_id.clone(),
                    tasks: vec![task],
                }));
            }
            kind::STAGE_START => {
                stage_starts.push(serde_json::from_str::<StageStart>(data).unwrap());
            }
            kind::STAGE_END => {
                let end: StageEnd = serde_json::from_str(data).unwrap();
                stages.push((stage_starts.remove(0), end));
            }
            kind::JOB_END => {
                let end: Box<JobEnd> = Box::new(serde_json::from_str(data).unwrap());
                handle.send(WriterMsg::End {
                    job_id: job_id.clone(),
                    fallback_start: fallback.clone(),
                    stages: std::mem::take(&mut stages),
                    end,
                    secrets: Vec::new(),
                });
            }
            _ => {}
        }
    }
    drop(handle);
    thread.join().unwrap();
}

fn decoded_lines(path: &Path) -> Vec<String> {
    bjh_store::open_decoded(path)
        .unwrap()
        .lines()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compressed_log_is_served_byte_identical_to_its_plain_twin() {
    let Cluster {
        tmp,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&["--event-log-compression", "zstd"]).await;
    let (job_id, result) = run_job(
        &sched,
        &ctx,
        "SELECT k, sum(v), count(*) FROM t GROUP BY k ORDER BY k",
    )
    .await;
    assert!(result.is_ok());
    let zst = logs.join(format!("{job_id}.eventlog.zst"));
    eventually("the compressed log is complete", || {
        let exists = zst.exists();
        async move { exists }
    })
    .await;
    assert!(!logs.join(format!("{job_id}.eventlog")).exists());
    let lines = decoded_lines(&zst);
    let stage_ids: Vec<String> = {
        let end: serde_json::Value = serde_json::from_str(
            lines
                .iter()
                .find(|l| l.starts_with("{\"ev\":\"JobEnd\""))
                .unwrap(),
        )
        .unwrap();
        end["data"]["responses"]["stage_dots"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let live = capture_routes(&sched, &job_id, &stage_ids).await;

    // Its plain twin, written by the same writer from the same records.
    let plain_dir = tmp.path().join("plain");
    rewrite(&lines, &plain_dir, Compression::None);
    let plain = plain_dir.join(format!("{job_id}.eventlog"));
    let plain_text = std::fs::read_to_string(&plain).unwrap();
    let zst_len = std::fs::metadata(&zst).unwrap().len();
    println!(
        "bytes on disk for one real job: plain {}, zstd {zst_len}",
        plain_text.len()
    );
    assert!(
        zst_len * 3 < plain_text.len() as u64,
        "compressed {zst_len} bytes vs plain {}",
        plain_text.len()
    );
    // Decoded, the compressed log is the plain one without its footer line
    // (the footer travels in a skippable frame).
    let plain_lines: Vec<&str> = plain_text.lines().collect();
    assert_eq!(lines, plain_lines[..plain_lines.len() - 1]);

    let mut zst_server = Proc::history(&logs, &[]);
    let mut plain_server = Proc::history(&plain_dir, &[]);
    zst_server.wait_healthy().await;
    plain_server.wait_healthy().await;
    for server in [&zst_server, &plain_server] {
        eventually("the index is ready", || async {
            get(&server.url("/readyz")).await.0 == 200
        })
        .await;
    }
    let mut paths: Vec<String> = live.keys().cloned().collect();
    paths.extend([
        "/api/jobs".to_string(),
        format!("/api/job/{job_id}/config"),
        format!("/api/job/{job_id}/timeline"),
        format!("/api/job/{job_id}/timeline.svg"),
    ]);
    for path in &paths {
        let from_zst = get(&zst_server.url(path)).await;
        let from_plain = get(&plain_server.url(path)).await;
        assert_eq!(from_zst.0, from_plain.0, "{path}");
        assert_eq!(from_zst.1, from_plain.1, "{path}");
        assert!(
            from_zst.2 == from_plain.2,
            "{path} differs between the twins"
        );
        if let Some((status, _, body)) = live.get(path) {
            assert_eq!(from_zst.0, *status, "{path}");
            assert!(&from_zst.2 == body, "{path} differs from the live answer");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_server_applies_retention_and_counts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let now = bjh_format::epoch_millis(std::time::SystemTime::now());
    for i in 0..8u64 {
        let id = format!("old{i}");
        let line = serde_json::json!({"ev": "JobEnd", "version": 1, "data": {
            "status": "Succeeded", "queued_at": now - 201 + i, "started_at": now - 200 + i, "completed_at": now - 100 + i,
            "index": {"job_id": id, "job_name": "", "status": "Completed", "job_status": "Completed.",
                      "start_time": now - 200 + i, "end_time": now - 100 + i, "num_stages": 1,
                      "completed_stages": 1, "percent_complete": 100},
            "job": {}, "stages": {}, "config": {}, "dot": ""}});
        std::fs::write(dir.join(format!("{id}.eventlog")), format!("{line}\n")).unwrap();
    }
    std::fs::write(dir.join("dry.marker"), "").unwrap();

    // A dry run lists but keeps everything.
    let mut dry = Proc::history(dir, &["--retain-max-jobs", "3", "--retain-dry-run"]);
    dry.wait_healthy().await;
    eventually("the dry run has passed", || async {
        let (_, _, m) = get(&dry.url("/api/metrics")).await;
        String::from_utf8_lossy(&m).contains("ballista_job_history_retention_passes_total 1")
    })
    .await;
    assert_eq!(
        get_json(&dry.url("/api/jobs"))
            .await
            .as_array()
            .unwrap()
            .len(),
        8
    );
    drop(dry);

    let mut server = Proc::history(
        dir,
        &[
            "--retain-max-jobs",
            "3",
            "--retain-interval",
            "1h",
            "--orphan-grace",
            "48h",
        ],
    );
    server.wait_healthy().await;
    eventually("retention left three jobs", || async {
        get_json(&server.url("/api/jobs"))
            .await
            .as_array()
            .unwrap()
            .len()
            == 3
    })
    .await;
    let kept: Vec<String> = get_json(&server.url("/api/jobs"))
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kept, ["old7", "old6", "old5"]);
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".eventlog"))
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(
        dir.join("dry.marker").exists(),
        "other files are never touched"
    );
    let (_, _, metrics) = get(&server.url("/api/metrics")).await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("ballista_job_history_retention_removed_jobs_total 5"),
        "{metrics}"
    );

    // Bad flag values are refused at startup, naming the flag.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args(["--history-only", "--event-log-dir", dir.to_str().unwrap()])
        .args(["--retain-max-bytes", "lots"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--retain-max-bytes") && err.contains("50GiB"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_keeps_every_job_whatever_happened_to_the_persistent_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    crate::history::copy_fixtures(dir);
    let index = dir.join(bjh_store::snapshot::DEFAULT_FILE_NAME);
    let list = |server: &Proc| {
        let url = server.url("/api/jobs");
        async move {
            let (status, _, body) = get(&url).await;
            assert_eq!(status, 200);
            body
        }
    };
    let mut first = Proc::history(dir, &[]);
    first.wait_healthy().await;
    eventually("the index is ready", || async {
        get(&first.url("/readyz")).await.0 == 200
    })
    .await;
    let want = list(&first).await;
    assert!(first.terminate().success());
    let good = std::fs::read(&index).expect("the index is saved");
    assert!(!good.is_empty());

    for damage in ["intact", "garbage", "truncated", "deleted"] {
        match damage {
            "garbage" => std::fs::write(&index, b"\x00\x01garbage").unwrap(),
            "truncated" => std::fs::write(&index, &good[..good.len() / 3]).unwrap(),
            "deleted" => std::fs::remove_file(&index).unwrap(),
            _ => {}
        }
        let mut server = Proc::history(dir, &[]);
        server.wait_healthy().await;
        eventually("the index is ready", || async {
            get(&server.url("/readyz")).await.0 == 200
        })
        .await;
        // Ready means listed, from the index or the directory: all of it.
        assert_eq!(list(&server).await, want, "{damage}");
        assert!(server.terminate().success());
        assert_eq!(std::fs::read(&index).unwrap(), good, "{damage}: rebuilt");
    }
}
