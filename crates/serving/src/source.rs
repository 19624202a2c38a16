//! `JobSource`: what the REST router reads jobs from.
//!
//! Three implementations, one router:
//! - `LiveSource`: the running scheduler, through its own REST router;
//! - [`DiskSource`]: a log directory, through its [`LogStore`] index;
//! - `Layered`: live first, then disk. This is what a scheduler started
//!   with `--event-log-dir` serves, so it never forgets a job.
//!
//! **Invariant:** a stored response is relayed byte for byte; the only bytes
//! built here are list entries of jobs known only from disk, which are
//! serialized from the same wire type the scheduler uses
//! (`ballista_api_types::dto::JobResponse`).

use crate::error::ApiError;
use crate::live::LiveApi;
use async_trait::async_trait;
use ballista_api_types::dto::PlanFormat;
use bjh_format::JobState;
use bjh_format::record::{JobEnd, Variant};
use bjh_recording::live::{HttpAnswer, LiveScheduler, job_path};
use bjh_store::query::{Facts, JobFacts, ListQuery, Page, Row, Tagged};
use bjh_store::records::JobHeader;
use bjh_store::{LogStore, Unfinished, read_job_start};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::Arc;

/// Which response of a job is asked for.
#[derive(Debug, Clone, Copy)]
pub enum Resource {
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

pub use bjh_recording::live::FROM_LOG_HEADER;

/// Content type of JSON responses, as axum's `Json` sets it.
pub(crate) const JSON: &str = "application/json";
/// Content type of text responses, as axum sets it for a `String`.
pub(crate) const TEXT: &str = "text/plain; charset=utf-8";
/// Content type of the timeline picture.
pub(crate) const SVG: &str = "image/svg+xml";

/// What the REST router reads jobs from.
#[async_trait]
pub trait JobSource: Send + Sync {
    /// One page of the jobs this source knows, after `cursor` when given.
    async fn list(&self, query: &ListQuery, cursor: Option<&Facts>) -> Result<Page, ApiError>;

    /// How many jobs this source knows in each state (by
    /// `JobState::index`), unfinished ones known only from their logs
    /// included when `unfinished`.
    async fn counts(&self, unfinished: bool) -> Result<[usize; 6], ApiError>;

    /// The list facts of one job (to resolve an `after=` cursor).
    async fn facts(&self, job_id: &str) -> Result<Option<Facts>, ApiError>;

    /// One response of one job; `Ok(None)` when the job is unknown here.
    async fn get(&self, job_id: &str, resource: Resource) -> Result<Option<HttpAnswer>, ApiError>;

    /// Cancels a job; `Ok(None)` when the job is unknown here.
    async fn cancel(&self, job_id: &str) -> Result<Option<HttpAnswer>, ApiError>;

    /// The job's header and event log, when this source has a log of it
    /// (completed, or still being written).
    fn log_of(&self, job_id: &str) -> Option<(JobHeader, bjh_store::LogRef)> {
        let _ = job_id;
        None
    }
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

pub fn format_query(format: PlanFormat) -> &'static str {
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
pub struct EntryKeys<'a> {
    #[serde(borrow)]
    job_id: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    job_name: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    status: std::borrow::Cow<'a, str>,
    #[serde(default)]
    start_time: u64,
    #[serde(default)]
    end_time: u64,
}

impl LiveSource {
    /// Every job the scheduler holds, as list rows.
    pub async fn rows(&self) -> Result<Vec<Row>, ApiError> {
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
        // Read after the list, so a job the list holds is in this map too
        // (a job is forgotten only long after it ends).
        let queued = self.api.queued_times().await;
        let scheduler: Arc<str> = bjh_store::intern(LiveScheduler::scheduler_id(&self.api));
        Ok(entries
            .into_iter()
            .filter_map(|raw| {
                let keys: EntryKeys = serde_json::from_str(raw.get()).ok()?;
                Some(Row {
                    facts: Arc::new(Tagged {
                        facts: Facts {
                            job_id: Arc::from(&*keys.job_id),
                            job_name: Arc::from(&*keys.job_name),
                            state: JobState::from_status_word(&keys.status),
                            queued_time: queued.get(&*keys.job_id).copied().unwrap_or(0),
                            start_time: keys.start_time,
                            end_time: keys.end_time,
                            query_hash: 0,
                        },
                        scheduler_id: Some(scheduler.clone()),
                    }),
                    entry: with_scheduler(raw.get(), &scheduler),
                })
            })
            .collect())
    }
}

/// The scheduler's list entry `raw` (a JSON object) with ours added: the
/// scheduler running the job.
pub fn with_scheduler(raw: &str, scheduler: &str) -> Bytes {
    with_field(raw, "scheduler_id", &scheduler)
}

/// The list entry `raw` (a JSON object) with the field `key` added, set to
/// `value`; anything but an object is left as it is.
pub fn with_field(raw: &str, key: &str, value: &impl serde::Serialize) -> Bytes {
    with_fields(
        raw,
        &[(key, serde_json::to_value(value).unwrap_or_default())],
    )
}

/// The list entry `raw` (a JSON object) with `fields` added, in order;
/// anything but an object is left as it is.
pub fn with_fields(raw: &str, fields: &[(&str, serde_json::Value)]) -> Bytes {
    let body = raw.trim_end();
    let Some(open) = body.strip_suffix('}') else {
        return Bytes::copy_from_slice(raw.as_bytes());
    };
    let mut out = Vec::with_capacity(body.len() + 40 * fields.len());
    out.extend_from_slice(open.as_bytes());
    let mut empty = open.trim_end().ends_with('{');
    for (key, value) in fields {
        if !empty {
            out.push(b',');
        }
        empty = false;
        let _ = serde_json::to_writer(&mut out, key);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, value);
    }
    out.push(b'}');
    out.into()
}

#[async_trait]
impl JobSource for LiveSource {
    async fn list(&self, query: &ListQuery, cursor: Option<&Facts>) -> Result<Page, ApiError> {
        Ok(query.select(self.rows().await?, cursor))
    }

    async fn counts(&self, _unfinished: bool) -> Result<[usize; 6], ApiError> {
        let mut counts = [0; 6];
        for row in self.rows().await? {
            counts[row.facts.state().index()] += 1;
        }
        Ok(counts)
    }

    async fn facts(&self, job_id: &str) -> Result<Option<Facts>, ApiError> {
        Ok(self
            .rows()
            .await?
            .into_iter()
            .find(|r| r.facts.job_id() == job_id)
            .map(|r| Facts::of(&*r.facts)))
    }

    async fn get(&self, job_id: &str, resource: Resource) -> Result<Option<HttpAnswer>, ApiError> {
        let rest = match resource {
            Resource::Job(f) => format_query(f).to_string(),
            Resource::Stages(f) => format!("/stages{}", format_query(f)),
            Resource::Config => "/config".into(),
            Resource::Dot => "/dot".into(),
            Resource::StageDot(n) => format!("/stage/{n}/dot"),
        };
        let answer = self.api.get(&job_path(job_id, &rest)).await;
        Ok(relay(answer))
    }

    async fn cancel(&self, job_id: &str) -> Result<Option<HttpAnswer>, ApiError> {
        let answer = self.api.call(Method::PATCH, &job_path(job_id, "")).await;
        Ok(relay(answer))
    }
}

/// The live answer to relay; `None` for a 404 (the scheduler does not hold
/// the job), so a layered source can ask the log instead.
pub fn relay(answer: HttpAnswer) -> Option<HttpAnswer> {
    (answer.status != StatusCode::NOT_FOUND).then_some(answer)
}

/// Runs a read of job `job_id`'s log on the blocking pool; a failure is
/// logged and answered 500 with a message naming the job, never a path.
pub(crate) async fn read_log<T: Send + 'static>(
    job_id: &str,
    read: impl FnOnce() -> Result<T, bjh_store::StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| ApiError::Internal(format!("reading the event log failed: {e}")))?
        .map_err(|e| {
            log::warn!("history: job {job_id}: {e}");
            ApiError::Internal(format!(
                "the event log of job {job_id} cannot be served: {e}"
            ))
        })
}

/// Job `job_id`'s records read from `log` on the calling (blocking)
/// thread, a failure logged and said as [`read_log`] says it.
pub(crate) fn read_records(
    job_id: &str,
    log: &bjh_store::LogRef,
) -> Result<bjh_store::records::JobRecords, String> {
    bjh_store::records::JobRecords::read(log).map_err(|e| {
        log::warn!("history: job {job_id}: {e}");
        format!("the event log of job {job_id} cannot be served: {e}")
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

    async fn job_end(&self, job_id: &str) -> Result<Option<JobEnd>, ApiError> {
        let store = self.store.clone();
        let id = job_id.to_string();
        read_log(job_id, move || store.read_job_end(&id)).await
    }
}

/// The `?plan_format=` variant `format` of a stored response.
pub(crate) fn variant(
    base: &str,
    stored: &std::collections::BTreeMap<String, Variant>,
    format: PlanFormat,
) -> Result<String, ApiError> {
    let name = format_name(format);
    Variant::pick(base, stored, name).ok_or_else(|| {
        ApiError::Internal(format!(
            "the stored plan_format={} variant does not fit its log",
            name.unwrap_or("default")
        ))
    })
}

#[async_trait]
impl JobSource for DiskSource {
    async fn list(&self, query: &ListQuery, cursor: Option<&Facts>) -> Result<Page, ApiError> {
        Ok(self.store.page(query, cursor, &HashSet::new()))
    }

    async fn counts(&self, unfinished: bool) -> Result<[usize; 6], ApiError> {
        Ok(self.store.counts(&HashSet::new(), unfinished))
    }

    async fn facts(&self, job_id: &str) -> Result<Option<Facts>, ApiError> {
        Ok(self.store.facts(job_id))
    }

    fn log_of(&self, job_id: &str) -> Option<(JobHeader, bjh_store::LogRef)> {
        self.timeline_source(job_id)
    }

    async fn get(&self, job_id: &str, resource: Resource) -> Result<Option<HttpAnswer>, ApiError> {
        if let Some((unfinished, state)) = self.store.unfinished(job_id) {
            return self
                .get_unfinished(unfinished, state, resource)
                .await
                .map(Some);
        }
        if !self.store.contains(job_id) {
            return Ok(None);
        }
        if let Some(reply) = self.get_located(job_id, resource).await? {
            return Ok(Some(reply.logged()));
        }
        let Some(end) = self.job_end(job_id).await? else {
            return Ok(None);
        };
        let missing = |name: &str| end.responses.missing.iter().any(|m| m == name);
        let reply = match resource {
            Resource::Job(f) => {
                if missing("job") {
                    return Err(ApiError::NotFound);
                }
                HttpAnswer::ok(JSON, variant(end.job.get(), &end.responses.job, f)?)
            }
            Resource::Stages(f) => {
                if missing("stages") {
                    return Err(ApiError::NotFound);
                }
                HttpAnswer::ok(JSON, variant(end.stages.get(), &end.responses.stages, f)?)
            }
            Resource::Config => {
                if missing("config") {
                    return Err(ApiError::NotFound);
                }
                HttpAnswer::ok(JSON, end.config.get().to_string())
            }
            Resource::Dot => {
                if missing("dot") {
                    return Err(ApiError::NotFound);
                }
                HttpAnswer::ok(TEXT, end.dot)
            }
            Resource::StageDot(n) => match end.responses.stage_dots.get(&n.to_string()) {
                Some(dot) => HttpAnswer::ok(TEXT, dot.clone()),
                None => return Err(ApiError::NotFound),
            },
        };
        Ok(Some(reply.logged()))
    }

    async fn cancel(&self, job_id: &str) -> Result<Option<HttpAnswer>, ApiError> {
        let state = match (self.store.summary(job_id), self.store.unfinished(job_id)) {
            (Some(summary), _) => summary.state(),
            (None, Some((_, state))) => state,
            (None, None) => return Ok(None),
        };
        let reason = match state {
            JobState::Completed => "The job is already completed",
            JobState::Failed => "The job has failed",
            JobState::Cancelled => "The job was cancelled",
            JobState::Abandoned => "The job was abandoned by the scheduler that ran it",
            JobState::Queued | JobState::Running => {
                "The job is running on another scheduler; cancel it there"
            }
        };
        Ok(Some(
            conflict(&format!(
                "{reason}; it is known only from the event log, which is read-only"
            ))
            .logged(),
        ))
    }
}

impl DiskSource {
    /// The query hash of a job the directory has a log of (0 unknown).
    pub fn query_hash(&self, job_id: &str) -> u64 {
        self.store.facts(job_id).map_or(0, |f| f.query_hash)
    }

    /// The job's slot time, when its completed log states it.
    pub fn usage(&self, job_id: &str) -> Option<bjh_format::usage::SlotUsage> {
        self.store.summary(job_id).and_then(|s| s.usage())
    }

    /// Answers from the payloads the footer locates, reading nothing else;
    /// `Ok(None)` when the log's footer does not locate them.
    async fn get_located(
        &self,
        job_id: &str,
        resource: Resource,
    ) -> Result<Option<HttpAnswer>, ApiError> {
        use bjh_format::record::payload::{CONFIG, DOT, JOB, RESPONSES, STAGES};
        let names: &'static [&'static str] = match resource {
            Resource::Job(PlanFormat::Default) => &[JOB],
            Resource::Job(_) => &[JOB, RESPONSES],
            Resource::Stages(PlanFormat::Default) => &[STAGES],
            Resource::Stages(_) => &[STAGES, RESPONSES],
            Resource::Config => &[CONFIG],
            Resource::Dot => &[DOT],
            Resource::StageDot(_) => &[RESPONSES],
        };
        let store = self.store.clone();
        let id = job_id.to_string();
        let read = read_log(job_id, move || store.read_payloads(&id, names)).await?;
        let Some(mut parts) = read else {
            return Ok(None);
        };
        let malformed = |e: &dyn std::fmt::Display| {
            ApiError::Internal(format!("the event log of job {job_id} is malformed: {e}"))
        };
        let responses = |bytes: &[u8]| {
            serde_json::from_slice::<bjh_format::record::Responses>(bytes)
                .map_err(|e| malformed(&e))
        };
        let reply = match resource {
            Resource::Job(f) | Resource::Stages(f) => {
                let base = std::str::from_utf8(&parts[0]).map_err(|e| malformed(&e))?;
                let body = match f {
                    PlanFormat::Default => base.to_string(),
                    _ => {
                        let stored = responses(&parts[1])?;
                        let variants = match resource {
                            Resource::Job(_) => &stored.job,
                            _ => &stored.stages,
                        };
                        variant(base, variants, f)?
                    }
                };
                HttpAnswer::ok(JSON, body)
            }
            Resource::Config => HttpAnswer::ok(JSON, parts.remove(0)),
            Resource::Dot => {
                let dot: String = serde_json::from_slice(&parts[0]).map_err(|e| malformed(&e))?;
                HttpAnswer::ok(TEXT, dot)
            }
            Resource::StageDot(n) => {
                match responses(&parts[0])?.stage_dots.remove(&n.to_string()) {
                    Some(dot) => HttpAnswer::ok(TEXT, dot),
                    None => return Err(ApiError::NotFound),
                }
            }
        };
        Ok(Some(reply))
    }

    async fn get_unfinished(
        &self,
        unfinished: Unfinished,
        state: JobState,
        resource: Resource,
    ) -> Result<HttpAnswer, ApiError> {
        let Resource::Job(_) = resource else {
            return Err(ApiError::Missing(format!(
                "job {} has not finished: its event log holds its plans, progress and \
                 timeline, not this response",
                unfinished.job_id
            )));
        };
        let path = self.store.log(&unfinished.file_name, unfinished.stamp.len);
        let start = read_log(&unfinished.job_id, move || read_job_start(&path)).await?;
        Ok(HttpAnswer::ok(JSON, unfinished.response(state, Some(&start))).logged())
    }

    /// The timeline header and log path of a job, completed or unfinished.
    fn timeline_source(&self, job_id: &str) -> Option<(JobHeader, bjh_store::LogRef)> {
        let path = self.store.log_of(job_id)?;
        let header = match (self.store.summary(job_id), self.store.unfinished(job_id)) {
            (Some(s), _) => JobHeader {
                job_id: job_id.to_string(),
                state: s.state(),
                start_time: s.start_time(),
                end_time: s.end_time(),
                dropped_records: Some(s.dropped_records),
                query_hash: s.query_hash(),
            },
            (None, Some((u, state))) => JobHeader {
                job_id: job_id.to_string(),
                state,
                start_time: u.facts(state).start_time,
                end_time: 0,
                dropped_records: None,
                query_hash: u.query_hash,
            },
            (None, None) => return None,
        };
        Some((header, path))
    }
}

/// The 409 the scheduler answers when a job cannot be cancelled.
pub(crate) fn conflict(reason: &str) -> HttpAnswer {
    #[derive(serde::Serialize)]
    struct CancelJobResponse<'a> {
        cancelled: bool,
        reason: &'a str,
    }
    HttpAnswer {
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
    async fn list(&self, query: &ListQuery, cursor: Option<&Facts>) -> Result<Page, ApiError> {
        // Every live job, and the disk's first `offset + limit` jobs among
        // the others: enough to cut the merged page.
        // The scheduler does not list query hashes: a live job's is its
        // log's (its `.running` log holds its plans from submission), and
        // its label the query's.
        let live: Vec<Row> = self
            .live
            .rows()
            .await?
            .into_iter()
            .map(|row| {
                let query_hash = self.disk.query_hash(row.facts.job_id());
                let label = bjh_store::labels::get(query_hash);
                // A finished job's slot time, once its log is complete;
                // `null` before, as the history's entries say it.
                let usage = self.disk.usage(row.facts.job_id());
                let entry = match std::str::from_utf8(&row.entry) {
                    Ok(raw) => with_fields(
                        raw,
                        &[
                            ("query_label", label.as_deref().into()),
                            ("busy_slot_ms", usage.map(|u| u.busy_slot_ms).into()),
                            ("failed_slot_ms", usage.map(|u| u.failed_slot_ms).into()),
                        ],
                    ),
                    Err(_) => row.entry,
                };
                Row {
                    facts: match query_hash {
                        0 => row.facts,
                        query_hash => Arc::new(Tagged {
                            facts: Facts {
                                query_hash,
                                ..Facts::of(&*row.facts)
                            },
                            scheduler_id: row.facts.scheduler_id().map(Arc::from),
                        }),
                    },
                    entry,
                }
            })
            .collect();
        let skip: HashSet<String> = live.iter().map(|r| r.facts.job_id().to_string()).collect();
        let widened = ListQuery {
            offset: 0,
            limit: query.limit.map(|l| l.saturating_add(query.offset)),
            ..query.clone()
        };
        let disk = self.disk.store.page(&widened, cursor, &skip);
        let from_disk = disk.rows.len();
        let mut rows = live;
        rows.extend(disk.rows);
        let mut page = query.select(rows, cursor);
        page.total = page.total.saturating_sub(from_disk) + disk.total;
        Ok(page)
    }

    async fn counts(&self, unfinished: bool) -> Result<[usize; 6], ApiError> {
        let rows = self.live.rows().await?;
        let skip: HashSet<String> = rows.iter().map(|r| r.facts.job_id().to_string()).collect();
        let mut counts = self.disk.store.counts(&skip, unfinished);
        for row in rows {
            counts[row.facts.state().index()] += 1;
        }
        Ok(counts)
    }

    async fn facts(&self, job_id: &str) -> Result<Option<Facts>, ApiError> {
        match self.live.facts(job_id).await? {
            Some(facts) => Ok(Some(Facts {
                query_hash: self.disk.query_hash(job_id),
                ..facts
            })),
            None => self.disk.facts(job_id).await,
        }
    }

    fn log_of(&self, job_id: &str) -> Option<(JobHeader, bjh_store::LogRef)> {
        self.disk.log_of(job_id)
    }

    async fn get(&self, job_id: &str, resource: Resource) -> Result<Option<HttpAnswer>, ApiError> {
        match self.live.get(job_id, resource).await? {
            Some(reply) => Ok(Some(reply)),
            None => self.disk.get(job_id, resource).await,
        }
    }

    async fn cancel(&self, job_id: &str) -> Result<Option<HttpAnswer>, ApiError> {
        match self.live.cancel(job_id).await? {
            Some(reply) => Ok(Some(reply)),
            None => self.disk.cancel(job_id).await,
        }
    }
}

/// A source as the SQL engine's [`bjh_sql::OtherJobs`]: the jobs of the
/// `jobs` table that are not the store's completed ones.
pub struct OthersOf(pub Arc<dyn JobSource>, pub crate::whatif_sql::Kept);

impl OthersOf {
    /// The other jobs of `source`, and its replays for `whatif`.
    pub fn new(source: Arc<dyn JobSource>) -> Self {
        Self(source, Default::default())
    }
}

#[async_trait]
impl bjh_sql::OtherJobs for OthersOf {
    async fn others(&self, query: &ListQuery) -> Result<Page, bjh_sql::SqlError> {
        self.0
            .list(query, None)
            .await
            .map_err(|e| bjh_sql::SqlError::Internal(e.to_string()))
    }

    async fn whatif(
        &self,
        store: Arc<bjh_store::LogStore>,
    ) -> Result<Vec<bjh_sql::whatif::WhatIfRow>, bjh_sql::SqlError> {
        crate::whatif_sql::predictions(self.0.as_ref(), store, &self.1)
            .await
            .map_err(bjh_sql::SqlError::Internal)
    }

    async fn whatif_pairs(
        &self,
        store: Arc<bjh_store::LogStore>,
    ) -> Result<Vec<bjh_sql::whatif::PairRow>, bjh_sql::SqlError> {
        crate::whatif_sql::pairs(self.0.clone(), store, &self.1)
            .await
            .map_err(bjh_sql::SqlError::Internal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_entry_gains_its_scheduler_and_stays_json() {
        for (raw, want) in [
            (
                r#"{"job_id":"a","status":"Running"}"#,
                serde_json::json!({"job_id": "a", "status": "Running", "scheduler_id": "eu-1"}),
            ),
            ("{}", serde_json::json!({"scheduler_id": "eu-1"})),
            ("{ }\n", serde_json::json!({"scheduler_id": "eu-1"})),
        ] {
            let out = with_scheduler(raw, "eu-1");
            let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(got, want, "{raw}");
        }
        let out = with_scheduler("{}", "a\"b");
        let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(got["scheduler_id"], "a\"b");
        // Not an object: left as it is.
        assert_eq!(&with_scheduler("[1]", "x")[..], b"[1]");
    }
}
