//! `POST /api/sql`, the columnar history behind it and `--export-parquet`,
//! against real jobs (a real scheduler, executor and client), upstream's
//! logs, and a real Ballista cluster reading the export.

use crate::harness::*;
use serde_json::Value;
use std::path::Path;

/// `sql` answered as JSON rows; panics on anything but a 200.
pub(crate) async fn sql(proc: &Proc, sql: &str) -> Vec<Value> {
    let (status, body) = sql_raw(proc, sql, "application/json").await;
    assert_eq!(status, 200, "{sql}: {body}");
    serde_json::from_str::<Value>(&body)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

async fn sql_raw(proc: &Proc, sql: &str, accept: &str) -> (u16, String) {
    let r = http_client()
        .post(proc.url("/api/sql"))
        .header("accept", accept)
        .header("content-type", "application/sql")
        .body(sql.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// One number of a one-row answer.
async fn number(proc: &Proc, query: &str) -> i64 {
    let rows = sql(proc, query).await;
    assert_eq!(rows.len(), 1, "{query}: {rows:?}");
    let v = rows[0]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    v.as_i64().unwrap_or_else(|| panic!("{query}: {v}"))
}

/// The task records in the log of each job of `dir`, counted line by line.
pub(crate) fn task_lines(dir: &Path) -> std::collections::BTreeMap<String, i64> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let Some(id) = name.strip_suffix(".eventlog") else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let n = text
            .lines()
            .filter(|l| l.starts_with(r#"{"ev":"TaskEnd""#))
            .count();
        out.insert(id.to_string(), n as i64);
    }
    out
}

/// The failed task attempts in the logs of `dir`, counted line by line.
fn failed_task_lines(dir: &Path) -> i64 {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".eventlog") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if line.starts_with(r#"{"ev":"TaskEnd""#) {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                n += i64::from(v["data"]["status"].get("Failed").is_some());
            }
        }
    }
    n
}

/// The SQL blocks of `docs/sql.md`.
fn documented_questions() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sql.md")).unwrap();
    doc.split("```sql\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().trim().to_string())
        .collect()
}

/// Runs `grouped` (100 groups) and a query that fails on the executor;
/// gives their job ids.
async fn grouped_and_failed(cluster: &Cluster, grouped: &str) -> (String, String) {
    let (agg, ok) = run_job(&cluster.sched, &cluster.ctx, grouped).await;
    assert_eq!(ok, Ok(100));
    let (failed, err) = run_job(&cluster.sched, &cluster.ctx, "SELECT CAST(s AS INT) FROM t").await;
    assert!(err.is_err());
    (agg, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tables_hold_what_the_logs_hold() {
    let mut cluster = Cluster::start(&[]).await;
    let sched = &cluster.sched;
    let (agg, failed) = grouped_and_failed(
        &cluster,
        "SELECT k, count(*), sum(v) FROM t GROUP BY k ORDER BY k",
    )
    .await;
    let (join, ok) = run_job(
        sched,
        &cluster.ctx,
        "SELECT a.k, count(*) FROM t a JOIN t b ON a.k = b.k GROUP BY a.k",
    )
    .await;
    assert_eq!(ok, Ok(100));
    for id in [&agg, &failed, &join] {
        completed_log(&cluster.logs, id).await;
    }

    // Tasks: one row per TaskEnd record, per job.
    let lines = task_lines(&cluster.logs);
    assert_eq!(lines.len(), 3);
    let per_job = sql(
        sched,
        "SELECT job_id, count(*) AS n FROM tasks GROUP BY job_id ORDER BY job_id",
    )
    .await;
    let got: std::collections::BTreeMap<String, i64> = per_job
        .iter()
        .map(|r| {
            (
                r["job_id"].as_str().unwrap().to_string(),
                r["n"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, lines);
    // Its plan names the segments it reads, never a path of the server's.
    let plan = sql(
        sched,
        "EXPLAIN SELECT job_id, count(*) AS n FROM tasks GROUP BY job_id",
    )
    .await;
    let plan = serde_json::to_string(&plan).unwrap();
    assert!(plan.contains("[tasks/seg-"), "{plan}");
    let tmp = cluster.tmp.path().to_string_lossy().to_string();
    assert!(!plan.contains(&tmp), "{plan}");
    // Stages: one row per stage of the scheduler's own answer.
    for id in [&agg, &join] {
        let stages = get_json(&sched.url(&format!("/api/job/{id}/stages"))).await;
        let n = stages["stages"].as_array().unwrap().len() as i64;
        assert_eq!(
            number(
                sched,
                &format!("SELECT count(*) FROM stages WHERE job_id = '{id}'")
            )
            .await,
            n,
            "{id}"
        );
        // Each stage's successful task count is the scheduler's.
        for s in stages["stages"].as_array().unwrap() {
            let stage = s["stage_id"].as_str().unwrap();
            let tasks = s["tasks"].as_array().unwrap().len() as i64;
            assert_eq!(
                number(
                    sched,
                    &format!(
                        "SELECT tasks FROM stages WHERE job_id = '{id}' AND stage_id = {stage}"
                    )
                )
                .await,
                tasks
            );
        }
    }
    // Jobs: the list's jobs, with their status words.
    let listed = get_json(&sched.url("/api/jobs")).await;
    let listed = listed.as_array().unwrap();
    let rows = sql(
        sched,
        "SELECT job_id, status, error_message, tasks FROM jobs ORDER BY job_id",
    )
    .await;
    assert_eq!(rows.len(), listed.len());
    for job in listed {
        let id = job["job_id"].as_str().unwrap();
        let row = rows.iter().find(|r| r["job_id"] == id).unwrap();
        assert_eq!(row["status"], job["status"], "{id}");
        assert_eq!(row["tasks"].as_i64(), lines.get(id).copied(), "{id}");
    }
    let failed_row = rows
        .iter()
        .find(|r| r["job_id"] == failed.as_str())
        .unwrap();
    assert!(
        failed_row["error_message"]
            .as_str()
            .unwrap()
            .contains("Cannot cast"),
        "{failed_row}"
    );
    assert_eq!(
        number(
            sched,
            "SELECT count(*) FROM jobs WHERE error_message IS NOT NULL"
        )
        .await,
        1
    );
    // Operators: a row group per plan line that carries metrics.
    let metrics = get_json(&sched.url(&format!("/api/job/{agg}/stages?plan_format=metrics"))).await;
    let with_metrics = metrics["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["stage_plan"]
                .as_str()
                .unwrap()
                .lines()
                .filter(|l| l.contains("metrics=[") && !l.contains("metrics=[]"))
                .count() as i64
        })
        .sum::<i64>();
    assert!(with_metrics > 0);
    assert_eq!(
        number(
            sched,
            &format!(
                "SELECT count(*) FROM (SELECT DISTINCT stage_id, position FROM operators \
                 WHERE job_id = '{agg}')"
            )
        )
        .await,
        with_metrics
    );
    // Types as documented.
    let types = sql(
        sched,
        "SELECT arrow_typeof(start_time) AS ts, arrow_typeof(duration_ms) AS d, \
         arrow_typeof(stage_id) AS s FROM tasks LIMIT 1",
    )
    .await;
    assert_eq!(types[0]["d"], "Int64");
    assert_eq!(types[0]["s"], "UInt32");
    assert!(
        types[0]["ts"].as_str().unwrap().contains("UTC"),
        "{types:?}"
    );

    // The same answer as CSV and as an Arrow stream.
    let query = "SELECT job_id, stage_id, partition, duration_ms FROM tasks ORDER BY 1, 2, 3";
    let json = sql(sched, query).await;
    let (status, csv) = sql_raw(sched, query, "text/csv").await;
    assert_eq!(status, 200);
    assert_eq!(
        csv.lines().next().unwrap(),
        "job_id,stage_id,partition,duration_ms"
    );
    assert_eq!(csv.lines().count(), json.len() + 1);
    let r = http_client()
        .post(sched.url("/api/sql"))
        .header("accept", "application/vnd.apache.arrow.stream")
        .header("content-type", "application/sql")
        .body(query)
        .send()
        .await
        .unwrap();
    let bytes = r.bytes().await.unwrap();
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, json.len());

    // The SQL page: the same engine and refusals, an answer as CSV.
    let (code, _, page) = get(&sched.url("/ui/sql?q=DROP%20TABLE%20jobs")).await;
    assert_eq!(code, 400);
    assert!(String::from_utf8_lossy(&page).contains("DDL not supported"));
    let (code, ct, csv) =
        get(&sched.url("/ui/sql.csv?q=SELECT%20count(*)%20AS%20n%20FROM%20jobs")).await;
    assert_eq!((code, ct.as_str()), (200, "text/csv; charset=utf-8"));
    assert_eq!(
        String::from_utf8_lossy(&csv),
        format!("n\n{}\n", listed.len())
    );

    // Every question of docs/sql.md runs against these jobs, and the
    // questions that count tasks or jobs agree with counts made from the
    // logs' lines and the job list.
    let questions = documented_questions();
    assert!(questions.len() >= 10, "{}", questions.len());
    let all_tasks: i64 = lines.values().sum();
    let failed_tasks = failed_task_lines(&cluster.logs);
    assert!(failed_tasks > 0, "the failing job's attempts");
    let failed_jobs = listed.iter().filter(|j| j["status"] == "Failed").count() as i64;
    let mut checked = 0;
    for q in &questions {
        let (status, body) = sql_raw(sched, q, "application/json").await;
        assert_eq!(status, 200, "{q}\n{body}");
        let rows: Vec<serde_json::Map<String, serde_json::Value>> =
            serde_json::from_str(&body).unwrap();
        let columns: Vec<&str> = rows
            .first()
            .map(|r| r.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let sum = |column: &str| {
            rows.iter()
                .map(|r| r[column].as_i64().unwrap_or(0))
                .sum::<i64>()
        };
        let has = |names: &[&str]| names.iter().all(|n| columns.contains(n));
        if has(&["executor", "attempts", "failed"]) {
            assert_eq!(
                (sum("attempts"), sum("failed")),
                (all_tasks, failed_tasks),
                "{q}"
            );
            checked += 1;
        } else if has(&["failure_reason", "attempts"]) {
            assert_eq!(sum("attempts"), failed_tasks, "{q}");
            checked += 1;
        } else if has(&["day", "jobs", "failed"]) {
            assert_eq!(
                (sum("jobs"), sum("failed")),
                (listed.len() as i64, failed_jobs),
                "{q}"
            );
            checked += 1;
        } else if has(&["executor", "hour", "tasks"]) && rows.len() < 20 {
            assert_eq!(sum("tasks"), all_tasks, "{q}");
            checked += 1;
        } else if has(&["job_id", "status", "duration_ms"]) {
            for row in &rows {
                let job = listed
                    .iter()
                    .find(|j| j["job_id"] == row["job_id"])
                    .unwrap();
                assert_eq!(row["status"], job["status"], "{q}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 5, "the counting questions were all found");
    cluster.sched.terminate();
}

/// Once SQL is in use, a recording scheduler adds each job that completes
/// from the records its writer kept, without reading the log again; those
/// rows equal, table by table, the rows rebuilt from the logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_completed_while_sql_is_in_use_are_added_from_the_writers_records() {
    let mut cluster = Cluster::start(&[]).await;
    let sched = &cluster.sched;
    let counters = || async {
        let text = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
        [
            "ballista_job_history_columnar_logs_read_total",
            "ballista_job_history_columnar_jobs_from_writer_total",
        ]
        .map(|name| counter(&text, name))
    };
    let (first, ok) = run_job(sched, &cluster.ctx, "SELECT sum(v) FROM t").await;
    assert_eq!(ok, Ok(1));
    completed_log(&cluster.logs, &first).await;
    assert!(number(sched, "SELECT count(*) FROM stages").await > 0);
    assert_eq!(
        counters().await,
        [1, 0],
        "the job before SQL: read from its log"
    );

    let (agg, failed) =
        grouped_and_failed(&cluster, "SELECT k, count(*) FROM t GROUP BY k ORDER BY k").await;
    for id in [&agg, &failed] {
        completed_log(&cluster.logs, id).await;
    }
    let per_job = "SELECT job_id, count(*) AS n FROM tasks GROUP BY job_id ORDER BY job_id";
    let got: std::collections::BTreeMap<String, i64> = sql(sched, per_job)
        .await
        .iter()
        .map(|r| {
            (
                r["job_id"].as_str().unwrap().to_string(),
                r["n"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, task_lines(&cluster.logs));
    assert_eq!(
        counters().await,
        [1, 2],
        "the two later jobs: from the writer's records"
    );
    let ids = format!("('{agg}', '{failed}')");
    let queries = [
        format!(
            "SELECT * FROM tasks WHERE job_id IN {ids} ORDER BY job_id, stage_id, partition, attempt"
        ),
        format!("SELECT * FROM stages WHERE job_id IN {ids} ORDER BY job_id, stage_id"),
        format!(
            "SELECT * FROM operators WHERE job_id IN {ids} \
             ORDER BY job_id, stage_id, position, metric"
        ),
        format!("SELECT * FROM jobs WHERE job_id IN {ids} ORDER BY job_id"),
    ];
    let mut from_writer = Vec::new();
    for q in &queries {
        from_writer.push(sql(sched, q).await);
    }
    assert!(
        from_writer[2].iter().any(|r| r["job_id"] == agg.as_str()),
        "operators recorded"
    );
    assert!(
        from_writer[0]
            .iter()
            .any(|r| r["job_id"] == failed.as_str() && r["status"] == "Failed"),
        "the failed task"
    );
    // The same rows, from the logs.
    std::fs::remove_dir_all(cluster.logs.join(".ballista-job-history.columnar")).unwrap();
    for (q, want) in queries.iter().zip(&from_writer) {
        assert_eq!(&sql(sched, q).await, want, "{q}");
    }
    assert_eq!(counters().await, [4, 2], "rebuilt from the three logs");
    cluster.sched.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_sql_is_refused_or_stopped_and_the_server_stays_healthy() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(
        tmp.path(),
        &[
            "--sql-timeout-seconds",
            "2",
            "--sql-memory-limit",
            "32MiB",
            "--sql-max-rows",
            "5",
        ],
    );
    server.wait_healthy().await;
    let deep = format!("SELECT {}1{}", "(".repeat(5000), ")".repeat(5000));
    for (query, says) in [
        ("DROP TABLE jobs", "DDL not supported"),
        ("CREATE TABLE x AS SELECT 1", "DDL not supported"),
        (
            "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/etc/'",
            "DDL not supported",
        ),
        ("CREATE VIEW v AS SELECT 1", "DDL not supported"),
        ("INSERT INTO jobs SELECT * FROM jobs", "DML not supported"),
        ("DELETE FROM jobs", "DML not supported"),
        ("COPY (SELECT 1) TO '/tmp/out.csv'", "DML not supported"),
        ("SET datafusion.execution.batch_size = 1", "not supported"),
        ("SELECT * FROM '/etc/passwd'", "not found"),
        ("SELECT * FROM other.public.jobs", "not found"),
        ("SELECT * FROM nope", "not found"),
        (&deep, "RecursionLimitExceeded"),
        (
            "SELECT count(*) FROM generate_series(1, 1000000000) a \
             CROSS JOIN generate_series(1, 1000000000) b",
            "stopped after 2 s",
        ),
        (
            "SELECT array_agg(value ORDER BY value) FROM generate_series(1, 100000000)",
            "Resources exhausted",
        ),
        ("", "request body"),
    ] {
        let (status, body) = sql_raw(&server, query, "application/json").await;
        assert_eq!(status, 400, "{}: {body}", &query[..query.len().min(80)]);
        assert!(
            body.contains(says),
            "{}: {body}",
            &query[..query.len().min(80)]
        );
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["http_code"], 400);
    }
    // Nothing was written, and the server answers as before.
    assert!(!Path::new("/tmp/out.csv").exists());
    assert_eq!(get(&server.url("/healthz")).await.0, 200);
    assert_eq!(number(&server, "SELECT count(*) FROM jobs").await, 6);
    // The row limit cuts and says so.
    let r = http_client()
        .post(server.url("/api/sql"))
        .header("content-type", "application/sql")
        .body("SELECT * FROM generate_series(1, 100)")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-ballista-sql-truncated"], "5");
    let rows: Vec<Value> = r.json().await.unwrap();
    assert_eq!(rows.len(), 5);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_and_damage_leave_the_tables_as_the_logs_are() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &["--update-interval-seconds", "1"]);
    server.wait_healthy().await;
    let all = "SELECT job_id, count(*) AS n, sum(duration_ms) AS d FROM tasks GROUP BY job_id \
               ORDER BY job_id";
    let before = sql(&server, all).await;
    let lines = task_lines(tmp.path());
    assert_eq!(
        before.iter().map(|r| r["n"].as_i64().unwrap()).sum::<i64>(),
        lines.values().sum::<i64>()
    );
    // A damaged file: the next query reads the logs again, same answer.
    let columnar = tmp.path().join(".ballista-job-history.columnar");
    let damaged: Vec<_> = std::fs::read_dir(columnar.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(damaged.len(), 1);
    std::fs::write(&damaged[0], b"PAR1 not parquet").unwrap();
    assert_eq!(sql(&server, all).await, before);
    // A missing folder: rebuilt. (The server may be writing into it as it
    // is removed: a file made meanwhile leaves it not empty, once more.)
    for attempt in 0.. {
        match std::fs::remove_dir_all(&columnar) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty && attempt < 100 => {}
            Err(e) => panic!("removing the columnar folder: {e}"),
        }
    }
    assert_eq!(sql(&server, all).await, before);
    // A job deleted (as retention deletes it) leaves every table, the
    // `jobs` rows kept since the last query too.
    let gone = "038HEXYE9M000";
    let jobs = "SELECT count(*) FROM jobs";
    let listed = get_json(&server.url("/api/jobs")).await;
    let listed = listed.as_array().unwrap().len() as i64;
    assert_eq!(number(&server, jobs).await, listed);
    assert_eq!(
        number(
            &server,
            &format!("SELECT count(*) FROM jobs WHERE job_id = '{gone}'")
        )
        .await,
        1
    );
    std::fs::remove_file(tmp.path().join(format!("{gone}.eventlog"))).unwrap();
    eventually("the job leaves the list", || async {
        get_json(&server.url("/api/jobs"))
            .await
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["job_id"] != gone)
    })
    .await;
    for table in ["jobs", "stages", "tasks", "operators"] {
        assert_eq!(
            number(
                &server,
                &format!("SELECT count(*) FROM {table} WHERE job_id = '{gone}'")
            )
            .await,
            0,
            "{table}"
        );
    }
    assert_eq!(number(&server, jobs).await, listed - 1);
    let after = sql(&server, all).await;
    let expected: Vec<Value> = before.into_iter().filter(|r| r["job_id"] != gone).collect();
    assert_eq!(after, expected);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ballista_cluster_answers_the_export_as_the_server_does() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    crate::history::copy_fixtures(&logs);
    let out = tmp.path().join("export");
    // The export listens on no port: it runs while its port is taken (as
    // beside a running scheduler).
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args(["--history-only", "--bind-port", &port, "--event-log-dir"])
        .arg(&logs)
        .arg("--export-parquet")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    drop(taken);
    for table in ["jobs", "stages", "tasks", "operators"] {
        assert!(
            out.join(table).join("part-00000.parquet").exists(),
            "{table}"
        );
    }
    let mut server = Proc::history(&logs, &[]);
    server.wait_healthy().await;
    // A real cluster reads the export.
    let cluster = Cluster::start(&[]).await;
    for table in ["jobs", "stages", "tasks", "operators"] {
        cluster
            .ctx
            .sql(&format!(
                "CREATE EXTERNAL TABLE {table} STORED AS PARQUET LOCATION '{}/'",
                out.join(table).display()
            ))
            .await
            .unwrap();
    }
    for query in [
        "SELECT executor, count(*) AS n, sum(duration_ms) AS d FROM tasks GROUP BY executor \
         ORDER BY executor",
        "SELECT job_id, status, tasks FROM jobs ORDER BY job_id",
        "SELECT job_id, stage_id, tasks, task_duration_p50_ms FROM stages ORDER BY 1, 2",
    ] {
        let batches = cluster
            .ctx
            .sql(query)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let mut json = Vec::new();
        {
            let mut w = datafusion::arrow::json::ArrayWriter::new(&mut json);
            for b in &batches {
                w.write(b).unwrap();
            }
            w.finish().unwrap();
        }
        let ballista: Vec<Value> = if json.is_empty() {
            Vec::new()
        } else {
            serde_json::from_slice(&json).unwrap()
        };
        assert!(!ballista.is_empty(), "{query}");
        assert_eq!(ballista, sql(&server, query).await, "{query}");
    }
    server.terminate();
}

/// The `whatif` table: each recurring query's newest completed run,
/// replayed on its own shape and others. Checked against the list (which
/// runs are the newest of their query, and how long they took) and
/// against `GET /api/job/{id}/whatif` at each row's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_whatif_tables_hold_each_querys_newest_run_and_its_graded_pairs_as_the_routes_do() {
    let cluster = Cluster::start(&[]).await;
    let sched = &cluster.sched;
    let mut runs = Vec::new();
    for q in [
        "SELECT k, count(*) FROM t GROUP BY k ORDER BY k",
        "SELECT sum(v) FROM t",
        "SELECT k, count(*) FROM t GROUP BY k ORDER BY k",
    ] {
        let (job_id, result) = run_job(sched, &cluster.ctx, q).await;
        assert!(result.is_ok(), "{q}: {result:?}");
        indexed_log(sched, &cluster.logs, &job_id).await;
        runs.push(job_id);
    }
    // The `jobs` table (the columnar history, another path): each run's
    // query hash and duration.
    let jobs = sql(sched, "SELECT job_id, query_hash, duration_ms FROM jobs").await;
    let entry = |id: &str| -> Value {
        jobs.iter()
            .find(|j| j["job_id"] == id)
            .unwrap_or_else(|| panic!("{id} in jobs: {jobs:?}"))
            .clone()
    };
    let hash = |id: &str| entry(id)["query_hash"].as_str().unwrap().to_string();
    assert_eq!(hash(&runs[0]), hash(&runs[2]), "the grouping ran twice");
    assert_ne!(hash(&runs[0]), hash(&runs[1]));

    let rows = sql(
        sched,
        "SELECT * FROM whatif ORDER BY query_hash, executors, slots",
    )
    .await;
    let newest: std::collections::BTreeMap<String, String> = rows
        .iter()
        .map(|r| {
            (
                r["query_hash"].as_str().unwrap().to_string(),
                r["job_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = std::collections::BTreeMap::from([
        (hash(&runs[1]), runs[1].clone()),
        (hash(&runs[2]), runs[2].clone()),
    ]);
    assert_eq!(newest, expected, "one query, its newest run: {rows:?}");
    for r in &rows {
        let id = r["job_id"].as_str().unwrap();
        assert_eq!(r["observed_ms"], entry(id)["duration_ms"], "{r}");
        let (e, s) = (
            r["executors"].as_u64().unwrap(),
            r["slots"].as_u64().unwrap(),
        );
        let route =
            get_json(&sched.url(&format!("/api/job/{id}/whatif?executors={e}&slots={s}"))).await;
        for field in [
            "predicted_ms",
            "replayed_ms",
            "critical_path_ms",
            "ideal_ms",
        ] {
            assert_eq!(r[field], route[field], "{field} of {id} at {e}x{s}");
        }
    }
    // Each run on its own shape and four others (one executor, 2 slots).
    assert_eq!(rows.len(), 2 * 4, "{rows:?}");

    // The question the table is for, in one query.
    let gains = sql(
        sched,
        "SELECT query_label, observed_ms - predicted_ms AS saving_ms\nFROM whatif\n\
         WHERE executors = observed_executors + 2 AND slots = observed_slots\n\
         ORDER BY saving_ms DESC",
    )
    .await;
    assert_eq!(gains.len(), 2, "{gains:?}");

    // The pairs the history grades itself on: the grouping's two runs,
    // as the accuracy route grades them.
    let pairs = sql(sched, "SELECT * FROM whatif_pairs").await;
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    let p = &pairs[0];
    assert_eq!(p["earlier_job_id"].as_str(), Some(runs[0].as_str()));
    assert_eq!(p["later_job_id"].as_str(), Some(runs[2].as_str()));
    assert_eq!(p["actual_ms"], entry(&runs[2])["duration_ms"]);
    assert_eq!(p["naive_ms"], entry(&runs[0])["duration_ms"]);
    let graded = get_json(&sched.url("/api/whatif/accuracy")).await;
    let route = &graded["pairs"][0];
    assert_eq!(p["predicted_ms"], route["predicted_ms"], "{graded}");
    let kind = if route["shape_a"] == route["shape_b"] {
        "same shape"
    } else {
        "executors"
    };
    assert_eq!(p["kind"].as_str(), Some(kind), "{p}");
    let want = (p["predicted_ms"].as_f64().unwrap() - p["actual_ms"].as_f64().unwrap()).abs()
        / p["actual_ms"].as_f64().unwrap().max(1.0);
    assert!((p["error"].as_f64().unwrap() - want).abs() < 1e-9, "{p}");
    // The documented question over the pairs.
    let worst = sql(
        sched,
        "SELECT query_label, kind, count(*) AS pairs, median(error) AS error,\n       \
         median(naive_error) AS naive_error\n\
         FROM whatif_pairs GROUP BY query_label, kind ORDER BY error DESC",
    )
    .await;
    assert_eq!(worst.len(), 1, "{worst:?}");
    assert_eq!(worst[0]["pairs"], 1);

    // A run whose log is gone once listed is left out, not the answer.
    let (gone, result) = run_job(sched, &cluster.ctx, "SELECT max(v) FROM t").await;
    assert!(result.is_ok(), "{result:?}");
    completed_log(&cluster.logs, &gone).await;
    assert!(
        sql(sched, "SELECT job_id FROM jobs")
            .await
            .iter()
            .any(|j| j["job_id"] == *gone),
        "{gone} listed before its log goes"
    );
    std::fs::remove_file(cluster.logs.join(format!("{gone}.eventlog"))).unwrap();
    let left = sql(sched, "SELECT DISTINCT job_id FROM whatif ORDER BY job_id").await;
    let mut kept = vec![runs[1].clone(), runs[2].clone()];
    kept.sort();
    let left: Vec<&str> = left.iter().map(|r| r["job_id"].as_str().unwrap()).collect();
    assert_eq!(left, kept);
}

/// A server started where an earlier run's SQL named `jobs` builds that
/// table's base in the background: the first query after the restart
/// builds no row and answers as the first run did. The oracle for the
/// rows: the completed logs in the folder, one row each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_restart_the_jobs_table_is_built_before_a_query_asks() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let logs = (std::fs::read_dir(tmp.path()).unwrap())
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_str().unwrap().ends_with(".eventlog")
        })
        .count() as u64;
    let built = |server: &Proc| {
        let url = server.url("/api/metrics");
        async move {
            let text = String::from_utf8(get(&url).await.2).unwrap();
            counter(&text, "ballista_job_history_sql_jobs_rows_built_total")
        }
    };
    let question = "SELECT job_id, status, tasks FROM jobs ORDER BY job_id";
    let flags = ["--update-interval-seconds", "1"];
    let mut first = Proc::history(tmp.path(), &flags);
    first.wait_healthy().await;
    assert_eq!(built(&first).await, 0, "nothing built before a query");
    let before = sql(&first, question).await;
    assert_eq!(before.len() as u64, logs);
    assert_eq!(built(&first).await, logs, "the first query built every row");
    assert!(first.terminate().success());

    let mut again = Proc::history(tmp.path(), &flags);
    again.wait_healthy().await;
    eventually("the background built the base", || async {
        built(&again).await == logs
    })
    .await;
    assert_eq!(sql(&again, question).await, before);
    assert_eq!(built(&again).await, logs, "the query built no row");
    again.terminate();
}
