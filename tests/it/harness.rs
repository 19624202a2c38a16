//! Real components for the integration tests: our `ballista-scheduler`
//! binary as a process, an in-process executor from the `ballista-executor`
//! crate, the `ballista` client, and HTTP over TCP.

use ballista::prelude::*;
use ballista_core::serde::BallistaCodec;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{CsvReadOptions, SessionConfig, SessionContext};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long any wait for the system under test may take before the test
/// fails. Generous: CI machines are slow, and a wait ends as soon as its
/// condition holds.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How long [`run_job`] waits for a query's answer.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(180);

/// Held for writing by the test that loads the machine most (the TPC-H
/// run) and for reading by the tests that time the server's answers, so
/// that a timing test measures its server and not a neighbour's load.
pub static HEAVY: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Our binary, running as a child process; killed on drop.
pub struct Proc {
    child: Child,
    /// The port it serves on.
    pub port: u16,
}

impl Proc {
    /// `ballista-scheduler` with `args`, on a fresh loopback port.
    pub fn spawn(args: &[&str]) -> Proc {
        Self::spawn_on(free_port(), args)
    }

    /// `ballista-scheduler` with `args`, on loopback `port`.
    pub fn spawn_on(port: u16, args: &[&str]) -> Proc {
        Self::spawn_logged(port, args, None)
    }

    /// The same, its log (stdout) written to `log` when given.
    pub fn spawn_logged(port: u16, args: &[&str], log: Option<&Path>) -> Proc {
        Self::spawn_wrapped(port, &[], args, log)
    }

    /// The same under a wrapper command (`wrapper` then the binary and its
    /// arguments), e.g. a tracer.
    pub fn spawn_wrapped(port: u16, wrapper: &[&str], args: &[&str], log: Option<&Path>) -> Proc {
        Self::spawn_full(port, wrapper, args, &[], log)
    }

    /// The same with more environment variables.
    pub fn spawn_full(
        port: u16,
        wrapper: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Proc {
        let port_s = port.to_string();
        let mut all = vec![
            "--bind-host",
            "127.0.0.1",
            "--external-host",
            "127.0.0.1",
            "--bind-port",
            &port_s,
        ];
        all.extend_from_slice(args);
        let binary = env!("CARGO_BIN_EXE_ballista-scheduler");
        let (program, before): (&str, &[&str]) = match wrapper.split_first() {
            Some((program, rest)) => (program, rest),
            None => (binary, &[]),
        };
        let child = Command::new(program)
            .args(before)
            .args(if wrapper.is_empty() {
                None
            } else {
                Some(binary)
            })
            .args(&all)
            .env(
                "RUST_LOG",
                std::env::var("TEST_SCHEDULER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("a log file")),
                None => Stdio::inherit(),
            })
            .spawn()
            .expect("the binary starts");
        Proc { child, port }
    }

    /// A process already started that serves on `port`.
    pub fn adopt(child: Child, port: u16) -> Proc {
        Proc { child, port }
    }

    /// A recording scheduler on `dir`, pull-staged (as the in-process
    /// executor polls for work).
    pub fn scheduler(dir: &Path, extra: &[&str]) -> Proc {
        Self::scheduler_on(free_port(), dir, extra)
    }

    /// The same on loopback `port` (a restart keeps its executors).
    pub fn scheduler_on(port: u16, dir: &Path, extra: &[&str]) -> Proc {
        let dir = dir.to_str().unwrap();
        let mut args = vec!["--event-log-dir", dir, "--scheduler-policy", "pull-staged"];
        args.extend_from_slice(extra);
        Proc::spawn_on(port, &args)
    }

    /// A history-only server on `dir`.
    pub fn history(dir: &Path, extra: &[&str]) -> Proc {
        let dir = dir.to_str().unwrap();
        let mut args = vec!["--history-only", "--event-log-dir", dir];
        args.extend_from_slice(extra);
        Proc::spawn(&args)
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Waits until `/healthz` answers.
    pub async fn wait_healthy(&mut self) {
        let client = http_client();
        eventually("the server answers /healthz", || {
            let client = client.clone();
            let url = self.url("/healthz");
            async move { matches!(client.get(url).send().await, Ok(r) if r.status().is_success()) }
        })
        .await;
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "the server exited"
        );
    }

    /// Waits until `/readyz` answers 200: for a history server, its first
    /// index pass is done, so every log in its directory is listed.
    pub async fn wait_ready(&mut self) {
        self.wait_healthy().await;
        let client = http_client();
        eventually("the server answers /readyz with 200", || {
            let client = client.clone();
            let url = self.url("/readyz");
            async move { matches!(client.get(url).send().await, Ok(r) if r.status().is_success()) }
        })
        .await;
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The peak resident memory so far, in KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            })
            .expect("the process's status")
    }

    /// Waits until the process has exited on its own.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("the process is reaped")
    }

    /// For a process started under a wrapper (strace): SIGTERM to the
    /// wrapped binary, the wrapper's child, then wait until the wrapper
    /// (which finishes writing first) exits.
    pub fn terminate_wrapped(&mut self) {
        let stopped = Command::new("pkill")
            .args(["-TERM", "-P", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(stopped.success());
        self.wait_exit();
    }

    /// Sends SIGTERM with procps' `kill` and returns at once.
    pub fn signal_term(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(
            sent.is_ok_and(|s| s.success()),
            "cannot send SIGTERM with `kill` (install procps)"
        );
    }

    /// Waits (up to [`DEADLINE`]) until the process exits on its own: its
    /// exit status.
    pub async fn exits(&mut self, what: &str) -> std::process::ExitStatus {
        let child = &mut self.child;
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < DEADLINE, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // `kill` is procps' (Debian: procps); without it the wait below
        // would block for ever, so its failure fails the test.
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        match sent {
            Ok(status) if status.success() => {}
            other => {
                self.kill();
                panic!("cannot send SIGTERM with `kill` (install procps): {other:?}");
            }
        }
        self.child.wait().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `condition` until it holds, failing the test after [`DEADLINE`].
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_for(what, || {
        let fut = condition();
        async move { fut.await.then_some(()) }
    })
    .await
}

/// Polls `probe` until it yields a value, failing the test after
/// [`DEADLINE`].
pub async fn wait_for<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting until {what}");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// The value of the Prometheus counter `name` in a `/api/metrics` answer
/// (0 when absent).
pub fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs the Python script `tests/it/<script>` with `job` as JSON on its
/// standard input and returns the JSON it prints; the script failing
/// fails the test with its standard error.
pub fn python_json(script: &str, job: &serde_json::Value) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it")
        .join(script);
    let mut child = Command::new("python3")
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), job).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A plain HTTP client.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A `GET`: status, content type, body.
pub async fn get(url: &str) -> (u16, String, Vec<u8>) {
    let r = http_client()
        .get(url)
        .send()
        .await
        .expect("the request is answered");
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ct, r.bytes().await.unwrap().to_vec())
}

/// A `GET` of JSON.
pub async fn get_json(url: &str) -> serde_json::Value {
    let (status, _, body) = get(url).await;
    assert_eq!(status, 200, "{url}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// The executable of the example `name` (`examples/<name>.rs`), built
/// beside this test binary (`cargo test` builds examples; built here
/// when it is not).
pub fn example_binary(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let debug = deps.parent().unwrap().parent().unwrap();
    let path = debug.join("examples").join(name);
    if !path.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "the example builds");
    }
    path
}

/// Starts an executor of the `ballista-executor` crate in this process,
/// registered with the scheduler on `port`, with 2 task slots.
pub async fn start_executor(port: u16) {
    start_executor_with(port, 2).await
}

/// [`start_executor`] with `slots` task slots.
pub async fn start_executor_with(port: u16, slots: usize) {
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    let client = loop {
        match SchedulerGrpcClient::connect(url.clone()).await {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    start.elapsed() < DEADLINE,
                    "cannot reach the scheduler: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    ballista_executor::new_standalone_executor(client, slots, BallistaCodec::default())
        .await
        .expect("the executor starts");
}

/// A `ballista` client session with Ballista's S3 options available (so
/// their credential keys can be set), and the test table `t` registered.
pub async fn client(port: u16, data: &Path) -> SessionContext {
    client_with(port, data, &[]).await
}

/// [`client`], with session config options set.
pub async fn client_with(port: u16, data: &Path, options: &[(&str, &str)]) -> SessionContext {
    let mut config: SessionConfig = ballista_core::object_store::session_config_with_s3_support();
    for (k, v) in options {
        config.options_mut().set(k, v).expect("a known config key");
    }
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .build();
    let ctx = SessionContext::remote_with_state(&format!("df://127.0.0.1:{port}"), state)
        .await
        .expect("the client connects");
    ctx.register_csv("t", data.to_str().unwrap(), CsvReadOptions::new())
        .await
        .unwrap();
    ctx
}

/// Writes the test table: `k` (0..100), `v` and a text column `s`.
pub fn write_csv(dir: &Path, name: &str, rows: usize) -> PathBuf {
    let mut text = String::from("k,v,s\n");
    for i in 0..rows {
        text.push_str(&format!("{},{},x{}\n", i % 100, i, i));
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Job ids the scheduler lists.
pub async fn job_ids(proc: &Proc) -> Vec<String> {
    job_ids_where(proc, "").await
}

/// The job ids of `/api/jobs?<query>`, in order.
pub async fn job_ids_where(proc: &Proc, query: &str) -> Vec<String> {
    get_json(&proc.url(&format!("/api/jobs?{query}")))
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_string())
        .collect()
}

/// Runs `sql` and returns the new job's id and whether the query succeeded.
pub async fn run_job(
    proc: &Proc,
    ctx: &SessionContext,
    sql: &str,
) -> (String, Result<usize, String>) {
    let before = job_ids(proc).await;
    let query = async {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok::<usize, datafusion::error::DataFusionError>(batches.iter().map(|b| b.num_rows()).sum())
    };
    // A job that never ends (a scheduler bug) fails the test that ran it
    // rather than the whole run's time limit.
    let result = match tokio::time::timeout(QUERY_DEADLINE, query).await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err(format!("the query did not finish in {QUERY_DEADLINE:?}")),
    };
    let mut new: Vec<String> = wait_for("the job is listed", || {
        let before = before.clone();
        async move {
            let new: Vec<String> = job_ids(proc)
                .await
                .into_iter()
                .filter(|j| !before.contains(j))
                .collect();
            (!new.is_empty()).then_some(new)
        }
    })
    .await;
    assert_eq!(new.len(), 1, "one new job per query: {new:?}");
    (new.remove(0), result)
}

/// Waits for `<job_id>.eventlog` in `dir` and for `proc`'s store to have
/// taken it in (the file is written before the store indexes it: a route
/// that reads the log answers only then), and returns its lines.
pub async fn indexed_log(proc: &Proc, dir: &Path, job_id: &str) -> Vec<String> {
    let lines = completed_log(dir, job_id).await;
    let url = proc.url(&format!("/api/job/{job_id}/diagnosis"));
    eventually(&format!("{job_id}'s log in the store"), || async {
        get(&url).await.0 == 200
    })
    .await;
    lines
}

/// Waits for `<job_id>.eventlog` in `dir` and returns its lines.
pub async fn completed_log(dir: &Path, job_id: &str) -> Vec<String> {
    let path = dir.join(format!("{job_id}.eventlog"));
    eventually(&format!("{job_id}.eventlog exists"), || {
        let exists = path.exists();
        async move { exists }
    })
    .await;
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The `data` of the log's `JobEnd` record, with raw payloads.
pub fn job_end(lines: &[String]) -> serde_json::Map<String, serde_json::Value> {
    let line = lines
        .iter()
        .find(|l| l.starts_with("{\"ev\":\"JobEnd\""))
        .expect("a JobEnd record");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["data"].as_object().unwrap().clone()
}

/// A stored raw payload's exact bytes, read from the line itself (not
/// re-serialized).
pub fn raw_field(lines: &[String], field: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Env<'a> {
        #[serde(borrow)]
        data: std::collections::HashMap<&'a str, &'a serde_json::value::RawValue>,
    }
    let line = lines
        .iter()
        .find(|l| l.starts_with("{\"ev\":\"JobEnd\""))
        .expect("a JobEnd record");
    let env: Env = serde_json::from_str(line).unwrap();
    env.data[field].get().to_string()
}

/// The record kinds of a log, in order.
pub fn kinds(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ev"].as_str().unwrap().to_string()
        })
        .collect()
}

/// A recording scheduler process with an executor and a client session,
/// over a 2,000-row table `t` in a temporary directory.
pub struct Cluster {
    /// Keeps the directory alive.
    pub tmp: tempfile::TempDir,
    /// The event-log directory.
    pub logs: PathBuf,
    /// The table's CSV file.
    pub data: PathBuf,
    /// The scheduler.
    pub sched: Proc,
    /// A client session.
    pub ctx: SessionContext,
}

impl Cluster {
    /// Starts it; `extra` are more scheduler flags.
    pub async fn start(extra: &[&str]) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("logs");
        let data = write_csv(tmp.path(), "t.csv", 2000);
        let mut sched = Proc::scheduler(&logs, extra);
        sched.wait_healthy().await;
        start_executor(sched.port).await;
        let ctx = client(sched.port, &data).await;
        Cluster {
            tmp,
            logs,
            data,
            sched,
            ctx,
        }
    }
}

/// A query on `t` that would run for hours (a triple cross join), started
/// in the background.
pub fn spawn_heavy(
    ctx: &SessionContext,
) -> tokio::task::JoinHandle<datafusion::error::Result<Vec<datafusion::arrow::array::RecordBatch>>>
{
    let ctx = ctx.clone();
    tokio::spawn(async move {
        ctx.sql("SELECT count(*) FROM t a CROSS JOIN t b CROSS JOIN t c")
            .await?
            .collect()
            .await
    })
}

/// Every line of a completed log parses, and it starts with `JobStart` and
/// ends with the terminal record and its footer.
pub fn assert_whole(lines: &[String]) {
    let kinds = kinds(lines);
    assert_eq!(kinds.first().map(String::as_str), Some("JobStart"));
    assert_eq!(&kinds[kinds.len() - 2..], ["JobEnd", "Footer"]);
}

/// The variable CI sets so that no test skips: with it, a test whose tool
/// is missing fails instead.
pub const NO_SKIPS: &str = "BALLISTA_JOB_HISTORY_NO_SKIPS";

/// Skips `test` for want of a tool (`why` says which, and how to install
/// it), or fails it when [`NO_SKIPS`] is set.
pub fn skip(test: &str, why: &str) {
    assert!(
        std::env::var_os(NO_SKIPS).is_none(),
        "{test} cannot run: {why} ({NO_SKIPS} is set, so this is a failure, not a skip)"
    );
    eprintln!("SKIPPED {test}: {why}");
}
