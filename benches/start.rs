//! A start of the process, measured from outside: from spawning the binary
//! to its first answer, ours (`ballista-scheduler --history-only
//! --no-history-index`) against upstream's `ballista-history-server`, on
//! an empty directory and on 2,010 logs in upstream's format (the store
//! bench's 2,000 mixed jobs and ten jobs of 50,000 tasks, footers removed).
//! The empty directory shows what a process costs before it reads a log
//! (loading the binary, the runtime, logging, binding); the difference is
//! the index.
//!
//! Prints a table. The binaries: `START_OURS` (default: the one cargo built
//! for this bench, with the bench profile's line tables) and
//! `START_UPSTREAM` (default: `ballista-history-server` on `PATH`, from
//! `cargo install ballista-scheduler --version 55.0.0`); without upstream's
//! binary only our rows are printed. `START_RUNS` samples per case
//! (default 15), the two sides taking turns. `START_DIR` keeps the corpus
//! in a directory of that name (made there on the first run) for a profiler.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a side is asked, and when its answer counts.
#[derive(Clone, Copy)]
enum Wait {
    /// `/readyz` answers 200 (ours: the index is loaded).
    Ready,
    /// `/api/jobs` lists `n` jobs.
    Listed(usize),
}

/// How many jobs an `/api/jobs` answer lists: ours says so in
/// `x-total-count`; upstream's answer is the whole list.
fn listed(answer: &str) -> Option<usize> {
    if !answer.starts_with("HTTP/1.1 200") {
        return None;
    }
    let lower = answer.to_ascii_lowercase();
    if let Some(at) = lower.find("x-total-count: ") {
        let rest = &lower[at + "x-total-count: ".len()..];
        return rest[..rest.find('\r')?].trim().parse().ok();
    }
    Some(answer.matches("\"job_id\"").count())
}

struct Side {
    name: &'static str,
    binary: PathBuf,
    /// The arguments before `--bind-port P --event-log-dir D`.
    args: &'static [&'static str],
}

impl Side {
    /// Spawns the binary over `dir` and times it to the answer `wait`
    /// describes.
    fn time_start(&self, dir: &Path, wait: Wait) -> Duration {
        let port = corpus::free_port();
        let started = Instant::now();
        let mut child = Command::new(&self.binary)
            .args(self.args)
            .args(["--bind-host", "127.0.0.1", "--bind-port"])
            .arg(port.to_string())
            .arg("--event-log-dir")
            .arg(dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", self.binary.display()));
        let elapsed = loop {
            let done = match wait {
                Wait::Ready => {
                    corpus::get(port, "/readyz").is_some_and(|a| a.starts_with("HTTP/1.1 200"))
                }
                Wait::Listed(n) => {
                    corpus::get(port, "/api/jobs").and_then(|a| listed(&a)) == Some(n)
                }
            };
            if done {
                break started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{} never answered",
                self.name
            );
            assert!(child.try_wait().unwrap().is_none(), "{} exited", self.name);
            std::thread::sleep(Duration::from_millis(1));
        };
        let _ = child.kill();
        let _ = child.wait();
        elapsed
    }
}

/// Removes each log's footer line, as the store bench does: the logs are
/// then as upstream's scheduler writes them.
fn strip_footer(path: &Path) {
    let mut text = std::fs::read_to_string(path).unwrap();
    let body_end = text.trim_end().rfind('\n').unwrap() + 1;
    assert!(text[body_end..].starts_with(r#"{"ev":"Footer""#));
    text.truncate(body_end);
    std::fs::write(path, text).unwrap();
}

/// 2,000 mixed jobs and ten of 50,000 tasks in one directory, in
/// upstream's format. The big ones are written apart and renamed, ids
/// inside and all, so no id is used twice.
fn corpus_2010(dir: &Path) {
    corpus::write_corpus(dir, 2_000, 7, |rng| corpus::mixed_task_count(rng, false));
    let big = tempfile::tempdir().unwrap();
    corpus::write_corpus(big.path(), 10, 3, |_| 50_000);
    for entry in std::fs::read_dir(big.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let old_id = name.trim_end_matches(".eventlog");
        let new_id = old_id.replacen("job", "big", 1);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            dir.join(format!("{new_id}.eventlog")),
            text.replace(old_id, &new_id),
        )
        .unwrap();
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        strip_footer(&entry.unwrap().path());
    }
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 2_010);
}

fn upstream_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("START_UPSTREAM") {
        return Some(path.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("ballista-history-server"))
        .find(|candidate| candidate.is_file())
}

fn main() {
    let runs: usize = std::env::var("START_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let ours = Side {
        name: "ours",
        binary: std::env::var_os("START_OURS")
            .map(PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_ballista-scheduler").into()),
        args: &["--history-only", "--no-history-index"],
    };
    let upstream = upstream_binary().map(|binary| Side {
        name: "upstream",
        binary,
        args: &["--update-interval-seconds", "0"],
    });
    println!("ours: {}", ours.binary.display());
    match &upstream {
        Some(side) => println!("upstream: {}", side.binary.display()),
        None => println!("upstream: no ballista-history-server (set START_UPSTREAM)"),
    }
    let empty = tempfile::tempdir().unwrap();
    // `START_DIR` keeps the corpus (made there once) for a profiler.
    let kept = std::env::var_os("START_DIR").map(PathBuf::from);
    let made = tempfile::tempdir().unwrap();
    let logs = kept.as_deref().unwrap_or(made.path());
    if std::fs::read_dir(logs).map_or(0, |d| d.count()) != 2_010 {
        std::fs::create_dir_all(logs).unwrap();
        corpus_2010(logs);
    }
    println!(
        "\n| start (spawn to answer), {runs} runs | ours p50 | ours max | upstream p50 | upstream max | ratio (p50) |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let cases = [
        (
            "empty directory, `/readyz` (ours) or `/api/jobs` (upstream) answers 200",
            empty.path(),
            0,
        ),
        (
            "2,010 upstream-written logs, `/api/jobs` lists all 2,010",
            logs,
            2_010,
        ),
    ];
    for (what, dir, jobs) in cases {
        let ours_wait = if jobs == 0 {
            Wait::Ready
        } else {
            Wait::Listed(jobs)
        };
        let mut mine = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..runs {
            mine.push(ours.time_start(dir, ours_wait));
            if let Some(side) = &upstream {
                theirs.push(side.time_start(dir, Wait::Listed(jobs)));
            }
        }
        let (p50, _, max) = corpus::percentiles(mine);
        let (up50, upmax, ratio) = if theirs.is_empty() {
            ("".to_owned(), "".to_owned(), "".to_owned())
        } else {
            let (u50, _, umax) = corpus::percentiles(theirs);
            let ratio = u50.as_secs_f64() / p50.as_secs_f64();
            (corpus::ms(u50), corpus::ms(umax), format!("{ratio:.1}x"))
        };
        println!(
            "| {what} | {} | {} | {up50} | {upmax} | {ratio} |",
            corpus::ms(p50),
            corpus::ms(max)
        );
    }
}
