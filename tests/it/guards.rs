//! The guards that keep the wrong way hard to write again: every route the
//! source registers is behind the per-client share (a new route cannot be
//! served around it), and every task and stream a server starts ends when
//! it stops (a new stream cannot keep a stopping server alive).

use crate::harness::*;
use crate::history::copy_fixtures;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// Every path the code (`src/`, `crates/`) registers with `.route("...")`, read from the source
/// text (not from the router, which could leave one out).
fn every_route() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for piece in text.split(".route(").skip(1) {
                    if let Some(rest) = piece.trim_start().strip_prefix('"') {
                        out.insert(rest[..rest.find('"').unwrap()].to_string());
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    walk(&root.join("src"), &mut out);
    walk(&root.join("crates"), &mut out);
    assert!(out.len() > 20, "{out:?}");
    out
}

/// A concrete path for a registered one.
fn concrete(route: &str) -> String {
    route
        .replace("{job_id}", "038HEXYE9M000")
        .replace("{stage_id}", "1")
        .replace("{name}", "ui.css")
        .replace("{*rest}", "x")
        .replace("{*path}", "x")
}

/// A request from `from` to `path` on `server`: its status, or `None`
/// when the connection was closed unanswered.
async fn status_from(server: &Proc, from: [u8; 4], path: &str) -> Option<u16> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from(from))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let r = client.get(server.url(path)).send().await.ok()?;
    Some(r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_route_is_behind_the_per_client_share() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(
        tmp.path(),
        &[
            "--http-max-connections-per-client",
            "2",
            "--http-header-timeout-seconds",
            "600",
        ],
    );
    server.wait_ready().await;
    // One client holds its share: two connections that send nothing.
    let mut held = Vec::new();
    for _ in 0..2 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, 11], 0)))
            .unwrap();
        held.push(
            socket
                .connect(std::net::SocketAddr::from(([127, 0, 0, 1], server.port)))
                .await
                .unwrap(),
        );
    }
    for route in every_route() {
        let path = concrete(&route);
        assert_eq!(
            status_from(&server, [127, 0, 0, 11], &path).await,
            None,
            "{route} answered a client past its share"
        );
        assert!(
            status_from(&server, [127, 0, 0, 12], &path).await.is_some(),
            "{route} left another client unanswered"
        );
    }
    drop(held);
    server.terminate();
}

#[test]
fn every_task_and_stream_ends_when_the_server_stops() {
    use ballista_job_history::{HistoryOptions, run_history};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let alive = || runtime.metrics().num_alive_tasks();
    let before = alive();
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut options = HistoryOptions::new(tmp.path());
    options.http.drain_timeout = Duration::from_secs(3);
    // SQL runs in the binary (this test executable is not a worker).
    options.sql_worker = Some(env!("CARGO_BIN_EXE_ballista-scheduler").into());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (port, server) = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(run_history(listener, options, async {
            let _ = stopped.await;
        }));
        (port, server)
    });
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    // While it serves: live-page streams of both kinds, a SQL query, a
    // stalled upload and an idle keep-alive connection, all held open.
    let held = runtime.block_on(async {
        let client = http_client();
        eventually("the server is ready", || async {
            matches!(client.get(url("/readyz")).send().await, Ok(r) if r.status() == 200)
        })
        .await;
        let mut held = Vec::new();
        for path in ["/ui/events", "/ui/events?job_id=038HEXYE9M000"] {
            let mut r = client.get(url(path)).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.chunk().await.unwrap();
            held.push(r);
        }
        let sql = client
            .post(url("/api/sql"))
            .header("content-type", "application/sql")
            .body("SELECT count(*) FROM tasks")
            .send()
            .await
            .unwrap();
        assert_eq!(sql.status(), 200);
        let mut stalled = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        use tokio::io::AsyncWriteExt;
        stalled
            .write_all(b"POST /api/sql HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/sql\r\ncontent-length: 99\r\n\r\nSEL")
            .await
            .unwrap();
        (held, stalled)
    });
    assert!(alive() > before, "the server runs tasks");
    let _ = stop.send(());
    let returned =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(30), server).await });
    assert!(
        returned.is_ok(),
        "run_history did not return after its stop"
    );
    returned.unwrap().unwrap().unwrap();
    // The test's own client tasks go with the answers it held; then every
    // task the server started has ended: none is left to hold the runtime.
    drop(held);
    runtime.block_on(async {
        eventually("every task of the server has ended", || async {
            alive() == before
        })
        .await;
    });
}
