//! `GET /api/job/{id}/whatif`: a finished job replayed on another cluster
//! shape (`analysis::whatif`), its stage graph and its tasks' partitions
//! read from the stored `/stages` answer; and `GET /api/whatif/accuracy`,
//! the replays graded against the next run of the same query
//! (`analysis::accuracy`).

use crate::error::ApiError;
use crate::heavy::Keep;
use crate::params::{Params, check};
use crate::source::{JobSource, Resource};
use axum::Json;
use axum::extract::{Path, State};
use ballista_api_types::dto::PlanFormat;
use bjh_analysis::accuracy::{Accuracy, Pair, QueryGrades, Run, grade, newest_pairs};
use bjh_analysis::whatif::{Layout, MAX_EXECUTORS, MAX_SLOTS, Point, Shape, Work, knee};
use bjh_format::query_hash::{hash_text, parse_hash};
use bjh_format::stages::{StagesAnswer, stage_edges, task_slots};
use bjh_store::LogStore;
use http::StatusCode;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// `GET /api/job/{id}/whatif`'s parameters.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WhatIfParams {
    /// Executors of the shape asked (1 to 10000; default: as observed).
    pub executors: Option<u32>,
    /// Task slots on each executor (1 to 1024; default: as observed).
    pub slots: Option<u32>,
    /// An executor whose tasks run at the pace of the others' on the same
    /// stage (what a bad node cost).
    pub without_executor: Option<String>,
    /// `false`: leave out `history` (it reads the query's last runs).
    pub graded: Option<bool>,
}

/// The shape a job ran on, and whether the log said so or its tasks did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ObservedShape {
    /// Executors: registered when the job started, as its log records
    /// them; else those that ran a task.
    pub executors: u32,
    /// Task slots of each: the most one executor had, as recorded; else
    /// the most one executor held at once (a task holds one per partition
    /// it computes).
    pub slots: u32,
    /// `false` when the log recorded the shape (our logs since the
    /// `JobStart` record names the executors), `true` when it was read
    /// from the tasks (upstream's logs).
    pub inferred: bool,
}

/// `GET /api/job/{id}/whatif`'s answer. Times (ms) run from the job's
/// `start_time` to its `end_time`, as the job list has them.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WhatIf {
    /// The job.
    pub job_id: String,
    /// What the job took.
    pub observed_ms: u64,
    /// The replay on the observed shape: its difference from
    /// `observed_ms` is the model's error on this job.
    pub replayed_ms: u64,
    /// The replay on `shape`.
    pub predicted_ms: u64,
    /// No task ever waiting for a slot: the floor of any shape.
    pub critical_path_ms: u64,
    /// All task time spread evenly over `shape`'s slots.
    pub ideal_ms: u64,
    /// The shape asked (the observed one without parameters).
    pub shape: Shape,
    /// The shape the job ran on.
    pub observed_shape: ObservedShape,
    /// The executor whose tasks were given the others' pace, if asked.
    pub without_executor: Option<String>,
    /// Without `executors` and `slots`: the prediction for 1, 2, ...
    /// executors of the observed slots, up to the critical path.
    pub curve: Vec<Point>,
    /// The smallest shape of `curve` within 10% of the critical path.
    pub knee: Option<Point>,
    /// How the replays of this query's runs fared against its next runs
    /// (its newest [`HISTORY_PAIRS`] pairs), with `unreliable` set when
    /// they were far off; `null` for a job without a query hash, without
    /// another run, or with `graded=false`.
    pub history: Option<QueryGrades>,
}

/// Pairs of a query's runs a what-if grades its history by.
pub const HISTORY_PAIRS: usize = 5;

/// `GET /api/job/{id}/whatif`.
#[utoipa::path(
    get,
    path = "/api/job/{job_id}/whatif",
    tag = "history",
    params(("job_id" = String, Path, description = "The job's id"), WhatIfParams),
    responses(
        (status = 200, description = "The job replayed on another shape, with the replay at its own shape, the critical path and the ideal; without a shape, the curve over executor counts", body = WhatIf),
        (status = 400, description = "A shape out of range, or an executor the job did not use", body = crate::error::ErrorBody),
        (status = 404, description = "No event log of this job here", body = crate::error::ErrorBody),
        (status = 409, description = "The job has not finished", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_whatif(
    State((source, store)): State<Graded>,
    Path(job_id): Path<String>,
    Params { value, .. }: Params<WhatIfParams>,
) -> Result<Json<WhatIf>, ApiError> {
    let graded = value.graded != Some(false);
    let mut answer = whatif_of(&*source, job_id, value).await?;
    if graded && let Some(store) = store {
        answer.history = history_of(source, store, &answer.job_id).await?;
    }
    Ok(Json(answer))
}

/// The grades of `job_id`'s query over its newest [`HISTORY_PAIRS`] pairs
/// of runs, when it has a hash and a pair.
pub(crate) async fn history_of(
    source: Arc<dyn JobSource>,
    store: Arc<LogStore>,
    job_id: &str,
) -> Result<Option<QueryGrades>, ApiError> {
    let hash = match source.facts(job_id).await? {
        Some(f) if f.query_hash != 0 => f.query_hash,
        _ => return Ok(None),
    };
    let graded = accuracy_of(source, store, Some(hash), HISTORY_PAIRS).await?;
    Ok(graded.queries.into_iter().next())
}

/// The what-if of `job_id` for `asked`: the route's answer, and the job
/// page's What-if tab.
pub(crate) async fn whatif_of(
    source: &dyn JobSource,
    job_id: String,
    asked: WhatIfParams,
) -> Result<WhatIf, ApiError> {
    let takes = |max| format!("an integer from 1 to {max}");
    if let Some(e) = asked.executors {
        check(
            "executors",
            e,
            (1..=MAX_EXECUTORS).contains(&e),
            &takes(MAX_EXECUTORS),
        )?;
    }
    if let Some(s) = asked.slots {
        check("slots", s, (1..=MAX_SLOTS).contains(&s), &takes(MAX_SLOTS))?;
    }
    let identity = identity_of(source, &job_id)?;
    let key = format!(
        "whatif|{job_id}|{identity}|{:?}|{:?}|{:?}",
        asked.executors, asked.slots, asked.without_executor
    );
    let heavy = crate::heavy::shared();
    if let Some(answer) = heavy.kept::<WhatIf>(Keep::Answer, &key) {
        return Ok(answer);
    }
    let loaded = load(source, &job_id).await?;
    let without = match &asked.without_executor {
        None => None,
        Some(id) => Some(
            loaded
                .executors
                .iter()
                .position(|e| e == id)
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "parameter `without_executor`: executor {id:?} ran no task of job {job_id}"
                    ))
                })? as u32,
        ),
    };
    heavy
        .run(Keep::Answer, key, "the replay", move || {
            let seen = loaded.work.observed_shape();
            let replayed_ms = loaded.work.replay(seen);
            let owned;
            let work: &Work = match without {
                Some(x) => {
                    owned = loaded.work.without_executor(x);
                    &owned
                }
                None => &loaded.work,
            };
            let shape = Shape {
                executors: asked.executors.unwrap_or(seen.executors),
                slots: asked.slots.unwrap_or(seen.slots),
            };
            let critical_path_ms = work.critical_path();
            let curve = if asked.executors.is_some() || asked.slots.is_some() {
                Vec::new()
            } else {
                work.curve(shape.slots)
            };
            WhatIf {
                job_id,
                observed_ms: work.observed_ms(),
                replayed_ms,
                predicted_ms: work.replay(shape),
                critical_path_ms,
                ideal_ms: work.ideal(shape),
                shape,
                observed_shape: ObservedShape {
                    executors: seen.executors,
                    slots: seen.slots,
                    inferred: !work.shape_recorded(),
                },
                without_executor: asked.without_executor,
                knee: knee(&curve, critical_path_ms),
                curve,
                history: None,
            }
        })
        .await
}

/// A finished job as a replay reads it: its work (tasks,
/// stage graph, slots) and the executors that ran its tasks.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// Its tasks on its stage graph.
    pub(crate) work: Arc<Work>,
    /// The executors that ran its tasks, as its records number them.
    pub(crate) executors: Vec<String>,
}

/// The identity of the log `source` has of the finished job `job_id`
/// (`LogRef::identity`), which what is computed from it is kept by.
pub(crate) fn identity_of(source: &dyn JobSource, job_id: &str) -> Result<String, ApiError> {
    let Some((header, log)) = source.log_of(job_id) else {
        return Err(ApiError::Missing(format!(
            "no event log of job {job_id} here: a what-if reads the job's log"
        )));
    };
    if header.state.is_unfinished() {
        return Err(ApiError::Conflict(format!(
            "job {job_id} has not finished: a what-if replays a finished job"
        )));
    }
    Ok(log.identity())
}

/// A finished job's header, work and executors, for a replay: read,
/// parsed and built on a blocking thread behind the heavy work's gate,
/// and kept by the log's identity.
pub(crate) async fn load(source: &dyn JobSource, job_id: &str) -> Result<Arc<Loaded>, ApiError> {
    let identity = identity_of(source, job_id)?;
    let Some((header, log)) = source.log_of(job_id) else {
        return Err(ApiError::Missing(format!(
            "no event log of job {job_id} here"
        )));
    };
    let key = format!("work|{job_id}|{identity}");
    let heavy = crate::heavy::shared();
    if let Some(loaded) = heavy.kept::<Arc<Loaded>>(Keep::Work, &key) {
        return Ok(loaded);
    }
    let stages = stored_stages(source, job_id).await;
    let id = job_id.to_string();
    let loaded = heavy
        .run(Keep::Work, key, "reading the job's tasks", move || {
            let records = crate::source::read_records(&id, &log)?;
            let layout = layout_of(stages.as_deref());
            let work = Work::of(&records, &layout, header.start_time, header.end_time);
            Ok::<_, String>(Arc::new(Loaded {
                work: Arc::new(work),
                executors: records.executors.clone(),
            }))
        })
        .await?;
    loaded.map_err(ApiError::Internal)
}

/// `job_id`'s stored `/stages` answer, when it has one.
async fn stored_stages(source: &dyn JobSource, job_id: &str) -> Option<bytes::Bytes> {
    match source
        .get(job_id, Resource::Stages(PlanFormat::Default))
        .await
    {
        Ok(Some(a)) if a.status == StatusCode::OK => Some(a.body),
        _ => None,
    }
}

/// The stage graph and the tasks' slots of a job, from its stored
/// `/stages` answer (empty without one: every task one slot, no edges):
/// the plans' reads and the inferred links of stages adaptive planning
/// pruned ([`stage_edges`]); a pruned stage's reader still waited for it.
pub(crate) fn layout_of(stages: Option<&[u8]>) -> Layout {
    let Some(body) = stages else {
        return Layout::default();
    };
    let stages = StagesAnswer::parse(body).stages;
    Layout {
        edges: stage_edges(&stages)
            .into_iter()
            .map(|e| (e.from, e.to))
            .collect(),
        task_slots: task_slots(&stages),
    }
}

/// `GET /api/whatif/accuracy`'s parameters.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AccuracyParams {
    /// At most this many pairs, the newest first: 1 to 200 (default 50).
    pub limit: Option<usize>,
    /// Only the runs of this query (16 hex digits).
    pub query_hash: Option<String>,
    /// `true`: the history's own jobs (its SQL run on the cluster) paired
    /// too; left out by default.
    pub include_history: Option<bool>,
}

/// Pairs graded unless `limit` says otherwise.
pub const DEFAULT_PAIRS: usize = 50;
/// The most pairs one request grades: each reads two logs (a log read for
/// two pairs is read once), so a request reads at most 400.
pub const MAX_PAIRS: usize = 200;

/// What the accuracy route reads: the jobs' source and the log directory
/// that lists the completed runs.
pub(crate) type Graded = (Arc<dyn JobSource>, Option<Arc<LogStore>>);

/// `GET /api/whatif/accuracy`.
#[utoipa::path(
    get,
    path = "/api/whatif/accuracy",
    tag = "history",
    params(AccuracyParams),
    responses(
        (status = 200, description = "Consecutive completed runs of each recurring query graded as experiments: the earlier run replayed on the later run's shape against what the later run took, over the whole history, by kind of change and by query; pairs on one shape give the noise", body = Accuracy),
        (status = 400, description = "A parameter's bad value", body = crate::error::ErrorBody),
        (status = 404, description = "No log directory here", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_accuracy(
    State((source, store)): State<Graded>,
    Params { value, .. }: Params<AccuracyParams>,
) -> Result<Json<Accuracy>, ApiError> {
    let limit = value.limit.unwrap_or(DEFAULT_PAIRS);
    check(
        "limit",
        limit,
        (1..=MAX_PAIRS).contains(&limit),
        "an integer from 1 to 200",
    )?;
    let only = match value.query_hash.as_deref().filter(|h| !h.is_empty()) {
        None => None,
        Some(hex) => {
            let hash = parse_hash(hex);
            check("query_hash", hex, hash.is_some(), "16 hex digits")?;
            hash
        }
    };
    let Some(store) = store else {
        return Err(ApiError::Missing("no log directory here".into()));
    };
    let with_history = value.include_history == Some(true);
    Ok(Json(
        accuracy_kept(source, store, only, limit, None, with_history).await?,
    ))
}

/// The newest `limit` pairs of consecutive completed runs (of the query
/// `only`, or of every query) graded.
pub(crate) async fn accuracy_of(
    source: Arc<dyn JobSource>,
    store: Arc<LogStore>,
    only: Option<u64>,
    limit: usize,
) -> Result<Accuracy, ApiError> {
    accuracy_kept(source, store, only, limit, None, false).await
}

/// Graded pairs kept by `(earlier, later)` run: both logs are complete, so
/// a pair once graded is graded the same again.
pub type KeptPairs = parking_lot::Mutex<HashMap<(String, String), Pair>>;

/// [`accuracy_of`], taking the pairs `kept` holds as graded and keeping
/// those it grades (only the pairs of this answer stay kept).
pub(crate) async fn accuracy_kept(
    source: Arc<dyn JobSource>,
    store: Arc<LogStore>,
    only: Option<u64>,
    limit: usize,
    kept: Option<&KeptPairs>,
    with_history: bool,
) -> Result<Accuracy, ApiError> {
    // The newest pairs, walked query by query: one query's runs in
    // memory at a time.
    let hashes = only.map_or(1..=u64::MAX, |h| h..=h);
    let key = format!("pairs {limit} {hashes:?} {with_history}");
    let pairs: Vec<(Run, Run)> = crate::walks::shared()
        .walk(&store, Some(key), "listing the runs", move |store| {
            store.with_completed_by_query(hashes, |jobs| {
                let users = jobs.filter(|j| {
                    with_history
                        || !bjh_format::origin::is_history(bjh_store::query::JobFacts::job_name(
                            &**j,
                        ))
                });
                newest_pairs(users, limit)
            })
        })
        .await?;
    let mut graded = Vec::with_capacity(pairs.len());
    let heavy = crate::heavy::shared();
    for (a, b) in pairs {
        let key = (a.2.clone(), b.2.clone());
        if let Some(pair) = kept.and_then(|k| k.lock().get(&key).cloned()) {
            graded.push(pair);
            continue;
        }
        // A log gone or unreadable since it was listed: the pair is left
        // out, not the answer.
        let (Ok(ia), Ok(ib)) = (
            identity_of(source.as_ref(), &a.2),
            identity_of(source.as_ref(), &b.2),
        ) else {
            continue;
        };
        let pair_key = format!("pair|{}|{ia}|{}|{ib}", a.2, b.2);
        let pair = match heavy.kept::<Pair>(Keep::Answer, &pair_key) {
            Some(pair) => pair,
            None => {
                let (Ok(la), Ok(lb)) = (
                    load(source.as_ref(), &a.2).await,
                    load(source.as_ref(), &b.2).await,
                ) else {
                    continue;
                };
                heavy
                    .run(Keep::Answer, pair_key, "grading a replay", move || {
                        let (wa, wb) = (&la.work, &lb.work);
                        let shape_b = wb.observed_shape();
                        Pair {
                            query_hash: hash_text(a.0),
                            a: a.2.clone(),
                            b: b.2.clone(),
                            shape_a: wa.observed_shape(),
                            shape_b,
                            predicted_ms: wa.replay(shape_b),
                            actual_ms: wb.observed_ms(),
                            naive_ms: wa.observed_ms(),
                            partitions_a: wa.partitions(),
                            partitions_b: wb.partitions(),
                        }
                    })
                    .await?
            }
        };
        if let Some(k) = kept {
            k.lock().insert(key, pair.clone());
        }
        graded.push(pair);
    }
    if let Some(k) = kept {
        let now: std::collections::HashSet<(&str, &str)> = graded
            .iter()
            .map(|p| (p.a.as_str(), p.b.as_str()))
            .collect();
        k.lock()
            .retain(|(a, b), _| now.contains(&(a.as_str(), b.as_str())));
    }
    Ok(grade(graded))
}
