//! The capturer: turns the listener's job events into `JobStart` and
//! `JobEnd` records by asking the live scheduler's own REST router for the
//! job's responses, in process, off the scheduling path.
//!
//! `record_completed` fires before the scheduler marks the job successful,
//! and `record_cancelled` before it aborts the job, so the terminal
//! responses are rendered only once the scheduler reports a terminal status
//! for the job (polled with a short backoff, bounded by
//! [`TERMINAL_WAIT`]).
//!
//! **Invariant:** every rendered response is stored as the exact bytes the
//! router returned; only the `/config` map is rewritten, and only when a key
//! must be redacted.

use crate::listener::{Ending, JobEvent};
use crate::live::{HttpAnswer, LiveScheduler, is_terminal, job_path};
use crate::redact::Redactor;
use crate::writer::{WriterHandle, WriterMsg};
use ballista_core::serde::protobuf::job_status;
use bjh_format::record::{
    ExecutorSlots, JobEnd, JobEndStatus, JobIndex, JobStart, Responses, StageEnd, StageStart,
    Variant, raw_or_null,
};
use bjh_format::stages::{StageAnswer, StagesAnswer};
use http::StatusCode;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;

/// How long a job event waits for the scheduler to show the job's terminal
/// status before its responses are rendered anyway.
pub const TERMINAL_WAIT: Duration = Duration::from_secs(30);

/// The `?plan_format=` values other than the default.
pub const PLAN_FORMATS: [&str; 2] = ["tree", "metrics"];

/// Renders records for the writer: reads the scheduler's answers through
/// `api`, scrubs them with `redactor`, writes through `writer`.
#[derive(Clone)]
pub struct Capturer {
    pub api: Arc<dyn LiveScheduler>,
    pub writer: WriterHandle,
    pub redactor: Redactor,
}

impl Capturer {
    /// Handles job events until `events` closes or `stop` resolves, then
    /// waits for the captures already under way. At shutdown, a job the
    /// scheduler already shows as finished is recorded even if its end event
    /// has not reached us yet (the client may have its answer first).
    pub async fn run(
        self,
        mut events: UnboundedReceiver<JobEvent>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let mut running = JoinSet::new();
        let mut open = std::collections::HashSet::new();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => self.dispatch(event, &mut open, &mut running),
                    None => break,
                },
                Some(_) = running.join_next(), if !running.is_empty() => {}
                () = &mut stop => break,
            }
        }
        while let Ok(event) = events.try_recv() {
            self.dispatch(event, &mut open, &mut running);
        }
        for job_id in std::mem::take(&mut open) {
            let ending = match self.api.job_status(&job_id).await.and_then(|s| s.status) {
                Some(job_status::Status::Successful(_)) => Ending::Completed,
                Some(job_status::Status::Failed(_)) => Ending::Failed,
                _ => continue,
            };
            let event = JobEvent::Ended {
                job_id,
                ending,
                queued_at: 0,
                at: bjh_format::now_millis(),
            };
            self.dispatch(event, &mut open, &mut running);
        }
        while running.join_next().await.is_some() {}
    }

    pub fn dispatch(
        &self,
        event: JobEvent,
        open: &mut std::collections::HashSet<String>,
        running: &mut JoinSet<()>,
    ) {
        match &event {
            JobEvent::Submitted { job_id, .. } => {
                open.insert(job_id.clone());
            }
            JobEvent::Ended { job_id, .. } => {
                open.remove(job_id);
            }
        }
        let this = self.clone();
        running.spawn(async move { this.handle(event).await });
    }

    pub async fn handle(&self, event: JobEvent) {
        match event {
            JobEvent::Submitted {
                job_id,
                queued_at,
                submitted_at,
            } => {
                let (start, secrets) = self.job_start(&job_id, queued_at, submitted_at).await;
                if !secrets.is_empty() {
                    // Before the start, so every task line is scrubbed.
                    self.writer.send(WriterMsg::Secrets {
                        job_id: job_id.clone(),
                        values: secrets,
                    });
                }
                self.writer.send(WriterMsg::Start(start));
            }
            JobEvent::Ended {
                job_id,
                ending,
                queued_at,
                at,
            } => {
                let msg = self.job_end(&job_id, ending, queued_at, at).await;
                self.writer.send(msg);
            }
        }
    }

    /// The job's `JobStart`, and the values of its secret settings.
    pub async fn job_start(
        &self,
        job_id: &str,
        queued_at: u64,
        submitted_at: u64,
    ) -> (JobStart, Vec<String>) {
        let answer = self.api.get(&job_path(job_id, "")).await;
        let secrets = self.secrets(job_id).await;
        let answer_text = answer.text().map(|t| self.redactor.scrub(t, &secrets));
        let mut start = JobStart {
            job_id: job_id.to_string(),
            queued_at,
            submitted_at,
            scheduler_id: Some(self.api.scheduler_id().to_string()),
            ..Default::default()
        };
        if answer.status == StatusCode::OK
            && let Some(text) = answer_text
            && let Ok(plans) = serde_json::from_str::<JobPlans>(&text)
        {
            start.job_name = plans.job_name;
            start.logical_plan = plans.logical_plan;
            start.physical_plan = plans.physical_plan;
        }
        start.executors = self.executors().await;
        (start, secrets)
    }

    /// The executors the scheduler has registered now, with their task
    /// slots (its `GET /api/executors`, in process); `None` when it does
    /// not answer with a list.
    async fn executors(&self) -> Option<Vec<ExecutorSlots>> {
        #[derive(Deserialize)]
        struct Listed {
            id: String,
            #[serde(default)]
            specification: Spec,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            #[serde(default)]
            vcores: u32,
        }
        let answer = self.api.get("/api/executors").await;
        if answer.status != StatusCode::OK {
            return None;
        }
        let listed: Vec<Listed> = serde_json::from_slice(&answer.body).ok()?;
        let slots = |e: Listed| ExecutorSlots {
            id: e.id,
            slots: e.specification.vcores.max(1),
        };
        Some(listed.into_iter().map(slots).collect())
    }

    /// Waits for the terminal status, then renders every response.
    pub async fn job_end(
        &self,
        job_id: &str,
        ending: Ending,
        queued_at: u64,
        at: u64,
    ) -> WriterMsg {
        let status = self.await_terminal(job_id).await;
        let failure = status.as_ref().and_then(|s| match &s.status {
            Some(job_status::Status::Failed(f)) => Some(f.error.clone()),
            _ => None,
        });
        let secrets = self.secrets(job_id).await;
        let end_status = match ending {
            Ending::Completed => JobEndStatus::Succeeded,
            Ending::Cancelled => JobEndStatus::Cancelled,
            // A failure message can quote a secret (a connector echoing a
            // credential, an object-store URL with a key).
            Ending::Failed => {
                JobEndStatus::Failed(self.redactor.scrub(&failure.unwrap_or_default(), &secrets))
            }
        };
        let mut responses = Responses::default();
        let (job_bytes, index) = self
            .render_job(job_id, status.as_ref(), &secrets, &mut responses)
            .await;
        let stages_text = self.render_stages(job_id, &secrets, &mut responses).await;
        let stage_records = stage_records(&stages_text);
        self.render_stage_dots(job_id, &stage_records, &secrets, &mut responses)
            .await;
        let (dot_text, config_text) = self
            .render_dot_and_config(job_id, &secrets, &mut responses)
            .await;
        let fallback_start = self.fallback_start(job_id, &job_bytes, &index, queued_at);
        let end = JobEnd {
            status: end_status,
            queued_at,
            started_at: index.start_time,
            completed_at: if index.end_time > 0 {
                index.end_time
            } else {
                at
            },
            index,
            job: raw_or_null(&job_bytes),
            stages: raw_or_null(&stages_text),
            config: raw_or_null(&config_text),
            dot: dot_text,
            dropped_records: 0,
            responses,
        };
        WriterMsg::End {
            job_id: job_id.to_string(),
            fallback_start,
            stages: stage_records,
            end: Box::new(end),
            secrets,
        }
    }

    /// A response's text with the job's secrets scrubbed.
    pub fn clean(&self, answer: &HttpAnswer, secrets: &[String]) -> Option<String> {
        answer.text().map(|t| self.redactor.scrub(t, secrets))
    }

    /// `/api/job/{id}` and its `?plan_format=` variants, with the job's list
    /// facts. A job that failed during planning has no execution graph (the
    /// scheduler answers 404 but still lists it): its list entry stands in.
    pub async fn render_job(
        &self,
        job_id: &str,
        status: Option<&ballista_core::serde::protobuf::JobStatus>,
        secrets: &[String],
        responses: &mut Responses,
    ) -> (String, JobIndex) {
        let job = self.api.get(&job_path(job_id, "")).await;
        if job.status == StatusCode::OK {
            let text = self
                .clean(&job, secrets)
                .unwrap_or_else(|| "{}".to_string());
            let index = serde_json::from_str::<JobIndex>(&text).unwrap_or_default();
            responses.job = self
                .variants(job_id, "", &text, "physical_plan", secrets)
                .await;
            return (text, index);
        }
        let entry = self.list_entry(job_id).await;
        let index = entry
            .as_deref()
            .and_then(|e| serde_json::from_str::<JobIndex>(e).ok())
            .unwrap_or_else(|| fallback_index(job_id, status));
        let text = entry
            .map(|e| self.redactor.scrub(&e, secrets))
            .unwrap_or_else(|| serde_json::to_string(&index).unwrap_or_default());
        (text, index)
    }

    /// The `?plan_format=` variants of `/api/job/{id}{rest}`, each stored
    /// against the default response `text` (its plan strings under `key`
    /// spliced in where that is all that differs).
    pub async fn variants(
        &self,
        job_id: &str,
        rest: &str,
        text: &str,
        key: &str,
        secrets: &[String],
    ) -> std::collections::BTreeMap<String, Variant> {
        let mut variants = std::collections::BTreeMap::new();
        for format in PLAN_FORMATS {
            let path = job_path(job_id, &format!("{rest}?plan_format={format}"));
            let variant = self.api.get(&path).await;
            if let Some(v) = self.clean(&variant, secrets) {
                variants.insert(format.to_string(), Variant::diff(text, &v, key));
            }
        }
        variants
    }

    /// `/api/job/{id}/stages` and its `?plan_format=` variants.
    pub async fn render_stages(
        &self,
        job_id: &str,
        secrets: &[String],
        responses: &mut Responses,
    ) -> String {
        let stages = self.api.get(&job_path(job_id, "/stages")).await;
        match self.clean(&stages, secrets) {
            Some(text) if stages.status == StatusCode::OK => {
                responses.stages = self
                    .variants(job_id, "/stages", &text, "stage_plan", secrets)
                    .await;
                text
            }
            _ => {
                responses.missing.push("stages".into());
                r#"{"stages":[]}"#.to_string()
            }
        }
    }

    /// Each stage's `/api/job/{id}/stage/{n}/dot`.
    pub async fn render_stage_dots(
        &self,
        job_id: &str,
        stages: &[(StageStart, StageEnd)],
        secrets: &[String],
        responses: &mut Responses,
    ) {
        for (stage, _) in stages {
            let dot = self
                .api
                .get(&job_path(job_id, &format!("/stage/{}/dot", stage.stage_id)))
                .await;
            if let (StatusCode::OK, Some(text)) = (dot.status, self.clean(&dot, secrets)) {
                responses
                    .stage_dots
                    .insert(stage.stage_id.to_string(), text);
            }
        }
    }

    /// `/api/job/{id}/dot` and `/api/job/{id}/config` (redacted).
    pub async fn render_dot_and_config(
        &self,
        job_id: &str,
        secrets: &[String],
        responses: &mut Responses,
    ) -> (String, String) {
        let dot = self.api.get(&job_path(job_id, "/dot")).await;
        let dot_text = ok_text(&dot)
            .map(|t| self.redactor.scrub(&t, secrets))
            .unwrap_or_else(|| {
                responses.missing.push("dot".into());
                String::new()
            });
        let config = self.api.get(&job_path(job_id, "/config")).await;
        let config_text = match ok_text(&config) {
            Some(text) => self.redactor.redact_config(&text),
            None => {
                responses.missing.push("config".into());
                "{}".to_string()
            }
        };
        (dot_text, config_text)
    }

    /// The `JobStart` written for a job whose start was never recorded (the
    /// writer uses it only then).
    pub fn fallback_start(
        &self,
        job_id: &str,
        job_bytes: &str,
        index: &JobIndex,
        queued_at: u64,
    ) -> JobStart {
        let plans = serde_json::from_str::<JobPlans>(job_bytes).unwrap_or_default();
        JobStart {
            job_id: job_id.to_string(),
            job_name: index.job_name.clone(),
            queued_at,
            submitted_at: index.start_time,
            scheduler_id: Some(self.api.scheduler_id().to_string()),
            logical_plan: plans.logical_plan,
            physical_plan: plans.physical_plan,
            executors: None,
        }
    }

    pub async fn await_terminal(
        &self,
        job_id: &str,
    ) -> Option<ballista_core::serde::protobuf::JobStatus> {
        let deadline = tokio::time::Instant::now() + TERMINAL_WAIT;
        // 2 ms, doubling up to 100 ms (`backon`'s exponential schedule).
        let mut pauses = backon::BackoffBuilder::build(
            backon::ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(2))
                .with_max_delay(Duration::from_millis(100))
                .without_max_times(),
        );
        loop {
            let status = self.api.job_status(job_id).await;
            match &status {
                Some(s) if is_terminal(s) => return status,
                None => return None,
                Some(_) if tokio::time::Instant::now() >= deadline => {
                    log::warn!(
                        "event log: job {job_id} ended but the scheduler still shows it \
                         running after {TERMINAL_WAIT:?}; recording it as it is"
                    );
                    return status;
                }
                Some(_) => {
                    let pause = pauses.next().unwrap_or(Duration::from_millis(100));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// The secret values in the job's session config.
    pub async fn secrets(&self, job_id: &str) -> Vec<String> {
        let config = self.api.get(&job_path(job_id, "/config")).await;
        match ok_text(&config) {
            Some(text) => self.redactor.secrets_in(&text),
            None => Vec::new(),
        }
    }

    /// The job's entry in the scheduler's job list, verbatim.
    pub async fn list_entry(&self, job_id: &str) -> Option<String> {
        let list = self.api.get("/api/jobs").await;
        let entries: Vec<&serde_json::value::RawValue> = serde_json::from_slice(&list.body).ok()?;
        entries.into_iter().find_map(|entry| {
            #[derive(Deserialize)]
            struct Id<'a> {
                #[serde(borrow)]
                job_id: std::borrow::Cow<'a, str>,
            }
            let id: Id = serde_json::from_str(entry.get()).ok()?;
            (id.job_id == job_id).then(|| entry.get().to_string())
        })
    }
}

/// The plan fields of a `GET /api/job/{id}` response.
#[derive(Debug, Default, Deserialize)]
pub struct JobPlans {
    #[serde(default)]
    job_name: String,
    #[serde(default)]
    logical_plan: Option<String>,
    #[serde(default)]
    physical_plan: Option<String>,
}

pub fn ok_text(answer: &HttpAnswer) -> Option<String> {
    (answer.status == StatusCode::OK)
        .then(|| answer.text().map(str::to_string))
        .flatten()
}

/// A summary for a job the scheduler no longer lists.
pub fn fallback_index(
    job_id: &str,
    status: Option<&ballista_core::serde::protobuf::JobStatus>,
) -> JobIndex {
    let (word, text, start, end) = match status.and_then(|s| s.status.as_ref()) {
        Some(job_status::Status::Failed(f)) => (
            "Failed",
            format!("Failed: {}", f.error),
            f.started_at,
            f.ended_at,
        ),
        Some(job_status::Status::Successful(s)) => (
            "Completed",
            "Completed".to_string(),
            s.started_at,
            s.ended_at,
        ),
        _ => ("Failed", "Failed".to_string(), 0, 0),
    };
    JobIndex {
        job_id: job_id.to_string(),
        job_name: status.map(|s| s.job_name.clone()).unwrap_or_default(),
        status: word.to_string(),
        job_status: text,
        start_time: start,
        end_time: end,
        ..Default::default()
    }
}

/// Stage records derived from the final `/stages` response: the scheduler
/// exposes no public stage-transition hook, so each stage's start is its
/// first task launch and its end its last task finish.
pub fn stage_records(stages_json: &str) -> Vec<(StageStart, StageEnd)> {
    let answer = StagesAnswer::parse(stages_json.as_bytes());
    let stage = |stage: StageAnswer| {
        let partitions = stage.tasks.iter().map(|t| t.partition_id.len() as u32);
        let start = StageStart {
            stage_id: stage.stage_id,
            partitions: partitions.sum(),
            start_time: stage.began(),
        };
        let end_time = stage.ended();
        let status = stage.stage_status;
        let stage_id = stage.stage_id;
        (
            start,
            StageEnd {
                stage_id,
                status,
                end_time,
            },
        )
    };
    answer.stages.into_iter().map(stage).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_job_ids_are_percent_encoded_in_paths() {
        assert_eq!(job_path("abc-1", "/dot"), "/api/job/abc-1/dot");
        assert_eq!(job_path("a/b c", ""), "/api/job/a%2Fb%20c");
    }

    #[test]
    fn stage_records_come_from_the_final_stage_summaries() {
        let json = r#"{"stages":[{"stage_id":"1","stage_status":"Successful","input_rows":1,
            "output_rows":1,"elapsed_compute":null,"tasks":[
            {"id":0,"status":"Successful","partition_id":[0,1],"scheduled_time":1,"launch_time":5,
             "start_exec_time":6,"end_exec_time":7,"exec_duration":1,"finish_time":9,"input_rows":1,"output_rows":1},
            {"id":1,"status":"Successful","partition_id":[2],"scheduled_time":1,"launch_time":4,
             "start_exec_time":6,"end_exec_time":7,"exec_duration":1,"finish_time":12,"input_rows":1,"output_rows":1}]}]}"#;
        let records = stage_records(json);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].0.partitions, 3);
        assert_eq!(records[0].0.start_time, 4);
        assert_eq!(records[0].1.end_time, 12);
        assert_eq!(records[0].1.status, "Successful");
    }
}
