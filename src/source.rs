//! `JobSource`: what the REST router reads jobs from.
//!
//! Three implementations, one router:
//! - [`LiveSource`]: the running scheduler, through its own REST router;
//! - [`DiskSource`]: a log directory, through its [`LogStore`] index;
//! - [`Layered`]: live first, then disk. This is what a scheduler started
//!   with `--event-log-dir` serves, so it never forgets a job.
//!
//! **Invariant:** a stored response is relayed byte for byte; the only bytes
//! built here are list entries of jobs known only from disk, which are
//! serialized from the same wire type the scheduler uses
//! (`ballista_api_types::dto::JobResponse`).

use crate::api::ApiError;
use crate::live::LiveApi;
use crate::record::{JobEnd, Variant};
use crate::store::LogStore;
use async_trait::async_trait;
use ballista_api_types::dto::{JobResponse, PlanFormat};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::Arc;

/// Which response of a job is asked for.
#[derive(Debug, Clone, Copy)]
pub enum Payload {
    /// `GET /api/job/{id}`.
    Job(PlanFormat),
    /// `GET /api/job/{id}/stages`.
    Stages(PlanFormat),
    /// `GET /api/job/{id}/config`.
    Config,
    /// `GET /api/job/{id}/dot`.
    Dot,
    /// `GET /api/job/{id}/stage/{n}/dot`.
    StageDot(usize),
}

/// A response to relay.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// Body bytes.
    pub body: Bytes,
    /// Whether the answer came from an event log rather than the live
    /// scheduler (sent as the `x-ballista-history` header).
    pub from_log: bool,
}

/// Header set on answers served from an event log.
pub const FROM_LOG_HEADER: &str = "x-ballista-history";

/// Content type of JSON responses, as axum's `Json` sets it.
pub const JSON: &str = "application/json";
/// Content type of text responses, as axum sets it for a `String`.
pub const TEXT: &str = "text/plain; charset=utf-8";

impl Reply {
    /// A 200 with `body` of `content_type`.
    pub fn ok(content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status: StatusCode::OK,
            content_type: Some(content_type.to_string()),
            body: body.into(),
            from_log: false,
        }
    }

    fn logged(mut self) -> Self {
        self.from_log = true;
        self
    }
}

/// One entry of `GET /api/jobs`.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The job.
    pub job_id: String,
    /// Start time (epoch millis; 0 while queued).
    pub start_time: u64,
    /// The entry's JSON bytes.
    pub entry: Bytes,
}

impl Listing {
    /// Newest first: jobs not yet started count as newest; ties by job id.
    pub fn order(a: &Listing, b: &Listing) -> std::cmp::Ordering {
        let key = |l: &Listing| {
            if l.start_time == 0 {
                u64::MAX
            } else {
                l.start_time
            }
        };
        key(b).cmp(&key(a)).then_with(|| a.job_id.cmp(&b.job_id))
    }
}

/// What the REST router reads jobs from.
#[async_trait]
pub trait JobSource: Send + Sync {
    /// Every job this source knows.
    async fn list(&self) -> Result<Vec<Listing>, ApiError>;

    /// One response of one job; `Ok(None)` when the job is unknown here.
    async fn get(&self, job_id: &str, payload: Payload) -> Result<Option<Reply>, ApiError>;

    /// Cancels a job; `Ok(None)` when the job is unknown here.
    async fn cancel(&self, job_id: &str) -> Result<Option<Reply>, ApiError>;
}

/// The running scheduler.
#[derive(Clone)]
pub struct LiveSource {
    api: LiveApi,
}

impl LiveSource {
    /// A source over a started scheduler.
    pub fn new(api: LiveApi) -> Self {
        Self { api }
    }
}

fn format_query(format: PlanFormat) -> &'static str {
    match format {
        PlanFormat::Default => "",
        PlanFormat::Tree => "?plan_format=tree",
        PlanFormat::Metrics => "?plan_format=metrics",
    }
}

fn format_name(format: PlanFormat) -> Option<&'static str> {
    match format {
        PlanFormat::Default => None,
        PlanFormat::Tree => Some("tree"),
        PlanFormat::Metrics => Some("metrics"),
    }
}

#[derive(Deserialize)]
struct EntryKeys {
    job_id: String,
    #[serde(default)]
    start_time: u64,
}

#[async_trait]
impl JobSource for LiveSource {
    async fn list(&self) -> Result<Vec<Listing>, ApiError> {
        let answer = self.api.get("/api/jobs").await;
        if answer.status != StatusCode::OK {
            return Err(ApiError::Internal(
                "the scheduler could not list its jobs".into(),
            ));
        }
        let entries: Vec<&serde_json::value::RawValue> = serde_json::from_slice(&answer.body)
            .map_err(|e| {
                ApiError::Internal(format!("the scheduler's job list is not JSON: {e}"))
            })?;
        Ok(entries
            .into_iter()
            .filter_map(|raw| {
                let keys: EntryKeys = serde_json::from_str(raw.get()).ok()?;
                Some(Listing {
                    job_id: keys.job_id,
                    start_time: keys.start_time,
                    entry: Bytes::copy_from_slice(raw.get().as_bytes()),
                })
            })
            .collect())
    }

    async fn get(&self, job_id: &str, payload: Payload) -> Result<Option<Reply>, ApiError> {
        let rest = match payload {
            Payload::Job(f) => format_query(f).to_string(),
            Payload::Stages(f) => format!("/stages{}", format_query(f)),
            Payload::Config => "/config".into(),
            Payload::Dot => "/dot".into(),
            Payload::StageDot(n) => format!("/stage/{n}/dot"),
        };
        let answer = self.api.get(&crate::capture::job_path(job_id, &rest)).await;
        Ok(relay(answer))
    }

    async fn cancel(&self, job_id: &str) -> Result<Option<Reply>, ApiError> {
        let answer = self
            .api
            .call(Method::PATCH, &crate::capture::job_path(job_id, ""))
            .await;
        Ok(relay(answer))
    }
}

/// The live answer to relay; `None` for a 404 (the scheduler does not hold
/// the job), so a layered source can ask the log instead.
fn relay(answer: crate::live::Answer) -> Option<Reply> {
    (answer.status != StatusCode::NOT_FOUND).then(|| Reply {
        status: answer.status,
        content_type: answer.content_type,
        body: answer.body,
        from_log: false,
    })
}

/// A log directory.
#[derive(Clone)]
pub struct DiskSource {
    store: Arc<LogStore>,
}

impl DiskSource {
    /// A source over an index.
    pub fn new(store: Arc<LogStore>) -> Self {
        Self { store }
    }

    /// The index.
    pub fn store(&self) -> &Arc<LogStore> {
        &self.store
    }

    async fn job_end(&self, job_id: &str) -> Result<Option<JobEnd>, ApiError> {
        if !self.store.contains(job_id) {
            return Ok(None);
        }
        let store = self.store.clone();
        let id = job_id.to_string();
        let read = tokio::task::spawn_blocking(move || store.read_job_end(&id))
            .await
            .map_err(|e| ApiError::Internal(format!("reading the event log failed: {e}")))?;
        read.map_err(|e| {
            log::warn!("history: job {job_id}: {e}");
            ApiError::Internal(format!(
                "the event log of job {job_id} cannot be served: {e}"
            ))
        })
    }
}

fn variant(
    base: &str,
    stored: &std::collections::BTreeMap<String, Variant>,
    format: PlanFormat,
) -> Result<String, ApiError> {
    let Some(name) = format_name(format) else {
        return Ok(base.to_string());
    };
    match stored.get(name) {
        // Logs written without variants (upstream's) serve the default.
        None => Ok(base.to_string()),
        Some(v) => v.apply(base).ok_or_else(|| {
            ApiError::Internal(format!(
                "the stored plan_format={name} variant does not fit its log"
            ))
        }),
    }
}

#[async_trait]
impl JobSource for DiskSource {
    async fn list(&self) -> Result<Vec<Listing>, ApiError> {
        Ok(self
            .store
            .summaries()
            .into_iter()
            .map(|s| {
                let i = s.index;
                let entry = JobResponse {
                    job_id: i.job_id.clone(),
                    job_name: i.job_name,
                    job_status: i.job_status,
                    status: i.status,
                    num_stages: i.num_stages,
                    completed_stages: i.completed_stages,
                    percent_complete: i.percent_complete,
                    start_time: i.start_time,
                    end_time: i.end_time,
                    logical_plan: None,
                    physical_plan: None,
                    stage_plan: None,
                };
                Listing {
                    job_id: i.job_id,
                    start_time: i.start_time,
                    entry: serde_json::to_vec(&entry).unwrap_or_default().into(),
                }
            })
            .collect())
    }

    async fn get(&self, job_id: &str, payload: Payload) -> Result<Option<Reply>, ApiError> {
        let Some(end) = self.job_end(job_id).await? else {
            return Ok(None);
        };
        let missing = |name: &str| end.responses.missing.iter().any(|m| m == name);
        let reply = match payload {
            Payload::Job(f) => {
                if missing("job") {
                    return Err(ApiError::NotFound);
                }
                Reply::ok(JSON, variant(end.job.get(), &end.responses.job, f)?)
            }
            Payload::Stages(f) => {
                if missing("stages") {
                    return Err(ApiError::NotFound);
                }
                Reply::ok(JSON, variant(end.stages.get(), &end.responses.stages, f)?)
            }
            Payload::Config => {
                if missing("config") {
                    return Err(ApiError::NotFound);
                }
                Reply::ok(JSON, end.config.get().to_string())
            }
            Payload::Dot => {
                if missing("dot") {
                    return Err(ApiError::NotFound);
                }
                Reply::ok(TEXT, end.dot)
            }
            Payload::StageDot(n) => match end.responses.stage_dots.get(&n.to_string()) {
                Some(dot) => Reply::ok(TEXT, dot.clone()),
                None => return Err(ApiError::NotFound),
            },
        };
        Ok(Some(reply.logged()))
    }

    async fn cancel(&self, job_id: &str) -> Result<Option<Reply>, ApiError> {
        let Some(summary) = self.store.summary(job_id) else {
            return Ok(None);
        };
        let reason = match summary.status {
            crate::record::JobEndStatus::Succeeded => "The job is already completed",
            crate::record::JobEndStatus::Failed(_) => "The job has failed",
            crate::record::JobEndStatus::Cancelled => "The job was cancelled",
        };
        Ok(Some(
            conflict(&format!(
                "{reason}; it is known only from the event log, which is read-only"
            ))
            .logged(),
        ))
    }
}

/// The 409 the scheduler answers when a job cannot be cancelled.
pub fn conflict(reason: &str) -> Reply {
    #[derive(serde::Serialize)]
    struct CancelJobResponse<'a> {
        cancelled: bool,
        reason: &'a str,
    }
    Reply {
        status: StatusCode::CONFLICT,
        content_type: Some(JSON.to_string()),
        body: serde_json::to_vec(&CancelJobResponse {
            cancelled: false,
            reason,
        })
        .unwrap_or_default()
        .into(),
        from_log: false,
    }
}

/// Live first, then disk: the live view wins while the scheduler holds a
/// job; once it has forgotten the job, its log answers.
pub struct Layered {
    live: LiveSource,
    disk: DiskSource,
}

impl Layered {
    /// The union of a live scheduler and its log directory.
    pub fn new(live: LiveSource, disk: DiskSource) -> Self {
        Self { live, disk }
    }
}

#[async_trait]
impl JobSource for Layered {
    async fn list(&self) -> Result<Vec<Listing>, ApiError> {
        let mut jobs = self.live.list().await?;
        let live: HashSet<String> = jobs.iter().map(|l| l.job_id.clone()).collect();
        jobs.extend(
            self.disk
                .list()
                .await?
                .into_iter()
                .filter(|l| !live.contains(&l.job_id)),
        );
        Ok(jobs)
    }

    async fn get(&self, job_id: &str, payload: Payload) -> Result<Option<Reply>, ApiError> {
        match self.live.get(job_id, payload).await? {
            Some(reply) => Ok(Some(reply)),
            None => self.disk.get(job_id, payload).await,
        }
    }

    async fn cancel(&self, job_id: &str) -> Result<Option<Reply>, ApiError> {
        match self.live.cancel(job_id).await? {
            Some(reply) => Ok(Some(reply)),
            None => self.disk.cancel(job_id).await,
        }
    }
}
