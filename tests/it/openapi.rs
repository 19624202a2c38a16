//! The OpenAPI description (`GET /api/openapi.json`) against the real
//! binary. Every path the code registers (read from `src/` and `crates/`, the web pages
//! aside) is described; every described operation, called on a recording
//! scheduler with a real executor and on a history-only server over the
//! logs it wrote, answers as described. The judge is openapi-core (PyPI),
//! a validator that shares no code with the server; a control answer that
//! breaks the description must fail it, so a validator that accepts
//! anything fails this test.

use crate::harness::{Cluster, Proc, completed_log, get_json, python_json, run_job, skip};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

fn has_openapi_core() -> bool {
    Command::new("python3")
        .args(["-c", "import openapi_core"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The paths the code (`src/`, `crates/`) registers with `.route("...")`,
/// outside the web pages (`crates/serving/src/ui/`) and catch-alls (`{*rest}`): read from the source
/// text, not from the router.
fn registered_paths() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with("ui") {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for piece in text.split(".route(").skip(1) {
                    let Some(rest) = piece.trim_start().strip_prefix('"') else {
                        continue;
                    };
                    let route = &rest[..rest.find('"').unwrap()];
                    if !route.contains("{*") {
                        out.insert(route.to_string());
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    walk(&root.join("src"), &mut out);
    walk(&root.join("crates"), &mut out);
    assert!(out.len() > 15, "{out:?}");
    out
}

/// What to send for each described operation: real ids in the path, and
/// the parameters a route needs.
fn calls(spec: &Value, ids: &Ids) -> Vec<Value> {
    let mut out = Vec::new();
    for (pattern, item) in spec["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let mut view_args = serde_json::Map::new();
            let mut path = pattern.clone();
            for (name, value) in [
                ("job_id", ids.a.as_str()),
                ("stage_id", "1"),
                ("executor_id", ids.executor.as_str()),
            ] {
                let hole = format!("{{{name}}}");
                if path.contains(&hole) {
                    path = path.replace(&hole, value);
                    view_args.insert(name.into(), value.into());
                }
            }
            let query = match pattern.as_str() {
                "/api/compare" => json!({"a": ids.a, "b": ids.b}),
                "/api/jobs" => json!({"limit": "1", "sort": "duration", "status": "completed"}),
                "/api/job/{job_id}/timeline" => json!({"limit": "2", "offset": "1"}),
                "/api/queries" => json!({"limit": "5"}),
                _ => json!({}),
            };
            let (body, content_type) = match (method, pattern.as_str()) {
                ("post", "/api/sql") => (
                    json!(r#"{"sql": "SELECT job_id, status FROM jobs ORDER BY job_id"}"#),
                    json!("application/json"),
                ),
                _ => (Value::Null, Value::Null),
            };
            out.push(json!({
                "method": method.to_uppercase(),
                "path": path,
                "pattern": pattern,
                "view_args": view_args,
                "query": query,
                "body": body,
                "content_type": content_type,
            }));
        }
    }
    out
}

struct Ids {
    a: String,
    b: String,
    executor: String,
}

/// Runs the checker over `calls` on the server at `base`.
fn check(base: &str, calls: &[Value]) -> Vec<Value> {
    serde_json::from_value(python_json(
        "openapi_check.py",
        &json!({"base": base, "calls": calls}),
    ))
    .unwrap()
}

/// Every described operation of `server` answers as described; the
/// answers' statuses, one per call.
async fn every_operation_answers_as_described(server: &Proc, ids: &Ids, what: &str) {
    let spec = get_json(&server.url("/api/openapi.json")).await;
    let described: BTreeSet<String> = spec["paths"].as_object().unwrap().keys().cloned().collect();
    for path in registered_paths() {
        assert!(
            described.contains(&path),
            "{what}: {path} is registered but not described"
        );
    }
    let calls = calls(&spec, ids);
    let results = check(&server.url(""), &calls);
    assert_eq!(results.len(), calls.len(), "{what}");
    for result in &results {
        let (method, pattern) = (&result["method"], &result["pattern"]);
        assert_eq!(result["errors"], json!([]), "{what}: {method} {pattern}");
        let status = result["status"].as_u64().unwrap();
        // Real ids: every read answers, and the cancel of a finished job
        // is refused as described.
        if method == "GET" {
            assert!(
                (200..300).contains(&status),
                "{what}: {method} {pattern}: {status}"
            );
        }
    }
    // The control: an answer that breaks the description fails it.
    let mut control = calls
        .iter()
        .find(|c| c["pattern"] == "/api/job/{job_id}/diagnosis")
        .expect("the diagnosis is described")
        .clone();
    control["replace_body"] = json!(r#"{"job_id": 5, "findings": "none"}"#);
    let failed = check(&server.url(""), &[control]);
    assert_ne!(failed[0]["errors"], json!([]), "{what}: the control passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_route_is_described_and_answers_as_described_in_both_modes() {
    if !has_openapi_core() {
        skip(
            "openapi::every_route_is_described_and_answers_as_described_in_both_modes",
            "openapi-core is not installed (python3 -m pip install openapi-core)",
        );
        return;
    }
    let Cluster {
        tmp: _tmp,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&[]).await;
    let sql = "SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k ORDER BY k";
    let (a, first) = run_job(&sched, &ctx, sql).await;
    let (b, second) = run_job(&sched, &ctx, sql).await;
    assert_eq!((first, second), (Ok(100), Ok(100)));
    completed_log(&logs, &a).await;
    completed_log(&logs, &b).await;
    let executors = get_json(&sched.url("/api/executors")).await;
    let ids = Ids {
        a,
        b,
        executor: executors[0]["id"].as_str().unwrap().to_string(),
    };
    every_operation_answers_as_described(&sched, &ids, "recording scheduler").await;

    let mut history = Proc::history(&logs, &[]);
    history.wait_ready().await;
    every_operation_answers_as_described(&history, &ids, "history-only server").await;
    // A history-only server describes no route it does not serve.
    let spec = get_json(&history.url("/api/openapi.json")).await;
    assert!(spec["paths"].get("/api/executor/{executor_id}").is_none());
}
