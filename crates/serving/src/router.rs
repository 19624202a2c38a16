//! The REST router over a [`JobSource`], and its errors as JSON.
//!
//! The job routes (`/api/jobs`, `/api/job/{id}` and its sub-paths) are the
//! same code in every mode; only the source differs. Errors use the
//! scheduler's JSON body (`{"http_code", "reason", "error"}`) and never
//! carry file paths: details go to the log.
//!
//! **Invariant:** a job id from a URL is only ever a key for the source;
//! it is never joined into a path.

use crate::error::ApiError;
use crate::job_metrics::JobGauges;
use crate::jobs_params::JobsParams;
use crate::params::Params;
use crate::source::{JSON, JobSource, Resource, read_log};
use crate::timeline::{self, TimelineRequest};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ballista_api_types::dto::PlanFormat;
use bjh_recording::live::HttpAnswer;
use bjh_store::LogStore;
use bjh_store::query::{Facts, ListQuery};
use http::{StatusCode, header};
use std::sync::Arc;

/// The `?plan_format=` parameter of a job and its stages.
#[derive(Debug, serde::Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct FormatParams {
    /// How plans are rendered: default (text), tree or metrics (with each
    /// operator's metrics).
    #[param(value_type = Option<String>)]
    pub plan_format: Option<PlanFormat>,
}

type Source = Arc<dyn JobSource>;

/// The job routes over `source`; with `store`, the log directory behind
/// it, the recurring queries too.
pub fn job_routes(source: Source, store: Option<Arc<LogStore>>) -> Router {
    Router::new()
        .route("/api/jobs", get(list_jobs))
        .route(
            "/api/job/{job_id}",
            get(get_formatted::<false>).patch(cancel_job),
        )
        .route("/api/job/{job_id}/stages", get(get_formatted::<true>))
        .route("/api/job/{job_id}/config", get(get_config))
        .route("/api/job/{job_id}/dot", get(get_dot))
        .route("/api/job/{job_id}/stage/{stage_id}/dot", get(get_stage_dot))
        .route("/api/job/{job_id}/timeline", get(get_timeline))
        .route("/api/job/{job_id}/timeline.svg", get(get_timeline_svg))
        .route("/api/job/{job_id}/eventlog", get(get_eventlog))
        .with_state(source.clone())
        .merge(crate::insight::routes(source, store))
}

/// Header with the number of jobs matching the filters, over all pages.
pub(crate) const TOTAL_COUNT_HEADER: &str = "x-total-count";
/// Header with the cursor of the next page (`after=` its value), present
/// when more jobs follow.
pub(crate) const NEXT_AFTER_HEADER: &str = "x-next-after";

/// `GET /api/jobs`: upstream's list, filtered, sorted and paged.
#[utoipa::path(
    get,
    path = "/api/jobs",
    tag = "jobs",
    params(JobsParams),
    responses(
        (status = 200, description = "The jobs, newest first unless sorted otherwise", body = Vec<ballista_api_types::dto::JobResponse>,
            headers(
                ("x-total-count" = u64, description = "Jobs matching the filters, over all pages"),
                ("x-next-after" = String, description = "The next page's `after=`, when more jobs follow"),
                ("x-ballista-ignored-params" = String, description = "Parameters this server does not know, ignored")
            )
        ),
        (status = 400, description = "A parameter's value is not one it accepts; the error names it", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn list_jobs(
    State(source): State<Source>,
    Params { value, .. }: Params<JobsParams>,
) -> Result<Response, ApiError> {
    let query = value.query(bjh_format::now_millis())?;
    let cursor = cursor_facts(&*source, &query).await?;
    let page = source.list(&query, cursor.as_ref()).await?;
    let mut body =
        Vec::with_capacity(page.rows.iter().map(|r| r.entry.len() + 1).sum::<usize>() + 2);
    body.push(b'[');
    for (i, row) in page.rows.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&row.entry);
    }
    body.push(b']');
    let mut response = HttpAnswer::ok(JSON, body).into_response();
    let headers = response.headers_mut();
    headers.insert(TOTAL_COUNT_HEADER, page.total.into());
    if let (Some(limit), Some(last)) = (query.limit, page.rows.last())
        && page.rows.len() == limit
        && let Ok(value) = http::HeaderValue::from_str(last.facts.job_id())
    {
        headers.insert(NEXT_AFTER_HEADER, value);
    }
    Ok(response)
}

/// The facts of the job a page is cut at (`after=` or `before=`); a 400
/// when the source does not know it.
pub(crate) async fn cursor_facts(
    source: &dyn JobSource,
    query: &ListQuery,
) -> Result<Option<Facts>, ApiError> {
    let Some(id) = query.cursor_id() else {
        return Ok(None);
    };
    let param = if query.after.is_some() {
        "after"
    } else {
        "before"
    };
    match source.facts(id).await? {
        Some(facts) => Ok(Some(facts)),
        None => Err(ApiError::BadRequest(format!(
            "invalid value {id:?} for parameter `{param}`: no such job (it may have been \
             deleted); expected a job id from a previous page"
        ))),
    }
}

/// `GET /api/job/{id}/timeline`.
#[utoipa::path(
    get,
    path = "/api/job/{job_id}/timeline",
    tag = "history",
    params(
        ("job_id" = String, Path, description = "The job's id"),
        crate::timeline::Paging,
    ),
    responses(
        (status = 200, description = "Every stage and a page of task attempts, in the order they finished", body = bjh_pictures::timeline::Timeline),
        (status = 400, description = "A parameter's bad value", body = crate::error::ErrorBody),
        (status = 404, description = "No such job here", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_timeline(
    State(source): State<Source>,
    Path(job_id): Path<String>,
    Params { value, .. }: Params<crate::timeline::Paging>,
) -> Result<Response, ApiError> {
    let request = TimelineRequest::Json(value.params()?);
    found(timeline::answer(&*source, &job_id, request).await?)
}

/// `GET /api/job/{id}/timeline.svg`.
#[utoipa::path(
    get,
    path = "/api/job/{job_id}/timeline.svg",
    tag = "history",
    params(("job_id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The task timeline as a picture (SVG)", content(("image/svg+xml"))),
        (status = 404, description = "No such job here", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_timeline_svg(
    State(source): State<Source>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    found(timeline::answer(&*source, &job_id, TimelineRequest::Svg).await?)
}

/// `GET /api/job/{id}/eventlog`: see [`eventlog`].
#[utoipa::path(
    get,
    path = "/api/job/{job_id}/eventlog",
    tag = "history",
    params(("job_id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job's event log as stored (JSON Lines, decompressed), a download", content(("application/x-ndjson"))),
        (status = 404, description = "No event log of this job here", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_eventlog(
    State(source): State<Source>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    eventlog(&source, &job_id).await
}

/// The job's event log as it is on disk (decompressed when stored as
/// zstd; what has been written so far while the job runs), streamed as a
/// download: the answer of `GET /api/job/{id}/eventlog` and of the page's
/// download link alike.
pub(crate) async fn eventlog(source: &Source, job_id: &str) -> Result<Response, ApiError> {
    use std::io::Read as _;
    let Some((_, log)) = source.log_of(job_id) else {
        return Err(ApiError::Missing(format!(
            "no event log of job {job_id} here"
        )));
    };
    let mut reader = read_log(job_id, move || {
        bjh_store::open_decoded(&log).map_err(bjh_store::StoreError::from)
    })
    .await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        loop {
            let mut chunk = vec![0; 256 * 1024];
            let sent = match reader.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => {
                    chunk.truncate(n);
                    tx.blocking_send(Ok(chunk.into()))
                }
                Err(e) => tx.blocking_send(Err(e)),
            };
            if sent.is_err() {
                return;
            }
        }
    });
    let body = axum::body::Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    // The id is the file name's stem only where it is a plain name.
    let stem: String = job_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{stem}.eventlog\""),
            ),
            (
                http::HeaderName::from_static(crate::source::FROM_LOG_HEADER),
                "event-log".to_string(),
            ),
        ],
        body,
    )
        .into_response())
}

/// The reply, or a 404 when the source does not know the job.
fn found(reply: Option<HttpAnswer>) -> Result<Response, ApiError> {
    reply
        .map(IntoResponse::into_response)
        .ok_or(ApiError::NotFound)
}

async fn answer(source: &Source, job_id: &str, resource: Resource) -> Result<Response, ApiError> {
    found(source.get(job_id, resource).await?)
}

/// `GET /api/job/{id}` and, with `STAGES`, `GET /api/job/{id}/stages`:
/// the two answers that take `?plan_format=`.
async fn get_formatted<const STAGES: bool>(
    State(source): State<Source>,
    Path(job_id): Path<String>,
    Params { value, .. }: Params<FormatParams>,
) -> Result<Response, ApiError> {
    let format = value.plan_format.unwrap_or_default();
    let resource = match STAGES {
        true => Resource::Stages(format),
        false => Resource::Job(format),
    };
    answer(&source, &job_id, resource).await
}

async fn get_config(
    State(source): State<Source>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    answer(&source, &job_id, Resource::Config).await
}

async fn get_dot(
    State(source): State<Source>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    answer(&source, &job_id, Resource::Dot).await
}

async fn get_stage_dot(
    State(source): State<Source>,
    Path((job_id, stage_id)): Path<(String, usize)>,
) -> Result<Response, ApiError> {
    answer(&source, &job_id, Resource::StageDot(stage_id)).await
}

async fn cancel_job(
    State(source): State<Source>,
    Path(job_id): Path<String>,
) -> Result<Response, ApiError> {
    found(source.cancel(&job_id).await?)
}

/// What a history-only server says about itself on `/api/state`.
#[derive(Debug, serde::Serialize)]
pub struct HistoryState {
    started: u128,
    scheduler_id: &'static str,
    version: &'static str,
    datafusion_version: &'static str,
    substrait_support: bool,
    keda_support: bool,
    prometheus_support: bool,
    graphviz_support: bool,
    spark_support: bool,
    scheduling_policy: &'static str,
    enable_embedded_flight_proxy: bool,
    history_only: bool,
}

/// The routes a history-only server adds to the job routes: state, version,
/// executors (none), metrics and health. `ready` says whether the first
/// index pass is done.
pub fn history_routes(started: u128, ready: Arc<dyn Fn() -> bool + Send + Sync>) -> Router {
    let state = move || async move {
        Json(HistoryState {
            started,
            scheduler_id: "history-server",
            version: ballista_core::BALLISTA_VERSION,
            datafusion_version: datafusion::DATAFUSION_VERSION,
            substrait_support: false,
            keda_support: false,
            prometheus_support: true,
            graphviz_support: false,
            spark_support: false,
            scheduling_policy: "history-only",
            enable_embedded_flight_proxy: false,
            history_only: true,
        })
    };
    Router::new()
        .route("/api/state", get(state))
        .route("/api/version", get(version))
        .route("/api/executors", get(|| async { Json(Vec::<()>::new()) }))
        .route("/healthz", get(|| async { (StatusCode::OK, "ok") }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready() {
                        (StatusCode::OK, "ready: history index loaded\n")
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "not ready: indexing event logs\n",
                        )
                    }
                }
            }),
        )
        .fallback(|| async { ApiError::NotFound })
}

pub async fn version() -> impl IntoResponse {
    #[derive(serde::Serialize)]
    struct Version {
        version: &'static str,
        datafusion_version: &'static str,
    }
    Json(Version {
        version: ballista_core::BALLISTA_VERSION,
        datafusion_version: datafusion::DATAFUSION_VERSION,
    })
}

/// `GET /api/metrics`: what upstream's route answers (its description
/// names a `charset` its answers do not carry, so ours describes them).
#[utoipa::path(
    get,
    path = "/api/metrics",
    tag = "metrics",
    responses(
        (status = 200, description = "Prometheus text exposition: the scheduler's series and the job history's", content(("text/plain; version=0.0.4"))),
    )
)]
pub async fn metrics(State(gauges): State<Option<Arc<JobGauges>>>) -> Response {
    use prometheus::Encoder;
    let encoder = prometheus::TextEncoder::new();
    let mut families = prometheus::gather();
    if let Some(gauges) = gauges {
        families.extend(gauges.families());
    }
    let mut buf = Vec::new();
    match encoder.encode(&families, &mut buf) {
        Ok(()) => (
            [(header::CONTENT_TYPE, encoder.format_type().to_string())],
            buf,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// `GET /api/metrics` over a server's own job-level series (both modes
/// with a log directory; in a live scheduler it stands in front of
/// upstream's route, which answers the same default registry).
pub fn metrics_route(gauges: Option<Arc<JobGauges>>) -> Router {
    Router::new()
        .route("/api/metrics", get(metrics))
        .with_state(gauges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::DiskSource;
    use bjh_metrics::HistoryMetrics;

    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt;

    fn router(dir: &std::path::Path) -> Router {
        let store = Arc::new(LogStore::new(dir, Arc::new(HistoryMetrics::unregistered())));
        store.rescan();
        job_routes(Arc::new(DiskSource::new(store.clone())), Some(store))
    }

    async fn call(router: &Router, method: &str, uri: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(uri)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn hostile_job_ids_get_404_with_the_scheduler_error_body() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret.txt"), "x").unwrap();
        let r = router(dir.path());
        // The oracle: upstream's own history server, asked for a job it
        // does not have.
        let empty = tempfile::tempdir().unwrap();
        let upstream = ballista_scheduler::history::history_router(Arc::new(
            ballista_scheduler::history::HistoryStore::load(empty.path()).unwrap(),
        ));
        let (upstream_status, upstream_body) = call(&upstream, "GET", "/api/job/nope").await;
        assert_eq!(upstream_status, StatusCode::NOT_FOUND);
        let long = "a".repeat(10_000);
        for id in [
            "..%2F..%2Fetc%2Fpasswd",
            "%2e%2e",
            "%2Fetc%2Fpasswd",
            "a%00b",
            &long,
            "secret.txt",
        ] {
            let (status, body) = call(&r, "GET", &format!("/api/job/{id}")).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{id}");
            assert_eq!(body, upstream_body, "{id}");
        }
    }

    #[tokio::test]
    async fn an_unknown_plan_format_is_a_400() {
        let dir = tempfile::tempdir().unwrap();
        let (status, body) = call(&router(dir.path()), "GET", "/api/job/x?plan_format=fancy").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("plan_format"), "{body}");
    }

    #[tokio::test]
    async fn an_empty_directory_lists_no_jobs() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            call(&router(dir.path()), "GET", "/api/jobs").await,
            (StatusCode::OK, "[]".into())
        );
    }
}
