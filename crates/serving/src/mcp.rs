//! `/mcp`: the history for assistants, over the Model Context Protocol's
//! streamable HTTP transport.
//!
//! The protocol (JSON-RPC framing, version negotiation, capability
//! exchange, tool schemas, the transport's headers and streams) is `rmcp`'s,
//! the protocol's official Rust SDK, not ours: a hand-written server would
//! have to follow every revision of the specification, which the SDK does.
//!
//! **Each tool is one REST route**, called in process on the router the
//! port serves (`api`, the routes without the token check, which `/mcp`
//! itself is behind), so a tool's answer is the route's body byte for byte,
//! with the route's limits: `run_sql` goes through `POST /api/sql`, its
//! worker processes, deadline, memory and row limits and its queue.
//! A route's error (an unknown job, a bad parameter, a query the engine
//! refuses) is the tool's error result carrying the route's JSON error, so
//! an assistant reads why.
//!
//! **What reaches it, and what cannot:** `/mcp` is an API route for the
//! token (`auth.rs`); without a token, the server's own host-name guard
//! answers only this server's names, so rmcp's loopback-only host check is
//! off. No web page may call it: a request carrying an `Origin` header is
//! refused (an assistant is not a browser; rmcp's origin validation with an
//! empty allow-list). A request body is at most [`MAX_BODY`]. The server is
//! stateless (no session per client), so a client cannot make it hold
//! anything between requests.
//!
//! **Bounded answers.** A tool's answer is read from its route at most
//! [`MAX_ANSWER`] bytes at a time and at most [`MAX_CALLS`] tools run at
//! once per server (more wait their turn, up to [`CALL_WAIT`]); an answer
//! past the cap is the tool's error, saying how to narrow the question,
//! and the route's work stops there (a SQL worker is killed when its
//! answer is dropped). Twelve requests for a 42 MB answer hold at most
//! `MAX_CALLS` times `MAX_ANSWER` (and rmcp's JSON of it), never 500 MB.

use crate::insight::{QueriesParams, TwoRuns};
use crate::jobs_params::JobsParams;
use axum::Router;
use axum::body::Body;
use bjh_recording::live::job_path;
use http::{Method, Request, header};
use http_body_util::BodyExt;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use std::sync::Arc;
use tower::ServiceExt;

/// The largest request body `/mcp` reads (a tool call is a few hundred
/// bytes; a SQL query rarely more than a few kilobytes).
pub const MAX_BODY: usize = 1 << 20;

/// The largest answer a tool returns: enough for a thousand jobs or a
/// job's stages, small enough for an assistant's context.
pub const MAX_ANSWER: usize = 4 << 20;

/// Tools one server runs at once.
pub const MAX_CALLS: usize = 4;

/// How long a tool call waits for its turn before it is refused as busy.
pub const CALL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Jobs `list_jobs` returns when the assistant names no limit: enough to
/// answer "what ran last night", few enough for an assistant's context.
pub const DEFAULT_LIST_LIMIT: usize = 20;

/// The `/mcp` route over `source`, `store` and `sql`: its tools call the
/// job routes and SQL in process, without the token check (`/mcp` itself
/// is behind it).
pub fn over(
    source: Arc<dyn crate::source::JobSource>,
    store: Arc<bjh_store::LogStore>,
    sql: Option<Arc<bjh_sql::SqlEngine>>,
) -> Router {
    routes(
        crate::router::job_routes(source, Some(store))
            .merge(sql.map(crate::sql_route::routes).unwrap_or_default()),
    )
}

/// The `/mcp` route, answering with the routes of `api`.
pub fn routes(api: Router) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts()
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY);
    let calls = Arc::new(tokio::sync::Semaphore::new(MAX_CALLS));
    let service: StreamableHttpService<History, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(History::new(api.clone(), calls.clone())),
        Arc::default(),
        config,
    );
    Router::new().nest_service("/mcp", service)
}

/// The MCP server: the REST routes as tools.
#[derive(Clone)]
pub struct History {
    api: Router,
    /// The server's turns: at most [`MAX_CALLS`] tools at once.
    calls: Arc<tokio::sync::Semaphore>,
    tool_router: ToolRouter<Self>,
}

/// One job, by id.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct JobId {
    /// The job's id, as `list_jobs` gives it (e.g. 038HWK7HR8000).
    pub job_id: String,
}

/// One SQL query.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Sql {
    /// One SQL query (DataFusion's dialect) over the tables jobs, usage,
    /// whatif, whatif_pairs, stages, tasks and operators, e.g. `SELECT job_id, duration_ms FROM jobs ORDER BY
    /// duration_ms DESC LIMIT 10`.
    pub sql: String,
    /// Where it runs: `local` (the server's own worker) or `cluster` (a
    /// Ballista job on the cluster's executors, for questions over many
    /// jobs' tasks); the server's default when absent.
    #[serde(default)]
    pub engine: Option<String>,
}

/// No arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

#[tool_router]
impl History {
    fn new(api: Router, calls: Arc<tokio::sync::Semaphore>) -> Self {
        Self {
            api,
            calls,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "List the cluster's jobs, newest first: id, name, status, stages, start and end times (epoch ms). Filter by status (e.g. failed), name, time range, minimum duration or query_hash; page with limit and after. Start here to find the job a question is about.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_jobs(&self, Parameters(mut args): Parameters<JobsParams>) -> Answer {
        args.limit.get_or_insert(DEFAULT_LIST_LIMIT);
        let path = format!("/api/jobs?{}", query_string(&args));
        self.call(Method::GET, &path, None).await
    }

    #[tool(
        description = "One job's summary as the scheduler reports it: status (and the error of a failed job), times, its logical and physical plans, and its stages with their task counts and metrics.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_job(&self, Parameters(JobId { job_id }): Parameters<JobId>) -> Answer {
        self.call(Method::GET, &job_path(&job_id, ""), None).await
    }

    #[tool(
        description = "One job's stages in detail: per stage its plan with operator metrics (rows, time, spill) and every task attempt (executor, partition, duration, failure).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_job_stages(&self, Parameters(JobId { job_id }): Parameters<JobId>) -> Answer {
        self.call(Method::GET, &job_path(&job_id, "/stages"), None)
            .await
    }

    #[tool(
        description = "Why a job was slow or failed: findings with their evidence and severity (time spent queued, skewed partitions, straggling tasks, a slow or overloaded executor, gaps in scheduling, spills to disk, peak memory, a partial log). Use this first for 'why was job X slow?'.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn diagnose_job(&self, Parameters(JobId { job_id }): Parameters<JobId>) -> Answer {
        self.call(Method::GET, &job_path(&job_id, "/diagnosis"), None)
            .await
    }

    #[tool(
        description = "Compare two runs (usually of the same recurring query): what changed between a and b: duration and other totals, stage by stage, configuration, a diff of the plans, and whether b regressed. Use it for 'why was tonight's run slower than yesterday's?'.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn compare_jobs(&self, Parameters(runs): Parameters<TwoRuns>) -> Answer {
        let query = query_string(&runs);
        self.call(Method::GET, &format!("/api/compare?{query}"), None)
            .await
    }

    #[tool(
        description = "Recurring queries: finished jobs grouped by the hash of their logical plan, most recently run first, each with its runs, median and last duration, trend and whether the last run regressed. Use it to find regressions and a query's earlier runs (then list_jobs with query_hash).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn recurring_queries(&self, Parameters(args): Parameters<QueriesParams>) -> Answer {
        let path = format!("/api/queries?{}", query_string(&args));
        self.call(Method::GET, &path, None).await
    }

    #[tool(
        description = "Run one read-only SQL query over the whole history (tables jobs, usage, whatif, whatif_pairs, stages, tasks and operators; whatif has each recurring query's newest run replayed on other cluster shapes, whatif_pairs those replays graded against the next run; e.g. jobs has job_id, job_name, status, start_time, end_time, duration_ms, query_hash, query_label, scheduler_id, busy_slot_ms) and get the rows as JSON. For questions the other tools do not answer: counts, top-N, trends over many jobs. Limits on time, memory and rows apply.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn run_sql(&self, Parameters(Sql { sql, engine }): Parameters<Sql>) -> Answer {
        let mut body = serde_json::json!({ "sql": sql });
        if let Some(engine) = engine {
            body["engine"] = serde_json::Value::String(engine);
        }
        self.call(Method::POST, "/api/sql", Some(body.to_string()))
            .await
    }

    #[tool(
        description = "The schedulers (clusters) whose jobs this history holds: per scheduler its jobs by state, its last job and when it was last seen, whether it records now, its executors and task slots, and its last day's slot time and utilisation. Use it for 'which clusters are there?' and to find a scheduler_id to filter jobs by.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_clusters(&self, Parameters(NoArgs {}): Parameters<NoArgs>) -> Answer {
        self.call(Method::GET, "/api/clusters", None).await
    }
}

pub type Answer = Result<CallToolResult, ErrorData>;

/// A tool's arguments as the query string of the route they are the
/// parameters of (the same struct on both sides).
fn query_string(args: &impl serde::Serialize) -> String {
    serde_html_form::to_string(args).unwrap_or_default()
}

impl History {
    /// The route's answer to `method path` (with a JSON `body`): its body as
    /// the tool's text; a status of 400 or more as the tool's error, with the
    /// route's message.
    pub async fn call(&self, method: Method, path: &str, body: Option<String>) -> Answer {
        let Ok(Ok(_turn)) =
            tokio::time::timeout(CALL_WAIT, self.calls.clone().acquire_owned()).await
        else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "the history is answering other tools; try again in a moment",
            )]));
        };
        let mut request = Request::builder().method(method).uri(path);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(body.map_or_else(Body::empty, Body::from))
            .map_err(|e| ErrorData::invalid_params(format!("bad request: {e}"), None))?;
        let response = self
            .api
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = match http_body_util::Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "the answer is larger than the {} MiB a tool returns: narrow the \
                     question (fewer jobs with limit, fewer columns, a filter or a \
                     LIMIT in SQL)",
                    MAX_ANSWER >> 20
                ))]));
            }
            Err(e) => return Err(ErrorData::internal_error(e.to_string(), None)),
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut content = vec![ContentBlock::text(text)];
        if let Some(more) = paging_note(&headers) {
            content.push(ContentBlock::text(more));
        }
        if status.is_client_error() || status.is_server_error() {
            return Ok(CallToolResult::error(content));
        }
        Ok(CallToolResult::success(content))
    }
}

/// What the list's headers say about the other pages, as a sentence.
pub fn paging_note(headers: &http::HeaderMap) -> Option<String> {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let total = value(crate::router::TOTAL_COUNT_HEADER)?;
    Some(match value(crate::router::NEXT_AFTER_HEADER) {
        Some(next) => format!("{total} jobs match; more follow: call again with after={next}"),
        None => format!("{total} jobs match; this is the last page"),
    })
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for History {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "The job history of an Apache Ballista cluster: every query (job) the scheduler ran, \
             with its plans, stages, tasks and metrics. To explain a slow or failed job: find it \
             with list_jobs, then diagnose_job; to explain a change between runs of one query: \
             recurring_queries, list_jobs with its query_hash, then compare_jobs; for anything \
             over many jobs: run_sql. Times are epoch milliseconds.",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_id_stays_one_path_segment() {
        assert_eq!(job_path("abc", "/stages"), "/api/job/abc/stages");
        assert_eq!(job_path("a/../b c", ""), "/api/job/a%2F..%2Fb%20c");
        assert_eq!(job_path("x?y#z", ""), "/api/job/x%3Fy%23z");
    }

    #[test]
    fn list_arguments_are_the_routes_parameters() {
        let args = JobsParams {
            status: Some("failed,cancelled".into()),
            min_duration_ms: Some(5),
            sort: Some(crate::jobs_params::SortKey::EndTime),
            name: Some("a&b c".into()),
            ..Default::default()
        };
        let q = query_string(&args);
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(q.as_bytes())
            .into_owned()
            .collect();
        assert_eq!(
            pairs,
            [
                ("status".to_string(), "failed,cancelled".to_string()),
                ("name".into(), "a&b c".into()),
                ("min_duration_ms".into(), "5".into()),
                ("sort".into(), "end_time".into()),
            ]
        );
        // What the route parses from it is what the tool was given.
        let parsed = crate::params::Params::<JobsParams>::parse(&q).unwrap();
        assert!(parsed.ignored.is_empty());
        assert_eq!(format!("{:?}", parsed.value), format!("{args:?}"));
        let runs = TwoRuns {
            a: "x/y".into(),
            b: "z".into(),
        };
        assert_eq!(query_string(&runs), "a=x%2Fy&b=z");
    }
}
