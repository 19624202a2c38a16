//! The server's side of the SQL workers: a worker process per query,
//! started ahead so a query seldom waits for one, limited by the kernel,
//! killed at the time limit or when its client goes away, and admitted
//! through a fixed number of slots and a bounded queue.
//!
//! A worker answers one query and exits, so nothing a query allocated
//! outlives it, and a worker that aborts (an allocation the kernel
//! refused, a stack overflow, a bug in an engine function) takes nothing
//! down but itself: the next query gets a fresh one.
//!
//! **Invariants:** a worker never runs without its limits: they are set
//! on it (`prlimit`) before it is handed a request. At most `workers`
//! queries run and `queue` wait; more are answered 503 at once. Every
//! query ends in exactly one outcome, counted in
//! `ballista_job_history_sql_queries_total{outcome}`. Dropping a query's
//! future or its answer's body kills its worker.

use crate::SqlError;
use crate::SqlLimits;
use crate::worker::{
    DATA, HEAD, Head, REFUSAL, REQUEST, Refusal, Request, Rows, WORKER_ENV, frames, split,
    write_frame,
};
use bjh_metrics::HistoryMetrics;
use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use rustix::process::{Pid, Resource, Rlimit, prlimit};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

/// What a worker's address space may hold beyond the memory pool, the
/// answer and the `jobs` rows: the executable, the runtime's threads and
/// stacks, the allocator's arenas and the engine's own state (a worker
/// waiting for its request maps about 350 MiB).
const HEADROOM: u64 = 1024 * 1024 * 1024;
/// What of a worker's standard error is kept for the log.
const STDERR_KEPT: usize = 8 * 1024;

/// Why a query ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    /// A SQL error, a refused statement, the memory pool.
    Refused,
    TooLarge,
    Timeout,
    /// The worker's address space ran out.
    Memory,
    /// The worker's CPU time ran out.
    Cpu,
    Crashed,
    /// No slot and no room in the queue.
    Busy,
    /// The client went away before the answer was sent.
    ClientGone,
    /// A body of a type any web page may send (not run).
    WrongType,
    /// Asked for by a page of another site (not run).
    CrossSite,
}

impl Outcome {
    #[cfg(test)]
    pub(crate) const ALL: [Outcome; 11] = [
        Outcome::Answered,
        Outcome::Refused,
        Outcome::TooLarge,
        Outcome::Timeout,
        Outcome::Memory,
        Outcome::Cpu,
        Outcome::Crashed,
        Outcome::Busy,
        Outcome::ClientGone,
        Outcome::WrongType,
        Outcome::CrossSite,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Refused => "refused",
            Outcome::TooLarge => "too_large",
            Outcome::Timeout => "timeout",
            Outcome::Memory => "memory_limit",
            Outcome::Cpu => "cpu_limit",
            Outcome::Crashed => "crashed",
            Outcome::Busy => "busy",
            Outcome::ClientGone => "client_gone",
            Outcome::WrongType => "wrong_type",
            Outcome::CrossSite => "cross_site",
        }
    }
}

/// One query's outcome, counted once: when it is settled, or as
/// [`Outcome::ClientGone`] when it is dropped unsettled.
struct Ticket {
    metrics: Arc<HistoryMetrics>,
    settled: bool,
}

impl Ticket {
    fn settle(&mut self, outcome: Outcome) {
        if !self.settled {
            self.settled = true;
            self.metrics
                .sql_queries
                .with_label_values(&[outcome.label()])
                .inc();
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.settle(Outcome::ClientGone);
    }
}

/// An answer on its way: its head, and its bytes as they come from the
/// worker.
pub(crate) struct Streamed {
    pub(crate) head: Head,
    pub(crate) body: BoxStream<'static, std::io::Result<Bytes>>,
}

/// The workers of one server.
pub(crate) struct Workers {
    program: PathBuf,
    limits: SqlLimits,
    slots: Arc<tokio::sync::Semaphore>,
    waiting: AtomicUsize,
    /// Started and waiting for a request.
    idle: Mutex<Vec<Child>>,
    metrics: Arc<HistoryMetrics>,
}

impl Workers {
    pub(crate) fn new(program: PathBuf, limits: SqlLimits, metrics: Arc<HistoryMetrics>) -> Self {
        Self {
            program,
            limits,
            slots: Arc::new(tokio::sync::Semaphore::new(limits.workers.max(1))),
            waiting: AtomicUsize::new(0),
            idle: Mutex::new(Vec::new()),
            metrics,
        }
    }

    fn spawn(&self) -> Result<Child, SqlError> {
        Command::new(&self.program)
            // Nothing of the server's environment (credentials included).
            .env_clear()
            .env(WORKER_ENV, std::process::id().to_string())
            // Two arenas keep the address space the allocator reserves
            // small, so the limit measures what the query holds.
            .env("MALLOC_ARENA_MAX", "2")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                log::error!(
                    "history: cannot start a SQL worker ({}): {e}",
                    self.program.display()
                );
                SqlError::Internal("the SQL worker cannot be started (see the server's log)".into())
            })
    }

    /// An idle worker, or a new one; another is started in its place.
    fn take(&self) -> Result<Child, SqlError> {
        let mut taken = None;
        {
            let mut idle = self.idle.lock();
            while let Some(mut child) = idle.pop() {
                if matches!(child.try_wait(), Ok(None)) {
                    taken = Some(child);
                    break;
                }
            }
        }
        let child = match taken {
            Some(child) => child,
            None => self.spawn()?,
        };
        self.refill();
        Ok(child)
    }

    /// Counts a query that was refused before it reached a worker.
    pub fn count(&self, outcome: Outcome) {
        self.metrics
            .sql_queries
            .with_label_values(&[outcome.label()])
            .inc();
    }

    /// Starts workers until as many wait as there are slots.
    fn refill(&self) {
        let mut idle = self.idle.lock();
        while idle.len() < self.limits.workers.max(1) {
            match self.spawn() {
                Ok(child) => idle.push(child),
                Err(_) => break,
            }
        }
    }

    /// Runs `request` on a worker, with `jobs` as the `jobs` rows when
    /// the request says so, under the limits; the answer's head once the
    /// worker has it, and its bytes as a stream.
    pub(crate) async fn ask(
        &self,
        request: Request,
        rows: Rows,
        started: Instant,
    ) -> Result<Streamed, SqlError> {
        let mut ticket = Ticket {
            metrics: self.metrics.clone(),
            settled: false,
        };
        let deadline = started + self.limits.timeout;
        let result = self.ask_with(&mut ticket, request, rows, deadline).await;
        if let Err(e) = &result {
            log::debug!("history: a SQL query was not answered: {e}");
        }
        result.map(|(head, stdout, child)| {
            let length = head.bytes;
            Streamed {
                head,
                body: body(stdout, child, ticket, deadline, self.limits, length),
            }
        })
    }

    async fn ask_with(
        &self,
        ticket: &mut Ticket,
        request: Request,
        rows: Rows,
        deadline: Instant,
    ) -> Result<(Head, Frames, Worker), SqlError> {
        let slot = self.admit(ticket, deadline).await?;
        let mut child = self.take()?;
        let jobs_bytes = rows.bytes();
        let address_space = (self.limits.memory as u64)
            .saturating_add(2 * self.limits.max_answer_bytes as u64)
            .saturating_add(2 * jobs_bytes as u64)
            .saturating_add(HEADROOM);
        if let Err(e) = limit(&child, address_space, self.limits) {
            log::error!("history: cannot limit a SQL worker: {e}");
            let _ = child.start_kill();
            ticket.settle(Outcome::Crashed);
            return Err(SqlError::Internal(
                "the SQL worker cannot be limited; the query was not run".into(),
            ));
        }
        let mut stdin = child.stdin.take().expect("piped");
        let mut stdout = FramedRead::new(child.stdout.take().expect("piped"), frames());
        let stderr = child.stderr.take().expect("piped");
        let stderr = tokio::spawn(keep_tail(stderr));
        let mut worker = Worker {
            child,
            stderr: Some(stderr),
            address_space,
            _slot: slot,
        };
        // Sent alongside the read below: a large `jobs` table fills the
        // pipe before the worker answers.
        let sending = async move {
            let header = serde_json::to_vec(&request).map_err(std::io::Error::other)?;
            let mut frame = Vec::with_capacity(header.len() + 5);
            write_frame(&mut frame, REQUEST, &header)?;
            stdin.write_all(&frame).await?;
            if request.with_jobs {
                send_rows(&mut stdin, &bjh_columnar::tables::JOBS, &rows.jobs).await?;
            }
            if request.with_usage {
                send_rows(&mut stdin, &bjh_columnar::tables::USAGE, &rows.usage).await?;
            }
            if request.with_whatif {
                send_rows(&mut stdin, &crate::whatif::WHATIF, &rows.whatif).await?;
            }
            if request.with_pairs {
                send_rows(&mut stdin, &crate::whatif::WHATIF_PAIRS, &rows.pairs).await?;
            }
            stdin.shutdown().await
        };
        let reading = read_frame(&mut stdout);
        let first = tokio::time::timeout_at(deadline, async {
            let (sent, read) = tokio::join!(sending, reading);
            // A worker that died while reading its request says so below.
            if let Err(e) = sent {
                log::debug!("history: a SQL request was not sent whole: {e}");
            }
            read
        })
        .await;
        let first = match first {
            Ok(first) => first,
            Err(_) => {
                worker.kill().await;
                ticket.settle(Outcome::Timeout);
                return Err(timed_out(self.limits));
            }
        };
        match first {
            Ok(Some((HEAD, bytes))) => {
                let head: Head = serde_json::from_slice(&bytes).map_err(|e| {
                    SqlError::Internal(format!("the SQL worker answered badly: {e}"))
                })?;
                Ok((head, stdout, worker))
            }
            Ok(Some((REFUSAL, bytes))) => {
                let refusal: Refusal = serde_json::from_slice(&bytes).map_err(|e| {
                    SqlError::Internal(format!("the SQL worker answered badly: {e}"))
                })?;
                ticket.settle(if refusal.too_large {
                    Outcome::TooLarge
                } else {
                    Outcome::Refused
                });
                Err(SqlError::BadRequest(refusal.message))
            }
            _ => {
                let (outcome, error) = worker.died(self.limits, deadline).await;
                ticket.settle(outcome);
                Err(error)
            }
        }
    }

    /// A slot, after waiting in the queue if need be; 503 when the queue
    /// is full.
    async fn admit(
        &self,
        ticket: &mut Ticket,
        deadline: Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, SqlError> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.limits.queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            ticket.settle(Outcome::Busy);
            return Err(SqlError::Busy(format!(
                "{} SQL queries are running and {} waiting (--sql-workers, --sql-queue); try again shortly",
                self.limits.workers.max(1),
                self.limits.queue
            )));
        }
        let waited = tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        match waited {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(SqlError::Internal("the SQL workers are shut down".into())),
            Err(_) => {
                ticket.settle(Outcome::Timeout);
                Err(timed_out(self.limits))
            }
        }
    }
}

fn timed_out(limits: SqlLimits) -> SqlError {
    SqlError::BadRequest(format!(
        "the query was stopped after {} s (--sql-timeout-seconds); its worker was killed",
        limits.timeout.as_secs_f64()
    ))
}

/// The kernel's limits on a worker: its address space, CPU time (a
/// second beyond twice the time limit: two threads computing), no files
/// written, no core dumps.
fn limit(child: &Child, address_space: u64, limits: SqlLimits) -> std::io::Result<()> {
    let pid = child
        .id()
        .and_then(|id| Pid::from_raw(id as i32))
        .ok_or_else(|| std::io::Error::other("the worker has exited"))?;
    let exactly = |n: u64| Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    let cpu = 2 * limits.timeout.as_secs().max(1) + 1;
    prlimit(Some(pid), Resource::As, exactly(address_space))?;
    prlimit(
        Some(pid),
        Resource::Cpu,
        Rlimit {
            current: Some(cpu),
            maximum: Some(cpu + 2),
        },
    )?;
    prlimit(Some(pid), Resource::Fsize, exactly(0))?;
    prlimit(Some(pid), Resource::Core, exactly(0))?;
    Ok(())
}

/// A table's rows as an Arrow IPC stream, batch by batch.
async fn send_rows(
    stdin: &mut tokio::process::ChildStdin,
    schema: &datafusion::arrow::datatypes::SchemaRef,
    jobs: &[RecordBatch],
) -> std::io::Result<()> {
    use datafusion::arrow::ipc::writer::StreamWriter;
    let mut writer = StreamWriter::try_new(Vec::new(), schema).map_err(std::io::Error::other)?;
    stdin.write_all(&std::mem::take(writer.get_mut())).await?;
    for batch in jobs {
        writer.write(batch).map_err(std::io::Error::other)?;
        stdin.write_all(&std::mem::take(writer.get_mut())).await?;
    }
    writer.finish().map_err(std::io::Error::other)?;
    stdin.write_all(&std::mem::take(writer.get_mut())).await
}

/// A worker's answer, frame by frame (`tokio-util`'s decoder: a frame
/// over [`MAX_FRAME`](crate::worker::MAX_FRAME) is an error, not an
/// allocation).
type Frames = FramedRead<ChildStdout, tokio_util::codec::LengthDelimitedCodec>;

/// The next frame's tag and bytes; `None` at the end of the answer.
async fn read_frame(frames: &mut Frames) -> std::io::Result<Option<(u8, Bytes)>> {
    frames.next().await.transpose().map(|f| f.map(split))
}

/// The last [`STDERR_KEPT`] bytes a worker wrote to its standard error.
async fn keep_tail(mut stderr: tokio::process::ChildStderr) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * STDERR_KEPT {
            kept.drain(..kept.len() - STDERR_KEPT);
        }
    }
    kept
}

/// A worker at work.
struct Worker {
    child: Child,
    stderr: Option<tokio::task::JoinHandle<Vec<u8>>>,
    address_space: u64,
    /// Its slot, held until its answer is sent or dropped.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Worker {
    async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Why a worker ended without answering: its exit status and what it
    /// wrote to its standard error.
    async fn died(&mut self, limits: SqlLimits, deadline: Instant) -> (Outcome, SqlError) {
        let status = match tokio::time::timeout_at(deadline, self.child.wait()).await {
            Ok(Ok(status)) => status,
            _ => {
                self.kill().await;
                return (Outcome::Timeout, timed_out(limits));
            }
        };
        let stderr = match self.stderr.take() {
            Some(task) => task.await.unwrap_or_default(),
            None => Vec::new(),
        };
        let stderr = String::from_utf8_lossy(&stderr);
        log::warn!(
            "history: a SQL worker ended without an answer ({status}): {}",
            stderr.trim()
        );
        let (outcome, message) = explain(status, &stderr, self.address_space, limits);
        let error = match outcome {
            Outcome::Crashed => SqlError::Internal(message),
            _ => SqlError::BadRequest(message),
        };
        (outcome, error)
    }
}

/// What a worker's exit says about its query.
fn explain(
    status: std::process::ExitStatus,
    stderr: &str,
    address_space: u64,
    limits: SqlLimits,
) -> (Outcome, String) {
    use std::os::unix::process::ExitStatusExt;
    let signal = status.signal();
    const SIGABRT: i32 = 6;
    const SIGXCPU: i32 = 24;
    if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
        (
            Outcome::Memory,
            format!(
                "the query needed more memory than its worker may use ({}); its worker was stopped, \
                 nothing else was affected",
                bytesize::ByteSize::b(address_space).display().iec()
            ),
        )
    } else if signal == Some(SIGXCPU) {
        (
            Outcome::Cpu,
            format!(
                "the query used up its CPU time ({} s); its worker was stopped",
                2 * limits.timeout.as_secs().max(1) + 1
            ),
        )
    } else {
        let how = match signal {
            Some(SIGABRT) => "aborted".to_string(),
            Some(s) => format!("was killed by signal {s}"),
            None => format!("exited with {}", status.code().unwrap_or(-1)),
        };
        (
            Outcome::Crashed,
            format!(
                "the query's worker {how}; nothing else was affected, and the next query gets a new one"
            ),
        )
    }
}

/// The answer's bytes from the worker; the worker is killed if the body
/// is dropped before its end, or at the time limit. The answer counts as
/// answered once its last byte is handed over (a client that knows the
/// length stops reading there).
fn body(
    stdout: Frames,
    worker: Worker,
    ticket: Ticket,
    deadline: Instant,
    limits: SqlLimits,
    length: usize,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    let state = Some((stdout, worker, ticket, length));
    Box::pin(futures::stream::unfold(state, move |state| async move {
        let (mut stdout, mut worker, mut ticket, left) = state?;
        if left == 0 {
            ticket.settle(Outcome::Answered);
            return None;
        }
        match tokio::time::timeout_at(deadline, read_frame(&mut stdout)).await {
            Ok(Ok(Some((DATA, bytes)))) if bytes.len() <= left => {
                let left = left - bytes.len();
                if left == 0 {
                    ticket.settle(Outcome::Answered);
                }
                Some((Ok(bytes), Some((stdout, worker, ticket, left))))
            }
            Ok(Ok(_)) | Ok(Err(_)) => {
                let (outcome, error) = worker.died(limits, deadline).await;
                ticket.settle(outcome);
                Some((Err(std::io::Error::other(error.to_string())), None))
            }
            Err(_) => {
                worker.kill().await;
                ticket.settle(Outcome::Timeout);
                Some((
                    Err(std::io::Error::other(timed_out(limits).to_string())),
                    None,
                ))
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn every_outcome_has_the_label_the_metrics_export() {
        let labels: Vec<&str> = Outcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels, bjh_metrics::SQL_OUTCOMES);
    }

    #[test]
    fn a_worker_s_end_is_explained_by_its_signal_and_its_last_words() {
        let limits = SqlLimits::default();
        let abort = std::process::ExitStatus::from_raw(6);
        let (outcome, message) = explain(
            abort,
            "memory allocation of 4611686018427387903 bytes failed\n",
            1 << 31,
            limits,
        );
        assert_eq!(outcome, Outcome::Memory);
        assert!(message.contains("2.0 GiB"), "{message}");
        assert_eq!(explain(abort, "", 1, limits).0, Outcome::Crashed);
        assert_eq!(
            explain(std::process::ExitStatus::from_raw(24), "", 1, limits).0,
            Outcome::Cpu
        );
        assert_eq!(
            explain(std::process::ExitStatus::from_raw(11), "", 1, limits).0,
            Outcome::Crashed
        );
        // An exit code, not a signal: 101 is a panic.
        let (outcome, message) =
            explain(std::process::ExitStatus::from_raw(101 << 8), "", 1, limits);
        assert_eq!(outcome, Outcome::Crashed);
        assert!(message.contains("exited with 101"), "{message}");
    }
}
