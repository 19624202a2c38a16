//! Hostile files in the log directory: each affects only itself, the
//! server stays up and its memory stays bounded.

use crate::harness::*;
use crate::history::{FIXTURES, copy_fixtures};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// The listing's job ids and the `/config` answer of each, from `server`.
async fn answers(server: &Proc) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for id in job_ids(server).await {
        let (status, _, body) = get(&server.url(&format!("/api/job/{id}/config"))).await;
        assert_eq!(status, 200, "{id}");
        out.push((id, body));
    }
    out.sort();
    out
}

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("cannot run mkfifo (coreutils): {e}"))
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_files_affect_only_themselves() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    copy_fixtures(&clean);
    let mut baseline = Proc::history(&clean, &[]);
    baseline.wait_healthy().await;
    let want = wait_for("the baseline lists the fixtures", || async {
        let a = answers(&baseline).await;
        (a.len() >= 5).then_some(a)
    })
    .await;

    let dir = tmp.path().join("hostile");
    copy_fixtures(&dir);
    // One real log padded to 1 GiB (sparse zeros, then a newline and the
    // log): it is indexed and served from its tail.
    let (big_id, _) = &want[0];
    let original = std::fs::read(Path::new(FIXTURES).join(format!("{big_id}.eventlog"))).unwrap();
    let mut big = std::fs::File::create(dir.join(format!("{big_id}.eventlog"))).unwrap();
    big.set_len(1 << 30).unwrap();
    big.seek(SeekFrom::End(0)).unwrap();
    big.write_all(b"\n").unwrap();
    big.write_all(&original).unwrap();
    drop(big);
    // 1 GiB of zeros and nothing else.
    std::fs::File::create(dir.join("zeros.eventlog"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    // One 100 MB line.
    std::fs::write(dir.join("one-line.eventlog"), vec![b'x'; 100 << 20]).unwrap();
    // A JSON-looking terminal record with invalid UTF-8 in it.
    let mut bad_utf8 =
        b"{\"ev\":\"JobEnd\",\"version\":1,\"data\":{\"index\":{\"job_id\":\"".to_vec();
    bad_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    bad_utf8.extend_from_slice(b"\"}}}\n");
    std::fs::write(dir.join("bad-utf8.eventlog"), bad_utf8).unwrap();
    // Things that are not regular files: never opened.
    std::os::unix::fs::symlink("/dev/zero", dir.join("dev-zero.eventlog")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("dev-zero2.eventlog.running")).unwrap();
    std::os::unix::fs::symlink(tmp.path(), dir.join("a-dir.eventlog")).unwrap();
    mkfifo(&dir.join("fifo.eventlog"));
    mkfifo(&dir.join("fifo2.eventlog.running"));
    // A `.running` log that keeps growing while it is read.
    let growing_path = dir.join("grow.eventlog.running");
    let start = r#"{"ev":"JobStart","version":1,"data":{"job_id":"grow","job_name":"g","queued_at":1,"submitted_at":2}}"#;
    std::fs::write(&growing_path, format!("{start}\n")).unwrap();

    let mut server = Proc::history(&dir, &["--update-interval-seconds", "1"]);
    server.wait_healthy().await;
    let got = wait_for("the hostile directory lists the real jobs", || async {
        let a = answers(&server).await;
        (a.len() >= want.len()).then_some(a)
    })
    .await;
    assert_eq!(
        got, want,
        "every real job is served exactly as from a clean directory"
    );

    // The growing log: appended to between rescans, never torn.
    let task = String::from_utf8(
        bjh_format::record::encode_line(
            bjh_format::record::kind::TASK_END,
            &bjh_format::record::TaskEnd {
                stage_id: 1,
                task_id: 0,
                executor_id: "e".into(),
                status: ballista_api_types::dto::TaskStatus::Successful,
                launch_time: 1,
                start_exec_time: 1,
                end_exec_time: 2,
                metrics: Default::default(),
                stage_attempt: 0,
            },
        )
        .unwrap(),
    )
    .unwrap();
    let task = task.trim_end();
    let mut growing = std::fs::OpenOptions::new()
        .append(true)
        .open(&growing_path)
        .unwrap();
    // The first half, then a rescan that sees it: a marker log written
    // after the half is listed only by a pass that also read the growing
    // log as it was then. The torn line is not counted, nor lost.
    growing.write_all(&task.as_bytes()[..40]).unwrap();
    growing.flush().unwrap();
    std::fs::write(
        dir.join("marker.eventlog"),
        r#"{"ev":"JobEnd","version":1,"data":{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{"job_id":"marker","job_name":"m","status":"Completed","job_status":"Completed.","start_time":5,"end_time":6,"num_stages":1,"completed_stages":1,"percent_complete":100},"job":{},"stages":{},"config":{},"dot":""}}"#.to_string() + "\n",
    )
    .unwrap();
    eventually("a rescan has seen the half-written record", || async {
        job_ids(&server).await.iter().any(|id| id == "marker")
    })
    .await;
    let (_, _, body) = get(&server.url("/api/jobs?include_unfinished=true")).await;
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("\"grow\""), "{body}");
    assert!(!body.contains("1 task attempts recorded"), "{body}");
    std::fs::remove_file(dir.join("marker.eventlog")).unwrap();
    growing.write_all(&task.as_bytes()[40..]).unwrap();
    growing.write_all(b"\n").unwrap();
    drop(growing);
    eventually("the growing log's task is counted", || async {
        let (_, _, body) = get(&server.url("/api/jobs?include_unfinished=true")).await;
        String::from_utf8_lossy(&body).contains("1 task attempts recorded")
    })
    .await;

    // A log that shrinks after it was indexed: never served wrong bytes.
    let (small_id, _) = &want[1];
    let small = dir.join(format!("{small_id}.eventlog"));
    let len = std::fs::metadata(&small).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&small)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    for route in ["config", "stages", "dot"] {
        let (status, _, body) = get(&server.url(&format!("/api/job/{small_id}/{route}"))).await;
        // Its terminal record is gone: a 500 naming the job while it is
        // still listed, a 404 once a rescan has dropped it; never bytes.
        let listed = job_ids(&server).await.contains(small_id);
        let body = String::from_utf8_lossy(&body);
        match status {
            500 => assert!(body.contains(small_id.as_str()), "{route}: {body}"),
            404 => assert!(!listed, "{route}: a 404 for a job still listed"),
            other => panic!("{route}: a shrunk log answered {other}: {body}"),
        }
    }
    eventually("the shrunk log leaves the list", || async {
        !job_ids(&server).await.contains(small_id)
    })
    .await;

    // Each bad regular file is reported; the server is up; it never read
    // the 1 GiB files into memory.
    let metrics = String::from_utf8(get(&server.url("/api/metrics")).await.2).unwrap();
    assert!(
        counter(&metrics, "ballista_job_history_unreadable_logs_total") >= 4,
        "{metrics}"
    );
    assert_eq!(get(&server.url("/healthz")).await.0, 200);
    let peak_mib = server.peak_rss_kib() / 1024;
    assert!(peak_mib < 512, "peak RSS {peak_mib} MiB");
    eprintln!("hostile directory: peak RSS {peak_mib} MiB");
    let ids = job_ids(&server).await;
    for hostile in [
        "zeros", "one-line", "bad-utf8", "dev-zero", "a-dir", "fifo", "fifo2",
    ] {
        assert!(!ids.iter().any(|i| i == hostile), "{hostile} listed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_thousand_tiny_logs_are_indexed_in_bounded_memory() {
    const N: usize = 100_000;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for i in 0..N {
        let id = format!("t{i:06}");
        std::fs::write(
            dir.join(format!("{id}.eventlog")),
            format!(
                r#"{{"ev":"JobEnd","version":1,"data":{{"status":"Succeeded","queued_at":{},"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"tiny","status":"Completed","job_status":"Completed.","start_time":{},"end_time":{},"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{}},"stages":{{}},"config":{{}},"dot":""}}}}"#,
                999 + i,
                1_000 + i,
                2_000 + i
            ) + "\n",
        )
        .unwrap();
    }
    let mut server = Proc::history(dir, &[]);
    server.wait_healthy().await;
    let client = http_client();
    let total = wait_for("all tiny logs are indexed", || {
        let request = client.get(server.url("/api/jobs?limit=10"));
        async move {
            let r = request.send().await.ok()?;
            let total: usize = r
                .headers()
                .get("x-total-count")?
                .to_str()
                .ok()?
                .parse()
                .ok()?;
            (total == N).then_some(total)
        }
    })
    .await;
    assert_eq!(total, N);
    let page = get_json(&server.url("/api/jobs?limit=3")).await;
    let newest: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(newest, ["t099999", "t099998", "t099997"]);
    let peak_mib = server.peak_rss_kib() / 1024;
    assert!(peak_mib < 400, "peak RSS {peak_mib} MiB for {N} jobs");
    eprintln!("{N} tiny logs: peak RSS {peak_mib} MiB");
}
