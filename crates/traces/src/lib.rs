//! Traces: each finished job as an OpenTelemetry trace, for Tempo, Jaeger
//! or any OTLP receiver.
//!
//! A trace has a job span (start to end), a span per stage (its first
//! task's launch to its last task's end) under it, and a span per task
//! attempt (launch to end on the executor) under its stage, carrying the
//! executor, the task and stage ids, the rows in and out, the compute time
//! and, for a failed attempt, the failure as the span's error status. The
//! job span carries the job's id, name and status, the query hash and the
//! scheduler id. Ids are derived from the job id (BLAKE3), so exporting
//! a job twice (a live scheduler, then `--export-otlp` over its directory)
//! gives the same trace, which receivers merge rather than duplicate.
//!
//! The spans are the `opentelemetry_sdk`'s own `SpanData`, and
//! `opentelemetry-otlp` encodes and sends them (OTLP over gRPC): no
//! encoder of ours. [`exporter`] says how a live scheduler exports jobs
//! as they end without ever making the writer wait, and how a directory is
//! exported in one pass.
//!
//! **Bounded spans:** every text a log supplies (the job's name, ids,
//! failure messages) is cut to `MAX_TEXT` bytes, so no job can make a
//! request the receiver refuses for its size (a 5 MB job name).
//!
//! **Rule:** this crate imports `format` (the writer's hand-over trait,
//! `WrittenJobs`, lives there), `metrics` and `store`; only the process on
//! top imports it.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod exporter;

use bjh_format::record::WrittenJob;
use bjh_store::records::{JobRecords, Task};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The longest text put in a span (an attribute's value, an error status):
/// longer ones are cut at a character boundary and end with `…`.
pub(crate) const MAX_TEXT: usize = 4096;

/// `text`, at most [`MAX_TEXT`] bytes.
fn capped(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_string();
    }
    let mut end = MAX_TEXT - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The job-level facts a trace needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TracedJob<'a> {
    /// The job.
    pub job_id: &'a str,
    /// Its name.
    pub job_name: &'a str,
    /// Its status word (`Completed`, `Failed`, `Cancelled`).
    pub status: &'a str,
    /// The scheduler's message when it failed.
    pub failure: Option<&'a str>,
    /// Queued, started and ended (epoch millis; 0 unknown).
    pub queued_at: u64,
    /// Started.
    pub start_time: u64,
    /// Ended.
    pub end_time: u64,
    /// The query hash (0 unknown).
    pub query_hash: u64,
    /// Progress records its log lost.
    pub dropped_records: u64,
    /// The scheduler that ran it, when its log says.
    pub scheduler_id: Option<&'a str>,
}

/// A task attempt's span: launch (else executor start) to end, the end
/// never before the start.
fn attempt_span(t: &Task) -> (u64, u64) {
    let start = if t.launch_time > 0 {
        t.launch_time
    } else {
        t.start_exec_time
    };
    (start, t.end_exec_time.max(start))
}

/// The trace of a job the writer handed over as its log completed (its
/// records gathered as a log reader gathers them).
pub(crate) fn spans_of_written(job: WrittenJob) -> Vec<SpanData> {
    use bjh_format::record::JobEndStatus;
    let WrittenJob {
        start,
        stages,
        tasks,
        end,
    } = job;
    let failure = match &end.status {
        JobEndStatus::Failed(message) => Some(message.clone()),
        _ => None,
    };
    let hash = start
        .logical_plan
        .as_deref()
        .and_then(bjh_format::query_hash::query_hash)
        .unwrap_or(0);
    let records = JobRecords::of_written(start, stages, tasks);
    let traced = TracedJob {
        job_id: &records.start.job_id,
        job_name: &records.start.job_name,
        status: &end.index.status,
        failure: failure.as_deref(),
        queued_at: end.queued_at,
        start_time: end.index.start_time,
        end_time: end.index.end_time,
        query_hash: hash,
        dropped_records: end.dropped_records,
        scheduler_id: records.start.scheduler_id.as_deref(),
    };
    spans(&traced, &records)
}

/// The job's trace id.
pub(crate) fn trace_id(job_id: &str) -> TraceId {
    let bytes = digest(&[b"trace", job_id.as_bytes()]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&bytes[..16]);
    id[0] |= 1; // never the invalid all-zero id
    TraceId::from_bytes(id)
}

/// A span id from the job and what the span is of.
fn span_id(parts: &[&[u8]]) -> SpanId {
    let bytes = digest(parts);
    let mut id = [0u8; 8];
    id.copy_from_slice(&bytes[..8]);
    id[0] |= 1;
    SpanId::from_bytes(id)
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    *hasher.finalize().as_bytes()
}

use bjh_format::time_of_millis as at;

/// What one span is, before it becomes a `SpanData`.
struct Draft {
    id: SpanId,
    parent: SpanId,
    name: &'static str,
    start: u64,
    end: u64,
    attributes: Vec<KeyValue>,
    status: Status,
}

/// Per stage: first start, last end, attempts, failed attempts.
#[derive(Default)]
struct StageSpan {
    start: u64,
    end: u64,
    attempts: i64,
    failed: i64,
}

/// The job span, its stages' spans and its attempts' spans.
pub(crate) fn spans(job: &TracedJob<'_>, records: &JobRecords) -> Vec<SpanData> {
    let trace = trace_id(job.job_id);
    let id = job.job_id.as_bytes();
    let job_span = span_id(&[b"job", id]);
    let stage_span = |stage: u32| span_id(&[b"stage", id, &stage.to_le_bytes()]);
    let mut stages: BTreeMap<u32, StageSpan> = BTreeMap::new();
    let mut drafts = Vec::new();
    for (i, a) in records.tasks.iter().enumerate() {
        let (start, end) = attempt_span(a);
        let stage = stages.entry(a.stage_id).or_default();
        stage.start = if stage.attempts == 0 {
            start
        } else {
            stage.start.min(start)
        };
        stage.end = stage.end.max(end);
        stage.attempts += 1;
        stage.failed += i64::from(a.failure.is_some());
        let executor = records.executors.get(a.executor as usize);
        drafts.push(task_draft(
            a,
            executor.map_or("", String::as_str),
            span_id(&[b"task", id, &(i as u64).to_le_bytes()]),
            stage_span(a.stage_id),
            start,
            end,
        ));
    }
    for (&stage_id, s) in &stages {
        drafts.push(Draft {
            id: stage_span(stage_id),
            parent: job_span,
            name: "ballista.stage",
            start: s.start,
            end: s.end,
            attributes: vec![
                KeyValue::new("ballista.job.id", capped(job.job_id)),
                KeyValue::new("ballista.stage.id", i64::from(stage_id)),
                KeyValue::new("ballista.stage.task_attempts", s.attempts),
                KeyValue::new("ballista.stage.failed_attempts", s.failed),
            ],
            status: Status::Unset,
        });
    }
    drafts.push(job_draft(job, job_span, &stages));
    let scope = InstrumentationScope::builder("ballista-job-history")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    drafts
        .into_iter()
        .map(|d| SpanData {
            span_context: SpanContext::new(
                trace,
                d.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: d.parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(d.name),
            start_time: at(d.start),
            end_time: at(d.end.max(d.start)),
            attributes: d.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: d.status,
            instrumentation_scope: scope.clone(),
        })
        .collect()
}

fn task_draft(a: &Task, executor: &str, id: SpanId, parent: SpanId, start: u64, end: u64) -> Draft {
    let mut attributes = vec![
        KeyValue::new("ballista.stage.id", i64::from(a.stage_id)),
        KeyValue::new("ballista.stage.attempt", i64::from(a.stage_attempt)),
        KeyValue::new("ballista.task.id", i64::from(a.task_id)),
        KeyValue::new("ballista.executor.id", capped(executor)),
        KeyValue::new("ballista.task.input_rows", a.input_rows as i64),
        KeyValue::new("ballista.task.output_rows", a.output_rows as i64),
        KeyValue::new("ballista.task.compute_ns", a.compute_nanos as i64),
    ];
    let status = match &a.failure {
        Some((reason, error)) => {
            attributes.push(KeyValue::new(
                "ballista.task.failure_reason",
                capped(reason),
            ));
            Status::error(capped(&format!("{reason}: {error}")))
        }
        None => Status::Ok,
    };
    Draft {
        id,
        parent,
        name: "ballista.task",
        start,
        end,
        attributes,
        status,
    }
}

fn job_draft(job: &TracedJob<'_>, id: SpanId, stages: &BTreeMap<u32, StageSpan>) -> Draft {
    // A job without times (one that failed in planning) spans its tasks.
    let first = stages
        .values()
        .map(|s| s.start)
        .min()
        .unwrap_or(job.queued_at);
    let last = stages.values().map(|s| s.end).max().unwrap_or(first);
    let start = if job.start_time > 0 {
        job.start_time
    } else {
        first
    };
    let end = if job.end_time > 0 { job.end_time } else { last };
    let mut attributes = vec![
        KeyValue::new("ballista.job.id", capped(job.job_id)),
        KeyValue::new("ballista.job.name", capped(job.job_name)),
        KeyValue::new("ballista.job.status", job.status.to_string()),
        KeyValue::new("ballista.job.dropped_records", job.dropped_records as i64),
    ];
    if job.query_hash != 0 {
        attributes.push(KeyValue::new(
            "ballista.query_hash",
            bjh_format::query_hash::hash_text(job.query_hash),
        ));
    }
    if let Some(id) = job.scheduler_id {
        attributes.push(KeyValue::new("ballista.scheduler_id", capped(id)));
    }
    if job.queued_at > 0 && start >= job.queued_at {
        attributes.push(KeyValue::new(
            "ballista.job.queued_ms",
            (start - job.queued_at) as i64,
        ));
    }
    let status = match job.status {
        "Completed" => Status::Ok,
        "Failed" => Status::error(capped(job.failure.unwrap_or("failed"))),
        _ => Status::Unset,
    };
    Draft {
        id,
        parent: SpanId::INVALID,
        name: "ballista.job",
        start,
        end,
        attributes,
        status,
    }
}
