//! `EventLogListener`: turns scheduler facts into messages, never blocking.
//!
//! Two hooks feed it, both on the scheduler's hot paths:
//!
//! - `EventLogListener` is the `SchedulerMetricsCollector` the scheduler is
//!   built with. The query-stage event loop calls it synchronously when a job
//!   is submitted, completes, fails or is cancelled. It forwards every call to
//!   the collector it wraps (so Prometheus metrics keep working) and hands a
//!   small message to the capturer.
//! - [`TaskTap`] wraps the scheduler's gRPC service and sees every task
//!   status an executor reports (`poll_work`, `update_task_status`) before
//!   the scheduler does. Finished tasks become `TaskEnd` records for the
//!   writer.
//!
//! **Invariant:** the hooks do no I/O and never await. Job events go to an
//! unbounded channel (there are at most two per job and they must never be
//! lost); task reports go through [`WriterHandle::try_progress`], which drops
//! and counts them when the writer's queue is full.

use crate::writer::{WriterHandle, WriterMsg};
use ballista_core::JobId;
use ballista_core::serde::protobuf::operator_metric::Metric;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpc;
use ballista_core::serde::protobuf::{self as pb, OperatorMetricsSet, task_status};
use ballista_scheduler::metrics::SchedulerMetricsCollector;
use bjh_format::record::{TaskEnd, TaskMetrics};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tonic::{Request, Response, Status};

/// How a job ended, as the event loop reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `record_completed`.
    Completed,
    /// `record_failed` (at run time or during planning).
    Failed,
    /// `record_cancelled`.
    Cancelled,
}

/// A job event from the event loop, for the capturer.
#[derive(Debug, Clone)]
pub enum JobEvent {
    /// The job was planned and submitted.
    Submitted {
        /// The job.
        job_id: String,
        /// When it was queued.
        queued_at: u64,
        /// When it was submitted.
        submitted_at: u64,
    },
    /// The job reached (or is about to reach) a terminal state.
    Ended {
        /// The job.
        job_id: String,
        /// How.
        ending: Ending,
        /// When it was queued (0 when the scheduler does not say).
        queued_at: u64,
        /// When it ended, as the event loop saw it.
        at: u64,
    },
}

/// The `SchedulerMetricsCollector` that records jobs. Wraps the collector
/// the scheduler would otherwise use.
pub struct EventLogListener {
    inner: Arc<dyn SchedulerMetricsCollector>,
    events: UnboundedSender<JobEvent>,
}

impl EventLogListener {
    /// A listener forwarding to `inner` and sending job events to `events`.
    pub fn new(
        inner: Arc<dyn SchedulerMetricsCollector>,
        events: UnboundedSender<JobEvent>,
    ) -> Self {
        Self { inner, events }
    }

    pub fn send(&self, event: JobEvent) {
        // The capturer is gone only when the process is shutting down.
        let _ = self.events.send(event);
    }

    pub fn ended(&self, job_id: &JobId, ending: Ending, queued_at: u64, at: u64) {
        self.send(JobEvent::Ended {
            job_id: job_id.to_string(),
            ending,
            queued_at,
            at,
        });
    }
}

impl SchedulerMetricsCollector for EventLogListener {
    fn record_submitted(&self, job_id: &JobId, queued_at: u64, submitted_at: u64) {
        self.inner.record_submitted(job_id, queued_at, submitted_at);
        self.send(JobEvent::Submitted {
            job_id: job_id.to_string(),
            queued_at,
            submitted_at,
        });
    }

    fn record_completed(&self, job_id: &JobId, queued_at: u64, completed_at: u64) {
        self.inner.record_completed(job_id, queued_at, completed_at);
        self.ended(job_id, Ending::Completed, queued_at, completed_at);
    }

    fn record_failed(&self, job_id: &JobId, queued_at: u64, failed_at: u64) {
        self.inner.record_failed(job_id, queued_at, failed_at);
        self.ended(job_id, Ending::Failed, queued_at, failed_at);
    }

    fn record_cancelled(&self, job_id: &JobId) {
        self.inner.record_cancelled(job_id);
        self.ended(job_id, Ending::Cancelled, 0, bjh_format::now_millis());
    }

    fn set_pending_tasks_queue_size(&self, value: u64) {
        self.inner.set_pending_tasks_queue_size(value);
    }

    fn gather_metrics(&self) -> ballista_core::error::Result<Option<(Vec<u8>, String)>> {
        self.inner.gather_metrics()
    }
}

/// Converts an executor's task reports into `TaskEnd` records, grouped by
/// job. Reports of running tasks and reports without a status are skipped:
/// only finished attempts are recorded.
pub(crate) fn task_ends(
    executor_id: &str,
    statuses: &[pb::TaskStatus],
) -> HashMap<String, Vec<TaskEnd>> {
    let mut by_job: HashMap<String, Vec<TaskEnd>> = HashMap::new();
    for s in statuses {
        let status = match &s.status {
            Some(task_status::Status::Successful(_)) => {
                ballista_api_types::dto::TaskStatus::Successful
            }
            Some(task_status::Status::Failed(failed)) => {
                ballista_api_types::dto::TaskStatus::Failed {
                    reason: failure_reason(failed),
                    error: failed.error.clone(),
                }
            }
            Some(task_status::Status::Running(_)) | None => continue,
        };
        by_job.entry(s.job_id.clone()).or_default().push(TaskEnd {
            stage_id: s.stage_id,
            task_id: s.task_id,
            executor_id: executor_id.to_string(),
            status,
            launch_time: s.launch_time,
            start_exec_time: s.start_exec_time,
            end_exec_time: s.end_exec_time,
            metrics: task_metrics(&s.metrics),
            stage_attempt: s.stage_attempt_num,
        });
    }
    by_job
}

fn failure_reason(failed: &pb::FailedTask) -> String {
    use pb::failed_task::FailedReason;
    match &failed.failed_reason {
        Some(FailedReason::ExecutionError(_)) => "ExecutionError",
        Some(FailedReason::FetchPartitionError(_)) => "FetchPartitionError",
        Some(FailedReason::IoError(_)) => "IoError",
        Some(FailedReason::ExecutorLost(_)) => "ExecutorLost",
        Some(FailedReason::ResultLost(_)) => "ResultLost",
        Some(FailedReason::TaskKilled(_)) => "TaskKilled",
        None => "Unknown",
    }
    .to_string()
}

/// Reduces a task's per-operator metrics (pre-order, root first) to rows and
/// compute time: rows out are the root's (the shuffle writer's) output rows,
/// rows in are the output rows of the last operator in pre-order, which is
/// always a leaf (the scan or shuffle read); compute time is summed over all
/// operators.
pub(crate) fn task_metrics(operators: &[OperatorMetricsSet]) -> TaskMetrics {
    let output_rows_of = |set: &OperatorMetricsSet| -> u64 {
        set.metrics
            .iter()
            .filter_map(|m| match m.metric {
                Some(Metric::OutputRows(n)) => Some(n),
                _ => None,
            })
            .sum()
    };
    let elapsed_compute_nanos = operators
        .iter()
        .flat_map(|set| &set.metrics)
        .filter_map(|m| match m.metric {
            Some(Metric::ElapseTime(n)) => Some(n),
            _ => None,
        })
        .sum();
    TaskMetrics {
        input_rows: operators.last().map(output_rows_of).unwrap_or(0),
        output_rows: operators.first().map(output_rows_of).unwrap_or(0),
        elapsed_compute_nanos,
    }
}

/// Sees executor task reports on their way into the scheduler.
#[derive(Clone)]
pub struct TaskTap {
    writer: WriterHandle,
    contacts: Option<crate::cluster::Contacts>,
}

impl TaskTap {
    /// A tap handing finished tasks to `writer`.
    pub fn new(writer: WriterHandle) -> Self {
        Self {
            writer,
            contacts: None,
        }
    }

    /// The same tap, noting each executor's last call in `contacts` (the
    /// cluster recorder's last sign of life of an executor).
    pub fn with_contacts(mut self, contacts: crate::cluster::Contacts) -> Self {
        self.contacts = Some(contacts);
        self
    }

    /// Notes a call from `executor_id`.
    fn contact(&self, executor_id: &str) {
        if let Some(contacts) = &self.contacts {
            contacts.seen(executor_id);
        }
    }

    /// Hands the finished tasks among `statuses` to the writer. Never blocks.
    pub fn observe(&self, executor_id: &str, statuses: &[pb::TaskStatus]) {
        if statuses.is_empty() {
            return;
        }
        for (job_id, tasks) in task_ends(executor_id, statuses) {
            self.writer.try_progress(WriterMsg::Tasks { job_id, tasks });
        }
    }
}

/// The scheduler's gRPC service with a [`TaskTap`] in front. Every call is
/// delegated unchanged.
#[derive(Clone)]
pub struct TappedScheduler<S> {
    inner: S,
    tap: Option<TaskTap>,
}

impl<S> TappedScheduler<S> {
    /// Wraps `inner`; with `tap: None` it is a plain pass-through.
    pub fn new(inner: S, tap: Option<TaskTap>) -> Self {
        Self { inner, tap }
    }
}

#[tonic::async_trait]
impl<S: SchedulerGrpc> SchedulerGrpc for TappedScheduler<S> {
    type ExecuteQueryPushStream = S::ExecuteQueryPushStream;

    async fn poll_work(
        &self,
        request: Request<pb::PollWorkParams>,
    ) -> Result<Response<pb::PollWorkResult>, Status> {
        if let Some(tap) = &self.tap {
            let params = request.get_ref();
            let executor_id = params
                .metadata
                .as_ref()
                .map(|m| m.id.as_str())
                .unwrap_or("");
            tap.contact(executor_id);
            tap.observe(executor_id, &params.task_status);
        }
        self.inner.poll_work(request).await
    }

    async fn register_executor(
        &self,
        request: Request<pb::RegisterExecutorParams>,
    ) -> Result<Response<pb::RegisterExecutorResult>, Status> {
        self.inner.register_executor(request).await
    }

    async fn heart_beat_from_executor(
        &self,
        request: Request<pb::HeartBeatParams>,
    ) -> Result<Response<pb::HeartBeatResult>, Status> {
        if let Some(tap) = &self.tap {
            let params = request.get_ref();
            let terminating = matches!(
                params.status.as_ref().and_then(|s| s.status.as_ref()),
                Some(pb::executor_status::Status::Terminating(_))
            );
            match (terminating, &tap.contacts) {
                (true, Some(contacts)) => contacts.leaving(&params.executor_id),
                _ => tap.contact(&params.executor_id),
            }
        }
        self.inner.heart_beat_from_executor(request).await
    }

    async fn update_task_status(
        &self,
        request: Request<pb::UpdateTaskStatusParams>,
    ) -> Result<Response<pb::UpdateTaskStatusResult>, Status> {
        if let Some(tap) = &self.tap {
            let params = request.get_ref();
            tap.contact(&params.executor_id);
            tap.observe(&params.executor_id, &params.task_status);
        }
        self.inner.update_task_status(request).await
    }

    async fn create_update_session(
        &self,
        request: Request<pb::CreateUpdateSessionParams>,
    ) -> Result<Response<pb::CreateUpdateSessionResult>, Status> {
        self.inner.create_update_session(request).await
    }

    async fn remove_session(
        &self,
        request: Request<pb::RemoveSessionParams>,
    ) -> Result<Response<pb::RemoveSessionResult>, Status> {
        self.inner.remove_session(request).await
    }

    async fn execute_query_push(
        &self,
        request: Request<pb::ExecuteQueryParams>,
    ) -> Result<Response<Self::ExecuteQueryPushStream>, Status> {
        self.inner.execute_query_push(request).await
    }

    async fn execute_query(
        &self,
        request: Request<pb::ExecuteQueryParams>,
    ) -> Result<Response<pb::ExecuteQueryResult>, Status> {
        self.inner.execute_query(request).await
    }

    async fn get_job_status(
        &self,
        request: Request<pb::GetJobStatusParams>,
    ) -> Result<Response<pb::GetJobStatusResult>, Status> {
        self.inner.get_job_status(request).await
    }

    async fn get_job_metrics(
        &self,
        request: Request<pb::GetJobMetricsParams>,
    ) -> Result<Response<pb::GetJobMetricsResult>, Status> {
        self.inner.get_job_metrics(request).await
    }

    async fn executor_stopped(
        &self,
        request: Request<pb::ExecutorStoppedParams>,
    ) -> Result<Response<pb::ExecutorStoppedResult>, Status> {
        if let Some(contacts) = self.tap.as_ref().and_then(|t| t.contacts.as_ref()) {
            contacts.leaving(&request.get_ref().executor_id);
        }
        self.inner.executor_stopped(request).await
    }

    async fn cancel_job(
        &self,
        request: Request<pb::CancelJobParams>,
    ) -> Result<Response<pb::CancelJobResult>, Status> {
        // Fully qualified: the scheduler also has an inherent `cancel_job`.
        <S as SchedulerGrpc>::cancel_job(&self.inner, request).await
    }

    async fn clean_job_data(
        &self,
        request: Request<pb::CleanJobDataParams>,
    ) -> Result<Response<pb::CleanJobDataResult>, Status> {
        self.inner.clean_job_data(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballista_core::serde::protobuf::{OperatorMetric, SuccessfulTask};

    fn metric(m: Metric) -> OperatorMetric {
        OperatorMetric {
            partition: None,
            metric: Some(m),
        }
    }

    fn status(task_id: u32, status: Option<task_status::Status>) -> pb::TaskStatus {
        pb::TaskStatus {
            task_id,
            job_id: "job".into(),
            stage_id: 2,
            stage_attempt_num: 0,
            launch_time: 10,
            start_exec_time: 11,
            end_exec_time: 12,
            metrics: vec![
                OperatorMetricsSet {
                    metrics: vec![
                        metric(Metric::OutputRows(5)),
                        metric(Metric::ElapseTime(100)),
                    ],
                },
                OperatorMetricsSet {
                    metrics: vec![
                        metric(Metric::OutputRows(50)),
                        metric(Metric::ElapseTime(7)),
                    ],
                },
            ],
            status,
        }
    }

    #[test]
    fn only_finished_tasks_become_task_ends() {
        let statuses = vec![
            status(
                0,
                Some(task_status::Status::Successful(SuccessfulTask::default())),
            ),
            status(1, Some(task_status::Status::Running(Default::default()))),
            status(2, None),
        ];
        let ends = task_ends("exec", &statuses);
        let tasks = &ends["job"];
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].task_id, 0);
        assert_eq!(tasks[0].executor_id, "exec");
        assert_eq!(
            tasks[0].metrics,
            TaskMetrics {
                input_rows: 50,
                output_rows: 5,
                elapsed_compute_nanos: 107
            }
        );
    }

    #[test]
    fn a_listener_forwards_to_the_wrapped_collector() {
        struct Counting(std::sync::atomic::AtomicU64);
        impl SchedulerMetricsCollector for Counting {
            fn record_submitted(&self, _: &JobId, _: u64, _: u64) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            fn record_completed(&self, _: &JobId, _: u64, _: u64) {
                self.0.fetch_add(10, std::sync::atomic::Ordering::SeqCst);
            }
            fn record_failed(&self, _: &JobId, _: u64, _: u64) {}
            fn record_cancelled(&self, _: &JobId) {}
            fn set_pending_tasks_queue_size(&self, _: u64) {}
            fn gather_metrics(&self) -> ballista_core::error::Result<Option<(Vec<u8>, String)>> {
                Ok(Some((b"m".to_vec(), "text/plain".into())))
            }
        }
        let inner = Arc::new(Counting(Default::default()));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let listener = EventLogListener::new(inner.clone(), tx);
        let id: JobId = "j".to_string().into();
        listener.record_submitted(&id, 1, 2);
        listener.record_completed(&id, 1, 3);
        assert_eq!(inner.0.load(std::sync::atomic::Ordering::SeqCst), 11);
        assert!(matches!(rx.try_recv(), Ok(JobEvent::Submitted { .. })));
        assert!(matches!(
            rx.try_recv(),
            Ok(JobEvent::Ended {
                ending: Ending::Completed,
                ..
            })
        ));
        assert_eq!(listener.gather_metrics().unwrap().unwrap().0, b"m".to_vec());
    }
}
