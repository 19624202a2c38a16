//! The routes that explain jobs: `GET /api/job/{id}/diagnosis`,
//! `GET /api/job/{id}/whatif` and `GET /api/whatif/accuracy` (in
//! `whatif`), `GET /api/queries` and
//! `GET /api/compare?a=&b=`. They read through the
//! same [`JobSource`] as every job route and compute with `analysis`.

use crate::error::ApiError;
use crate::heavy::Keep;
use crate::params::{NoParams, Params, check};
use crate::source::{JobSource, Resource};
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use ballista_api_types::dto::PlanFormat;
use bjh_analysis::advice::{advise, check_next_run};
use bjh_analysis::compare::{ComparedRun, compare};
use bjh_analysis::diagnosis::{Diagnosis, Thresholds, diagnose, operator_memory};
use bjh_analysis::queries::{most_recent, recurring_top};
use bjh_analysis::whatif::Work;
use bjh_store::LogStore;
use bjh_store::query::{JobFacts, ListQuery, Order, Sort};
use bjh_store::records::JobRecords;
use http::StatusCode;
use rmcp::schemars;
use serde::Serialize;
use std::sync::Arc;

type Source = Arc<dyn JobSource>;

/// The most rows `GET /api/queries` answers at once.
pub const MAX_QUERIES: usize = 10_000;

/// The explaining routes over `source`; the recurring queries over
/// `store`, the log directory behind it.
pub(crate) fn routes(source: Source, store: Option<Arc<LogStore>>) -> Router {
    // The routes that replay, diagnose or compare: a share per client.
    let heavy = Router::new()
        .route("/api/job/{job_id}/diagnosis", get(get_diagnosis))
        .route("/api/compare", get(get_compare))
        .with_state(source.clone())
        .route(
            "/api/job/{job_id}/whatif",
            get(crate::whatif::get_whatif).with_state((source.clone(), store.clone())),
        )
        .route(
            "/api/whatif/accuracy",
            get(crate::whatif::get_accuracy).with_state((source, store.clone())),
        )
        .route_layer(axum::middleware::from_fn(crate::heavy::one_share));
    heavy
        .route("/api/queries", get(get_queries).with_state(store.clone()))
        .route(
            "/api/clusters",
            get(crate::clusters::get_clusters).with_state(store.clone()),
        )
        .route("/api/usage", get(crate::usage::get_usage).with_state(store))
}

/// `GET /api/queries`' parameters (and the MCP tool `recurring_queries`'
/// arguments).
#[derive(
    Debug, Default, serde::Deserialize, serde::Serialize, utoipa::IntoParams, schemars::JsonSchema,
)]
#[into_params(parameter_in = Query)]
pub struct QueriesParams {
    /// At most this many queries, most recently run first: 1 to 10000
    /// (default 100).
    pub limit: Option<usize>,
    /// Only the runs of these schedulers (comma-separated ids): each query
    /// grouped over their runs alone.
    pub scheduler_id: Option<String>,
    /// `true`: the history's own jobs (its SQL run on the cluster,
    /// `origin: "history"` in the list) grouped too; left out by default.
    pub include_history: Option<bool>,
}

/// Queries answered unless `limit` says otherwise.
pub const DEFAULT_QUERIES: usize = 100;

/// `GET /api/compare`'s parameters (and the MCP tool `compare_jobs`'
/// arguments): two runs.
#[derive(Debug, serde::Deserialize, serde::Serialize, utoipa::IntoParams, schemars::JsonSchema)]
#[into_params(parameter_in = Query)]
pub struct TwoRuns {
    /// The first run's job id (usually the earlier, good one).
    pub a: String,
    /// The second run's job id, compared with `a` (usually the slow one).
    pub b: String,
}

/// The diagnosis of a job this source has a log of; `Ok(None)` when it
/// has none.
pub(crate) async fn diagnosis_of(
    source: &dyn JobSource,
    job_id: &str,
) -> Result<Option<Diagnosis>, ApiError> {
    let Some((header, log)) = source.log_of(job_id) else {
        return Ok(None);
    };
    // Kept by this log's identity and the next run's (the advice is
    // checked against it).
    let finished = !header.state.is_unfinished();
    let next = if finished {
        next_run(source, job_id).await
    } else {
        None
    };
    let next_identity = next
        .as_ref()
        .and_then(|(id, _)| crate::whatif::identity_of(source, id).ok());
    let key = format!("diagnosis|{job_id}|{}|{next_identity:?}", log.identity());
    let heavy = crate::heavy::shared();
    if let Some(kept) = heavy.kept::<Diagnosis>(Keep::Answer, &key) {
        return Ok(Some(kept));
    }
    // Memory and spill metrics, where the stored metrics plans carry them
    // (a job still running has none stored; its findings say so).
    let metrics = match source
        .get(job_id, Resource::Stages(PlanFormat::Metrics))
        .await
    {
        Ok(Some(answer)) if answer.status == StatusCode::OK => Some(answer.body),
        _ => None,
    };
    let loaded = match finished {
        true => Some(crate::whatif::load(source, job_id).await?),
        false => None,
    };
    let id = job_id.to_string();
    let diagnosis = heavy
        .run(Keep::Answer, key, "the diagnosis", move || {
            let records = crate::source::read_records(&id, &log)?;
            let operators = metrics.map_or_else(Vec::new, |body| operator_memory(&body));
            let mut d = diagnose(&header, &records, &operators, &Thresholds::default());
            if let Some(loaded) = &loaded {
                add_advice(&mut d, &loaded.work, &records, next.as_ref());
            }
            Ok::<_, String>(d)
        })
        .await?;
    diagnosis.map(Some).map_err(ApiError::Internal)
}

/// Settings with a predicted effect (`analysis::advice`) added to the
/// diagnosis of a finished job: its tasks replayed on other shapes, the
/// findings the advice answers given its numbers, and `next` (the query's
/// next run, [`next_run`]) set beside them.
pub(crate) fn add_advice(
    d: &mut Diagnosis,
    work: &Work,
    records: &JobRecords,
    next: Option<&(String, Arc<Work>)>,
) {
    d.advice = advise(work, &records.executors, &mut d.findings);
    if let Some((id, next)) = next {
        d.next_run = Some(check_next_run(work, &mut d.advice, id, next));
    }
}

/// The runs of one start time a search for the next run looks through.
const NEXT_RUN_SCAN: usize = 100;

/// The next completed run of `job_id`'s query (the next by start time,
/// then id: the later run of the pair `GET /api/whatif/accuracy` makes of
/// the two) and its work, when it has a query hash, such a run and a
/// readable log.
pub(crate) async fn next_run(source: &dyn JobSource, job_id: &str) -> Option<(String, Arc<Work>)> {
    let facts = source.facts(job_id).await.ok()??;
    if facts.query_hash == 0 {
        return None;
    }
    let query = ListQuery {
        limit: Some(NEXT_RUN_SCAN),
        states: Some(vec![bjh_format::JobState::Completed]),
        started_after: Some(facts.start_time),
        query_hash: Some(facts.query_hash),
        sort: Sort::StartTime,
        order: Some(Order::Asc),
        ..ListQuery::default()
    };
    let page = source.list(&query, None).await.ok()?;
    let this = (facts.start_time, job_id);
    let next = page
        .rows
        .iter()
        .map(|r| (r.facts.start_time(), r.facts.job_id()))
        .filter(|run| *run > this)
        .min()?
        .1
        .to_string();
    let loaded = crate::whatif::load(source, &next).await.ok()?;
    Some((next, loaded.work.clone()))
}

/// `GET /api/job/{id}/diagnosis`.
#[utoipa::path(
    get,
    path = "/api/job/{job_id}/diagnosis",
    tag = "history",
    params(("job_id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "What made the job slow or fail, most severe first, with the thresholds in force", body = Diagnosis),
        (status = 404, description = "No event log of this job here", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_diagnosis(
    State(source): State<Source>,
    Path(job_id): Path<String>,
    _: Params<NoParams>,
) -> Result<Json<Diagnosis>, ApiError> {
    match diagnosis_of(&*source, &job_id).await? {
        Some(d) => Ok(Json(d)),
        None => Err(ApiError::Missing(format!(
            "no event log of job {job_id} here: a diagnosis reads the job's log"
        ))),
    }
}

/// `GET /api/queries`.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Queries {
    /// Distinct queries (all pages).
    total: usize,
    /// This page, most recently run first.
    queries: Vec<bjh_analysis::queries::QueryRow>,
}

/// `GET /api/queries`.
#[utoipa::path(
    get,
    path = "/api/queries",
    tag = "history",
    params(QueriesParams),
    responses(
        (status = 200, description = "Recurring queries (finished runs grouped by query hash), most recently run first, each with its durations and trend", body = Queries),
        (status = 400, description = "A parameter's bad value", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_queries(
    State(store): State<Option<Arc<LogStore>>>,
    Params { value, .. }: Params<QueriesParams>,
) -> Result<Json<Queries>, ApiError> {
    let limit = value.limit.unwrap_or(DEFAULT_QUERIES);
    let takes = "an integer from 1 to 10000";
    check("limit", limit, (1..=MAX_QUERIES).contains(&limit), takes)?;
    let schedulers = value.scheduler_id.as_deref().map(|ids| {
        ids.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    });
    let with_history = value.include_history == Some(true);
    let (total, queries) =
        recurring_queries(store.as_ref(), schedulers, limit, with_history).await?;
    Ok(Json(Queries { total, queries }))
}

/// How many recurring queries the log directory `store` holds, and the
/// `keep` most recently run, most recent first; with `schedulers`, of
/// their runs alone; the history's own jobs only `with_history`. Walked
/// query by query: what stays in memory is one query's runs and the rows
/// kept.
pub(crate) async fn recurring_queries(
    store: Option<&Arc<LogStore>>,
    schedulers: Option<Vec<String>>,
    keep: usize,
    with_history: bool,
) -> Result<(usize, Vec<bjh_analysis::queries::QueryRow>), ApiError> {
    let Some(store) = store.cloned() else {
        return Err(ApiError::Missing("no log directory here".into()));
    };
    let key = format!("queries {keep} {schedulers:?} {with_history}");
    crate::walks::shared()
        .walk(&store, Some(key), "grouping the queries", move |store| {
            store.with_completed_by_query(1..=u64::MAX, |jobs| {
                let ran = |j: &Arc<bjh_store::JobSummary>| {
                    let theirs = match &schedulers {
                        None => true,
                        Some(ids) => j
                            .scheduler_id()
                            .is_some_and(|id| ids.iter().any(|i| i == id)),
                    };
                    theirs && (with_history || !bjh_format::origin::is_history(j.job_name()))
                };
                recurring_top(jobs.filter(ran), keep, most_recent)
            })
        })
        .await
}

/// What the comparison reads of one run.
pub(crate) async fn run_view(
    source: &dyn JobSource,
    job_id: &str,
    param: &str,
) -> Result<ComparedRun, ApiError> {
    let facts = source
        .facts(job_id)
        .await?
        .ok_or_else(|| ApiError::Missing(format!("parameter `{param}`: no job {job_id:?} here")))?;
    let body = |resource| async move {
        match source.get(job_id, resource).await {
            Ok(Some(answer)) if answer.status == StatusCode::OK => answer.body.to_vec(),
            _ => Vec::new(),
        }
    };
    let job = body(Resource::Job(PlanFormat::Default)).await;
    #[derive(serde::Deserialize)]
    struct Plans {
        #[serde(default)]
        physical_plan: Option<String>,
    }
    let physical_plan = serde_json::from_slice::<Plans>(&job)
        .ok()
        .and_then(|p| p.physical_plan)
        .unwrap_or_default();
    Ok(ComparedRun {
        job_id: job_id.to_string(),
        job_name: facts.job_name.to_string(),
        status: facts.state.status_word().to_string(),
        duration_ms: facts.duration(),
        query_hash: facts.query_hash,
        stages: body(Resource::Stages(PlanFormat::Default)).await,
        config: body(Resource::Config).await,
        physical_plan,
        diagnosis: diagnosis_of(source, job_id).await?,
    })
}

/// `GET /api/compare?a=&b=`.
#[utoipa::path(
    get,
    path = "/api/compare",
    tag = "history",
    params(TwoRuns),
    responses(
        (status = 200, description = "Run b against run a: job-level deltas, stages matched by plan shape, config and plan differences, new and resolved findings", body = bjh_analysis::compare::Comparison),
        (status = 400, description = "A run missing", body = crate::error::ErrorBody),
        (status = 404, description = "No event log of a job here", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_compare(
    State(source): State<Source>,
    Params {
        value: TwoRuns { a, b },
        ..
    }: Params<TwoRuns>,
) -> Result<Json<bjh_analysis::compare::Comparison>, ApiError> {
    let a = run_view(&*source, &a, "a").await?;
    let b = run_view(&*source, &b, "b").await?;
    // A long plan's diff is work for a blocking thread, not the runtime.
    let comparison = tokio::task::spawn_blocking(move || compare(&a, &b))
        .await
        .map_err(|e| ApiError::Internal(format!("the comparison failed: {e}")))?;
    Ok(Json(comparison))
}
