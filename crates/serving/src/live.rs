//! The adapter to upstream's scheduler: its own REST router, called in
//! process without a socket, and the parts of its state that are public.
//! The recorder reads the scheduler through it (as a
//! [`LiveScheduler`]), the live source serves its answers; and the
//! scheduler's gRPC services (its task reports through the tap) and health
//! checks, as upstream assembles them.

use arrow_flight::flight_service_server::FlightServiceServer;
use axum::Router;
use axum::body::Body;
use ballista_core::extension::BallistaConfigGrpcEndpoint;
use ballista_core::flight_proxy_service::BallistaFlightProxyService;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpcServer;
use ballista_core::serde::protobuf::{JobStatus, job_status};
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_server::SchedulerServer;
use bjh_recording::listener::{TappedScheduler, TaskTap};
use bjh_recording::live::{HttpAnswer, LiveScheduler};
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use http::StatusCode;
use http::{Method, Request, header};
use std::sync::Arc;
use tower::ServiceExt;

/// The scheduler type this crate assembles: Ballista's default plan codecs'
/// node types. Custom codecs plug in through the scheduler config's
/// overrides, not through these type parameters.
pub type Scheduler = SchedulerServer<LogicalPlanNode, PhysicalPlanNode>;

/// The live scheduler, as seen through its public API.
#[derive(Clone)]
pub struct LiveApi {
    scheduler: Arc<Scheduler>,
    router: axum::Router,
}

impl LiveApi {
    /// Wraps a started scheduler.
    pub fn new(scheduler: Arc<Scheduler>) -> Self {
        let router = ballista_scheduler::api::get_routes(scheduler.clone());
        Self { scheduler, router }
    }

    /// The scheduler's own REST router.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Calls the scheduler's router in process.
    pub async fn call(&self, method: Method, path_and_query: &str) -> HttpAnswer {
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
    pub async fn get(&self, path_and_query: &str) -> HttpAnswer {
        self.call(Method::GET, path_and_query).await
    }

    /// When each job the scheduler holds was queued, by id (a job it does
    /// not report a queue time for is absent).
    pub async fn queued_times(&self) -> std::collections::HashMap<String, u64> {
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

    /// Cancels every job the scheduler holds that has not ended (a
    /// stopping scheduler's: they would end with the process, leaving
    /// their logs unfinished), and waits up to `within` until each shows
    /// as ended, so the recorder sees it end: how many it cancelled.
    pub async fn cancel_unfinished(&self, within: std::time::Duration) -> usize {
        let jobs = self
            .scheduler
            .state
            .task_manager
            .get_all_jobs()
            .await
            .unwrap_or_default();
        let open: Vec<String> = jobs
            .into_iter()
            .filter(|job| !bjh_recording::live::is_terminal(&job.status))
            .map(|job| job.job_id.to_string())
            .collect();
        for id in &open {
            if let Err(e) = self.scheduler.cancel_job(id.clone().into()).await {
                log::warn!("stopping: cannot cancel job {id:?}: {e}");
            }
        }
        let deadline = tokio::time::Instant::now() + within;
        for id in &open {
            while !self
                .job_status(id)
                .await
                .is_some_and(|s| bjh_recording::live::is_terminal(&s))
            {
                if tokio::time::Instant::now() >= deadline {
                    log::warn!("stopping: job {id:?} did not end within {within:?}");
                    return open.len();
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        open.len()
    }

    /// The job's status as the scheduler holds it, if it holds the job.
    pub async fn job_status(&self, job_id: &str) -> Option<JobStatus> {
        self.scheduler
            .state
            .task_manager
            .get_job_status(&job_id.to_string().into())
            .await
            .ok()
            .flatten()
    }
}

/// The scheduler's gRPC services (and its Flight proxy when enabled), its
/// task statuses passing `tap`.
pub fn grpc_router(
    scheduler: &Scheduler,
    config: &SchedulerConfig,
    tap: Option<TaskTap>,
) -> Router {
    let max_decoding = config.grpc_server_max_decoding_message_size as usize;
    let max_encoding = config.grpc_server_max_encoding_message_size as usize;
    let grpc = SchedulerGrpcServer::new(TappedScheduler::new(scheduler.clone(), tap))
        .max_encoding_message_size(max_encoding)
        .max_decoding_message_size(max_decoding);
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(grpc);
    if config.enable_embedded_flight_proxy {
        let endpoint = config
            .override_create_grpc_client_endpoint
            .clone()
            .map(|f| Arc::new(BallistaConfigGrpcEndpoint::new(f)));
        let proxy =
            BallistaFlightProxyService::new(max_decoding, max_encoding, config.use_tls, endpoint);
        routes.add_service(
            FlightServiceServer::new(proxy)
                .max_decoding_message_size(max_decoding)
                .max_encoding_message_size(max_encoding),
        );
    }
    routes.routes().into_axum_router()
}

/// `/healthz`, and `/readyz` once enough executors registered.
pub fn health_router(scheduler: Arc<Scheduler>) -> Router {
    let ready = move || {
        let s = scheduler.clone();
        async move {
            let required = s.state.config.min_ready_executors;
            if s.is_ready() {
                (StatusCode::OK, "ready\n".to_string())
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: fewer than {required} executors registered\n"),
                )
            }
        }
    };
    Router::new()
        .route(
            "/healthz",
            axum::routing::get(|| async { (StatusCode::OK, "ok") }),
        )
        .route("/readyz", axum::routing::get(ready))
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
