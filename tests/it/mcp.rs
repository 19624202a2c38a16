//! `/mcp` against the real binary, with the official MCP Python client
//! (PyPI's `mcp`, a client that shares no code with the server): it lists
//! the tools and calls each, on a recording scheduler with a real executor
//! and on a history-only server over the logs it wrote, both behind a
//! token; every tool's answer is the REST route's, asked separately. Then
//! the attacks: no token, a web page's origin, a huge body, a hostile job
//! id and hostile SQL.

use crate::harness::{Cluster, Proc, completed_log, http_client, python_json};
use serde_json::{Value, json};

/// Runs the Python client over `calls` against `base`.
fn client(base: &str, token: &str, calls: &[Value]) -> Value {
    python_json(
        "mcp_check.py",
        &json!({"base": base, "token": token, "calls": calls}),
    )
}

fn call(tool: &str, args: Value, method: &str, path: &str, body: Option<Value>) -> Value {
    json!({
        "tool": tool,
        "args": args,
        "rest": {"method": method, "path": path, "body": body.map(|b| b.to_string())},
    })
}

/// Each tool, with the REST request it must answer like.
fn calls(a: &str, b: &str) -> Vec<Value> {
    let sql = "SELECT job_id, status FROM jobs ORDER BY job_id";
    vec![
        call(
            "list_jobs",
            json!({"status": "completed", "sort": "duration", "limit": 1}),
            "GET",
            "/api/jobs?status=completed&sort=duration&limit=1",
            None,
        ),
        call("list_jobs", json!({}), "GET", "/api/jobs?limit=20", None),
        call(
            "get_job",
            json!({"job_id": a}),
            "GET",
            &format!("/api/job/{a}"),
            None,
        ),
        call(
            "get_job_stages",
            json!({"job_id": b}),
            "GET",
            &format!("/api/job/{b}/stages"),
            None,
        ),
        call(
            "diagnose_job",
            json!({"job_id": a}),
            "GET",
            &format!("/api/job/{a}/diagnosis"),
            None,
        ),
        call(
            "compare_jobs",
            json!({"a": a, "b": b}),
            "GET",
            &format!("/api/compare?a={a}&b={b}"),
            None,
        ),
        call(
            "recurring_queries",
            json!({"limit": 5}),
            "GET",
            "/api/queries?limit=5",
            None,
        ),
        call(
            "run_sql",
            json!({"sql": sql}),
            "POST",
            "/api/sql",
            Some(json!({"sql": sql})),
        ),
        call(
            "run_sql",
            json!({"sql": sql, "engine": "local"}),
            "POST",
            "/api/sql",
            Some(json!({"sql": sql, "engine": "local"})),
        ),
        call("list_clusters", json!({}), "GET", "/api/clusters", None),
        // Errors are the route's: an unknown job, a bad parameter, SQL
        // the engine refuses to run (it reads no file it is not given).
        call(
            "get_job",
            json!({"job_id": "../../../etc/passwd"}),
            "GET",
            "/api/job/..%2F..%2F..%2Fetc%2Fpasswd",
            None,
        ),
        call(
            "list_jobs",
            json!({"status": "exploded"}),
            "GET",
            "/api/jobs?status=exploded&limit=20",
            None,
        ),
        call(
            "run_sql",
            json!({"sql": "SELECT * FROM '/etc/passwd'"}),
            "POST",
            "/api/sql",
            Some(json!({"sql": "SELECT * FROM '/etc/passwd'"})),
        ),
    ]
}

const TOOLS: [&str; 8] = [
    "compare_jobs",
    "diagnose_job",
    "get_job",
    "get_job_stages",
    "list_clusters",
    "list_jobs",
    "recurring_queries",
    "run_sql",
];

/// The client sees every tool, described, and each answer is the route's.
fn every_tool_answers_as_its_route(server: &Proc, token: &str, a: &str, b: &str, what: &str) {
    let calls = calls(a, b);
    let out = client(&server.url(""), token, &calls);
    let mut names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS, "{what}");
    for tool in out["tools"].as_array().unwrap() {
        let description = tool["description"].as_str().unwrap_or("");
        assert!(description.len() > 60, "{what}: {tool}");
        assert_eq!(tool["input_schema"]["type"], "object", "{what}: {tool}");
    }
    // Every argument of list_jobs is described to the assistant.
    let list = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "list_jobs")
        .unwrap();
    for (name, property) in list["input_schema"]["properties"].as_object().unwrap() {
        assert!(
            property["description"]
                .as_str()
                .is_some_and(|d| d.len() > 10),
            "{what}: list_jobs.{name} is not described"
        );
    }
    let answers = out["calls"].as_array().unwrap();
    assert_eq!(answers.len(), calls.len(), "{what}");
    for (asked, answer) in calls.iter().zip(answers) {
        let tool = &asked["tool"];
        let status = answer["rest_status"].as_u64().unwrap();
        let rest: Value = serde_json::from_str(answer["rest_body"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{what}: {tool}: the route's body is not JSON: {e}"));
        let said: Value = serde_json::from_str(answer["texts"][0].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{what}: {tool}: the tool's answer is not JSON: {e}"));
        if tool == "list_clusters" {
            // Its slot time runs to the moment it is asked: the schedulers
            // and their jobs are what the two answers share.
            let stable = |v: &Value| -> Vec<(Value, Value)> {
                v["clusters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| (c["scheduler_id"].clone(), c["jobs"].clone()))
                    .collect()
            };
            assert_eq!(stable(&said), stable(&rest), "{what}: {tool}");
            assert!(!stable(&said).is_empty(), "{what}: {tool}: {said}");
        } else {
            assert_eq!(said, rest, "{what}: {tool} {}", asked["args"]);
        }
        assert_eq!(
            answer["is_error"].as_bool().unwrap(),
            status >= 400,
            "{what}: {tool} {}: status {status}",
            asked["args"]
        );
    }
    // The calls that must fail did, and the ones that must answer did.
    let errors: Vec<bool> = answers
        .iter()
        .map(|a| a["is_error"].as_bool().unwrap())
        .collect();
    let n = errors.len();
    assert!(errors[..n - 3].iter().all(|e| !e), "{what}: {errors:?}");
    assert!(errors[n - 3..].iter().all(|e| *e), "{what}: {errors:?}");
    // The list says where the next page starts.
    assert!(
        answers[0]["texts"][1]
            .as_str()
            .is_some_and(|t| t.contains("2 jobs match") && t.contains("after=")),
        "{what}: {}",
        answers[0]["texts"]
    );
}

/// What a client that is not an assistant gets.
async fn attacks_are_refused(server: &Proc, token: &str, what: &str) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    let post = |body: Vec<u8>| {
        http_client()
            .post(server.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
    };
    let bearer = format!("Bearer {token}");
    // Without the token.
    let r = post(init.to_string().into_bytes()).send().await.unwrap();
    assert_eq!(r.status(), 401, "{what}: no token");
    // The control: with it, the handshake answers.
    let r = post(init.to_string().into_bytes())
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{what}: the handshake");
    // A web page's request (a browser adds its origin): refused.
    let r = post(init.to_string().into_bytes())
        .header("authorization", &bearer)
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "{what}: another site's page");
    // A body past the limit: refused unread.
    let mut huge = init.to_string().into_bytes();
    huge.extend(std::iter::repeat_n(b' ', 2 << 20));
    let r = post(huge)
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413, "{what}: a huge body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_mcp_client,
    ignore = "the official MCP client is not installed (python3 -m pip install mcp)"
)]
async fn the_official_client_calls_every_tool_and_gets_the_routes_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let token = "mcp-Token-7741";
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let token_arg = token_file.to_str().unwrap();
    let Cluster {
        tmp: _cluster,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&["--api-token-file", token_arg]).await;
    let sql = "SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k ORDER BY k";
    let (a, first) = run_job_with_token(&sched, &ctx, sql, token).await;
    let (b, second) = run_job_with_token(&sched, &ctx, sql, token).await;
    assert_eq!((first, second), (Ok(100), Ok(100)));
    completed_log(&logs, &a).await;
    completed_log(&logs, &b).await;
    every_tool_answers_as_its_route(&sched, token, &a, &b, "recording scheduler");
    attacks_are_refused(&sched, token, "recording scheduler").await;

    let mut history = Proc::history(&logs, &["--api-token-file", token_arg]);
    history.wait_healthy().await;
    every_tool_answers_as_its_route(&history, token, &a, &b, "history-only server");
    attacks_are_refused(&history, token, "history-only server").await;
}

/// Runs `sql` and returns the job's id (the newest job the token's list
/// shows) and its row count.
async fn run_job_with_token(
    sched: &Proc,
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
    token: &str,
) -> (String, Result<usize, String>) {
    let rows = async {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok::<usize, datafusion::error::DataFusionError>(batches.iter().map(|b| b.num_rows()).sum())
    }
    .await
    .map_err(|e| e.to_string());
    let list: Value = http_client()
        .get(sched.url("/api/jobs?sort=queued_time&order=desc&limit=1"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (list[0]["job_id"].as_str().unwrap().to_string(), rows)
}
