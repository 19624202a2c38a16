//! The live scheduler never forgets: cleanup, restarts, and live jobs.

use crate::harness::*;
use ballista_api_types::dto::JobResponse;
use datafusion::prelude::SessionContext;

const FROM_LOG: &str = bjh_serving::source::FROM_LOG_HEADER;

async fn from_log(url: &str) -> Option<bool> {
    let r = http_client().get(url).send().await.ok()?;
    (r.status() == 200).then(|| r.headers().contains_key(FROM_LOG))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finished_jobs_stay_visible_after_cleanup_and_restart() {
    // Long enough for the live answers to be read before the clean-up on a
    // loaded machine (the suite runs beside it).
    let cleanup = ["--finished-job-state-clean-up-interval-seconds", "5"];
    let Cluster {
        tmp: _tmp,
        logs,
        data,
        mut sched,
        ctx,
    } = Cluster::start(&cleanup).await;

    let (job_id, result) = run_job(&sched, &ctx, "SELECT k, avg(v) FROM t GROUP BY k").await;
    assert!(result.is_ok());
    let routes = [
        format!("/api/job/{job_id}"),
        format!("/api/job/{job_id}?plan_format=tree"),
        format!("/api/job/{job_id}/stages"),
        format!("/api/job/{job_id}/stages?plan_format=metrics"),
        format!("/api/job/{job_id}/dot"),
    ];
    // While the scheduler holds the job, the live state answers.
    let mut live = Vec::new();
    for r in &routes {
        assert_eq!(from_log(&sched.url(r)).await, Some(false), "{r}");
        live.push(get(&sched.url(r)).await);
    }
    let live_entry = get_json(&sched.url("/api/jobs")).await;
    completed_log(&logs, &job_id).await;

    // The scheduler forgets the job; the log answers, with the same bytes.
    eventually("the scheduler has cleaned the job up", || async {
        from_log(&sched.url(&format!("/api/job/{job_id}"))).await == Some(true)
    })
    .await;
    for (r, before) in routes.iter().zip(&live) {
        let after = get(&sched.url(r)).await;
        assert_eq!(after.0, 200, "{r}");
        assert_eq!(
            String::from_utf8_lossy(&after.2),
            String::from_utf8_lossy(&before.2),
            "{r} changed after cleanup"
        );
    }
    // The same entry, but for the slot time: stated once the log is
    // complete (`null` in the entry taken before, if it was not yet).
    let without_slots = |mut list: serde_json::Value| {
        let mut busy = Vec::new();
        for job in list.as_array_mut().unwrap() {
            let job = job.as_object_mut().unwrap();
            busy.push(job.remove("busy_slot_ms").unwrap());
            job.remove("failed_slot_ms").unwrap();
        }
        (list, busy)
    };
    let (listed, busy) = without_slots(get_json(&sched.url("/api/jobs")).await);
    let (live_entry, busy_before) = without_slots(live_entry);
    assert_eq!(
        listed, live_entry,
        "the list entry is the same before and after cleanup"
    );
    assert!(busy[0].is_u64(), "{busy:?}");
    assert!(
        busy_before[0].is_null() || busy_before == busy,
        "{busy_before:?}"
    );

    // Cancelling a job known only from history is a conflict.
    let r = http_client()
        .patch(sched.url(&format!("/api/job/{job_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);

    // After a restart, the job is still listed and browsable.
    assert!(sched.terminate().success(), "a clean shutdown on SIGTERM");
    let mut again = Proc::scheduler(&logs, &cleanup);
    again.wait_healthy().await;
    eventually("the restarted scheduler lists the job", || async {
        job_ids(&again).await.contains(&job_id)
    })
    .await;
    let after = get(&again.url(&routes[0])).await;
    assert_eq!(after.2, live[0].2);

    // A running job is listed once, with its live status, next to history.
    start_executor(again.port).await;
    let ctx = client(again.port, &data).await;
    let heavy = spawn_heavy(&ctx);
    let running: String = wait_for("a job is running", || async {
        let jobs: Vec<JobResponse> =
            serde_json::from_slice(&get(&again.url("/api/jobs")).await.2).unwrap();
        jobs.iter()
            .find(|j| j.status == "Running")
            .map(|j| j.job_id.clone())
    })
    .await;
    let jobs: Vec<JobResponse> =
        serde_json::from_slice(&get(&again.url("/api/jobs")).await.2).unwrap();
    assert_eq!(jobs.iter().filter(|j| j.job_id == running).count(), 1);
    assert_eq!(jobs.iter().filter(|j| j.job_id == job_id).count(), 1);
    assert_eq!(jobs[0].job_id, running, "a running job is the newest");
    // Both starts ran under one id, kept in the directory: the job from
    // before the restart (read from its log) and the running one (live).
    let kept = std::fs::read_to_string(logs.join(".ballista-scheduler-id")).unwrap();
    let entries = get_json(&again.url("/api/jobs")).await;
    for id in [&running, &job_id] {
        let entry = entries
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["job_id"] == id.as_str())
            .unwrap();
        assert_eq!(entry["scheduler_id"], kept.trim(), "{id}");
    }
    let state = get_json(&again.url("/api/state")).await;
    assert_eq!(
        state["scheduler_id"],
        kept.trim(),
        "the scheduler runs under it"
    );
    let r = http_client()
        .patch(again.url(&format!("/api/job/{running}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "live jobs can still be cancelled");
    assert!(heavy.await.unwrap().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_an_event_log_dir_nothing_is_recorded_or_remembered() {
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 100);
    let mut sched = Proc::spawn(&[
        "--scheduler-policy",
        "pull-staged",
        "--finished-job-state-clean-up-interval-seconds",
        "1",
    ]);
    sched.wait_healthy().await;
    start_executor(sched.port).await;
    let ctx = client(sched.port, &data).await;
    let (job_id, result) = run_job(&sched, &ctx, "SELECT count(*) FROM t").await;
    assert_eq!(result, Ok(1));
    eventually(
        "the scheduler forgets the job, as upstream's does",
        || async { get(&sched.url(&format!("/api/job/{job_id}"))).await.0 == 404 },
    )
    .await;
    assert!(!job_ids(&sched).await.contains(&job_id));
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        1,
        "only the data file"
    );
}

/// Cleanup after a second, rescans an hour apart.
const QUICK_CLEANUP: [&str; 4] = [
    "--finished-job-state-clean-up-interval-seconds",
    "1",
    "--update-interval-seconds",
    "3600",
];

/// Regression: a scheduler whose cleanup came before its next rescan
/// listed none of its finished jobs, and answered 404 for them, until that
/// rescan. The writer now hands each completed log to the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finished_job_is_listed_and_served_at_every_moment_after_cleanup() {
    let Cluster {
        tmp: _tmp,
        logs: _logs,
        data: _data,
        sched,
        ctx,
    } = Cluster::start(&QUICK_CLEANUP).await;
    listed_and_served_throughout(&sched, &ctx).await;
}

/// Regression: when a log took longer to complete than the scheduler took
/// to forget its job (a slow disk, a long queue), the job was in neither
/// for that time: missing from `/api/jobs`, 404 for its page. Here every
/// rename (the step that completes a log) takes two seconds, twice the
/// clean-up interval; the scheduler now holds the job until its log is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_strace, ignore = "strace is not installed (apt-get install strace)")]
async fn a_job_whose_log_completes_after_its_cleanup_is_never_missing() {
    let name = "a_job_whose_log_completes_after_its_cleanup_is_never_missing";
    if !std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip(name, "strace is not installed (apt-get install strace)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 2000);
    let port = free_port();
    let mut args = vec![
        "--event-log-dir",
        logs.to_str().unwrap(),
        "--scheduler-policy",
        "pull-staged",
    ];
    args.extend_from_slice(&QUICK_CLEANUP);
    let renames = "rename,renameat,renameat2";
    let inject = format!("inject={renames}:delay_enter=2000000");
    let mut sched = Proc::spawn_wrapped(
        port,
        &[
            "strace",
            "-f",
            "--seccomp-bpf",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            &format!("trace={renames}"),
            "-e",
            &inject,
        ],
        &args,
        None,
    );
    // strace's child, stopped even when an assertion fails.
    let _children = KillChildren(sched.pid());
    sched.wait_healthy().await;
    start_executor(port).await;
    let ctx = client(port, &data).await;
    listed_and_served_throughout(&sched, &ctx).await;
    // The renames were slowed, not failed: both logs completed.
    assert_eq!(
        std::fs::read_dir(&logs)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_str().unwrap().ends_with(".eventlog")
            })
            .count(),
        2
    );
    sched.terminate_wrapped();
}

/// Kills the children of a process when dropped.
struct KillChildren(u32);

impl Drop for KillChildren {
    fn drop(&mut self) {
        let _ = std::process::Command::new("pkill")
            .args(["-KILL", "-P", &self.0.to_string()])
            .status();
    }
}

/// Runs two jobs on `sched`, then checks from the moment the client saw
/// them finish, through the scheduler forgetting them, until each has been
/// served from its log on many consecutive checks: listed and served every
/// time.
async fn listed_and_served_throughout(sched: &Proc, ctx: &SessionContext) {
    let mut finished = Vec::new();
    for sql in [
        "SELECT count(*) FROM t",
        "SELECT k, sum(v) FROM t GROUP BY k",
    ] {
        let (job_id, result) = run_job(sched, ctx, sql).await;
        assert!(result.is_ok());
        finished.push(job_id);
    }
    let mut from_log_in_a_row = 0;
    let start = std::time::Instant::now();
    while from_log_in_a_row < 20 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the scheduler never forgot the jobs"
        );
        let listed = job_ids(sched).await;
        let mut all_from_log = true;
        for job_id in &finished {
            assert!(listed.contains(job_id), "{job_id} missing from {listed:?}");
            let served = from_log(&sched.url(&format!("/api/job/{job_id}"))).await;
            assert!(served.is_some(), "{job_id} not served");
            all_from_log &= served == Some(true);
        }
        from_log_in_a_row = if all_from_log {
            from_log_in_a_row + 1
        } else {
            0
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
