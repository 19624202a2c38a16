//! Usage: `GET /api/usage` for a month's range over 1,000,000 jobs spread
//! over a year and a year of cluster log (one day file per day: ten
//! executors, one of them leaving and coming back each day, a mark every
//! minute), through the route's own function (`serving::usage::usage_of`).
//!
//! Prints the first request (every day file read and parsed) and then
//! criterion's figures for the following ones (the files unchanged, so
//! read from the store's cache). Upstream has no usage to set beside it;
//! the target is 100 ms (`docs/performance.md`).
//!
//! `cargo bench --bench usage`; `USAGE_JOBS` changes the 1,000,000.

#![allow(clippy::disallowed_methods)] // scratch files

use bjh_format::cluster::{
    CLUSTER_DIR, ClusterMark, ExecutorDown, ExecutorUp, UpExecutor, file_name, kind,
};
use bjh_format::record::encode_line;
use bjh_metrics::HistoryMetrics;
use bjh_serving::usage::{UsageParams, usage_of};
use bjh_store::query::FactsRef;
use bjh_store::{JobSummary, LogStore, SummaryParts};
use criterion::Criterion;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const YEAR_START: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const DAY: u64 = 86_400_000;

/// `n` completed jobs spread evenly over the year, each stating its slot
/// time, a few hundred queries among them.
fn jobs(n: usize) -> Vec<JobSummary> {
    let step = 365 * DAY / n as u64;
    (0..n)
        .map(|i| {
            let start = YEAR_START + i as u64 * step;
            let id = format!("0{i:012X}");
            let name = format!("nightly report {}", i % 977);
            let file_name = format!("{id}.eventlog");
            JobSummary::restore(SummaryParts {
                facts: FactsRef {
                    job_id: &id,
                    job_name: &name,
                    state: bjh_format::JobState::Completed,
                    queued_time: start - 50,
                    start_time: start,
                    end_time: start + 2_000 + (i as u64 % 60_000),
                    query_hash: 1 + (i % 311) as u64,
                },
                job_status: "Completed.",
                status: "Completed",
                stages: [3, 3],
                percent_complete: 100,
                dropped_records: 0,
                file_name: &file_name,
                len: 40_000,
                modified: None,
                ranges: None,
                scheduler_id: Some("scheduler-a"),
                usage: Some(bjh_format::usage::SlotUsage {
                    busy_slot_ms: 4_000 + (i as u64 % 90_000),
                    failed_slot_ms: 0,
                }),
                tags: None,
            })
        })
        .collect()
}

/// A year of one scheduler's cluster log in `dir/.cluster/`.
fn cluster_year(dir: &Path) -> u64 {
    let folder = dir.join(CLUSTER_DIR);
    std::fs::create_dir_all(&folder).unwrap();
    let executors: Vec<String> = (0..10)
        .map(|i| format!("executor-{i:02}-{:032x}", i * 7919))
        .collect();
    let mut bytes = 0;
    for day in 0..365 {
        let start = YEAR_START + day * DAY;
        let mut text = Vec::new();
        let listed = executors
            .iter()
            .map(|e| UpExecutor {
                executor_id: e.clone(),
                slots: 8,
            })
            .collect();
        let mark = |at, executors| ClusterMark {
            scheduler_id: "scheduler-a".into(),
            at,
            executors,
        };
        text.extend(encode_line(kind::CLUSTER_MARK, &mark(start, Some(listed))).unwrap());
        for minute in 1..1_440u64 {
            let at = start + minute * 60_000;
            if minute == 600 {
                let down = ExecutorDown {
                    executor_id: executors[9].clone(),
                    at,
                    reason: "removed".into(),
                };
                text.extend(encode_line(kind::EXECUTOR_DOWN, &down).unwrap());
            }
            if minute == 660 {
                let up = ExecutorUp {
                    executor_id: executors[9].clone(),
                    slots: 8,
                    at,
                };
                text.extend(encode_line(kind::EXECUTOR_UP, &up).unwrap());
            }
            text.extend(encode_line(kind::CLUSTER_MARK, &mark(at, None)).unwrap());
        }
        bytes += text.len() as u64;
        std::fs::write(folder.join(file_name("scheduler-a", start)), text).unwrap();
    }
    bytes
}

fn main() {
    let n: usize = std::env::var("USAGE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let cluster_bytes = cluster_year(&logs);
    let index = dir.path().join("index");
    std::fs::write(&index, bjh_store::snapshot::encode(jobs(n).iter())).unwrap();
    let store =
        LogStore::new(&logs, Arc::new(HistoryMetrics::unregistered())).with_index_file(Some(index));
    assert_eq!(store.load_persisted(), n);
    let store = Some(Arc::new(store));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // June: a month of the year.
    let params = UsageParams {
        from: Some((YEAR_START + 151 * DAY).to_string()),
        to: Some((YEAR_START + 181 * DAY).to_string()),
        group_by: Some("query".into()),
        tag: None,
        scheduler_id: None,
    };
    let first = Instant::now();
    let u = runtime
        .block_on(usage_of(store.clone(), &params, Some(1.0)))
        .unwrap();
    let cold = first.elapsed();
    // The books balance, and the month is what was planted: ten
    // executors of 8 slots, one away an hour a day.
    let want_capacity = 30 * (10 * 8 * DAY - 8 * 3_600_000);
    assert_eq!(u.capacity_slot_ms, want_capacity);
    let shares: u64 = u.groups.iter().map(|g| g.idle_share_slot_ms).sum();
    assert!(
        u.idle_slot_ms
            .abs_diff(shares + u.unattributed_idle_slot_ms)
            < u.idle_slot_ms / 100
    );
    println!(
        "usage: {n} jobs over a year ({} in the month), a year of cluster log ({:.1} MB in 365 files); \
         the first request (every file read): {cold:.1?}",
        u.jobs,
        cluster_bytes as f64 / 1e6
    );
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("GET /api/usage, a month of a year");
    group.sample_size(20);
    group.bench_function("ours: 1,000,000 jobs, cluster log cached", |b| {
        b.iter(|| {
            let u = runtime
                .block_on(usage_of(store.clone(), &params, Some(1.0)))
                .unwrap();
            assert_eq!(u.capacity_slot_ms, want_capacity);
        })
    });
    group.finish();
    c.final_summary();
}
