//! Crashes and backpressure.

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_job_leaves_running_files_and_whole_completed_logs() {
    let Cluster {
        tmp: _tmp,
        logs,
        mut sched,
        ctx,
        ..
    } = Cluster::start(&[]).await;

    let mut finished = Vec::new();
    for sql in [
        "SELECT count(*) FROM t",
        "SELECT k, max(v) FROM t GROUP BY k",
        "SELECT min(s) FROM t",
    ] {
        let (id, result) = run_job(&sched, &ctx, sql).await;
        assert!(result.is_ok());
        finished.push(id);
    }
    let before = job_ids(&sched).await;
    let heavy = spawn_heavy(&ctx);
    let running: String = wait_for("the heavy job's log is on disk", || {
        let before = before.clone();
        let logs = logs.clone();
        let sched = &sched;
        async move {
            let id = job_ids(sched)
                .await
                .into_iter()
                .find(|j| !before.contains(j))?;
            let path = logs.join(format!("{id}.eventlog.running"));
            (std::fs::metadata(&path).ok()?.len() > 0).then_some(id)
        }
    })
    .await;
    sched.kill();
    heavy.abort();

    for id in &finished {
        assert_whole(&completed_log(&logs, id).await);
        assert!(!logs.join(format!("{id}.eventlog.running")).exists());
    }
    assert!(!logs.join(format!("{running}.eventlog")).exists());
    let partial =
        std::fs::read_to_string(logs.join(format!("{running}.eventlog.running"))).unwrap();
    assert!(partial.starts_with("{\"ev\":\"JobStart\""));

    // A restarted scheduler on the same directory lists the finished jobs,
    // and not the one it never finished.
    let mut again = Proc::scheduler(&logs, &[]);
    again.wait_healthy().await;
    eventually("the finished jobs are listed after the restart", || async {
        let ids = job_ids(&again).await;
        finished.iter().all(|f| ids.contains(f))
    })
    .await;
    assert!(!job_ids(&again).await.contains(&running));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_queue_drops_and_counts_progress_but_every_job_ends() {
    // A queue of zero keeps no progress record at all: every task report is
    // dropped, deterministically.
    let Cluster {
        tmp: _tmp,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&["--event-log-queue-capacity", "0"]).await;
    let mut total_dropped = 0;
    for _ in 0..3 {
        let (id, result) = run_job(&sched, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
        assert_eq!(result, Ok(100));
        let lines = completed_log(&logs, &id).await;
        assert_whole(&lines);
        assert!(!kinds(&lines).contains(&"TaskEnd".to_string()));
        let dropped = job_end(&lines)["dropped_records"].as_u64().unwrap();
        let tasks: usize = serde_json::from_str::<serde_json::Value>(&raw_field(&lines, "stages"))
            .unwrap()["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["tasks"].as_array().unwrap().len())
            .sum();
        assert_eq!(
            dropped as usize, tasks,
            "every finished task was counted as dropped"
        );
        total_dropped += dropped;
    }
    let metrics = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("ballista_job_history_dropped_records_total "))
        .expect("the drop counter is exported");
    let counted: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(counted, total_dropped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unusable_log_directory_never_stops_scheduling() {
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 500);
    // The log directory's parent is a regular file: nothing can be created.
    let blocker = tmp.path().join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let logs = blocker.join("logs");
    let mut sched = Proc::scheduler(&logs, &[]);
    sched.wait_healthy().await;
    start_executor(sched.port).await;
    let ctx = client(sched.port, &data).await;
    for _ in 0..3 {
        let (_, result) = run_job(&sched, &ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
        assert_eq!(result, Ok(100), "jobs complete for their client");
    }
    let errors: u64 = wait_for("the failures are counted", || async {
        let metrics = String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap();
        let n = counter(&metrics, "ballista_job_history_write_errors_total");
        (n >= 3).then_some(n)
    })
    .await;
    assert!(errors >= 3);
    // The live scheduler still serves its jobs.
    assert_eq!(job_ids(&sched).await.len(), 3);
}

/// What a directory holds after a kill: every file parsed.
#[derive(Default)]
struct AfterKill {
    /// Job name to job id, from completed logs.
    completed: std::collections::HashMap<String, String>,
    /// Job names with only a `.running` log.
    running: std::collections::HashSet<String>,
}

/// Checks every log in `dir`: a completed log parses line by line and ends
/// with its terminal record; no job has both a completed and a running log.
fn inspect(dir: &std::path::Path) -> AfterKill {
    let mut out = AfterKill::default();
    let mut completed_ids = std::collections::HashSet::new();
    let mut running_ids = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(id) = name.strip_suffix(".eventlog") {
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            for line in &lines {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("{name} is torn: {e}: {line}"));
            }
            assert_whole(&lines);
            let end = job_end(&lines);
            let job_name = end["index"]["job_name"].as_str().unwrap().to_string();
            out.completed.insert(job_name, id.to_string());
            completed_ids.insert(id.to_string());
        } else if let Some(id) = name.strip_suffix(".eventlog.running") {
            running_ids.push(id.to_string());
            // A running log's complete lines are whole records.
            if let Some(first) = text.lines().next().filter(|_| text.contains('\n')) {
                let start: serde_json::Value = serde_json::from_str(first)
                    .unwrap_or_else(|e| panic!("{name}: first line {e}"));
                assert_eq!(start["ev"], "JobStart", "{name}");
                let job_name = start["data"]["job_name"].as_str().unwrap_or("");
                out.running.insert(job_name.to_string());
            }
        }
    }
    for id in running_ids {
        assert!(
            !completed_ids.contains(&id),
            "{id} has both a completed and a running log"
        );
    }
    out
}

/// A kill-and-restart loop: a scheduler with three real executors runs short
/// jobs back to back (eight clients at once) and is SIGKILLed at random
/// moments, then restarted on the same directory and port. After every
/// kill: no completed log is torn, no job has two logs, every job a client
/// saw finish has its completed log (or, if it finished within the last
/// moments before the kill, its `.running` log: the record is written after
/// the client is answered, never before), and the restarted scheduler lists
/// every completed log and runs new jobs.
///
/// `CRASH_KILLS` sets the number of kills (default 4); the reported run
/// uses 50.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_sigkills_never_tear_a_log_or_lose_a_finished_job() {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    let kills: usize = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let mut rng = seed;
    let mut next = move |below: u64| {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (rng >> 33) % below
    };
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 200);
    let port = free_port();
    let mut sched = Proc::scheduler_on(port, &logs, &[]);
    sched.wait_healthy().await;
    for _ in 0..3 {
        start_executor(port).await;
    }

    let finished: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (mut total_finished, mut in_window, mut widest) = (0, 0, Duration::ZERO);
    for round in 0..kills {
        let runners: Vec<_> = (0..8)
            .map(|_| {
                let (finished, counter, data) = (finished.clone(), counter.clone(), data.clone());
                tokio::spawn(async move {
                    loop {
                        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let name = format!("crash-{n}");
                        let began = Instant::now();
                        let ctx = client_with(port, &data, &[("ballista.job.name", &name)]).await;
                        let ok = async {
                            ctx.sql("SELECT k, count(*) FROM t GROUP BY k")
                                .await?
                                .collect()
                                .await
                        }
                        .await;
                        match ok {
                            Ok(_) => {
                                if std::env::var("CRASH_DEBUG").is_ok() {
                                    eprintln!("{name}: {:?}", began.elapsed());
                                }
                                finished.lock().unwrap().push((name, Instant::now()))
                            }
                            Err(e) if std::env::var("CRASH_DEBUG").is_ok() => {
                                eprintln!("{name}: {e}")
                            }
                            Err(_) => {}
                        }
                    }
                })
            })
            .collect();
        // Once a job of this round has finished, kill at a random moment
        // within the next `CRASH_ROUND_MS` (the sleep picks the moment; it
        // waits for nothing).
        wait_for("a job finishes in this round", || {
            let finished = finished.clone();
            async move { (!finished.lock().unwrap().is_empty()).then_some(()) }
        })
        .await;
        let round_ms: u64 = std::env::var("CRASH_ROUND_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000);
        tokio::time::sleep(Duration::from_millis(next(round_ms))).await;
        sched.kill();
        let killed_at = Instant::now();
        if std::env::var("CRASH_DEBUG").is_ok() {
            eprintln!("kill {round}");
        }
        for r in &runners {
            r.abort();
        }
        let seen = inspect(&logs);
        for (name, at) in finished.lock().unwrap().drain(..) {
            total_finished += 1;
            if seen.completed.contains_key(&name) {
                continue;
            }
            let gap = killed_at.saturating_duration_since(at);
            assert!(
                seen.running.contains(&name) && gap < Duration::from_secs(2),
                "round {round}: {name} finished {gap:?} before the kill and has no completed log"
            );
            in_window += 1;
            widest = widest.max(gap);
        }
        sched = Proc::scheduler_on(port, &logs, &["--update-interval-seconds", "1"]);
        sched.wait_healthy().await;
        let want: Vec<String> = seen.completed.values().cloned().collect();
        eventually(
            "the restarted scheduler lists every completed log",
            || async {
                let listed = job_ids(&sched).await;
                want.iter().all(|id| listed.contains(id))
            },
        )
        .await;
    }
    // The last restart still runs jobs.
    let ctx = client_with(port, &data, &[("ballista.job.name", "after")]).await;
    let rows: usize = ctx
        .sql("SELECT k, count(*) FROM t GROUP BY k")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(rows, 100);
    let completed = inspect(&logs).completed.len();
    eprintln!(
        "crash harness: {kills} kills (seed {seed}), {total_finished} jobs finished for their \
         clients, {completed} completed logs; {in_window} finished within {widest:?} before a \
         kill and were left running"
    );
    assert!(total_finished >= kills, "a job finished in every round");
}
