//! `GET /api/clusters`: every scheduler this history holds jobs or a
//! cluster log of. Many clusters may record into one directory or bucket,
//! each under its scheduler id; this is the one view of all of them: each
//! scheduler's jobs by state, when it was last seen, the executors and
//! slots up at its cluster log's last sight (now, for a scheduler still
//! recording), and its last 24 hours' slot time (`analysis::usage`). The
//! Clusters page (`ui::clusters`) shows the same.
//!
//! One pass over the summaries (for each scheduler's newest job) and one
//! over the cluster logs' intervals per scheduler: the cost of a filtered
//! page of the list; at most [`MAX_CLUSTERS`] rows, the most recently
//! seen first.

use crate::error::ApiError;
use crate::params::{NoParams, Params};
use axum::Json;
use axum::extract::State;
use bjh_analysis::usage::{UsageJob, usage};
use bjh_format::JobState;
use bjh_store::LogStore;
use bjh_store::cluster::SlotInterval;
use bjh_store::query::JobFacts;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The most schedulers one answer lists.
pub const MAX_CLUSTERS: usize = 1_000;
/// The usage window: the last 24 hours.
const USAGE_WINDOW_MS: u64 = 86_400_000;

/// One scheduler.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClusterRow {
    /// The scheduler id; `null` for the jobs whose logs name none
    /// (written by upstream's scheduler).
    pub scheduler_id: Option<String>,
    /// Its jobs by state (`queued`, `running`, `completed`, `failed`,
    /// `cancelled`, `abandoned`).
    pub jobs: BTreeMap<&'static str, usize>,
    /// All its jobs.
    pub total_jobs: usize,
    /// When its newest completed, failed or cancelled job was queued or
    /// ended, whichever is later (epoch ms); `null` without one.
    pub last_job_at: Option<u64>,
    /// The latest of `last_job_at` and its cluster log's last sight.
    pub last_seen: Option<u64>,
    /// Its cluster log was written to lately: it is recording now.
    pub recording: bool,
    /// Executors up at its cluster log's last sight (now, when
    /// `recording`).
    pub executors: usize,
    /// Their task slots.
    pub slots: u64,
    /// Slot-milliseconds up over the last 24 hours (from its cluster log).
    pub capacity_slot_ms: u64,
    /// Slot-milliseconds its jobs used over the last 24 hours.
    pub busy_slot_ms: u64,
    /// Busy over capacity, 0 to 1; `null` without capacity.
    pub utilisation: Option<f64>,
}

/// `GET /api/clusters`' answer.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Clusters {
    /// When it was worked out (epoch ms): the end of the usage window.
    pub now: u64,
    /// The schedulers, the most recently seen first.
    pub clusters: Vec<ClusterRow>,
    /// Schedulers left out past [`MAX_CLUSTERS`].
    pub left_out: usize,
}

/// `GET /api/clusters`.
#[utoipa::path(
    get,
    path = "/api/clusters",
    tag = "history",
    responses(
        (status = 200, description = "Every scheduler whose jobs or cluster log this history holds: its jobs by state, when it was last seen, its executors and slots at last sight, its last 24 hours' slot time", body = Clusters),
        (status = 404, description = "No log directory here", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_clusters(
    State(store): State<Option<Arc<LogStore>>>,
    _: Params<NoParams>,
) -> Result<Json<Clusters>, ApiError> {
    let Some(store) = store else {
        return Err(ApiError::Missing("no log directory here".into()));
    };
    Ok(Json(clusters_of(store).await?))
}

/// The clusters of the log directory `store`.
pub async fn clusters_of(store: Arc<LogStore>) -> Result<Clusters, ApiError> {
    // Not kept: the answer depends on the time (which cluster is up).
    crate::walks::shared()
        .walk(&store, None, "working out the clusters", |store| {
            clusters_now(store, bjh_format::now_millis())
        })
        .await
}

/// What a scheduler's cluster log shows: its last sight (epoch ms; the
/// later of its intervals' ends and `sight`, the log's last record),
/// whether that is now, and the executors up then with their slots.
fn seen_in(intervals: &[SlotInterval], sight: Option<u64>, now: u64) -> (u64, bool, usize, u64) {
    let ends = intervals.iter().map(|i| i.to).max().unwrap_or(0);
    let last = ends.max(sight.unwrap_or(0)).min(now);
    let up: Vec<&SlotInterval> = intervals.iter().filter(|i| i.to >= last).collect();
    let slots = up.iter().map(|i| u64::from(i.slots)).sum();
    (last, last >= now, up.len(), slots)
}

fn clusters_now(store: &LogStore, now: u64) -> Clusters {
    let from = now.saturating_sub(USAGE_WINDOW_MS);
    let cluster = store.cluster(now);
    // The intervals come sorted by scheduler: one run of them each.
    let logs: HashMap<&str, &[SlotInterval]> = cluster
        .intervals
        .chunk_by(|a, b| a.scheduler_id == b.scheduler_id)
        .map(|run| (run[0].scheduler_id.as_str(), run))
        .collect();
    // Each scheduler's newest job, and the last day's jobs' slot time.
    let (mut newest, mut newest_unnamed): (HashMap<String, u64>, u64) = (HashMap::new(), 0);
    store.with_completed(|jobs| {
        for j in jobs {
            let at = j.end_time().max(j.queued_time());
            let Some(id) = j.scheduler_id() else {
                newest_unnamed = newest_unnamed.max(at);
                continue;
            };
            match newest.get_mut(id) {
                Some(t) => *t = (*t).max(at),
                None => {
                    newest.insert(id.to_string(), at);
                }
            }
        }
    });
    let mut recent: HashMap<String, Vec<UsageJob>> = HashMap::new();
    for j in store.ran_between(from, now) {
        if let (Some(id), Some(u)) = (j.scheduler_id(), j.usage()) {
            recent.entry(id.to_string()).or_default().push(UsageJob {
                key: String::new(),
                start: j.start_time(),
                end: j.end_time(),
                busy_slot_ms: u.busy_slot_ms,
                waited_ms: 0,
            });
        }
    }
    let mut counts: BTreeMap<Option<String>, [usize; 6]> = store
        .counts_by_scheduler()
        .into_iter()
        .map(|(id, c)| (id.map(|s| s.to_string()), c))
        .collect();
    // A scheduler its cluster log names is listed, executors or not.
    let sighted: HashMap<&str, u64> = cluster
        .sightings
        .iter()
        .map(|(id, at)| (id.as_str(), (*at).min(now)))
        .collect();
    for id in logs.keys().chain(sighted.keys()) {
        counts.entry(Some(id.to_string())).or_default();
    }
    let mut rows: Vec<ClusterRow> = counts
        .into_iter()
        // The store counts the jobs naming no scheduler even when there
        // are none: such a row says nothing.
        .filter(|(id, counts)| counts.iter().sum::<usize>() > 0 || id.is_some())
        .map(|(id, counts)| {
            let log = id.as_deref().and_then(|i| logs.get(i)).copied();
            let sight = id.as_deref().and_then(|i| sighted.get(i)).copied();
            let (last, recording, executors, slots) = seen_in(log.unwrap_or(&[]), sight, now);
            let last_job_at = match &id {
                Some(id) => newest.get(id).copied(),
                None => Some(newest_unnamed),
            }
            .filter(|t| *t > 0);
            let usage = id.as_deref().map(|id| {
                let jobs = recent.get(id).map_or(&[][..], Vec::as_slice);
                usage(log.unwrap_or(&[]), jobs, 0, (from, now), None)
            });
            ClusterRow {
                jobs: JobState::ALL
                    .iter()
                    .map(|(word, state)| (*word, counts[state.index()]))
                    .collect(),
                total_jobs: counts.iter().sum(),
                last_seen: last_job_at.max((log.is_some() || sight.is_some()).then_some(last)),
                last_job_at,
                recording,
                executors,
                slots,
                capacity_slot_ms: usage.as_ref().map_or(0, |u| u.capacity_slot_ms),
                busy_slot_ms: usage.as_ref().map_or(0, |u| u.busy_slot_ms),
                utilisation: usage.and_then(|u| u.utilisation),
                scheduler_id: id,
            }
        })
        .collect();
    // The most recently seen first, then by id.
    rows.sort_by(|a, b| (b.last_seen, &a.scheduler_id).cmp(&(a.last_seen, &b.scheduler_id)));
    let left_out = rows.len().saturating_sub(MAX_CLUSTERS);
    rows.truncate(MAX_CLUSTERS);
    Clusters {
        now,
        clusters: rows,
        left_out,
    }
}
