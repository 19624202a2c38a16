//! The adapter to upstream's scheduler: its own REST router, called in
//! process without a socket, and the parts of its state that are public.
//! The recorder reads the scheduler through it (as a
//! [`LiveScheduler`]), the live source serves its answers.

use crate::recording::live::{HttpAnswer, LiveScheduler};
use axum::body::Body;
use ballista_core::serde::protobuf::{JobStatus, job_status};
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use http::{Method, Request, header};
use std::sync::Arc;
use tower::ServiceExt;

/// The scheduler type this crate assembles: Ballista's default plan codecs'
/// node types. Custom codecs plug in through the scheduler config's
/// overrides, not through these type parameters.
pub(crate) type Scheduler = SchedulerServer<LogicalPlanNode, PhysicalPlanNode>;

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

    /// The scheduler's own REST router.
    pub(crate) fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Calls the scheduler's router in process.
    pub(crate) async fn call(&self, method: Method, path_and_query: &str) -> HttpAnswer {
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
        HttpAnswer {
            status,
            content_type,
            body,
            from_log: false,
        }
    }

    /// `GET` through the scheduler's router.
    pub(crate) async fn get(&self, path_and_query: &str) -> HttpAnswer {
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

#[async_trait::async_trait]
impl LiveScheduler for LiveApi {
    async fn get(&self, path_and_query: &str) -> HttpAnswer {
        LiveApi::get(self, path_and_query).await
    }

    async fn job_status(&self, job_id: &str) -> Option<JobStatus> {
        LiveApi::job_status(self, job_id).await
    }

    fn scheduler_id(&self) -> &str {
        &self.scheduler.scheduler_id
    }
}
