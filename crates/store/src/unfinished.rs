//! Jobs known only from a `.running` log: what its lines so far say, read
//! incrementally as the file grows, and whether the job is still running
//! or abandoned.

use super::*;
use crate::records::{Parsed, Rec};

/// What the index keeps per unfinished job (a `.running` log): its
/// `JobStart` fields and a running count of its progress records, read
/// incrementally as the file grows.
#[derive(Debug, Clone, Default)]
pub struct Unfinished {
    /// The job.
    pub job_id: Arc<str>,
    /// Its name, from `JobStart`.
    pub job_name: Arc<str>,
    /// When it was queued.
    pub queued_at: u64,
    /// When it was submitted (planning done).
    pub submitted_at: u64,
    /// The query hash of its logical plan (0 when unknown).
    pub query_hash: u64,
    /// The scheduler running it, from `JobStart`.
    pub scheduler_id: Option<Arc<str>>,
    /// Task attempts recorded so far.
    pub tasks: u64,
    /// Of which failed.
    pub failed_tasks: u64,
    /// Stages seen in task records.
    pub stages: std::collections::BTreeSet<u32>,
    /// The log's file name within the directory.
    pub file_name: Arc<str>,
    /// Bytes of complete lines read so far.
    pub(super) scanned: u64,
    /// The log's size and modification time when it was read.
    pub stamp: Stamp,
}

impl Unfinished {
    /// `Running` while the log was written to within `abandoned_after`,
    /// `Abandoned` after that.
    pub(crate) fn state(&self, now: SystemTime, abandoned_after: Duration) -> JobState {
        match self.stamp.modified {
            _ if abandoned_after.is_zero() => JobState::Abandoned,
            Some(modified) if modified + abandoned_after < now => JobState::Abandoned,
            _ => JobState::Running,
        }
    }

    /// Filter and sort facts.
    pub fn facts(&self, state: JobState) -> Facts {
        Facts {
            job_id: self.job_id.clone(),
            job_name: self.job_name.clone(),
            state,
            queued_time: self.queued_at,
            start_time: if self.submitted_at > 0 {
                self.submitted_at
            } else {
                self.queued_at
            },
            end_time: 0,
            query_hash: self.query_hash,
        }
    }

    /// Filter and sort facts with the scheduler.
    pub(crate) fn tagged(&self, state: JobState) -> crate::query::Tagged {
        crate::query::Tagged {
            facts: self.facts(state),
            scheduler_id: self.scheduler_id.clone(),
        }
    }

    /// The long status text of the list entry and `GET /api/job/{id}`.
    pub(crate) fn job_status(&self, state: JobState) -> String {
        let progress = format!(
            "{} task attempts recorded ({} failed) in {} stages",
            self.tasks,
            self.failed_tasks,
            self.stages.len()
        );
        match state {
            JobState::Abandoned => {
                let since = self
                    .stamp
                    .modified
                    .map(|m| chrono::DateTime::<chrono::Utc>::from(m).to_rfc3339())
                    .unwrap_or_else(|| "an unknown time".into());
                format!(
                    "Abandoned: its event log was last written at {since} and never \
                     completed (the scheduler running it stopped); {progress}"
                )
            }
            _ => format!("Running (from its event log): {progress}"),
        }
    }

    /// The job's `GET /api/jobs` entry; with `plans`, its `GET /api/job/{id}`.
    pub fn response(&self, state: JobState, plans: Option<&JobStart>) -> Bytes {
        let facts = self.facts(state);
        let entry = JobResponse {
            job_id: self.job_id.to_string(),
            job_name: self.job_name.to_string(),
            job_status: self.job_status(state),
            status: state.status_word().to_string(),
            num_stages: self.stages.len(),
            completed_stages: 0,
            percent_complete: 0,
            start_time: facts.start_time,
            end_time: 0,
            logical_plan: plans.and_then(|p| p.logical_plan.clone()),
            physical_plan: plans.and_then(|p| p.physical_plan.clone()),
            stage_plan: None,
        };
        /// The scheduler's answer, and ours: the scheduler running it and
        /// the query's label.
        #[derive(serde::Serialize)]
        struct Entry<'a> {
            #[serde(flatten)]
            entry: JobResponse,
            scheduler_id: Option<&'a str>,
            query_label: Option<&'a str>,
            /// Known once the job's log is complete.
            busy_slot_ms: Option<u64>,
            failed_slot_ms: Option<u64>,
        }
        let label = crate::labels::get(self.query_hash);
        let entry = Entry {
            entry,
            scheduler_id: self.scheduler_id.as_deref(),
            query_label: label.as_deref(),
            busy_slot_ms: None,
            failed_slot_ms: None,
        };
        serde_json::to_vec(&entry).unwrap_or_default().into()
    }
}

/// Reads the new complete lines of a `.running` log, continuing from
/// `known` when the file only grew.
pub(super) fn scan_running(
    path: &LogRef,
    stem: &str,
    file_name: &str,
    stamp: Stamp,
    zstd: bool,
    known: Option<&Unfinished>,
) -> Result<Unfinished, StoreError> {
    // A plain log that only grew is read from where the last pass stopped;
    // a compressed one is decoded from the start.
    let mut state = match known {
        Some(k) if !zstd && stamp.len >= k.scanned => k.clone(),
        _ => Unfinished {
            job_id: Arc::from(stem),
            file_name: Arc::from(file_name),
            ..Default::default()
        },
    };
    let (mut file, _) = path.open()?;
    let mut reader: Box<dyn BufRead> = if zstd {
        Box::new(BufReader::new(Tolerant::new(
            zstd::stream::read::Decoder::new(file.take(stamp.len))?,
        )))
    } else {
        file.seek(SeekFrom::Start(state.scanned))?;
        Box::new(BufReader::new(file.take(stamp.len - state.scanned)))
    };
    let mut line = Vec::new();
    while let Some((found, n)) = read_line(&mut reader, &mut line, MAX_LINE)? {
        match found {
            Line::Ended => {}
            // A line still being written: read again once it is whole.
            Line::Unended => break,
            // An overlong line is skipped; one still being written is
            // skipped as far as it goes.
            Line::Overlong { ended } => {
                state.scanned += n;
                if ended {
                    continue;
                }
                break;
            }
        }
        let first = state.scanned == 0;
        state.scanned += n;
        // The same reading of a line as every other pass: a record of a
        // newer schema is skipped, but for the `JobStart` that opens the
        // log (without it there is no job to list).
        match crate::records::parse_line(&line) {
            Parsed::Record(Rec::Start(start)) => {
                state.job_name = Arc::from(start.job_name);
                state.scheduler_id = start
                    .scheduler_id
                    .as_deref()
                    .filter(|s| !s.is_empty())
                    .map(crate::summary::intern);
                state.queued_at = start.queued_at;
                state.submitted_at = start.submitted_at;
                state.query_hash = start
                    .logical_plan
                    .as_deref()
                    .and_then(bjh_format::query_hash::query_hash)
                    .unwrap_or(0);
                if let Some(plan) = start.logical_plan.as_deref()
                    && !crate::labels::known(state.query_hash)
                {
                    let label = bjh_format::label::query_label(plan);
                    crate::labels::remember(state.query_hash, label.as_deref());
                }
            }
            Parsed::Record(Rec::Task(task)) => {
                state.tasks += 1;
                if matches!(task.status, bjh_format::record::TaskOutcome::Failed { .. }) {
                    state.failed_tasks += 1;
                }
                state.stages.insert(task.stage_id);
            }
            Parsed::Newer(found) if first => return Err(StoreError::NewerSchema { found }),
            _ if first => {
                return Err(StoreError::Malformed(
                    "the first line of a .running log is not a JobStart record".into(),
                ));
            }
            _ => {}
        }
    }
    state.stamp = stamp;
    Ok(state)
}
