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
#[derive(Debug, Serialize, utoipa::ToSchema)]
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
#[derive(Debug, Serialize, utoipa::ToSchema)]
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
    tokio::task::spawn_blocking(move || clusters_now(&store, bjh_format::now_millis()))
        .await
        .map_err(|e| ApiError::Internal(format!("the clusters cannot be worked out: {e}")))
}

/// What each scheduler's cluster log shows.
#[derive(Default)]
struct Seen {
    last: u64,
    executors: usize,
    slots: u64,
    recording: bool,
}

fn clusters_now(store: &LogStore, now: u64) -> Clusters {
    let from = now.saturating_sub(USAGE_WINDOW_MS);
    let cluster = store.cluster(now);
    // An executor of a scheduler still recording is up until now.
    let mut seen: HashMap<&str, Seen> = HashMap::new();
    for i in &cluster.intervals {
        let s = seen.entry(i.scheduler_id.as_str()).or_default();
        s.last = s.last.max(i.to);
        if i.to >= now {
            s.recording = true;
            s.executors += 1;
            s.slots += u64::from(i.slots);
        }
    }
    let mut intervals_of: HashMap<&str, Vec<SlotInterval>> = HashMap::new();
    for i in &cluster.intervals {
        intervals_of
            .entry(i.scheduler_id.as_str())
            .or_default()
            .push(i.clone());
    }
    // Where none is up now, those up at the last sight.
    for (id, s) in seen.iter_mut().filter(|(_, s)| !s.recording) {
        for i in intervals_of.get(id).into_iter().flatten() {
            if i.to == s.last {
                s.executors += 1;
                s.slots += u64::from(i.slots);
            }
        }
    }
    let mut last_job: HashMap<Option<Arc<str>>, u64> = HashMap::new();
    store.with_completed(|jobs| {
        for j in jobs {
            let at = j.end_time().max(j.queued_time());
            let key = j.scheduler_id().map(Arc::from);
            let newest = last_job.entry(key).or_default();
            *newest = (*newest).max(at);
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
    let mut rows: Vec<ClusterRow> = Vec::new();
    let mut ids: Vec<(Option<String>, [usize; 6])> = store
        .counts_by_scheduler()
        .into_iter()
        .map(|(id, c)| (id.map(|s| s.to_string()), c))
        .collect();
    for id in seen.keys() {
        if !ids.iter().any(|(i, _)| i.as_deref() == Some(*id)) {
            ids.push((Some(id.to_string()), [0; 6]));
        }
    }
    for (id, counts) in ids {
        let log = id.as_deref().and_then(|i| seen.get(i));
        let last_job_at = last_job
            .get(&id.as_deref().map(Arc::from))
            .copied()
            .filter(|t| *t > 0);
        let usage = id.as_deref().map(|id| {
            let intervals = intervals_of.get(id).map_or(&[][..], Vec::as_slice);
            let jobs = recent.get(id).map_or(&[][..], Vec::as_slice);
            usage(intervals, jobs, 0, (from, now), None)
        });
        rows.push(ClusterRow {
            jobs: JobState::ALL
                .iter()
                .map(|(word, state)| (*word, counts[state.index()]))
                .collect(),
            total_jobs: counts.iter().sum(),
            last_seen: last_job_at.max(log.map(|s| s.last.min(now))),
            last_job_at,
            recording: log.is_some_and(|s| s.recording),
            executors: log.map_or(0, |s| s.executors),
            slots: log.map_or(0, |s| s.slots),
            capacity_slot_ms: usage.as_ref().map_or(0, |u| u.capacity_slot_ms),
            busy_slot_ms: usage.as_ref().map_or(0, |u| u.busy_slot_ms),
            utilisation: usage.and_then(|u| u.utilisation),
            scheduler_id: id,
        });
    }
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
