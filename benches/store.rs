//! Indexing a log directory and answering one payload of one job: ours
//! (`LogStore`) against upstream's (`HistoryStore`), on the same corpus.
//! Sizes: a mixed directory of 500 jobs (8-64 tasks mostly, some
//! thousands), and one job of 50,000 tasks.

mod corpus;

use ballista_job_history::metrics::HistoryMetrics;
use ballista_job_history::store::LogStore;
use ballista_scheduler::history::HistoryStore;
use criterion::{Criterion, criterion_group, criterion_main};
use std::sync::Arc;

fn index(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    corpus::write_corpus(dir.path(), 500, 7, |rng| {
        corpus::mixed_task_count(rng, false)
    });
    let mut group = c.benchmark_group("index 500 mixed jobs");
    group.sample_size(10);
    group.bench_function("ours: LogStore::rescan", |b| {
        b.iter(|| {
            let store = LogStore::new(dir.path(), Arc::new(HistoryMetrics::unregistered()));
            let report = store.rescan();
            assert_eq!(report.read, 500);
        })
    });
    group.bench_function("upstream: HistoryStore::load", |b| {
        b.iter(|| {
            let store = HistoryStore::load(dir.path()).unwrap();
            assert_eq!(store.len(), 500);
        })
    });
    group.finish();
}

fn read_one(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    corpus::write_corpus(dir.path(), 1, 1, |_| 50_000);
    let ours = LogStore::new(dir.path(), Arc::new(HistoryMetrics::unregistered()));
    ours.rescan();
    let upstream = HistoryStore::load(dir.path()).unwrap();
    let mut group = c.benchmark_group("read /config of a 50,000-task job");
    group.sample_size(10);
    group.bench_function("ours: LogStore::read_job_end", |b| {
        b.iter(|| {
            let end = ours.read_job_end("job0000000").unwrap().unwrap();
            assert!(end.config.get().len() > 100);
        })
    });
    group.bench_function("upstream: HistoryStore::read_job", |b| {
        b.iter(|| {
            let job = upstream.read_job("job0000000").unwrap();
            assert!(job.config.len() == 60);
        })
    });
    group.finish();
}

criterion_group!(benches, index, read_one);
criterion_main!(benches);
