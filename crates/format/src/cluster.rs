//! The cluster log: which executors a recording scheduler had, with their
//! task slots, over time, so that the slot time the cluster *had* can be
//! set beside the slot time its jobs used.
//!
//! Files live in `DIR/.cluster/` (upstream's reader lists `DIR` alone and
//! never opens them), one per scheduler and UTC day:
//! `cluster-YYYY-MM-DD-<scheduler hash>.clusterlog`. Each is JSON Lines in
//! the log envelope (`{"ev":..,"version":1,"data":..}`) and append-only;
//! a reader skips a line it cannot read (a torn last line after a crash,
//! a record of a newer schema) and counts it.
//!
//! Records:
//! - `ClusterMark` (first line of every file, then every
//!   [`MARK_EVERY_MS`]): the scheduler is alive at `at`. The first of a
//!   file (and of a run) lists the executors up, with their slots; a
//!   reader takes an executor listed but not yet open as up from `at`, and
//!   one open but not listed as gone at `at`. The others leave the list
//!   out (nothing changed that an `ExecutorUp` or `ExecutorDown` did not
//!   say), so a year of them is tens of megabytes, not hundreds.
//! - `ExecutorUp`: an executor registered (first seen) at `at`.
//! - `ExecutorDown`: an executor left at `at` (its last heartbeat when the
//!   scheduler dropped it, or the scheduler's own stop).
//!
//! An executor still open at a file's last record was up at least until
//! then: a reader closes it there and marks the interval *estimated* (the
//! scheduler stopped without saying, or the next day's file goes on).

use serde::{Deserialize, Serialize};

/// The folder, inside the log directory, that holds cluster logs.
pub const CLUSTER_DIR: &str = ".cluster";
/// The suffix of a cluster log.
pub const CLUSTER_SUFFIX: &str = ".clusterlog";
/// How often a recording scheduler writes a [`ClusterMark`].
pub const MARK_EVERY_MS: u64 = 60_000;

/// Record kinds.
pub mod kind {
    /// The executors up, at a time.
    pub const CLUSTER_MARK: &str = "ClusterMark";
    /// An executor registered.
    pub const EXECUTOR_UP: &str = "ExecutorUp";
    /// An executor left.
    pub const EXECUTOR_DOWN: &str = "ExecutorDown";
}

/// An executor and its slots, as a mark lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UpExecutor {
    /// Its id.
    pub executor_id: String,
    /// Its task slots.
    pub slots: u32,
}

/// `ClusterMark`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClusterMark {
    /// The scheduler recording.
    pub scheduler_id: String,
    /// When (epoch millis).
    pub at: u64,
    /// The executors up then; absent when the mark only says the
    /// scheduler is alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executors: Option<Vec<UpExecutor>>,
}

/// `ExecutorUp`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecutorUp {
    /// Its id.
    pub executor_id: String,
    /// Its task slots.
    pub slots: u32,
    /// When it was first seen (epoch millis).
    pub at: u64,
}

/// `ExecutorDown`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecutorDown {
    /// Its id.
    pub executor_id: String,
    /// When it left (epoch millis).
    pub at: u64,
    /// `removed` (the scheduler dropped it; `at` is its last heartbeat) or
    /// `scheduler stopped`.
    pub reason: String,
}

/// The `reason` of the `ExecutorDown`s a scheduler writes as it stops.
pub const SCHEDULER_STOPPED: &str = "scheduler stopped";

/// The file name of `scheduler_id`'s cluster log for the UTC day of `at`.
pub fn file_name(scheduler_id: &str, at: u64) -> String {
    let day = day_text(at);
    // The id's FNV-1a hash (the query hash's function): any id makes a
    // plain file name.
    let hash = crate::query_hash::query_hash(scheduler_id).unwrap_or(0);
    let hash = crate::query_hash::hash_text(hash);
    format!("cluster-{day}-{hash}{CLUSTER_SUFFIX}")
}

/// The UTC day of `at` (epoch millis) as `YYYY-MM-DD` (chrono's
/// calendar).
pub fn day_text(at: u64) -> String {
    let at = i64::try_from(at).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp_millis(at)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_named_by_its_utc_date() {
        assert_eq!(day_text(0), "1970-01-01");
        // 2026-12-05T23:59:59.999Z and the next millisecond.
        assert_eq!(day_text(1_796_515_199_999), "2026-12-05");
        assert_eq!(day_text(1_796_515_200_000), "2026-12-06");
        assert_eq!(day_text(951_782_400_000), "2000-02-29");
        let a = file_name("s/../x", 0);
        assert!(a.starts_with("cluster-1970-01-01-") && a.ends_with(".clusterlog"));
        assert!(!a.contains('/'), "{a}");
    }
}
