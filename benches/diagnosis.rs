//! The diagnosis of a 50,000-task job (`GET /api/job/{id}/diagnosis`):
//! reading the job's records from its log and computing the findings, and
//! the findings alone, beside what upstream's history server does to
//! answer anything about the same job (`HistoryStore::read_job`); and the
//! same job's what-if curve (`GET /api/job/{id}/whatif`).
//!
//! `cargo bench --bench diagnosis`

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use ballista_scheduler::history::HistoryStore;
use bjh_analysis::diagnosis::{Thresholds, diagnose};
use bjh_analysis::whatif::{Layout, MAX_EXECUTORS, MAX_SLOTS, Shape, Work};
use bjh_format::JobState;
use bjh_store::records::{JobHeader, JobRecords};
use criterion::{Criterion, criterion_group, criterion_main};

fn diagnosis(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    corpus::write_corpus(dir.path(), 1, 1, |_| 50_000);
    let log = dir.path().join("job0000000.eventlog");
    let header = JobHeader {
        job_id: "job0000000".into(),
        state: JobState::Completed,
        start_time: 1_700_000_000_000,
        end_time: 1_700_000_100_000,
        dropped_records: Some(0),
        query_hash: 1,
    };
    // Counted apart before anything is timed: the log's task records, and
    // upstream's reading of the same job.
    let text = std::fs::read_to_string(&log).unwrap();
    let tasks = text
        .lines()
        .filter(|l| l.starts_with(r#"{"ev":"TaskEnd""#))
        .count();
    assert_eq!(tasks, 50_000);
    let records = JobRecords::read(&log).unwrap();
    let d = diagnose(&header, &records, &[], &Thresholds::default());
    assert_eq!(d.task_attempts, tasks);
    let upstream = HistoryStore::load(dir.path()).unwrap();
    assert!(upstream.read_job("job0000000").is_ok());

    let mut group = c.benchmark_group("diagnosis of a 50,000-task job");
    group.sample_size(10);
    group.bench_function("ours: read the log's records and diagnose", |b| {
        b.iter(|| {
            let records = JobRecords::read(&log).unwrap();
            let d = diagnose(&header, &records, &[], &Thresholds::default());
            assert_eq!(d.task_attempts, tasks);
        })
    });
    group.bench_function("ours: diagnose records in memory", |b| {
        b.iter(|| {
            let d = diagnose(&header, &records, &[], &Thresholds::default());
            assert_eq!(d.task_attempts, tasks);
        })
    });
    group.bench_function("upstream: HistoryStore::read_job (any answer)", |b| {
        b.iter(|| assert!(upstream.read_job("job0000000").is_ok()))
    });
    group.finish();
}

/// The what-if of the same job (`GET /api/job/{id}/whatif` without a
/// shape): the curve over executor counts and the critical path, from
/// records in memory and with the log read first; and the largest shape a
/// request may ask, which places no more than the job's tasks.
fn whatif(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    corpus::write_corpus(dir.path(), 1, 1, |_| 50_000);
    let log = dir.path().join("job0000000.eventlog");
    let records = JobRecords::read(&log).unwrap();
    assert_eq!(records.tasks.len(), 50_000);
    // The stages one after another, as a chain.
    let stages: Vec<u32> = records.stages.keys().copied().collect();
    let layout = Layout {
        edges: stages.windows(2).map(|w| (w[0], w[1])).collect(),
        ..Layout::default()
    };
    let (start, end) = (1_700_000_000_000, 1_700_000_100_000);
    let work = Work::of(&records, &layout, start, end);
    let slots = work.observed_shape().slots;
    let points = work.curve(slots).len();
    assert!(points >= 1);
    let mut group = c.benchmark_group("what-if of a 50,000-task job");
    group.sample_size(10);
    group.bench_function(
        "ours: the curve and the critical path, records in memory",
        |b| {
            b.iter(|| {
                let work = Work::of(&records, &layout, start, end);
                assert_eq!(work.curve(slots).len(), points);
                work.critical_path()
            })
        },
    );
    group.bench_function("ours: read the log's records, then the curve", |b| {
        b.iter(|| {
            let records = JobRecords::read(&log).unwrap();
            let work = Work::of(&records, &layout, start, end);
            assert_eq!(work.curve(slots).len(), points);
        })
    });
    group.bench_function("ours: the largest shape asked (10,000 x 1,024)", |b| {
        b.iter(|| {
            work.replay(Shape {
                executors: MAX_EXECUTORS,
                slots: MAX_SLOTS,
            })
        })
    });
    group.finish();
}

criterion_group!(benches, diagnosis, whatif);
criterion_main!(benches);
