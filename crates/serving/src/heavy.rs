//! The CPU-heavy work of a request: a job's tasks read and replayed (the
//! what-if and its curve, the accuracy grades, the advice of a
//! diagnosis), a diagnosis, a stored `/stages` answer parsed for a
//! replay. A log of a million replay units takes a second of CPU a
//! replay, and on a live scheduler the async threads also serve the
//! executors' gRPC, so such work never runs on them:
//!
//! - each piece runs on the runtime's blocking pool, at most
//!   [`at_once`] at a time in the process (the cores less one, so one is
//!   always left to the async threads); the others wait holding no
//!   thread;
//! - a client (an address, `clients::Client`) has at most
//!   [`PER_CLIENT`] requests of such routes under way or waiting, the
//!   server [`WAITING`] (past them, 429 and 503): the layer
//!   `one_share` in front of the routes that do such work;
//! - what a piece computes is kept by the identity of the logs it read
//!   (`LogRef::identity`: a path with its size and modification time, an
//!   object with its length) and the question: the same question about
//!   unchanged logs is answered from it. Answers are kept in an LRU of
//!   [`KEPT`] entries, a job's loaded replay input (its tasks, the
//!   larger thing) in one of [`KEPT_WORKS`] (the `lru` crate: a bounded
//!   map that forgets the least recently used).
//!
//! **Invariant:** no request of these routes computes on an async
//! thread; a kept answer is given only for the logs it was computed from,
//! as they were (a log replaced or grown has another identity).

use crate::clients::{Client, Refused, Shares};
use crate::error::ApiError;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lru::LruCache;
use parking_lot::Mutex;
use std::any::Any;
use std::num::NonZeroUsize;
use std::sync::{Arc, LazyLock};

/// Requests of the heavy routes one client may have under way or waiting.
pub const PER_CLIENT: usize = 4;
/// Requests of the heavy routes the server has under way or waiting.
pub const WAITING: usize = 64;
/// Answers kept (a what-if answer, a pair's grade, a diagnosis: some
/// kilobytes each).
pub const KEPT: usize = 512;
/// Jobs' replay inputs kept (a job of a million tasks is tens of MB).
pub const KEPT_WORKS: usize = 8;

/// Pieces of work run at once in the process: the cores less one, at
/// least one.
pub fn at_once() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .max(1)
}

type Kept = Arc<dyn Any + Send + Sync>;

/// The process's gate, shares and kept answers: one for every server in
/// it (they share the runtime's blocking threads and its cores).
pub(crate) struct Heavy {
    gate: tokio::sync::Semaphore,
    shares: Arc<Shares>,
    answers: Mutex<LruCache<String, Kept>>,
    works: Mutex<LruCache<String, Kept>>,
}

static HEAVY: LazyLock<Heavy> = LazyLock::new(|| Heavy {
    gate: tokio::sync::Semaphore::new(at_once()),
    shares: Shares::new(WAITING, PER_CLIENT),
    answers: Mutex::new(LruCache::new(
        NonZeroUsize::new(KEPT).unwrap_or(NonZeroUsize::MIN),
    )),
    works: Mutex::new(LruCache::new(
        NonZeroUsize::new(KEPT_WORKS).unwrap_or(NonZeroUsize::MIN),
    )),
});

/// The process's heavy work.
pub(crate) fn shared() -> &'static Heavy {
    &HEAVY
}

/// Which of the two kept maps a piece's answer goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// A small answer.
    Answer,
    /// A job's replay input.
    Work,
}

impl Heavy {
    fn map(&self, keep: Keep) -> &Mutex<LruCache<String, Kept>> {
        match keep {
            Keep::Answer => &self.answers,
            Keep::Work => &self.works,
        }
    }

    /// What was kept for `key`, if anything.
    pub(crate) fn kept<T: Clone + 'static>(&self, keep: Keep, key: &str) -> Option<T> {
        let kept = self
            .map(keep)
            .lock()
            .get(key)
            .and_then(|k| k.downcast_ref::<T>().cloned());
        if kept.is_some() {
            bjh_metrics::HistoryMetrics::global().heavy_kept.inc();
        }
        kept
    }

    /// Runs `work` on a blocking thread once the gate lets it, unless an
    /// answer is kept for `key` (then that); keeps what it computed.
    /// `what` names the work in an error.
    pub(crate) async fn run<T>(
        &self,
        keep: Keep,
        key: String,
        what: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError>
    where
        T: Clone + Send + Sync + 'static,
    {
        if let Some(answer) = self.kept(keep, &key) {
            return Ok(answer);
        }
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|e| ApiError::Internal(format!("{what}: {e}")))?;
        // Computed by another request while this one waited.
        if let Some(answer) = self.kept(keep, &key) {
            return Ok(answer);
        }
        bjh_metrics::HistoryMetrics::global().heavy_computed.inc();
        let answer = tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ApiError::Internal(format!("{what} failed: {e}")))?;
        self.map(keep).lock().put(key, Arc::new(answer.clone()));
        Ok(answer)
    }
}

/// The layer in front of the heavy routes: the request's client takes a
/// share for as long as its answer is being made; past its share, 429,
/// past the server's, 503.
pub(crate) async fn one_share(request: Request, next: Next) -> Response {
    let client = Client::of_request(request.extensions());
    match shared().shares.take(client) {
        Ok(_share) => next.run(request).await,
        Err(Refused::Client) => ApiError::TooMany(format!(
            "{PER_CLIENT} replays, diagnoses or comparisons of this client are under way \
             already; ask again when one has been answered"
        ))
        .into_response(),
        Err(Refused::Server) => ApiError::Busy(format!(
            "{WAITING} replays, diagnoses or comparisons are under way; ask again soon"
        ))
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_is_computed_once_for_one_key_however_many_ask_at_once() {
        let heavy = shared();
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let key = format!("test|{}", std::process::id());
        let asked = futures::future::join_all((0..8).map(|_| {
            let runs = runs.clone();
            heavy.run(Keep::Answer, key.clone(), "a test", move || {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                7u64
            })
        }))
        .await;
        assert!(asked.iter().all(|a| matches!(a, Ok(7))));
        // The first through the gate computes; the waiters find it kept.
        let ran = runs.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=at_once()).contains(&ran), "computed {ran} times");
        // Asked again: kept, not computed.
        let again = heavy.run(Keep::Answer, key, "a test", || 8u64).await;
        assert_eq!(again.unwrap(), 7);
    }
}
