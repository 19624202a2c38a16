//! Files the directory can plant: whoever can write the log directory can
//! put a FIFO, a link or a twin where the server expects its own files.
//! Each test plants one and checks that the real binary neither hangs nor
//! loses a job, nor reads what it must not.

use crate::harness::*;
use crate::history::copy_fixtures;
use crate::neighbours::{healthy_during, swap};
use std::path::Path;
use std::time::Duration;

/// The columnar folder of a directory served with its default index.
const COLUMNAR: &str = ".ballista-job-history.columnar";

/// A FIFO at `path` (nothing ever opens its other end).
fn fifo(path: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, rustix::fs::Mode::from(0o600)).unwrap();
}

/// `sql` answered within 30 s, as JSON rows; a hang or another status
/// fails the test.
async fn sql_in_time(server: &Proc, sql: &str) -> Vec<serde_json::Value> {
    let r = http_client()
        .post(server.url("/api/sql"))
        .header("content-type", "application/sql")
        .timeout(Duration::from_secs(30))
        .body(sql.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{sql}: no answer ({e})"));
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{sql}: {body}");
    serde_json::from_str::<serde_json::Value>(&body)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The number a one-row, one-column answer holds.
async fn one_number(server: &Proc, sql: &str) -> i64 {
    let rows = sql_in_time(server, sql).await;
    rows[0]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .as_i64()
        .unwrap()
}

/// Task records in the logs of `dir`, counted line by line.
fn task_records(dir: &Path) -> i64 {
    crate::sql::task_lines(dir).values().sum()
}

/// The value of `name` in `/api/metrics`.
async fn metric(server: &Proc, name: &str) -> u64 {
    let (_, _, body) = get(&server.url("/api/metrics")).await;
    counter(&String::from_utf8_lossy(&body), name)
}

/// Waits until the server has passed over its directory `n` more times.
async fn rescans(server: &Proc, n: u64) {
    let start = metric(server, "ballista_job_history_rescans_total").await;
    eventually("the server rescans its directory", || async {
        metric(server, "ballista_job_history_rescans_total").await >= start + n
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fifo_planted_as_a_columnar_segment_hangs_no_query() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &["--update-interval-seconds", "1"]);
    server.wait_ready().await;
    let tasks = task_records(tmp.path());
    assert_eq!(
        one_number(&server, "SELECT count(*) FROM tasks").await,
        tasks
    );
    // Every segment of every table becomes a FIFO no one writes to.
    for table in ["stages", "tasks", "operators"] {
        for entry in std::fs::read_dir(tmp.path().join(COLUMNAR).join(table)).unwrap() {
            swap(&entry.unwrap().path(), fifo);
        }
    }
    healthy_during(&server, 3, async {
        assert_eq!(one_number(&server, "SELECT 1").await, 1);
        // The segments' jobs are read from their logs again: none lost.
        assert_eq!(
            one_number(&server, "SELECT count(*) FROM tasks").await,
            tasks
        );
    })
    .await;
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fifo_planted_as_the_persistent_index_hides_no_job() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    fifo(&tmp.path().join(".ballista-job-history.index"));
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    assert_eq!(
        job_ids(&server).await.len(),
        crate::sql::task_lines(tmp.path()).len()
    );
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fifo_planted_as_the_columnar_manifest_leaves_health_and_sql_answering() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    std::fs::create_dir_all(tmp.path().join(COLUMNAR)).unwrap();
    fifo(&tmp.path().join(COLUMNAR).join("manifest.json"));
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    let tasks = task_records(tmp.path());
    healthy_during(&server, 3, async {
        assert_eq!(
            one_number(&server, "SELECT count(*) FROM tasks").await,
            tasks
        );
    })
    .await;
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_index_linked_to_a_huge_file_is_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    // 2 GiB of nothing (a sparse file: no disk used), and the index a link
    // to it.
    let huge = tmp.path().join("huge");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    std::os::unix::fs::symlink(&huge, tmp.path().join(".ballista-job-history.index")).unwrap();
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    assert_eq!(
        job_ids(&server).await.len(),
        crate::sql::task_lines(tmp.path()).len()
    );
    let peak_mib = server.peak_rss_kib() / 1024;
    assert!(peak_mib < 512, "the server holds {peak_mib} MiB");
    // The link is not written through either: the huge file is untouched.
    assert_eq!(std::fs::metadata(&huge).unwrap().len(), 2 << 30);
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zst_twin_planted_beside_a_log_never_flips_the_job() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let id = "038HEXYE9M000";
    let plain = std::fs::read_to_string(tmp.path().join(format!("{id}.eventlog"))).unwrap();
    let twin = plain.replacen(r#""job_name":"""#, r#""job_name":"the twin""#, 1);
    assert_ne!(twin, plain);
    std::fs::write(
        tmp.path().join(format!("{id}.eventlog.zst")),
        zstd::encode_all(twin.as_bytes(), 3).unwrap(),
    )
    .unwrap();
    let mut server = Proc::history(tmp.path(), &["--update-interval-seconds", "1"]);
    server.wait_ready().await;
    let name = || async {
        let job = get_json(&server.url(&format!("/api/job/{id}"))).await;
        job["job_name"].as_str().unwrap_or_default().to_string()
    };
    // The plain log is the job's, across rescans, whatever the listing order.
    for _ in 0..5 {
        assert_eq!(name().await, "", "the job flipped to its twin");
        let listed = job_ids(&server).await;
        assert_eq!(listed.iter().filter(|j| *j == id).count(), 1);
        rescans(&server, 1).await;
    }
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_unreadable_for_a_moment_is_read_again_into_the_tables() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let id = "038HEXYE9M000";
    let path = tmp.path().join(format!("{id}.eventlog"));
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    let aside = tmp.path().join("aside");
    std::fs::copy(&path, &aside).unwrap();
    // The list pinned to the first pass: the index never looks again, so
    // the log is, to it, the file it indexed throughout.
    let mut server = Proc::history(tmp.path(), &["--update-interval-seconds", "0"]);
    server.wait_ready().await;
    // Unreadable for a moment: a FIFO in its place when the tables are
    // first built.
    swap(&path, fifo);
    let of_job = format!("SELECT count(*) FROM tasks WHERE job_id = '{id}'");
    assert_eq!(one_number(&server, &of_job).await, 0);
    // The same file back, with its stamp (size and modification time).
    std::fs::OpenOptions::new()
        .write(true)
        .open(&aside)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    std::fs::rename(&aside, &path).unwrap();
    // Its tasks join the tables without a restart.
    let tasks = crate::sql::task_lines(tmp.path())[id];
    assert!(tasks > 0);
    eventually("the job's tasks are in the tables", || async {
        one_number(&server, &of_job).await == tasks
    })
    .await;
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_and_claimed_ids_with_line_breaks_forge_no_line_of_the_servers_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    copy_fixtures(&dir);
    // A file named with a line break, and a log claiming an id with one.
    std::fs::write(
        dir.join("evil\nFORGED-NAME ERROR all logs deleted\r.eventlog"),
        "not a log",
    )
    .unwrap();
    let log = std::fs::read_to_string(dir.join("038HEXYE9M000.eventlog")).unwrap();
    std::fs::write(
        dir.join("claims.eventlog"),
        log.replace(
            "038HEXYE9M000",
            r"other\r\nFORGED-CLAIM WARN token accepted",
        ),
    )
    .unwrap();
    let out = tmp.path().join("server.log");
    let mut server = Proc::spawn_logged(
        free_port(),
        &["--history-only", "--event-log-dir", dir.to_str().unwrap()],
        Some(&out),
    );
    server.wait_ready().await;
    server.terminate();
    let said = std::fs::read_to_string(&out).unwrap();
    // Both were logged, each on its own line, escaped.
    assert!(
        said.contains("FORGED-NAME") && said.contains("FORGED-CLAIM"),
        "{said}"
    );
    for line in said.lines() {
        assert!(
            !line.trim_start().starts_with("FORGED"),
            "a forged line: {line:?}\n{said}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_jobs_tables_file_swapped_or_its_folder_planted_loses_no_job() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixtures(tmp.path());
    let mut server = Proc::history(tmp.path(), &[]);
    server.wait_ready().await;
    // The oracle: the logs' own lines, counted here.
    let jobs = crate::sql::task_lines(tmp.path()).len() as i64;
    let tasks = task_records(tmp.path());
    let asked = "SELECT count(*) + 1000000 * coalesce(sum(tasks), 0) FROM jobs";
    let whole = jobs + 1_000_000 * tasks;
    assert_eq!(one_number(&server, asked).await, whole);
    // The completed jobs' rows are a file the worker reads.
    let folder = tmp.path().join(COLUMNAR).join("sql-jobs");
    let files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    // Swapped for a FIFO no one writes to: no hang, no job lost.
    swap(&files[0], fifo);
    healthy_during(&server, 3, async {
        assert_eq!(one_number(&server, asked).await, whole);
    })
    .await;
    // The folder replaced by a link elsewhere: the rows go over the pipe;
    // nothing is written through the link.
    std::fs::remove_dir_all(&folder).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &folder).unwrap();
    assert_eq!(one_number(&server, asked).await, whole);
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    server.terminate();
}
