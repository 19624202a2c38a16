//! A pass that stops when asked. A server told to stop (SIGTERM) while a
//! rescan reads many logs (the first pass over a large directory or a
//! bucket, which may take hours) does not wait for the pass to end: the
//! logs are read a slice at a time, and once asked to stop the pass takes
//! in what it has read (saved with the index on the way out) and leaves
//! the rest. The next pass, after a restart from that index, finds the
//! logs taken in unchanged and reads only the rest: a server stopped
//! again and again still gets through a directory, a slice at least each
//! time. The rescans' loop (`rescan_every`) lives here too: it passes a
//! server's stop on to the pass under way.

use crate::LogStore;
use crate::location::Stamp;
use crate::scan::{Found, Pass, ScanReport};
use crate::summary::JobSummary;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Logs read between two looks at whether to stop (about a second's
/// reading of an object store by its readers).
#[cfg(not(test))]
pub(crate) const SLICE: usize = 4096;
#[cfg(test)]
pub(crate) const SLICE: usize = 16;

impl LogStore {
    /// Asks the pass under way, and every later one, to stop after the
    /// slice of logs it is reading: what it read is taken in, the rest is
    /// left to the next pass (a pass always reads one slice at least).
    pub fn stop_passes(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Reads a pass's logs and takes them in: all at once, or, with more
    /// to read than [`LogStore::pass_chunk`], a chunk at a time, each
    /// moved to the segments before the next is read (what the pass
    /// removes goes with the first); a slice at a time either way, until
    /// asked to stop. A log left unread is left as the store held it: an
    /// unfinished job's log read before stays listed.
    pub(crate) fn read_and_take_in(
        &self,
        pass: &mut Pass,
        published: HashMap<String, JobSummary>,
    ) -> ScanReport {
        let chunked = self.pass_chunk().filter(|&c| pass.to_read.len() > c);
        let chunk = chunked.unwrap_or(usize::MAX);
        let all = std::mem::take(&mut pass.to_read);
        // The unfinished jobs whose logs are to be read again: kept while
        // a chunk before theirs is taken in, or when the pass stops first.
        let reread: Vec<(usize, Arc<str>)> = (all.iter().enumerate())
            .filter_map(|(i, (name, _))| {
                let known = pass.known_unfinished.get(name.as_str())?;
                Some((i, known.job_id.clone()))
            })
            .collect();
        let (mut report, mut published, mut at) = (ScanReport::default(), Some(published), 0);
        while at < all.len() || published.is_some() {
            let end = all.len().min(at.saturating_add(chunk));
            let results = self.read_until_stopped(pass, &all[at..end]);
            let read = results.len();
            pass.to_read = all[at..at + read].to_vec();
            let later = reread.iter().filter(|(i, _)| *i >= at + read);
            pass.seen_unfinished.extend(later.map(|(_, id)| id.clone()));
            let took = self.take_in(pass, results, published.take().unwrap_or_default());
            report.read += took.read;
            report.removed += took.removed;
            report.bad += took.bad;
            pass.gone.clear();
            pass.cold_gone.clear();
            at += read;
            if chunked.is_some() {
                self.spill_logged();
            }
            if self.stopping() {
                if at < all.len() {
                    log::info!(
                        "history: stopping: {} logs left to the next pass",
                        all.len() - at
                    );
                }
                break;
            }
        }
        pass.to_read.clear();
        report
    }

    /// The results of reading `names` a slice at a time, in order, up to
    /// the slice during which the store was asked to stop.
    fn read_until_stopped(
        &self,
        pass: &Pass,
        names: &[(String, Stamp)],
    ) -> Vec<Result<Found, crate::StoreError>> {
        let mut results = Vec::with_capacity(names.len());
        for slice in names.chunks(SLICE) {
            results.extend(self.read_new(pass, slice));
            if self.stopping() {
                break;
            }
        }
        results
    }

    /// Rescans every `interval` until `stop` resolves. An interval of zero
    /// scans once (the list is pinned to startup). A pass under way when
    /// `stop` resolves is asked to stop ([`LogStore::stop_passes`]), and
    /// what it read is saved with the index.
    pub async fn rescan_every(
        self: Arc<Self>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let this = self.clone();
        let first = tokio::task::spawn_blocking(move || {
            this.load_persisted();
            this.rescan();
        });
        let stopped = self.until_stopped(first, stop.as_mut()).await;
        self.persist_blocking(true).await;
        if stopped || interval.is_zero() {
            return;
        }
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let this = self.clone();
                    let pass = tokio::task::spawn_blocking(move || {
                        this.rescan();
                    });
                    let stopped = self.until_stopped(pass, stop.as_mut()).await;
                    self.persist_blocking(stopped).await;
                    if stopped {
                        return;
                    }
                }
                () = stop.as_mut() => {
                    self.persist_blocking(true).await;
                    return;
                }
            }
        }
    }

    /// Waits for the pass `task`; when `stop` comes first, asks it to
    /// stop ([`LogStore::stop_passes`]) and waits for it still. Whether
    /// `stop` came.
    async fn until_stopped(
        &self,
        task: tokio::task::JoinHandle<()>,
        stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) -> bool {
        tokio::pin!(task);
        tokio::select! {
            // A stop already come is heard before a pass that ended.
            biased;
            () = stop => {
                self.stop_passes();
                let _ = task.await;
                true
            }
            _ = &mut task => false,
        }
    }

    /// [`LogStore::persist`] on a blocking thread.
    async fn persist_blocking(self: &Arc<Self>, force: bool) {
        let this = self.clone();
        let _ = tokio::task::spawn_blocking(move || this.persist(force)).await;
    }
}
