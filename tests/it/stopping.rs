//! A shutdown that always finishes: SIGTERM ends the real binary with
//! live pages' event streams open, slow clients holding requests and a
//! job in flight on a live scheduler with a real executor; the writer is
//! drained (the job's log is whole); a second SIGTERM exits at once.

use crate::harness::*;
use crate::history::copy_fixtures;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Opens the live pages' event stream of `path` on `server` and reads its
/// first event: the stream is open and served.
async fn open_stream(server: &Proc, path: &str) -> reqwest::Response {
    let mut stream = http_client().get(server.url(path)).send().await.unwrap();
    assert_eq!(stream.status(), 200, "{path}");
    let first = stream.chunk().await.unwrap().expect("a first event");
    assert!(
        String::from_utf8_lossy(&first).contains("event: change"),
        "{}",
        String::from_utf8_lossy(&first)
    );
    stream
}

/// A client that sends the head of a `POST` and a tenth of its body,
/// then waits: a request under way that never ends by itself.
async fn stalled_upload(server: &Proc) -> tokio::net::TcpStream {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    tcp.write_all(
        b"POST /api/sql HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/sql\r\n\
          content-length: 1000\r\n\r\nSELECT 1 ",
    )
    .await
    .unwrap();
    tcp
}

/// Whether `server` accepts connections (it stops when it begins to shut
/// down).
async fn accepts(server: &Proc) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_ends_a_history_server_whose_jobs_page_is_open() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    // A browser tab on the jobs page and one on a job's page.
    let list = open_stream(&server, "/ui/events").await;
    let job = open_stream(&server, "/ui/events?job_id=038HEXYE9M000").await;
    server.signal_term();
    let status = server.exits("SIGTERM ends the server").await;
    assert!(status.success(), "{status:?}");
    drop((list, job));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_client_holds_a_shutdown_no_longer_than_its_deadline_and_a_second_sigterm_ends_it_at_once()
 {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    // A deadline no test waits for: only the second signal can end this.
    let mut server = Proc::history(tmp.path(), &["--shutdown-timeout-seconds", "600"]);
    server.wait_ready().await;
    let mut stalled = stalled_upload(&server).await;
    server.signal_term();
    eventually("the server stops accepting connections", || async {
        !accepts(&server).await
    })
    .await;
    // Still held by the stalled request, as graceful shutdown does.
    assert!(server.pid() > 0);
    server.signal_term();
    let status = server.exits("a second SIGTERM ends the server").await;
    assert_eq!(status.code(), Some(130), "{status:?}");
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_request_is_cut_at_the_shutdown_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &["--shutdown-timeout-seconds", "3"]);
    server.wait_ready().await;
    let mut stalled = stalled_upload(&server).await;
    let _stream = open_stream(&server, "/ui/events").await;
    server.signal_term();
    let status = server.exits("the shutdown deadline ends the server").await;
    assert!(status.success(), "{status:?}");
    // The stalled client's connection was closed, not left open.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stalled.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the stalled connection stays open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_ends_the_scheduler_and_records_the_job_in_flight_whole() {
    let Cluster {
        tmp: _tmp,
        logs,
        mut sched,
        ctx,
        ..
    } = Cluster::start(&["--shutdown-timeout-seconds", "9"]).await;
    // A job that runs for hours, a tab on the jobs page, a stalled client.
    let heavy = spawn_heavy(&ctx);
    let job_id = wait_for("the job runs", || async {
        let jobs = get_json(&sched.url("/api/jobs")).await;
        jobs.as_array()?
            .iter()
            .find(|j| j["status"].as_str() == Some("Running"))
            .map(|j| j["job_id"].as_str().unwrap().to_string())
    })
    .await;
    let _page = open_stream(&sched, "/ui/events").await;
    let _stalled = stalled_upload(&sched).await;
    sched.signal_term();
    let status = sched.exits("SIGTERM ends the scheduler").await;
    assert!(status.success(), "{status:?}");
    // The job in flight ended with the process, and its log says so whole:
    // its terminal record and footer written, renamed, nothing running.
    let lines = completed_log(&logs, &job_id).await;
    assert_whole(&lines);
    let end = job_end(&lines);
    assert_eq!(end["status"], "Cancelled", "{end:?}");
    assert!(!logs.join(format!("{job_id}.eventlog.running")).exists());
    let _ = heavy.await;
}

/// SIGTERM while the first pass reads a large directory: the server does
/// not wait for the pass. It stops after the slice of logs it is reading,
/// saves what it read with the persistent index, and the next start lists
/// every job. The pass is seen under way (`/readyz` not 200 yet) before
/// the signal; the index the stopped server saved holds some of the jobs
/// and not all (before, the shutdown waited for the whole pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_during_the_first_pass_saves_what_it_read_and_the_next_start_reads_the_rest() {
    const LOGS: usize = 100_000;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for i in 0..LOGS {
        let id = format!("job-{i:06}");
        let log = crate::published::tiny_log(&id);
        std::fs::write(dir.join(format!("{id}.eventlog")), log).unwrap();
    }
    let mut server = Proc::history(dir, &[]);
    server.wait_healthy().await;
    let ready = http_client().get(server.url("/readyz")).send().await;
    assert_ne!(ready.unwrap().status(), 200, "the first pass is under way");
    server.signal_term();
    let status = server
        .exits("SIGTERM ends the server during its first pass")
        .await;
    assert!(status.success(), "{status:?}");
    let index = dir.join(".ballista-job-history.index");
    let saved = bjh_store::snapshot::load(&index).unwrap().len();
    assert!(saved > 0 && saved < LOGS, "{saved} of {LOGS} saved");
    // Ready once the saved index is loaded; the rest is read after.
    let mut again = Proc::history(dir, &[]);
    again.wait_ready().await;
    eventually("the next start lists every job", || async {
        let page = http_client()
            .get(again.url("/api/jobs?limit=1"))
            .send()
            .await;
        page.is_ok_and(|p| p.headers()["x-total-count"] == LOGS.to_string().as_str())
    })
    .await;
    assert!(again.terminate().success());
}
