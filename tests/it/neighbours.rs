//! Hostile neighbours: what changes in the directory after it was
//! indexed, against the real binary. A log swapped for a link to another
//! file or for a FIFO, and a directory that cannot be listed for a while.

use crate::harness::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// Replaces `path` at once (a rename over it) with what `make` creates.
fn swap(path: &Path, make: impl FnOnce(&Path)) {
    let aside = path.with_extension("swap");
    make(&aside);
    std::fs::rename(&aside, path).unwrap();
}

/// `/healthz` answered within 100 ms, three times in a row.
async fn healthy_at_once(server: &Proc) {
    let client = http_client();
    for _ in 0..3 {
        let start = Instant::now();
        let r = client
            .get(server.url("/healthz"))
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
    again.wait_healthy().await;
    assert_eq!(job_ids(&again).await.len(), 5);
    again.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raw_answers_are_never_sniffed_or_run_as_pages() {
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_healthy().await;
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
    server.wait_healthy().await;
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
    server.wait_healthy().await;
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
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let mut server = Proc::history(
        tmp.path(),
        &[
            "--http-header-timeout-seconds",
            "1",
            "--http-max-connections",
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
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let (a, b) = ("038HEXYE9M000", "038HEXYEEG000");
    long_plan(tmp.path(), a, "Left", 5_000);
    long_plan(tmp.path(), b, "Right", 5_000);
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_healthy().await;
    let url = server.url(&format!("/api/compare?a={a}&b={b}"));
    let compares = futures::future::join_all((0..4).map(|_| get_json(&url)));
    let health = async {
        for _ in 0..5 {
            healthy_at_once(&server).await;
        }
    };
    let (compares, ()) = tokio::join!(compares, health);
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
