//! Without `--event-log-dir` the binary is upstream's scheduler: every
//! `/api` answer (status, headers, body) is the one upstream's own
//! scheduler gives, route by route, with unknown and odd parameters. The
//! oracle is upstream's scheduler itself, assembled in this process by its
//! own `start_grpc_service_with_listener`.

use crate::harness::*;
use ballista_core::serde::BallistaCodec;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::{Config, SchedulerConfig};
use ballista_scheduler::metrics::NoopMetricsCollector;
use ballista_scheduler::scheduler_server::SchedulerServer;
use clap::Parser;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use std::sync::Arc;

/// Upstream's scheduler on a port of its own, from the same command-line
/// defaults our binary starts with.
async fn upstream() -> u16 {
    let flags = [
        "ballista-scheduler",
        "--bind-host",
        "127.0.0.1",
        "--external-host",
        "127.0.0.1",
    ];
    let config: SchedulerConfig = Config::parse_from(flags).try_into().unwrap();
    let cluster = BallistaCluster::new_from_config(&config).await.unwrap();
    let config = Arc::new(config);
    let mut server: SchedulerServer<LogicalPlanNode, PhysicalPlanNode> = SchedulerServer::new(
        config.scheduler_endpoint(),
        cluster,
        BallistaCodec::default(),
        config,
        Arc::new(NoopMetricsCollector::default()),
    );
    server.init().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(
        ballista_scheduler::scheduler_process::start_grpc_service_with_listener(listener, server),
    );
    port
}

/// Status, headers (but `date`) and body of one request.
async fn answer(port: u16, method: &str, path: &str) -> (u16, Vec<(String, String)>, String) {
    let url = format!("http://127.0.0.1:{port}{path}");
    // Redirects are answers too (upstream sends `/` to its hosted TUI).
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .request(method.parse().unwrap(), url)
        .send()
        .await
        .unwrap();
    let mut headers: Vec<(String, String)> = r
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str() != "date")
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_string()))
        .map(|(k, v)| {
            // The redirect names the scheduler's own port, which differs.
            let v = match v.split_once("127.0.0.1:") {
                Some((head, tail)) if k == "location" => format!(
                    "{head}127.0.0.1:PORT{}",
                    tail.trim_start_matches(|c: char| c.is_ascii_digit())
                ),
                _ => v,
            };
            (k, v)
        })
        .collect();
    headers.sort();
    let status = r.status().as_u16();
    (
        status,
        headers,
        String::from_utf8_lossy(&r.bytes().await.unwrap()).into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_an_event_log_dir_every_api_answer_is_upstreams() {
    let upstream = upstream().await;
    let mut ours = Proc::spawn(&[]);
    ours.wait_healthy().await;
    eventually("upstream's scheduler answers", || async {
        http_client()
            .get(format!("http://127.0.0.1:{upstream}/healthz"))
            .send()
            .await
            .is_ok()
    })
    .await;
    let routes = [
        ("GET", "/api/jobs"),
        ("GET", "/api/jobs?foo=1"),
        ("GET", "/api/jobs?limit=0"),
        ("GET", "/api/jobs?status=nonsense&sort=size&after=x"),
        ("GET", "/api/job/no-such-job"),
        ("GET", "/api/job/no-such-job?plan_format=tree"),
        ("GET", "/api/job/no-such-job?plan_format=bogus"),
        ("GET", "/api/job/no-such-job?foo=bar"),
        ("GET", "/api/job/no-such-job/stages"),
        ("GET", "/api/job/no-such-job/stages?plan_format=metrics"),
        ("GET", "/api/job/no-such-job/config"),
        ("GET", "/api/job/no-such-job/dot"),
        ("GET", "/api/job/no-such-job/stage/1/dot"),
        ("GET", "/api/job/no-such-job/stage/x/dot"),
        ("GET", "/api/job/no-such-job/timeline"),
        ("GET", "/api/job/no-such-job/timeline.svg"),
        ("GET", "/api/job/%2e%2e%2fetc"),
        ("GET", "/api/executors"),
        ("GET", "/api/executor/none"),
        ("GET", "/api/version"),
        ("GET", "/api/openapi.json"),
        ("GET", "/api/no-such-route"),
        ("PATCH", "/api/job/no-such-job"),
        ("POST", "/api/jobs"),
        ("DELETE", "/api/job/no-such-job"),
        // The web pages exist only with --event-log-dir.
        ("GET", "/"),
        ("GET", "/ui/job/no-such-job"),
        ("GET", "/ui/assets/ui.css"),
        ("GET", "/api/job/no-such-job/eventlog"),
    ];
    for (method, path) in routes {
        let theirs = answer(upstream, method, path).await;
        let mine = answer(ours.port, method, path).await;
        assert_eq!(mine, theirs, "{method} {path}");
    }
}
