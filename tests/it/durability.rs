//! Power-loss ordering, shown on the real binary's system calls: a log's
//! completed name never exists before the data it names is on disk.
//!
//! The scheduler runs under `strace`; for every rename of
//! `<id>.eventlog.running` to `<id>.eventlog` the trace must show, in the
//! writer's thread, an `fsync` of that file after its last write and
//! before the rename, and an `fsync` of the directory after the rename.
//! A power cut at any point therefore leaves either the `.running` name or
//! the completed name over whole, durable data.

use crate::harness::*;
use std::collections::HashMap;

/// One traced call: name, first argument, quoted paths, result.
struct Call {
    name: String,
    fd: Option<i64>,
    paths: Vec<String>,
    result: Option<i64>,
}

fn parse(line: &str) -> Option<Call> {
    let open = line.find('(')?;
    let name = line[..open].trim().to_string();
    let args = &line[open + 1..];
    let fd = args
        .split([',', ')'])
        .next()
        .and_then(|a| a.trim().parse().ok());
    let paths = args
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    let result = line
        .rsplit("= ")
        .next()?
        .split_whitespace()
        .next()?
        .parse()
        .ok();
    Some(Call {
        name,
        fd,
        paths,
        result,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_strace, ignore = "strace is not installed (apt-get install strace)")]
async fn a_completed_name_is_never_visible_before_its_data_is_durable() {
    if !std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip(
            "a_completed_name_is_never_visible_before_its_data_is_durable",
            "strace is not installed (apt-get install strace)",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let data = write_csv(tmp.path(), "t.csv", 500);
    let traces = tmp.path().join("trace");
    let prefix = traces.to_str().unwrap().to_string();
    let port = free_port();
    let dir_arg = logs.to_str().unwrap().to_string();
    let mut sched = Proc::spawn_wrapped(
        port,
        &[
            "strace",
            "-f",
            "-ff",
            "-qq",
            "-o",
            &prefix,
            "-e",
            "trace=openat,open,creat,write,writev,pwrite64,pwritev,fsync,fdatasync,close,rename,renameat,renameat2",
        ],
        &[
            "--event-log-dir",
            &dir_arg,
            "--scheduler-policy",
            "pull-staged",
        ],
        None,
    );
    sched.wait_healthy().await;
    start_executor(port).await;
    let ctx = client(port, &data).await;
    let mut ids = Vec::new();
    for sql in [
        "SELECT count(*) FROM t",
        "SELECT k, max(v) FROM t GROUP BY k",
        "SELECT min(s) FROM t",
    ] {
        let (id, result) = run_job(&sched, &ctx, sql).await;
        assert!(result.is_ok());
        completed_log(&logs, &id).await;
        ids.push(id);
    }
    // Stop the scheduler (strace's child) and let strace finish writing.
    sched.terminate_wrapped();

    let dir = logs.to_str().unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(tmp.path()).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("trace.")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let calls: Vec<Call> = text.lines().filter_map(parse).collect();
        // Which path each descriptor names, call by call.
        let mut fds: HashMap<i64, String> = HashMap::new();
        let mut named: Vec<Option<String>> = Vec::with_capacity(calls.len());
        for c in &calls {
            let target = c.fd.and_then(|fd| fds.get(&fd).cloned());
            match c.name.as_str() {
                "openat" | "open" | "creat" => {
                    if let (Some(fd), Some(p)) = (c.result, c.paths.first()) {
                        fds.insert(fd, p.clone());
                    }
                }
                "close" => {
                    if let Some(fd) = c.fd {
                        fds.remove(&fd);
                    }
                }
                _ => {}
            }
            named.push(target);
        }
        for (i, c) in calls.iter().enumerate() {
            if !c.name.starts_with("rename") || c.result != Some(0) {
                continue;
            }
            let (Some(from), Some(to)) = (
                c.paths.iter().find(|p| p.ends_with(".eventlog.running")),
                c.paths.iter().find(|p| p.ends_with(".eventlog")),
            ) else {
                continue;
            };
            let is = |j: usize, names: &[&str]| {
                names.contains(&calls[j].name.as_str())
                    && named[j].as_deref() == Some(from.as_str())
            };
            let last_write = (0..i)
                .rev()
                .find(|&j| is(j, &["write", "writev", "pwrite64", "pwritev"]))
                .unwrap_or_else(|| panic!("no write to {from} in this thread before its rename"));
            let synced = (0..i)
                .rev()
                .find(|&j| is(j, &["fsync", "fdatasync"]) && calls[j].result == Some(0))
                .unwrap_or_else(|| panic!("{from} was never fsynced before its rename"));
            assert!(
                synced > last_write,
                "{to} was named before {from} was fsynced after its last write"
            );
            // Nothing touched the file's data between that fsync and the
            // rename.
            assert!(
                !(synced..i)
                    .any(|j| is(j, &["write", "writev", "pwrite64", "pwritev", "ftruncate"])),
                "{from} was written after its fsync and before its rename"
            );
            // The directory is fsynced after this rename and before the
            // writer names the next log: this job's entry, not a later one's.
            let next_rename = (i + 1..calls.len())
                .find(|&j| calls[j].name.starts_with("rename") && calls[j].result == Some(0))
                .unwrap_or(calls.len());
            let dir_synced = (i..next_rename).any(|j| {
                calls[j].name == "fsync"
                    && calls[j].result == Some(0)
                    && named[j]
                        .as_deref()
                        .is_some_and(|p| p.trim_end_matches('/') == dir)
            });
            assert!(
                dir_synced,
                "the directory was not fsynced after naming {to} and before the next rename"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, ids.len(), "one checked rename per job");
}
