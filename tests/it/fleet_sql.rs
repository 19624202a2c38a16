//! SQL on the cluster engine (`{"engine": "cluster"}`): the same questions
//! answered by a worker process and by a Ballista job on a real
//! scheduler's real executor, the job recorded and marked as the
//! history's own, and hostile queries refused or stopped (the job
//! cancelled) as on the local engine.

use crate::harness::*;
use serde_json::{Value, json};

/// `sql` on `engine`: the status and the body.
async fn ask(proc: &Proc, sql: &str, engine: Option<&str>) -> (u16, String) {
    let mut body = json!({ "sql": sql });
    if let Some(engine) = engine {
        body["engine"] = json!(engine);
    }
    let r = http_client()
        .post(proc.url("/api/sql"))
        .header("content-type", "application/json")
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The rows of a 200 answer.
async fn rows(proc: &Proc, sql: &str, engine: Option<&str>) -> Vec<Value> {
    let (status, body) = ask(proc, sql, engine).await;
    assert_eq!(status, 200, "{engine:?} {sql}: {body}");
    serde_json::from_str::<Vec<Value>>(&body).unwrap()
}

/// Questions over every table the logs fill, with exact answers (integers
/// and text, no sums of floats whose order could differ).
const QUESTIONS: &[&str] = &[
    "SELECT job_id, status, tasks, failed_tasks FROM jobs \
     WHERE job_name NOT LIKE 'history SQL%' ORDER BY job_id",
    "SELECT job_id, count(*) AS n, sum(output_rows) AS r FROM tasks GROUP BY job_id ORDER BY job_id",
    "SELECT s.job_id, count(DISTINCT s.stage_id) AS stages, count(t.partition) AS tasks \
     FROM stages s JOIN tasks t ON s.job_id = t.job_id AND s.stage_id = t.stage_id \
     GROUP BY s.job_id ORDER BY s.job_id",
    "SELECT count(*) AS n FROM operators",
    "SELECT count(*) AS n FROM usage",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cluster_engine_answers_as_the_local_one_and_its_jobs_are_recorded_and_marked() {
    let mut cluster = Cluster::start(&["--sql-timeout-seconds", "20"]).await;
    let sched = &cluster.sched;
    let mut ours = Vec::new();
    for q in [
        "SELECT k, count(*), sum(v) FROM t GROUP BY k",
        "SELECT a.k, count(*) FROM t a JOIN t b ON a.k = b.k GROUP BY a.k",
    ] {
        let (id, ok) = run_job(sched, &cluster.ctx, q).await;
        assert_eq!(ok, Ok(100), "{q}");
        indexed_log(sched, &cluster.logs, &id).await;
        ours.push(id);
    }
    let before = job_ids(sched).await;

    // Each question: the same rows on both engines.
    let mut asked = 0;
    for q in QUESTIONS {
        let local = rows(sched, q, Some("local")).await;
        let remote = rows(sched, q, Some("cluster")).await;
        asked += 1;
        assert_eq!(local, remote, "{q}");
        assert!(!local.is_empty(), "{q}");
    }
    // The first question's answer is the two jobs the test ran.
    let listed: Vec<String> = rows(sched, QUESTIONS[0], None)
        .await
        .iter()
        .map(|r| r["job_id"].as_str().unwrap().to_string())
        .collect();
    let mut want = ours.clone();
    want.sort();
    assert_eq!(listed, want);

    // Each cluster query was a job of this scheduler's, named as the
    // history's own, completed, its tasks recorded like any job's.
    let jobs = get_json(&sched.url("/api/jobs")).await;
    let new: Vec<&Value> = jobs
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| !before.contains(&j["job_id"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(new.len(), asked, "one job per cluster query: {new:?}");
    for job in &new {
        let name = job["job_name"].as_str().unwrap();
        assert!(name.starts_with("history SQL: SELECT"), "{name}");
        assert_eq!(job["status"], "Completed", "{job}");
        let id = job["job_id"].as_str().unwrap();
        let lines = indexed_log(sched, &cluster.logs, id).await;
        assert!(kinds(&lines).iter().any(|k| k == "TaskEnd"), "{id}");
    }
    // They are in the history: the SQL tables list them by name, on
    // both engines. The table built when it was first asked stays: the
    // jobs completed since are a second file, their rows in the first
    // left out (on the cluster, a filter its plan carries), so no more
    // rows are built than those jobs, fewer than every job.
    let built = || async {
        let text = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
        counter(&text, "ballista_job_history_sql_jobs_rows_built_total")
    };
    let before_built = built().await;
    let marked = "SELECT count(*) AS n FROM jobs WHERE job_name LIKE 'history SQL: %'";
    assert_eq!(rows(sched, marked, None).await[0]["n"], asked);
    assert_eq!(rows(sched, marked, Some("cluster")).await[0]["n"], asked);
    let rebuilt = built().await - before_built;
    // (Built whole: a row for each of the test's jobs too.)
    assert!(
        rebuilt <= asked as u64,
        "{rebuilt} rows built for {asked} jobs changed"
    );
    // Sorted, after more jobs changed it, each job once (a union of the
    // base and the other files, split over a Ballista job's tasks, gave
    // the base's rows twice here).
    let remote = rows(sched, QUESTIONS[0], Some("cluster")).await;
    assert_eq!(remote.len(), ours.len(), "{remote:?}");
    assert_eq!(remote, rows(sched, QUESTIONS[0], Some("local")).await);

    // The SQL page offers the choice, and runs on the cluster when asked.
    let before = job_ids(sched).await.len();
    let (code, _, page) =
        get(&sched.url("/ui/sql?q=SELECT%20count(*)%20AS%20n%20FROM%20operators&engine=cluster"))
            .await;
    let page = String::from_utf8_lossy(&page);
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains(r#"<option value="cluster" selected>"#),
        "{page}"
    );
    assert!(
        page.contains("engine=cluster"),
        "the CSV link keeps the engine"
    );
    let listed = job_ids(sched).await.len();
    assert_eq!(
        listed,
        before + 1,
        "the page's query was a job of the cluster"
    );
    cluster.sched.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_sql_on_the_cluster_is_refused_or_stopped_and_its_job_cancelled() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let limits = ["--sql-timeout-seconds", "6", "--sql-max-rows", "5"];
    let mut sched = Proc::scheduler(&logs, &limits);
    sched.wait_healthy().await;

    // A query that would never end: with no executor yet, its job waits
    // in the scheduler's queue forever (and were one there, an eight-way
    // cross join would run for hours). It is stopped at the time limit
    // and its job cancelled. (A sum, not a count: a count of a cross join
    // is answered from the tables' statistics without running it.)
    let endless = "SELECT sum(a.partition + b.partition + c.partition + d.partition + e.partition \
                   + f.partition + g.partition + h.partition) FROM tasks a, tasks b, tasks c, \
                   tasks d, tasks e, tasks f, tasks g, tasks h";
    let (status, body) = ask(&sched, endless, Some("cluster")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("time limit") && body.contains("was cancelled"),
        "{body}"
    );
    let stopped = wait_for("the endless job is listed as ended", || async {
        let jobs = get_json(&sched.url("/api/jobs")).await;
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|j| {
                j["job_name"].as_str().unwrap().contains("sum(a.partition")
                    && j["status"] != "Running"
                    && j["status"] != "Queued"
            })
            .cloned()
    })
    .await;
    let id = stopped["job_id"].as_str().unwrap();
    assert!(body.contains(id), "the answer names the job: {body}");
    let end = job_end(&completed_log(&logs, id).await);
    assert_eq!(end["status"], "Cancelled", "{end:?}");

    // With an executor and a job of its own: the read-only rules are the
    // local engine's.
    start_executor(sched.port).await;
    let data = write_csv(tmp.path(), "t.csv", 2000);
    let ctx = client(sched.port, &data).await;
    let (id, ok) = run_job(&sched, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
    assert_eq!(ok, Ok(100));
    indexed_log(&sched, &logs, &id).await;
    for (query, says) in [
        ("DROP TABLE jobs", "DDL not supported"),
        (
            "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/etc/'",
            "DDL not supported",
        ),
        ("INSERT INTO jobs SELECT * FROM jobs", "DML not supported"),
        (
            "COPY (SELECT 1) TO '/tmp/out-cluster.csv'",
            "DML not supported",
        ),
        ("SET datafusion.execution.batch_size = 1", "not supported"),
        ("SELECT * FROM '/etc/passwd'", "not found"),
        ("SELECT * FROM t", "not found"),
    ] {
        let (status, body) = ask(&sched, query, Some("cluster")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(says), "{query}: {body}");
    }
    assert!(!std::path::Path::new("/tmp/out-cluster.csv").exists());
    // The row limit cuts the cluster's answer too.
    let r = http_client()
        .post(sched.url("/api/sql"))
        .json(&json!({"sql": "SELECT * FROM tasks", "engine": "cluster"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-ballista-sql-truncated"], "5");
    assert_eq!(r.json::<Vec<Value>>().await.unwrap().len(), 5);
    // The cluster answers the next query; nothing of the queries' staged
    // tables is left behind.
    // (Its own jobs join the history as it answers: ask of the test's.)
    let q = format!("SELECT count(*) AS n FROM tasks WHERE job_id = '{id}'");
    let tasks = crate::sql::task_lines(&logs)[&id];
    assert_eq!(
        rows(&sched, &q, Some("cluster")).await,
        vec![json!({"n": tasks})]
    );
    let staged = logs.join(".ballista-job-history.columnar/cluster-queries");
    assert_eq!(std::fs::read_dir(&staged).unwrap().count(), 0, "{staged:?}");
    assert_eq!(get(&sched.url("/healthz")).await.0, 200);
    sched.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_history_server_runs_sql_on_the_cluster_it_is_pointed_at_and_none_without() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    // Without a cluster: the cluster engine is refused, the default is
    // refused at startup.
    let mut alone = Proc::history(tmp.path(), &[]);
    alone.wait_healthy().await;
    let (status, body) = ask(&alone, "SELECT 1", Some("cluster")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("--sql-cluster"), "{body}");
    let (status, body) = ask(&alone, "SELECT 1", Some("gpu")).await;
    assert_eq!(status, 400, "{body}");
    alone.terminate();
    let dir = tmp.path().to_str().unwrap();
    let port = free_port().to_string();
    for (flags, says) in [
        (["--sql-engine", "cluster"], "--sql-cluster"),
        (["--sql-cluster", "s3://x/y"], "df://host:port"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
            .args([
                "--bind-port",
                &port,
                "--history-only",
                "--event-log-dir",
                dir,
            ])
            .args(flags)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flags:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(says), "{flags:?}: {said}");
    }

    // Pointed at a plain scheduler with an executor: its default engine
    // the cluster, upstream's logs answered as the local engine answers.
    let mut plain = Proc::spawn(&["--scheduler-policy", "pull-staged"]);
    plain.wait_healthy().await;
    start_executor(plain.port).await;
    let target = format!("df://127.0.0.1:{}", plain.port);
    let mut server = Proc::history(
        tmp.path(),
        &["--sql-cluster", &target, "--sql-engine", "cluster"],
    );
    server.wait_healthy().await;
    let q = "SELECT job_id, count(*) AS n FROM tasks GROUP BY job_id ORDER BY job_id";
    let local = rows(&server, q, Some("local")).await;
    // The logs' own task records, counted line by line.
    let want: Vec<Value> = crate::sql::task_lines(tmp.path())
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(id, n)| json!({"job_id": id, "n": n}))
        .collect();
    assert_eq!(local, want);
    assert_eq!(rows(&server, q, None).await, local);
    // The plain scheduler ran it: its own job list has the job.
    let names: Vec<String> = get_json(&plain.url("/api/jobs"))
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("history SQL: SELECT job_id")),
        "{names:?}"
    );
    server.terminate();
    plain.terminate();
}
