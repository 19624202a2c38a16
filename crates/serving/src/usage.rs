//! `GET /api/usage?from=&to=&group_by=`: the slot time the cluster had over
//! a range, what its jobs used, and the idle rest apportioned to them
//! (`analysis::usage`), from the cluster logs (`store::cluster`) and the
//! completed jobs' slot times (`format::usage`).

use crate::error::ApiError;
use crate::params::{Params, check};
use axum::Json;
use axum::extract::State;
use bjh_analysis::usage::{Usage, UsageJob, usage};
use bjh_store::LogStore;
use bjh_store::cluster::SlotInterval;
use bjh_store::query::JobFacts;
use rmcp::schemars;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How slot time is priced: set by the server's flags, handed to the
/// route as an axum extension.
#[derive(Debug, Clone, Default)]
pub struct UsageSettings {
    /// The price of one slot-hour (`--slot-hour-price`); `None`: no costs.
    pub slot_hour_price: Option<f64>,
}

/// The longest range one request may ask: 400 days.
const MAX_RANGE_MS: u64 = 400 * 86_400_000;
/// The range when `from` is not given: the 24 hours before `to`.
const DEFAULT_RANGE_MS: u64 = 86_400_000;

/// `GET /api/usage`'s parameters.
#[derive(
    Debug, Default, serde::Deserialize, serde::Serialize, utoipa::IntoParams, schemars::JsonSchema,
)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// Range start, as the list's `started_after` takes it (epoch
    /// milliseconds or RFC 3339); default `to` less 24 hours.
    pub from: Option<String>,
    /// Range end, exclusive (same forms); default now.
    pub to: Option<String>,
    /// `query` (query hash, the default), `name`, `scheduler` or `tag`
    /// (the usage tags a recording scheduler's `--usage-tags` named).
    pub group_by: Option<String>,
    /// With `group_by=tag`: group by this tag's value alone (default:
    /// by all of a job's tags together).
    pub tag: Option<String>,
    /// One cluster: its executors' capacity against its own jobs (the
    /// scheduler id `/api/clusters` lists). Without it, every cluster's,
    /// each cluster's idle time shared among its own jobs only.
    pub scheduler_id: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/usage",
    tag = "history",
    params(UsageParams),
    responses(
        (status = 200, description = "Slot time over the range: capacity (executors' slots times their time up, from the cluster log), busy (the jobs' slot time), idle, its shares by group and the unattributed rest, by hour and by group", body = Usage),
        (status = 400, description = "A parameter's bad value", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_usage(
    State(store): State<Option<Arc<LogStore>>>,
    settings: Option<axum::Extension<UsageSettings>>,
    Params { value, .. }: Params<UsageParams>,
) -> Result<Json<Usage>, ApiError> {
    let price = settings.and_then(|s| s.slot_hour_price);
    Ok(Json(usage_of(store, &value, price).await?))
}

/// How `/api/usage` groups jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// By query hash.
    Query,
    /// By job name.
    Name,
    /// By scheduler id.
    Scheduler,
    /// By usage tags.
    Tag,
    /// By executor: each its capacity, the busy time its jobs had on it
    /// (their footers' `busy_by_executor`) and its idle time.
    Executor,
}

impl GroupBy {
    /// The parameter's words.
    pub const WORDS: [(&'static str, GroupBy); 5] = [
        ("query", GroupBy::Query),
        ("name", GroupBy::Name),
        ("scheduler", GroupBy::Scheduler),
        ("tag", GroupBy::Tag),
        ("executor", GroupBy::Executor),
    ];

    /// The word for this grouping.
    pub fn word(self) -> &'static str {
        Self::WORDS
            .iter()
            .find(|w| w.1 == self)
            .map_or("query", |w| w.0)
    }
}

/// The range and grouping `params` ask, checked.
pub fn asked(params: &UsageParams, now: u64) -> Result<(u64, u64, GroupBy), ApiError> {
    let to = crate::jobs_params::time("to", &params.to)?.unwrap_or(now);
    let from = crate::jobs_params::time("from", &params.from)?
        .unwrap_or(to.saturating_sub(DEFAULT_RANGE_MS));
    check("from", from, from < to, "a time before `to`")?;
    let days = "a range of at most 400 days";
    check("to", to, to - from <= MAX_RANGE_MS, days)?;
    let word = params.group_by.as_deref().unwrap_or("query");
    let group_by = GroupBy::WORDS.iter().find(|w| w.0 == word).map(|w| w.1);
    check(
        "group_by",
        word,
        group_by.is_some(),
        "query, name or scheduler",
    )?;
    Ok((from, to, group_by.unwrap_or(GroupBy::Query)))
}

/// The usage `params` ask of the log directory `store`, priced at
/// `price` a slot-hour.
pub async fn usage_of(
    store: Option<Arc<LogStore>>,
    params: &UsageParams,
    price: Option<f64>,
) -> Result<Usage, ApiError> {
    let now = bjh_format::now_millis();
    let (from, to, group_by) = asked(params, now)?;
    let Some(store) = store else {
        return Err(ApiError::Missing("no log directory here".into()));
    };
    let tag = params.tag.clone();
    let only = params.scheduler_id.clone().filter(|s| !s.is_empty());
    if group_by == GroupBy::Executor {
        return tokio::task::spawn_blocking(move || {
            by_executor(&store, (from, to), now, price, only.as_deref())
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    }
    tokio::task::spawn_blocking(move || {
        let cluster = store.cluster(now);
        // Each cluster (scheduler id) apart: its intervals, its jobs, the
        // jobs of it whose slot time is not known.
        type Part = (Vec<SlotInterval>, Vec<UsageJob>, u64);
        let mut clusters: BTreeMap<String, Part> = BTreeMap::new();
        for i in cluster.intervals {
            if only.as_deref().is_none_or(|s| s == i.scheduler_id) {
                clusters
                    .entry(i.scheduler_id.clone())
                    .or_default()
                    .0
                    .push(i);
            }
        }
        for j in store.ran_between(from, to) {
            let scheduler = j.scheduler_id().unwrap_or("");
            if only.as_deref().is_some_and(|s| s != scheduler) {
                continue;
            }
            let part = clusters.entry(scheduler.to_string()).or_default();
            let Some(u) = j.usage() else {
                part.2 += 1;
                continue;
            };
            let job = {
                let key = match group_by {
                    // The history's own work, whatever the grouping.
                    _ if bjh_format::origin::is_history(j.job_name()) => {
                        bjh_analysis::usage::HISTORY_GROUP.to_string()
                    }
                    GroupBy::Name => j.job_name().to_string(),
                    GroupBy::Scheduler => j.scheduler_id().unwrap_or("").to_string(),
                    GroupBy::Query => match j.query_hash() {
                        0 => String::new(),
                        h => bjh_format::query_hash::hash_text(h),
                    },
                    GroupBy::Tag => tag_key(j.tags(), tag.as_deref()),
                    GroupBy::Executor => String::new(),
                };
                UsageJob {
                    key,
                    start: j.start_time(),
                    end: j.end_time(),
                    busy_slot_ms: u.busy_slot_ms,
                    waited_ms: match j.queued_time() {
                        0 => 0,
                        queued => j.start_time().saturating_sub(queued),
                    },
                }
            };
            part.1.push(job);
        }
        let parts = clusters
            .into_values()
            .map(|(intervals, jobs, unknown)| usage(&intervals, &jobs, unknown, (from, to), price));
        bjh_analysis::usage::merged(parts, (from, to), price)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))
}

/// A job's group under `group_by=tag`: its tags (a JSON object's text) as
/// `k=v, ...`, or the one tag `key`'s value; empty when it has none.
fn tag_key(tags: Option<&str>, key: Option<&str>) -> String {
    let Some(tags) = tags else {
        return String::new();
    };
    let map: std::collections::BTreeMap<String, String> =
        serde_json::from_str(tags).unwrap_or_default();
    match key {
        Some(key) => map.get(key).cloned().unwrap_or_default(),
        None => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Jobs whose footers `group_by=executor` reads at most (one small read
/// each).
pub const MAX_EXECUTOR_JOBS: usize = 50_000;

/// Job-executor pairs `group_by=executor` takes at most (a footer names
/// at most 10,000 executors).
pub const MAX_EXECUTOR_ENTRIES: usize = 1_000_000;

/// Usage by executor: each executor's intervals and the busy time the
/// jobs of the range had on it, from their footers.
fn by_executor(
    store: &LogStore,
    (from, to): (u64, u64),
    now: u64,
    price: Option<f64>,
    only: Option<&str>,
) -> Result<Usage, ApiError> {
    let mut jobs = store.ran_between(from, to);
    if let Some(s) = only {
        jobs.retain(|j| j.scheduler_id() == Some(s));
    }
    if jobs.len() > MAX_EXECUTOR_JOBS {
        return Err(ApiError::BadRequest(format!(
            "invalid value for parameter `group_by`: executor reads each job's footer, at most \
             {MAX_EXECUTOR_JOBS} jobs, and {} ran in this range; narrow it with `from` and `to`",
            jobs.len()
        )));
    }
    let cluster = store.cluster(now);
    let mut parts: std::collections::BTreeMap<String, (Vec<_>, Vec<UsageJob>)> = Default::default();
    for i in cluster
        .intervals
        .iter()
        .filter(|i| only.is_none_or(|s| s == i.scheduler_id))
    {
        parts
            .entry(i.executor_id.clone())
            .or_default()
            .0
            .push(i.clone());
    }
    let mut unknown = 0;
    let mut entries = 0usize;
    for j in &jobs {
        let footer = store.footer(j.job_id());
        let Some(by) = footer.map(|f| f.busy_by_executor).filter(|b| !b.is_empty()) else {
            unknown += 1;
            continue;
        };
        entries = entries.saturating_add(by.len());
        if entries > MAX_EXECUTOR_ENTRIES {
            return Err(ApiError::BadRequest(format!(
                "invalid value for parameter `group_by`: executor reads at most \
                 {MAX_EXECUTOR_ENTRIES} job-executor pairs from the footers, and this range has \
                 more; narrow it with `from` and `to`"
            )));
        }
        for (executor, busy_slot_ms) in by {
            parts.entry(executor.clone()).or_default().1.push(UsageJob {
                key: executor,
                start: j.start_time(),
                end: j.end_time(),
                busy_slot_ms,
                waited_ms: 0,
            });
        }
    }
    // One executor's usage (its hours) at a time, folded in as it is
    // made: a log naming a thousand executors over 400 days held a
    // thousand `Usage`s of 9,600 hours each.
    let parts = parts.into_iter().map(|(executor, (intervals, jobs))| {
        let part = usage(&intervals, &jobs, unknown, (from, to), price);
        (executor, part)
    });
    let mut out = bjh_analysis::usage::combined(parts, (from, to), price);
    out.jobs = (jobs.len() as u64).saturating_sub(unknown);
    out.jobs_without_usage = unknown;
    Ok(out)
}
