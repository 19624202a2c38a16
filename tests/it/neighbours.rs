//! Hostile neighbours: what changes in the directory after it was
//! indexed, against the real binary. A log swapped for a link to another
//! file or for a FIFO, and a directory that cannot be listed for a while.

use crate::harness::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// Replaces `path` at once (a rename over it) with what `make` creates.
pub(crate) fn swap(path: &Path, make: impl FnOnce(&Path)) {
    let aside = path.with_extension("swap");
    make(&aside);
    std::fs::rename(&aside, path).unwrap();
}

/// `/healthz` answered within 100 ms, three times in a row.
async fn healthy_at_once(server: &Proc) {
    healthy_at(&server.url("/healthz")).await;
}

/// Runs `attack` while `/healthz` is checked `rounds` times (as
/// [`healthy_at_once`]) from a task of its own: the checks run beside the
/// attack, never waiting for this task's own work on the attack's answers
/// (parsing four large compare answers once held a check up for 105 ms).
pub(crate) async fn healthy_during<T>(
    server: &Proc,
    rounds: usize,
    attack: impl std::future::Future<Output = T>,
) -> T {
    let url = server.url("/healthz");
    let health = tokio::spawn(async move {
        for _ in 0..rounds {
            healthy_at(&url).await;
        }
    });
    let out = attack.await;
    if let Err(e) = health.await {
        std::panic::resume_unwind(e.into_panic());
    }
    out
}

async fn healthy_at(url: &str) {
    let client = http_client();
    for _ in 0..3 {
        let start = Instant::now();
        let r = client
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .expect("/healthz answers");
        assert_eq!(r.status(), 200);
        let took = start.elapsed();
        assert!(took < Duration::from_millis(100), "/healthz took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_swapped_after_indexing_is_never_read_as_another_file() {
    let _quiet = HEAVY.read().await;
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    crate::history::copy_fixtures(&logs);
    let secret = tmp.path().join("api-token");
    std::fs::write(&secret, "TOP-SECRET-TOKEN-4711\n").unwrap();
    // Rescans far apart: the swaps happen between two of them.
    let mut server = Proc::history(&logs, &["--update-interval-seconds", "3600"]);
    server.wait_healthy().await;
    let url = server.url("/api/job/golden-v1/eventlog");
    let (status, _, before) = get(&url).await;
    assert_eq!(status, 200);
    let log = logs.join("golden-v1.eventlog");
    assert_eq!(before, std::fs::read(&log).unwrap());

    // A link to another file: never its bytes.
    swap(&log, |p| std::os::unix::fs::symlink(&secret, p).unwrap());
    for path in [
        "/api/job/golden-v1/eventlog",
        "/api/job/golden-v1",
        "/api/job/golden-v1/stages",
        "/api/job/golden-v1/timeline",
    ] {
        let (status, _, body) = get(&server.url(path)).await;
        let body = String::from_utf8_lossy(&body);
        assert!(!body.contains("TOP-SECRET"), "{path}: {status} {body}");
        assert!(status >= 400, "{path}: {status} {body}");
    }

    // A FIFO: each request is answered, none parks a thread.
    swap(&log, |p| {
        let made = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(made.success());
    });
    let client = http_client();
    let asked = futures::future::join_all(
        (0..32).map(|_| client.get(&url).timeout(Duration::from_secs(10)).send()),
    )
    .await;
    for r in asked {
        let r = r.expect("answered, not parked on the FIFO");
        assert!(r.status().as_u16() >= 400, "{}", r.status());
    }
    healthy_at_once(&server).await;

    // The same file again, rewritten with other bytes of the same length:
    // not the file that was indexed either.
    swap(&log, |p| {
        std::fs::write(p, vec![b' '; before.len()]).unwrap()
    });
    let (status, _, body) = get(&url).await;
    assert!(status >= 400, "{status}");
    assert_ne!(body, vec![b' '; before.len()]);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_root, ignore = "switching to another user (setpriv) needs root")]
async fn a_directory_that_cannot_be_listed_keeps_its_jobs() {
    // Under /tmp, not $TMPDIR: the server runs as another user, who must
    // reach the folder (CI's $TMPDIR is a root-only scratch folder).
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let logs = tmp.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    crate::history::copy_fixtures(&logs);
    use std::os::unix::fs::PermissionsExt;
    let open = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(tmp.path(), 0o755);
    open(&logs, 0o755);
    // Root reads any directory: the server runs as nobody, to whom the
    // directory can be closed.
    let port = free_port();
    let dir = logs.to_str().unwrap();
    let mut server = Proc::spawn_wrapped(
        port,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        &[
            "--history-only",
            "--event-log-dir",
            dir,
            "--no-history-index",
            "--update-interval-seconds",
            "1",
        ],
        None,
    );
    server.wait_healthy().await;
    let all = job_ids(&server).await;
    assert_eq!(all.len(), 6);

    // EACCES: the jobs stay listed, the failure is counted, nothing is lost.
    open(&logs, 0o000);
    let listing_errors = || async {
        let (_, _, body) = get(&server.url("/api/metrics")).await;
        counter(
            &String::from_utf8_lossy(&body),
            "ballista_job_history_listing_errors_total",
        )
    };
    eventually("a rescan fails to list the directory", || async {
        listing_errors().await >= 1 || job_ids(&server).await.len() != all.len()
    })
    .await;
    assert_eq!(
        job_ids(&server).await,
        all,
        "the jobs stay while it cannot be listed"
    );
    // Open again, then gone for good: the list empties, as upstream's
    // does.
    open(&logs, 0o755);
    assert_eq!(job_ids(&server).await, all);
    std::fs::rename(&logs, tmp.path().join("moved")).unwrap();
    eventually("the directory's removal empties the list", || async {
        job_ids(&server).await.is_empty()
    })
    .await;
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_index_is_never_saved_through_a_link_planted_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    crate::history::copy_fixtures(&logs);
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "the victim's own bytes\n").unwrap();
    let mut server = Proc::history(&logs, &["--update-interval-seconds", "1"]);
    server.wait_healthy().await;
    let index = logs.join(".ballista-job-history.index");
    eventually("the first index is saved", || async { index.exists() }).await;
    // Links at the names a saver might pick: the process's own temporary
    // name, and the index itself.
    let planted = [
        logs.join(format!(".ballista-job-history.tmp-{}", server.pid())),
        logs.join(".ballista-job-history.index.tmp"),
    ];
    for link in &planted {
        std::os::unix::fs::symlink(&victim, link).unwrap();
    }
    // A change to save: one job gone.
    std::fs::remove_file(logs.join("golden-v1.eventlog")).unwrap();
    eventually("the job is dropped", || async {
        !job_ids(&server).await.contains(&"golden-v1".to_string())
    })
    .await;
    // Stopping saves the index at once.
    assert!(server.terminate().success());
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the victim's own bytes\n"
    );
    assert!(
        std::fs::symlink_metadata(&index)
            .unwrap()
            .file_type()
            .is_file()
    );
    // The saved index is the directory's: a restart lists the five jobs.
    let mut again = Proc::history(&logs, &[]);
    again.wait_ready().await;
    assert_eq!(job_ids(&again).await.len(), 5);
    again.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raw_answers_are_never_sniffed_or_run_as_pages() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let client = http_client();
    for (path, raw) in [
        ("/api/job/golden-v1/eventlog", true),
        ("/api/job/golden-v1/dot", true),
        ("/api/job/golden-v1/timeline.svg", true),
        ("/api/job/golden-v1/timeline", true),
        ("/api/jobs", true),
        ("/api/job/no-such-job", true),
        ("/", false),
        ("/ui/job/golden-v1", false),
    ] {
        let r = client.get(server.url(path)).send().await.unwrap();
        let h = r.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        if raw {
            assert!(
                csp.contains("default-src 'none'") && csp.contains("sandbox"),
                "{path}: {csp}"
            );
        } else {
            // A page keeps its own policy, which runs this server's scripts.
            assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        }
    }
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_that_names_another_job_hides_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let victim = "038HEXYEEG000";
    // What the server says of the victim from its own log.
    let mut server = Proc::history(tmp.path(), &["--no-history-index"]);
    server.wait_ready().await;
    let (status, _, truth) = get(&server.url(&format!("/api/job/{victim}"))).await;
    assert_eq!(status, 200);
    server.terminate();
    // Two logs of another job under other names, whose records claim to
    // be the victim's (an id of the same length, so their byte ranges
    // still fit).
    let other = std::fs::read_to_string(tmp.path().join("038HEXYE9M000.eventlog")).unwrap();
    let lying = other.replace("038HEXYE9M000", victim);
    for name in ["aaa", "zzz"] {
        std::fs::write(tmp.path().join(format!("{name}.eventlog")), &lying).unwrap();
    }
    let mut server = Proc::history(tmp.path(), &["--no-history-index"]);
    server.wait_ready().await;
    let ids = job_ids(&server).await;
    // The six real jobs, each once, the victim as its own log says.
    assert_eq!(ids.len(), 6, "{ids:?}");
    let (status, _, served) = get(&server.url(&format!("/api/job/{victim}"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8_lossy(&served),
        String::from_utf8_lossy(&truth)
    );
    // Each liar is counted as unreadable, as any log that cannot be
    // served, and is listed under no name.
    let (_, _, metrics) = get(&server.url("/api/metrics")).await;
    assert_eq!(
        counter(
            &String::from_utf8_lossy(&metrics),
            "ballista_job_history_unreadable_logs_total"
        ),
        2
    );
    for name in ["aaa", "zzz"] {
        let (status, _, _) = get(&server.url(&format!("/api/job/{name}"))).await;
        assert_eq!(status, 404);
    }
    server.terminate();
}

/// Opens a connection to `server` and sends `bytes` (half a request).
async fn half_request(server: &Proc, bytes: &[u8]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// Whether the server closes `stream` within `within` (an end of input
/// or a reset; any answer bytes before it are read and dropped).
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_clients_are_cut_off_and_cannot_use_up_the_connections() {
    let _quiet = HEAVY.read().await;
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(
        tmp.path(),
        &[
            "--http-header-timeout-seconds",
            "1",
            "--http-max-connections",
            "40",
            // One address plays every client here: its share is the port.
            "--http-max-connections-per-client",
            "40",
        ],
    );
    server.wait_healthy().await;
    // Twenty clients that send half a request header and wait.
    let mut slow = Vec::new();
    for _ in 0..20 {
        slow.push(half_request(&server, b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n").await);
    }
    healthy_at_once(&server).await;
    for stream in &mut slow {
        assert!(
            closed_within(stream, Duration::from_secs(5)).await,
            "a half-sent header kept its connection"
        );
    }
    // An idle keep-alive connection is closed as well, once answered.
    let mut idle = half_request(&server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    assert!(closed_within(&mut idle, Duration::from_secs(5)).await);

    // More connections than the cap: those over it are closed at once.
    let metrics = || async {
        let (_, _, body) = get(&server.url("/api/metrics")).await;
        counter(
            &String::from_utf8_lossy(&body),
            "ballista_job_history_connections_refused_total",
        )
    };
    let refused_before = metrics().await;
    let mut held = Vec::new();
    for _ in 0..50 {
        held.push(half_request(&server, b"GET / HTTP/1.1\r\n").await);
    }
    // All at once, well within the header timeout: those over the cap
    // are closed already, the others are held.
    let cut = futures::future::join_all(
        held.iter_mut()
            .map(|s| closed_within(s, Duration::from_millis(300))),
    )
    .await;
    let cut: Vec<usize> = (0..cut.len()).filter(|&i| cut[i]).collect();
    assert!(
        (10..=12).contains(&cut.len()) && cut.iter().all(|&i| i >= 38),
        "closed at once: {cut:?}"
    );
    // The others are closed by the header timeout; the server counted
    // each one it closed at once.
    for stream in &mut held {
        assert!(closed_within(stream, Duration::from_secs(5)).await);
    }
    assert_eq!(metrics().await - refused_before, cut.len() as u64);
    healthy_at_once(&server).await;
    server.terminate();
}

/// Gives the upstream log of `id` in `dir` a physical plan of `lines`
/// lines of `word` (upstream's logs have no footer: the line is rewritten
/// whole).
fn long_plan(dir: &Path, id: &str, word: &str, lines: usize) {
    let path = dir.join(format!("{id}.eventlog"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut all: Vec<String> = text.lines().map(str::to_string).collect();
    let last = all.last_mut().unwrap();
    let mut end: serde_json::Value = serde_json::from_str(last).unwrap();
    let plan: Vec<String> = (0..lines)
        .map(|i| format!("{word}Exec: step {} of {lines}", (i * 7919) % lines))
        .collect();
    end["data"]["job"]["physical_plan"] = plan.join("\n").into();
    *last = end.to_string();
    std::fs::write(&path, all.join("\n") + "\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn comparing_two_long_unlike_plans_leaves_the_server_answering() {
    let _quiet = HEAVY.read().await;
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let (a, b) = ("038HEXYE9M000", "038HEXYEEG000");
    long_plan(tmp.path(), a, "Left", 5_000);
    long_plan(tmp.path(), b, "Right", 5_000);
    let mut server = Proc::history(tmp.path(), &[]);
    // Ready: the first index pass is done, so both logs are listed.
    server.wait_ready().await;
    let url = server.url(&format!("/api/compare?a={a}&b={b}"));
    let compares = futures::future::join_all((0..4).map(|_| get_json(&url)));
    let compares = healthy_during(&server, 5, compares).await;
    for c in compares {
        let diff = c["plan_diff"].as_str().unwrap();
        assert!(
            diff.starts_with(&format!("--- {a}\n+++ {b}\n")),
            "{}",
            &diff[..200.min(diff.len())]
        );
        assert!(diff.contains("\n-LeftExec: step ") && diff.contains("\n+RightExec: step "));
    }
    server.terminate();
}

/// Every file under `dir`, however deep.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_columnar_history_goes_nowhere_another_user_prepared() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    crate::history::copy_fixtures(&logs);
    // The shared temporary directory, where another user made the folder
    // the history's files once went to a link to a folder of theirs.
    let shared = tmp.path().join("tmp");
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&shared).unwrap();
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::symlink(&theirs, shared.join(".ballista-job-history.columnar")).unwrap();
    let dir = logs.to_str().unwrap();
    let mut server = Proc::spawn_full(
        free_port(),
        &[],
        &[
            "--history-only",
            "--event-log-dir",
            dir,
            "--no-history-index",
        ],
        &[("TMPDIR", shared.to_str().unwrap())],
        None,
    );
    server.wait_healthy().await;
    let rows = crate::sql::sql(&server, "SELECT count(*) AS n FROM tasks").await;
    assert_eq!(rows[0]["n"], 23, "the fixtures' task records");
    assert!(
        files_under(&theirs).is_empty(),
        "{:?}",
        files_under(&theirs)
    );
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_root, ignore = "giving a folder to another user (chown) needs root")]
async fn a_default_spool_another_user_made_first_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("tmp");
    std::fs::create_dir(&shared).unwrap();
    let planted = shared.join("ballista-job-history-spool");
    std::fs::create_dir(&planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let port = free_port().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args([
            "--bind-host",
            "127.0.0.1",
            "--bind-port",
            &port,
            "--event-log-dir",
            "s3://history/logs",
            "--object-store-endpoint",
            "http://127.0.0.1:9",
            "--object-store-allow-http",
        ])
        .env("TMPDIR", &shared)
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "x")
        .env("AWS_REGION", "us-east-1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started: {said}");
    assert!(said.contains("belongs to user 65534"), "{said}");
    assert!(said.contains("--event-log-spool"), "{said}");
    // Nothing was written into the other user's folder.
    assert!(files_under(&planted).is_empty());
}

/// Rewrites the terminal record of the upstream log `path` with `edit`
/// (upstream's logs have no footer: the line is rewritten whole).
fn edit_job_end(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut all: Vec<String> = text.lines().map(str::to_string).collect();
    let last = all.last_mut().unwrap();
    let mut end: serde_json::Value = serde_json::from_str(last).unwrap();
    edit(&mut end["data"]);
    *last = end.to_string();
    std::fs::write(path, all.join("\n") + "\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_claiming_to_end_in_2200_cannot_make_retention_delete_real_ones() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let real = {
        let mut ids: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|n| n.strip_suffix(".eventlog").map(str::to_string))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(real.len(), 6);
    // Three copies of a real log under ids of their own, claiming to end
    // in 2200, written (so the file system says) in 1970, before the
    // oldest real one ended.
    let source = std::fs::read_to_string(tmp.path().join("038HEXYE9M000.eventlog")).unwrap();
    let year_2200 = 7_258_118_400_000u64;
    let year_1970 = std::time::UNIX_EPOCH + Duration::from_secs(1);
    for i in 0..3 {
        let id = format!("038HEXYL1AR0{i}");
        let path = tmp.path().join(format!("{id}.eventlog"));
        std::fs::write(&path, source.replace("038HEXYE9M000", &id)).unwrap();
        edit_job_end(&path, |end| {
            end["completed_at"] = year_2200.into();
            end["index"]["end_time"] = year_2200.into();
        });
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(year_1970)
            .unwrap();
    }
    let mut server = Proc::history(
        tmp.path(),
        &[
            "--retain-max-jobs",
            "6",
            "--retain-interval",
            "1s",
            "--update-interval-seconds",
            "1",
        ],
    );
    server.wait_healthy().await;
    eventually("the cleaner keeps six logs", || async {
        job_ids(&server).await.len() == 6
    })
    .await;
    let mut kept = job_ids(&server).await;
    kept.sort();
    assert_eq!(kept, real, "the real jobs stay; the liars went first");
    for i in 0..3 {
        assert!(
            !tmp.path()
                .join(format!("038HEXYL1AR0{i}.eventlog"))
                .exists()
        );
    }
    server.terminate();
}

/// `GET url` with `Host: host`: the status and body.
async fn get_as_host(url: &str, host: &str, bearer: Option<&str>) -> (u16, String) {
    let mut request = http_client().get(url).header(reqwest::header::HOST, host);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_of_another_host_name_cannot_read_the_history_by_dns_rebinding() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(
        tmp.path(),
        &["--allowed-hosts", "history.example,.corp.example"],
    );
    server.wait_healthy().await;
    let url = server.url("/api/jobs");
    let port = server.port;
    // A rebound name: refused, and told what to do.
    for host in [
        format!("evil.example:{port}"),
        "history.example.evil.example".into(),
    ] {
        let (status, body) = get_as_host(&url, &host, None).await;
        assert_eq!(status, 403, "{host}: {body}");
        assert!(body.contains("--allowed-hosts"), "{body}");
        let (status, _) = get_as_host(&server.url("/"), &host, None).await;
        assert_eq!(status, 403, "the pages too");
    }
    // This server's names: answered.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "history.example".into(),
        format!("a.corp.example:{port}"),
    ] {
        let (status, body) = get_as_host(&url, &host, None).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    // Probes are answered whatever name they use.
    let (status, _) = get_as_host(&server.url("/healthz"), "evil.example", None).await;
    assert_eq!(status, 200);
    server.terminate();

    // With a token, a rebound page has nothing to send: every name is
    // answered (to the token's holder), and --allowed-hosts is refused.
    let token = tmp.path().join("token");
    std::fs::write(&token, "tok-123\n").unwrap();
    let token_arg = token.to_str().unwrap();
    let mut guarded = Proc::history(tmp.path(), &["--api-token-file", token_arg]);
    guarded.wait_healthy().await;
    let url = guarded.url("/api/jobs");
    assert_eq!(
        get_as_host(&url, "evil.example", Some("tok-123")).await.0,
        200
    );
    assert_eq!(get_as_host(&url, "evil.example", None).await.0, 401);
    guarded.terminate();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
        .args([
            "--history-only",
            "--event-log-dir",
            tmp.path().to_str().unwrap(),
        ])
        .args([
            "--api-token-file",
            token_arg,
            "--allowed-hosts",
            "x.example",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--allowed-hosts") && said.contains("--api-token-file"),
        "{said}"
    );

    // Without --event-log-dir the port is upstream's: any name.
    let mut upstream = Proc::spawn(&["--scheduler-policy", "pull-staged"]);
    upstream.wait_healthy().await;
    let (status, body) = get_as_host(&upstream.url("/api/state"), "evil.example", None).await;
    assert_eq!(status, 200, "{body}");
    upstream.terminate();
}

/// A client of `server` whose connections come from `from` (another
/// address of the loopback network: another client to the server).
fn client_from(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(from))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sign_in_cookie_is_a_session_and_wrong_tokens_never_lock_out_the_right_one() {
    let _quiet = HEAVY.read().await;
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let token_file = tmp.path().join("token");
    let token = "Sesame-0451";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let mut server = Proc::history(
        tmp.path(),
        &["--api-token-file", token_file.to_str().unwrap()],
    );
    server.wait_healthy().await;
    let sign_in = |client: reqwest::Client, typed: &str, https: bool| {
        let url = server.url("/ui/login");
        let form = [("token", typed.to_string()), ("next", "/".to_string())];
        async move {
            let mut request = client.post(url).form(&form);
            if https {
                request = request.header("x-forwarded-proto", "https");
            }
            request.send().await.unwrap()
        }
    };

    // A right token opens a session: the cookie holds a random id, not
    // the token (in any spelling), and opens the pages.
    let alice = client_from([127, 0, 0, 2]);
    let r = sign_in(alice.clone(), token, false).await;
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!set.contains(token) && !set.contains(&hex), "{set}");
    assert!(
        set.starts_with("ballista_session=") && set.contains("HttpOnly"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_string();
    let page = |cookie: String| {
        let url = server.url("/ui/job/golden-v1");
        let alice = alice.clone();
        async move {
            alice
                .get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(page(cookie.clone()).await, 200);
    assert_eq!(
        page("ballista_session=00ff".into()).await,
        303,
        "a made-up id is nobody's"
    );
    // Forgetting the token ends the session on the server: the old cookie
    // opens nothing any more.
    let out = alice
        .post(server.url("/ui/logout"))
        .header("cookie", cookie.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert_eq!(page(cookie).await, 303);
    // Over HTTPS (a TLS proxy says so): Secure, under a __Host- name.
    let r = sign_in(alice.clone(), token, true).await;
    let set = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        set.starts_with("__Host-ballista_session=") && set.contains("Secure"),
        "{set}"
    );

    // Wrong tokens from one client are refused (past five, slowly); the
    // right token from the same address is let in at once, and another
    // client is not slowed.
    let mallory = client_from([127, 0, 0, 3]);
    for _ in 0..6 {
        assert_eq!(sign_in(mallory.clone(), "guess", false).await.status(), 401);
    }
    let r = sign_in(mallory.clone(), token, false).await;
    assert_eq!(r.status(), 303);
    assert_eq!(sign_in(alice.clone(), token, false).await.status(), 303);
    // The same for bearer tokens on the API.
    let eve = client_from([127, 0, 0, 4]);
    let api = |client: reqwest::Client, bearer: &str| {
        let url = server.url("/api/jobs");
        let bearer = bearer.to_string();
        async move {
            let r = client.get(url).bearer_auth(bearer).send().await.unwrap();
            r.status().as_u16()
        }
    };
    for _ in 0..6 {
        assert_eq!(api(eve.clone(), "guess").await, 401);
    }
    assert_eq!(api(eve.clone(), token).await, 200);
    assert_eq!(api(alice.clone(), token).await, 200);
    healthy_at_once(&server).await;
    server.terminate();
}

/// A copy of the upstream log `038HEXYE9M000` as job `id`, with `tasks`
/// task records that all ran at the same moment on one executor, a DOT of
/// `stages` chained stages, and a job name of `name_len` letters.
fn wide_log(dir: &Path, id: &str, tasks: usize, stages: usize, name_len: usize) {
    let source = std::fs::read_to_string(dir.join("038HEXYE9M000.eventlog")).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    let task: serde_json::Value =
        serde_json::from_str(lines.iter().find(|l| l.contains("\"TaskEnd\"")).unwrap()).unwrap();
    let mut out = vec![lines[0].replace("038HEXYE9M000", id)];
    for i in 0..tasks {
        let mut t = task.clone();
        t["data"]["task_id"] = i.into();
        out.push(t.to_string());
    }
    out.push(lines.last().unwrap().replace("038HEXYE9M000", id));
    let path = dir.join(format!("{id}.eventlog"));
    std::fs::write(&path, out.join("\n") + "\n").unwrap();
    let mut dot = String::from("digraph G {\n");
    for i in 0..stages {
        dot.push_str(&format!(
            "subgraph cluster{i} {{ label = \"Stage {i} [Successful]\"; s{i} [shape=box, label=\"ShuffleWriterExec\"] }}\n"
        ));
    }
    for i in 1..stages {
        dot.push_str(&format!("s{} -> s{i}\n", i - 1));
    }
    dot.push('}');
    edit_job_end(&path, |end| {
        end["dot"] = dot.into();
        end["index"]["job_name"] = "a".repeat(name_len).into();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wide_timeline_a_huge_stage_graph_and_a_long_name_search_leave_the_server_answering() {
    let _quiet = HEAVY.read().await;
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    wide_log(tmp.path(), "038HEXYW1DE00", 150_000, 40_000, 1_000_000);
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_healthy().await;
    eventually("the wide log is indexed", || async {
        job_ids(&server).await.len() == 7
    })
    .await;
    let client = http_client();
    let ask = |path: String| {
        let request = client
            .get(server.url(&path))
            .timeout(Duration::from_secs(60))
            .send();
        async move {
            let r = request.await.expect("answered within a minute");
            let status = r.status().as_u16();
            (status, r.text().await.unwrap())
        }
    };
    let term = format!("{}b", "a".repeat(60_000));
    let attacks = async {
        let svg = ask("/api/job/038HEXYW1DE00/timeline.svg".into());
        let page = ask("/ui/job/038HEXYW1DE00".into());
        let long = ask(format!("/api/jobs?name={term}"));
        let short = ask(format!("/api/jobs?name={}", &term[59_800..]));
        tokio::join!(svg, page, long, short)
    };
    let (svg, page, long, short) = healthy_during(&server, 10, attacks).await;
    // One bar per task, each in a row of its own (they all overlap).
    assert_eq!(svg.0, 200);
    assert_eq!(svg.1.matches("<rect class=\"task ").count(), 150_000);
    // The graph is refused with a reason; the page is there.
    assert_eq!(page.0, 200);
    assert!(
        page.1.contains("40000 boxes, more than the 2000"),
        "the page says why"
    );
    // A term over the cap is refused at once; one under it searches.
    assert_eq!(long.0, 400, "{}", &long.1[..200.min(long.1.len())]);
    assert!(long.1.contains("at most 256 characters"));
    assert_eq!(short.0, 200);
    let found: serde_json::Value = serde_json::from_str(&short.1).unwrap();
    assert_eq!(found.as_array().map(Vec::len), Some(0), "no name ends in b");
    let (status, body) = ask(format!("/api/jobs?name={}", "A".repeat(256))).await;
    assert_eq!(status, 200);
    let found: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["job_id"], "038HEXYW1DE00");
    server.terminate();
}
