//! Completed jobs moved out of memory: when the catalog holds as many
//! completed jobs as a store's spill threshold, a spill writes them, with
//! the segments already on disk, as new segments (`ondisk`), and the
//! catalog lets them go. Every reader of completed jobs asks the catalog
//! first and the segments after; a job the catalog takes in again (its
//! log changed) or forgets is hidden from the segments by id, so each job
//! is answered once.
//!
//! A store spills when built [`LogStore::with_memory_jobs`] (the
//! binary's `--history-memory-jobs`) or [`LogStore::with_spill`] (the
//! store's own tests run every rescan through it). The persistent
//! index's save writes a manifest beside it naming the segments and the
//! jobs they hide, tied to that index by its checksum: a restart opens
//! them and reads no log; a manifest damaged, lying, of another index or
//! naming a missing segment is refused and the directory indexed again.
//!
//! A move writes the catalog's jobs as a run of segments of its own,
//! merged with the runs on disk a binary counter's carries pick
//! ([`to_merge`]): a job is rewritten about log2(all / moved) times over
//! its life, not at every move. A job is on disk once: a run holding an
//! older copy of a job the move writes is merged with it.
//!
//! A pass with more logs to read than `PASS_CHUNK` (a first pass over a
//! large directory) reads, takes in and moves them a chunk at a time
//! (`stop.rs`, which also stops a pass when asked).
//!
//! The walk over every job (`with_completed`: the SQL `jobs` file, the
//! Clusters page, the recurring queries, the columnar refresh) merges
//! the catalog's jobs with a copy of the segments opened again, in
//! order, one block of each segment at a time, holding no lock while
//! its caller reads (`itertools::kmerge_by`, the merge of sorted
//! streams, rather than one of our own).
//!
//! **Invariant:** lock order is the catalog's, then the segments'; a spill
//! writes from a copy of the segments (opened again) with no lock held,
//! and swaps under both, hiding whatever changed meanwhile.

use super::*;
use crate::scan::Pass;
use crate::snapshot::IndexError;
use std::sync::atomic::AtomicU64;

/// Where a store spills, and from how many completed jobs in memory.
#[derive(Debug)]
pub(crate) struct Spill {
    pub(crate) dir: PathBuf,
    at: usize,
    per_segment: usize,
    /// Logs a pass reads before it moves what it read (`PASS_CHUNK`).
    chunk: usize,
    generation: AtomicU64,
    /// One spill at a time.
    running: parking_lot::Mutex<()>,
    /// The directory a test's store spills to, removed with it.
    #[cfg(test)]
    _owned: Option<tempfile::TempDir>,
}

/// A spill written and not yet serving.
struct Written {
    /// The catalog's jobs it holds.
    jobs: Vec<Arc<JobSummary>>,
    /// The catalog's version when they were taken.
    version: u64,
    /// The segments as they were taken.
    copy: crate::ondisk::Layered,
    /// The new segments.
    fresh: crate::ondisk::Layered,
}

/// More runs than this on disk and a move rewrites them all.
const MAX_RUNS: usize = 32;
/// The segments hiding more jobs than this (and than a move writes) and
/// the move rewrites them all (about 13 MB of hidden summaries).
const MAX_HIDDEN: usize = 64 * 1024;

/// The run a segment file belongs to: the files one move wrote
/// (`spill-{tag}-{generation}-{i}`) share its name less `-{i}`.
fn run_of(path: &Path) -> &str {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.rsplit_once('-').map_or(name, |(run, _)| run)
}

/// Which segment files (by index) a move writing `new` jobs rewrites
/// with them. A binary counter's carries: from the smallest run up, each
/// run no larger than what the move writes so far joins it, so a job is
/// rewritten about log2(all / new) times over its life rather than at
/// every move. Besides: the runs holding an older copy of a job the move
/// writes (`forced`; a job is on disk once), and every run when the
/// segments hide more jobs than the move writes and [`MAX_HIDDEN`]
/// (hidden jobs are held in memory until their segment is rewritten) or there are more than
/// [`MAX_RUNS`].
fn to_merge(
    paths: &[PathBuf],
    sizes: &[usize],
    hidden: usize,
    new: usize,
    forced: &HashSet<usize>,
) -> Vec<usize> {
    let mut runs: Vec<(&str, usize, Vec<usize>)> = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let run = run_of(path);
        match runs.iter_mut().find(|(r, ..)| *r == run) {
            Some((_, size, files)) => {
                *size += sizes[i];
                files.push(i);
            }
            None => runs.push((run, sizes[i], vec![i])),
        }
    }
    if hidden > new.max(MAX_HIDDEN) || runs.len() > MAX_RUNS {
        return (0..paths.len()).collect();
    }
    let (mut taken, mut rest): (Vec<_>, Vec<_>) =
        (runs.into_iter()).partition(|(_, _, files)| files.iter().any(|i| forced.contains(i)));
    let mut writes = new + taken.iter().map(|(_, size, _)| size).sum::<usize>();
    rest.sort_by_key(|(run, size, _)| (*size, *run));
    for run in rest {
        if run.1 > writes {
            break;
        }
        writes += run.1;
        taken.push(run);
    }
    let mut out: Vec<usize> = taken.into_iter().flat_map(|(_, _, files)| files).collect();
    out.sort_unstable();
    out
}

/// The magic of the file naming the spilled segments.
const MANIFEST_MAGIC: &[u8; 8] = b"BJHSPL01";

/// The directory of the segments spilled beside the persistent index at
/// `index`.
pub fn spill_dir_of(index: &Path) -> PathBuf {
    let mut p = index.as_os_str().to_owned();
    p.push(".segments");
    PathBuf::from(p)
}

/// Creates the segments' directory `dir` (`0700`), or checks the one
/// there is this process's own: never a link planted to write or remove
/// files elsewhere (`bjh_files::private_dir`).
fn own_dir(dir: &Path) -> std::io::Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    bjh_files::private_dir(parent, dir)
}

/// The file naming them, with the index it goes with.
fn manifest_of(index: &Path) -> PathBuf {
    spill_dir_of(index).join("MANIFEST")
}

/// Whether `name` is one a spill gives a segment (nothing else in the
/// directory is opened or removed).
fn is_spilled(name: &str) -> bool {
    name.starts_with("spill-") && !name.contains(['/', '\\']) && name != "spill-"
}

/// The manifest's bytes: the checksum of the persistent index it goes
/// with, the segments' file names, the hidden jobs (in the index's
/// format), and a checksum of all that.
fn encode_manifest(index_sum: u64, names: &[String], hidden: &[&JobSummary]) -> Vec<u8> {
    let mut out = MANIFEST_MAGIC.to_vec();
    out.extend_from_slice(&index_sum.to_le_bytes());
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for name in names {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
    }
    let hidden = crate::snapshot::encode(hidden.iter().copied());
    out.extend_from_slice(&(hidden.len() as u64).to_le_bytes());
    out.extend_from_slice(&hidden);
    let sum = crate::snapshot::checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// What a manifest says: the index's checksum, the segments' names, the
/// hidden jobs.
type Manifest = (u64, Vec<String>, Vec<JobSummary>);

fn decode_manifest(bytes: &[u8]) -> Result<Manifest, IndexError> {
    if bytes.len() < 16 || &bytes[..8] != MANIFEST_MAGIC {
        return Err(IndexError::Foreign);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if crate::snapshot::checksum(body) != crate::snapshot::sum_of(sum) {
        return Err(IndexError::Damaged("the manifest's checksum mismatch"));
    }
    let mut c = crate::snapshot::Cursor::new(&body[8..]);
    let index_sum = c.u64()?;
    let mut names = Vec::new();
    for _ in 0..c.u32()? {
        let name = c.str()?;
        if !is_spilled(name) {
            return Err(IndexError::Damaged("the manifest names a foreign file"));
        }
        names.push(name.to_string());
    }
    let len = usize::try_from(c.u64()?).map_err(|_| IndexError::Damaged("too long"))?;
    let hidden = crate::snapshot::decode(c.take(len)?)?;
    if !c.done() {
        return Err(IndexError::Damaged("bytes after the manifest"));
    }
    Ok((index_sum, names, hidden))
}

/// Jobs a spilled segment holds at most.
const PER_SEGMENT: usize = 1 << 20;
/// Logs a pass of a spilling store reads at most before it moves what it
/// read to the segments (a spill's threshold when larger): a first pass
/// over a large directory holds about this many summaries, not all.
const PASS_CHUNK: usize = 1 << 18;

impl LogStore {
    /// This store, spilling its completed jobs to segments under `dir`
    /// once the catalog holds `at` of them (checked after each rescan).
    pub fn with_spill(mut self, dir: PathBuf, at: usize) -> Self {
        self.spill = Some(Spill {
            dir,
            at,
            per_segment: PER_SEGMENT,
            chunk: at.max(PASS_CHUNK),
            generation: AtomicU64::new(0),
            running: parking_lot::Mutex::new(()),
            #[cfg(test)]
            _owned: None,
        });
        self
    }

    /// This store without a spill (under test: whatever
    /// `BJH_STORE_SPILL` says).
    #[cfg(test)]
    pub(crate) fn no_spill(mut self) -> Self {
        self.spill = None;
        self
    }

    /// Under test with `BJH_STORE_SPILL` set, every store (but one with a
    /// persistent index, which does not hold spilled jobs yet) spills all
    /// its completed jobs after each rescan, to a directory of its own:
    /// the store's tests run again over the segments.
    #[cfg(test)]
    pub(crate) fn spill_under_test(self) -> Self {
        if std::env::var_os("BJH_STORE_SPILL").is_none() {
            return self;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut s = self.with_spill(dir.path().join("segments"), 0);
        if let Some(spill) = &mut s.spill {
            spill._owned = Some(dir);
        }
        s
    }

    /// This store, keeping at most about `jobs` completed jobs in memory
    /// (when given, and beside a persistent `index`): past them, a rescan
    /// moves them to segments in `<index>.segments/`.
    pub fn with_memory_jobs(self, jobs: Option<usize>, index: Option<&Path>) -> Self {
        match (jobs, index) {
            (Some(jobs), Some(index)) => self.with_spill(spill_dir_of(index), jobs),
            _ => self,
        }
    }

    /// How many completed jobs the segments hold (not hidden).
    pub fn spilled(&self) -> usize {
        self.cold.read().len()
    }

    /// An error reading the segments, logged once until another; the
    /// segments are checked (and those damaged set aside) at the next
    /// chance (`set_aside_damaged`: this may run under their lock).
    pub(crate) fn cold_failed(&self, e: &IndexError) {
        self.cold_damaged.store(true, Ordering::Relaxed);
        let message = e.to_string();
        let mut last = self.cold_error.lock();
        if last.as_ref() != Some(&message) {
            log::warn!("history: cannot read the job summaries on disk: {message}");
        }
        *last = Some(message);
    }

    /// When a read of the segments failed since they were last checked:
    /// each is checked whole, and those that fail are taken out of
    /// service and their files renamed `*.damaged` (logged, counted in
    /// `ballista_job_history_segments_set_aside_total`). Their jobs are
    /// then in neither the catalog nor the segments, so the listing pass
    /// finds their logs new and reads them again; a damaged segment hides
    /// nothing but its own jobs, and only until then. Whether any was set
    /// aside.
    pub(crate) fn set_aside_damaged(&self) -> bool {
        if !self.cold_damaged.swap(false, Ordering::Relaxed) {
            return false;
        }
        let removed = match self.cold.write().without_damaged() {
            Ok(removed) => removed,
            Err(e) => {
                log::warn!("history: cannot check the job summaries on disk: {e}");
                return false;
            }
        };
        for path in &removed {
            let aside = path.with_extension("damaged");
            log::warn!(
                "history: the job summaries on disk in {} are damaged: set aside as {}; \
                 their jobs are read again from their logs",
                path.display(),
                aside.display()
            );
            if let Err(e) = std::fs::rename(path, &aside) {
                log::warn!("history: cannot rename {}: {e}", path.display());
            }
            self.metrics.segments_set_aside.inc();
        }
        if !removed.is_empty() {
            self.cold_version.fetch_add(1, Ordering::Relaxed);
            self.journal.overflow();
            *self.cold_error.lock() = None;
        }
        !removed.is_empty()
    }

    /// `ask` of the segments; an error is logged (once until another)
    /// and no answer.
    fn ask_cold<T>(
        &self,
        ask: impl FnOnce(&crate::ondisk::Layered) -> Result<T, IndexError>,
    ) -> Option<T> {
        ask(&self.cold.read())
            .map_err(|e| self.cold_failed(&e))
            .ok()
    }

    /// The completed job `id` the segments hold, unless hidden.
    pub(crate) fn cold_get(&self, id: &str) -> Option<Arc<JobSummary>> {
        self.ask_cold(|cold| cold.get(id)).flatten()
    }

    /// The completed job whose log is `name`, in the catalog or the
    /// segments.
    pub(crate) fn completed_by_file(&self, name: &str, stem: &str) -> Option<Arc<JobSummary>> {
        // The segments asked under the catalog's lock: a spill's swap or
        // a job taken in cannot fall between the two.
        let catalog = self.catalog.read();
        if let Some(j) = catalog.by_file(name, stem) {
            return Some(j.clone());
        }
        self.ask_cold(|cold| cold.by_file(name)).flatten()
    }

    /// The completed job `id`, in the catalog or the segments.
    pub(crate) fn completed(&self, id: &str) -> Option<Arc<JobSummary>> {
        let catalog = self.catalog.read();
        let found = catalog.get(id).cloned();
        found.or_else(|| self.cold_get(id))
    }

    /// Hides the segments' job `id` (the catalog holds it now, or it is
    /// gone); whether they held it. Call with the catalog's lock held or
    /// not, never the segments'.
    pub(crate) fn cold_hide(&self, id: &str) -> bool {
        if self.cold.read().is_empty() {
            return false;
        }
        match self.cold.write().remove(id) {
            Ok(held) => {
                if held {
                    self.cold_version.fetch_add(1, Ordering::Relaxed);
                    self.journal.note(id);
                }
                held
            }
            Err(e) => {
                self.cold_failed(&e);
                false
            }
        }
    }

    /// Moves the catalog's completed jobs to segments when it holds as
    /// many as the spill threshold: how many moved. The segments are
    /// rewritten whole (the catalog's jobs merged in, the hidden left
    /// out); the old files are removed once the new ones serve.
    pub fn spill(&self) -> Result<usize, IndexError> {
        let Some(spill) = &self.spill else {
            return Ok(0);
        };
        let _one = spill.running.lock();
        match self.spill_write(spill)? {
            Some(written) => self.spill_swap(written),
            None => Ok(0),
        }
    }

    /// A spill's writing, with no lock held past its copies: the
    /// catalog's jobs and the segments (opened again) merged into new
    /// segments. `None` when the catalog holds fewer jobs than the
    /// threshold.
    fn spill_write(&self, spill: &Spill) -> Result<Option<Written>, IndexError> {
        let (jobs, version) = {
            let catalog = self.catalog.read();
            if catalog.jobs.is_empty() || catalog.jobs.len() < spill.at {
                return Ok(None);
            }
            let jobs: Vec<Arc<JobSummary>> = catalog.jobs.iter().map(|j| j.0.clone()).collect();
            (jobs, catalog.version)
        };
        let copy = self.cold.read().reopen()?;
        own_dir(&spill.dir)?;
        let generation = spill.generation.fetch_add(1, Ordering::Relaxed);
        // A name no earlier spill took, whatever the process id (a
        // container's scheduler is process 1 at every start).
        let prefix = format!("spill-{}-{generation}", bjh_files::random_tag());
        let forced = copy.holders(jobs.iter().map(|j| j.job_id()))?;
        let merge = to_merge(
            copy.paths(),
            &copy.sizes(),
            copy.hidden_len(),
            jobs.len(),
            &forced,
        );
        // A move heard to stop leaves the jobs in memory (the index saved
        // on the way out holds them).
        let stop = || self.stopping();
        let (fresh, _) =
            copy.rewrite_some(&jobs, &merge, &spill.dir, &prefix, spill.per_segment, &stop)?;
        Ok(Some(Written {
            jobs,
            version,
            copy,
            fresh,
        }))
    }

    /// A spill's swap, under both locks: what changed since its copies
    /// hidden in the new segments, the catalog's jobs written let go.
    fn spill_swap(&self, written: Written) -> Result<usize, IndexError> {
        let Written {
            jobs,
            version,
            copy,
            mut fresh,
        } = written;
        let mut catalog = self.catalog.write();
        let mut cold = self.cold.write();
        // Hidden since the copy: hidden again.
        for id in cold.hidden_ids() {
            if !copy.hides(id) {
                fresh.remove(id)?;
            }
        }
        // The catalog's jobs let go, unless replaced or forgotten since
        // (then the copy written is hidden).
        let moved = if catalog.version == version {
            catalog.clear_completed();
            jobs.len()
        } else {
            let mut moved = 0;
            for j in &jobs {
                match catalog.get(j.job_id()) {
                    Some(now) if Arc::ptr_eq(now, j) => {
                        catalog.remove(j.job_id());
                        moved += 1;
                    }
                    _ => {
                        fresh.remove(j.job_id())?;
                    }
                }
            }
            moved
        };
        let old = std::mem::replace(&mut *cold, fresh);
        drop((cold, catalog, copy));
        self.cold_version.fetch_add(1, Ordering::Relaxed);
        self.dirty.store(true, Ordering::Release);
        let serving: HashSet<PathBuf> = self.cold.read().paths().iter().cloned().collect();
        let retired = old.paths().iter().filter(|p| !serving.contains(*p));
        self.retire(retired.cloned().collect());
        Ok(moved)
    }

    /// Segments no longer serving: removed at once, or, beside a
    /// persistent index, once a manifest no longer names them.
    fn retire(&self, paths: Vec<PathBuf>) {
        if self.index_file.is_some() {
            self.retired.lock().extend(paths);
            return;
        }
        for path in paths {
            if let Err(e) = std::fs::remove_file(&path) {
                log::warn!("history: cannot remove {}: {e}", path.display());
            }
        }
    }

    /// The manifest to save with the index whose own checksum is
    /// `index_sum`, when segments serve or a manifest may be on disk.
    /// Called with the catalog's lock held, so the two agree.
    pub(crate) fn manifest_bytes(&self, index_sum: u64) -> Option<Vec<u8>> {
        let cold = self.cold.read();
        if cold.is_empty() && self.spill.is_none() && !self.spilled_before.load(Ordering::Relaxed) {
            return None;
        }
        let names: Vec<String> = (cold.paths().iter())
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        let hidden: Vec<&JobSummary> = cold.hidden_jobs().map(|j| &**j).collect();
        Some(encode_manifest(index_sum, &names, &hidden))
    }

    /// Writes the manifest beside the index at `index`, then removes the
    /// segment files it does not name (retired ones, and any a crash
    /// left).
    pub(crate) fn save_manifest(&self, index: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let dir = spill_dir_of(index);
        own_dir(&dir)?;
        bjh_files::replace::<std::io::Error>(&manifest_of(index), 0o600, |f| {
            std::io::Write::write_all(f, bytes)
        })?;
        let named: HashSet<String> = decode_manifest(bytes)
            .map(|(_, names, _)| names.into_iter().collect())
            .unwrap_or_default();
        self.retired.lock().clear();
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if is_spilled(name) && !named.contains(name) {
                std::fs::remove_file(entry.path()).ok();
            }
        }
        Ok(())
    }

    /// The segments the manifest beside the index at `index` names, with
    /// its hidden jobs, if it goes with the index whose checksum is
    /// `index_sum`: `Ok(None)` when there is no manifest; an error when
    /// it is damaged, lying or for another index, or a segment it names
    /// cannot be opened (the index is then not to be used alone).
    pub(crate) fn load_spilled(
        &self,
        index: &Path,
        index_sum: u64,
    ) -> Result<Option<crate::ondisk::Layered>, IndexError> {
        let path = manifest_of(index);
        if !spill_dir_of(index).exists() {
            return Ok(None);
        }
        own_dir(&spill_dir_of(index))?;
        let bytes = match bjh_files::open_capped(&path, 1 << 30) {
            Ok((mut file, _)) => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes)?;
                bytes
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let (sum, names, hidden) = decode_manifest(&bytes)?;
        if sum != index_sum {
            return Err(IndexError::Damaged("the manifest goes with another index"));
        }
        let dir = spill_dir_of(index);
        let paths: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
        let segments = crate::ondisk::Segments::open(&paths)?;
        self.spilled_before.store(true, Ordering::Relaxed);
        Ok(Some(crate::ondisk::Layered::with_hidden(segments, hidden)))
    }

    /// How many logs a pass reads before it moves what it read to the
    /// segments, when the store spills.
    pub(crate) fn pass_chunk(&self) -> Option<usize> {
        self.spill.as_ref().map(|s| s.chunk.max(1))
    }

    /// [`LogStore::spill`], its failure logged (the jobs stay in memory);
    /// none once passes are to stop (a move may merge runs for long; the
    /// index saved on the way out holds the jobs).
    pub(crate) fn spill_logged(&self) {
        if self.stopping() {
            return;
        }
        if let Err(e) = self.spill() {
            log::warn!("history: cannot move job summaries to disk: {e}; they stay in memory");
        }
    }

    /// Runs `f` over every completed job the segments hold (not
    /// hidden), read block by block: a block's jobs at most in memory
    /// besides what `f` keeps.
    pub(crate) fn each_cold(&self, f: impl FnMut(Arc<JobSummary>)) {
        self.each_cold_in(None, f);
    }

    /// [`LogStore::each_cold`], or, with a `window` `[from, to)`, over
    /// the blocks whose times allow a job that ran in it only (each job
    /// still the caller's to check).
    pub(crate) fn each_cold_in(
        &self,
        window: Option<(u64, u64)>,
        mut f: impl FnMut(Arc<JobSummary>),
    ) {
        let cold = self.cold.read();
        let jobs: Box<dyn Iterator<Item = _>> = match window {
            Some((from, to)) => Box::new(cold.ran_between(from, to)),
            None => Box::new(cold.jobs()),
        };
        for j in jobs {
            match j {
                Ok(j) => f(j),
                Err(e) => {
                    self.cold_failed(&e);
                    break;
                }
            }
        }
    }

    /// A copy of the segments to walk while they change (opened again,
    /// their files kept open however a move retires them), or none when
    /// there are none or they cannot be opened (logged).
    pub(crate) fn cold_copy(&self) -> Option<crate::ondisk::Layered> {
        let cold = self.cold.read();
        if cold.is_empty() {
            return None;
        }
        cold.reopen().map_err(|e| self.cold_failed(&e)).ok()
    }

    /// The segments' page of `q` (less `skip`), or none when they cannot
    /// be read (logged).
    pub(crate) fn cold_page(
        &self,
        q: &ListQuery,
        cursor: Option<&Facts>,
        skip: &HashSet<String>,
    ) -> Option<crate::ondisk::Found> {
        self.ask_cold(|cold| cold.page_skipping(q, cursor, skip))
    }

    /// The segments' counts of each state, less the jobs of `skip` they
    /// hold.
    pub(crate) fn cold_counts(&self, skip: &HashSet<String>) -> [usize; 6] {
        let cold = self.cold.read();
        if cold.is_empty() {
            return [0; 6];
        }
        let mut counts = cold.counts();
        for id in skip {
            if let Ok(Some(j)) = cold.get(id) {
                counts[j.state().index()] -= 1;
            }
        }
        counts
    }

    /// The segments' counts by scheduler.
    pub(crate) fn cold_counts_by_scheduler(&self) -> Vec<(Option<Arc<str>>, [usize; 6])> {
        self.cold.read().counts_by_scheduler()
    }

    /// A number that changes whenever the segments' jobs do.
    pub(crate) fn cold_version(&self) -> u64 {
        self.cold_version.load(Ordering::Relaxed)
    }

    /// Whether the segments hold any job.
    pub(crate) fn has_cold(&self) -> bool {
        !self.cold.read().is_empty()
    }

    /// Sorts `listing` out against the segments (see
    /// `Layered::sort_out`); `None` when they cannot be read (logged).
    pub(crate) fn cold_sort_out(
        &self,
        listing: &[(String, Stamp)],
        objects: bool,
        covered: &crate::published::Covered,
    ) -> Option<crate::ondisk::SortedOut> {
        self.ask_cold(|cold| cold.sort_out(listing, objects, covered))
    }

    /// The job of a segment's row, as a sorted-out listing names it.
    pub(crate) fn cold_at(&self, segment: usize, row: u32) -> Option<Arc<JobSummary>> {
        self.ask_cold(|cold| cold.summary_at(segment, row))
    }

    /// The completed logs the catalog does not hold, against the
    /// segments': those they hold unchanged are kept; their jobs the
    /// listing covered and did not name are gone. Segments that cannot be
    /// read keep what they hold (logged): nothing is read again for them.
    pub(super) fn sort_out_cold(
        &self,
        pass: &mut Pass,
        published: &mut HashMap<String, JobSummary>,
        deferred: Vec<(String, Stamp)>,
    ) {
        let objects = self.remote.is_some();
        // A segment that cannot be read is set aside and the listing
        // sorted out again: new logs are never held back by one bad file.
        let out = match self.cold_sort_out(&deferred, objects, &pass.covered) {
            Some(out) => Some(out),
            None if self.set_aside_damaged() => {
                self.cold_sort_out(&deferred, objects, &pass.covered)
            }
            None => None,
        };
        let Some(out) = out else {
            // Unreadable, yet no segment fails its check (they could not
            // be opened again): what they hold is kept, logged.
            return;
        };
        for ((name, stamp), standing) in deferred.into_iter().zip(out.standing) {
            if standing != crate::ondisk::Standing::Unchanged {
                Self::to_take(pass, published, name, stamp, false, objects);
            }
        }
        pass.cold_gone = (out.gone.iter())
            .filter_map(|(segment, log)| self.cold_at(*segment, log.row))
            .collect();
    }

    /// Hides the segments' jobs a pass found gone (unless read again, or
    /// there after all), and those a manifest says were removed.
    pub(super) fn remove_gone_cold(&self, pass: &Pass, reread: &HashSet<&str>) -> usize {
        if !self.has_cold() {
            return 0;
        }
        let listed_gone = (pass.cold_gone.iter())
            .filter(|j| !reread.contains(j.job_id()) && !self.still_there(j))
            .map(|j| j.job_id().to_string());
        // A log found unreadable by this pass (read again and failed)
        // leaves with its job, as from the catalog; one unreadable and
        // unchanged since an earlier pass was dealt with then.
        let read: HashSet<&str> = pass.to_read.iter().map(|(n, _)| n.as_str()).collect();
        let newly_bad = pass.seen_bad.iter().filter(|n| read.contains(n.as_str()));
        // And a log a manifest says was removed.
        let by_name = newly_bad.chain(&pass.gone).filter_map(|name| {
            let job = self.ask_cold(|cold| cold.by_file(name)).flatten()?;
            Some(job.job_id().to_string())
        });
        let ids: Vec<String> = listed_gone.chain(by_name).collect();
        ids.iter().filter(|id| self.cold_hide(id)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ondisk::random_query;
    use crate::tests::{below, page_ids};

    /// A completed log of job `id` of random facts (the names, times and
    /// schedulers the random queries ask about).
    fn log(id: &str, r: &mut impl FnMut(u64) -> u64) -> String {
        let failed = r(4) == 0;
        let (status, word) = if failed {
            (r#"{"Failed":"x"}"#, "Failed")
        } else {
            (r#""Succeeded""#, "Completed")
        };
        let start = 1_000 + r(220) * 10;
        let end = start + [r(5) * 7, r(10_000)][usize::from(r(5) == 0)];
        let queued = start.saturating_sub(r(3));
        let name = ["Nightly ETL", "adhoc", "nightly report", "Ünïcode"][r(4) as usize];
        let scheduler = ["", r#","scheduler_id":"east""#, r#","scheduler_id":"west""#];
        let scheduler = scheduler[r(3) as usize];
        // One of five queries, or none (no plan), by the id.
        let query = id.bytes().map(u64::from).sum::<u64>() % 6;
        let job = match query {
            0 => String::new(),
            q => format!(r#""logical_plan":"TableScan: t{q}""#),
        };
        format!(
            r#"{{"ev":"JobEnd","version":1,"data":{{"status":{status},"queued_at":{queued},"started_at":{start},"completed_at":{end},"index":{{"job_id":"{id}","job_name":"{name}","status":"{word}","job_status":"{word}.","start_time":{start},"end_time":{end},"num_stages":2,"completed_stages":2,"percent_complete":100}},"job":{{{job}}},"stages":{{}},"config":{{}},"dot":"","dropped_records":0{scheduler}}}}}"#
        ) + "\n"
    }

    fn plain(dir: &Path) -> LogStore {
        LogStore::new(dir, Arc::new(HistoryMetrics::unregistered())).no_spill()
    }

    /// A store whose completed jobs move to segments as they pile up
    /// answers every reader as a store holding them all in memory (the
    /// oracle: the catalog alone, over the same directory), through new,
    /// rewritten and deleted logs and unfinished ones, rescan after
    /// rescan.
    #[test]
    fn over_spilled_jobs_every_answer_is_the_catalogs() {
        let dir = tempfile::tempdir().unwrap();
        let spill = tempfile::tempdir().unwrap();
        let oracle = plain(dir.path());
        let s = plain(dir.path()).with_spill(spill.path().join("segments"), 150);
        let mut r = below(61);
        let mut ids: Vec<String> = Vec::new();
        for round in 0..6 {
            for i in 0..200 {
                let id = format!("job-{:03}{round}{i:03}", r(1_000));
                std::fs::write(dir.path().join(format!("{id}.eventlog")), log(&id, &mut r))
                    .unwrap();
                ids.push(id);
            }
            for _ in 0..25 {
                let id = &ids[r(ids.len() as u64) as usize];
                let path = dir.path().join(format!("{id}.eventlog"));
                match r(3) {
                    0 => drop(std::fs::remove_file(path)),
                    // Unreadable from now on.
                    1 if path.exists() => std::fs::write(path, "not a log\n").unwrap(),
                    _ if path.exists() => std::fs::write(path, log(id, &mut r)).unwrap(),
                    _ => {}
                }
            }
            let running = format!("run-{round}.eventlog.running");
            std::fs::write(
                dir.path().join(running),
                "{\"ev\":\"JobStart\",\"version\":1,\"data\":{}}\n",
            )
            .unwrap();
            oracle.rescan();
            s.rescan();
            assert!(s.spilled() > 0, "round {round}");
            the_same(&oracle, &s, &ids, &mut r, round);
        }
        // Every file a move wrote and replaced is gone: those serving are
        // left.
        let left = std::fs::read_dir(spill.path().join("segments"))
            .unwrap()
            .count();
        assert_eq!(left, s.cold.read().paths().len());
    }

    /// A regression test: with jobs on disk, one segment truncated in
    /// place took the list from 8 jobs to none, and a new log was never
    /// indexed until a restart. Now the segment is set aside at the next
    /// pass and its jobs read again from their logs (the oracle: a store
    /// holding every job in memory, over the same directory).
    #[test]
    fn a_damaged_segment_is_set_aside_and_its_jobs_are_read_again_from_their_logs() {
        let dir = tempfile::tempdir().unwrap();
        let spill = tempfile::tempdir().unwrap();
        let oracle = plain(dir.path());
        let s = plain(dir.path()).with_spill(spill.path().join("segments"), 2);
        let mut r = below(5);
        let mut write = |id: &str| {
            let path = dir.path().join(format!("{id}.eventlog"));
            std::fs::write(path, log(id, &mut r)).unwrap();
        };
        for i in 0..8 {
            write(&format!("job-{i}"));
        }
        s.rescan();
        assert!(s.spilled() > 0);
        let all = ListQuery::default();
        let none = HashSet::new();
        assert_eq!(s.page(&all, None, &none).total, 8);
        // Truncated in place, under the open segment.
        let damaged = s.cold.read().paths()[0].clone();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&damaged)
            .unwrap();
        file.set_len(16).unwrap();
        drop(file);
        write("job-new");
        s.rescan();
        oracle.rescan();
        let ids = |store: &LogStore| {
            let mut ids = page_ids(&store.page(&all, None, &none));
            ids.sort();
            ids
        };
        assert_eq!(ids(&s), ids(&oracle), "every job, the new one too");
        assert_eq!(s.page(&all, None, &none).total, 9);
        assert!(!damaged.exists(), "the damaged segment serves no more");
        assert!(damaged.with_extension("damaged").exists(), "set aside");
        assert_eq!(s.metrics.segments_set_aside.get(), 1);
        // A read that fails later (the list) sets the next one aside too.
        let next = s.cold.read().paths()[0].clone();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&next)
            .unwrap()
            .set_len(16)
            .unwrap();
        let _ = s.page(&all, None, &none);
        s.rescan();
        assert_eq!(ids(&s), ids(&oracle));
        assert_eq!(s.metrics.segments_set_aside.get(), 2);
    }

    /// Moves of the same size carry as a binary counter does: after `k`
    /// of them the runs on disk are the bits of `k` (and a job was
    /// rewritten at most log2(k) + 1 times); a run holding a job the move
    /// writes anew is rewritten whatever its size; too many hidden jobs,
    /// or too many runs, and everything is.
    #[test]
    fn moves_merge_runs_as_a_binary_counter_carries() {
        let n = 1_000;
        // Each run: (name, size); two files a run past `n`.
        let mut runs: Vec<(String, usize)> = Vec::new();
        let files = |runs: &[(String, usize)]| -> (Vec<PathBuf>, Vec<usize>) {
            let mut out = (Vec::new(), Vec::new());
            for (name, size) in runs {
                let parts = if *size > n { 2 } else { 1 };
                for i in 0..parts {
                    out.0.push(PathBuf::from(format!("/d/{name}-{i}")));
                    out.1
                        .push(size / parts + usize::from(i == 0) * (size % parts));
                }
            }
            out
        };
        let mut rewritten = 0;
        for k in 1..=40usize {
            let (paths, sizes) = files(&runs);
            let merge = to_merge(&paths, &sizes, 0, n, &HashSet::new());
            let merged: HashSet<&str> = merge.iter().map(|&i| run_of(&paths[i])).collect();
            let size = n
                + (runs.iter())
                    .filter(|(name, _)| merged.contains(&**name))
                    .map(|(_, size)| size)
                    .sum::<usize>();
            rewritten += size;
            runs.retain(|(name, _)| !merged.contains(&**name));
            runs.push((format!("spill-t-{k}"), size));
            let mut got: Vec<usize> = runs.iter().map(|(_, s)| s / n).collect();
            got.sort_unstable();
            let bits: Vec<usize> = (0..8).filter(|b| k >> b & 1 == 1).map(|b| 1 << b).collect();
            assert_eq!(got, bits, "after {k} moves");
        }
        // 40 moves of 1,000: each job written at most 6 times (1 + log2 40).
        assert!(rewritten <= 40 * n * 6, "{rewritten}");
        let (paths, sizes) = files(&runs);
        // Runs of 8,000 and 32,000, neither a move of 1,000 takes, unless
        // it writes anew a job of one: that run (both its files), and no
        // larger one.
        assert_eq!(to_merge(&paths, &sizes, 0, n, &HashSet::new()).len(), 0);
        let smaller = sizes.iter().enumerate().min_by_key(|(_, s)| **s).unwrap().0;
        let merge = to_merge(&paths, &sizes, 0, n, &HashSet::from([smaller]));
        let merged: HashSet<&str> = merge.iter().map(|&i| run_of(&paths[i])).collect();
        assert_eq!(merged, HashSet::from([run_of(&paths[smaller])]));
        assert_eq!(merge.len(), 2, "both files of the run");
        let every: Vec<usize> = (0..paths.len()).collect();
        assert_eq!(
            to_merge(&paths, &sizes, MAX_HIDDEN + 1, n, &HashSet::new()),
            every
        );
        assert_eq!(
            to_merge(&paths, &sizes, MAX_HIDDEN, n, &HashSet::new()).len(),
            0
        );
        let many: Vec<PathBuf> = (0..=MAX_RUNS)
            .map(|i| PathBuf::from(format!("/d/r{i}-0")))
            .collect();
        let big = vec![10 * n; many.len()];
        assert_eq!(
            to_merge(&many, &big, 0, n, &HashSet::new()).len(),
            many.len()
        );
        assert_eq!(
            to_merge(&many[1..], &big[1..], 0, n, &HashSet::new()).len(),
            0
        );
    }

    /// A first pass over a directory with more logs than a pass reads
    /// at once moves them to segments as it goes (a chunk at a time, not
    /// all at the end), and answers as the catalog does; the unreadable
    /// and unfinished logs of every chunk are kept, and the next rescan
    /// reads nothing.
    #[test]
    fn a_first_pass_moves_what_it_read_a_chunk_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let spill = tempfile::tempdir().unwrap();
        let mut r = below(79);
        let mut ids = Vec::new();
        write_logs(dir.path(), 300, "a", &mut ids, &mut r);
        for i in 0..7 {
            std::fs::write(dir.path().join(format!("bad-{i}.eventlog")), "not a log\n").unwrap();
            std::fs::write(
                dir.path().join(format!("run-{i}.eventlog.running")),
                "{\"ev\":\"JobStart\",\"version\":1,\"data\":{}}\n",
            )
            .unwrap();
        }
        let mut s = plain(dir.path()).with_spill(spill.path().join("segments"), 40);
        s.spill.as_mut().unwrap().chunk = 50;
        let report = s.rescan();
        let oracle = plain(dir.path());
        assert_eq!(report, oracle.rescan());
        // 314 logs, 50 at a time: a move after each chunk that left 40
        // completed jobs or more in memory (one move, without chunks);
        // what the last left, under 40, stays in memory.
        assert!(s.cold_version() >= 5, "{}", s.cold_version());
        assert_eq!(s.len(), 300);
        assert!(s.spilled() > 300 - 40, "{}", s.spilled());
        // The moves carried as a counter does: more than one run is left,
        // and the answers are the same over them.
        let runs: HashSet<String> = (s.cold.read().paths().iter())
            .map(|p| run_of(p).to_string())
            .collect();
        assert!(runs.len() > 1, "{runs:?}");
        the_same(&oracle, &s, &ids, &mut r, 0);
        assert_eq!(s.rescan(), crate::scan::ScanReport::default());
        the_same(&oracle, &s, &ids, &mut r, 1);
    }

    /// A pass asked to stop before it starts reads one slice of its logs
    /// and takes them in (moved to segments, when the store spills), and
    /// leaves the rest: an unfinished job whose log it did not read again
    /// stays listed. Saved and restarted from the index, the next pass
    /// reads only the rest, and the store answers as one that read every
    /// log in one pass (the oracle).
    #[test]
    fn a_pass_asked_to_stop_takes_in_a_slice_and_the_next_reads_the_rest() {
        use crate::stop::SLICE;
        for spilling in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let index = dir.path().join("index");
            let (mut r, mut ids) = (below(83), Vec::new());
            let open = || {
                let s = plain(dir.path()).with_index_file(Some(index.clone()));
                match spilling {
                    true => s.with_spill(spill_dir_of(&index), 0),
                    false => s,
                }
            };
            let start = |i: usize| {
                let start = bjh_format::record::JobStart {
                    job_id: format!("run-{i}"),
                    ..Default::default()
                };
                let kind = bjh_format::record::kind::JOB_START;
                bjh_format::record::encode_line(kind, &start).unwrap()
            };
            for i in 0..4 {
                std::fs::write(
                    dir.path().join(format!("run-{i}.eventlog.running")),
                    start(i),
                )
                .unwrap();
            }
            let s = open();
            s.rescan();
            write_logs(dir.path(), 100, "a", &mut ids, &mut r);
            for i in 0..4 {
                let grown = start(i).repeat(2);
                std::fs::write(dir.path().join(format!("run-{i}.eventlog.running")), grown)
                    .unwrap();
            }
            s.stop_passes();
            assert_eq!(s.rescan().read, SLICE);
            for i in 0..4 {
                assert!(
                    s.facts(&format!("run-{i}")).is_some(),
                    "run-{i} still listed"
                );
            }
            assert!(s.len() <= SLICE && s.len() + 4 >= SLICE);
            // No move once stopping: the index saved holds them.
            assert_eq!(s.spilled(), 0);
            s.persist(true);
            drop(s);
            for i in 0..4 {
                std::fs::remove_file(dir.path().join(format!("run-{i}.eventlog.running"))).unwrap();
            }
            let again = open();
            let taken = again.load_persisted();
            assert!(taken > 0 && taken <= SLICE);
            assert_eq!(again.rescan().read, 100 - taken);
            let oracle = plain(dir.path());
            oracle.rescan();
            the_same(&oracle, &again, &ids, &mut r, usize::from(spilling));
        }
    }

    /// A server stopped during its first pass (its stop already come
    /// when the pass starts) does not wait for the pass: the rescans end
    /// with part of the logs taken in and saved, and a restart reads the
    /// rest.
    #[tokio::test]
    async fn the_rescans_stopped_during_the_first_pass_save_what_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        let (mut r, mut ids) = (below(89), Vec::new());
        write_logs(dir.path(), 200, "a", &mut ids, &mut r);
        let open = || Arc::new(plain(dir.path()).with_index_file(Some(index.clone())));
        let s = open();
        let every = std::time::Duration::from_secs(3600);
        s.clone().rescan_every(every, std::future::ready(())).await;
        drop(s);
        let again = open();
        let taken = again.load_persisted();
        assert!(taken > 0 && taken < 200, "{taken}");
        assert_eq!(again.rescan().read, 200 - taken);
        assert_eq!(again.len(), 200);
    }

    /// A move asked to stop (the server stopping) ends before it writes
    /// a segment: the jobs stay in memory, the segments serve as before
    /// and no file is added beside them; saved and restarted, the store
    /// answers as one that read every log (the oracle).
    #[test]
    fn a_move_heard_to_stop_leaves_the_jobs_in_memory_and_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        let (mut r, mut ids) = (below(97), Vec::new());
        write_logs(dir.path(), 100, "a", &mut ids, &mut r);
        let open = || {
            (plain(dir.path()).with_index_file(Some(index.clone())))
                .with_spill(spill_dir_of(&index), 50)
        };
        let mut s = open();
        s.rescan();
        s.persist(true);
        let spilled = s.spilled();
        assert!(spilled >= 50, "{spilled}");
        let files = || -> Vec<String> {
            let mut names: Vec<String> = (std::fs::read_dir(spill_dir_of(&index)).unwrap())
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let before = files();
        s.spill.as_mut().unwrap().at = 1_000;
        write_logs(dir.path(), 60, "b", &mut ids, &mut r);
        s.rescan();
        s.spill.as_mut().unwrap().at = 50;
        s.stop_passes();
        let Err(IndexError::Io(e)) = s.spill() else {
            panic!("the move went on");
        };
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
        assert_eq!((s.spilled(), s.len()), (spilled, 160));
        assert_eq!(files(), before);
        s.persist(true);
        drop(s);
        let again = open();
        assert_eq!(again.load_persisted(), 160);
        let oracle = plain(dir.path());
        oracle.rescan();
        the_same(&oracle, &again, &ids, &mut r, 0);
    }

    /// A stop ends a rescan's listing of a directory after the chunk of
    /// names it stamped (`STAMP_CHUNK`, 64 here): the pass covers the
    /// names up to there, so a deleted log among them leaves the list and
    /// one past them stays until a pass reaches it; with the jobs in
    /// memory and on disk.
    #[test]
    fn a_stop_ends_the_listing_of_a_directory_at_the_chunk_it_reached() {
        for spilling in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let spill = tempfile::tempdir().unwrap();
            let s = match spilling {
                true => plain(dir.path()).with_spill(spill.path().join("segments"), 0),
                false => plain(dir.path()),
            };
            let (mut r, mut ids) = (below(83), Vec::new());
            write_logs(dir.path(), 150, "s", &mut ids, &mut r);
            s.rescan();
            assert_eq!(s.len(), 150);
            assert_eq!(s.spilled() > 0, spilling);
            // Names and ids sort alike (ids of one length).
            ids.sort();
            let (near, far) = (&ids[5], &ids[140]);
            for id in [near, far] {
                std::fs::remove_file(dir.path().join(format!("{id}.eventlog"))).unwrap();
            }
            s.stop_passes();
            s.rescan();
            assert!(
                s.facts(near).is_none(),
                "{spilling}: covered and gone, still listed"
            );
            assert!(s.facts(far).is_some(), "{spilling}: not reached, yet gone");
            assert_eq!(s.len(), 149);
        }
    }

    /// `n` new logs under `dir`, their ids added to `ids`.
    fn write_logs(
        dir: &Path,
        n: usize,
        tag: &str,
        ids: &mut Vec<String>,
        r: &mut impl FnMut(u64) -> u64,
    ) {
        for i in 0..n {
            let id = format!("job-{:03}{tag}{i:03}", r(1_000));
            std::fs::write(dir.join(format!("{id}.eventlog")), log(&id, r)).unwrap();
            ids.push(id);
        }
    }

    /// Every completed job added or removed since a position the journal
    /// gave (new logs, deleted, made unreadable, forgotten, moved to the
    /// segments and hidden there) is among the ids it gives for that
    /// position, or it gives none (fallen behind). The oracle: the store's
    /// completed ids walked at each position and at the end.
    #[test]
    fn the_journal_names_every_job_added_or_removed_since_a_position() {
        let dir = tempfile::tempdir().unwrap();
        let spill = tempfile::tempdir().unwrap();
        let s = plain(dir.path()).with_spill(spill.path().join("segments"), 30);
        let mut r = below(83);
        let mut ids: Vec<String> = Vec::new();
        let ids_now = |s: &LogStore| -> HashSet<String> {
            s.with_completed(|jobs| jobs.map(|j| j.job_id().to_string()).collect())
        };
        let mut seen = Vec::new();
        for round in 0..16 {
            write_logs(
                dir.path(),
                1 + r(10) as usize,
                &format!("r{round}"),
                &mut ids,
                &mut r,
            );
            for _ in 0..r(4) {
                let id = ids[r(ids.len() as u64) as usize].clone();
                let path = dir.path().join(format!("{id}.eventlog"));
                match r(3) {
                    0 => drop(std::fs::remove_file(path)),
                    1 if path.exists() => std::fs::write(path, "not a log\n").unwrap(),
                    _ => s.forget(&id),
                }
            }
            s.rescan();
            seen.push((s.changes_at(), ids_now(&s)));
        }
        assert!(s.spilled() > 0, "moves ran");
        let now = ids_now(&s);
        let (mut known, mut behind) = (0, 0);
        for (at, then) in &seen {
            match s.changed_since(*at) {
                Some((changed, _)) => {
                    known += 1;
                    let changed: HashSet<&String> = changed.iter().collect();
                    for id in then.symmetric_difference(&now) {
                        assert!(changed.contains(id), "{id} changed since {at}");
                    }
                }
                None => behind += 1,
            }
        }
        assert!(known > 1 && behind > 0, "{known} known, {behind} behind");
    }

    /// What a store changes while a spill writes (a segment's job
    /// forgotten or read again, a catalog job written read again or
    /// forgotten, a new one) is what it holds once the spill serves: the
    /// catalog's answers over the directory, and a rescan reads nothing.
    #[test]
    fn what_changes_while_a_spill_writes_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let spill = tempfile::tempdir().unwrap();
        let mut s = plain(dir.path()).with_spill(spill.path().join("segments"), 0);
        let mut r = below(67);
        let mut ids = Vec::new();
        write_logs(dir.path(), 200, "a", &mut ids, &mut r);
        s.rescan();
        assert_eq!(s.spilled(), 200);
        s.spill.as_mut().unwrap().at = usize::MAX;
        write_logs(dir.path(), 100, "b", &mut ids, &mut r);
        s.rescan();
        assert_eq!((s.spilled(), s.len()), (200, 300));
        s.spill.as_mut().unwrap().at = 0;
        let written = s.spill_write(s.spill.as_ref().unwrap()).unwrap().unwrap();
        let path = |id: &str| dir.path().join(format!("{id}.eventlog"));
        // A segment's job forgotten, another read again; a catalog job
        // read again, another forgotten; a new one.
        let (a, e, b, c) = (&ids[3], &ids[7], &ids[203], &ids[207]);
        std::fs::remove_file(path(a)).unwrap();
        s.forget(a);
        for id in [e, b] {
            std::fs::write(path(id), log(id, &mut r) + "\n").unwrap();
            s.take_in_log(&path(id));
        }
        std::fs::remove_file(path(c)).unwrap();
        s.forget(c);
        write_logs(dir.path(), 1, "d", &mut ids, &mut r);
        s.take_in_log(&path(ids.last().unwrap()));
        assert_eq!(s.spill_swap(written).unwrap(), 98);
        let oracle = plain(dir.path());
        oracle.rescan();
        the_same(&oracle, &s, &ids, &mut r, 0);
        assert_eq!(s.rescan().read, 0);
        the_same(&oracle, &s, &ids, &mut r, 1);
    }

    /// A walk over every job holds no lock while its caller reads (a
    /// rescan, a move to new segments and the save that deletes the old
    /// ones all go on meanwhile), and reads the jobs as they were when it
    /// began, in order, to the end.
    #[test]
    fn a_walk_holds_no_lock_and_reads_the_jobs_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        let mut r = below(73);
        let mut ids = Vec::new();
        write_logs(dir.path(), 300, "a", &mut ids, &mut r);
        let s = plain(dir.path())
            .with_index_file(Some(index.clone()))
            .with_spill(spill_dir_of(&index), 100);
        s.rescan();
        write_logs(dir.path(), 60, "b", &mut ids, &mut r);
        s.rescan();
        s.persist(true);
        assert_eq!((s.spilled(), s.len()), (300, 360));
        let before: Vec<bytes::Bytes> = {
            let oracle = plain(dir.path());
            oracle.rescan();
            oracle.with_completed(|jobs| jobs.map(|j| j.entry()).collect())
        };
        let segments = |s: &LogStore| s.cold.read().paths().to_vec();
        let old = segments(&s);
        let walked: Vec<bytes::Bytes> = s.with_completed(|jobs| {
            let mut out: Vec<bytes::Bytes> = jobs.take(10).map(|j| j.entry()).collect();
            assert!(s.catalog.try_write().is_some() && s.cold.try_write().is_some());
            for id in &ids[..20] {
                std::fs::remove_file(dir.path().join(format!("{id}.eventlog"))).unwrap();
            }
            // More than the run on disk: the move rewrites it.
            write_logs(dir.path(), 400, "c", &mut ids, &mut r);
            s.rescan();
            s.persist(true);
            assert!(
                old.iter().all(|p| !p.exists()),
                "the walk's segments deleted"
            );
            assert_ne!(segments(&s), old);
            out.extend(jobs.map(|j| j.entry()));
            out
        });
        assert_eq!(walked, before);
        assert_eq!(s.len(), 740);
        // By query, the catalog's jobs (new ones, not moved yet) and the
        // segments' merged: every job once, the hashes never falling (the
        // oracle: a store over the same logs, every job in memory, sorted
        // here).
        write_logs(dir.path(), 50, "d", &mut ids, &mut r);
        s.rescan();
        assert_eq!(s.len() - s.spilled(), 50);
        let hashed = |j: Arc<JobSummary>| (j.query_hash(), j.entry());
        let by_query: Vec<(u64, bytes::Bytes)> =
            s.with_completed_by_query(0..=u64::MAX, |jobs| jobs.map(hashed).collect());
        assert!(by_query.windows(2).all(|w| w[0].0 <= w[1].0));
        let oracle = plain(dir.path());
        oracle.rescan();
        let mut want: Vec<(u64, bytes::Bytes)> =
            oracle.with_completed(|jobs| jobs.map(hashed).collect());
        assert!(want.iter().filter(|j| j.0 != 0).count() > 500);
        want.sort();
        let mut got = by_query;
        got.sort();
        assert_eq!(got, want);
        let some = s.with_completed_by_query(2..=u64::MAX, |jobs| jobs.count());
        assert_eq!(some, want.iter().filter(|j| j.0 >= 2).count());
        // By id: the plain store's jobs sorted by id, catalog and
        // segments merged.
        let by_id: Vec<String> =
            s.with_completed_by_id(|jobs| jobs.map(|j| j.job_id().to_string()).collect());
        let mut want: Vec<String> =
            oracle.with_completed(|jobs| jobs.map(|j| j.job_id().to_string()).collect());
        want.sort();
        assert_eq!(by_id, want);
    }

    /// Paged a few at a time from the catalog and the segments, the
    /// completed jobs' ids are those of the walk over every job, in its
    /// order, each once.
    #[test]
    fn completed_ids_page_through_every_job_in_the_walks_order() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        let mut r = below(79);
        let mut ids = Vec::new();
        write_logs(dir.path(), 200, "a", &mut ids, &mut r);
        let s = plain(dir.path())
            .with_index_file(Some(index.clone()))
            .with_spill(spill_dir_of(&index), 50);
        s.rescan();
        write_logs(dir.path(), 30, "b", &mut ids, &mut r);
        s.rescan();
        assert!(s.spilled() > 0 && s.spilled() < s.len());
        let walked: Vec<String> =
            s.with_completed(|jobs| jobs.map(|j| j.job_id().to_string()).collect());
        let (mut paged, mut after) = (Vec::new(), None);
        loop {
            let (ids, next) = s.completed_ids(after.as_ref(), 7);
            assert!(ids.len() <= 7);
            paged.extend(ids);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(paged, walked);
        assert_eq!(paged.len(), 230);
    }

    /// A restart opens the segments the manifest beside the index names
    /// (with the jobs it hides) and reads no log; a manifest damaged, of
    /// another index, naming a missing or a foreign file is refused, and
    /// the directory is indexed again, losing nothing.
    #[test]
    fn a_restart_opens_the_spilled_segments_and_a_bad_manifest_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        let mut r = below(71);
        let mut ids = Vec::new();
        write_logs(dir.path(), 300, "a", &mut ids, &mut r);
        let with_index = || plain(dir.path()).with_index_file(Some(index.clone()));
        let first = with_index().with_spill(spill_dir_of(&index), 100);
        first.rescan();
        write_logs(dir.path(), 50, "b", &mut ids, &mut r);
        for id in &ids[..10] {
            std::fs::remove_file(dir.path().join(format!("{id}.eventlog"))).unwrap();
        }
        first.rescan();
        assert_eq!((first.spilled(), first.len()), (290, 340));
        first.persist(true);
        let oracle = plain(dir.path());
        oracle.rescan();
        // Without a spill threshold of its own: it serves what was spilled.
        let second = with_index();
        assert_eq!(second.load_persisted(), 340);
        assert_eq!(second.spilled(), 290);
        the_same(&oracle, &second, &ids, &mut r, 0);
        assert_eq!(second.rescan().read, 0);
        the_same(&oracle, &second, &ids, &mut r, 1);
        let manifest = manifest_of(&index);
        let good = std::fs::read(&manifest).unwrap();
        let segment = std::fs::read_dir(spill_dir_of(&index))
            .unwrap()
            .flatten()
            .find(|e| is_spilled(e.file_name().to_str().unwrap()))
            .unwrap()
            .path();
        let (sum, names, _) = decode_manifest(&good).unwrap();
        type Spoil<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let damage: [Spoil<'_>; 4] = [
            (
                "a byte flipped",
                Box::new(|| {
                    let mut bad = good.clone();
                    bad[20] ^= 1;
                    std::fs::write(&manifest, bad).unwrap();
                }),
            ),
            (
                "another index's",
                Box::new(|| {
                    std::fs::write(&manifest, encode_manifest(sum ^ 1, &names, &[])).unwrap();
                }),
            ),
            (
                "a segment missing",
                Box::new(|| {
                    std::fs::rename(&segment, dir.path().join("aside")).unwrap();
                }),
            ),
            (
                "a foreign file named",
                Box::new(|| {
                    let foreign = vec!["spill-/../../index".to_string()];
                    std::fs::write(&manifest, encode_manifest(sum, &foreign, &[])).unwrap();
                }),
            ),
        ];
        for (what, spoil) in damage {
            spoil();
            let s = with_index();
            assert_eq!(s.load_persisted(), 0, "{what}");
            assert_eq!(s.rescan().read, 340, "{what}");
            the_same(&oracle, &s, &ids, &mut r, 2);
            std::fs::write(&manifest, &good).unwrap();
            if !segment.exists() {
                std::fs::rename(dir.path().join("aside"), &segment).unwrap();
            }
        }
        // A save names the segments serving and removes the others.
        let third = with_index().with_spill(spill_dir_of(&index), 0);
        assert_eq!(third.load_persisted(), 340);
        third.rescan();
        third.persist(true);
        let (_, names, hidden) = decode_manifest(&std::fs::read(&manifest).unwrap()).unwrap();
        // The move of the 50 jobs in memory left the run of 290 as it was
        // (larger): it still hides the ten deleted.
        let mut hidden: Vec<&str> = hidden.iter().map(|j| j.job_id()).collect();
        hidden.sort_unstable();
        let mut deleted: Vec<&str> = ids[..10].iter().map(String::as_str).collect();
        deleted.sort_unstable();
        assert_eq!(hidden, deleted);
        let mut on_disk: Vec<String> = std::fs::read_dir(spill_dir_of(&index))
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n != "MANIFEST")
            .collect();
        let mut names = names;
        names.sort();
        on_disk.sort();
        assert_eq!(on_disk, names);
        assert_eq!(with_index().load_persisted(), 340);
    }

    /// The segments' directory planted as a link to another directory
    /// (holding a file named as a segment): nothing is written or
    /// removed through it, the jobs stay in memory, a restart indexes the
    /// directory again, and nothing is lost.
    #[test]
    fn a_segments_directory_planted_as_a_link_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("spill-victim");
        std::fs::write(&victim, b"not ours").unwrap();
        let index = dir.path().join("index");
        std::os::unix::fs::symlink(elsewhere.path(), spill_dir_of(&index)).unwrap();
        let mut r = below(73);
        let mut ids = Vec::new();
        write_logs(dir.path(), 40, "a", &mut ids, &mut r);
        let with_index = || plain(dir.path()).with_index_file(Some(index.clone()));
        let s = with_index().with_spill(spill_dir_of(&index), 0);
        s.rescan();
        s.persist(true);
        assert_eq!((s.len(), s.spilled()), (40, 0));
        let left: Vec<_> = std::fs::read_dir(elsewhere.path())
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(left.len(), 1);
        assert_eq!(std::fs::read(&victim).unwrap(), b"not ours");
        let again = with_index();
        again.load_persisted();
        again.rescan();
        let oracle = plain(dir.path());
        oracle.rescan();
        the_same(&oracle, &again, &ids, &mut r, 0);
    }

    fn the_same(
        oracle: &LogStore,
        s: &LogStore,
        ids: &[String],
        r: &mut impl FnMut(u64) -> u64,
        round: usize,
    ) {
        let what = |x: &str| format!("round {round}: {x}");
        assert_eq!(s.len(), oracle.len(), "{}", what("len"));
        let skip: HashSet<String> = (0..3)
            .map(|_| ids[r(ids.len() as u64) as usize].clone())
            .collect();
        for unfinished in [false, true] {
            assert_eq!(
                s.counts(&skip, unfinished),
                oracle.counts(&skip, unfinished),
                "{}",
                what("counts")
            );
        }
        assert_eq!(
            s.counts_by_scheduler(),
            oracle.counts_by_scheduler(),
            "{}",
            what("by scheduler")
        );
        let all: Vec<Arc<JobSummary>> = oracle.with_completed(|jobs| jobs.collect());
        let mine: Vec<bytes::Bytes> = s.with_completed(|jobs| jobs.map(|j| j.entry()).collect());
        let theirs: Vec<bytes::Bytes> = all.iter().map(|j| j.entry()).collect();
        assert_eq!(mine, theirs, "{}", what("every job"));
        for i in 0..80 {
            let (q, cursor) = random_query(r, &all);
            let skip = if i % 4 == 0 {
                skip.clone()
            } else {
                HashSet::new()
            };
            let want = oracle.page(&q, cursor.as_ref(), &skip);
            let got = s.page(&q, cursor.as_ref(), &skip);
            assert_eq!(
                page_ids(&got),
                page_ids(&want),
                "{}",
                what(&format!("{q:?}"))
            );
            assert_eq!(got.total, want.total, "{}", what(&format!("{q:?}")));
            let entries = |p: &Page| p.rows.iter().map(|r| r.entry.clone()).collect::<Vec<_>>();
            assert_eq!(entries(&got), entries(&want));
        }
        for _ in 0..40 {
            let id = &ids[r(ids.len() as u64) as usize];
            assert_eq!(s.contains(id), oracle.contains(id), "{}", what(id));
            let entry = |s: &LogStore| s.summary(id).map(|j| j.entry());
            assert_eq!(entry(s), entry(oracle), "{}", what(id));
            assert_eq!(s.facts(id), oracle.facts(id), "{}", what(id));
            assert_eq!(s.log_len(id), oracle.log_len(id), "{}", what(id));
        }
        let files = |s: &LogStore| {
            let mut f: Vec<(String, u64, u64)> = (s.completed_files().into_iter())
                .map(|f| (f.file_name.to_string(), f.len, f.end_time))
                .collect();
            f.sort();
            f
        };
        assert_eq!(files(s), files(oracle), "{}", what("files"));
        // Windows wide and narrow (the segments skip blocks by their
        // times for the narrow ones), at the edges and past them.
        for (from, to) in [
            (1_500, 2_000),
            (1_000, 1_011),
            (2_200, 2_201),
            (3_150, 9_000),
            (0, 1),
        ] {
            let ran = |s: &LogStore| {
                let mut ids: Vec<String> = (s.ran_between(from, to).into_iter())
                    .map(|j| j.job_id().to_string())
                    .collect();
                ids.sort();
                ids
            };
            assert_eq!(
                ran(s),
                ran(oracle),
                "{}",
                what(&format!("ran in {from}..{to}"))
            );
        }
    }
}
