//! The diagnosis of a 50,000-task job (`GET /api/job/{id}/diagnosis`):
//! reading the job's records from its log and computing the findings, and
//! the findings alone, beside what upstream's history server does to
//! answer anything about the same job (`HistoryStore::read_job`).
//!
//! `cargo bench --bench diagnosis`

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use ballista_scheduler::history::HistoryStore;
use bjh_analysis::diagnosis::{Thresholds, diagnose};
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

criterion_group!(benches, diagnosis);
criterion_main!(benches);
