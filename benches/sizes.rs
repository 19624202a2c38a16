//! Bytes on disk per job, plain against zstd, for generated corpora: a
//! mixed directory (most jobs 8-64 tasks) and one 50,000-task job. Prints
//! a table; nothing is timed.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use bjh_recording::writer::{Compression, DEFAULT_ZSTD_LEVEL};
use std::path::Path;

fn dir_bytes(dir: &Path) -> (u64, usize) {
    let mut total = 0;
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        total += entry.unwrap().metadata().unwrap().len();
        files += 1;
    }
    (total, files)
}

fn main() {
    println!("| corpus | plain bytes/job | zstd bytes/job | ratio |");
    println!("| --- | --- | --- | --- |");
    type TaskCount = fn(&mut corpus::Rng) -> usize;
    let cases: [(&str, usize, TaskCount); 2] = [
        ("500 mixed jobs", 500, |rng| {
            corpus::mixed_task_count(rng, false)
        }),
        ("one job of 50,000 tasks", 1, |_| 50_000),
    ];
    for (name, jobs, tasks_of) in cases {
        let plain = tempfile::tempdir().unwrap();
        let zstd = tempfile::tempdir().unwrap();
        corpus::write_corpus_with(plain.path(), jobs, 7, Compression::None, tasks_of);
        corpus::write_corpus_with(
            zstd.path(),
            jobs,
            7,
            Compression::Zstd(DEFAULT_ZSTD_LEVEL),
            tasks_of,
        );
        let (p, pf) = dir_bytes(plain.path());
        let (z, zf) = dir_bytes(zstd.path());
        assert_eq!((pf, zf), (jobs, jobs));
        println!(
            "| {name} | {} | {} | {:.1}x |",
            p / jobs as u64,
            z / jobs as u64,
            p as f64 / z as f64
        );
    }
}
