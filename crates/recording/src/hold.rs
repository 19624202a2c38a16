//! `HeldJobState`: the scheduler forgets a finished job only once its log
//! can answer for it.
//!
//! Upstream's scheduler removes a finished job from its job state
//! `--finished-job-state-clean-up-interval-seconds` after it ends, from a
//! task of its own that calls [`JobState::remove_job`]. The job's log is
//! completed by the capturer and the writer thread in the same seconds,
//! and under load (a slow fsync, a long queue) the removal could come
//! first: the job was then in neither the scheduler nor the store, so it
//! was missing from `/api/jobs` and answered 404 until its log arrived.
//!
//! This wrapper delegates every call to the scheduler's own job state, and
//! makes only `remove_job` wait until `recorded(job_id)` says the store holds
//! the job's completed log, for at most [`HOLD_MAX`]. The wait is in
//! upstream's clean-up task, never on a scheduling path; a log that cannot be
//! written (a full disk) costs the scheduler that much more memory for the
//! job, then the job is removed as before.

use ballista_core::error::Result;
use ballista_core::{JobId, JobStatusSubscriber};
use ballista_scheduler::cluster::{JobState, JobStateEventStream};
use ballista_scheduler::state::execution_graph::ExecutionGraphBox;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The longest a finished job is held for its log: the capturer's own wait
/// for a terminal status, twice over.
pub const HOLD_MAX: Duration = Duration::from_secs(60);

/// Whether the store holds the completed log of a job.
pub type Recorded = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The scheduler's job state, whose `remove_job` waits for the job's log.
pub struct HeldJobState {
    inner: Arc<dyn JobState>,
    recorded: Arc<OnceLock<Recorded>>,
}

impl HeldJobState {
    /// Wraps `inner`; `recorded` is filled once the store exists (until
    /// then, nothing is held).
    pub fn new(inner: Arc<dyn JobState>, recorded: Arc<OnceLock<Recorded>>) -> Self {
        Self { inner, recorded }
    }

    /// Waits until the store holds `job_id`'s log, or [`HOLD_MAX`] passed.
    pub async fn until_recorded(&self, job_id: &str) {
        let Some(recorded) = self.recorded.get() else {
            return;
        };
        let started = tokio::time::Instant::now();
        let deadline = started + HOLD_MAX;
        // 5 ms, doubling up to 250 ms (`backon`'s exponential schedule).
        let mut pauses = backon::BackoffBuilder::build(
            backon::ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(5))
                .with_max_delay(Duration::from_millis(250))
                .without_max_times(),
        );
        while !recorded(job_id) {
            if tokio::time::Instant::now() >= deadline {
                log::warn!(
                    "event log: job {job_id}'s log did not reach the store within \
                     {HOLD_MAX:?} of its clean-up; the scheduler forgets it now"
                );
                return;
            }
            let pause = pauses.next().unwrap_or(Duration::from_millis(250));
            tokio::time::sleep(pause).await;
        }
        log::debug!(
            "event log: job {job_id} held {:?} for its log",
            started.elapsed()
        );
    }
}

#[async_trait::async_trait]
impl JobState for HeldJobState {
    fn accept_job(&self, job_id: &JobId, job_name: &str, queued_at: u64) -> Result<()> {
        self.inner.accept_job(job_id, job_name, queued_at)
    }

    fn pending_job_number(&self) -> usize {
        self.inner.pending_job_number()
    }

    async fn submit_job(
        &self,
        job_id: JobId,
        graph: &ExecutionGraphBox,
        subscriber: Option<JobStatusSubscriber>,
    ) -> Result<()> {
        self.inner.submit_job(job_id, graph, subscriber).await
    }

    async fn get_jobs(&self) -> Result<HashSet<JobId>> {
        self.inner.get_jobs().await
    }

    async fn get_all_jobs(&self) -> Result<HashSet<JobId>> {
        self.inner.get_all_jobs().await
    }

    async fn get_job_status(
        &self,
        job_id: &JobId,
    ) -> Result<Option<ballista_core::serde::protobuf::JobStatus>> {
        self.inner.get_job_status(job_id).await
    }

    async fn get_execution_graph(&self, job_id: &JobId) -> Result<Option<ExecutionGraphBox>> {
        self.inner.get_execution_graph(job_id).await
    }

    async fn save_job(&self, job_id: &JobId, graph: &ExecutionGraphBox) -> Result<()> {
        self.inner.save_job(job_id, graph).await
    }

    async fn fail_unscheduled_job(&self, job_id: &JobId, reason: String) -> Result<()> {
        self.inner.fail_unscheduled_job(job_id, reason).await
    }

    async fn remove_job(&self, job_id: &JobId) -> Result<()> {
        self.until_recorded(job_id.as_ref()).await;
        self.inner.remove_job(job_id).await
    }

    async fn try_acquire_job(&self, job_id: &JobId) -> Result<Option<ExecutionGraphBox>> {
        self.inner.try_acquire_job(job_id).await
    }

    async fn job_state_events(&self) -> Result<JobStateEventStream> {
        self.inner.job_state_events().await
    }

    async fn create_or_update_session(
        &self,
        session_id: &str,
        config: &SessionConfig,
    ) -> Result<Arc<SessionContext>> {
        self.inner
            .create_or_update_session(session_id, config)
            .await
    }

    async fn remove_session(&self, session_id: &str) -> Result<()> {
        self.inner.remove_session(session_id).await
    }

    fn produce_config(&self) -> SessionConfig {
        self.inner.produce_config()
    }
}
