//! Rescans: listing the directory or prefix, reading only new or changed
//! logs, and loading and saving the persistent snapshot of the catalog.
//!
//! **Invariant:** a rescan of an unchanged directory costs one `stat` per
//! file and opens nothing. A `*.eventlog.running` file that grew is read
//! from where the last pass stopped, complete lines only.

use super::*;
use crate::parallel::{PARALLEL_FROM, REMOTE_READERS, local_readers, parallel_map};
use crate::published::Covered;

/// Logs of a directory stamped between two looks at whether to stop (a
/// few seconds of `stat`s at most). A few in unit tests.
const STAMP_CHUNK: usize = if cfg!(test) { 64 } else { 65_536 };

/// The log-named entries of a directory or a store prefix, with stamps.
pub(super) enum Entries {
    Local(std::vec::IntoIter<(String, Stamp)>),
    Remote(std::vec::IntoIter<crate::remote::Listed>),
}

impl Iterator for Entries {
    type Item = (String, Stamp);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Local(entries) => entries.next(),
            Self::Remote(listed) => listed.next().map(|l| (l.name, l.stamp)),
        }
    }
}

/// One id, one log: the names of a listing to leave out because a twin
/// of theirs is the job's log. A directory can hold `<id>.eventlog` and
/// `<id>.eventlog.zst` (or the two running kinds) only if someone put one
/// there: our writer takes a name no file has. The plain log wins, as the
/// one upstream's reader can read too; the rule depends on the names
/// alone, so every rescan picks the same log whatever the listing order.
pub(super) fn twins_left_out<'a>(names: impl Iterator<Item = &'a str>) -> HashSet<String> {
    let mut plain: HashSet<(&str, bool)> = HashSet::new();
    let mut zstd: Vec<(&str, bool, &str)> = Vec::new();
    for name in names {
        if let Some(n) = LogName::parse(name) {
            if n.zstd {
                zstd.push((n.stem, n.running, name));
            } else {
                plain.insert((n.stem, n.running));
            }
        }
    }
    zstd.into_iter()
        .filter(|(stem, running, _)| plain.contains(&(*stem, *running)))
        .map(|(_, _, name)| name.to_string())
        .collect()
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

/// One rescan's view of the listing, between sorting it out and taking
/// what was read into the catalog.
#[derive(Default)]
pub(super) struct Pass {
    /// Unfinished jobs known before the pass, by file name.
    pub(super) known_unfinished: HashMap<Arc<str>, Unfinished>,
    /// Completed jobs listed unchanged.
    seen: HashSet<ById>,
    /// Unfinished jobs listed (unchanged, or read again).
    pub(super) seen_unfinished: HashSet<Arc<str>>,
    /// Unreadable logs listed.
    pub(super) seen_bad: HashSet<String>,
    /// New or changed logs, to read.
    pub(super) to_read: Vec<(String, Stamp)>,
    /// The names the listing covered: a job not listed is gone only if
    /// its name is among them.
    pub(super) covered: Covered,
    /// New logs listed as a published summary describes them.
    from_segments: Vec<JobSummary>,
    /// Logs a manifest says were removed and the store says are gone.
    pub(super) gone: HashSet<String>,
    /// The segments' jobs (`cold`) the listing covered and did not name.
    pub(super) cold_gone: Vec<Arc<JobSummary>>,
}

pub(super) enum Found {
    Completed(JobSummary),
    Unfinished(Unfinished),
}

/// The [`CatalogSets`] of `jobs`, built side by side (the ordered set on a
/// thread of its own; the rest in one pass over `jobs`, in their order).
fn catalog_sets(jobs: &[Arc<JobSummary>]) -> CatalogSets {
    std::thread::scope(|scope| {
        let order = scope.spawn(|| {
            jobs.iter()
                .map(|j| ByPosition(j.clone()))
                .collect::<BTreeSet<_>>()
        });
        let mut sets = CatalogSets {
            ids: HashSet::with_capacity(jobs.len()),
            ..CatalogSets::default()
        };
        for job in jobs {
            if job.file == FileKind::Named {
                sets.odd_names
                    .insert(job.file_name().into(), job.job_id().into());
            }
            sets.count(job);
            sets.ids.insert(ById(job.clone()));
        }
        sets.order = order
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        sets
    })
}

impl LogStore {
    /// The listing of a pass: the log-named entries, the names it
    /// covered, and the summaries of newly published segments.
    #[allow(clippy::type_complexity)]
    pub(super) fn entries(
        &self,
    ) -> std::io::Result<(Entries, Covered, Vec<JobSummary>, HashSet<String>)> {
        match &self.remote {
            Some(dir) => self.remote_listing(dir).map(|mut listing| {
                let out = twins_left_out(listing.listed.iter().map(|l| l.name.as_str()));
                self.warn_twins(&out);
                listing.listed.retain(|l| !out.contains(&l.name));
                let entries = Entries::Remote(listing.listed.into_iter());
                (entries, listing.covered, listing.published, listing.gone)
            }),
            None => {
                let (stamped, covered) = self.local_listing()?;
                let entries = Entries::Local(stamped.into_iter());
                Ok((entries, covered, Vec::new(), HashSet::new()))
            }
        }
    }

    /// The directory's logs, stamped (a `stat` each) in name order
    /// [`STAMP_CHUNK`] at a time until asked to stop: a stop ends the
    /// listing at the chunk it reached (10,000,000 stats take tens of
    /// seconds), the names up to there covered.
    fn local_listing(&self) -> std::io::Result<(Vec<(String, Stamp)>, Covered)> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| LogName::parse(name).is_some())
            .collect();
        let out = twins_left_out(names.iter().map(String::as_str));
        self.warn_twins(&out);
        names.retain(|n| !out.contains(n));
        // In name order, as `Covered` ranges are (and as the pass sorts
        // them anyway).
        names.sort_unstable();
        // A log is a regular file of the directory: a link is not
        // followed (it could point anywhere; reads refuse it too).
        let stamp = |name: &String| {
            let meta = std::fs::symlink_metadata(self.dir.join(name)).ok()?;
            meta.is_file().then(|| (name.clone(), Stamp::of(&meta)))
        };
        let mut stamped = Vec::with_capacity(names.len());
        for (i, chunk) in names.chunks(STAMP_CHUNK).enumerate() {
            // A large directory is stamped on several threads.
            let got: Vec<Option<(String, Stamp)>> = if chunk.len() >= PARALLEL_FROM {
                parallel_map(chunk, local_readers(), stamp)
            } else {
                chunk.iter().map(stamp).collect()
            };
            stamped.extend(got.into_iter().flatten());
            let reached = (i + 1) * STAMP_CHUNK;
            if self.stopping() && reached < names.len() {
                log::info!(
                    "history: stopping: {} logs of {} left to the next listing",
                    names.len() - reached,
                    self.dir.display()
                );
                let upto = Some(names[reached - 1].clone());
                return Ok((stamped, Covered::Range { after: None, upto }));
            }
        }
        Ok((stamped, Covered::All))
    }

    /// Says once per name which logs were left out for a twin.
    fn warn_twins(&self, out: &HashSet<String>) {
        let mut warned = self.twins_warned.lock();
        for name in out {
            if warned.len() < 10_000 && warned.insert(name.clone()) {
                log::warn!(
                    "history: {name:?} is left out: the plain log of the same job beside it is \
                     the job's log (one id, one log)"
                );
            }
        }
    }

    /// Fills an empty index from the persistent index, if there is a usable
    /// one, and marks the store ready: the list is served at once, and the
    /// next rescan verifies it against the directory. Returns the number of
    /// jobs loaded.
    pub fn load_persisted(&self) -> usize {
        let Some(path) = &self.index_file else {
            return 0;
        };
        match crate::snapshot::load_summed(path) {
            Ok((jobs, sum)) => {
                // The segments spilled beside it, when it goes with some.
                let spilled = match self.load_spilled(path, sum) {
                    Ok(spilled) => spilled,
                    Err(e) => {
                        log::warn!(
                            "history: the job summaries on disk beside {} are unusable: {e}; \
                             rebuilding the index from the directory",
                            path.display()
                        );
                        self.dirty.store(true, Ordering::Release);
                        return 0;
                    }
                };
                let n = jobs.len();
                let mut index = self.catalog.write();
                if !index.jobs.is_empty() || self.has_cold() {
                    return 0;
                }
                let jobs: Vec<Arc<JobSummary>> = jobs.into_iter().map(Arc::new).collect();
                let sets = catalog_sets(&jobs);
                if sets.order.len() != n || sets.ids.len() != n {
                    log::warn!(
                        "history: the persistent index {} lists a job twice; rebuilding it \
                         from the directory",
                        path.display()
                    );
                    self.dirty.store(true, Ordering::Release);
                    return 0;
                }
                index.set_completed(sets);
                let n = n + spilled.as_ref().map_or(0, |s| s.len());
                if let Some(spilled) = spilled {
                    *self.cold.write() = spilled;
                    self.cold_version.fetch_add(1, Ordering::Relaxed);
                }
                drop((index, jobs));
                crate::heap::release_slack();
                self.ready.store(true, Ordering::Release);
                // After the trim: the build's allocations would wait for it.
                self.build_orders_later();
                log::info!(
                    "history: listed {n} jobs from the persistent index {}; verifying the \
                     directory in the background",
                    path.display()
                );
                n
            }
            // No index yet, or a directory that cannot be read (reported by
            // the rescan): nothing to load.
            Err(crate::snapshot::IndexError::Io(e)) => {
                log::debug!("history: no persistent index at {}: {e}", path.display());
                0
            }
            Err(e) => {
                log::warn!(
                    "history: the persistent index {} is unusable: {e}; rebuilding it from the \
                     directory",
                    path.display()
                );
                self.dirty.store(true, Ordering::Release);
                0
            }
        }
    }

    /// Saves the persistent index if the jobs changed since the last save
    /// and (unless `now`) the last save is `INDEX_SAVE_SPACING` old.
    pub fn persist(&self, now: bool) {
        let Some(path) = &self.index_file else {
            return;
        };
        if !self.dirty.load(Ordering::Acquire) {
            return;
        }
        let mut last = self.last_saved.lock();
        if !now && last.is_some_and(|at| at.elapsed() < INDEX_SAVE_SPACING) {
            return;
        }
        self.dirty.store(false, Ordering::Release);
        let (bytes, manifest) = {
            let index = self.catalog.read();
            let bytes = crate::snapshot::encode(index.order.iter().map(|j| &*j.0));
            let manifest = self.manifest_bytes(crate::snapshot::sum_of(&bytes));
            (bytes, manifest)
        };
        // The index first, then the manifest naming it: a crash between
        // leaves a manifest for another index, which a restart refuses.
        let written = bjh_files::replace::<std::io::Error>(path, 0o600, |f| {
            std::io::Write::write_all(f, &bytes)
        })
        .and_then(|()| match &manifest {
            Some(manifest) => self.save_manifest(path, manifest),
            None => Ok(()),
        });
        *last = Some(std::time::Instant::now());
        let mut save_error = self.save_error.lock();
        match written {
            Ok(()) => *save_error = None,
            Err(e) => {
                self.dirty.store(true, Ordering::Release);
                // A lasting failure (a read-only directory) is logged once.
                let message = e.to_string();
                if save_error.as_ref() != Some(&message) {
                    log::warn!(
                        "history: cannot save the persistent index {}: {e} (it is a cache; \
                         nothing is lost, the next start indexes the directory)",
                        path.display()
                    );
                }
                *save_error = Some(message);
            }
        }
    }

    /// Brings the index up to date with the directory. A directory that
    /// does not exist is an empty one.
    pub fn rescan(&self) -> ScanReport {
        self.metrics.rescans.inc();
        if self.remote.is_some() {
            *self.taken_in.lock() = Some(HashSet::new());
        }
        let report = self.rescan_now();
        *self.taken_in.lock() = None;
        report
    }

    fn rescan_now(&self) -> ScanReport {
        // Segments a read found damaged since the last pass, set aside:
        // this pass reads their jobs' logs again.
        self.set_aside_damaged();
        let (entries, covered, published, gone) = match self.entries() {
            Ok(listing) => listing,
            Err(e) => return self.listing_failed(e),
        };
        if self.list_error.lock().take().is_some()
            && let Some(remote) = &self.remote
        {
            log::info!("history: {} answers again", remote.url());
        }
        let mut published: HashMap<String, JobSummary> = published
            .into_iter()
            .map(|job| (job.file_name().into_owned(), job))
            .collect();
        let mut pass = self.sort_out(entries, &mut published, covered);
        pass.gone = gone;
        let read = pass.to_read.len();
        let report = self.read_and_take_in(&mut pass, published);
        drop(pass);
        if read >= crate::heap::SLACK_AFTER_LOGS {
            crate::heap::release_slack();
        }
        self.ready.store(true, Ordering::Release);
        self.spill_logged();
        report
    }

    /// A listing that failed: only a directory that is gone (as upstream
    /// takes it) empties the catalog; any other failure (`EACCES`, `EIO`,
    /// `EMFILE`, a store's outage) keeps it as it was, is logged once and
    /// counted, and the next rescan tries again.
    fn listing_failed(&self, e: std::io::Error) -> ScanReport {
        let mut report = ScanReport::default();
        let message = e.to_string();
        let mut last = self.list_error.lock();
        let gone = self.remote.is_none()
            && matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            );
        if !gone {
            self.metrics.listing_errors.inc();
        }
        if !gone && self.remote.is_none() {
            if last.as_ref() != Some(&message) {
                log::warn!(
                    "history: cannot list {}: {e}; serving the {} jobs already indexed \
                     until it can be listed again",
                    self.dir.display(),
                    self.len()
                );
            }
            *last = Some(message);
            drop(last);
            self.ready.store(true, Ordering::Release);
            return report;
        }
        if let Some(remote) = &self.remote {
            // A store that cannot be reached for a while: serve what is
            // indexed, say so once, try again next time.
            if last.is_none() {
                log::warn!(
                    "history: cannot list {}: {e}; serving the {} jobs already indexed \
                     until it answers again",
                    remote.url(),
                    self.len()
                );
            }
            *last = Some(message);
            drop(last);
            self.ready.store(true, Ordering::Release);
            return report;
        }
        *last = Some(message);
        drop(last);
        let mut index = self.catalog.write();
        report.removed = index.jobs.len() + index.unfinished.len();
        if !index.jobs.is_empty() {
            self.dirty.store(true, Ordering::Release);
        }
        index.clear_completed();
        index.journal.overflow();
        index.unfinished.clear();
        *self.cold.write() = crate::ondisk::Layered::default();
        self.cold_version.fetch_add(1, Ordering::Relaxed);
        drop(index);
        self.ready.store(true, Ordering::Release);
        report
    }

    /// Sorts a listing into logs already known unchanged (kept), known bad
    /// and unchanged (skipped), and new or changed (to read). Only stamps
    /// are compared: nothing is opened.
    fn sort_out(
        &self,
        entries: Entries,
        published: &mut HashMap<String, JobSummary>,
        covered: Covered,
    ) -> Pass {
        // Snapshot the unfinished jobs; compare outside the lock.
        let known_unfinished: HashMap<Arc<str>, Unfinished> = self
            .catalog
            .read()
            .unfinished
            .values()
            .map(|u| (u.file_name.clone(), u.clone()))
            .collect();
        let mut pass = Pass {
            known_unfinished,
            covered,
            ..Pass::default()
        };
        let objects = self.remote.is_some();
        // Completed logs the catalog does not hold, for the segments to
        // sort out in one merge after the listing.
        let cold = self.has_cold();
        let mut deferred: Vec<(String, Stamp)> = Vec::new();
        for (name, stamp) in entries {
            let Some(LogName { stem, running, .. }) = LogName::parse(&name) else {
                continue;
            };
            if running {
                if let Some(known) = pass.known_unfinished.get(name.as_str())
                    && known.stamp.same(stamp, objects)
                {
                    pass.seen_unfinished.insert(known.job_id.clone());
                    continue;
                }
            } else if let Some(known) = self
                .catalog
                .read()
                .by_file(&name, stem)
                .filter(|s| s.stamp().same(stamp, objects))
            {
                pass.seen.insert(ById(known.clone()));
                continue;
            }
            if let Some(bad) = self.catalog.read().bad.get(&name)
                && bad.same(stamp, objects)
            {
                pass.seen_bad.insert(name);
                continue;
            }
            if cold && !running {
                deferred.push((name, stamp));
                continue;
            }
            Self::to_take(&mut pass, published, name, stamp, running, objects);
        }
        if cold {
            self.sort_out_cold(&mut pass, published, deferred);
        }
        pass
    }

    /// A listed log neither index holds as listed: taken from a published
    /// summary that describes it as listed, or read.
    pub(super) fn to_take(
        pass: &mut Pass,
        published: &mut HashMap<String, JobSummary>,
        name: String,
        stamp: Stamp,
        running: bool,
        objects: bool,
    ) {
        if !running
            && let Some(summary) = published.remove(&name)
            && summary.stamp().same(stamp, objects)
        {
            pass.from_segments.push(summary);
            return;
        }
        pass.to_read.push((name, stamp));
    }

    /// Reads new and changed logs of a pass (`names`): a completed log's
    /// summary, the new lines of a `.running` one.
    pub(super) fn read_new(
        &self,
        pass: &Pass,
        names: &[(String, Stamp)],
    ) -> Vec<Result<Found, StoreError>> {
        let read_one = |(name, stamp): &(String, Stamp)| {
            self.read_log(name, *stamp, pass.known_unfinished.get(&**name))
        };
        // An object store answers each read in milliseconds, not
        // microseconds: new objects are read many at a time. Files too,
        // when there are many: every core parses, and the reads overlap.
        if self.remote.is_some() {
            parallel_map(names, REMOTE_READERS, read_one)
        } else if names.len() >= PARALLEL_FROM {
            parallel_map(names, local_readers(), read_one)
        } else {
            names.iter().map(read_one).collect()
        }
    }

    /// Reads one log: a completed log's summary, or the new lines of a
    /// `.running` one (after `known`, what an earlier pass read of it).
    fn read_log(
        &self,
        name: &str,
        stamp: Stamp,
        known: Option<&Unfinished>,
    ) -> Result<Found, StoreError> {
        let LogName {
            stem,
            running,
            zstd,
        } = LogName::parse(name).expect("a log name");
        let path = self.log(name, stamp.len);
        if running {
            scan_running(&path, stem, name, stamp, zstd, known).map(Found::Unfinished)
        } else {
            let (summary, ranges) = read_summary_located(&path)?;
            // The file's name says whose log it is: a log naming another
            // job inside would replace that job's in every answer.
            // A second log of one id (`<id>!<tag>`, see `format::name`)
            // names its job too, and is listed under its own stem.
            let claimed = &summary.index.job_id;
            let named = LogName::parse(name).is_some_and(|n| n.names(claimed));
            if !claimed.is_empty() && !named {
                return Err(StoreError::NotItsName {
                    claimed: claimed.clone(),
                });
            }
            Ok(Found::Completed(JobSummary::new(
                summary, ranges, stem, name, stamp,
            )))
        }
    }

    /// Takes a log this process just completed into the catalog at once,
    /// without waiting for the next rescan (which is for logs other
    /// processes write): its job is listed and served from the moment its
    /// log is complete, however soon the scheduler forgets it. `path` is
    /// the completed log in this store's directory.
    pub fn take_in_log(&self, path: &Path) {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            return;
        };
        if self.remote.is_some() || LogName::parse(name).is_none_or(|n| n.running) {
            return;
        }
        let stamp = match std::fs::symlink_metadata(path) {
            Ok(meta) => Stamp::of(&meta),
            Err(e) => {
                log::warn!("history: cannot index the completed log {name:?}: {e}");
                return;
            }
        };
        self.take_in_found(name, stamp);
    }

    /// Takes an object this process just uploaded into the catalog at
    /// once, as [`LogStore::take_in_log`] does for a file: a recording
    /// scheduler over an object store lists its finished jobs without a
    /// rescan (there may be none: `--update-interval-seconds 0`). Blocks
    /// on the store's requests: call from a blocking thread.
    pub fn take_in_object(&self, name: &str) {
        let Some(remote) = &self.remote else {
            return;
        };
        if LogName::parse(name).is_none_or(|n| n.running) {
            return;
        }
        match remote.stamp(name) {
            Ok(stamp) => {
                self.take_in_found(name, stamp);
                self.to_publish(name);
            }
            Err(e) => log::warn!("history: cannot index the uploaded log {name:?}: {e}"),
        }
    }

    /// Reads the completed log `name` (as `stamp` says it is) into the
    /// catalog.
    pub fn take_in_found(&self, name: &str, stamp: Stamp) {
        match self.read_log(name, stamp, None) {
            Ok(Found::Completed(summary)) => {
                let finished = self.finished_facts(&summary);
                if let Some(ids) = self.taken_in.lock().as_mut() {
                    ids.insert(Arc::from(summary.job_id()));
                }
                let mut catalog = self.catalog.write();
                catalog.unfinished.remove(summary.job_id());
                let id: Arc<str> = Arc::from(summary.job_id());
                let new = catalog.insert(summary) && !self.cold_hide(&id);
                drop(catalog);
                self.dirty.store(true, Ordering::Release);
                self.count_finished(new, finished);
            }
            Ok(Found::Unfinished(_)) => {}
            Err(e) => log::warn!("history: cannot index the completed log {name:?}: {e}"),
        }
    }

    /// Takes in each log the local writer completes (see
    /// [`LogStore::take_in_log`]) until `stop` resolves.
    pub async fn take_in_completed(
        self: Arc<Self>,
        mut completed: tokio::sync::mpsc::UnboundedReceiver<PathBuf>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            let path = tokio::select! {
                _ = &mut stop => return,
                path = completed.recv() => match path {
                    Some(path) => path,
                    None => return,
                },
            };
            let this = self.clone();
            let _ = tokio::task::spawn_blocking(move || this.take_in_log(&path)).await;
        }
    }

    /// What the finished-job series need of a job about to be inserted.
    fn finished_facts(&self, job: &JobSummary) -> (&'static str, Option<u64>) {
        use crate::query::JobFacts as _;
        (job.state().status_word(), job.duration())
    }

    /// Counts a job new to the catalog as finished while this process
    /// runs: only after the first pass (the jobs found then finished
    /// before it started).
    fn count_finished(&self, new: bool, (status, duration): (&'static str, Option<u64>)) {
        if new && self.is_ready() {
            self.metrics.job_finished(status, duration);
        }
    }

    /// Whether a completed job's log is in the directory now, unchanged: a
    /// job taken in after a pass listed the directory is not gone because
    /// that listing missed it (a file of its name that changed since is
    /// another log).
    pub(super) fn still_there(&self, job: &JobSummary) -> bool {
        if self.remote.is_some() {
            // An object taken in while this pass ran (the uploader's word)
            // is newer than its listing. Asking the store of each missing
            // job would cost a request each.
            return self
                .taken_in
                .lock()
                .as_ref()
                .is_some_and(|ids| ids.contains(job.job_id()));
        }
        std::fs::symlink_metadata(self.dir.join(&*job.file_name()))
            .is_ok_and(|meta| meta.is_file() && Stamp::of(&meta) == job.stamp())
    }

    /// Brings the catalog in line with a pass: what was read goes in, what
    /// was not listed goes out, unreadable logs are remembered by stamp.
    pub(super) fn take_in(
        &self,
        pass: &mut Pass,
        results: Vec<Result<Found, StoreError>>,
        published: HashMap<String, JobSummary>,
    ) -> ScanReport {
        let mut report = ScanReport {
            read: pass.to_read.len(),
            ..ScanReport::default()
        };
        let (mut fresh, newly_bad) = self.read_or_bad(pass, results, &mut report);
        fresh.extend(pass.from_segments.drain(..).map(Found::Completed));
        fresh.extend(self.new_from_segments(pass, published));
        let mut index = self.catalog.write();
        report.removed = self.remove_gone(&mut index, pass, &fresh);
        let fresh = self.fill_at_once(&mut index, fresh);
        for found in fresh {
            match found {
                Found::Completed(summary) => {
                    self.dirty.store(true, Ordering::Release);
                    let finished = self.finished_facts(&summary);
                    let id: Arc<str> = Arc::from(summary.job_id());
                    let new = index.insert(summary) && !self.cold_hide(&id);
                    self.count_finished(new, finished);
                }
                Found::Unfinished(unfinished) => {
                    index
                        .unfinished
                        .insert(unfinished.job_id.clone(), unfinished);
                }
            }
        }
        // A job whose log was renamed to `.eventlog` is completed, once.
        let Catalog {
            jobs, unfinished, ..
        } = &mut *index;
        let covered = &pass.covered;
        unfinished.retain(|id, u| {
            (pass.seen_unfinished.contains(id) || !covered.covers(&u.file_name))
                && !jobs.contains(&**id)
        });
        index
            .bad
            .retain(|name, _| pass.seen_bad.contains(name) || !covered.covers(name));
        index.bad.extend(newly_bad);
        report
    }

    /// The logs a pass read, and those it could not read (counted, logged
    /// and remembered by name and stamp).
    fn read_or_bad(
        &self,
        pass: &mut Pass,
        results: Vec<Result<Found, StoreError>>,
        report: &mut ScanReport,
    ) -> (Vec<Found>, Vec<(String, Stamp)>) {
        let mut fresh = Vec::new();
        let mut newly_bad = Vec::new();
        for ((name, stamp), found) in pass.to_read.iter().zip(results) {
            match found {
                Ok(Found::Completed(summary)) => fresh.push(Found::Completed(summary)),
                Ok(Found::Unfinished(unfinished)) => {
                    pass.seen_unfinished.insert(unfinished.job_id.clone());
                    fresh.push(Found::Unfinished(unfinished));
                }
                Err(e) => {
                    log::warn!("history: skipping event log {name:?}: {e}");
                    self.metrics.unreadable_logs.inc();
                    report.bad += 1;
                    pass.seen_bad.insert(name.clone());
                    newly_bad.push((name.clone(), *stamp));
                }
            }
        }
        (fresh, newly_bad)
    }

    /// The published summaries a pass takes besides those of the logs it
    /// listed (`Pass::from_segments`): those of logs the catalog does not
    /// hold and the listing did not cover. A covered log not listed is
    /// gone (or the segment lies); one listed otherwise than the summary
    /// says was read from itself.
    fn new_from_segments(&self, pass: &Pass, published: HashMap<String, JobSummary>) -> Vec<Found> {
        let catalog = self.catalog.read();
        let new: Vec<(String, JobSummary)> = published
            .into_iter()
            .filter(|(file, _)| {
                let stem = LogName::parse(file).map_or("", |n| n.stem);
                !pass.covered.covers(file) && catalog.by_file(file, stem).is_none()
            })
            .collect();
        drop(catalog);
        // Nor the segments: asked for all of them at once.
        let held = match self.has_cold() {
            true => {
                let names: Vec<&str> = new.iter().map(|(file, _)| file.as_str()).collect();
                self.cold.read().holding(&names).unwrap_or_else(|e| {
                    self.cold_failed(&e);
                    vec![true; names.len()]
                })
            }
            false => vec![false; new.len()],
        };
        new.into_iter()
            .zip(held)
            .filter(|(_, held)| !held)
            .map(|((_, job), _)| Found::Completed(job))
            .collect()
    }

    /// Removes the completed jobs the pass did not list (a job whose log
    /// changed is replaced, not gone); how many.
    fn remove_gone(&self, index: &mut Catalog, pass: &Pass, fresh: &[Found]) -> usize {
        let reread: HashSet<&str> = fresh
            .iter()
            .filter_map(|f| match f {
                Found::Completed(s) => Some(s.job_id()),
                Found::Unfinished(_) => None,
            })
            .collect();
        // A log the writer completed after this pass listed the directory
        // was taken in by `take_in_log` meanwhile: not gone, though the
        // listing missed it. A stat of each missing log tells (few are).
        let gone: Vec<Arc<JobSummary>> = index
            .jobs
            .iter()
            .filter(|j| !pass.seen.contains(*j) && !reread.contains(j.0.job_id()))
            .filter(|j| pass.covered.covers(&j.0.file_name()))
            .map(|j| j.0.clone())
            .filter(|j| !self.still_there(j))
            .collect();
        // A log a manifest says was removed, and the store says is gone,
        // wherever the listing stands.
        let removed: Vec<Arc<JobSummary>> = pass
            .gone
            .iter()
            .filter_map(|name| {
                let stem = LogName::parse(name)?.stem;
                index.by_file(name, stem).cloned()
            })
            .collect();
        if !gone.is_empty() || !removed.is_empty() || !pass.cold_gone.is_empty() {
            self.dirty.store(true, Ordering::Release);
        }
        let from_catalog = gone
            .iter()
            .chain(&removed)
            .filter(|job| index.remove(job.job_id()).is_some())
            .count();
        from_catalog + self.remove_gone_cold(pass, &reread)
    }

    /// A first pass over a large directory fills the empty catalog at once
    /// (each job once; with a job logged twice, one by one): what is left
    /// to insert one by one.
    fn fill_at_once(&self, index: &mut Catalog, fresh: Vec<Found>) -> Vec<Found> {
        // Over segments, each job goes in one by one (hiding theirs).
        if !index.jobs.is_empty() || fresh.len() < PARALLEL_FROM || self.has_cold() {
            return fresh;
        }
        let (completed, rest): (Vec<Found>, Vec<Found>) = fresh
            .into_iter()
            .partition(|f| matches!(f, Found::Completed(_)));
        let jobs: Vec<Arc<JobSummary>> = completed
            .into_iter()
            .filter_map(|f| match f {
                Found::Completed(s) => Some(Arc::new(s)),
                Found::Unfinished(_) => None,
            })
            .collect();
        let sets = catalog_sets(&jobs);
        if sets.ids.len() != jobs.len() || sets.order.len() != jobs.len() {
            let jobs = jobs.into_iter().map(Arc::unwrap_or_clone);
            return jobs.map(Found::Completed).chain(rest).collect();
        }
        if !jobs.is_empty() {
            self.dirty.store(true, Ordering::Release);
        }
        index.set_completed(sets);
        // Its thread waits for this pass's write lock to go.
        self.build_orders_later();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::twins_left_out;

    #[test]
    fn of_twin_logs_the_plain_one_stays_whatever_the_listing_order() {
        let names = [
            "a.eventlog",
            "a.eventlog.zst",
            "b.eventlog.zst",
            "c.eventlog.running",
            "c.eventlog.zst.running",
            "d.eventlog",
            "d.eventlog.zst.running",
        ];
        let want: std::collections::HashSet<String> = ["a.eventlog.zst", "c.eventlog.zst.running"]
            .map(String::from)
            .into();
        assert_eq!(twins_left_out(names.iter().copied()), want);
        assert_eq!(twins_left_out(names.iter().rev().copied()), want);
    }
}
