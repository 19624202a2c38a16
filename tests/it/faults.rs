//! A log directory that fills up, turns read-only, disappears or becomes a
//! file while the scheduler runs: every job still completes for its client,
//! the failures are counted and logged without flooding, and recording
//! resumes when the directory is usable again.

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn sh(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// A 1 MiB tmpfs at `at`, unmounted on drop; `None` (with the reason) when
/// this process may not mount one.
struct TinyFs(PathBuf);

impl TinyFs {
    fn mount(at: &Path) -> Result<Self, String> {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
            return Err("not running as root".into());
        }
        std::fs::create_dir_all(at).unwrap();
        let target = at.to_str().unwrap();
        if !sh("mount", &["-t", "tmpfs", "-o", "size=1m", "tmpfs", target]) {
            return Err("mount -t tmpfs failed (no CAP_SYS_ADMIN?)".into());
        }
        Ok(Self(at.to_path_buf()))
    }

    fn remount(&self, mode: &str) {
        let target = self.0.to_str().unwrap();
        assert!(sh("mount", &["-o", &format!("remount,{mode}"), target]));
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = sh("umount", &["-l", self.0.to_str().unwrap()]);
    }
}

fn write_errors(metrics: &str) -> u64 {
    counter(metrics, "ballista_job_history_write_errors_total")
}

/// Fills the filesystem of `dir` with one file; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![7u8; 64 * 1024];
    use std::io::Write;
    while file.write_all(&block).is_ok() {}
    let _ = file.sync_all();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_root, ignore = "mounting a small tmpfs needs root")]
async fn a_full_readonly_removed_or_replaced_directory_never_stops_scheduling() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = match TinyFs::mount(&tmp.path().join("tiny")) {
        Ok(fs) => fs,
        Err(why) => {
            skip(
                "a_full_readonly_removed_or_replaced_directory_never_stops_scheduling",
                &why,
            );
            return;
        }
    };
    let logs = fs.0.join("logs");
    let data = write_csv(tmp.path(), "t.csv", 500);
    let stderr = tmp.path().join("scheduler.log");
    let port = free_port();
    let dir_arg = logs.to_str().unwrap().to_string();
    let mut sched = Proc::spawn_logged(
        port,
        &[
            "--event-log-dir",
            &dir_arg,
            "--scheduler-policy",
            "pull-staged",
        ],
        Some(&stderr),
    );
    sched.wait_healthy().await;
    start_executor(port).await;
    let ctx = client(port, &data).await;
    let sql = "SELECT k, count(*) FROM t GROUP BY k";
    let metrics = || async { String::from_utf8(get(&sched.url("/api/metrics")).await.2).unwrap() };

    // Usable: recorded.
    let (id, result) = run_job(&sched, &ctx, sql).await;
    assert_eq!(result, Ok(100));
    completed_log(&logs, &id).await;
    assert_eq!(write_errors(&metrics().await), 0);

    // Each fault: jobs complete for their client, the failures are counted;
    // then the fault is undone and the next job is recorded.
    // Each: what, whether jobs are lost while it lasts, how to break it,
    // how to undo it.
    type Fault<'a> = (&'a str, bool, Box<dyn Fn() + 'a>, Box<dyn Fn() + 'a>);
    let filler = std::cell::RefCell::new(None);
    let faults: Vec<Fault> = vec![
        (
            "full",
            true,
            Box::new(|| *filler.borrow_mut() = Some(fill(&fs.0))),
            Box::new(|| std::fs::remove_file(filler.borrow().as_ref().unwrap()).unwrap()),
        ),
        (
            "read-only",
            true,
            Box::new(|| fs.remount("ro")),
            Box::new(|| fs.remount("rw")),
        ),
        (
            // The writer creates the directory again for the next job:
            // nothing is lost.
            "removed",
            false,
            Box::new(|| std::fs::remove_dir_all(&logs).unwrap()),
            Box::new(|| {}),
        ),
        (
            "replaced by a file",
            true,
            Box::new(|| {
                std::fs::remove_dir_all(&logs).unwrap();
                std::fs::write(&logs, b"not a directory").unwrap();
            }),
            Box::new(|| std::fs::remove_file(&logs).unwrap()),
        ),
    ];
    let mut failed_jobs = 0;
    for (what, lost, break_it, fix_it) in &faults {
        let before = write_errors(&metrics().await);
        break_it();
        let mut lost_ids = Vec::new();
        for _ in 0..2 {
            let (id, result) = run_job(&sched, &ctx, sql).await;
            assert_eq!(result, Ok(100), "{what}: the job completes for its client");
            if *lost {
                lost_ids.push(id);
                failed_jobs += 1;
            } else {
                assert_whole(&completed_log(&logs, &id).await);
            }
        }
        if *lost {
            let after: u64 = wait_for(&format!("{what}: the failures are counted"), || async {
                let n = write_errors(&metrics().await);
                (n >= before + 2).then_some(n)
            })
            .await;
            assert!(after >= before + 2, "{what}");
            // Once the writer has given up on them (counted above), neither
            // log is there: they were lost, not late.
            for id in &lost_ids {
                assert!(
                    !logs.join(format!("{id}.eventlog")).exists(),
                    "{what}: {id}"
                );
            }
        } else {
            assert_eq!(write_errors(&metrics().await), before, "{what}");
        }
        fix_it();
        let (id, result) = run_job(&sched, &ctx, sql).await;
        assert_eq!(result, Ok(100));
        let lines = completed_log(&logs, &id).await;
        assert_whole(&lines);
    }
    // The scheduler lists every job it ran, recorded or not.
    assert_eq!(job_ids(&sched).await.len(), 1 + faults.len() * 3);
    // Logged without flooding: one full report, the rest counted (the
    // count is reported at most once a minute).
    let log = std::fs::read_to_string(&stderr).unwrap();
    let reports = log.matches("the job's history is lost").count();
    assert!(
        (1..=2).contains(&reports),
        "{reports} error reports for {failed_jobs} failed jobs:\n{log}"
    );
}
