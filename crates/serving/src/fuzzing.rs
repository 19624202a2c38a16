//! Entry points for the fuzz targets under `fuzz/` and for the unit tests
//! that replay their inputs: each feeds arbitrary bytes through a reader
//! path as a log file. A panic is a bug; every error must be a clean one.

#![allow(clippy::disallowed_methods)] // scratch files of the fuzz harness, not the server's

use crate::jobs_params::JobsParams;
use crate::params::Params;
use bjh_format::record::payload;
use bjh_metrics::HistoryMetrics;
use bjh_pictures::timeline::{self, TimelineParams};
use bjh_store::records::JobHeader;
use bjh_store::{self, LogStore};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

/// The names a log may have: completed plain and zstd, and running.
const NAMES: [&str; 3] = ["fz.eventlog", "fz.eventlog.zst", "fz.eventlog.running"];

/// A scratch directory of this process and thread.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ballista-job-history-fuzz-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The index path: `data` under each log name is indexed by a rescan, then
/// listed and read the way the REST routes read it.
pub fn index_log(data: &[u8]) {
    let dir = scratch();
    for name in NAMES {
        std::fs::write(dir.join(name), data).expect("scratch write");
    }
    let store = LogStore::new(&dir, Arc::new(HistoryMetrics::unregistered()));
    store.rescan();
    for query in [
        "",
        "include_unfinished=true",
        "status=abandoned,running&sort=name",
    ] {
        let params = Params::<JobsParams>::parse(query).expect("valid parameters");
        let q = params.value.query(0).expect("a valid query");
        for row in store.page(&q, None, &HashSet::new()).rows {
            let id = row.facts.job_id().to_string();
            let _ = store.read_payloads(&id, &[payload::JOB, payload::STAGES, payload::CONFIG]);
            let _ = store.read_payloads(&id, &[payload::DOT, payload::RESPONSES]);
            let _ = store.read_job_end(&id);
            let _ = store.unfinished(&id);
        }
    }
    store.rescan();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The single-record path: `data` as one log read directly, each reader in
/// turn (summary, terminal record, start record, timeline and its picture).
pub fn read_log(data: &[u8]) {
    let dir = scratch();
    for name in NAMES {
        let path = dir.join(name);
        std::fs::write(&path, data).expect("scratch write");
        let _ = bjh_store::read_summary(&path);
        let _ = bjh_store::terminal_line(&path);
        let _ = bjh_store::read_job_start(&path);
        let header = JobHeader {
            job_id: "fz".into(),
            state: bjh_format::JobState::Completed,
            start_time: 1,
            end_time: 2,
            dropped_records: Some(0),
            query_hash: 0,
        };
        let _ = timeline::read_timeline(&path, &header, TimelineParams::default());
        let _ = timeline::render_svg(&path, &header);
        if let Ok(records) = bjh_store::records::JobRecords::read(&path) {
            let _ = bjh_analysis::diagnosis::diagnose(
                &header,
                &records,
                &[],
                &bjh_analysis::diagnosis::Thresholds::default(),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(test)]
mod tests {
    /// Inputs kept from fuzzing runs (and hand-made edge cases): each is
    /// replayed through both paths.
    #[test]
    fn fuzz_regression_inputs_are_read_cleanly() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz-inputs");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("tests/fuzz-inputs") {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            super::index_log(&data);
            super::read_log(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }
}
