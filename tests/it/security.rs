//! `--api-token-file`: the REST API answers only requests carrying the
//! token; health checks and the scheduler's gRPC (executors, clients) are
//! unaffected.

use crate::harness::*;

const TOKEN: &str = "tok-7f3a9c_Q2";

/// Status and body of a `GET` with an optional `Authorization` header.
async fn get_with(url: &str, authorization: Option<&str>) -> (u16, String, Option<String>) {
    get_from(http_client(), url, authorization).await
}

/// The same from `client`.
async fn get_from(
    client: reqwest::Client,
    url: &str,
    authorization: Option<&str>,
) -> (u16, String, Option<String>) {
    let mut request = client.get(url);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let r = request.send().await.expect("answered");
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (status, r.text().await.unwrap(), challenge)
}

/// Every protected route refuses a missing or wrong token with a 401 and a
/// challenge, and answers the right one; the health checks need none.
async fn assert_protected(server: &Proc, job_id: &str) {
    let bearer = format!("Bearer {TOKEN}");
    let routes = [
        "/api/jobs".to_string(),
        format!("/api/job/{job_id}"),
        format!("/api/job/{job_id}/stages"),
        format!("/api/job/{job_id}/config"),
        format!("/api/job/{job_id}/dot"),
        format!("/api/job/{job_id}/timeline"),
        format!("/api/job/{job_id}/timeline.svg"),
        "/api/metrics".to_string(),
        "/api/state".to_string(),
        "/api/executors".to_string(),
        "/api/no-such-route".to_string(),
    ];
    for (i, route) in routes.iter().enumerate() {
        let url = server.url(route);
        // Each route from a loopback address of its own: past five wrong
        // tokens an address must wait (`neighbours.rs` tests that).
        let client = reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 1, 10 + i as u8]))
            .build()
            .unwrap();
        for wrong in [
            None,
            Some("Bearer nope"),
            Some("Bearer tok-7f3a9c_Q"),
            Some(TOKEN),
        ] {
            let (status, body, challenge) = get_from(client.clone(), &url, wrong).await;
            assert_eq!(status, 401, "{route} with {wrong:?}: {body}");
            assert_eq!(challenge.as_deref(), Some("Bearer realm=\"ballista\""));
            assert!(!body.contains(TOKEN), "{body}");
            assert!(body.contains("\"http_code\":401"), "{body}");
        }
        let (status, body, _) = get_from(client, &url, Some(&bearer)).await;
        let want = if route.contains("no-such-route") {
            404
        } else {
            200
        };
        assert_eq!(status, want, "{route} with the token: {body}");
    }
    let (status, body, _) = get_with(&server.url("/api/jobs"), Some(&bearer)).await;
    assert_eq!(status, 200);
    assert!(body.contains(job_id), "{body}");
    for open in ["/healthz", "/readyz"] {
        let (status, body, _) = get_with(&server.url(open), None).await;
        assert!(status == 200 || status == 503, "{open}: {status} {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_protects_every_api_route_but_not_health_or_grpc() {
    let secrets = tempfile::tempdir().unwrap();
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let token_arg = token_file.to_str().unwrap();
    let cluster = Cluster::start(&[
        "--api-token-file",
        token_arg,
        "--update-interval-seconds",
        "1",
    ])
    .await;

    // The client and the executor talk gRPC on the same port: unaffected.
    let batches = cluster
        .ctx
        .sql("SELECT count(*) FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let job_id = wait_for("the job's log", || {
        let logs = cluster.logs.clone();
        async move {
            std::fs::read_dir(&logs).ok()?.flatten().find_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".eventlog").map(str::to_string)
            })
        }
    })
    .await;
    // The timeline of the scheduler's own job comes from its log once a
    // rescan has indexed it.
    eventually("the live scheduler serves the job's timeline", || {
        let url = cluster.sched.url(&format!("/api/job/{job_id}/timeline"));
        async move { get_with(&url, Some(&format!("Bearer {TOKEN}"))).await.0 == 200 }
    })
    .await;
    assert_protected(&cluster.sched, &job_id).await;

    // The same over the log alone.
    let mut history = Proc::history(&cluster.logs, &["--api-token-file", token_arg]);
    history.wait_healthy().await;
    eventually("the history server lists the job", || {
        let url = history.url("/api/jobs");
        let job_id = job_id.clone();
        async move {
            get_with(&url, Some(&format!("Bearer {TOKEN}")))
                .await
                .1
                .contains(&job_id)
        }
    })
    .await;
    assert_protected(&history, &job_id).await;

    // Without the flag the API is open, as upstream's.
    let mut open = Proc::history(&cluster.logs, &[]);
    open.wait_healthy().await;
    assert_eq!(get_with(&open.url("/api/jobs"), None).await.0, 200);

    // An empty or missing token file is refused at startup, not ignored.
    std::fs::write(secrets.path().join("empty"), "\n").unwrap();
    for file in ["empty", "missing"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
            .args(["--history-only", "--event-log-dir"])
            .arg(&cluster.logs)
            .arg("--api-token-file")
            .arg(secrets.path().join(file))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{file}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("API token file"), "{file}: {err}");
    }
}
