//! The on-disk schema: one JSON object per line, in upstream Ballista's
//! "schema v1" envelope `{"ev": KIND, "version": N, "data": {...}}`.
//!
//! **Compatibility.** Every record kind upstream defines (`JobStart`,
//! `StageStart`, `StageEnd`, `TaskEnd`, `JobEnd`) is written with every field
//! upstream's reader requires, so `ballista_history::reader` reads our logs.
//! What we add is either an extra field (which upstream ignores, and which we
//! read with a default so upstream's logs parse here) or a record kind of our
//! own (`Footer`), which upstream's reader skips. A reader accepts any record
//! whose `version` is at most [`SCHEMA_VERSION`]; a newer terminal record is
//! reported with a message saying to upgrade, never guessed at.
//!
//! **Invariant:** stored REST responses are raw JSON ([`RawValue`]): they are
//! relayed byte for byte and never parsed into a typed struct or
//! re-serialized.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// The schema version stamped on every record we write.
pub const SCHEMA_VERSION: u32 = 1;

/// Record kinds, as written to the `ev` field.
pub mod kind {
    /// First record of every log.
    pub const JOB_START: &str = "JobStart";
    /// A stage of the job, with its start time.
    pub const STAGE_START: &str = "StageStart";
    /// A stage's terminal status.
    pub const STAGE_END: &str = "StageEnd";
    /// One finished task attempt.
    pub const TASK_END: &str = "TaskEnd";
    /// The terminal record, carrying the job's final REST responses.
    pub const JOB_END: &str = "JobEnd";
    /// Ours: the last line of a completed log, locating `JobEnd` by byte range.
    pub const FOOTER: &str = "Footer";
}

/// One line of a log, with its payload left unparsed so that a reader can
/// route on `ev` and check `version` before committing to a shape.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<'a> {
    /// Record kind.
    pub ev: String,
    /// Schema version the record was written with.
    pub version: u32,
    /// Kind-specific payload.
    #[serde(borrow)]
    pub data: &'a RawValue,
}

/// Serializes one record as a JSON line (with its trailing newline).
pub fn encode_line<T: Serialize>(ev: &str, data: &T) -> serde_json::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Out<'a, T> {
        ev: &'a str,
        version: u32,
        data: &'a T,
    }
    let mut line = serde_json::to_vec(&Out {
        ev,
        version: SCHEMA_VERSION,
        data,
    })?;
    line.push(b'\n');
    Ok(line)
}

/// `JobStart`: written when the scheduler accepts a job.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct JobStart {
    /// Job identifier; equals the log's file stem.
    pub job_id: String,
    /// The job name given by the client (may be empty).
    pub job_name: String,
    /// When the job entered the queue (epoch millis).
    pub queued_at: u64,
    /// When planning finished and the job was submitted (epoch millis).
    pub submitted_at: u64,
    /// The scheduler that accepted the job.
    #[serde(default)]
    pub scheduler_id: Option<String>,
    /// Logical plan text, if the job got as far as planning.
    #[serde(default)]
    pub logical_plan: Option<String>,
    /// Physical plan text, if the job got as far as planning.
    #[serde(default)]
    pub physical_plan: Option<String>,
    /// Ours: the executors registered when the job started and the task
    /// slots of each (the scheduler's vcores), the cluster shape a what-if
    /// replay starts from. Absent from upstream's logs (and from ours
    /// written before it), where the shape is inferred from the tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executors: Option<Vec<ExecutorSlots>>,
}

/// An executor and its task slots, as a job's start saw them.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct ExecutorSlots {
    /// The executor's id.
    pub id: String,
    /// Its task slots (vcores).
    pub slots: u32,
}

/// `StageStart`: a stage of the job.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct StageStart {
    /// Stage identifier within the job.
    pub stage_id: u32,
    /// Number of input partitions the stage's tasks covered.
    pub partitions: u32,
    /// Ours: the first launch time of any of the stage's tasks (epoch millis,
    /// 0 when no task launched).
    #[serde(default)]
    pub start_time: u64,
}

/// `StageEnd`: a stage's terminal status.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct StageEnd {
    /// Stage identifier within the job.
    pub stage_id: u32,
    /// Terminal status, as the scheduler names it (e.g. `Successful`).
    pub status: String,
    /// Ours: the last finish time of any of the stage's tasks (epoch millis).
    #[serde(default)]
    pub end_time: u64,
}

/// The outcome of one task attempt, in the REST API's wire shape
/// (`"Successful"` or `{"Failed":{"reason":..,"error":..}}`).
pub type TaskOutcome = ballista_api_types::dto::TaskStatus;

/// Row counts and compute time of one task.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct TaskMetrics {
    /// Rows read by the stage's leaf operator.
    pub input_rows: u64,
    /// Rows written by the stage's root operator (the shuffle writer).
    pub output_rows: u64,
    /// Compute time summed over the task's operators, in nanoseconds.
    pub elapsed_compute_nanos: u64,
}

/// `TaskEnd`: one finished task attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskEnd {
    /// Stage the task belonged to.
    pub stage_id: u32,
    /// The task's id within its stage.
    pub task_id: u32,
    /// Executor that ran it.
    pub executor_id: String,
    /// Outcome.
    pub status: TaskOutcome,
    /// When the scheduler launched it (epoch millis).
    pub launch_time: u64,
    /// When the executor started it (epoch millis).
    pub start_exec_time: u64,
    /// When the executor finished it (epoch millis).
    pub end_exec_time: u64,
    /// Rows and compute time.
    pub metrics: TaskMetrics,
    /// Ours: which attempt of the stage this task belonged to.
    #[serde(default)]
    pub stage_attempt: u32,
}

/// How a job ended. Serialized as upstream does: `"Succeeded"`,
/// `{"Failed":"message"}`, `"Cancelled"`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum JobEndStatus {
    /// Completed successfully.
    Succeeded,
    /// Failed, with the scheduler's message.
    Failed(String),
    /// Cancelled by a user.
    Cancelled,
}

/// The list summary of a completed job: exactly the fields one entry of
/// `GET /api/jobs` carries, so the list is served without touching payloads.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct JobIndex {
    /// Job identifier.
    pub job_id: String,
    /// Job name.
    pub job_name: String,
    /// Short status word (`Completed`, `Failed`, ...).
    pub status: String,
    /// Long status text.
    pub job_status: String,
    /// Start time (epoch millis).
    pub start_time: u64,
    /// End time (epoch millis).
    pub end_time: u64,
    /// Number of stages.
    pub num_stages: usize,
    /// Number of completed stages.
    pub completed_stages: usize,
    /// Percentage of completed stages.
    pub percent_complete: u8,
}

/// How a `?plan_format=` variant of a response is stored: either the whole
/// response, or the default response's bytes with the values of its plan
/// strings replaced (the formats differ only in those strings, so the
/// per-task detail is stored once). The splice is verified against the real
/// variant when the log is written, so what is served is byte-identical.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Identical to the default response.
    Same,
    /// The default response with the JSON string values of `key` replaced, in
    /// order, by these raw JSON string tokens.
    Splice {
        /// The object key whose string values differ (`physical_plan`,
        /// `stage_plan`).
        key: String,
        /// Replacement tokens, raw JSON strings including their quotes.
        values: Vec<Box<RawValue>>,
    },
    /// The whole response.
    Whole(Box<RawValue>),
}

/// Ours: everything the live REST API answered for this job beyond the
/// upstream fields of `JobEnd`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Responses {
    /// `?plan_format=` variants of `GET /api/job/{id}`, by format name.
    #[serde(default)]
    pub job: BTreeMap<String, Variant>,
    /// `?plan_format=` variants of `GET /api/job/{id}/stages`, by format name.
    #[serde(default)]
    pub stages: BTreeMap<String, Variant>,
    /// `GET /api/job/{id}/stage/{n}/dot`, by stage id.
    #[serde(default)]
    pub stage_dots: BTreeMap<String, String>,
    /// Routes that had no answer when the job ended (for example `job` for a
    /// job that failed during planning, which never had an execution graph);
    /// history answers them 404 as the live scheduler did.
    #[serde(default)]
    pub missing: Vec<String>,
}

/// `JobEnd`: the terminal record. The upstream fields first, then ours.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobEnd {
    /// How the job ended.
    pub status: JobEndStatus,
    /// When the job was queued.
    pub queued_at: u64,
    /// When the job started running.
    pub started_at: u64,
    /// When the job reached its terminal state.
    pub completed_at: u64,
    /// The list summary.
    pub index: JobIndex,
    /// `GET /api/job/{id}`, verbatim.
    pub job: Box<RawValue>,
    /// `GET /api/job/{id}/stages`, verbatim.
    pub stages: Box<RawValue>,
    /// `GET /api/job/{id}/config`, verbatim after redaction.
    pub config: Box<RawValue>,
    /// `GET /api/job/{id}/dot`.
    pub dot: String,
    /// Ours: progress records dropped for this job under backpressure.
    #[serde(default)]
    pub dropped_records: u64,
    /// Ours: the other responses.
    #[serde(default)]
    pub responses: Responses,
}

/// One job's records as the writer wrote them to its completed log, kept
/// in memory for a reader that would otherwise read the log again (the
/// SQL tables' columnar history). Task failures are scrubbed of the job's
/// secrets as the lines were.
#[derive(Debug, Clone)]
pub struct WrittenJob {
    /// The `JobStart` written.
    pub start: JobStart,
    /// Stage records, in the order written.
    pub stages: Vec<(StageStart, StageEnd)>,
    /// `TaskEnd` records, in the order written, in the batches they
    /// arrived in (kept as they came, without copying).
    pub tasks: Vec<Vec<TaskEnd>>,
    /// The terminal record.
    pub end: Box<JobEnd>,
}

/// The fields of `JobEnd` needed to list a job, and nothing else: decoding
/// into this skips the payloads without allocating them.
#[derive(Debug, Deserialize)]
pub struct JobEndSummary {
    /// How the job ended.
    pub status: JobEndStatus,
    /// When the job was queued.
    #[serde(default)]
    pub queued_at: u64,
    /// The list summary.
    pub index: JobIndex,
    /// Progress records dropped.
    #[serde(default)]
    pub dropped_records: u64,
    /// The job's logical plan, read out of the `job` payload (the rest of
    /// the payload is skipped), for the query hash.
    #[serde(default, rename = "job")]
    pub plans: PlansOfJob,
    /// The query hash as a footer states it, when read from one.
    #[serde(skip)]
    pub stated_hash: Option<u64>,
    /// The query's label as a footer states it, when read from one.
    #[serde(skip)]
    pub stated_label: Option<String>,
    /// The scheduler that ran the job, as a footer states it (logs
    /// without a footer, and older footers, do not say).
    #[serde(skip)]
    pub scheduler_id: Option<String>,
    /// The job's slot time as a footer states it (logs without a footer,
    /// and older footers, do not say).
    #[serde(skip)]
    pub usage: Option<crate::usage::SlotUsage>,
    /// The usage tags a footer states (`Footer::tags`).
    #[serde(skip)]
    pub tags: BTreeMap<String, String>,
}

impl JobEndSummary {
    /// The query hash of the job's logical plan (0 when it has none).
    pub fn query_hash(&self) -> u64 {
        self.stated_hash
            .or_else(|| self.plans.query_hash())
            .unwrap_or(0)
    }
}

/// The logical plan of a `GET /api/job/{id}` response, and nothing else.
#[derive(Debug, Default, Deserialize)]
pub struct PlansOfJob {
    /// The logical plan text, when the job got as far as planning.
    #[serde(default)]
    pub logical_plan: Option<String>,
}

impl PlansOfJob {
    /// The query hash of the logical plan, if there is one.
    pub fn query_hash(&self) -> Option<u64> {
        self.logical_plan
            .as_deref()
            .and_then(crate::query_hash::query_hash)
    }

    /// The query's label made from the logical plan, if there is one.
    pub fn query_label(&self) -> Option<String> {
        self.logical_plan
            .as_deref()
            .and_then(crate::label::query_label)
    }
}

/// Ours: the last line of a completed log. It locates the `JobEnd` line so a
/// reader finds the terminal record with one small read from the end of the
/// file. Upstream's reader stops at `JobEnd` and never sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Footer {
    /// Byte offset of the `JobEnd` line.
    pub job_end_offset: u64,
    /// Length of the `JobEnd` line, without its newline.
    pub job_end_len: u64,
    /// A copy of `JobEnd.status`.
    pub status: JobEndStatus,
    /// A copy of `JobEnd.queued_at`.
    pub queued_at: u64,
    /// A copy of `JobEnd.index`, so listing a job reads only this line.
    pub index: JobIndex,
    /// A copy of `JobEnd.dropped_records`.
    pub dropped_records: u64,
    /// Ours: the query hash of the job's logical plan (16 hex digits; see
    /// `format::query_hash`), absent when the job has no plan or the log
    /// was written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_hash: Option<String>,
    /// Ours: the query's label (see `format::label`), made from the same
    /// plan as `query_hash`; absent when the plan names nothing it knows
    /// or the log was written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_label: Option<String>,
    /// Ours: a copy of `JobStart.scheduler_id`, the scheduler that ran the
    /// job, so listing a job tells the clusters apart; absent in logs
    /// written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_id: Option<String>,
    /// Ours: the job's busy slot time, every task attempt's span times
    /// the slots it held (see [`crate::usage`]), in slot-milliseconds;
    /// absent in logs written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_slot_ms: Option<u64>,
    /// Ours: the failed attempts' part of `busy_slot_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_slot_ms: Option<u64>,
    /// Ours: `busy_slot_ms` by the executor that ran the attempts (at most
    /// 10,000 executors; absent in logs written before the field existed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub busy_by_executor: BTreeMap<String, u64>,
    /// Ours: the values of the session-config keys the operator named as
    /// usage tags (`--usage-tags`), as the job's redacted `/config`
    /// answer has them; absent when none is set (and in logs written
    /// before the field existed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Ours: where each stored payload's bytes are, by name (see
    /// [`payload`]), as `[offset, length]` in the file. In a plain log, the
    /// JSON value inside the `JobEnd` line; in a compressed log, one zstd
    /// frame that decodes to exactly that value. Payloads the job has no
    /// answer for are absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub payloads: BTreeMap<String, [u64; 2]>,
}

/// Names of the `JobEnd` payloads a footer locates.
pub mod payload {
    /// `GET /api/job/{id}`.
    pub const JOB: &str = "job";
    /// `GET /api/job/{id}/stages`.
    pub const STAGES: &str = "stages";
    /// `GET /api/job/{id}/config`.
    pub const CONFIG: &str = "config";
    /// `GET /api/job/{id}/dot` (a JSON string).
    pub const DOT: &str = "dot";
    /// The variants and stage graphs (`Responses`).
    pub const RESPONSES: &str = "responses";
}

/// One piece of a `JobEnd` line: glue (`None`) or a named payload's JSON.
pub type Piece = (Option<&'static str>, Vec<u8>);

/// The `JobEnd` line (with its newline) cut into glue and payload pieces:
/// their concatenation is exactly `encode_line(kind::JOB_END, end)`, and
/// each named piece is one payload's JSON value, so the writer can record
/// where each one is.
pub fn job_end_pieces(end: &JobEnd) -> serde_json::Result<Vec<Piece>> {
    use serde_json::to_vec;
    let fields: [(&'static str, Vec<u8>, bool); 11] = [
        ("status", to_vec(&end.status)?, false),
        ("queued_at", to_vec(&end.queued_at)?, false),
        ("started_at", to_vec(&end.started_at)?, false),
        ("completed_at", to_vec(&end.completed_at)?, false),
        ("index", to_vec(&end.index)?, false),
        (payload::JOB, to_vec(&end.job)?, true),
        (payload::STAGES, to_vec(&end.stages)?, true),
        (payload::CONFIG, to_vec(&end.config)?, true),
        (payload::DOT, to_vec(&end.dot)?, true),
        ("dropped_records", to_vec(&end.dropped_records)?, false),
        (payload::RESPONSES, to_vec(&end.responses)?, true),
    ];
    let mut pieces = Vec::new();
    let mut glue = format!(
        "{{\"ev\":\"{}\",\"version\":{SCHEMA_VERSION},\"data\":{{",
        kind::JOB_END
    )
    .into_bytes();
    for (i, (name, value, located)) in fields.into_iter().enumerate() {
        if i > 0 {
            glue.push(b',');
        }
        glue.extend_from_slice(&to_vec(name)?);
        glue.push(b':');
        if located {
            pieces.push((None, std::mem::take(&mut glue)));
            pieces.push((Some(name), value));
        } else {
            glue.extend_from_slice(&value);
        }
    }
    glue.extend_from_slice(b"}}\n");
    pieces.push((None, glue));
    Ok(pieces)
}

/// Finds the raw JSON string tokens that are values of `"key"` in `json`, as
/// byte ranges (including the quotes), in document order.
///
/// Inside a JSON string every `"` is escaped, so the byte sequence
/// `"key":"` can only occur where `key` really is an object key followed by
/// a string value; no tokenizer is needed to tell the two apart.
pub fn string_values_of(json: &[u8], key: &str) -> Vec<std::ops::Range<usize>> {
    let needle = format!("\"{key}\":\"");
    let needle = needle.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = find(&json[at..], needle) {
        let start = at + found + needle.len() - 1;
        let mut i = start + 1;
        while i < json.len() {
            match json[i] {
                b'\\' => i += 2,
                b'"' => break,
                _ => i += 1,
            }
        }
        if i >= json.len() {
            break;
        }
        out.push(start..i + 1);
        at = i + 1;
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

impl Variant {
    /// Stores `variant` relative to `base`: [`Variant::Same`] when equal, a
    /// splice of `key`'s string values when that reproduces it exactly, and
    /// the whole response otherwise.
    pub fn diff(base: &str, variant: &str, key: &str) -> Variant {
        if base == variant {
            return Variant::Same;
        }
        let values: Vec<Box<RawValue>> = string_values_of(variant.as_bytes(), key)
            .into_iter()
            .filter_map(|r| RawValue::from_string(variant[r].to_string()).ok())
            .collect();
        let splice = Variant::Splice {
            key: key.to_string(),
            values,
        };
        match splice.apply(base) {
            Some(rebuilt) if rebuilt == variant => splice,
            _ => Variant::Whole(raw_or_null(variant)),
        }
    }

    /// The response in the `?plan_format=` variant `name` (`None`: the
    /// default) from the default response `base` and the stored variants;
    /// a log without that variant (upstream's) gives the default. `None`
    /// when the stored splice does not fit `base`.
    pub fn pick(
        base: &str,
        stored: &std::collections::BTreeMap<String, Variant>,
        name: Option<&str>,
    ) -> Option<String> {
        match name.and_then(|name| stored.get(name)) {
            None => Some(base.to_string()),
            Some(v) => v.apply(base),
        }
    }

    /// Rebuilds the variant's bytes from the default response's bytes.
    /// `None` when the stored splice does not fit `base`.
    pub fn apply(&self, base: &str) -> Option<String> {
        match self {
            Variant::Same => Some(base.to_string()),
            Variant::Whole(raw) => Some(raw.get().to_string()),
            Variant::Splice { key, values } => {
                let ranges = string_values_of(base.as_bytes(), key);
                if ranges.len() != values.len() {
                    return None;
                }
                let mut out = String::with_capacity(base.len());
                let mut at = 0;
                for (range, value) in ranges.into_iter().zip(values) {
                    out.push_str(&base[at..range.start]);
                    out.push_str(value.get());
                    at = range.end;
                }
                out.push_str(&base[at..]);
                Some(out)
            }
        }
    }
}

/// Wraps bytes known to be one JSON value; anything else becomes `null`
/// rather than corrupting the line it is embedded in.
pub fn raw_or_null(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_string())
        .unwrap_or_else(|_| RawValue::from_string("null".to_string()).expect("valid JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_end_pieces_concatenate_to_the_encoded_line() {
        let mut responses = Responses::default();
        responses
            .stage_dots
            .insert("1".into(), "digraph \"x\" {}".into());
        responses.missing.push("dot".into());
        let end = JobEnd {
            status: JobEndStatus::Failed("it \"broke\"\n".into()),
            queued_at: 1,
            started_at: 2,
            completed_at: 3,
            index: JobIndex {
                job_id: "j".into(),
                job_name: "\"job\":{}".into(),
                ..Default::default()
            },
            job: raw_or_null(r#"{"job_id":"j","x":[1,2]}"#),
            stages: raw_or_null(r#"{"stages":[]}"#),
            config: raw_or_null(r#"{"a":"b"}"#),
            dot: "digraph G {\n}".into(),
            dropped_records: 4,
            responses,
        };
        let pieces = job_end_pieces(&end).unwrap();
        let joined: Vec<u8> = pieces.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(joined, encode_line(kind::JOB_END, &end).unwrap());
        let named: Vec<(&str, String)> = pieces
            .iter()
            .filter_map(|(n, b)| Some((((*n)?), String::from_utf8(b.clone()).unwrap())))
            .collect();
        assert_eq!(named[0], ("job", r#"{"job_id":"j","x":[1,2]}"#.to_string()));
        assert_eq!(named[2], ("config", r#"{"a":"b"}"#.to_string()));
        assert_eq!(named[3], ("dot", r#""digraph G {\n}""#.to_string()));
        assert_eq!(named[4].0, "responses");
    }

    #[test]
    fn string_values_skip_escaped_lookalikes_inside_strings() {
        let json =
            r#"{"a":"x\"stage_plan\":\"no","stage_plan":"one\\","s":[{"stage_plan":"two\"q"}]}"#;
        let found: Vec<&str> = string_values_of(json.as_bytes(), "stage_plan")
            .into_iter()
            .map(|r| &json[r])
            .collect();
        assert_eq!(found, vec![r#""one\\""#, r#""two\"q""#]);
    }

    #[test]
    fn a_splice_rebuilds_the_variant_byte_for_byte() {
        let base = r#"{"stages":[{"stage_plan":"A\n  B","tasks":[1,2]},{"stage_plan":"C"}]}"#;
        let variant = r#"{"stages":[{"stage_plan":"┌─A─┐","tasks":[1,2]},{"stage_plan":"C2"}]}"#;
        let stored = Variant::diff(base, variant, "stage_plan");
        assert!(matches!(stored, Variant::Splice { .. }));
        assert_eq!(stored.apply(base).unwrap(), variant);
        let json = serde_json::to_string(&stored).unwrap();
        let back: Variant = serde_json::from_str(&json).unwrap();
        assert_eq!(back.apply(base).unwrap(), variant);
    }

    #[test]
    fn a_variant_differing_elsewhere_is_stored_whole() {
        let base = r#"{"stage_plan":"A","x":1}"#;
        let variant = r#"{"stage_plan":"B","x":2}"#;
        let stored = Variant::diff(base, variant, "stage_plan");
        assert!(matches!(stored, Variant::Whole(_)));
        assert_eq!(stored.apply(base).unwrap(), variant);
    }

    #[test]
    fn identical_variants_are_stored_as_same() {
        assert!(matches!(Variant::diff("{}", "{}", "k"), Variant::Same));
    }

    /// The oracle is upstream's own type: each status serializes to the
    /// bytes upstream's does, and each reads back from them.
    #[test]
    fn job_end_status_serializes_as_upstream_does() {
        use ballista_history::event::JobEndStatus as Upstream;
        for (ours, theirs) in [
            (JobEndStatus::Succeeded, Upstream::Succeeded),
            (
                JobEndStatus::Failed("boom \"quoted\"".into()),
                Upstream::Failed("boom \"quoted\"".into()),
            ),
            (JobEndStatus::Cancelled, Upstream::Cancelled),
        ] {
            let bytes = serde_json::to_string(&theirs).unwrap();
            assert_eq!(serde_json::to_string(&ours).unwrap(), bytes);
            assert_eq!(serde_json::from_str::<JobEndStatus>(&bytes).unwrap(), ours);
        }
    }
}
