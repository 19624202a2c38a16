//! Jobs the writer hands over as their logs complete, waiting to be added
//! to the columnar history from their records, without reading their logs
//! again.
//!
//! Only while the columnar history is in use (SQL was asked, or its files
//! are there from an earlier run): a server whose SQL is never used keeps
//! nothing. A job waits until the store lists it (at once for a directory;
//! after its upload and the next listing for an object store). Memory is
//! bounded: past [`MAX_QUEUED_TASKS`] task records, or after
//! [`MAX_WAIT`], a job is let go and its log is read instead, as are the
//! jobs of a process that stopped before adding them.

use bjh_format::record::WrittenJob;
use bjh_format::written::WrittenJobs;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Task records waiting at most, over all jobs.
pub const MAX_QUEUED_TASKS: usize = 2_000_000;
/// How long a job waits for the store to list it.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// The jobs waiting.
#[derive(Debug, Default)]
pub struct Fresh {
    in_use: AtomicBool,
    tasks: AtomicUsize,
    queue: Mutex<VecDeque<(Instant, Arc<WrittenJob>)>>,
}

impl Fresh {
    /// Nothing waiting, and nothing wanted until [`Fresh::start`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The columnar history is in use: jobs are wanted from now on.
    pub fn start(&self) {
        self.in_use.store(true, Ordering::Relaxed);
    }

    /// Takes the waiting jobs `listed` says the store lists; lets go of
    /// those that waited past [`MAX_WAIT`].
    pub fn take(&self, listed: impl Fn(&str) -> bool) -> Vec<Arc<WrittenJob>> {
        let mut queue = self.queue.lock();
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(queue.len());
        for (at, job) in queue.drain(..) {
            if listed(&job.start.job_id) {
                taken.push(job);
            } else if at.elapsed() < MAX_WAIT {
                kept.push_back((at, job));
            }
        }
        *queue = kept;
        let left = queue.iter().map(|(_, j)| tasks_of(j)).sum();
        self.tasks.store(left, Ordering::Relaxed);
        taken
    }
}

impl WrittenJobs for Fresh {
    fn wanted(&self) -> bool {
        self.in_use.load(Ordering::Relaxed) && self.tasks.load(Ordering::Relaxed) < MAX_QUEUED_TASKS
    }

    fn completed(&self, job: Arc<WrittenJob>) {
        let n = tasks_of(&job);
        if !self.in_use.load(Ordering::Relaxed)
            || self.tasks.load(Ordering::Relaxed) + n > MAX_QUEUED_TASKS
        {
            return;
        }
        self.tasks.fetch_add(n, Ordering::Relaxed);
        self.queue.lock().push_back((Instant::now(), job));
    }
}

/// A job's task records.
fn tasks_of(job: &WrittenJob) -> usize {
    job.tasks.iter().map(Vec::len).sum()
}
