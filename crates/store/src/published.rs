//! Published summaries: how a history server over an object-store prefix
//! learns of a fleet's jobs without listing every log.
//!
//! Each recording scheduler over a prefix publishes, beside its logs, the
//! list summaries of the jobs it uploaded, in segments, and a manifest of
//! its segments:
//!
//! ```text
//! <prefix>/.ballista-job-history.summaries/<key>.manifest.json
//! <prefix>/.ballista-job-history.summaries/<key>/<blake3 of the bytes>.seg
//! ```
//!
//! `<key>` is the BLAKE3 hash of the scheduler id (any id makes a safe
//! name); the manifest names the id. A segment is the persistent index's
//! format (`snapshot`: magic, records, count, checksum), so one encoder
//! and one strict decoder serve both. A rescan then costs one `LIST` of
//! the folder, one `GET` per manifest that changed and one per segment
//! not read yet: its requests grow with new segments, not with logs.
//!
//! **Logs no segment names** (written by upstream's scheduler, by one
//! that died before publishing, or before this version) are found by the
//! listing pass, which is bounded and resumable: each rescan lists at
//! most `--listing-pages-per-rescan` pages of 1,000 names, going on from
//! where the last one stopped and starting over at the end. A job whose
//! log is gone leaves the catalog when the pass next covers its name;
//! with `0` pages, every rescan lists the whole prefix, as before.
//!
//! **Whole or nothing:** a segment is put (one `PUT`) before the manifest
//! that names it, so a manifest names only whole segments; a segment's
//! name is the hash of its bytes, so a segment whose bytes do not match
//! is refused (a replaced or damaged one), as is one the decoder refuses
//! (truncated, garbage). A manifest that cannot be read, a segment that
//! is missing, damaged or refused, or an entry that lies (its file is not
//! a completed log of the job it names) is said once and costs nothing
//! but itself: the listing pass finds those logs. The logs stay the
//! truth; deleting the folder loses nothing.
//!
//! **Bounded segments:** a publisher merges its last [`FANIN`] segments
//! of one size class into one (size-tiered, as LSM trees do), so a
//! manifest names at most `FANIN - 1` segments per class, a few dozen for
//! millions of jobs; a merge leaves out jobs this process no longer
//! holds (their logs removed by retention), and deletes the merged
//! segments after the new manifest is up.

use super::*;
use crate::snapshot;
use serde::{Deserialize, Serialize};

/// The folder under the prefix.
pub const FOLDER: &str = ".ballista-job-history.summaries";
/// A manifest's name: the key, then this.
pub const MANIFEST_SUFFIX: &str = ".manifest.json";
/// A segment's name: the hash of its bytes, then this.
pub const SEGMENT_SUFFIX: &str = ".seg";
/// Names one listing page asks for.
pub const PAGE_KEYS: usize = 1000;
/// Listing pages a rescan reads by default (10,000 names): a prefix of
/// fewer logs is listed whole every rescan, as without segments.
pub const DEFAULT_LISTING_PAGES: usize = 10;
/// Segments of one size class merged into one.
pub const FANIN: usize = 8;
/// The manifest's format version.
pub const MANIFEST_VERSION: u32 = 1;
const MAX_MANIFEST_BYTES: u64 = 16 << 20;
/// Segments one manifest may name: a publisher's names a few dozen (it
/// merges), so more is a manifest that would cost a request each.
const MAX_SEGMENTS: usize = 4096;
const MAX_SEGMENT_BYTES: u64 = 512 << 20;
/// Removed logs one manifest names at most (the newest): a cleaner
/// deleting a thousand logs an hour takes four days to fill it.
pub const MAX_REMOVED: usize = 100_000;
/// Removed logs a rescan asks the store about at most (a `HEAD` each).
const CHECKS_PER_RESCAN: usize = PAGE_KEYS;
/// Removed logs a reader remembers having seen at most.
const MAX_TOMBSTONES: usize = 1_000_000;

/// A scheduler's list of its segments, oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// The format version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// The scheduler whose jobs these are.
    pub scheduler_id: String,
    /// Its segments, oldest first.
    pub segments: Vec<SegmentRef>,
    /// Completed logs of the prefix this scheduler's cleaner deleted,
    /// oldest first (the newest [`MAX_REMOVED`]). A reader holding a job
    /// of one, or offered one by a segment, asks the store (`HEAD`) and
    /// drops the job once the log is gone, without waiting for its
    /// listing pass to reach the name; a log that is there stays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

/// One segment a manifest names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SegmentRef {
    /// The object's name in the scheduler's folder.
    pub name: String,
    /// The jobs it holds.
    pub jobs: u64,
}

/// Why the entries of `scheduler_id`'s manifest are not to be believed,
/// if they are not: one is of another scheduler's job, or states a time
/// past now or a slot time beyond its span (`format::bounds`).
fn lie_in(scheduler_id: &str, entries: &[JobSummary]) -> Option<String> {
    let clock = bjh_format::bounds::Clock::now();
    entries.iter().find_map(|job| {
        if job.scheduler_id().is_some_and(|s| s != scheduler_id) {
            return Some(format!(
                "an entry of job {:?} names scheduler {:?}",
                job.job_id(),
                job.scheduler_id()
            ));
        }
        let times = [job.queued_time(), job.start_time(), job.end_time()];
        let most = bjh_format::bounds::max_slot_ms(job.start_time(), job.end_time());
        let beyond = times.iter().any(|&t| clock.time(t).1)
            || job.usage().is_some_and(|u| u.busy_slot_ms > most);
        beyond.then(|| {
            format!(
                "the entry of job {:?} states figures beyond their bounds",
                job.job_id()
            )
        })
    })
}

/// The key (manifest name and folder) of `scheduler_id`.
pub fn key_of(scheduler_id: &str) -> String {
    blake3::hash(scheduler_id.as_bytes()).to_hex()[..32].to_string()
}

/// A segment's name: the hash of `bytes`.
fn segment_name(bytes: &[u8]) -> String {
    format!("{}{SEGMENT_SUFFIX}", &blake3::hash(bytes).to_hex()[..32])
}

/// The segment of `jobs`: its name and bytes.
pub fn segment<'a>(jobs: impl Iterator<Item = &'a JobSummary>) -> (String, Vec<u8>) {
    let bytes = snapshot::encode(jobs);
    (segment_name(&bytes), bytes)
}

/// Which names a listing pass covered: a job whose log is not listed is
/// gone only if the pass covered its name.
#[derive(Debug, Clone, Default)]
pub enum Covered {
    /// The whole prefix (or a local directory).
    #[default]
    All,
    /// Names after `after` (from the first: `None`), up to and with
    /// `upto` (to the end: `None`).
    Range {
        /// The name the covered ones follow.
        after: Option<String>,
        /// The last covered name.
        upto: Option<String>,
    },
}

impl Covered {
    /// Whether the listing covered `name`.
    pub fn covers(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Range { after, upto } => {
                after.as_deref().is_none_or(|a| name > a)
                    && upto.as_deref().is_none_or(|u| name <= u)
            }
        }
    }
}

/// What a reader has taken from the published folder.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// Each manifest's stamp when it was read whole.
    manifests: HashMap<String, Stamp>,
    /// Segments read, as `<key>/<name>`.
    segments: HashSet<String>,
    /// Where the listing pass goes on (`None`: from the first name).
    marker: Option<String>,
    /// What was said about, so each is said once.
    said: HashSet<String>,
    /// Removed logs seen in manifests, as `<key>/<name>` (each manifest's
    /// considered once).
    tombstones: HashSet<String>,
    /// Removed logs of jobs held, not asked about yet (over a pass's
    /// budget, or the store failed).
    unchecked: Vec<String>,
}

/// What a publisher has yet to publish, and its manifest as published:
/// two locks, so queueing a job never waits on a publish's requests.
#[derive(Debug)]
pub(crate) struct Publishing {
    scheduler_id: String,
    key: String,
    pending: parking_lot::Mutex<Vec<Arc<JobSummary>>>,
    /// Logs deleted through this store since the last publish.
    removed: parking_lot::Mutex<Vec<String>>,
    /// As last read or put; `None` until read. Held through a publish.
    manifest: parking_lot::Mutex<Option<Manifest>>,
}

impl Publishing {
    pub(crate) fn new(scheduler_id: &str) -> Self {
        Self {
            scheduler_id: scheduler_id.to_string(),
            key: key_of(scheduler_id),
            pending: parking_lot::Mutex::new(Vec::new()),
            removed: parking_lot::Mutex::new(Vec::new()),
            manifest: parking_lot::Mutex::new(None),
        }
    }
}

/// A rescan's listing of a prefix: the logs, what it covered, and the
/// summaries new segments hold.
pub(crate) struct Listing {
    pub(crate) listed: Vec<crate::remote::Listed>,
    pub(crate) covered: Covered,
    pub(crate) published: Vec<JobSummary>,
    /// Logs a manifest says were removed and the store says are gone.
    pub(crate) gone: HashSet<String>,
}

impl LogStore {
    /// Reads only the manifests that changed and the segments not read
    /// yet, then up to the configured number of listing pages. A stop
    /// ends the listing after the page under way (the pass covers the
    /// names listed so far).
    pub(crate) fn remote_listing(&self, dir: &RemoteDir) -> std::io::Result<Listing> {
        if self.listing_pages == 0 {
            return self.whole_listing(dir);
        }
        // A store that cannot list the folder fails the whole pass, as a
        // failed listing does: a page listed without the summaries would
        // read logs they describe.
        let (published, gone) = self.read_published(dir)?;
        let after = self.reading.lock().marker.clone();
        let (listed, at) = self.list_pages(dir, after.clone(), self.listing_pages)?;
        self.reading.lock().marker = at.clone();
        Ok(Listing {
            listed,
            covered: Covered::Range { after, upto: at },
            published,
            gone,
        })
    }

    /// The whole prefix (`--listing-pages-per-rescan 0`): a page at a time
    /// where the store lists by page (a request per 1,000 logs: 100,000 at
    /// 100,000,000), so a stop ends it at the page it reached, the names
    /// up to there covered; else in one listing.
    fn whole_listing(&self, dir: &RemoteDir) -> std::io::Result<Listing> {
        let (listed, covered) = match dir.lists_by_page() {
            false => (dir.list().map_err(crate::remote::io_error)?, Covered::All),
            true => {
                let (listed, at) = self.list_pages(dir, None, usize::MAX)?;
                let covered = |upto| Covered::Range { after: None, upto };
                (listed, at.map_or(Covered::All, |at| covered(Some(at))))
            }
        };
        Ok(Listing {
            listed,
            covered,
            published: Vec::new(),
            gone: HashSet::new(),
        })
    }

    /// Up to `pages` pages of the prefix after `after`, ended early by a
    /// stop: the logs listed, and the last name reached (`None`: the
    /// end).
    fn list_pages(
        &self,
        dir: &RemoteDir,
        after: Option<String>,
        pages: usize,
    ) -> std::io::Result<(Vec<crate::remote::Listed>, Option<String>)> {
        let (mut listed, mut at) = (Vec::new(), after);
        for _ in 0..pages {
            let (page, next) = dir
                .list_page(at.as_deref(), self.page_keys)
                .map_err(crate::remote::io_error)?;
            listed.extend(page);
            at = next;
            if at.is_none() || self.stopping() {
                break;
            }
        }
        Ok((listed, at))
    }

    /// The summaries of the segments not read yet, from the manifests
    /// that changed since the last pass, and the removed logs found gone.
    fn read_published(
        &self,
        dir: &RemoteDir,
    ) -> std::io::Result<(Vec<JobSummary>, HashSet<String>)> {
        let manifests = dir
            .folder_objects(FOLDER)
            .map_err(crate::remote::io_error)?;
        let mut out = Vec::new();
        let mut removed: Vec<(String, String)> = Vec::new();
        for (name, stamp) in manifests {
            let Some(key) = name.strip_suffix(MANIFEST_SUFFIX) else {
                continue;
            };
            if self.reading.lock().manifests.get(&name) == Some(&stamp) {
                continue;
            }
            if self.read_manifest(dir, key, &mut out, &mut removed) {
                self.reading.lock().manifests.insert(name, stamp);
            }
        }
        self.drop_contested(&mut out);
        let gone = self.check_removed(dir, removed, &mut out);
        Ok((out, gone))
    }

    /// Two manifests that describe one log differently (another
    /// scheduler, or other facts): neither is believed for it, and the
    /// listing pass reads the log itself, the truth.
    fn drop_contested(&self, out: &mut Vec<JobSummary>) {
        let mut by_file: HashMap<String, usize> = HashMap::new();
        let mut contested: HashSet<String> = HashSet::new();
        for (i, job) in out.iter().enumerate() {
            let file = job.file_name().into_owned();
            if let Some(&j) = by_file.get(&file) {
                let other = &out[j];
                if other.scheduler_id() != job.scheduler_id() || other.entry() != job.entry() {
                    contested.insert(file);
                }
            } else {
                by_file.insert(file, i);
            }
        }
        if contested.is_empty() {
            return;
        }
        let first = contested.iter().next().cloned().unwrap_or_default();
        self.say_once(
            &format!("contested {first}"),
            format!(
                "{} logs are described differently by two manifests (the first: {first}); \
                 each is read from the log itself",
                contested.len()
            ),
        );
        out.retain(|job| !contested.contains(job.file_name().as_ref()));
    }

    /// Of the logs manifests say were removed (`removed`, new ones, each
    /// with the manifest's key, and
    /// those left unchecked by the last pass), those of a job this reader
    /// holds or `out` offers are asked of the store, [`CHECKS_PER_RESCAN`]
    /// at most: those gone leave `out` and are given back (their jobs
    /// leave the catalog); a log that is there stays (the manifest lied,
    /// or the log was written again); the rest wait for the next pass.
    /// Others cost nothing.
    fn check_removed(
        &self,
        dir: &RemoteDir,
        removed: Vec<(String, String)>,
        out: &mut Vec<JobSummary>,
    ) -> HashSet<String> {
        let mut todo = {
            let mut reading = self.reading.lock();
            let mut todo = std::mem::take(&mut reading.unchecked);
            for (seen, name) in removed {
                if reading.tombstones.len() < MAX_TOMBSTONES && reading.tombstones.insert(seen) {
                    todo.push(name);
                }
            }
            todo
        };
        if todo.is_empty() {
            return HashSet::new();
        }
        let offered: HashSet<String> = out.iter().map(|j| j.file_name().into_owned()).collect();
        todo.retain(|name| {
            let log = LogName::parse(name).filter(|n| !n.running && !name.contains(['/', '\\']));
            log.is_some_and(|n| {
                offered.contains(name) || self.completed_by_file(name, n.stem).is_some()
            })
        });
        let mut gone = HashSet::new();
        let mut later = Vec::new();
        for (i, name) in todo.into_iter().enumerate() {
            if i >= CHECKS_PER_RESCAN {
                later.push(name);
                continue;
            }
            match dir.stamp(&name) {
                Err(object_store::Error::NotFound { .. }) => {
                    gone.insert(name);
                }
                Ok(_) => {}
                Err(e) => {
                    log::debug!("history: cannot ask whether {name} was removed: {e}");
                    later.push(name);
                }
            }
        }
        self.reading.lock().unchecked = later;
        out.retain(|j| !gone.contains(&*j.file_name()));
        gone
    }

    /// Reads one manifest's unread segments into `out`; whether it is done
    /// with (read, or refused for good), rather than to try again.
    fn read_manifest(
        &self,
        dir: &RemoteDir,
        key: &str,
        out: &mut Vec<JobSummary>,
        removed: &mut Vec<(String, String)>,
    ) -> bool {
        let name = format!("{key}{MANIFEST_SUFFIX}");
        let manifest = match dir.read_object(FOLDER, &name, MAX_MANIFEST_BYTES) {
            Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) if m.segments.len() > MAX_SEGMENTS => {
                    let n = m.segments.len();
                    self.say_once(
                        &name,
                        format!("{name} names {n} segments, over {MAX_SEGMENTS}"),
                    );
                    return true;
                }
                Ok(m) if m.version <= MANIFEST_VERSION => m,
                Ok(m) => {
                    self.say_once(&name, format!("{name}: version {} is newer", m.version));
                    return true;
                }
                Err(e) => {
                    self.say_once(&name, format!("{name} is not a manifest: {e}"));
                    return true;
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                self.say_once(&name, format!("{name}: {e}"));
                return true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(e) => {
                self.say_once(&name, format!("cannot read {name}: {e}"));
                return false;
            }
        };
        // A manifest speaks for its own scheduler only: its name is that
        // scheduler's key, and every entry is of that scheduler's jobs.
        if key_of(&manifest.scheduler_id) != key {
            self.distrust(&name, "its name is not its scheduler's key".into());
            return true;
        }
        let folder = format!("{FOLDER}/{key}");
        let mut done = true;
        let mut current = HashSet::new();
        let mut entries = Vec::new();
        for seg in &manifest.segments {
            let path = format!("{key}/{}", seg.name);
            current.insert(path.clone());
            if self.reading.lock().segments.contains(&path) {
                continue;
            }
            match self.read_segment(dir, &folder, &seg.name) {
                Ok(jobs) => entries.extend(jobs),
                Err(SegmentError::Again(e)) => {
                    self.say_once(&path, format!("cannot read {path}: {e}"));
                    done = false;
                    continue;
                }
                Err(SegmentError::Gone) => {
                    // Merged away since the manifest was read: the next
                    // manifest names the merged segment.
                    log::debug!("history: {path} is gone");
                }
                Err(SegmentError::Refused(why)) => {
                    self.metrics.unreadable_logs.inc();
                    self.say_once(&path, format!("{path} is not used: {why}"));
                }
            }
            self.reading.lock().segments.insert(path);
        }
        let prefix = format!("{key}/");
        self.reading
            .lock()
            .segments
            .retain(|p| !p.starts_with(&prefix) || current.contains(p));
        // An entry of another scheduler's job, or one beyond the bounds
        // of a figure (a time past now, a slot time beyond its span): the
        // manifest lies, and none of it is believed, its removals neither
        // (its scheduler's logs are found by the listing pass).
        if let Some(why) = lie_in(&manifest.scheduler_id, &entries) {
            self.distrust(&name, why);
            return done;
        }
        removed.extend(
            (manifest.removed.into_iter().rev().take(MAX_REMOVED))
                .map(|name| (format!("{key}/{name}"), name)),
        );
        out.extend(entries);
        done
    }

    /// Says once that the manifest `name` is not believed, and counts it.
    fn distrust(&self, name: &str, why: String) {
        self.metrics.manifests_distrusted.inc();
        self.say_once(
            &format!("distrusted {name}"),
            format!("{name} is not believed: {why}; its scheduler's logs are listed instead"),
        );
    }

    /// One segment's summaries, checked: its bytes match its name, the
    /// decoder takes them, and each entry names a completed log of its job.
    fn read_segment(
        &self,
        dir: &RemoteDir,
        folder: &str,
        name: &str,
    ) -> Result<Vec<JobSummary>, SegmentError> {
        if name.contains(['/', '\\']) || !name.ends_with(SEGMENT_SUFFIX) {
            return Err(SegmentError::Refused("not a segment's name".into()));
        }
        let bytes = match dir.read_object(folder, name, MAX_SEGMENT_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SegmentError::Gone),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(SegmentError::Refused(e.to_string()));
            }
            Err(e) => return Err(SegmentError::Again(e.to_string())),
        };
        if segment_name(&bytes) != name {
            return Err(SegmentError::Refused(
                "its bytes do not match its name (replaced or damaged)".into(),
            ));
        }
        let jobs = snapshot::decode(&bytes).map_err(|e| SegmentError::Refused(e.to_string()))?;
        let (honest, lying): (Vec<JobSummary>, Vec<JobSummary>) =
            jobs.into_iter().partition(|job| {
                let file = job.file_name();
                LogName::parse(&file).is_some_and(|n| !n.running && n.names(job.job_id()))
            });
        if let Some(job) = lying.first() {
            self.say_once(
                &format!("{folder}/{name}/lying"),
                format!(
                    "{folder}/{name}: {} entries name a file that is not a completed log of \
                     their job (the first: {:?} for job {:?}); left out",
                    lying.len(),
                    job.file_name(),
                    job.job_id()
                ),
            );
        }
        Ok(honest)
    }

    fn say_once(&self, what: &str, message: String) {
        let mut reading = self.reading.lock();
        if reading.said.len() < 10_000 && reading.said.insert(what.to_string()) {
            log::warn!("history: published summaries: {message}");
        }
    }

    /// Publishes this process's summaries under `scheduler_id`: each log
    /// it uploads joins the next segment ([`LogStore::publish`]).
    pub fn with_publishing(mut self, scheduler_id: &str) -> Self {
        if self.remote.is_some() {
            self.publishing = Some(Publishing::new(scheduler_id));
        }
        self
    }

    /// How many listing pages each rescan of a prefix reads (`0`: the
    /// whole prefix, every rescan).
    pub fn with_listing_pages(mut self, pages: usize) -> Self {
        self.listing_pages = pages;
        self
    }

    /// Queues `name`, a completed log this store just deleted, for the
    /// manifest's list of removed logs.
    pub(crate) fn removed_log(&self, name: &str) {
        if let Some(publishing) = &self.publishing
            && LogName::parse(name).is_some_and(|n| !n.running)
        {
            publishing.removed.lock().push(name.to_string());
        }
    }

    /// Queues the job whose log this process just uploaded as `name`.
    pub(crate) fn to_publish(&self, name: &str) {
        let (Some(publishing), Some(parsed)) = (&self.publishing, LogName::parse(name)) else {
            return;
        };
        let job = self.completed_by_file(name, parsed.stem);
        if let Some(job) = job {
            publishing.pending.lock().push(job);
        }
    }

    /// Puts the jobs uploaded since the last call as one segment, then the
    /// manifest naming it, merging segments as [`FANIN`] says: how many
    /// jobs were published. A failure keeps them for the next call.
    /// Blocks on the store: call from a blocking thread.
    pub fn publish(&self) -> std::io::Result<usize> {
        let (Some(publishing), Some(dir)) = (&self.publishing, &self.remote) else {
            return Ok(0);
        };
        let mut manifest_held = publishing.manifest.lock();
        let pending = std::mem::take(&mut *publishing.pending.lock());
        let removed = std::mem::take(&mut *publishing.removed.lock());
        if pending.is_empty() && removed.is_empty() {
            return Ok(0);
        }
        let folder = format!("{FOLDER}/{}", publishing.key);
        let manifest_name = format!("{}{MANIFEST_SUFFIX}", publishing.key);
        let put = (|| {
            let mut manifest = match manifest_held.clone() {
                Some(m) => m,
                None => self.own_manifest(dir, &manifest_name, &publishing.scheduler_id)?,
            };
            if !pending.is_empty() {
                let (name, bytes) = segment(pending.iter().map(|j| &**j));
                dir.put_object(&folder, &name, bytes)?;
                manifest.segments.push(SegmentRef {
                    name,
                    jobs: pending.len() as u64,
                });
            }
            manifest.removed.extend(removed.iter().cloned());
            let over = manifest.removed.len().saturating_sub(MAX_REMOVED);
            manifest.removed.drain(..over);
            let merged = self.merge_tail(dir, &folder, &mut manifest)?;
            dir.put_object(FOLDER, &manifest_name, serde_json::to_vec(&manifest)?)?;
            Ok::<_, std::io::Error>((manifest, merged))
        })();
        let (manifest, merged) = match put {
            Ok(done) => done,
            Err(e) => {
                // Kept, oldest first, for the next call.
                let mut queued = publishing.pending.lock();
                let newer = std::mem::replace(&mut *queued, pending);
                queued.extend(newer);
                let mut queued = publishing.removed.lock();
                let newer = std::mem::replace(&mut *queued, removed);
                queued.extend(newer);
                return Err(e);
            }
        };
        *manifest_held = Some(manifest);
        drop(manifest_held);
        let jobs = pending.len();
        for old in merged {
            if let Err(e) = dir.delete_object(&folder, &old) {
                log::debug!("history: cannot delete the merged segment {old}: {e}");
            }
        }
        Ok(jobs)
    }

    /// This publisher's manifest as published: an empty one when there is
    /// none, or when it cannot be read as one (its segments' jobs are then
    /// found by the listing pass).
    fn own_manifest(&self, dir: &RemoteDir, name: &str, id: &str) -> std::io::Result<Manifest> {
        let fresh = Manifest {
            version: MANIFEST_VERSION,
            scheduler_id: id.to_string(),
            segments: Vec::new(),
            removed: Vec::new(),
        };
        match dir.read_object(FOLDER, name, MAX_MANIFEST_BYTES) {
            Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) if m.version == MANIFEST_VERSION && m.scheduler_id == id => Ok(m),
                _ => {
                    log::warn!(
                        "history: the published manifest {name} is not one this scheduler \
                         can append to; starting a new one"
                    );
                    Ok(fresh)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(fresh),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Ok(fresh),
            Err(e) => Err(e),
        }
    }

    /// Merges the manifest's last [`FANIN`] segments while they are of one
    /// size class: the names merged away (to delete once the manifest is
    /// put).
    fn merge_tail(
        &self,
        dir: &RemoteDir,
        folder: &str,
        manifest: &mut Manifest,
    ) -> std::io::Result<Vec<String>> {
        let class = |jobs: u64| jobs.max(1).ilog(FANIN as u64);
        let mut merged = Vec::new();
        loop {
            let n = manifest.segments.len();
            if n < FANIN {
                return Ok(merged);
            }
            let tail = &manifest.segments[n - FANIN..];
            let c = class(tail[0].jobs);
            if tail.iter().any(|s| class(s.jobs) != c) {
                return Ok(merged);
            }
            let mut jobs = Vec::new();
            for seg in tail {
                let bytes = dir.read_object(folder, &seg.name, MAX_SEGMENT_BYTES)?;
                let decoded = snapshot::decode(&bytes)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                // A job this process no longer holds had its log removed
                // (once the first pass has filled the catalog).
                let ready = self.is_ready();
                jobs.extend(
                    decoded
                        .into_iter()
                        .filter(|j| !ready || self.completed(j.job_id()).is_some()),
                );
            }
            let (name, bytes) = segment(jobs.iter());
            dir.put_object(folder, &name, bytes)?;
            let old: Vec<SegmentRef> = manifest.segments.drain(n - FANIN..).collect();
            merged.extend(old.into_iter().map(|s| s.name).filter(|s| *s != name));
            manifest.segments.push(SegmentRef {
                name,
                jobs: jobs.len() as u64,
            });
        }
    }

    /// Publishes every `interval` until `stop` resolves, then once more.
    pub async fn publish_every(
        self: Arc<Self>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut failing = false;
        loop {
            let stopping = tokio::select! {
                () = tokio::time::sleep(interval) => false,
                () = &mut stop => true,
            };
            let this = self.clone();
            match tokio::task::spawn_blocking(move || this.publish()).await {
                Ok(Ok(_)) if failing => {
                    failing = false;
                    log::info!("history: publishing summaries works again");
                }
                Ok(Err(e)) if !failing => {
                    failing = true;
                    log::warn!(
                        "history: cannot publish the summaries of uploaded jobs: {e}; kept \
                         for the next try (readers find their logs by listing meanwhile)"
                    );
                }
                _ => {}
            }
            if stopping {
                return;
            }
        }
    }
}

enum SegmentError {
    /// Not there (merged away since the manifest was read).
    Gone,
    /// Never to be used (its bytes, its name or its entries).
    Refused(String),
    /// Not read this time (the store failed).
    Again(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::ListQuery;
    use crate::remote::tests::runtime;
    use object_store::memory::InMemory;
    use object_store::path::Path as ObjPath;
    use object_store::{ObjectStore, ObjectStoreExt};

    fn log_bytes(id: &str, start: u64) -> Vec<u8> {
        format!(
            r#"{{"ev":"JobEnd","version":1,"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"job {id}","status":"Completed","job_status":"Completed","start_time":{start},"end_time":{},"num_stages":2,"completed_stages":2,"percent_complete":100}},"job":{{}},"stages":{{}},"config":{{}},"dot":"","dropped_records":0,"scheduler_id":"s-{id}"}}}}"#,
            start + 5
        )
        .into_bytes()
    }

    struct Bucket {
        rt: tokio::runtime::Runtime,
        memory: Arc<InMemory>,
    }

    impl Bucket {
        fn new() -> Self {
            Self {
                rt: runtime(),
                memory: Arc::new(InMemory::new()),
            }
        }

        fn dir(&self) -> RemoteDir {
            RemoteDir::new(
                self.memory.clone(),
                ObjPath::from("p"),
                "memory://p",
                self.rt.handle().clone(),
            )
        }

        fn put(&self, key: &str, bytes: Vec<u8>) {
            let location = ObjPath::from(format!("p/{key}"));
            self.rt
                .block_on(self.memory.put(&location, bytes.into()))
                .unwrap();
        }

        fn delete(&self, key: &str) {
            let location = ObjPath::from(format!("p/{key}"));
            self.rt.block_on(self.memory.delete(&location)).unwrap();
        }

        fn keys(&self, under: &str) -> Vec<String> {
            use futures::TryStreamExt;
            let prefix = ObjPath::from(format!("p/{under}"));
            let listed: Vec<_> = self
                .rt
                .block_on(self.memory.list(Some(&prefix)).try_collect())
                .unwrap();
            let mut keys: Vec<String> =
                listed.into_iter().map(|m| m.location.to_string()).collect();
            keys.sort();
            keys
        }

        /// A store over the prefix: a reader listing `pages` pages of
        /// `keys` names a rescan.
        fn reader(&self, pages: usize, keys: usize) -> LogStore {
            let mut store = LogStore::remote(
                self.dir(),
                Arc::new(bjh_metrics::HistoryMetrics::unregistered()),
            )
            .with_listing_pages(pages);
            store.page_keys = keys;
            store
        }

        /// A recording scheduler's store that uploaded `ids` (puts them,
        /// takes each in as the uploader's word does) and publishes.
        fn publish(&self, scheduler: &str, ids: &[String]) -> LogStore {
            let store = self.reader(0, PAGE_KEYS).with_publishing(scheduler);
            for (i, id) in ids.iter().enumerate() {
                self.put(&format!("{id}.eventlog"), log_bytes(id, 1000 + i as u64));
                store.take_in_object(&format!("{id}.eventlog"));
            }
            assert_eq!(store.publish().unwrap(), ids.len());
            store
        }
    }

    fn listed(store: &LogStore) -> Vec<(String, Vec<u8>)> {
        let mut rows: Vec<(String, Vec<u8>)> = store
            .page(
                &ListQuery {
                    limit: Some(100_000),
                    ..ListQuery::default()
                },
                None,
                &HashSet::new(),
            )
            .rows
            .into_iter()
            .map(|r| (r.facts.job_id().to_string(), r.entry.to_vec()))
            .collect();
        rows.sort();
        rows
    }

    fn ids(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:04}")).collect()
    }

    /// A reader learns every published job from one segment while its
    /// listing pass has covered five names; the entries are those the
    /// publisher made from the logs themselves. A log no segment names
    /// (upstream's) is found as the pass goes on, and a job whose log was
    /// removed leaves once the pass covers its name again.
    #[test]
    fn a_reader_lists_published_jobs_before_its_listing_reaches_them() {
        let bucket = Bucket::new();
        let publisher = bucket.publish("sched-a", &ids("a", 30));
        let published = bucket.keys(FOLDER);
        assert_eq!(published.len(), 2, "{published:?}");
        assert!(published[0].ends_with(MANIFEST_SUFFIX), "{published:?}");
        assert!(published[1].ends_with(SEGMENT_SUFFIX), "{published:?}");

        bucket.put("zz-upstream.eventlog", log_bytes("zz-upstream", 5));
        let reader = bucket.reader(1, 5);
        let first = reader.rescan();
        assert_eq!(
            first.read, 0,
            "the page's five logs are as their summaries say: none read"
        );
        let want = listed(&publisher);
        assert_eq!(want.len(), 30);
        assert_eq!(
            listed(&reader),
            want,
            "every published job, as its log says"
        );

        // A log changed since it was published is read from itself.
        bucket.put("a0029.eventlog", log_bytes("a0029", 99_000));
        let mut read = 0;
        for _ in 0..7 {
            read += reader.rescan().read;
        }
        assert_eq!(
            read, 2,
            "the upstream log and the changed one, nothing else"
        );
        assert_eq!(
            listed(&reader).len(),
            31,
            "the upstream log is found by listing"
        );
        assert!(listed(&reader).iter().any(|(id, _)| id == "zz-upstream"));
        let changed = listed(&reader).into_iter().find(|(id, _)| id == "a0029");
        let changed = String::from_utf8(changed.unwrap().1).unwrap();
        assert!(changed.contains("99000"), "{changed}");

        bucket.delete("a0003.eventlog");
        for _ in 0..8 {
            reader.rescan();
        }
        let now: Vec<String> = listed(&reader).into_iter().map(|(id, _)| id).collect();
        assert_eq!(now.len(), 30, "{now:?}");
        assert!(
            !now.contains(&"a0003".to_string()),
            "a removed log's job leaves"
        );
    }

    /// A log a publishing scheduler's cleaner deletes leaves a reader at
    /// its next rescan, though its listing pass is far from the name, and
    /// a reader starting afresh never lists it. A manifest naming as
    /// removed a log that is there (lying) removes nothing; a name that
    /// is not a completed log's is not asked about.
    #[test]
    fn a_log_a_publisher_removed_leaves_readers_before_their_listing_reaches_it() {
        let bucket = Bucket::new();
        let publisher = bucket.publish("sched-a", &ids("a", 30));
        let reader = bucket.reader(1, 5);
        reader.rescan();
        assert_eq!(listed(&reader).len(), 30);
        let removed = ["a0017", "a0023", "a0029"];
        for id in removed {
            publisher.remove_log(&format!("{id}.eventlog")).unwrap();
        }
        assert_eq!(publisher.publish().unwrap(), 0, "no job, three removals");
        let ids_of = |store: &LogStore| -> Vec<String> {
            listed(store).into_iter().map(|(id, _)| id).collect()
        };
        reader.rescan();
        let now = ids_of(&reader);
        assert_eq!(now.len(), 27, "{now:?}");
        assert!(removed.iter().all(|id| !now.contains(&id.to_string())));
        let fresh = bucket.reader(1, 5);
        fresh.rescan();
        assert_eq!(ids_of(&fresh), now, "a fresh reader never lists them");

        // Another manifest lies: a log that is there, and names that are
        // no completed log's, as removed.
        let liar = Manifest {
            version: MANIFEST_VERSION,
            scheduler_id: "liar".into(),
            segments: Vec::new(),
            removed: vec![
                "a0005.eventlog".into(),
                "a0006.eventlog.running".into(),
                format!("{FOLDER}/x.eventlog"),
            ],
        };
        let name = format!("{FOLDER}/{}{MANIFEST_SUFFIX}", key_of("liar"));
        bucket.put(&name, serde_json::to_vec(&liar).unwrap());
        reader.rescan();
        fresh.rescan();
        assert_eq!(ids_of(&reader), now, "nothing that is there is removed");
        assert_eq!(ids_of(&fresh), now);
        // Removed for real afterwards: the publisher's word is its own.
        publisher.remove_log("a0005.eventlog").unwrap();
        publisher.publish().unwrap();
        reader.rescan();
        assert!(!ids_of(&reader).contains(&"a0005".to_string()));
        assert_eq!(ids_of(&reader).len(), 26);
        // The manifest keeps the removals across publishes.
        let bytes = publisher
            .remote_dir()
            .unwrap()
            .read_object(
                FOLDER,
                &format!("{}{MANIFEST_SUFFIX}", key_of("sched-a")),
                1 << 20,
            )
            .unwrap();
        let manifest: Manifest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(manifest.removed.len(), 4);
    }

    #[test]
    fn objects_compare_by_whole_seconds_files_exactly() {
        let at = |ms: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let listed = Stamp {
            len: 10,
            modified: at(1_700_000_000_123),
        };
        let headed = Stamp {
            len: 10,
            modified: at(1_700_000_000_000),
        };
        assert!(listed.same(headed, true));
        assert!(!listed.same(headed, false));
        let later = Stamp {
            len: 10,
            modified: at(1_700_000_001_000),
        };
        assert!(!listed.same(later, true));
        assert!(!listed.same(Stamp { len: 11, ..headed }, true));
    }

    /// A missing, damaged or lying segment costs its own entries only:
    /// those jobs are found by the listing pass, the rest are taken.
    #[test]
    fn a_damaged_missing_or_lying_segment_is_refused_and_its_logs_are_listed() {
        let bucket = Bucket::new();
        bucket.publish("good", &ids("g", 10));
        bucket.publish("damaged", &ids("d", 10));
        bucket.publish("missing", &ids("m", 10));
        // Damaged: same name, other bytes.
        let damaged = bucket.keys(&format!("{FOLDER}/{}", key_of("damaged")));
        let name = damaged[0].strip_prefix("p/").unwrap().to_string();
        bucket.put(&name, b"BJHIDX08 not a segment".to_vec());
        // Missing.
        let missing = bucket.keys(&format!("{FOLDER}/{}", key_of("missing")));
        bucket.delete(missing[0].strip_prefix("p/").unwrap());
        // Lying: a whole segment whose entry names another job's log.
        bucket.put("l0.eventlog", log_bytes("l0", 1));
        let lie = JobSummary::restore(SummaryParts {
            facts: FactsRef {
                job_id: "g0001",
                job_name: "a lie",
                state: JobState::Failed,
                queued_time: 1,
                start_time: 1,
                end_time: 2,
                query_hash: 0,
            },
            job_status: "Failed",
            status: "Failed",
            stages: [1, 0],
            percent_complete: 0,
            dropped_records: 0,
            file_name: "l0.eventlog",
            len: 10,
            modified: None,
            ranges: None,
            scheduler_id: None,
            usage: None,
            tags: None,
        });
        let (seg, bytes) = segment([&lie].into_iter());
        let key = key_of("liar");
        bucket.put(&format!("{FOLDER}/{key}/{seg}"), bytes);
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            scheduler_id: "liar".into(),
            segments: vec![SegmentRef { name: seg, jobs: 1 }],
            removed: Vec::new(),
        };
        bucket.put(
            &format!("{FOLDER}/{key}{MANIFEST_SUFFIX}"),
            serde_json::to_vec(&manifest).unwrap(),
        );
        // A manifest that is not one, and one naming more segments than
        // any publisher's (each would cost a request).
        bucket.put(&format!("{FOLDER}/junk{MANIFEST_SUFFIX}"), b"{".to_vec());
        let flood = Manifest {
            version: MANIFEST_VERSION,
            scheduler_id: "flood".into(),
            segments: (0..=MAX_SEGMENTS)
                .map(|i| SegmentRef {
                    name: format!("{i:032x}{SEGMENT_SUFFIX}"),
                    jobs: 1,
                })
                .collect(),
            removed: Vec::new(),
        };
        let flood_name = format!("{}{MANIFEST_SUFFIX}", key_of("flood"));
        bucket.put(
            &format!("{FOLDER}/{flood_name}"),
            serde_json::to_vec(&flood).unwrap(),
        );

        let reader = bucket.reader(1, 2);
        reader.rescan();
        let said = reader.reading.lock().said.clone();
        for what in [flood_name.as_str(), &format!("junk{MANIFEST_SUFFIX}")] {
            assert!(said.contains(what), "{what} refused: {said:?}");
        }
        let flood_key = key_of("flood");
        assert!(
            !reader
                .reading
                .lock()
                .segments
                .iter()
                .any(|p| p.starts_with(&flood_key)),
            "no segment of the flood was asked for"
        );
        let first: Vec<String> = listed(&reader).into_iter().map(|(id, _)| id).collect();
        assert!(
            first.iter().filter(|id| id.starts_with('g')).count() == 10,
            "{first:?}"
        );
        assert!(
            first.iter().filter(|id| id.starts_with(['d', 'm'])).count() <= 2,
            "only what the first page listed: {first:?}"
        );
        let g1 = listed(&reader).into_iter().find(|(id, _)| id == "g0001");
        assert!(
            String::from_utf8(g1.unwrap().1)
                .unwrap()
                .contains("job g0001"),
            "the lying entry did not replace g0001"
        );
        for _ in 0..20 {
            reader.rescan();
        }
        assert_eq!(listed(&reader).len(), 31, "every log, by listing");
    }

    /// A regression test: scheduler A's manifest describing B's log (its
    /// real name) made the list show B's job as failed under a forged
    /// name, and billed 9e18 slot-ms to B. Now an entry of another
    /// scheduler's job, or with figures beyond their bounds, makes its
    /// manifest not believed at all (counted); two manifests describing
    /// one log differently are neither believed for it. The jobs are
    /// listed from their logs.
    #[test]
    fn a_manifest_describing_another_schedulers_log_is_not_believed() {
        let bucket = Bucket::new();
        bucket.publish("sched-b", &ids("b", 5));
        // A log whose scheduler published nothing (it died first).
        bucket.put("x0001.eventlog", log_bytes("x0001", 1));
        let forged = |id: &str, scheduler: &str, busy: u64| {
            JobSummary::restore(SummaryParts {
                facts: FactsRef {
                    job_id: id,
                    job_name: "forged",
                    state: JobState::Failed,
                    queued_time: 1,
                    start_time: 1,
                    end_time: 2,
                    query_hash: 0,
                },
                job_status: "Failed",
                status: "Failed",
                stages: [1, 0],
                percent_complete: 0,
                dropped_records: 0,
                file_name: &format!("{id}.eventlog"),
                len: 10,
                modified: None,
                ranges: None,
                scheduler_id: Some(scheduler),
                usage: Some(bjh_format::usage::SlotUsage {
                    busy_slot_ms: busy,
                    failed_slot_ms: 0,
                }),
                tags: None,
            })
        };
        let plant = |liar: &str, job: JobSummary| {
            let (seg, bytes) = segment([&job].into_iter());
            let key = key_of(liar);
            bucket.put(&format!("{FOLDER}/{key}/{seg}"), bytes);
            let manifest = Manifest {
                version: MANIFEST_VERSION,
                scheduler_id: liar.into(),
                segments: vec![SegmentRef { name: seg, jobs: 1 }],
                removed: vec!["b0002.eventlog".into()],
            };
            bucket.put(
                &format!("{FOLDER}/{key}{MANIFEST_SUFFIX}"),
                serde_json::to_vec(&manifest).unwrap(),
            );
        };
        // Billing another scheduler; an impossible figure; naming itself
        // but contradicting B's own manifest.
        plant(
            "liar-a",
            forged("x0001", "sched-x", 9_000_000_000_000_000_000),
        );
        plant(
            "liar-c",
            forged("x0001", "liar-c", 9_000_000_000_000_000_000),
        );
        plant("liar-d", forged("b0004", "liar-d", 1));
        // One page of two names a rescan: the others from the manifests.
        let reader = bucket.reader(1, 2);
        let forged_listed = |reader: &LogStore| {
            listed(reader)
                .into_iter()
                .filter(|(_, entry)| String::from_utf8_lossy(entry).contains("forged"))
                .map(|(id, _)| id)
                .collect::<Vec<_>>()
        };
        reader.rescan();
        assert!(
            forged_listed(&reader).is_empty(),
            "{:?}",
            forged_listed(&reader)
        );
        let said = reader.reading.lock().said.clone();
        assert_eq!(reader.metrics.manifests_distrusted.get(), 2, "{said:?}");
        assert!(said.iter().any(|s| s.starts_with("contested")), "{said:?}");
        for _ in 0..5 {
            reader.rescan();
        }
        let jobs = listed(&reader);
        assert_eq!(jobs.len(), 6, "every log, none removed by a liar");
        assert!(forged_listed(&reader).is_empty());
    }

    /// Eight small publishes merge into one segment; the merged-away
    /// objects are deleted; a reader that read the old ones and one that
    /// starts now list the same jobs, once each.
    #[test]
    fn segments_of_one_size_merge_and_readers_keep_every_job_once() {
        let bucket = Bucket::new();
        let store = bucket.reader(0, PAGE_KEYS).with_publishing("s");
        let early = bucket.reader(1, 1);
        let all = ids("j", FANIN * 3);
        for (n, batch) in all.chunks(3).enumerate() {
            for id in batch {
                bucket.put(&format!("{id}.eventlog"), log_bytes(id, 7));
                store.take_in_object(&format!("{id}.eventlog"));
            }
            assert_eq!(store.publish().unwrap(), 3);
            early.rescan();
            let segments = bucket.keys(&format!("{FOLDER}/{}", key_of("s"))).len();
            assert_eq!(segments, (n + 1) / FANIN + (n + 1) % FANIN, "after {n}");
        }
        let late = bucket.reader(1, 1);
        late.rescan();
        let want = listed(&store);
        assert_eq!(want.len(), all.len());
        assert_eq!(listed(&early), want);
        assert_eq!(listed(&late), want);

        // Retention removes a log (and the job from the publisher's
        // catalog, as the cleaner does) before its segment is merged: the
        // merge leaves it out, so a reader starting after it never lists
        // the job, though its listing pass has not come to the name.
        let store = bucket.reader(0, PAGE_KEYS).with_publishing("r");
        store.rescan();
        for (n, batch) in ids("r", 3 * FANIN).chunks(3).enumerate() {
            for id in batch {
                bucket.put(&format!("{id}.eventlog"), log_bytes(id, 7));
                store.take_in_object(&format!("{id}.eventlog"));
            }
            if n + 1 == FANIN {
                bucket.delete("r0000.eventlog");
                store.forget("r0000");
            }
            store.publish().unwrap();
        }
        let manifest: Manifest = serde_json::from_slice(&bucket.rt.block_on(async {
            let key = format!("p/{FOLDER}/{}{MANIFEST_SUFFIX}", key_of("r"));
            let got = bucket.memory.get(&ObjPath::from(key)).await.unwrap();
            got.bytes().await.unwrap()
        }))
        .unwrap();
        assert_eq!(manifest.segments.len(), 1, "{manifest:?}");
        assert_eq!(manifest.segments[0].jobs, 3 * FANIN as u64 - 1);
        let after = bucket.reader(1, 1);
        after.rescan();
        let now: Vec<String> = listed(&after).into_iter().map(|(id, _)| id).collect();
        assert!(now.contains(&"r0001".to_string()));
        assert!(
            !now.contains(&"r0000".to_string()),
            "a removed job's entry is gone"
        );
    }

    /// An in-memory store that runs a hook once, after it answers the
    /// next listing of the prefix itself.
    struct Hooked {
        inner: Arc<InMemory>,
        hook: parking_lot::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    }

    impl std::fmt::Display for Hooked {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Hooked({})", self.inner)
        }
    }

    impl std::fmt::Debug for Hooked {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_tuple("Hooked").field(&self.inner).finish()
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Hooked {
        async fn put_opts(
            &self,
            location: &ObjPath,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &ObjPath,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &ObjPath,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<ObjPath>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<ObjPath>> {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&ObjPath>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&ObjPath>,
        ) -> object_store::Result<object_store::ListResult> {
            let listed = self.inner.list_with_delimiter(prefix).await;
            if prefix.is_some_and(|p| p.as_ref() == "p")
                && let Some(hook) = self.hook.lock().take()
            {
                std::thread::spawn(hook).join().unwrap();
            }
            listed
        }
        async fn copy_opts(
            &self,
            from: &ObjPath,
            to: &ObjPath,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// A recording scheduler's store over a prefix lists a job whose log
    /// its uploader put, and told it of, while a rescan was listing: that
    /// listing missed the object, and the job is not gone. (It was removed
    /// until a later pass listed it; with a bounded listing pass, until the
    /// pass came round to it.)
    #[test]
    fn a_job_taken_in_while_a_rescan_lists_is_not_removed_by_it() {
        let rt = runtime();
        let inner = Arc::new(InMemory::new());
        let hooked = Arc::new(Hooked {
            inner: inner.clone(),
            hook: parking_lot::Mutex::new(None),
        });
        let dir = RemoteDir::new(
            hooked.clone(),
            ObjPath::from("p"),
            "memory://p",
            rt.handle().clone(),
        );
        let store = Arc::new(LogStore::remote(
            dir,
            Arc::new(bjh_metrics::HistoryMetrics::unregistered()),
        ));
        let put = |id: &str| {
            let location = ObjPath::from(format!("p/{id}.eventlog"));
            futures::executor::block_on(inner.put(&location, log_bytes(id, 1).into())).unwrap();
        };
        put("a");
        store.rescan();
        assert!(store.contains("a"));
        let (uploader, put_b) = (store.clone(), inner.clone());
        *hooked.hook.lock() = Some(Box::new(move || {
            let location = ObjPath::from("p/b.eventlog");
            futures::executor::block_on(put_b.put(&location, log_bytes("b", 2).into())).unwrap();
            uploader.take_in_object("b.eventlog");
        }));
        store.rescan();
        assert!(hooked.hook.lock().is_none(), "the hook ran");
        assert!(
            store.contains("b"),
            "the job the uploader told of is listed"
        );
        assert!(store.contains("a"));
        store.rescan();
        assert!(store.contains("b"));
    }

    /// A store that lists by page (as S3 does), over the bucket's memory,
    /// counting the pages asked for and asking `reader` to stop once it
    /// has served `stop_after` of them.
    struct Paged {
        memory: Arc<InMemory>,
        pages: std::sync::atomic::AtomicUsize,
        stop_after: std::sync::atomic::AtomicUsize,
        reader: std::sync::OnceLock<std::sync::Weak<LogStore>>,
    }

    #[async_trait::async_trait]
    impl object_store::list::PaginatedListStore for Paged {
        async fn list_paginated(
            &self,
            prefix: Option<&str>,
            opts: object_store::list::PaginatedListOptions,
        ) -> object_store::Result<object_store::list::PaginatedListResult> {
            use std::sync::atomic::Ordering::SeqCst;
            let folder = ObjPath::from(prefix.unwrap_or_default().trim_end_matches('/'));
            let mut objects = self
                .memory
                .list_with_delimiter(Some(&folder))
                .await?
                .objects;
            objects.sort_by(|a, b| a.location.cmp(&b.location));
            objects.retain(|m| (opts.offset.as_deref()).is_none_or(|o| m.location.as_ref() > o));
            let max = opts.max_keys.unwrap_or(usize::MAX);
            let more = objects.len() > max;
            objects.truncate(max);
            if self.pages.fetch_add(1, SeqCst) + 1 == self.stop_after.load(SeqCst)
                && let Some(reader) = self.reader.get().and_then(std::sync::Weak::upgrade)
            {
                reader.stop_passes();
            }
            Ok(object_store::list::PaginatedListResult {
                result: object_store::ListResult {
                    common_prefixes: Vec::new(),
                    objects,
                },
                page_token: more.then(|| "more".to_string()),
            })
        }
    }

    /// A stop ends a rescan's listing after the page under way, whether
    /// it lists the whole prefix (`--listing-pages-per-rescan 0`: 100,000
    /// requests at 100,000,000 logs) or some pages: the pass covers the
    /// names listed, so a deleted log among them leaves the list and one
    /// past them stays until a pass reaches it.
    #[test]
    fn a_stop_ends_the_listing_at_the_page_it_reached() {
        use std::sync::atomic::Ordering::SeqCst;
        let bucket = Bucket::new();
        let ids: Vec<String> = (0..50).map(|i| format!("job-{i:03}")).collect();
        for pages in [0, 10] {
            for (i, id) in ids.iter().enumerate() {
                bucket.put(&format!("{id}.eventlog"), log_bytes(id, 1000 + i as u64));
            }
            let paged = Arc::new(Paged {
                memory: bucket.memory.clone(),
                pages: 0.into(),
                stop_after: usize::MAX.into(),
                reader: std::sync::OnceLock::new(),
            });
            let dir = bucket.dir().with_paged_listing(paged.clone());
            let metrics = Arc::new(bjh_metrics::HistoryMetrics::unregistered());
            let mut store = LogStore::remote(dir, metrics).with_listing_pages(pages);
            store.page_keys = 10;
            let store = Arc::new(store);
            paged.reader.set(Arc::downgrade(&store)).unwrap();
            store.rescan();
            assert_eq!((paged.pages.load(SeqCst), store.len()), (5, 50), "{pages}");

            // Asked to stop as the second page comes: two pages listed.
            let (near, far) = ("job-005", "job-045");
            bucket.delete(&format!("{near}.eventlog"));
            bucket.delete(&format!("{far}.eventlog"));
            paged.pages.store(0, SeqCst);
            paged.stop_after.store(2, SeqCst);
            store.rescan();
            assert_eq!(paged.pages.load(SeqCst), 2, "{pages}: the listing went on");
            assert!(
                !store.contains(near),
                "{pages}: a covered log gone stays listed"
            );
            assert!(
                store.contains(far),
                "{pages}: a log not reached left the list"
            );
            assert_eq!(store.len(), 49, "{pages}");
        }
    }
}
