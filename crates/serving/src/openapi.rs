//! `GET /api/openapi.json`: the OpenAPI 3.1 description of every route
//! this server answers under `/api/` and the health probes (the web pages
//! are not an API and are left out).
//!
//! Built with utoipa, the crate upstream's scheduler describes its own
//! routes with and whose schemas `ballista-api-types` derives: our
//! handlers carry `#[utoipa::path]` attributes and our answer types derive
//! `ToSchema`, so a field added to an answer is in the description, and
//! each route's query parameters come from the struct its handler parses
//! them into (`IntoParams`, see [`crate::params`]). Ours is then merged with upstream's
//! `ApiDoc`: where both describe an operation, ours (what this server
//! answers) stays; the routes served by the scheduler's own router
//! (`/api/state`, `/api/executors`, a job's config and graphs, ...) keep
//! upstream's description. A history-only server drops what it does not
//! serve (`/api/executor/{executor_id}`).
//!
//! Without a log directory none of this runs: the scheduler's own router
//! answers `/api/openapi.json` with its own description, byte for byte.

use axum::routing::get;
use axum::{Json, Router};
use std::sync::{Arc, OnceLock};
use utoipa::OpenApi;

/// Which server the description is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A scheduler recording its jobs: its own routes behind ours.
    Live,
    /// `--history-only`: no cluster behind.
    History,
}

/// Our routes; upstream's `ApiDoc` is merged in by [`spec`].
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Apache DataFusion Ballista Scheduler REST API, with job history",
        description = "The scheduler's REST API, answered from the live scheduler \
                       and from event logs, and the job-history routes: filtered \
                       job lists, timelines, event logs, diagnoses, what-if \
                       replays, comparisons, recurring queries and SQL over \
                       every job.",
        license(name = "Apache-2.0", url = "https://www.apache.org/licenses/LICENSE-2.0")
    ),
    paths(
        crate::router::list_jobs,
        crate::router::get_timeline,
        crate::router::get_timeline_svg,
        crate::router::get_eventlog,
        crate::insight::get_diagnosis,
        crate::whatif::get_whatif,
        crate::whatif::get_accuracy,
        crate::insight::get_compare,
        crate::insight::get_queries,
        crate::usage::get_usage,
        crate::clusters::get_clusters,
        crate::sql_route::run_sql,
        crate::router::metrics,
        get_spec,
    ),
    tags(
        (name = "history", description = "What the event logs explain: timelines, \
                                          diagnoses, comparisons, recurring queries"),
        (name = "sql", description = "SQL over every job (DataFusion, in a worker process)"),
    )
)]
pub struct HistoryApi;

/// The description of a server of `mode`.
pub fn spec(mode: Mode) -> utoipa::openapi::OpenApi {
    let mut spec = HistoryApi::openapi();
    spec.info.version = env!("CARGO_PKG_VERSION").to_string();
    spec.merge(ballista_scheduler::api::ApiDoc::openapi());
    if mode == Mode::History {
        spec.paths.paths.remove("/api/executor/{executor_id}");
    }
    spec
}

/// `GET /api/openapi.json` for a server of `mode` (the description is
/// made once and served as the same bytes).
pub fn routes(mode: Mode) -> Router {
    static LIVE: OnceLock<Arc<serde_json::Value>> = OnceLock::new();
    static HISTORY: OnceLock<Arc<serde_json::Value>> = OnceLock::new();
    let cell = match mode {
        Mode::Live => &LIVE,
        Mode::History => &HISTORY,
    };
    let body = cell
        .get_or_init(|| Arc::new(serde_json::to_value(spec(mode)).unwrap_or_default()))
        .clone();
    Router::new().route(
        "/api/openapi.json",
        get(move || {
            let body = body.clone();
            async move { get_spec(body).await }
        }),
    )
}

/// This server's OpenAPI description.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "openapi",
    responses(
        (status = 200, description = "The OpenAPI 3.1 description of this server's routes", body = Object)
    )
)]
pub async fn get_spec(body: Arc<serde_json::Value>) -> Json<serde_json::Value> {
    Json((*body).clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;
    use crate::jobs_params::JobsParams;
    use crate::params::Params;
    use utoipa::openapi::path::HttpMethod;

    /// Every method a path of `spec` has an operation for, as upper-case
    /// words (`GET`, `PATCH`, ...).
    fn operations(spec: &utoipa::openapi::OpenApi) -> Vec<(String, &'static str)> {
        let mut out = Vec::new();
        for (path, item) in &spec.paths.paths {
            for (method, op) in [
                (HttpMethod::Get, &item.get),
                (HttpMethod::Post, &item.post),
                (HttpMethod::Put, &item.put),
                (HttpMethod::Patch, &item.patch),
                (HttpMethod::Delete, &item.delete),
            ] {
                if op.is_some() {
                    let word = match method {
                        HttpMethod::Get => "GET",
                        HttpMethod::Post => "POST",
                        HttpMethod::Put => "PUT",
                        HttpMethod::Patch => "PATCH",
                        _ => "DELETE",
                    };
                    out.push((path.clone(), word));
                }
            }
        }
        out
    }

    #[test]
    fn every_documented_list_parameter_is_one_the_parser_takes() {
        let spec = spec(Mode::History);
        let list = spec.paths.paths["/api/jobs"].get.as_ref().unwrap();
        let names: Vec<&str> = list
            .parameters
            .iter()
            .flatten()
            .map(|p| match p {
                utoipa::openapi::RefOr::T(p) => p.name.as_str(),
                utoipa::openapi::RefOr::Ref(r) => r.ref_location.as_str(),
            })
            .collect();
        assert!(names.len() > 15, "{names:?}");
        for name in names {
            // A taken parameter is parsed (perhaps into a 400 naming it);
            // an unknown one would be ignored and listed as such.
            let parsed = Params::<JobsParams>::parse(&format!("{name}=1"))
                .and_then(|p| p.value.query(0).map(|_| p.ignored));
            match parsed {
                Ok(ignored) => assert!(ignored.is_empty(), "{name} ignored"),
                Err(ApiError::BadRequest(e)) => assert!(e.contains(name), "{name}: {e}"),
                Err(e) => panic!("{name}: {e}"),
            }
        }
        let unknown = Params::<JobsParams>::parse("colour=1").unwrap();
        assert_eq!(unknown.ignored, ["colour"]);
    }

    #[test]
    fn a_history_server_describes_no_executor_route_and_a_live_one_does() {
        let paths = |m| -> Vec<String> { spec(m).paths.paths.keys().cloned().collect() };
        let executor = "/api/executor/{executor_id}".to_string();
        assert!(!paths(Mode::History).contains(&executor));
        assert!(paths(Mode::Live).contains(&executor));
        // Upstream's own operations are all still there in a live one.
        let upstream = ballista_scheduler::api::ApiDoc::openapi();
        let ours = spec(Mode::Live);
        for op in operations(&upstream) {
            assert!(operations(&ours).contains(&op), "{op:?}");
        }
    }
}
