//! Event logs in an object store: a real S3-compatible server (moto) on
//! loopback, real schedulers recording real jobs into a bucket through a
//! TCP proxy the test can cut, and history-only servers reading it.

use crate::harness::*;
use crate::moto::MotoServer;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const SECRET: &str = "MOTO-SECRET-5e1d77";
const BUCKET: &str = "history";

/// The credentials the processes get from their environment, as in a pod.
pub(crate) const ENV: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", "AKIAMOTOKEY"),
    ("AWS_SECRET_ACCESS_KEY", SECRET),
    ("AWS_REGION", "us-east-1"),
];

/// An S3-compatible server (`moto`) with one bucket; killed on drop.
pub(crate) struct Moto {
    server: MotoServer,
}

impl Moto {
    /// Starts it with one bucket, or `None` when moto is not installed and
    /// `BALLISTA_JOB_HISTORY_REQUIRE_S3` is unset (CI sets it and installs
    /// moto).
    pub(crate) async fn start() -> Option<Moto> {
        if !MotoServer::installed() {
            assert!(
                std::env::var_os("BALLISTA_JOB_HISTORY_REQUIRE_S3").is_none(),
                "moto is not installed: python3 -m pip install 'moto[server]'"
            );
            skip(
                "the S3 tests",
                "moto is not installed (python3 -m pip install 'moto[server]')",
            );
            return None;
        }
        let moto = Moto {
            server: MotoServer::spawn(Stdio::null()),
        };
        let client = http_client();
        eventually("moto answers", || {
            let url = moto.url("/");
            let client = client.clone();
            async move { client.get(url).send().await.is_ok() }
        })
        .await;
        let created = client.put(moto.url(&format!("/{BUCKET}/"))).send().await;
        assert!(created.unwrap().status().is_success(), "the bucket exists");
        Some(moto)
    }

    pub(crate) fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    pub(crate) fn port(&self) -> u16 {
        self.server.port
    }

    /// A client of the bucket, straight to the server.
    pub(crate) fn bucket(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(self.url(""))
            .with_allow_http(true)
            .with_access_key_id(ENV[0].1)
            .with_secret_access_key(SECRET)
            .with_region("us-east-1")
            .build()
            .unwrap()
    }

    /// Object names under `prefix/`, but for those in its dot-folders
    /// (the cluster logs, the published summaries; see
    /// [`Moto::all_keys`]).
    pub(crate) async fn keys(&self, prefix: &str) -> Vec<String> {
        let mut keys = self.all_keys(prefix).await;
        keys.retain(|k| !k[prefix.len()..].contains("/."));
        keys
    }

    /// Every object name under `prefix/`.
    pub(crate) async fn all_keys(&self, prefix: &str) -> Vec<String> {
        use futures::TryStreamExt;
        use object_store::ObjectStore;
        let prefix = object_store::path::Path::from(prefix);
        let listed: Vec<_> = self
            .bucket()
            .list(Some(&prefix))
            .try_collect()
            .await
            .unwrap();
        let mut keys: Vec<String> = listed.into_iter().map(|m| m.location.to_string()).collect();
        keys.sort();
        keys
    }

    /// An object's bytes.
    pub(crate) async fn bytes(&self, key: &str) -> Vec<u8> {
        self.bytes_if_there(key).await.expect("the object is there")
    }

    /// An object's bytes, if it is there (a server may delete a file it
    /// published between a listing and this).
    pub(crate) async fn bytes_if_there(&self, key: &str) -> Option<Vec<u8>> {
        use object_store::ObjectStoreExt;
        let got = self
            .bucket()
            .get(&object_store::path::Path::from(key))
            .await;
        match got {
            Err(object_store::Error::NotFound { .. }) => None,
            got => Some(got.unwrap().bytes().await.unwrap().to_vec()),
        }
    }

    /// Replaces an object.
    async fn put(&self, key: &str, bytes: &'static [u8]) {
        use object_store::ObjectStoreExt;
        self.bucket()
            .put(&object_store::path::Path::from(key), bytes.into())
            .await
            .unwrap();
    }

    /// An object's lines.
    async fn lines(&self, key: &str) -> Vec<String> {
        use object_store::ObjectStoreExt;
        let got = self
            .bucket()
            .get(&object_store::path::Path::from(key))
            .await;
        let bytes = got.unwrap().bytes().await.unwrap();
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Passes bytes both ways.
    Forward,
    /// Accepts and reads requests, never answers (a store that hangs).
    Hold,
    /// Closes every connection at once (a store that is down).
    Refuse,
}

/// A TCP proxy in front of the store. Changing its mode cuts every open
/// connection, so pooled connections see the change too.
struct Proxy {
    port: u16,
    mode: watch::Sender<Mode>,
    /// The first line of each request that was held.
    held: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mode, rx) = watch::channel(Mode::Forward);
        let held = Arc::new(Mutex::new(Vec::new()));
        let seen = held.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(connection(socket, target, rx.clone(), seen.clone()));
            }
        });
        Proxy { port, mode, held }
    }

    fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn held(&self) -> Vec<String> {
        self.held.lock().unwrap().clone()
    }
}

async fn connection(
    mut socket: TcpStream,
    target: u16,
    mut mode: watch::Receiver<Mode>,
    held: Arc<Mutex<Vec<String>>>,
) {
    let now = *mode.borrow_and_update();
    match now {
        Mode::Refuse => {}
        Mode::Hold => {
            let mut buf = vec![0u8; 64 * 1024];
            let mut first = true;
            loop {
                tokio::select! {
                    n = socket.read(&mut buf) => match n {
                        Ok(0) | Err(_) => return,
                        Ok(n) => if first {
                            first = false;
                            let text = String::from_utf8_lossy(&buf[..n]);
                            let line = text.lines().next().unwrap_or_default().to_string();
                            held.lock().unwrap().push(line);
                        },
                    },
                    _ = mode.changed() => return,
                }
            }
        }
        Mode::Forward => {
            let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", target)).await else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut socket, &mut upstream) => {}
                _ = mode.changed() => {}
            }
        }
    }
}

/// Our binary on the bucket `prefix`, through `endpoint`, with `spool`,
/// rescanning every second, with `mode` flags first; its log goes to `log`.
pub(crate) fn on_bucket(
    port: u16,
    mode: &[&str],
    prefix: &str,
    endpoint: &str,
    spool: &Path,
    log: &Path,
) -> Proc {
    let url = format!("s3://{BUCKET}/{prefix}");
    let mut args = mode.to_vec();
    args.extend_from_slice(&[
        "--event-log-dir",
        &url,
        "--event-log-spool",
        spool.to_str().unwrap(),
        "--object-store-endpoint",
        endpoint,
        "--object-store-allow-http",
        "--object-store-timeout",
        "2s",
    ]);
    if !mode.contains(&"--update-interval-seconds") {
        args.extend_from_slice(&["--update-interval-seconds", "1"]);
    }
    Proc::spawn_full(port, &[], &args, ENV, Some(log))
}

/// A recording scheduler (pull-staged, as the in-process executor polls).
fn scheduler(port: u16, prefix: &str, endpoint: &str, spool: &Path, log: &Path) -> Proc {
    scheduler_with(port, &[], prefix, endpoint, spool, log)
}

/// [`scheduler`] with more flags.
fn scheduler_with(
    port: u16,
    extra: &[&str],
    prefix: &str,
    endpoint: &str,
    spool: &Path,
    log: &Path,
) -> Proc {
    let mut mode = vec!["--scheduler-policy", "pull-staged"];
    mode.extend_from_slice(extra);
    on_bucket(port, &mode, prefix, endpoint, spool, log)
}

/// A recording scheduler on the bucket `prefix` (with `extra` flags) and
/// an executor of its own; its spool and log are `spool-<name>` and
/// `scheduler-<name>.log` under `tmp`.
pub(crate) async fn recording_cluster(
    tmp: &Path,
    name: &str,
    extra: &[&str],
    prefix: &str,
    endpoint: &str,
) -> Proc {
    let spool = tmp.join(format!("spool-{name}"));
    let log = tmp.join(format!("scheduler-{name}.log"));
    let mut sched = scheduler_with(free_port(), extra, prefix, endpoint, &spool, &log);
    sched.wait_healthy().await;
    start_executor(sched.port).await;
    sched
}

/// A history-only server.
fn history(prefix: &str, endpoint: &str, spool: &Path, log: &Path) -> Proc {
    on_bucket(
        free_port(),
        &["--history-only"],
        prefix,
        endpoint,
        spool,
        log,
    )
}

/// The completed logs (file names) in a spool.
fn spooled(spool: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(spool)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.ends_with(".eventlog"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs `sql` as a job named `name` (unique in the test) and returns its
/// id: found by name, as the list also holds other clusters' jobs.
pub(crate) async fn run_named(sched: &Proc, data: &Path, name: &str, sql: &str) -> String {
    let ctx = client_with(sched.port, data, &[("ballista.job.name", name)]).await;
    ctx.sql(sql).await.unwrap().collect().await.unwrap();
    wait_for("the job is listed", || async {
        let list = get_json(&sched.url("/api/jobs")).await;
        list.as_array()
            .unwrap()
            .iter()
            .find(|j| j["job_name"] == name)
            .map(|j| j["job_id"].as_str().unwrap().to_string())
    })
    .await
}

/// Waits until `server` lists exactly `ids` (in any order), and returns the
/// list as it came (so a duplicate would show).
pub(crate) async fn wait_listed(server: &Proc, ids: &[&String]) -> Vec<String> {
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_for("the server lists exactly the recorded jobs", || {
        let want = want.clone();
        async move {
            let listed = job_ids(server).await;
            let mut sorted = listed.clone();
            sorted.sort();
            (sorted == want).then_some(listed)
        }
    })
    .await
}

/// Two clusters record into one prefix; two history-only servers read it.
/// Every job is in the bucket once, whole, and served from it byte for
/// byte as the live scheduler serves it; no secret reaches any log. The
/// first cluster is named by `--scheduler-id`, the second keeps the id it
/// made in its spool; every server tells their jobs apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_moto,
    ignore = "moto is not installed (python3 -m pip install 'moto[server]')"
)]
async fn two_clusters_record_into_one_bucket_and_two_servers_serve_it() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 2000);
    let endpoint = moto.url("");
    let mut clusters = Vec::new();
    for (name, extra) in [("a", &["--scheduler-id", "cluster-a"][..]), ("b", &[])] {
        let sched = recording_cluster(tmp.path(), name, extra, "logs", &endpoint).await;
        let spool = tmp.path().join(format!("spool-{name}"));
        let log = tmp.path().join(format!("scheduler-{name}.log"));
        clusters.push((sched, spool, log));
    }
    let mut jobs = Vec::new();
    for (i, (sched, _, _)) in clusters.iter().enumerate() {
        for (n, sql) in [
            "SELECT k, count(*) FROM t GROUP BY k",
            "SELECT sum(v) FROM t",
        ]
        .iter()
        .enumerate()
        {
            let id = run_named(sched, &data, &format!("cluster{i}-job{n}"), sql).await;
            jobs.push((i, id));
        }
    }
    let want: Vec<String> = {
        let mut keys: Vec<String> = jobs
            .iter()
            .map(|(_, id)| format!("logs/{id}.eventlog"))
            .collect();
        keys.sort();
        keys
    };
    wait_for("every log is uploaded", || {
        let want = want.clone();
        let moto = &moto;
        async move { (moto.keys("logs").await == want).then_some(()) }
    })
    .await;
    for (_, spool, _) in &clusters {
        eventually("the spool is emptied", || async {
            spooled(spool).is_empty()
        })
        .await;
    }

    let mut servers: Vec<Proc> = ["h1", "h2"]
        .iter()
        .map(|h| {
            history(
                "logs",
                &endpoint,
                &tmp.path().join(format!("spool-{h}")),
                &tmp.path().join(format!("{h}.log")),
            )
        })
        .collect();
    let ids: Vec<&String> = jobs.iter().map(|(_, id)| id).collect();
    for server in &mut servers {
        server.wait_healthy().await;
    }
    for server in &servers {
        let listed = wait_listed(server, &ids).await;
        assert_eq!(listed.len(), jobs.len(), "each job once: {listed:?}");
        for (cluster, id) in &jobs {
            let live = &clusters[*cluster].0;
            let lines = moto.lines(&format!("logs/{id}.eventlog")).await;
            assert_whole(&lines);
            for (field, path) in [("job", ""), ("stages", "/stages")] {
                let (status, _, served) = get(&server.url(&format!("/api/job/{id}{path}"))).await;
                assert_eq!(status, 200, "{id}{path}");
                let served = String::from_utf8(served).unwrap();
                assert_eq!(
                    served,
                    raw_field(&lines, field),
                    "{id}{path} from the bucket"
                );
                let (_, _, from_live) = get(&live.url(&format!("/api/job/{id}{path}"))).await;
                assert_eq!(
                    served,
                    String::from_utf8(from_live).unwrap(),
                    "{id}{path} live"
                );
            }
            let (_, _, dot) = get(&server.url(&format!("/api/job/{id}/dot"))).await;
            let (_, _, live_dot) = get(&live.url(&format!("/api/job/{id}/dot"))).await;
            assert_eq!(dot, live_dot, "{id}/dot");
            let timeline = get_json(&server.url(&format!("/api/job/{id}/timeline"))).await;
            assert!(
                !timeline["tasks"].as_array().unwrap().is_empty(),
                "{id}: the timeline streams the tasks from the object"
            );
        }
    }
    // The live schedulers list the other cluster's jobs too, from the bucket.
    for (sched, _, _) in &clusters {
        let listed = wait_listed(sched, &ids).await;
        assert_eq!(listed.len(), jobs.len(), "each job once: {listed:?}");
    }
    let metrics = String::from_utf8(get(&clusters[0].0.url("/api/metrics")).await.2).unwrap();
    assert_eq!(counter(&metrics, "ballista_job_history_uploads_total"), 2);
    // The second cluster's id is the one it keeps in its spool.
    let kept = std::fs::read_to_string(tmp.path().join("spool-b/.ballista-scheduler-id")).unwrap();
    let names = ["cluster-a".to_string(), kept.trim().to_string()];
    assert_ne!(names[0], names[1]);
    let live: Vec<&Proc> = clusters.iter().map(|(s, _, _)| s).collect();
    // The columnar history first: it checks that nothing is published
    // before the first SQL query.
    columnar_history_is_shared(
        &moto,
        &servers,
        &jobs,
        &endpoint,
        &tmp.path().join("spool-h3"),
    )
    .await;
    crate::several::schedulers_are_told_apart(&servers, &live, &jobs, &names).await;
    // Each cluster's log of its executors is in the bucket, and a server
    // over the bucket accounts for both clusters' slots.
    wait_for("both cluster logs are uploaded", || async {
        let keys = moto.all_keys("logs/.cluster").await;
        (keys.len() == 2).then_some(())
    })
    .await;
    let usage = get_json(&servers[0].url("/api/usage?group_by=scheduler")).await;
    assert!(usage["capacity_slot_ms"].as_u64().unwrap() > 0, "{usage}");
    // The books balance over the bucket as over a directory.
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap() as f64;
    let shares: f64 = usage["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| n(g, "idle_share_slot_ms"))
        .sum();
    let idle = n(&usage, "idle_slot_ms");
    assert!(
        (shares + n(&usage, "unattributed_idle_slot_ms") - idle).abs() <= 0.01 * idle,
        "{usage}"
    );
    let accounted = n(&usage, "busy_slot_ms") - n(&usage, "over_capacity_slot_ms") + idle;
    let capacity = n(&usage, "capacity_slot_ms");
    assert!((accounted - capacity).abs() <= 0.01 * capacity, "{usage}");
    // Both servers over the bucket agree.
    let other = get_json(&servers[1].url(&format!(
        "/api/usage?group_by=scheduler&from={}&to={}",
        usage["from"], usage["to"]
    )))
    .await;
    assert_eq!(other["busy_slot_ms"], usage["busy_slot_ms"], "{other}");
    let groups: Vec<&str> = usage["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["key"].as_str().unwrap())
        .collect();
    assert_eq!(groups.len(), 2, "{usage}");
    for name in &names {
        assert!(groups.contains(&name.as_str()), "{name}: {usage}");
    }
    drop(servers);
    for (mut sched, _, log) in clusters {
        sched.kill();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            !text.contains(SECRET),
            "the secret key reached {}",
            log.display()
        );
    }
}

/// SQL over the bucket's jobs: the first server builds the columnar history
/// from the logs and publishes it beside them (each file named by the
/// BLAKE3 hash of its bytes); a server with a new spool fetches it and reads
/// no log; a published file damaged in the bucket is refused, its jobs are
/// read from their logs, and the file is published whole again. Every answer
/// equals the `TaskEnd` records counted in the objects.
async fn columnar_history_is_shared(
    moto: &Moto,
    servers: &[Proc],
    jobs: &[(usize, String)],
    endpoint: &str,
    spool: &Path,
) {
    use crate::sql::sql;
    const FOLDER: &str = "logs/.ballista-job-history.columnar";
    let query = "SELECT job_id, count(*) AS n FROM tasks GROUP BY job_id ORDER BY job_id";
    let mut want = Vec::new();
    for (_, id) in jobs {
        let lines = moto.lines(&format!("logs/{id}.eventlog")).await;
        let n = lines
            .iter()
            .filter(|l| l.starts_with(r#"{"ev":"TaskEnd""#))
            .count();
        assert!(n > 0, "{id} ran tasks");
        want.push((id.clone(), n as i64));
    }
    want.sort();
    let answer = |rows: Vec<serde_json::Value>| -> Vec<(String, i64)> {
        rows.iter()
            .map(|r| {
                (
                    r["job_id"].as_str().unwrap().to_string(),
                    r["n"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let counters = |server: &Proc| {
        let url = server.url("/api/metrics");
        async move {
            let text = String::from_utf8(get(&url).await.2).unwrap();
            [
                "ballista_job_history_columnar_logs_read_total",
                "ballista_job_history_columnar_segments_fetched_total",
            ]
            .map(|name| counter(&text, name))
        }
    };
    // Published by the background refresh (never on a query's path):
    // every file named by the hash of its bytes, one per table and the
    // index of the segment's jobs.
    let published_whole = || async {
        eventually("the columnar history is published whole", || async {
            let keys = moto.keys(FOLDER).await;
            let files: Vec<&String> = keys.iter().filter(|k| k.ends_with(".parquet")).collect();
            let mut whole = keys.contains(&format!("{FOLDER}/manifest.json")) && files.len() == 4;
            for key in files {
                let name = key.rsplit('/').next().unwrap().trim_end_matches(".parquet");
                let bytes = moto.bytes_if_there(key).await;
                whole &= bytes.is_some_and(|b| blake3::hash(&b).to_hex().as_str() == name);
            }
            whole
        })
        .await;
        let keys = moto.keys(FOLDER).await;
        assert!(
            keys.contains(&format!("{FOLDER}/manifest.json")),
            "{keys:?}"
        );
        let files: Vec<String> = keys
            .into_iter()
            .filter(|k| k.ends_with(".parquet"))
            .collect();
        assert_eq!(
            files.len(),
            4,
            "one segment, three tables, the index: {files:?}"
        );
        assert_eq!(
            files.iter().filter(|k| k.contains("/index/")).count(),
            1,
            "{files:?}"
        );
        for key in &files {
            let name = key.rsplit('/').next().unwrap().trim_end_matches(".parquet");
            let bytes = moto.bytes(key).await;
            assert_eq!(blake3::hash(&bytes).to_hex().as_str(), name, "{key}");
            assert_eq!(&bytes[..4], b"PAR1", "{key} is Parquet");
        }
        files
    };

    assert!(
        moto.keys(FOLDER).await.is_empty(),
        "nothing before SQL is used"
    );
    assert_eq!(answer(sql(&servers[0], query).await), want);
    let files = published_whole().await;
    assert_eq!(counters(&servers[0]).await, [jobs.len() as u64, 0]);

    // A second server, whose spool never held the columnar history.
    assert_eq!(answer(sql(&servers[1], query).await), want);
    assert_eq!(
        counters(&servers[1]).await,
        [0, 1],
        "fetched from the bucket, no log read"
    );

    // A published file damaged in the bucket.
    let tasks = files.iter().find(|k| k.contains("/tasks/")).unwrap();
    moto.put(tasks, b"PAR1 not really").await;
    let log = spool.with_extension("log");
    let mut third = history("logs", endpoint, spool, &log);
    third.wait_healthy().await;
    let ids: Vec<&String> = jobs.iter().map(|(_, id)| id).collect();
    wait_listed(&third, &ids).await;
    assert_eq!(answer(sql(&third, query).await), want);
    assert_eq!(
        counters(&third).await,
        [jobs.len() as u64, 0],
        "the damaged segment is read from the logs"
    );
    published_whole().await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("not used"), "the refusal is logged: {text}");
}

/// The store hangs mid-upload and the scheduler is killed; then the store
/// is down while the scheduler restarts; then it comes back. The history
/// server keeps answering throughout, the job arrives once, and the spool
/// is emptied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_moto,
    ignore = "moto is not installed (python3 -m pip install 'moto[server]')"
)]
async fn a_kill_mid_upload_and_an_outage_lose_nothing_and_duplicate_nothing() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let proxy = Proxy::start(moto.server.port).await;
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 2000);
    let spool = tmp.path().join("spool");
    let log = tmp.path().join("scheduler.log");
    let port = free_port();
    let mut sched = scheduler(port, "logs", &proxy.url(), &spool, &log);
    sched.wait_healthy().await;
    start_executor(port).await;
    let ctx = client(port, &data).await;
    let (first, result) = run_job(&sched, &ctx, "SELECT sum(v) FROM t").await;
    result.unwrap();
    let first_key = format!("logs/{first}.eventlog");
    eventually("the first log is uploaded", || async {
        moto.keys("logs").await == [first_key.clone()]
    })
    .await;
    let history_log = tmp.path().join("history.log");
    let mut server = history("logs", &proxy.url(), &tmp.path().join("h"), &history_log);
    server.wait_healthy().await;
    wait_listed(&server, &[&first]).await;

    // The store hangs: the next upload is sent and never answered.
    proxy.set(Mode::Hold);
    let (second, result) = run_job(&sched, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
    result.unwrap();
    let put = format!("/{BUCKET}/logs/{second}.eventlog");
    wait_for("the upload of the second log is in flight", || {
        let held = proxy.held();
        let put = put.clone();
        async move {
            held.iter()
                .any(|l| l.starts_with("PUT ") && l.contains(&put))
                .then_some(())
        }
    })
    .await;
    // Meanwhile the history server answers from what it has.
    assert_eq!(job_ids(&server).await, std::slice::from_ref(&first));
    sched.kill();
    assert_eq!(
        moto.keys("logs").await,
        std::slice::from_ref(&first_key),
        "an interrupted upload leaves no object"
    );
    assert_eq!(spooled(&spool), [format!("{second}.eventlog")]);
    // A job that was running when the scheduler died leaves its `.running`
    // log in the spool (as the crash tests show); this one is made from the
    // first job's start record.
    let start = moto.lines(&first_key).await.remove(0);
    assert!(start.contains("\"JobStart\""));
    std::fs::write(
        spool.join("orphan1.eventlog.running"),
        start.replace(&first, "orphan1") + "\n",
    )
    .unwrap();

    // Restarted while the store is down: the log stays in the spool and
    // its upload is retried.
    proxy.set(Mode::Refuse);
    let mut sched = scheduler(port, "logs", &proxy.url(), &spool, &log);
    sched.wait_healthy().await;
    eventually("the restarted scheduler retries the upload", || async {
        let metrics = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
        counter(&metrics, "ballista_job_history_upload_errors_total") >= 2
    })
    .await;
    assert_eq!(spooled(&spool), [format!("{second}.eventlog")]);
    assert_eq!(
        job_ids(&server).await,
        std::slice::from_ref(&first),
        "still served"
    );

    // The store is back: the upload resumes, the job arrives once.
    proxy.set(Mode::Forward);
    let mut want = vec![
        first_key.clone(),
        format!("logs/{second}.eventlog"),
        "logs/orphan1.eventlog.running".to_string(),
    ];
    want.sort();
    eventually("the second log is uploaded", || async {
        moto.keys("logs").await == want
    })
    .await;
    eventually("the spool is emptied", || async {
        std::fs::read_dir(&spool).unwrap().all(|e| {
            !e.unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".eventlog")
        })
    })
    .await;
    let listed = wait_listed(&server, &[&first, &second]).await;
    assert_eq!(
        listed,
        [second.clone(), first.clone()],
        "newest first, each once"
    );
    let job = get_json(&server.url(&format!("/api/job/{second}"))).await;
    assert_eq!(job["job_id"], second.as_str());
    // The orphan is listed as abandoned, with its plans. It was uploaded
    // after the second log, so the listing that found that log may have
    // come before it: wait for the next one.
    let abandoned = wait_for("the orphan is listed", || async {
        let ids = job_ids_where(&server, "status=abandoned").await;
        (!ids.is_empty()).then_some(ids)
    })
    .await;
    assert_eq!(abandoned, ["orphan1"]);
    let orphan = get_json(&server.url("/api/job/orphan1")).await;
    assert_eq!(orphan["job_id"], "orphan1");
    assert_whole(&moto.lines(&format!("logs/{second}.eventlog")).await);

    sched.kill();
    drop(server);
    let scheduler_log = std::fs::read_to_string(&log).unwrap();
    let history_text = std::fs::read_to_string(&history_log).unwrap();
    for text in [&scheduler_log, &history_text] {
        assert!(!text.contains(SECRET), "the secret key reached a log");
    }
    assert_eq!(
        scheduler_log.matches("cannot upload").count(),
        1,
        "the outage is logged once per process run: {scheduler_log}"
    );
    assert_eq!(
        history_text.matches("cannot list").count(),
        1,
        "the history server logs the outage once: {history_text}"
    );
}

/// Azure's storage emulator (`azurite` from npm) on a loopback port, with
/// one container (made with `azure-storage-blob` from PyPI); killed on drop.
struct Azurite {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Azurite {
    const ACCOUNT_KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    /// Starts it, or `None` when azurite or the Python client is missing and
    /// `BALLISTA_JOB_HISTORY_REQUIRE_AZURITE` is unset (CI sets it and
    /// installs both).
    async fn start(container: &str) -> Option<Azurite> {
        let binary = std::env::var("AZURITE_BLOB").unwrap_or_else(|_| "azurite-blob".into());
        let has_binary = Command::new(&binary)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let has_client = Command::new("python3")
            .args(["-c", "import azure.storage.blob"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !(has_binary && has_client) {
            assert!(
                std::env::var_os("BALLISTA_JOB_HISTORY_REQUIRE_AZURITE").is_none(),
                "azurite or its client is missing: npm install -g azurite; \
                 python3 -m pip install azure-storage-blob"
            );
            skip(
                "the Azure test",
                "azurite (npm install -g azurite) or azure-storage-blob (PyPI) is not installed",
            );
            return None;
        }
        let data = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new(&binary)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args(["--silent", "--skipApiVersionCheck", "--location"])
            .arg(data.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("azurite starts");
        let azurite = Azurite {
            child,
            port,
            _data: data,
        };
        let script = format!(
            "from azure.storage.blob import BlobServiceClient\n\
             BlobServiceClient.from_connection_string('{}').create_container('{container}')",
            azurite.connection_string()
        );
        eventually("azurite makes the container", || async {
            Command::new("python3")
                .args(["-c", &script])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .await;
        Some(azurite)
    }

    fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};\
             BlobEndpoint=http://127.0.0.1:{}/devstoreaccount1;",
            Self::ACCOUNT_KEY,
            self.port
        )
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `az://` end to end: a job recorded by a real scheduler and executor into
/// Azure Blob Storage (the emulator) is served by a history-only server
/// from it, as the live scheduler serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_azurite,
    ignore = "azurite (npm install -g azurite) or azure-storage-blob (PyPI) is not installed"
)]
async fn a_job_recorded_into_azure_blob_storage_is_served_from_it() {
    let Some(azurite) = Azurite::start("history").await else {
        return;
    };
    let blob_url = format!("http://127.0.0.1:{}", azurite.port);
    let env = [
        ("AZURE_STORAGE_USE_EMULATOR", "true"),
        ("AZURITE_BLOB_STORAGE_URL", blob_url.as_str()),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 2000);
    let spool = tmp.path().join("spool");
    let spool_arg = spool.to_str().unwrap();
    let port = free_port();
    let mut sched = Proc::spawn_full(
        port,
        &[],
        &[
            "--event-log-dir",
            "az://history/logs",
            "--event-log-spool",
            spool_arg,
            "--scheduler-policy",
            "pull-staged",
        ],
        &env,
        Some(&tmp.path().join("scheduler.log")),
    );
    sched.wait_healthy().await;
    start_executor(port).await;
    let ctx = client(port, &data).await;
    let (id, result) = run_job(&sched, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
    result.unwrap();
    eventually("the log is uploaded", || async {
        spooled(&spool).is_empty()
    })
    .await;
    let h_spool = tmp.path().join("h");
    let mut server = Proc::spawn_full(
        free_port(),
        &[],
        &[
            "--history-only",
            "--event-log-dir",
            "az://history/logs",
            "--event-log-spool",
            h_spool.to_str().unwrap(),
        ],
        &env,
        Some(&tmp.path().join("history.log")),
    );
    server.wait_healthy().await;
    let listed = wait_listed(&server, &[&id]).await;
    assert_eq!(listed, std::slice::from_ref(&id));
    for path in ["", "/stages", "/dot"] {
        let (status, _, served) = get(&server.url(&format!("/api/job/{id}{path}"))).await;
        assert_eq!(status, 200, "{path}");
        let (_, _, live) = get(&sched.url(&format!("/api/job/{id}{path}"))).await;
        assert_eq!(served, live, "{id}{path}");
    }
}

/// Logs written by upstream's scheduler, put into a bucket as objects: a
/// history server over the bucket answers every payload as upstream's
/// own history server does over the same logs on disk (each read through
/// the payload ranges learnt when the object was indexed, with ranged
/// `GET`s).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_moto,
    ignore = "moto is not installed (python3 -m pip install 'moto[server]')"
)]
async fn upstream_written_objects_answer_as_upstream_does() {
    use object_store::ObjectStoreExt;
    let Some(moto) = Moto::start().await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    crate::history::copy_fixtures(&local);
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(&local).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let bytes = std::fs::read(&path).unwrap();
        moto.bucket()
            .put(
                &object_store::path::Path::from(format!("upstream/{name}")),
                bytes.into(),
            )
            .await
            .unwrap();
        ids.push(name.strip_suffix(".eventlog").unwrap().to_string());
    }
    let spool = tmp.path().join("spool");
    let mut server = history("upstream", &moto.url(""), &spool, &tmp.path().join("h.log"));
    server.wait_healthy().await;
    let wanted: Vec<&String> = ids.iter().collect();
    wait_listed(&server, &wanted).await;
    for id in &ids {
        for route in ["", "/stages", "/config", "/dot"] {
            let path = format!("/api/job/{id}{route}");
            for _ in 0..2 {
                let (status, _, ours) = get(&server.url(&path)).await;
                let (their_status, theirs) = crate::history::upstream_answer(&local, &path).await;
                assert_eq!(status, their_status, "{path}");
                assert!(crate::history::same_answer(&ours, &theirs), "{path}");
            }
        }
    }
}

/// A recording scheduler over an object store whose list is pinned to its
/// first scan (`--update-interval-seconds 0`) still serves each job it
/// finishes from its log once the scheduler forgets it: the uploader tells
/// the store of each object it puts. (Before, no rescan ever listed them:
/// held a minute by the clean-up, then gone from its own history.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_moto,
    ignore = "moto is not installed (python3 -m pip install 'moto[server]')"
)]
async fn a_pinned_object_store_history_keeps_the_jobs_its_scheduler_finishes() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 500);
    let mut sched = scheduler_with(
        free_port(),
        &[
            "--update-interval-seconds",
            "0",
            "--finished-job-state-clean-up-interval-seconds",
            "1",
        ],
        "pinned",
        &moto.url(""),
        &tmp.path().join("spool"),
        &tmp.path().join("sched.log"),
    );
    sched.wait_healthy().await;
    start_executor(sched.port).await;
    let job = run_named(
        &sched,
        &data,
        "pinned",
        "SELECT k, count(*) FROM t GROUP BY k",
    )
    .await;
    // Forgotten by the scheduler within a second of its end (its log put by
    // then), the job is served from its object.
    let from_log = bjh_serving::source::FROM_LOG_HEADER;
    eventually("the job is served from its log", || async {
        let r = http_client()
            .get(sched.url(&format!("/api/job/{job}")))
            .send()
            .await
            .unwrap();
        r.status() == 200 && r.headers().contains_key(from_log)
    })
    .await;
    assert!(job_ids(&sched).await.contains(&job));
    assert!(
        moto.keys("pinned")
            .await
            .contains(&format!("pinned/{job}.eventlog")),
        "the log is in the bucket"
    );
    sched.terminate();
}
