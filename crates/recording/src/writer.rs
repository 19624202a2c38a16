//! The background writer: one thread that writes every log file (the
//! cleaner deletes, the uploader removes uploaded spool files, the store
//! reads; none of them writes a log), fed by one channel.
//!
//! Per job it appends JSON lines to `DIR/<job_id>.eventlog.running`. At the
//! terminal record it writes `JobEnd` and a `Footer`, flushes, fsyncs the
//! file, renames it to `DIR/<job_id>.eventlog` and fsyncs the directory.
//!
//! **Invariant:** nothing here is ever awaited by the scheduler. Senders use
//! [`WriterHandle::try_progress`], which never blocks: progress records beyond
//! the queue's capacity are dropped and counted; terminal records are never
//! dropped (they bypass the capacity check, and there is one per job).
//!
//! **Invariant:** the channel is FIFO, so every progress record accepted
//! before a job's `JobEnd` was handed over is written before it.
//!
//! **Invariant:** the writer never truncates, appends to or replaces a
//! log it did not create: a new log is created exclusively (never through
//! a link), and renamed to its completed name only where no file has that
//! name. A log of the same job id found there (another scheduler minted
//! the same id) stays, and this one is written as `<job_id>!<tag>`.
//!
//! **Invariant:** at most [`WriterConfig::max_open_files`] files are open at
//! once; a job whose file was closed to make room is reopened in append mode.
//!
//! A failing directory (missing, read-only, full) costs the affected jobs
//! their logs, never the scheduler its progress: errors are counted, logged
//! once per burst, and the next job tries again.

use crate::naming;
use crate::redact::scrub;
use crate::sink::{Sink, scrubbed};
use crate::usage::{MAX_SPANS, Span, Spans, slot_usage, usage_tags};
use bjh_format::footer::footer_frame;
use bjh_format::name::{
    COMPLETED_SUFFIX, RUNNING_SUFFIX, ZST_COMPLETED_SUFFIX, ZST_RUNNING_SUFFIX,
};
use bjh_format::record::{self, Footer, JobEnd, JobStart, TaskEnd, WrittenJob, kind};
use bjh_metrics::HistoryMetrics;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How logs are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Plain JSON lines (upstream's reader reads them).
    #[default]
    None,
    /// zstd frames at this level: progress records in one frame per open
    /// period, the terminal record in one frame per payload (each
    /// decompresses alone), the footer in a skippable frame at the end.
    Zstd(i32),
}

/// The zstd level used unless configured otherwise.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// How the writer behaves.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// The log directory.
    pub dir: PathBuf,
    /// Progress messages that may wait in the queue before new ones are
    /// dropped. Zero keeps no progress records at all (job start and end
    /// only).
    pub queue_capacity: usize,
    /// Files kept open at once.
    pub max_open_files: usize,
    /// How often buffered progress is flushed to the file.
    pub flush_interval: Duration,
    /// Plain or zstd.
    pub compression: Compression,
    /// Told the path of each log once it is complete and durable: the
    /// store takes it in at once (a local directory), or the uploader puts
    /// it (an object store).
    pub completed: Option<tokio::sync::mpsc::UnboundedSender<PathBuf>>,
    /// Given the records of each job whose log completed, when it wants
    /// them, so that it need not read the log again.
    pub written: Option<Arc<dyn WrittenJobs>>,
    /// The session-config keys whose values each footer states as the
    /// job's usage tags (`--usage-tags`; never a redacted key: the flag
    /// refuses them).
    pub usage_tags: Vec<String>,
}

pub use bjh_format::written::WrittenJobs;

/// The task records kept of one job at most; the records of a job with
/// more are let go (its log is read instead).
const MAX_KEPT_TASKS: usize = 1_000_000;

impl WriterConfig {
    /// Defaults for `dir`: 65,536 queued messages, 256 open files, flushed
    /// every 500 ms.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            queue_capacity: 65_536,
            max_open_files: 256,
            flush_interval: Duration::from_millis(500),
            compression: Compression::None,
            completed: None,
            written: None,
            usage_tags: Vec::new(),
        }
    }
}

/// A message for the writer thread.
#[derive(Debug)]
pub enum WriterMsg {
    /// The job's `JobStart`. Records that arrive before it are held back, so
    /// it is always the first line.
    Start(JobStart),
    /// The values of the job's secret session settings, scrubbed from
    /// every task line written for it. Sent before `Start`, so every task
    /// line (held until `Start`) is scrubbed.
    Secrets {
        /// The job.
        job_id: String,
        /// The values.
        values: Vec<String>,
    },
    /// Finished tasks of one job.
    Tasks {
        /// The job.
        job_id: String,
        /// Its finished tasks.
        tasks: Vec<TaskEnd>,
    },
    /// The job's terminal record, with its stage records. Closes the log.
    End {
        /// The job.
        job_id: String,
        /// A `JobStart` to write first if none was written (a job that failed
        /// during planning never had one).
        fallback_start: JobStart,
        /// Stage records, written before `JobEnd`.
        stages: Vec<(record::StageStart, record::StageEnd)>,
        /// The terminal record.
        end: Box<JobEnd>,
        /// The values of the job's secret settings, as the capturer read
        /// them at the end: scrubbed from task lines still held when `End`
        /// comes before `Start` and `Secrets` (the two are sent from
        /// concurrent tasks, and a job that ends at once can win the race).
        secrets: Vec<String>,
    },
    /// Flush and acknowledge: everything sent before it is then on disk.
    Flush(mpsc::SyncSender<()>),
    /// Flush and stop. Logs of unfinished jobs stay `.running`.
    Shutdown,
}

impl WriterMsg {
    fn is_progress(&self) -> bool {
        matches!(self, WriterMsg::Tasks { .. })
    }
}

/// The sending side, cheap to clone. Never blocks.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<WriterMsg>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    metrics: Arc<HistoryMetrics>,
    drops: Arc<parking_lot::Mutex<HashMap<String, u64>>>,
    open: Arc<parking_lot::Mutex<HashSet<String>>>,
}

impl WriterHandle {
    /// Whether the writer holds `job_id`'s log open (the job has not ended).
    pub fn is_open(&self, job_id: &str) -> bool {
        self.open.lock().contains(job_id)
    }

    /// Hands over a progress message, or drops and counts it when the queue
    /// is full. Returns whether it was accepted.
    pub fn try_progress(&self, msg: WriterMsg) -> bool {
        let job_id = match &msg {
            WriterMsg::Tasks { job_id, .. } => job_id.clone(),
            _ => return self.send(msg),
        };
        let records = match &msg {
            WriterMsg::Tasks { tasks, .. } => tasks.len() as u64,
            _ => 1,
        };
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.count_drop(&job_id, records);
            return false;
        }
        if self.tx.send(msg).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Hands over a control message (start, end, flush). These bypass the
    /// capacity limit: there are at most two per job.
    pub fn send(&self, msg: WriterMsg) -> bool {
        self.tx.send(msg).is_ok()
    }

    fn count_drop(&self, job_id: &str, records: u64) {
        *self.drops.lock().entry(job_id.to_string()).or_default() += records;
        self.metrics.dropped_records.inc_by(records);
    }

    /// Waits until everything sent before this call is written and flushed.
    pub async fn flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        if self.send(WriterMsg::Flush(tx)) {
            let _ = tokio::task::spawn_blocking(move || rx.recv()).await;
        }
    }
}

/// Starts the writer thread. It runs until every [`WriterHandle`] is dropped,
/// then drains the queue, flushes and returns; join the returned handle to
/// wait for that.
pub fn spawn(
    config: WriterConfig,
    metrics: Arc<HistoryMetrics>,
) -> std::io::Result<(WriterHandle, std::thread::JoinHandle<()>)> {
    // Unbounded as a channel, bounded by `queued`: progress past the
    // capacity is dropped and counted; a job's start and end (two per job)
    // are never dropped, and the listener must never wait.
    #[allow(clippy::disallowed_methods)]
    let (tx, rx) = mpsc::channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let handle = WriterHandle {
        tx,
        queued: queued.clone(),
        capacity: config.queue_capacity,
        metrics: metrics.clone(),
        drops: Default::default(),
        open: Default::default(),
    };
    let mut writer = Writer::new(config, metrics, handle.drops.clone());
    writer.open = handle.open.clone();
    let thread = std::thread::Builder::new()
        .name("event-log-writer".into())
        .spawn(move || writer.run(rx, queued))?;
    Ok((handle, thread))
}

/// A job whose log is being written.
struct OpenJob {
    /// The log's file name without its suffix: the job id, or a second
    /// name of it when another process's log holds that name
    /// (`format::name::second_name`).
    stem: String,
    /// `None` while closed to respect the open-file limit.
    file: Option<Sink>,
    /// Bytes written to the file so far (the next record's offset).
    len: u64,
    /// Whether `JobStart` has been written.
    started: bool,
    /// The `JobStart`'s scheduler, copied into the footer.
    scheduler_id: Option<String>,
    /// Lines that arrived before `JobStart`.
    held: Vec<Vec<u8>>,
    /// The values of the job's secret settings, scrubbed from its task
    /// lines (a failure message can quote one).
    secrets: Vec<String>,
    /// Set after a write error: the job's log is abandoned.
    broken: bool,
    /// The records written, while [`WriterConfig::written`] wants them and
    /// they are all there.
    kept: Option<Kept>,
    /// Each attempt received, for the footer's slot time; `None` past
    /// [`MAX_SPANS`] (the footer then does not state it).
    spans: Option<Spans>,
    last_used: u64,
    dirty: bool,
}

/// One job's records kept for [`WriterConfig::written`].
#[derive(Default)]
struct Kept {
    start: Option<JobStart>,
    tasks: Vec<Vec<TaskEnd>>,
    count: usize,
}

/// Progress lines held per job while its `JobStart` is pending.
const MAX_HELD_LINES: usize = 100_000;
/// Finished job ids remembered to drop late records.
const FINISHED_MEMORY: usize = 100_000;

struct Writer {
    config: WriterConfig,
    metrics: Arc<HistoryMetrics>,
    drops: Arc<parking_lot::Mutex<HashMap<String, u64>>>,
    jobs: HashMap<String, OpenJob>,
    open_files: usize,
    tick: u64,
    finished: HashSet<String>,
    finished_order: VecDeque<String>,
    errors: ErrorLog,
    /// Ids of the jobs in `jobs`, shared with the handles.
    open: Arc<parking_lot::Mutex<HashSet<String>>>,
}

/// Logs I/O errors without flooding: the first of a burst in full, then a
/// count at most once a minute.
struct ErrorLog {
    last_logged: Option<Instant>,
    suppressed: u64,
}

impl ErrorLog {
    fn report(&mut self, metrics: &HistoryMetrics, what: &str, err: &std::io::Error) {
        metrics.write_errors.inc();
        let now = Instant::now();
        match self.last_logged {
            Some(at) if now.duration_since(at) < Duration::from_secs(60) => {
                self.suppressed += 1;
            }
            _ => {
                log::error!(
                    "event log: {what}: {err}; the job's history is lost, scheduling \
                     continues ({} similar errors suppressed since the last report)",
                    self.suppressed
                );
                self.last_logged = Some(now);
                self.suppressed = 0;
            }
        }
    }
}

impl Writer {
    fn new(
        config: WriterConfig,
        metrics: Arc<HistoryMetrics>,
        drops: Arc<parking_lot::Mutex<HashMap<String, u64>>>,
    ) -> Self {
        Self {
            config,
            metrics,
            drops,
            jobs: HashMap::new(),
            open_files: 0,
            tick: 0,
            finished: HashSet::new(),
            finished_order: VecDeque::new(),
            errors: ErrorLog {
                last_logged: None,
                suppressed: 0,
            },
            open: Default::default(),
        }
    }

    fn run(&mut self, rx: mpsc::Receiver<WriterMsg>, queued: Arc<AtomicUsize>) {
        let mut last_flush = Instant::now();
        loop {
            let timeout = self
                .config
                .flush_interval
                .saturating_sub(last_flush.elapsed());
            match rx.recv_timeout(timeout) {
                Ok(WriterMsg::Shutdown) => break,
                Ok(msg) => {
                    if msg.is_progress() {
                        queued.fetch_sub(1, Ordering::AcqRel);
                    }
                    self.handle(msg);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if last_flush.elapsed() >= self.config.flush_interval {
                self.flush_all();
                last_flush = Instant::now();
            }
        }
        self.flush_all();
    }

    fn handle(&mut self, msg: WriterMsg) {
        match msg {
            WriterMsg::Start(start) => self.start(start),
            WriterMsg::Secrets { job_id, values } => {
                if !self.finished.contains(&job_id) {
                    self.job(&job_id).secrets = values;
                }
            }
            WriterMsg::Tasks { job_id, tasks } => {
                if self.finished.contains(&job_id) {
                    return;
                }
                let lines = tasks
                    .iter()
                    .filter_map(|t| record::encode_line(kind::TASK_END, t).ok());
                let lines: Vec<Vec<u8>> = lines.collect();
                let job = self.job(&job_id);
                job.spans = job
                    .spans
                    .take()
                    .filter(|s| s.list.len() + tasks.len() <= MAX_SPANS);
                if let Some(spans) = &mut job.spans {
                    for t in &tasks {
                        let executor = spans.executor(&t.executor_id);
                        spans.list.push(Span {
                            stage_id: t.stage_id,
                            task_id: t.task_id,
                            executor,
                            ms: bjh_format::usage::span_ms(t),
                            failed: !matches!(t.status, record::TaskOutcome::Successful),
                        });
                    }
                }
                let whole = lines.len() == tasks.len()
                    && (job.started || job.held.len() + lines.len() <= MAX_HELD_LINES);
                job.kept = job
                    .kept
                    .take()
                    .filter(|k| whole && k.count + tasks.len() <= MAX_KEPT_TASKS);
                if let Some(kept) = &mut job.kept {
                    kept.count += tasks.len();
                    kept.tasks.push(tasks);
                }
                if !job.started {
                    let room = MAX_HELD_LINES.saturating_sub(job.held.len());
                    let dropped = lines.len().saturating_sub(room) as u64;
                    job.held.extend(lines.into_iter().take(room));
                    if dropped > 0 {
                        *self.drops.lock().entry(job_id).or_default() += dropped;
                        self.metrics.dropped_records.inc_by(dropped);
                    }
                    return;
                }
                for line in lines {
                    let line = scrubbed(line, &self.job(&job_id).secrets);
                    self.append(&job_id, &line);
                }
            }
            WriterMsg::End {
                job_id,
                fallback_start,
                stages,
                end,
                secrets,
            } => {
                if !self.finished.contains(&job_id) {
                    let job = self.job(&job_id);
                    for value in secrets {
                        if !job.secrets.contains(&value) {
                            job.secrets.push(value);
                        }
                    }
                }
                self.end(job_id, fallback_start, stages, end)
            }
            WriterMsg::Flush(ack) => {
                self.flush_all();
                let _ = ack.send(());
            }
            WriterMsg::Shutdown => {}
        }
    }

    fn job(&mut self, job_id: &str) -> &mut OpenJob {
        if !self.jobs.contains_key(job_id) {
            self.open.lock().insert(job_id.to_string());
        }
        self.jobs.entry(job_id.to_string()).or_insert(OpenJob {
            stem: job_id.to_string(),
            file: None,
            len: 0,
            started: false,
            scheduler_id: None,
            held: Vec::new(),
            secrets: Vec::new(),
            broken: false,
            kept: self
                .config
                .written
                .as_ref()
                .filter(|w| w.wanted())
                .map(|_| Kept::default()),
            spans: Some(Spans::default()),
            last_used: 0,
            dirty: false,
        })
    }

    fn start(&mut self, start: JobStart) {
        let job_id = start.job_id.clone();
        if self.finished.contains(&job_id) {
            return;
        }
        if self.job(&job_id).started {
            return;
        }
        match record::encode_line(kind::JOB_START, &start) {
            Ok(line) => {
                let job = self.job(&job_id);
                job.started = true;
                job.scheduler_id.clone_from(&start.scheduler_id);
                if let Some(kept) = &mut job.kept {
                    kept.start = Some(start);
                }
                self.append(&job_id, &line);
                let held = std::mem::take(&mut self.job(&job_id).held);
                for line in held {
                    let line = scrubbed(line, &self.job(&job_id).secrets);
                    self.append(&job_id, &line);
                }
            }
            Err(e) => log::error!("event log: cannot encode JobStart of {job_id}: {e}"),
        }
    }

    /// Appends one line to the job's file, opening it (or reopening it) if
    /// needed. Errors mark the job broken so later lines are skipped.
    fn append(&mut self, job_id: &str, line: &[u8]) {
        if self.ensure_open(job_id).is_err() {
            return;
        }
        self.tick += 1;
        let tick = self.tick;
        let job = self.jobs.get_mut(job_id).expect("job is open");
        let file = job.file.as_mut().expect("file is open");
        match file.write_all(line) {
            Ok(()) => {
                job.len += line.len() as u64;
                job.last_used = tick;
                job.dirty = true;
            }
            Err(e) => {
                job.broken = true;
                self.errors
                    .report(&self.metrics, &format!("writing the log of {job_id}"), &e);
            }
        }
    }

    fn ensure_open(&mut self, job_id: &str) -> Result<(), ()> {
        let job = self.jobs.get(job_id).ok_or(())?;
        if job.broken {
            return Err(());
        }
        if job.file.is_some() {
            return Ok(());
        }
        if self.open_files >= self.config.max_open_files.max(1) {
            self.close_least_recently_used();
        }
        let fresh = self.jobs[job_id].len == 0;
        let opened = if fresh {
            std::fs::create_dir_all(&self.config.dir).and_then(|()| self.create_log(job_id))
        } else {
            let path = self.path(&self.jobs[job_id].stem, self.running_suffix());
            bjh_files::open_append(&path)
        };
        let compression = self.config.compression;
        let opened = opened.and_then(|file| {
            let file = BufWriter::with_capacity(16 * 1024, file);
            Ok(match compression {
                Compression::None => Sink::Plain(file),
                Compression::Zstd(level) => {
                    Sink::Zstd(zstd::stream::write::Encoder::new(file, level)?)
                }
            })
        });
        let job = self.jobs.get_mut(job_id).expect("job exists");
        match opened {
            Ok(sink) => {
                job.file = Some(sink);
                self.open_files += 1;
                Ok(())
            }
            Err(e) => {
                job.broken = true;
                let what = format!(
                    "creating the log of {job_id} in {}",
                    self.config.dir.display()
                );
                self.errors.report(&self.metrics, &what, &e);
                Err(())
            }
        }
    }

    fn close_least_recently_used(&mut self) {
        let victim = self
            .jobs
            .iter()
            .filter(|(_, j)| j.file.is_some())
            .min_by_key(|(_, j)| j.last_used)
            .map(|(id, _)| id.clone());
        if let Some(id) = victim {
            let job = self.jobs.get_mut(&id).expect("victim exists");
            if let Some(file) = job.file.take() {
                if let Err(e) = file.finish() {
                    job.broken = true;
                    self.errors
                        .report(&self.metrics, &format!("flushing the log of {id}"), &e);
                }
                self.open_files -= 1;
            }
        }
    }

    fn flush_all(&mut self) {
        let mut failed = Vec::new();
        for (id, job) in self.jobs.iter_mut() {
            if job.dirty
                && let Some(file) = job.file.as_mut()
            {
                job.dirty = false;
                if let Err(e) = file.flush() {
                    job.broken = true;
                    failed.push((id.clone(), e));
                }
            }
        }
        for (id, e) in failed {
            self.errors
                .report(&self.metrics, &format!("flushing the log of {id}"), &e);
        }
    }

    fn path(&self, stem: &str, suffix: &str) -> PathBuf {
        self.config.dir.join(format!("{stem}{suffix}"))
    }

    /// Creates a new job's `.running` log under a name no other log has
    /// (see [`naming`]).
    fn create_log(&mut self, job_id: &str) -> std::io::Result<std::fs::File> {
        let (stem, file) = naming::create_running(&self.config.dir, job_id, self.running_suffix())?;
        self.second_name(job_id, &stem);
        Ok(file)
    }

    /// Notes that job `job_id`'s log is named `stem` from now on.
    fn second_name(&mut self, job_id: &str, stem: &str) {
        if let Some(job) = self.jobs.get_mut(job_id)
            && job.stem != stem
        {
            log::warn!(
                "event log: another log of job {job_id} is in {} already (two schedulers \
                 minted one id); this one is written as {stem}, and both are kept",
                self.config.dir.display()
            );
            self.open.lock().insert(stem.to_string());
            job.stem = stem.to_string();
        }
    }

    fn running_suffix(&self) -> &'static str {
        match self.config.compression {
            Compression::None => RUNNING_SUFFIX,
            Compression::Zstd(_) => ZST_RUNNING_SUFFIX,
        }
    }

    fn completed_suffix(&self) -> &'static str {
        match self.config.compression {
            Compression::None => COMPLETED_SUFFIX,
            Compression::Zstd(_) => ZST_COMPLETED_SUFFIX,
        }
    }

    /// Writes the terminal record and the footer. Plain: two more lines.
    /// zstd: the progress frame is ended, the `JobEnd` line goes in one
    /// frame per payload piece (so a reader decompresses one payload
    /// alone), and the footer in a skippable frame at the end.
    fn write_terminal(&mut self, job_id: &str, end: &JobEnd) -> std::io::Result<()> {
        let pieces = record::job_end_pieces(end).map_err(std::io::Error::other)?;
        let located = |name: &str| !end.responses.missing.iter().any(|m| m == name);
        let mut payloads = std::collections::BTreeMap::new();
        let plans = serde_json::from_str::<record::PlansOfJob>(end.job.get()).ok();
        let query_hash = plans
            .as_ref()
            .and_then(|plans| plans.query_hash())
            .map(bjh_format::query_hash::hash_text);
        let query_label = plans.as_ref().and_then(|plans| plans.query_label());
        let scheduler_id = self.jobs.get(job_id).and_then(|j| j.scheduler_id.clone());
        let (usage, by_executor) = match self.jobs.get(job_id).and_then(|j| j.spans.as_ref()) {
            Some(spans) => {
                let (usage, by_executor) = slot_usage(spans, end);
                (Some(usage), by_executor)
            }
            None => (None, Default::default()),
        };
        let tags = usage_tags(&self.config.usage_tags, end.config.get());
        let footer = |offset: u64, len: u64, payloads| Footer {
            job_end_offset: offset,
            job_end_len: len,
            status: end.status.clone(),
            queued_at: end.queued_at,
            index: end.index.clone(),
            dropped_records: end.dropped_records,
            query_hash: query_hash.clone(),
            query_label: query_label.clone(),
            scheduler_id: scheduler_id.clone(),
            busy_slot_ms: usage.map(|u| u.busy_slot_ms),
            failed_slot_ms: usage.map(|u| u.failed_slot_ms),
            busy_by_executor: by_executor.clone(),
            tags: tags.clone(),
            payloads,
        };
        let Compression::Zstd(level) = self.config.compression else {
            let offset = self.jobs[job_id].len;
            for (name, bytes) in &pieces {
                if let Some(name) = name
                    && located(name)
                {
                    let at = self.jobs[job_id].len;
                    payloads.insert(name.to_string(), [at, bytes.len() as u64]);
                }
                self.append(job_id, bytes);
            }
            if self.jobs[job_id].broken {
                return Err(std::io::Error::other("an earlier write of this log failed"));
            }
            let len = (self.jobs[job_id].len - offset).saturating_sub(1);
            let footer = record::encode_line(kind::FOOTER, &footer(offset, len, payloads))?;
            self.append(job_id, &footer);
            return Ok(());
        };
        self.ensure_open(job_id)
            .map_err(|()| std::io::Error::other("the log cannot be opened"))?;
        let job = self.jobs.get_mut(job_id).expect("job is open");
        let result = (|| {
            let sink = job.file.take().expect("file is open");
            let mut file = sink.finish()?;
            let offset = file.get_ref().metadata()?.len();
            let mut at = offset;
            // One frame per piece: a payload decompresses alone.
            for (name, bytes) in &pieces {
                let frame = zstd::bulk::compress(bytes, level)?;
                file.write_all(&frame)?;
                if let Some(name) = name
                    && located(name)
                {
                    payloads.insert(name.to_string(), [at, frame.len() as u64]);
                }
                at += frame.len() as u64;
            }
            let footer = record::encode_line(kind::FOOTER, &footer(offset, at - offset, payloads))?;
            file.write_all(&footer_frame(&footer))?;
            Ok(file)
        })();
        match result {
            Ok(file) => {
                job.file = Some(Sink::Plain(file));
                Ok(())
            }
            Err(e) => {
                job.broken = true;
                self.open_files -= 1;
                Err(e)
            }
        }
    }

    fn end(
        &mut self,
        job_id: String,
        fallback_start: JobStart,
        stages: Vec<(record::StageStart, record::StageEnd)>,
        mut end: Box<JobEnd>,
    ) {
        if self.finished.contains(&job_id) {
            return;
        }
        if !self.job(&job_id).started {
            self.start(fallback_start);
        }
        end.dropped_records += self.drops.lock().remove(&job_id).unwrap_or(0);
        for (start, stage_end) in &stages {
            for line in [
                record::encode_line(kind::STAGE_START, start),
                record::encode_line(kind::STAGE_END, stage_end),
            ]
            .into_iter()
            .flatten()
            {
                self.append(&job_id, &line);
            }
        }
        let result = self
            .write_terminal(&job_id, &end)
            .and_then(|()| self.complete(&job_id));
        let path = result.as_ref().ok().cloned();
        let result = result.map(|_| ());
        self.remember_finished(&job_id);
        let job = self.jobs.remove(&job_id);
        {
            let mut open = self.open.lock();
            open.remove(&job_id);
            if let Some(job) = &job {
                open.remove(&job.stem);
            }
        }
        if job.as_ref().is_some_and(|j| j.file.is_some()) {
            self.open_files -= 1;
        }
        if result.is_ok()
            && let Some(written) = &self.config.written
            && let Some(OpenJob {
                kept: Some(kept),
                secrets,
                ..
            }) = job
            && let Some(start) = kept.start
        {
            let mut tasks = kept.tasks;
            // As the lines were: a failure can quote a secret.
            if !secrets.is_empty() {
                for task in tasks.iter_mut().flatten() {
                    if let record::TaskOutcome::Failed { reason, error } = &mut task.status {
                        *reason = scrub(reason, &secrets);
                        *error = scrub(error, &secrets);
                    }
                }
            }
            written.completed(Arc::new(WrittenJob {
                start,
                stages,
                tasks,
                end,
            }));
        }
        // After the records: whoever lists the job finds them waiting.
        if let (Some(path), Some(completed)) = (path, &self.config.completed) {
            let _ = completed.send(path);
        }
        match result {
            Ok(()) => self.metrics.jobs_recorded.inc(),
            Err(e) => self.errors.report(
                &self.metrics,
                &format!("completing the log of {job_id}"),
                &e,
            ),
        }
    }

    /// Flush, fsync, rename to the completed name, fsync the directory: a
    /// file named `.eventlog` is always whole and durable. Gives its path.
    fn complete(&mut self, job_id: &str) -> std::io::Result<PathBuf> {
        let job = self.jobs.get_mut(job_id).expect("job exists");
        if job.broken {
            return Err(std::io::Error::other("an earlier write of this log failed"));
        }
        let sink = job
            .file
            .take()
            .ok_or_else(|| std::io::Error::other("not open"))?;
        self.open_files -= 1;
        let file = sink.finish()?;
        file.get_ref().sync_all()?;
        drop(file);
        let from = self.path(&self.jobs[job_id].stem, self.running_suffix());
        let (stem, to) = naming::complete(
            &self.config.dir,
            &from,
            job_id,
            &self.jobs[job_id].stem,
            self.completed_suffix(),
        )?;
        bjh_files::sync_dir(&self.config.dir)?;
        self.second_name(job_id, &stem);
        Ok(to)
    }

    fn remember_finished(&mut self, job_id: &str) {
        if self.finished.insert(job_id.to_string()) {
            self.finished_order.push_back(job_id.to_string());
            if self.finished_order.len() > FINISHED_MEMORY
                && let Some(old) = self.finished_order.pop_front()
            {
                self.finished.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bjh_format::record::{JobEndStatus, JobIndex, raw_or_null};
    use std::path::Path;

    fn end(job_id: &str) -> Box<JobEnd> {
        Box::new(JobEnd {
            status: JobEndStatus::Succeeded,
            queued_at: 1,
            started_at: 2,
            completed_at: 3,
            index: JobIndex {
                job_id: job_id.into(),
                ..Default::default()
            },
            job: raw_or_null("{}"),
            stages: raw_or_null(r#"{"stages":[]}"#),
            config: raw_or_null("{}"),
            dot: String::new(),
            dropped_records: 0,
            responses: Default::default(),
        })
    }

    fn task(stage_id: u32, task_id: u32) -> TaskEnd {
        TaskEnd {
            stage_id,
            task_id,
            executor_id: "e".into(),
            status: ballista_api_types::dto::TaskStatus::Successful,
            launch_time: 1,
            start_exec_time: 2,
            end_exec_time: 3,
            metrics: Default::default(),
            stage_attempt: 0,
        }
    }

    fn start(job_id: &str) -> JobStart {
        JobStart {
            job_id: job_id.into(),
            ..Default::default()
        }
    }

    /// The message that ends `job_id` with `stages` and [`end`].
    fn ended_with(job_id: &str, stages: Vec<(record::StageStart, record::StageEnd)>) -> WriterMsg {
        WriterMsg::End {
            job_id: job_id.into(),
            fallback_start: start(job_id),
            stages,
            end: end(job_id),
            secrets: Vec::new(),
        }
    }

    /// The message that ends `job_id` with no stages.
    fn ended(job_id: &str) -> WriterMsg {
        ended_with(job_id, vec![])
    }

    #[tokio::test]
    async fn tasks_before_job_start_are_written_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let (handle, thread) = spawn(WriterConfig::new(dir.path()), metrics).unwrap();
        handle.try_progress(WriterMsg::Tasks {
            job_id: "j1".into(),
            tasks: vec![task(1, 0)],
        });
        handle.send(WriterMsg::Start(start("j1")));
        handle.send(ended("j1"));
        drop(handle);
        thread.join().unwrap();
        let text = std::fs::read_to_string(dir.path().join("j1.eventlog")).unwrap();
        let kinds: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["ev"].to_string())
            .collect();
        assert_eq!(
            kinds,
            vec!["\"JobStart\"", "\"TaskEnd\"", "\"JobEnd\"", "\"Footer\""]
        );
        assert!(!dir.path().join("j1.eventlog.running").exists());
    }

    /// The footer states the slot time: each attempt's span from launch
    /// to end times the partitions the final `/stages` lists for it, and
    /// the failed attempts' part apart.
    #[tokio::test]
    async fn the_footer_states_the_slot_time_of_every_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let (handle, thread) = spawn(WriterConfig::new(dir.path()), metrics).unwrap();
        handle.send(WriterMsg::Start(start("s1")));
        let mut failed = task(1, 1);
        failed.status = ballista_api_types::dto::TaskStatus::Failed {
            reason: "ExecutionError".into(),
            error: "boom".into(),
        };
        // Spans of 2 ms each (launch 1, end 3).
        handle.try_progress(WriterMsg::Tasks {
            job_id: "s1".into(),
            tasks: vec![task(1, 0), failed, task(2, 0)],
        });
        let mut end = end("s1");
        end.stages = raw_or_null(
            r#"{"stages":[{"stage_id":"1","tasks":[{"id":0,"partition_id":[0,1,2]},
                {"id":1,"partition_id":[3]}]}]}"#,
        );
        handle.send(WriterMsg::End {
            job_id: "s1".into(),
            fallback_start: start("s1"),
            stages: vec![],
            end,
            secrets: Vec::new(),
        });
        drop(handle);
        thread.join().unwrap();
        let text = std::fs::read_to_string(dir.path().join("s1.eventlog")).unwrap();
        let footer: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        // 2 ms on 3 slots, 2 ms on 1 (failed), 2 ms on 1 (not listed).
        assert_eq!(footer["data"]["busy_slot_ms"], 10);
        assert_eq!(footer["data"]["failed_slot_ms"], 2);
        assert_eq!(
            footer["data"]["busy_by_executor"],
            serde_json::json!({"e": 10})
        );
    }

    /// Keeps what it is handed.
    #[derive(Debug, Default)]
    struct Collect {
        off: std::sync::atomic::AtomicBool,
        jobs: parking_lot::Mutex<Vec<Arc<WrittenJob>>>,
    }

    impl WrittenJobs for Collect {
        fn wanted(&self) -> bool {
            !self.off.load(Ordering::Relaxed)
        }
        fn completed(&self, job: Arc<WrittenJob>) {
            self.jobs.lock().push(job);
        }
    }

    /// The records handed over are those of the completed log, read back
    /// by the log reader (failures scrubbed of the job's secrets as the
    /// lines were); a job with records missing from its log, or opened
    /// while they were not wanted, is not handed over.
    #[tokio::test]
    async fn a_completed_jobs_records_are_handed_over_as_its_log_holds_them() {
        use bjh_store::records::JobRecords;
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let collect = Arc::new(Collect::default());
        let mut config = WriterConfig::new(dir.path());
        config.written = Some(collect.clone());
        let (handle, thread) = spawn(config, metrics).unwrap();
        let mut failed = task(2, 7);
        failed.executor_id = "e2".into();
        failed.status = ballista_api_types::dto::TaskStatus::Failed {
            reason: "ExecutionError".into(),
            error: "bad password hunter2".into(),
        };
        handle.send(WriterMsg::Secrets {
            job_id: "j".into(),
            values: vec!["hunter2".into()],
        });
        // Some before the start (held), some after.
        handle.try_progress(WriterMsg::Tasks {
            job_id: "j".into(),
            tasks: vec![task(1, 0), task(1, 1)],
        });
        handle.send(WriterMsg::Start(start("j")));
        handle.try_progress(WriterMsg::Tasks {
            job_id: "j".into(),
            tasks: vec![failed, task(2, 8)],
        });
        let stage = |id: u32| {
            (
                record::StageStart {
                    stage_id: id,
                    partitions: 2,
                    start_time: 10 + u64::from(id),
                },
                record::StageEnd {
                    stage_id: id,
                    status: "Successful".into(),
                    end_time: 20 + u64::from(id),
                },
            )
        };
        handle.send(ended_with("j", vec![stage(1), stage(2)]));
        // Held lines beyond the limit: the log lacks some, nothing handed.
        handle.try_progress(WriterMsg::Tasks {
            job_id: "over".into(),
            tasks: (0..MAX_HELD_LINES as u32 + 1).map(|i| task(1, i)).collect(),
        });
        handle.send(WriterMsg::Start(start("over")));
        handle.send(ended("over"));
        let (tx, rx) = mpsc::sync_channel(1);
        handle.send(WriterMsg::Flush(tx));
        rx.recv().unwrap();
        // Opened while not wanted: nothing handed.
        collect.off.store(true, Ordering::Relaxed);
        handle.send(WriterMsg::Start(start("off")));
        handle.send(ended("off"));
        drop(handle);
        thread.join().unwrap();

        let jobs = std::mem::take(&mut *collect.jobs.lock());
        let ids: Vec<&str> = jobs.iter().map(|j| j.start.job_id.as_str()).collect();
        assert_eq!(ids, ["j"]);
        let job = Arc::try_unwrap(jobs.into_iter().next().unwrap()).unwrap();
        let from_log = JobRecords::read(dir.path().join("j.eventlog")).unwrap();
        let handed = JobRecords::of_written(job.start, job.stages, job.tasks);
        assert_eq!(handed.tasks.len(), 4);
        assert_eq!(handed.tasks, from_log.tasks);
        assert_eq!(handed.executors, from_log.executors);
        assert_eq!(handed.stages, from_log.stages);
        assert_eq!(handed.start.job_id, from_log.start.job_id);
        let failure = handed.tasks.iter().find_map(|t| t.failure.clone()).unwrap();
        assert!(!failure.1.contains("hunter2"), "{failure:?}");
        assert!(dir.path().join("over.eventlog").exists());
        assert!(dir.path().join("off.eventlog").exists());
    }

    /// The footer states the query hash of the job's logical plan; a
    /// footer without it (a log written before the field existed) gets
    /// the same hash from the `job` payload, in both formats.
    #[tokio::test]
    async fn the_footer_states_the_query_hash_and_older_footers_get_it_from_the_payload() {
        let plan = "Projection: t.k\n  TableScan: t";
        let expected = bjh_format::query_hash::query_hash(plan).unwrap();
        for compression in [Compression::None, Compression::Zstd(3)] {
            let dir = tempfile::tempdir().unwrap();
            let metrics = Arc::new(HistoryMetrics::unregistered());
            let mut config = WriterConfig::new(dir.path());
            config.compression = compression;
            let (handle, thread) = spawn(config, metrics).unwrap();
            let mut with_plan = end("q");
            with_plan.job = raw_or_null(
                &serde_json::json!({"job_id": "q", "logical_plan": plan, "stage_plan": "x"})
                    .to_string(),
            );
            handle.send(WriterMsg::Start(start("q")));
            handle.send(WriterMsg::End {
                job_id: "q".into(),
                fallback_start: start("q"),
                stages: vec![],
                end: with_plan,
                secrets: Vec::new(),
            });
            drop(handle);
            thread.join().unwrap();
            let name = match compression {
                Compression::None => "q.eventlog",
                Compression::Zstd(_) => "q.eventlog.zst",
            };
            let path = dir.path().join(name);
            let summary = bjh_store::read_summary(&path).unwrap();
            assert_eq!(summary.stated_hash, Some(expected), "{name}");
            assert_eq!(summary.query_hash(), expected);
            let stated = format!(
                "\"query_hash\":\"{}\",",
                bjh_format::query_hash::hash_text(expected)
            );
            if compression == Compression::None {
                // The same log as an older writer left it.
                let text = std::fs::read_to_string(&path).unwrap();
                assert_eq!(text.matches(&stated).count(), 1, "{text}");
                std::fs::write(&path, text.replace(&stated, "")).unwrap();
                let summary = bjh_store::read_summary(&path).unwrap();
                assert_eq!(summary.query_hash(), expected, "from the job payload");
            }
        }
    }

    #[tokio::test]
    async fn full_queue_drops_progress_but_keeps_job_end() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let mut config = WriterConfig::new(dir.path());
        config.queue_capacity = 1;
        // Build the handle without a running thread so the queue stays full.
        let (tx, rx) = mpsc::channel();
        let handle = WriterHandle {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
            capacity: 1,
            metrics: metrics.clone(),
            drops: Default::default(),
            open: Default::default(),
        };
        handle.send(WriterMsg::Start(start("j")));
        let accepted: Vec<bool> = (0..5)
            .map(|i| {
                handle.try_progress(WriterMsg::Tasks {
                    job_id: "j".into(),
                    tasks: vec![task(1, i)],
                })
            })
            .collect();
        assert_eq!(accepted, vec![true, false, false, false, false]);
        assert!(handle.send(ended("j")));
        let mut writer = Writer::new(config, metrics.clone(), handle.drops.clone());
        let queued = handle.queued.clone();
        drop(handle);
        writer.run(rx, queued);
        let text = std::fs::read_to_string(dir.path().join("j.eventlog")).unwrap();
        assert_eq!(text.matches("\"TaskEnd\"").count(), 1);
        assert!(text.contains("\"dropped_records\":4"));
        assert_eq!(metrics.dropped_records.get(), 4);
    }

    /// Descriptors of this process open on files under `dir`.
    /// Descriptors open on files in `dir` (the directory's own, opened
    /// for a moment to fsync it after a rename, is not a log file).
    fn fds_under(dir: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(dir) && t != dir))
            .count()
    }

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap()
    }

    /// Runs the body below in a process of its own, so the memory it
    /// measures is the writer's, not that of tests running beside it.
    #[test]
    fn five_thousand_jobs_at_once_stay_within_the_descriptor_limit() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "writer::tests::five_thousand_jobs_at_once_body",
                "--exact",
                "--ignored",
                "--test-threads=1",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    #[ignore = "run in its own process by five_thousand_jobs_at_once_stay_within_the_descriptor_limit"]
    fn five_thousand_jobs_at_once_body() {
        const JOBS: usize = 5_000;
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let mut config = WriterConfig::new(dir.path());
        config.max_open_files = 256;
        let (handle, thread) = spawn(config, metrics.clone()).unwrap();
        let flush = |handle: &WriterHandle| {
            let (tx, rx) = mpsc::sync_channel(1);
            handle.send(WriterMsg::Flush(tx));
            rx.recv().unwrap();
        };
        let rss_before = rss_kib();
        // Descriptors on the directory, sampled all along by a thread of
        // its own until the writer is done, not at a few chosen moments.
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (done, dir) = (done.clone(), dir.path().to_path_buf());
            std::thread::spawn(move || {
                let (mut peak, mut samples) = (0, 0u64);
                while !done.load(Ordering::Acquire) {
                    peak = peak.max(fds_under(&dir));
                    samples += 1;
                }
                (peak, samples)
            })
        };
        // Every job starts before any ends: 5,000 logs open at once.
        for j in 0..JOBS {
            handle.send(WriterMsg::Start(start(&format!("job{j}"))));
        }
        flush(&handle);
        for round in 0..4 {
            for j in 0..JOBS {
                handle.send(WriterMsg::Tasks {
                    job_id: format!("job{j}"),
                    tasks: vec![task(1, round)],
                });
            }
            flush(&handle);
        }
        let running = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(running, JOBS, "one .running log per job");
        let rss_growth_mib = rss_kib().saturating_sub(rss_before) / 1024;
        for j in 0..JOBS {
            let id = format!("job{j}");
            handle.send(ended(&id));
        }
        drop(handle);
        thread.join().unwrap();
        done.store(true, Ordering::Release);
        let (peak_fds, samples) = sampler.join().unwrap();
        assert!(samples > 100, "only {samples} samples of the descriptors");
        assert!(peak_fds <= 256, "{peak_fds} descriptors open at once");
        assert!(rss_growth_mib < 64, "memory grew by {rss_growth_mib} MiB");
        assert_eq!(metrics.write_errors.get(), 0);
        for j in [0, JOBS / 2, JOBS - 1] {
            let text =
                std::fs::read_to_string(dir.path().join(format!("job{j}.eventlog"))).unwrap();
            assert_eq!(text.matches("\"TaskEnd\"").count(), 4, "job{j}");
        }
        let completed = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".eventlog"))
            .count();
        assert_eq!(completed, JOBS);
    }

    #[tokio::test]
    async fn open_files_stay_under_the_limit_and_reopen_in_append_mode() {
        for compression in [Compression::None, Compression::Zstd(DEFAULT_ZSTD_LEVEL)] {
            let dir = tempfile::tempdir().unwrap();
            let metrics = Arc::new(HistoryMetrics::unregistered());
            let mut config = WriterConfig::new(dir.path());
            config.max_open_files = 2;
            config.compression = compression;
            let (handle, thread) = spawn(config, metrics).unwrap();
            for round in 0..3 {
                for j in 0..10 {
                    let id = format!("job{j}");
                    if round == 0 {
                        handle.send(WriterMsg::Start(start(&id)));
                    }
                    handle.try_progress(WriterMsg::Tasks {
                        job_id: id,
                        tasks: vec![task(1, round)],
                    });
                }
            }
            for j in 0..10 {
                let id = format!("job{j}");
                handle.send(ended(&id));
            }
            drop(handle);
            thread.join().unwrap();
            let suffix = match compression {
                Compression::None => COMPLETED_SUFFIX,
                Compression::Zstd(_) => ZST_COMPLETED_SUFFIX,
            };
            for j in 0..10 {
                let path = dir.path().join(format!("job{j}{suffix}"));
                let mut text = String::new();
                std::io::Read::read_to_string(
                    &mut bjh_store::open_decoded(&path).unwrap(),
                    &mut text,
                )
                .unwrap();
                assert_eq!(text.matches("\"TaskEnd\"").count(), 3, "job{j}: {text}");
                assert!(text.starts_with("{\"ev\":\"JobStart\""));
                assert!(text.ends_with("\n"));
                let end = bjh_store::terminal_line(&path).unwrap();
                assert!(end.starts_with(b"{\"ev\":\"JobEnd\""));
                if compression != Compression::None {
                    // Three frames at least (reopened twice), the JobEnd
                    // frame and the footer: decoded whole, the JobEnd line
                    // is the last.
                    assert!(
                        text.trim_end()
                            .ends_with(std::str::from_utf8(&end).unwrap())
                    );
                    assert_eq!(
                        bjh_store::read_summary(&path).unwrap().index.job_id,
                        format!("job{j}")
                    );
                }
            }
            let names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            assert!(names.iter().all(|n| n.ends_with(suffix)), "{names:?}");
        }
    }

    #[tokio::test]
    async fn an_unwritable_directory_is_counted_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("not-a-dir");
        std::fs::write(&blocker, b"file").unwrap();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let (handle, thread) = spawn(WriterConfig::new(&blocker), metrics.clone()).unwrap();
        handle.send(WriterMsg::Start(start("j")));
        handle.send(ended("j"));
        handle.flush().await;
        assert!(metrics.write_errors.get() >= 1);
        drop(handle);
        thread.join().unwrap();
    }

    /// Regression: two schedulers on one directory can mint the same id
    /// in the same millisecond; the second truncated the first's running
    /// log and renamed over its completed one. Two writers, one directory,
    /// one job id, each with a task of its own.
    #[test]
    fn two_writers_of_one_job_id_keep_both_logs_whole() {
        let dir = tempfile::tempdir().unwrap();
        let writer = || {
            spawn(
                WriterConfig::new(dir.path()),
                Arc::new(HistoryMetrics::unregistered()),
            )
            .unwrap()
        };
        let task_line = |log: &str, id: u32| {
            log.lines().any(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["ev"] == "TaskEnd" && v["data"]["task_id"] == id
            })
        };
        // While the first is running, and after it completed.
        for (job, first_done) in [("j", false), ("k", true)] {
            let (a, a_thread) = writer();
            a.send(WriterMsg::Start(start(job)));
            a.try_progress(WriterMsg::Tasks {
                job_id: job.into(),
                tasks: vec![task(1, 1)],
            });
            let a_thread = if first_done {
                a.send(ended(job));
                drop(a);
                a_thread.join().unwrap();
                None
            } else {
                let running = dir.path().join(format!("{job}.eventlog.running"));
                let waited = Instant::now();
                while !running.exists() {
                    assert!(waited.elapsed() < Duration::from_secs(10));
                    std::thread::yield_now();
                }
                Some((a, a_thread))
            };
            let (b, b_thread) = writer();
            b.send(WriterMsg::Start(start(job)));
            b.try_progress(WriterMsg::Tasks {
                job_id: job.into(),
                tasks: vec![task(1, 2)],
            });
            b.send(ended(job));
            drop(b);
            b_thread.join().unwrap();
            if let Some((a, a_thread)) = a_thread {
                a.send(ended(job));
                drop(a);
                a_thread.join().unwrap();
            }
            let logs: Vec<(String, String)> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.starts_with(job))
                .map(|n| {
                    let text = std::fs::read_to_string(dir.path().join(&n)).unwrap();
                    (n, text)
                })
                .collect();
            assert_eq!(
                logs.len(),
                2,
                "{job}: {:?}",
                logs.iter().map(|l| &l.0).collect::<Vec<_>>()
            );
            for (name, text) in &logs {
                let parsed = bjh_format::LogName::parse(name).unwrap();
                assert!(!parsed.running && parsed.names(job), "{name}");
                assert!(
                    text.lines().last().unwrap().contains("\"Footer\""),
                    "{name}"
                );
                // Each log holds its own writer's task and not the other's.
                assert!(task_line(text, 1) != task_line(text, 2), "{name}: {text}");
            }
            assert!(
                logs.iter()
                    .any(|(n, t)| *n == format!("{job}.eventlog") && task_line(t, 1))
            );
        }
        // The store lists all four, each log under its own name.
        let store = bjh_store::LogStore::new(dir.path(), Arc::new(HistoryMetrics::unregistered()));
        store.rescan();
        let mut listed: Vec<String> = store
            .completed_files()
            .iter()
            .map(|f| f.job_id.to_string())
            .collect();
        listed.sort();
        assert_eq!(listed.len(), 4, "{listed:?}");
        assert_eq!(listed[0], "j");
        assert!(listed[1].starts_with("j!"));
        assert_eq!(listed[2], "k");
        assert!(listed[3].starts_with("k!"));
    }

    #[tokio::test]
    async fn a_late_record_never_reopens_a_finished_log() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let (handle, thread) = spawn(WriterConfig::new(dir.path()), metrics).unwrap();
        handle.send(WriterMsg::Start(start("j")));
        handle.send(ended("j"));
        handle.try_progress(WriterMsg::Tasks {
            job_id: "j".into(),
            tasks: vec![task(1, 9)],
        });
        drop(handle);
        thread.join().unwrap();
        assert!(!dir.path().join("j.eventlog.running").exists());
        let text = std::fs::read_to_string(dir.path().join("j.eventlog")).unwrap();
        assert!(text.trim_end().ends_with('}'));
        assert!(text.lines().last().unwrap().contains("\"Footer\""));
    }
}
