//! The walks over every job that requests ask for (the recurring queries,
//! the what-if accuracy route's pairs, the clusters): seconds each over
//! millions of jobs on disk, on the runtime's blocking threads, which the
//! scheduler shares. However many requests come at once, at most
//! [`AT_ONCE`] walks run (the others wait, holding no thread); and an
//! answer that does not depend on the time is kept with the store's
//! version it was walked at, so the same question asked again (or by
//! many clients at once) while the jobs have not changed is answered
//! from it, not walked again.
//!
//! **Invariant:** a kept answer is given only for the store it was
//! walked over (held weakly: a store dropped takes its answers' validity
//! with it) at the version it had when the walk began; any change of the
//! jobs after that makes the next request walk again.

use crate::error::ApiError;
use bjh_store::LogStore;
use parking_lot::Mutex;
use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Arc, LazyLock, Weak};

/// Walks running at most, over every store of the process.
pub const AT_ONCE: usize = 2;
/// Answers kept at most (the newest): a recurring-queries answer of
/// 10,000 rows is some megabytes.
const KEPT: usize = 4;

/// The process's walks: one gate for every server in it (they share the
/// runtime's blocking threads).
static WALKS: LazyLock<Walks> = LazyLock::new(Walks::default);

pub(crate) struct Walks {
    gate: tokio::sync::Semaphore,
    kept: Mutex<VecDeque<Kept>>,
}

impl Default for Walks {
    fn default() -> Self {
        Self {
            gate: tokio::sync::Semaphore::new(AT_ONCE),
            kept: Mutex::new(VecDeque::new()),
        }
    }
}

struct Kept {
    store: Weak<LogStore>,
    version: u64,
    key: String,
    answer: Arc<dyn Any + Send + Sync>,
}

impl Walks {
    fn kept<T: Clone + 'static>(&self, store: &Arc<LogStore>, key: &str) -> Option<T> {
        let version = store.version();
        let kept = self.kept.lock();
        kept.iter()
            .find(|k| {
                k.version == version
                    && k.key == key
                    && k.store.upgrade().is_some_and(|s| Arc::ptr_eq(&s, store))
            })
            .and_then(|k| k.answer.downcast_ref::<T>().cloned())
    }

    fn keep<T: Send + Sync + 'static>(
        &self,
        store: &Arc<LogStore>,
        version: u64,
        key: String,
        answer: T,
    ) {
        let mut kept = self.kept.lock();
        kept.retain(|k| k.store.strong_count() > 0 && !(k.key == key && k.version != version));
        kept.push_back(Kept {
            store: Arc::downgrade(store),
            version,
            key,
            answer: Arc::new(answer),
        });
        while kept.len() > KEPT {
            kept.pop_front();
        }
    }
}

/// The process's walks.
pub(crate) fn shared() -> &'static Walks {
    &WALKS
}

impl Walks {
    /// Runs `walk` over `store` on a blocking thread once a walk may run;
    /// with a `key` (the question, parameters included), an answer kept
    /// for it at the store's version is given instead, and the answer
    /// walked is kept. `what` names the walk in an error.
    pub(crate) async fn walk<T>(
        &self,
        store: &Arc<LogStore>,
        key: Option<String>,
        what: &str,
        walk: impl FnOnce(&LogStore) -> T + Send + 'static,
    ) -> Result<T, ApiError>
    where
        T: Clone + Send + Sync + 'static,
    {
        if let Some(answer) = key.as_deref().and_then(|k| self.kept(store, k)) {
            return Ok(answer);
        }
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|e| ApiError::Internal(format!("{what}: {e}")))?;
        // Walked by another request while this one waited.
        if let Some(answer) = key.as_deref().and_then(|k| self.kept(store, k)) {
            return Ok(answer);
        }
        // Before the walk: a change during it makes the next request walk.
        let version = store.version();
        let walked = store.clone();
        let answer = tokio::task::spawn_blocking(move || walk(&walked))
            .await
            .map_err(|e| ApiError::Internal(format!("{what} failed: {e}")))?;
        if let Some(key) = key {
            self.keep(store, version, key, answer.clone());
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn store_with(dir: &std::path::Path, ids: &[&str]) -> Arc<LogStore> {
        for id in ids {
            write_log(dir, id);
        }
        let store = Arc::new(LogStore::new(
            dir,
            Arc::new(bjh_metrics::HistoryMetrics::unregistered()),
        ));
        store.rescan();
        store
    }

    fn write_log(dir: &std::path::Path, id: &str) {
        let line = format!(
            r#"{{"ev":"JobEnd","version":1,"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"n","status":"Completed","job_status":"Completed.","start_time":2,"end_time":3,"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{}},"stages":{{}},"config":{{}},"dot":"","dropped_records":0}}}}"#
        );
        std::fs::write(dir.join(format!("{id}.eventlog")), line + "\n").unwrap();
    }

    /// Eight walks asked at once: never more than [`AT_ONCE`] run
    /// together (each waits, inside the walk, until the test lets it go,
    /// one at a time as walks start), and every one is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn walks_asked_at_once_run_at_most_two_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), &["a"]);
        let walks = Arc::new(Walks::default());
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (started, heard) = std::sync::mpsc::channel::<()>();
        let (free, freed) = shared_receiver();
        let asks: Vec<_> = (0..8)
            .map(|i| {
                let (store, running, most) = (store.clone(), running.clone(), most.clone());
                let (started, freed, walks) = (started.clone(), freed.clone(), walks.clone());
                tokio::spawn(async move {
                    walks
                        .walk(&store, Some(format!("k{i}")), "a test walk", move |s| {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            started.send(()).unwrap();
                            freed.lock().unwrap().recv().unwrap();
                            running.fetch_sub(1, Ordering::SeqCst);
                            s.len()
                        })
                        .await
                })
            })
            .collect();
        // Let one walk go each time one starts.
        for _ in 0..8 {
            heard.recv().unwrap();
            free.send(()).unwrap();
        }
        for ask in asks {
            assert_eq!(ask.await.unwrap().unwrap(), 1);
        }
        assert!(most.load(Ordering::SeqCst) <= AT_ONCE, "{most:?}");
    }

    /// A channel whose receiving end the walks share.
    fn shared_receiver() -> (
        std::sync::mpsc::Sender<()>,
        Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        (tx, Arc::new(std::sync::Mutex::new(rx)))
    }

    /// The same question asked again while the jobs have not changed is
    /// answered without a walk; once they change (a new log), walked
    /// again; another store's answer is never given.
    #[tokio::test]
    async fn an_answer_is_kept_while_the_jobs_do_not_change() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), &["a", "b"]);
        let gate = Arc::new(Walks::default());
        let walks = Arc::new(AtomicUsize::new(0));
        let ask = |store: &Arc<LogStore>| {
            let (store, walks, gate) = (store.clone(), walks.clone(), gate.clone());
            async move {
                gate.walk(&store, Some("count".into()), "a test walk", move |s| {
                    walks.fetch_add(1, Ordering::SeqCst);
                    s.len()
                })
                .await
                .unwrap()
            }
        };
        assert_eq!(ask(&store).await, 2);
        assert_eq!(ask(&store).await, 2);
        assert_eq!(walks.load(Ordering::SeqCst), 1, "kept");
        // Another store at the same version: walked, not given the first's.
        let twin_dir = tempfile::tempdir().unwrap();
        let twin = store_with(twin_dir.path(), &["x", "y"]);
        assert_eq!(twin.version(), store.version());
        assert_eq!(ask(&twin).await, 2);
        assert_eq!(walks.load(Ordering::SeqCst), 2, "another store: walked");
        write_log(dir.path(), "c");
        store.rescan();
        assert_eq!(ask(&store).await, 3);
        assert_eq!(
            walks.load(Ordering::SeqCst),
            3,
            "walked again after a change"
        );
        // Without a key: walked each time.
        for _ in 0..2 {
            let w = walks.clone();
            gate.walk(&store, None, "a test walk", move |_| {
                w.fetch_add(1, Ordering::SeqCst)
            })
            .await
            .unwrap();
        }
        assert_eq!(walks.load(Ordering::SeqCst), 5);
    }
}
