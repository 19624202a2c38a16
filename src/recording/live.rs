//! In-process access to the live scheduler: its own REST router, called
//! without a socket, and the parts of its state that are public.
//!
//! Rendering a job's responses through the scheduler's own router is what
//! makes a stored response identical to the live one: there is no second
//! implementation of the responses to drift.

use axum::body::Body;
use ballista_core::serde::protobuf::{JobStatus, job_status};
use ballista_scheduler::scheduler_server::SchedulerServer;
use bytes::Bytes;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use http::{Method, Request, StatusCode, header};
use std::sync::Arc;
use tower::ServiceExt;

/// The scheduler type this crate assembles: Ballista's default plan codecs'
/// node types. Custom codecs plug in through the scheduler config's
/// overrides, not through these type parameters.
pub(crate) type Scheduler = SchedulerServer<LogicalPlanNode, PhysicalPlanNode>;

/// One whole HTTP answer about a job: the live router's, or one replayed
/// from an event log.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// Body bytes.
    pub body: Bytes,
    /// Whether the answer came from an event log rather than the live
    /// scheduler (sent as the `x-ballista-history` header).
    pub from_log: bool,
}

impl Answer {
    /// A 200 with `body` of `content_type`.
    pub(crate) fn ok(content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status: StatusCode::OK,
            content_type: Some(content_type.to_string()),
            body: body.into(),
            from_log: false,
        }
    }

    /// The same answer, marked as read from an event log.
    pub(crate) fn logged(mut self) -> Self {
        self.from_log = true;
        self
    }

    /// The body as UTF-8 text, if it is.
    pub(crate) fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }
}

/// `/api/job/{id}{rest}`, with the id percent-encoded where needed.
pub(crate) fn job_path(job_id: &str, rest: &str) -> String {
    let mut path = String::from("/api/job/");
    for b in job_id.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            path.push(b as char);
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path.push_str(rest);
    path
}

/// The live scheduler, as seen through its public API.
#[derive(Clone)]
pub(crate) struct LiveApi {
    scheduler: Arc<Scheduler>,
    router: axum::Router,
}

impl LiveApi {
    /// Wraps a started scheduler.
    pub(crate) fn new(scheduler: Arc<Scheduler>) -> Self {
        let router = ballista_scheduler::api::get_routes(scheduler.clone());
        Self { scheduler, router }
    }

    /// The scheduler itself.
    pub(crate) fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// The scheduler's own REST router.
    pub(crate) fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Calls the scheduler's router in process.
    pub(crate) async fn call(&self, method: Method, path_and_query: &str) -> Answer {
        let request = Request::builder()
            .method(method)
            .uri(path_and_query)
            .body(Body::empty())
            .expect("a path is a valid URI");
        let response = match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        Answer {
            status,
            content_type,
            body,
            from_log: false,
        }
    }

    /// `GET` through the scheduler's router.
    pub(crate) async fn get(&self, path_and_query: &str) -> Answer {
        self.call(Method::GET, path_and_query).await
    }

    /// When each job the scheduler holds was queued, by id (a job it does
    /// not report a queue time for is absent).
    pub(crate) async fn queued_times(&self) -> std::collections::HashMap<String, u64> {
        let jobs = self
            .scheduler
            .state
            .task_manager
            .get_all_jobs()
            .await
            .unwrap_or_default();
        jobs.into_iter()
            .filter_map(|job| {
                let queued = match job.status.status? {
                    job_status::Status::Queued(q) => q.queued_at,
                    job_status::Status::Running(r) => r.queued_at,
                    job_status::Status::Successful(s) => s.queued_at,
                    job_status::Status::Failed(f) => f.queued_at,
                };
                (queued > 0).then(|| (job.job_id.to_string(), queued))
            })
            .collect()
    }

    /// The job's status as the scheduler holds it, if it holds the job.
    pub(crate) async fn job_status(&self, job_id: &str) -> Option<JobStatus> {
        self.scheduler
            .state
            .task_manager
            .get_job_status(&job_id.to_string().into())
            .await
            .ok()
            .flatten()
    }
}

/// Whether a status is terminal (succeeded or failed; a cancelled job is a
/// failed one to the scheduler).
pub(crate) fn is_terminal(status: &JobStatus) -> bool {
    matches!(
        status.status,
        Some(job_status::Status::Successful(_)) | Some(job_status::Status::Failed(_))
    )
}
