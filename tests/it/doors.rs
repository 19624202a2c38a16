//! A header opens no door: the host guard and CORS decide on what a
//! browser cannot choose, and grant no other site what an operator did not
//! name. Against the real binary, in both modes.

use crate::harness::*;
use crate::history::copy_fixtures;
use http::HeaderMap;

/// `method path` on `server` with `Host: host` and `headers`: status and
/// answer headers.
async fn ask(
    server: &Proc,
    method: reqwest::Method,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap) {
    let mut request = http_client()
        .request(method, server.url(path))
        .header("host", host);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.headers().clone())
}

/// A gRPC call over HTTP/2 (prior knowledge, as executors and clients
/// speak) naming `authority`: the answer's status and `grpc-status`.
async fn grpc_call(port: u16, authority: &str) -> (u16, Option<String>) {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{authority}/ballista.protobuf.SchedulerGrpc/GetJobStatus"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    // One empty message: a zero flag and a zero length.
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let in_head = response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string());
    let mut body = response.into_body();
    while body.data().await.is_some() {}
    let in_trailers = body.trailers().await.ok().flatten().and_then(|t| {
        t.get("grpc-status")
            .map(|v| v.to_str().unwrap().to_string())
    });
    (status, in_head.or(in_trailers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grpc_content_type_opens_no_door_to_a_foreign_host() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut history = Proc::history(tmp.path(), &[]);
    history.wait_ready().await;
    let grpc = [("content-type", "application/grpc")];
    for path in [
        "/api/jobs",
        "/api/openapi.json",
        "/ui/sql",
        "/api/job/038HEXYE9M000",
    ] {
        let (status, _) = ask(&history, reqwest::Method::GET, path, "evil.example", &grpc).await;
        assert_eq!(
            status, 403,
            "{path}: a rebound page read it as HTTP/1.1 'gRPC'"
        );
        let (status, _) = ask(&history, reqwest::Method::GET, path, "127.0.0.1", &grpc).await;
        assert_ne!(status, 403, "{path}");
    }
    history.terminate();

    // A live scheduler: the same for its routes and upstream's, while real
    // gRPC (HTTP/2) is answered whatever host it names.
    let Cluster { mut sched, .. } = Cluster::start(&[]).await;
    for path in ["/api/jobs", "/api/state", "/api/executors"] {
        let (status, _) = ask(&sched, reqwest::Method::GET, path, "evil.example", &grpc).await;
        assert_eq!(status, 403, "{path}");
    }
    let (status, grpc_status) = grpc_call(sched.port, "scheduler.elsewhere.example:50050").await;
    assert_eq!(status, 200);
    assert!(grpc_status.is_some(), "a gRPC answer");
    sched.terminate();
}

/// The `Access-Control-Allow-Origin` of an answer.
fn granted(headers: &HeaderMap) -> Option<String> {
    headers
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_other_site_reads_the_history_unless_an_operator_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let upstreams = ["https://nightlies.apache.org", "http://localhost:8080"];
    let preflight =
        |origin: &'static str| [("origin", origin), ("access-control-request-method", "GET")];
    // Upstream's default origins are not granted by a history server...
    let mut history = Proc::history(tmp.path(), &[]);
    history.wait_ready().await;
    for origin in upstreams {
        for path in ["/api/jobs", "/api/state", "/api/job/038HEXYE9M000/stages"] {
            let (status, headers) = ask(
                &history,
                reqwest::Method::GET,
                path,
                "127.0.0.1",
                &[("origin", origin)],
            )
            .await;
            assert_eq!(status, 200, "{path}");
            assert_eq!(granted(&headers), None, "{origin} may read {path}");
            let (_, headers) = ask(
                &history,
                reqwest::Method::OPTIONS,
                path,
                "127.0.0.1",
                &preflight(origin),
            )
            .await;
            assert_eq!(granted(&headers), None, "{origin} preflight of {path}");
        }
    }
    history.terminate();
    // ... but one an operator names is, and only it.
    let named = "https://grafana.example.com";
    let mut history = Proc::history(tmp.path(), &["--cors-allowed-origins", named]);
    history.wait_ready().await;
    let (_, headers) = ask(
        &history,
        reqwest::Method::GET,
        "/api/jobs",
        "127.0.0.1",
        &[("origin", named)],
    )
    .await;
    assert_eq!(granted(&headers).as_deref(), Some(named));
    let (_, headers) = ask(
        &history,
        reqwest::Method::GET,
        "/api/jobs",
        "127.0.0.1",
        &[("origin", upstreams[0])],
    )
    .await;
    assert_eq!(granted(&headers), None);
    history.terminate();

    // A recording scheduler: our routes and upstream's behind them alike.
    let Cluster { mut sched, .. } = Cluster::start(&[]).await;
    for path in ["/api/jobs", "/api/state", "/api/executors", "/api/metrics"] {
        let (status, headers) = ask(
            &sched,
            reqwest::Method::GET,
            path,
            "127.0.0.1",
            &[("origin", upstreams[0])],
        )
        .await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(granted(&headers), None, "{path}");
    }
    sched.terminate();
}
