//! A fair share for every client: one client (an IPv4 address, an IPv6
//! /64) cannot lock out the right token, take every connection, hold
//! silent HTTP/2 connections for ever, take every live-page stream, make
//! each stream cost a look a second, or make `/mcp` hold answers it does
//! not read. Against the real binary, but for the /64 rule (a host here
//! has no /64 to send from), which is tested in process.

use crate::harness::*;
use crate::history::copy_fixtures;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A client whose connections come from `from`, an address of the
/// loopback network: another client to the server.
fn client_from(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from(from))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A TCP connection to `server` from `from`.
async fn connect_from(server: &Proc, from: [u8; 4]) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((from, 0))).unwrap();
    socket
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], server.port)))
        .await
        .unwrap()
}

/// Whether the server closes `stream` within `within` (an end of input
/// or a reset; any bytes before it are read and dropped).
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// Lets this process hold `n` more descriptors than its soft limit
/// allows, up to the hard limit.
fn allow_descriptors(n: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let want = limit.current.unwrap_or(1024).max(n + 256);
    limit.current = Some(limit.maximum.map_or(want, |max| want.min(max)));
    setrlimit(Resource::Nofile, limit).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_right_token_is_never_refused_however_many_wrong_ones_its_address_sent() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let token = "Sesame-0451";
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let mut server = Proc::history(
        tmp.path(),
        &["--api-token-file", token_file.to_str().unwrap()],
    );
    server.wait_healthy().await;
    // Behind one proxy: a guesser, Prometheus and a browser share 127.0.0.3.
    let shared = client_from([127, 0, 0, 3]);
    let bearer = |token: &'static str| {
        let request = shared.get(server.url("/api/jobs")).bearer_auth(token);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    for _ in 0..7 {
        assert_eq!(bearer("guess").await, 401);
    }
    let at = Instant::now();
    assert_eq!(bearer(token).await, 200, "the right token after wrong ones");
    assert!(at.elapsed() < Duration::from_secs(1), "and at once");
    let signed = shared
        .post(server.url("/ui/login"))
        .form(&[("token", token), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303, "the sign-in page too");
    server.terminate();
}

/// The in-process router answering from `ip` (the /64 rule needs IPv6
/// addresses a loopback test cannot send from).
async fn bearer_from(router: &axum::Router, ip: &str, token: &str) -> u16 {
    use tower::ServiceExt;
    let mut request = http::Request::get("/api/jobs")
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 1);
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    router
        .clone()
        .oneshot(request)
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn forty_addresses_of_one_ipv6_64_guess_as_one_client() {
    use ballista_job_history::history_router;
    use bjh_metrics::HistoryMetrics;
    use bjh_serving::auth::ApiToken;
    use bjh_store::LogStore;
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let store = std::sync::Arc::new(LogStore::new(
        tmp.path(),
        std::sync::Arc::new(HistoryMetrics::unregistered()),
    ));
    store.rescan();
    std::fs::write(tmp.path().join("token"), "right-Token-9").unwrap();
    let token = ApiToken::from_file(&tmp.path().join("token")).unwrap();
    let router = history_router(store, Some(token), None);
    // Forty addresses of one /64: the first five guesses are free, then
    // every answer waits, whichever address it comes from.
    let mut waited = Vec::new();
    for i in 0..40u32 {
        let at = tokio::time::Instant::now();
        let status = bearer_from(&router, &format!("2001:db8:7:7::{i:x}"), "guess").await;
        assert_eq!(status, 401);
        waited.push(at.elapsed());
    }
    assert!(waited[..5].iter().all(|w| w.is_zero()), "{waited:?}");
    assert_eq!(waited[5], Duration::from_secs(1));
    assert_eq!(waited[39], Duration::from_secs(60), "{waited:?}");
    // Another /64 is another client; the right token is let in at once.
    let at = tokio::time::Instant::now();
    assert_eq!(bearer_from(&router, "2001:db8:7:8::1", "guess").await, 401);
    assert_eq!(
        bearer_from(&router, "2001:db8:7:7::99", "right-Token-9").await,
        200
    );
    assert!(at.elapsed().is_zero());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_cannot_take_every_connection_and_silent_ones_are_closed() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    allow_descriptors(1200);
    let mut server = Proc::history(tmp.path(), &["--http-header-timeout-seconds", "2"]);
    server.wait_ready().await;
    // 1,100 connections from one address that never send a byte.
    let mut silent = Vec::new();
    for _ in 0..1100 {
        silent.push(connect_from(&server, [127, 0, 0, 5]).await);
    }
    // Another client is answered.
    let r = client_from([127, 0, 0, 6])
        .get(server.url("/healthz"))
        .send()
        .await
        .expect("another client is answered");
    assert_eq!(r.status(), 200);
    // The silent ones are closed by the first-request deadline (those over
    // the client's share at once).
    let closed = futures::future::join_all(
        silent
            .iter_mut()
            .map(|s| closed_within(s, Duration::from_secs(20))),
    )
    .await;
    assert!(closed.iter().all(|c| *c), "a silent connection stays open");
    server.terminate();
}

/// A regression test: with 1,024 connections in all and 256 per client,
/// four addresses holding their share refused 28 to 30 of 30 probes from a
/// fifth. By default a client holds a sixteenth of the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_addresses_holding_their_share_leave_room_for_a_fifth() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    allow_descriptors(1200);
    let mut server = Proc::history(tmp.path(), &["--http-header-timeout-seconds", "120"]);
    server.wait_ready().await;
    // Four hosts, 256 silent connections each: what 256 a client allowed.
    let mut held = Vec::new();
    for host in 20..24u8 {
        for _ in 0..256 {
            held.push(connect_from(&server, [127, 0, 0, host]).await);
        }
    }
    let fifth = client_from([127, 0, 0, 24]);
    let mut answered = 0;
    for _ in 0..30 {
        let r = fifth.get(server.url("/healthz")).send().await;
        answered += usize::from(r.is_ok_and(|r| r.status() == 200));
    }
    assert_eq!(
        answered, 30,
        "a fifth host is refused while four hold their share"
    );
    // Each of the four holds its sixteenth (64), the rest closed at once.
    let closed = futures::future::join_all(
        held.iter_mut()
            .map(|s| closed_within(s, Duration::from_millis(500))),
    )
    .await;
    let open = closed.iter().filter(|c| !**c).count();
    assert_eq!(open, 4 * 64, "connections the four still hold");
    server.terminate();
}

/// The HTTP/2 connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame.
const SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_http2_connections_are_closed() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(
        tmp.path(),
        &[
            "--http-header-timeout-seconds",
            "2",
            "--http-idle-timeout-seconds",
            "3",
        ],
    );
    server.wait_ready().await;
    // A bare preface.
    let mut bare = connect_from(&server, [127, 0, 0, 7]).await;
    bare.write_all(PREFACE).await.unwrap();
    // A preface and settings, and no stream.
    let mut streamless = connect_from(&server, [127, 0, 0, 7]).await;
    streamless.write_all(PREFACE).await.unwrap();
    streamless.write_all(SETTINGS).await.unwrap();
    for (what, stream) in [
        ("a bare preface", &mut bare),
        ("no stream", &mut streamless),
    ] {
        assert!(
            closed_within(stream, Duration::from_secs(20)).await,
            "{what}: the connection stays open"
        );
    }
    // A real HTTP/2 client, answered, then silent (acking pings): closed
    // once idle.
    let tcp = connect_from(&server, [127, 0, 0, 8]).await;
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let ended = tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let (response, _) = client
        .send_request(
            http::Request::get(server.url("/healthz")).body(()).unwrap(),
            true,
        )
        .unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    let ended = tokio::time::timeout(Duration::from_secs(20), ended).await;
    assert!(ended.is_ok(), "an idle HTTP/2 connection stays open");
    drop(client);
    server.terminate();
}

/// Opens a live-page stream from `from`: its status, and the response to
/// hold it open.
async fn stream_from(server: &Proc, from: [u8; 4], path: &str) -> (u16, reqwest::Response) {
    let r = client_from(from)
        .get(server.url(path))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_cannot_hold_every_live_page_stream() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let mut held = Vec::new();
    let refused = loop {
        let (status, r) = stream_from(&server, [127, 0, 0, 9], "/ui/events").await;
        if status != 200 {
            break status;
        }
        held.push(r);
        assert!(held.len() <= 256, "no limit");
    };
    assert_eq!(refused, 429, "past its share, one client is told so");
    assert!(held.len() < 64, "one client holds {} streams", held.len());
    // The next viewer, from another address, is served.
    let (status, _next) = stream_from(&server, [127, 0, 0, 10], "/ui/events").await;
    assert_eq!(status, 200);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_open_live_pages_cost_one_look_a_second() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let looks = || async {
        let (_, _, body) = get(&server.url("/api/metrics")).await;
        counter(
            &String::from_utf8_lossy(&body),
            "ballista_job_history_live_page_looks_total",
        )
    };
    // Thirty tabs on the jobs page and ten on one job, from forty clients.
    let mut held = Vec::new();
    for i in 0..40u8 {
        let path = if i < 30 {
            "/ui/events".to_string()
        } else {
            "/ui/events?job_id=038HEXYE9M000".to_string()
        };
        let (status, r) = stream_from(&server, [127, 0, 1, i], &path).await;
        assert_eq!(status, 200);
        held.push(r);
    }
    // One look a second for the list and one for the job (which ended, so
    // its look stops): twenty looks take seconds, not the half second forty
    // streams looking each would take.
    let start = looks().await;
    let at = Instant::now();
    eventually("the live pages look twenty times", || async {
        looks().await >= start + 20
    })
    .await;
    assert!(
        at.elapsed() >= Duration::from_secs(8),
        "twenty looks in {:?}: each stream looks for itself",
        at.elapsed()
    );
    server.terminate();
}

/// A `tools/call` of `run_sql` over `/mcp` (stateless JSON-RPC).
fn mcp_sql(sql: &str) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "run_sql", "arguments": {"sql": sql}}})
    .to_string()
}

/// The resident memory of process `pid`, in MiB (`VmRSS`).
fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        / 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_answers_are_capped_and_unread_ones_hold_no_memory() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &["--sql-max-answer-bytes", "256MiB"]);
    server.wait_ready().await;
    // An answer of about 46 MB: 23 task rows of 2 MB each.
    let big = "SELECT repeat('x', 2000000) AS filler FROM tasks";
    let post = |body: String| {
        http_client()
            .post(server.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
    };
    let answer = post(mcp_sql(big)).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let answer = answer.text().await.unwrap();
    assert!(
        answer.contains("isError") && answer.contains("narrow the question"),
        "{}",
        &answer[..answer.len().min(500)]
    );
    assert!(
        answer.len() < 1 << 20,
        "the answer is {} bytes",
        answer.len()
    );
    // Twelve such requests sent and never read: the server holds little.
    let before = rss_mib(server.pid());
    let mut unread = Vec::new();
    for _ in 0..12 {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .unwrap();
        let body = mcp_sql(big);
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp.write_all(body.as_bytes()).await.unwrap();
        unread.push(tcp);
    }
    // Every one answered (its answer waiting in the socket), while the
    // health check answers.
    let client = http_client();
    eventually("the server answers again", || async {
        client.get(server.url("/healthz")).send().await.is_ok()
    })
    .await;
    let mut peeked = 0;
    for tcp in &mut unread {
        let mut byte = [0u8; 1];
        if tokio::time::timeout(Duration::from_secs(60), tcp.peek(&mut byte))
            .await
            .is_ok()
        {
            peeked += 1;
        }
    }
    assert_eq!(peeked, 12, "every request answered");
    let grew = rss_mib(server.pid()).saturating_sub(before);
    assert!(grew < 150, "twelve unread answers hold {grew} MiB");
    server.terminate();
}
