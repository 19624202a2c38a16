//! A log directory: the in-memory index of completed jobs, its rescans, and
//! reads of one job's terminal record.
//!
//! **Invariant:** the index holds only each job's list summary. A request
//! for a job reads that job's `JobEnd` line and nothing else: through the
//! `Footer` our writer appends (one small read from the end of the file, one
//! seek), or, for logs without one (upstream's), by reading backwards from
//! the end to the start of the last line. Only a log whose last record is
//! neither falls back to a forward scan.
//!
//! **Invariant:** a rescan of an unchanged directory costs one `stat` per
//! file and opens nothing; `*.eventlog.running` files are never opened.
//!
//! **Invariant:** job ids from requests are looked up in the index and never
//! joined into a path; only names read from the directory become paths.
//!
//! **Invariant:** one unreadable log is logged once (until it changes) and
//! hides nothing but itself.

use crate::metrics::HistoryMetrics;
use crate::record::{
    Envelope, Footer, JobEnd, JobEndStatus, JobEndSummary, JobIndex, SCHEMA_VERSION, kind,
};
use crate::writer::COMPLETED_SUFFIX;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// Why a log could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be read.
    #[error("cannot read the event log: {0}")]
    Io(#[from] std::io::Error),
    /// The terminal record was written by a newer schema.
    #[error(
        "the event log's terminal record has schema version {found}, newer than the \
         supported version {SCHEMA_VERSION}; upgrade ballista-job-history to read it"
    )]
    NewerSchema {
        /// The version found.
        found: u32,
    },
    /// The terminal record is present but cannot be decoded.
    #[error("the event log's terminal record is malformed: {0}")]
    Malformed(String),
    /// The file has no terminal record (truncated, empty, or not a log).
    #[error("the event log has no terminal record (truncated or not an event log)")]
    NoTerminalRecord,
}

/// What the index keeps per completed job.
#[derive(Debug, Clone)]
pub struct JobSummary {
    /// The list fields.
    pub index: JobIndex,
    /// How the job ended.
    pub status: JobEndStatus,
    /// The log's file name within the directory.
    pub file_name: Arc<str>,
    /// Size and modification time when indexed.
    stamp: Stamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// The index of one log directory.
pub struct LogStore {
    dir: PathBuf,
    inner: RwLock<Index>,
    ready: AtomicBool,
    metrics: Arc<HistoryMetrics>,
    /// The last error listing the directory, so a lasting one is logged once.
    list_error: parking_lot::Mutex<Option<String>>,
}

#[derive(Default)]
struct Index {
    /// Completed jobs by id.
    jobs: HashMap<String, JobSummary>,
    /// Logs that could not be indexed, by file name, with the stamp they
    /// had: they are retried (and reported again) only when they change.
    bad: HashMap<String, Stamp>,
}

/// What one rescan did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanReport {
    /// Logs read because they were new or changed.
    pub read: usize,
    /// Jobs that left the index because their log is gone.
    pub removed: usize,
    /// Logs skipped as unreadable (newly reported).
    pub bad: usize,
}

impl LogStore {
    /// An empty index of `dir`; call [`LogStore::rescan`] to fill it.
    pub fn new(dir: impl Into<PathBuf>, metrics: Arc<HistoryMetrics>) -> Self {
        Self {
            dir: dir.into(),
            inner: RwLock::new(Index::default()),
            ready: AtomicBool::new(false),
            metrics,
            list_error: parking_lot::Mutex::new(None),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the first pass over the directory is done.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Brings the index up to date with the directory. A directory that
    /// does not exist is an empty one.
    pub fn rescan(&self) -> ScanReport {
        let mut report = ScanReport::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) => {
                let message = e.to_string();
                let mut last = self.list_error.lock();
                if e.kind() != std::io::ErrorKind::NotFound && last.as_ref() != Some(&message) {
                    log::warn!("history: cannot list {}: {e}", self.dir.display());
                }
                *last = Some(message);
                drop(last);
                let mut index = self.inner.write();
                report.removed = index.jobs.len();
                index.jobs.clear();
                drop(index);
                self.ready.store(true, Ordering::Release);
                return report;
            }
        };
        *self.list_error.lock() = None;
        // Snapshot what is known, then stat outside the lock.
        let known: HashMap<Arc<str>, (String, Stamp)> = {
            let index = self.inner.read();
            index
                .jobs
                .iter()
                .map(|(id, s)| (s.file_name.clone(), (id.clone(), s.stamp)))
                .collect()
        };
        let mut seen_ids = std::collections::HashSet::new();
        let mut fresh = Vec::new();
        let mut newly_bad = Vec::new();
        let mut seen_bad = std::collections::HashSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name.strip_suffix(COMPLETED_SUFFIX) else {
                continue;
            };
            if stem.is_empty() {
                continue;
            }
            let path = entry.path();
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let stamp = Stamp::of(&meta);
            if let Some((id, known_stamp)) = known.get(name)
                && *known_stamp == stamp
            {
                seen_ids.insert(id.clone());
                continue;
            }
            if self.inner.read().bad.get(name) == Some(&stamp) {
                seen_bad.insert(name.to_string());
                continue;
            }
            report.read += 1;
            match read_summary(&path) {
                Ok(summary) => {
                    let id = summary.index.job_id.clone();
                    let id = if id.is_empty() { stem.to_string() } else { id };
                    seen_ids.insert(id.clone());
                    fresh.push((
                        id,
                        JobSummary {
                            index: summary.index,
                            status: summary.status,
                            file_name: Arc::from(name),
                            stamp,
                        },
                    ));
                }
                Err(e) => {
                    log::warn!("history: skipping event log {name}: {e}");
                    self.metrics.unreadable_logs.inc();
                    report.bad += 1;
                    seen_bad.insert(name.to_string());
                    newly_bad.push((name.to_string(), stamp));
                }
            }
        }
        let mut index = self.inner.write();
        let before = index.jobs.len();
        index.jobs.retain(|id, _| seen_ids.contains(id));
        report.removed = before - index.jobs.len();
        for (id, summary) in fresh {
            index.jobs.insert(id, summary);
        }
        index.bad.retain(|name, _| seen_bad.contains(name));
        for (name, stamp) in newly_bad {
            index.bad.insert(name, stamp);
        }
        drop(index);
        self.ready.store(true, Ordering::Release);
        report
    }

    /// Every completed job's summary (unordered).
    pub fn summaries(&self) -> Vec<JobSummary> {
        self.inner.read().jobs.values().cloned().collect()
    }

    /// Whether `job_id` is indexed.
    pub fn contains(&self, job_id: &str) -> bool {
        self.inner.read().jobs.contains_key(job_id)
    }

    /// Number of indexed jobs.
    pub fn len(&self) -> usize {
        self.inner.read().jobs.len()
    }

    /// Whether no job is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The job's summary, if indexed.
    pub fn summary(&self, job_id: &str) -> Option<JobSummary> {
        self.inner.read().jobs.get(job_id).cloned()
    }

    /// Reads the job's terminal record. `Ok(None)` when the job is not
    /// indexed.
    pub fn read_job_end(&self, job_id: &str) -> Result<Option<JobEnd>, StoreError> {
        let Some(file_name) = self
            .inner
            .read()
            .jobs
            .get(job_id)
            .map(|s| s.file_name.clone())
        else {
            return Ok(None);
        };
        let path = self.dir.join(&*file_name);
        let line = terminal_line(&path)?;
        decode_job_end(&line).map(Some)
    }

    /// Rescans every `interval` until `stop` resolves. An interval of zero
    /// scans once (the list is pinned to startup).
    pub async fn rescan_every(
        self: Arc<Self>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let this = self.clone();
        let _ = tokio::task::spawn_blocking(move || this.rescan()).await;
        if interval.is_zero() {
            return;
        }
        tokio::pin!(stop);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let this = self.clone();
                    let _ = tokio::task::spawn_blocking(move || this.rescan()).await;
                }
                () = &mut stop => return,
            }
        }
    }
}

/// The summary of a completed log, from its footer when it has one.
pub fn read_summary(path: &Path) -> Result<JobEndSummary, StoreError> {
    let tail = TailLine::read(path)?;
    if let Some(footer) = tail.footer()? {
        return Ok(JobEndSummary {
            status: footer.status,
            queued_at: footer.queued_at,
            index: footer.index,
            dropped_records: footer.dropped_records,
        });
    }
    let line = tail.job_end_line(path)?;
    let env = envelope(&line)?;
    serde_json::from_str(env.data.get()).map_err(|e| StoreError::Malformed(e.to_string()))
}

/// The bytes of the log's `JobEnd` line.
pub fn terminal_line(path: &Path) -> Result<Vec<u8>, StoreError> {
    let tail = TailLine::read(path)?;
    if let Some(footer) = tail.footer()? {
        match read_at(
            path,
            footer.job_end_offset,
            footer.job_end_len,
            tail.file_len,
        ) {
            Ok(line) if is_job_end_line(&line) => return Ok(line),
            _ => log::warn!(
                "history: the footer of {} does not match the file (rewritten in place?); \
                 reading it the slow way",
                path.display()
            ),
        }
        return forward_scan(path);
    }
    tail.job_end_line(path)
}

fn decode_job_end(line: &[u8]) -> Result<JobEnd, StoreError> {
    let env = envelope(line)?;
    serde_json::from_str(env.data.get()).map_err(|e| StoreError::Malformed(e.to_string()))
}

fn envelope(line: &[u8]) -> Result<Envelope<'_>, StoreError> {
    let env: Envelope =
        serde_json::from_slice(line).map_err(|e| StoreError::Malformed(e.to_string()))?;
    if env.version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: env.version });
    }
    Ok(env)
}

fn is_job_end_line(line: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        ev: &'a str,
    }
    line.starts_with(b"{")
        && serde_json::from_slice::<Kind>(line)
            .map(|k| k.ev == kind::JOB_END)
            .unwrap_or(false)
}

/// Bytes read from the end of a file at a time.
const TAIL_CHUNK: u64 = 64 * 1024;
/// The longest line read whole (a `JobEnd` line of a very large job).
pub const MAX_LINE: u64 = 512 * 1024 * 1024;

/// The last line of a file, read backwards from the end.
struct TailLine {
    file_len: u64,
    /// The last non-blank line, without its newline.
    line: Vec<u8>,
}

impl TailLine {
    fn read(path: &Path) -> Result<Self, StoreError> {
        let mut file = File::open(path)?;
        let file_len = file.metadata()?.len();
        // `buf` holds the bytes `[start, file_len)`; it grows backwards by
        // chunks that double, so a long last line costs linear time.
        let mut buf: Vec<u8> = Vec::new();
        let mut start = file_len;
        while start > 0 {
            let step = TAIL_CHUNK.max(buf.len() as u64);
            let new_start = start.saturating_sub(step);
            let mut chunk = vec![0; (start - new_start) as usize];
            file.seek(SeekFrom::Start(new_start))?;
            file.read_exact(&mut chunk)?;
            chunk.extend_from_slice(&buf);
            buf = chunk;
            start = new_start;
            let Some(last) = buf.iter().rposition(|b| !b.is_ascii_whitespace()) else {
                continue;
            };
            let content = &buf[..=last];
            if let Some(nl) = content.iter().rposition(|&b| b == b'\n') {
                return Ok(Self {
                    file_len,
                    line: content[nl + 1..].to_vec(),
                });
            }
            if start == 0 {
                return Ok(Self {
                    file_len,
                    line: content.to_vec(),
                });
            }
            if file_len - start > MAX_LINE {
                return Err(StoreError::Malformed(format!(
                    "the last line is longer than {MAX_LINE} bytes"
                )));
            }
        }
        Err(StoreError::NoTerminalRecord)
    }

    /// The footer, when the last line is one.
    fn footer(&self) -> Result<Option<Footer>, StoreError> {
        let line = &self.line;
        #[derive(serde::Deserialize)]
        struct Kind<'a> {
            #[serde(borrow)]
            ev: &'a str,
            version: u32,
        }
        let Ok(k) = serde_json::from_slice::<Kind>(line) else {
            return Ok(None);
        };
        if k.ev != kind::FOOTER {
            return Ok(None);
        }
        if k.version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema { found: k.version });
        }
        let env = envelope(line)?;
        match serde_json::from_str::<Footer>(env.data.get()) {
            Ok(footer) => Ok(Some(footer)),
            Err(e) => Err(StoreError::Malformed(format!("footer: {e}"))),
        }
    }

    /// The `JobEnd` line of a log without a footer: the last line when it
    /// is one, else found by a forward scan.
    fn job_end_line(&self, path: &Path) -> Result<Vec<u8>, StoreError> {
        if is_job_end_line(&self.line) {
            Ok(self.line.clone())
        } else {
            forward_scan(path)
        }
    }
}

fn read_at(path: &Path, offset: u64, len: u64, file_len: u64) -> std::io::Result<Vec<u8>> {
    if offset.checked_add(len).is_none_or(|end| end > file_len) || len > MAX_LINE {
        return Err(std::io::Error::other("footer offsets are outside the file"));
    }
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0; len as usize];
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// The first `JobEnd` line, scanning from the start: the slow path, for
/// logs whose last record is something else.
fn forward_scan(path: &Path) -> Result<Vec<u8>, StoreError> {
    let reader = BufReader::new(File::open(path)?);
    for line in reader.split(b'\n') {
        let line = line?;
        if line.len() as u64 > MAX_LINE {
            continue;
        }
        if line.starts_with(b"{") && is_job_end_line(&line) {
            return Ok(line);
        }
    }
    Err(StoreError::NoTerminalRecord)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Footer, encode_line};

    fn job_end_line(id: &str, version: u32) -> String {
        format!(
            r#"{{"ev":"JobEnd","version":{version},"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"n","status":"Completed","job_status":"Completed.","start_time":2,"end_time":3,"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{"job_id":"{id}"}},"stages":{{"stages":[]}},"config":{{"k":"v"}},"dot":"digraph G {{}}"}}}}"#
        )
    }

    fn store(dir: &Path) -> LogStore {
        LogStore::new(dir, Arc::new(HistoryMetrics::unregistered()))
    }

    #[test]
    fn a_log_without_footer_is_served_from_its_last_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.eventlog"),
            format!(
                "{{\"ev\":\"JobStart\",\"version\":1,\"data\":{{}}}}\n{}\n",
                job_end_line("a", 1)
            ),
        )
        .unwrap();
        let s = store(dir.path());
        assert_eq!(s.rescan().read, 1);
        let end = s.read_job_end("a").unwrap().unwrap();
        assert_eq!(end.job.get(), r#"{"job_id":"a"}"#);
        assert_eq!(end.dot, "digraph G {}");
    }

    #[test]
    fn a_footer_locates_the_job_end_and_a_wrong_one_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let end = job_end_line("b", 1);
        let start = "{\"ev\":\"JobStart\",\"version\":1,\"data\":{}}\n";
        let footer = |offset: u64| {
            String::from_utf8(
                encode_line(
                    kind::FOOTER,
                    &Footer {
                        job_end_offset: offset,
                        job_end_len: end.len() as u64,
                        status: JobEndStatus::Succeeded,
                        queued_at: 1,
                        index: JobIndex {
                            job_id: "b".into(),
                            ..Default::default()
                        },
                        dropped_records: 0,
                    },
                )
                .unwrap(),
            )
            .unwrap()
        };
        let path = dir.path().join("b.eventlog");
        std::fs::write(
            &path,
            format!("{start}{end}\n{}", footer(start.len() as u64)),
        )
        .unwrap();
        assert_eq!(terminal_line(&path).unwrap(), end.as_bytes());
        // A log rewritten in place: the footer points into the wrong bytes.
        std::fs::write(&path, format!("{start}{start}{end}\n{}", footer(3))).unwrap();
        assert_eq!(terminal_line(&path).unwrap(), end.as_bytes());
    }

    #[test]
    fn bad_logs_are_skipped_and_hide_no_other_job() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("good.eventlog"),
            job_end_line("good", 1) + "\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("empty.eventlog"), "").unwrap();
        std::fs::write(
            dir.path().join("garbage.eventlog"),
            [0xff, 0x00, 0x13, b'\n'],
        )
        .unwrap();
        std::fs::write(
            dir.path().join("truncated.eventlog"),
            &job_end_line("truncated", 1)[..50],
        )
        .unwrap();
        std::fs::write(
            dir.path().join("newer.eventlog"),
            job_end_line("newer", 9) + "\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("running.eventlog.running"), "{").unwrap();
        let s = store(dir.path());
        let report = s.rescan();
        assert_eq!(report.bad, 4);
        assert_eq!(s.len(), 1);
        assert!(s.contains("good"));
        // Unchanged bad logs are not read (nor reported) again.
        assert_eq!(s.rescan(), ScanReport::default());
    }

    #[test]
    fn a_newer_schema_says_to_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.eventlog");
        std::fs::write(&path, job_end_line("n", 2) + "\n").unwrap();
        let err = read_summary(&path).unwrap_err();
        assert!(matches!(err, StoreError::NewerSchema { found: 2 }));
        assert!(err.to_string().contains("upgrade"));
    }

    #[test]
    fn deleted_logs_leave_the_index_on_the_next_pass() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.eventlog"), job_end_line("x", 1) + "\n").unwrap();
        let s = store(dir.path());
        s.rescan();
        assert!(s.contains("x"));
        std::fs::remove_file(dir.path().join("x.eventlog")).unwrap();
        assert_eq!(s.rescan().removed, 1);
        assert!(s.is_empty());
    }

    #[test]
    fn a_missing_directory_is_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir.path().join("later"));
        assert_eq!(s.rescan(), ScanReport::default());
        assert!(s.is_ready());
        std::fs::create_dir(dir.path().join("later")).unwrap();
        std::fs::write(
            dir.path().join("later/y.eventlog"),
            job_end_line("y", 1) + "\n",
        )
        .unwrap();
        s.rescan();
        assert!(s.contains("y"));
    }

    #[test]
    fn a_long_last_line_is_read_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(300_000);
        let line = job_end_line("big", 1).replace("digraph G {}", &big);
        let path = dir.path().join("big.eventlog");
        std::fs::write(
            &path,
            format!("{{\"ev\":\"JobStart\",\"version\":1,\"data\":{{}}}}\n{line}\n"),
        )
        .unwrap();
        assert_eq!(terminal_line(&path).unwrap(), line.as_bytes());
    }

    #[tokio::test(start_paused = true)]
    async fn rescans_pick_up_new_logs_on_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(store(dir.path()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(s.clone().rescan_every(Duration::from_secs(10), async {
            let _ = stop_rx.await;
        }));
        while !s.is_ready() {
            tokio::task::yield_now().await;
        }
        std::fs::write(dir.path().join("z.eventlog"), job_end_line("z", 1) + "\n").unwrap();
        assert!(!s.contains("z"));
        tokio::time::sleep(Duration::from_secs(11)).await;
        for _ in 0..100 {
            if s.contains("z") {
                break;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(s.contains("z"));
        stop_tx.send(()).unwrap();
        task.await.unwrap();
    }
}
