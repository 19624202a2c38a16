//! One job's records, read from its log: the stream every per-job analysis
//! (the timeline, the diagnosis, a comparison) reads, and the job's tasks
//! gathered into a compact table.
//!
//! **Invariant:** the log is streamed line by line and the reader stops at
//! the terminal record; lines that do not parse (a torn last line of a
//! `.running` log, a record from a newer schema) are skipped, never fatal.
//! [`parse_line`] is the one reading of a line, shared with the
//! incremental reader of `.running` logs.

use crate::{Line, LogRef, MAX_LINE, StoreError, read_line};
use bjh_format::JobState;
use bjh_format::record::{
    Envelope, JobStart, SCHEMA_VERSION, StageEnd, StageStart, TaskEnd, TaskOutcome, kind,
};
use bjh_format::stages::TaskTimes;
use std::collections::BTreeMap;
use std::io::BufRead;

/// What the index knows about a job whose log is read.
#[derive(Debug, Clone)]
pub struct JobHeader {
    /// The job.
    pub job_id: String,
    /// Its state.
    pub state: JobState,
    /// Start (epoch millis; 0 unknown).
    pub start_time: u64,
    /// End (epoch millis; 0 while unfinished).
    pub end_time: u64,
    /// Progress records dropped under backpressure (`None` while
    /// unfinished: the count is written with the terminal record).
    pub dropped_records: Option<u64>,
    /// The query hash (0 unknown).
    pub query_hash: u64,
}

/// One progress record of a log.
#[derive(Debug)]
pub enum Rec {
    Start(JobStart),
    StageStart(StageStart),
    StageEnd(StageEnd),
    Task(TaskEnd),
}

/// How every writer starts a schema-v1 task record's line.
const TASK_END_PREFIX: &[u8] = br#"{"ev":"TaskEnd","version":1,"data":"#;

/// Streams the progress records of the log at `path`, stopping at the
/// terminal record.
pub fn scan(path: &LogRef, mut visit: impl FnMut(Rec)) -> Result<(), StoreError> {
    let mut reader = crate::open_decoded(path)?;
    let mut line = Vec::new();
    loop {
        let head = reader.fill_buf()?;
        if head.is_empty() {
            return Ok(());
        }
        if head.starts_with(br#"{"ev":"JobEnd""#) || head.starts_with(br#"{"ev":"Footer""#) {
            return Ok(());
        }
        match read_line(&mut reader, &mut line, MAX_LINE)? {
            None => return Ok(()),
            Some((Line::Overlong { .. }, _)) => continue,
            Some(_) => {}
        }
        // Task records are nearly every line of a big log, and writers
        // (ours and upstream's) start them all alike: their data is parsed
        // in place, without parsing the envelope first.
        if let Some(data) = line
            .strip_prefix(TASK_END_PREFIX)
            .and_then(|rest| rest.strip_suffix(b"}"))
        {
            if let Ok(task) = serde_json::from_slice(data) {
                visit(Rec::Task(task));
            }
            continue;
        }
        match parse_line(&line) {
            Parsed::Record(rec) => visit(rec),
            Parsed::End => return Ok(()),
            Parsed::Newer(_) | Parsed::Other => {}
        }
    }
}

/// One line of a log as every pass over its progress records reads it.
#[derive(Debug)]
pub enum Parsed {
    /// A progress record of this schema.
    Record(Rec),
    /// The terminal record.
    End,
    /// A record of a newer schema (its version): a pass skips it, unless
    /// it is the line the pass cannot do without (a `.running` log's
    /// `JobStart`).
    Newer(u32),
    /// Not a record this reader knows (another kind, damage, a torn line).
    Other,
}

/// Reads one line: the one place that decides what a line of a log is,
/// for [`scan`] and for the incremental reader of `.running` logs alike.
pub fn parse_line(line: &[u8]) -> Parsed {
    let Ok(env) = serde_json::from_slice::<Envelope>(line) else {
        return Parsed::Other;
    };
    if env.version > SCHEMA_VERSION {
        return Parsed::Newer(env.version);
    }
    let data = env.data.get();
    let rec = match env.ev.as_str() {
        kind::JOB_START => serde_json::from_str(data).ok().map(Rec::Start),
        kind::STAGE_START => serde_json::from_str(data).ok().map(Rec::StageStart),
        kind::STAGE_END => serde_json::from_str(data).ok().map(Rec::StageEnd),
        kind::TASK_END => serde_json::from_str(data).ok().map(Rec::Task),
        kind::JOB_END => return Parsed::End,
        _ => None,
    };
    rec.map_or(Parsed::Other, Parsed::Record)
}

/// One task attempt, compact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Stage.
    pub stage_id: u32,
    /// Stage attempt.
    pub stage_attempt: u32,
    /// Task id within the stage.
    pub task_id: u32,
    /// Index into [`JobRecords::executors`].
    pub executor: u32,
    /// `Some((reason, error))` when the attempt failed.
    pub failure: Option<(String, String)>,
    /// Launched by the scheduler (epoch millis; 0 unknown).
    pub launch_time: u64,
    /// Started on the executor.
    pub start_exec_time: u64,
    /// Finished on the executor.
    pub end_exec_time: u64,
    /// Rows read.
    pub input_rows: u64,
    /// Rows written.
    pub output_rows: u64,
    /// Compute time (nanoseconds).
    pub compute_nanos: u64,
}

impl TaskTimes for Task {
    fn times(&self) -> (u64, u64, u64) {
        (self.launch_time, self.start_exec_time, self.end_exec_time)
    }
}

impl Task {
    /// When the attempt began ([`TaskTimes::began`]: executor start, else
    /// launch, else its end).
    pub fn begin(&self) -> u64 {
        self.began()
    }

    /// How long it ran on the executor (ms).
    pub fn duration(&self) -> u64 {
        self.end_exec_time.saturating_sub(self.begin())
    }

    /// Whether the attempt succeeded.
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }
}

/// What a stage's own records say (ours; upstream's writer has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageMarks {
    /// Input partitions.
    pub partitions: Option<u32>,
    /// First task launch (epoch millis; 0 unknown).
    pub start_time: u64,
    /// Last task end.
    pub end_time: u64,
    /// Terminal status, when recorded.
    pub status: Option<String>,
}

/// A job's records, gathered.
#[derive(Debug, Clone, Default)]
pub struct JobRecords {
    /// The `JobStart` record (default when the log has none).
    pub start: JobStart,
    /// Stage records by stage id.
    pub stages: BTreeMap<u32, StageMarks>,
    /// Every task attempt, in the order they finished.
    pub tasks: Vec<Task>,
    /// Executor ids, as [`Task::executor`] indexes them.
    pub executors: Vec<String>,
}

impl JobRecords {
    /// The job's slot time (`format::usage`), each attempt's slots from
    /// `slots` (`format::stages::task_slots` of its stored `/stages`).
    pub fn usage(
        &self,
        slots: &std::collections::BTreeMap<(u32, u32), u32>,
    ) -> bjh_format::usage::SlotUsage {
        let attempts = self
            .tasks
            .iter()
            .map(|t| (t, t.stage_id, t.task_id, !t.succeeded()));
        bjh_format::usage::SlotUsage::of(attempts, slots)
    }

    /// Reads the records of the log at `path`.
    pub fn read(log: impl Into<LogRef>) -> Result<Self, StoreError> {
        let path: &LogRef = &log.into();
        let mut out = Gathering::default();
        scan(path, |rec| out.add(rec))?;
        Ok(out.records)
    }

    /// The records a writer kept of a log it completed (the same as
    /// [`JobRecords::read`] of that log gives, without reading it).
    pub fn of_written(
        start: JobStart,
        stages: Vec<(StageStart, StageEnd)>,
        tasks: Vec<Vec<TaskEnd>>,
    ) -> Self {
        let mut out = Gathering::default();
        out.add(Rec::Start(start));
        out.records.tasks.reserve(tasks.iter().map(Vec::len).sum());
        for task in tasks.into_iter().flatten() {
            out.add(Rec::Task(task));
        }
        for (start, end) in stages {
            out.add(Rec::StageStart(start));
            out.add(Rec::StageEnd(end));
        }
        out.records
    }
}

/// Records gathered one by one, with the executors seen so far.
#[derive(Default)]
struct Gathering {
    records: JobRecords,
    executors: std::collections::HashMap<String, u32>,
}

impl Gathering {
    fn add(&mut self, rec: Rec) {
        let out = &mut self.records;
        match rec {
            Rec::Start(s) => out.start = s,
            Rec::StageStart(s) => {
                let m = out.stages.entry(s.stage_id).or_default();
                m.partitions = Some(s.partitions);
                m.start_time = s.start_time;
            }
            Rec::StageEnd(s) => {
                let m = out.stages.entry(s.stage_id).or_default();
                m.status = Some(s.status);
                m.end_time = s.end_time;
            }
            Rec::Task(t) => {
                let next = self.executors.len() as u32;
                let executor = *self
                    .executors
                    .entry(t.executor_id)
                    .or_insert_with_key(|id| {
                        out.executors.push(id.clone());
                        next
                    });
                out.tasks.push(Task {
                    stage_id: t.stage_id,
                    stage_attempt: t.stage_attempt,
                    task_id: t.task_id,
                    executor,
                    failure: match t.status {
                        TaskOutcome::Failed { reason, error } => Some((reason, error)),
                        _ => None,
                    },
                    launch_time: t.launch_time,
                    start_exec_time: t.start_exec_time,
                    end_exec_time: t.end_exec_time,
                    input_rows: t.metrics.input_rows,
                    output_rows: t.metrics.output_rows,
                    compute_nanos: t.metrics.elapsed_compute_nanos,
                });
            }
        }
    }
}
