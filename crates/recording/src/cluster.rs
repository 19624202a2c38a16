//! The cluster recorder: samples the scheduler's executors (its own
//! `GET /api/executors`, in process) every [`SAMPLE_EVERY`], and appends
//! what changed to the day's cluster log (`format::cluster`): an executor
//! first seen, an executor gone (at its last heartbeat, as the scheduler
//! reported it), a mark of the executors up every minute, and the
//! executors up closed at the scheduler's own stop.
//!
//! Sampling, rather than a hook in each gRPC call, leaves the scheduler's
//! executor manager the one authority on which executors are registered;
//! the gRPC tap's [`Contacts`] give an executor's start and end to the
//! millisecond (its first and last call), the sample only when it is
//! written (within a second). Lines are appended and synced on the
//! blocking pool, never on the scheduler's event loop; a write that fails
//! is logged and the next mark lists the executors up again, so a lost
//! line costs at most the time to the next sample; the file is opened for
//! each write, never held open.

use crate::live::LiveScheduler;
use bjh_format::cluster::{
    CLUSTER_DIR, ClusterMark, ExecutorDown, ExecutorUp, MARK_EVERY_MS, UpExecutor, file_name, kind,
};
use bjh_format::record::encode_line;
use http::StatusCode;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How often the executors are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Each executor's first and last call to the scheduler (epoch millis), as
/// the gRPC tap sees them: the last sign of life of an executor that then
/// goes silent, finer than the scheduler's heartbeat seconds (and known in
/// pull mode, where the scheduler keeps no heartbeat time); and when an
/// executor said it was leaving (a heartbeat saying it is terminating, or
/// its `executor_stopped` call): the scheduler keeps such an executor
/// listed for its termination grace period (30 s by default), but it
/// runs nothing more and stops counting as capacity from then.
#[derive(Debug, Clone, Default)]
pub struct Contacts(Arc<parking_lot::Mutex<HashMap<String, Calls>>>);

/// One executor's calls: first, last, and when it said it was leaving.
#[derive(Debug, Clone, Copy)]
struct Calls {
    first: u64,
    last: u64,
    left: Option<u64>,
}

/// Executors remembered at most (ids from hostile callers cannot grow it).
const MAX_CONTACTS: usize = 100_000;

impl Contacts {
    /// Notes a call from `executor_id` now.
    pub fn seen(&self, executor_id: &str) {
        let now = bjh_format::now_millis();
        let mut map = self.0.lock();
        if let Some(calls) = map.get_mut(executor_id) {
            calls.last = now;
        } else if map.len() < MAX_CONTACTS && !executor_id.is_empty() {
            let calls = Calls {
                first: now,
                last: now,
                left: None,
            };
            map.insert(executor_id.to_string(), calls);
        }
    }

    /// Notes that `executor_id` said now that it is leaving (its
    /// heartbeat's terminating status, or its `executor_stopped` call).
    pub fn leaving(&self, executor_id: &str) {
        self.seen(executor_id);
        if let Some(calls) = self.0.lock().get_mut(executor_id) {
            calls.left = calls.left.or(Some(calls.last));
        }
    }

    /// The calls of `executor_id` noted.
    fn of(&self, executor_id: &str) -> Option<Calls> {
        self.0.lock().get(executor_id).copied()
    }

    fn forget(&self, executor_id: &str) {
        self.0.lock().remove(executor_id);
    }
}

/// Records the cluster's executors into `DIR/.cluster/`.
pub struct ClusterRecorder {
    api: Arc<dyn LiveScheduler>,
    dir: PathBuf,
    sample_every: Duration,
    contacts: Contacts,
    /// With an object store: where the day files are put, and which
    /// changed since they last were.
    bucket: Option<crate::upload::Bucket>,
    unsent: std::collections::BTreeSet<String>,
    last_sent: u64,
}

/// One executor as `/api/executors` lists it.
#[derive(Debug, Deserialize)]
struct Listed {
    id: String,
    #[serde(default)]
    last_seen: Option<u64>,
    #[serde(default)]
    specification: Spec,
    /// Its first call the tap saw (not the scheduler's).
    #[serde(skip)]
    first_seen: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
struct Spec {
    #[serde(default)]
    vcores: u32,
}

/// An executor up: its slots and its last heartbeat.
#[derive(Debug, Clone, Copy)]
struct Up {
    slots: u32,
    last_seen: u64,
}

impl ClusterRecorder {
    /// A recorder of the scheduler behind `api` into `dir` (the event-log
    /// directory, or the spool of an object store).
    pub fn new(api: Arc<dyn LiveScheduler>, dir: impl Into<PathBuf>) -> Self {
        Self {
            api,
            dir: dir.into(),
            sample_every: SAMPLE_EVERY,
            contacts: Contacts::default(),
            bucket: None,
            unsent: Default::default(),
            last_sent: 0,
        }
    }

    /// The same, putting each day's file into `bucket` under `.cluster/`
    /// (`dir` is then the spool): when an executor comes or goes, else at
    /// most once a minute while it grows (its marks), once more when its
    /// day is over, and at the stop. A failed put is tried again at the
    /// next.
    pub fn uploading_to(mut self, bucket: crate::upload::Bucket) -> Self {
        self.bucket = Some(bucket);
        self
    }

    /// The executors' last calls, for the gRPC tap to note
    /// ([`crate::listener::TaskTap::with_contacts`]).
    pub fn contacts(&self) -> Contacts {
        self.contacts.clone()
    }

    /// Samples until `stop`, then closes the executors still up.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()> + Send) {
        let mut up: BTreeMap<String, Up> = BTreeMap::new();
        let mut last_mark = None;
        // Files a run before this one left in the spool, not all uploaded.
        if self.bucket.is_some()
            && let Ok(entries) = std::fs::read_dir(self.dir.join(CLUSTER_DIR))
        {
            let names = entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok());
            self.unsent
                .extend(names.filter(|n| n.ends_with(bjh_format::cluster::CLUSTER_SUFFIX)));
        }
        let mut tick = tokio::time::interval(self.sample_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = tick.tick() => {}
            }
            let changed = self.sample(&mut up, &mut last_mark).await;
            self.send(changed).await;
        }
        // Who left since the last sample, before the rest are closed.
        self.sample(&mut up, &mut last_mark).await;
        let now = bjh_format::now_millis();
        let lines: Vec<Vec<u8>> = up
            .keys()
            .filter_map(|id| {
                let down = ExecutorDown {
                    executor_id: id.clone(),
                    at: now,
                    reason: bjh_format::cluster::SCHEDULER_STOPPED.into(),
                };
                encode_line(kind::EXECUTOR_DOWN, &down).ok()
            })
            .collect();
        let _ = self.append(now, lines).await;
        self.send(true).await;
    }

    /// Puts the day files that changed, when one is due: at once when an
    /// executor came or went (`now`), else a minute after the last put or
    /// when a day other than today's changed.
    async fn send(&mut self, now: bool) {
        let Some(bucket) = &self.bucket else {
            self.unsent.clear();
            return;
        };
        let at = bjh_format::now_millis();
        let today = file_name(self.api.scheduler_id(), at);
        let due = now
            || at.saturating_sub(self.last_sent) >= MARK_EVERY_MS
            || self.unsent.iter().any(|n| *n != today);
        if self.unsent.is_empty() || !due {
            return;
        }
        self.last_sent = at;
        for name in std::mem::take(&mut self.unsent) {
            let path = self.dir.join(CLUSTER_DIR).join(&name);
            let read =
                tokio::task::spawn_blocking(move || bjh_files::read_capped(&path, 256 << 20));
            let sent = match read.await {
                Ok(Ok(bytes)) => bucket.replace(CLUSTER_DIR, &name, bytes).await,
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match sent {
                // A past day's file is whole in the bucket: the spool lets
                // it go.
                Ok(()) if name != today => {
                    let path = self.dir.join(CLUSTER_DIR).join(&name);
                    if let Err(e) = std::fs::remove_file(&path) {
                        log::warn!("cluster log {name}: uploaded, not removed from the spool: {e}");
                    }
                }
                Ok(()) => {}
                Err(e) => {
                    log::warn!("cluster log {name}: not uploaded yet: {e}");
                    self.unsent.insert(name);
                }
            }
        }
    }

    /// One sample: the changes since the last, appended; whether an
    /// executor came or went (not only a mark).
    async fn sample(&mut self, up: &mut BTreeMap<String, Up>, last_mark: &mut Option<u64>) -> bool {
        let Some(mut listed) = self.executors().await else {
            return false;
        };
        // An executor's first call the tap saw, when it saw one, is when
        // it came; its last (or the scheduler's heartbeat, whole seconds,
        // when later) is when it was last alive.
        for e in &mut listed {
            let calls = self.contacts.of(&e.id);
            e.first_seen = calls.map(|c| c.first);
            e.last_seen = e.last_seen.max(calls.map(|c| c.last));
        }
        for gone in up.keys().filter(|id| !listed.iter().any(|e| &e.id == *id)) {
            self.contacts.forget(gone);
        }
        // An executor that said it is leaving is gone from then, though
        // the scheduler lists it until its grace period ends (its note is
        // kept until then, so it is not taken as come back).
        listed.retain(|e| {
            let Some(left) = self.contacts.of(&e.id).and_then(|c| c.left) else {
                return true;
            };
            if let Some(was) = up.get_mut(&e.id) {
                was.last_seen = left;
            }
            false
        });
        let now = bjh_format::now_millis();
        let marked = *last_mark;
        let lines = changes(up, listed, now, self.api.scheduler_id(), last_mark);
        // More lines than the one mark due: an executor came or went.
        let changed = lines.len() > usize::from(*last_mark != marked);
        if !self.append(now, lines).await {
            // The next mark lists the executors again, restating what the
            // lost lines said.
            *last_mark = None;
        }
        changed
    }

    /// Appends `lines` to the file of `now`'s day and syncs it, on the
    /// blocking pool; the file is not kept open between writes (they come
    /// a minute apart, and an open file would keep its file system busy).
    async fn append(&mut self, now: u64, lines: Vec<Vec<u8>>) -> bool {
        if lines.is_empty() {
            return true;
        }
        let name = file_name(self.api.scheduler_id(), now);
        let dir = self.dir.join(CLUSTER_DIR);
        let written = name.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut file = open_day(&dir, &name)?;
            for line in &lines {
                file.write_all(line)?;
            }
            file.sync_data()
        })
        .await;
        match result {
            Ok(Ok(())) => {
                self.unsent.insert(written);
                return true;
            }
            Ok(Err(e)) => log::warn!(
                "cluster log: cannot write {written} in {}: {e}; the next mark restates the \
                 executors up",
                self.dir.display()
            ),
            Err(e) => log::warn!("cluster log: the write did not run: {e}"),
        }
        false
    }

    async fn executors(&self) -> Option<Vec<Listed>> {
        let answer = self.api.get("/api/executors").await;
        if answer.status != StatusCode::OK {
            return None;
        }
        serde_json::from_slice(&answer.body).ok()
    }
}

/// The lines that record what changed from `up` to `listed`, `up` brought
/// up to date; a mark when one is due.
fn changes(
    up: &mut BTreeMap<String, Up>,
    listed: Vec<Listed>,
    now: u64,
    scheduler_id: &str,
    last_mark: &mut Option<u64>,
) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    let mut seen = BTreeMap::new();
    let mut came = BTreeMap::new();
    for e in listed {
        let slots = e.specification.vcores.max(1);
        let last_seen = e.last_seen.unwrap_or(now);
        came.insert(e.id.clone(), e.first_seen.unwrap_or(now).min(now));
        seen.insert(e.id, Up { slots, last_seen });
    }
    for (id, was) in up.iter() {
        if !seen.contains_key(id) {
            let down = ExecutorDown {
                executor_id: id.clone(),
                at: was.last_seen.min(now),
                reason: "removed".into(),
            };
            lines.extend(encode_line(kind::EXECUTOR_DOWN, &down).ok());
        }
    }
    for (id, now_up) in &seen {
        if !up.contains_key(id) {
            let event = ExecutorUp {
                executor_id: id.clone(),
                slots: now_up.slots,
                at: came.get(id).copied().unwrap_or(now),
            };
            lines.extend(encode_line(kind::EXECUTOR_UP, &event).ok());
        }
    }
    *up = seen;
    // A mark opens each run and each day's file, then one a minute.
    const DAY_MS: u64 = 86_400_000;
    let due = last_mark.is_none_or(|m| {
        now.saturating_sub(m) >= MARK_EVERY_MS || now < m || now / DAY_MS != m / DAY_MS
    });
    if due {
        // The list with a run's and a day's first mark; a tick after.
        let listing = last_mark.is_none_or(|m| now / DAY_MS != m / DAY_MS || now < m);
        *last_mark = Some(now);
        let mut mark = mark(up, now, scheduler_id);
        if !listing {
            mark.executors = None;
        }
        lines.extend(encode_line(kind::CLUSTER_MARK, &mark).ok());
    }
    lines
}

fn mark(up: &BTreeMap<String, Up>, at: u64, scheduler_id: &str) -> ClusterMark {
    ClusterMark {
        scheduler_id: scheduler_id.to_string(),
        at,
        executors: Some(
            up.iter()
                .map(|(id, u)| UpExecutor {
                    executor_id: id.clone(),
                    slots: u.slots,
                })
                .collect(),
        ),
    }
}

/// Opens the day's file for appending, creating it (and the folder) when
/// missing; a file whose last line was torn gets a newline first, so the
/// next line stands alone.
fn open_day(dir: &std::path::Path, name: &str) -> std::io::Result<std::fs::File> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    match bjh_files::create_new(&path) {
        Ok(file) => {
            bjh_files::sync_dir(dir)?;
            Ok(file)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut file = bjh_files::open_append(&path)?;
            if !ends_with_newline(&path)? {
                file.write_all(b"\n")?;
            }
            Ok(file)
        }
        Err(e) => Err(e),
    }
}

fn ends_with_newline(path: &std::path::Path) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let (mut file, meta) = bjh_files::open_regular(path)?;
    if meta.len() == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: &str, slots: u32, last_seen: u64) -> Listed {
        Listed {
            id: id.into(),
            last_seen: Some(last_seen),
            specification: Spec { vcores: slots },
            first_seen: None,
        }
    }

    fn kinds(lines: &[Vec<u8>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| serde_json::from_slice::<serde_json::Value>(l).unwrap()["ev"].to_string())
            .collect()
    }

    #[test]
    fn an_executor_is_recorded_when_it_comes_and_at_its_last_heartbeat_when_it_goes() {
        let mut up = BTreeMap::new();
        let mut mark = None;
        let first = changes(&mut up, vec![listed("a", 2, 990)], 1_000, "s", &mut mark);
        assert_eq!(kinds(&first), ["\"ExecutorUp\"", "\"ClusterMark\""]);
        let same = changes(&mut up, vec![listed("a", 2, 1_990)], 2_000, "s", &mut mark);
        assert!(same.is_empty(), "nothing changed, no mark due");
        let gone = changes(&mut up, vec![listed("b", 4, 2_950)], 3_000, "s", &mut mark);
        assert_eq!(kinds(&gone), ["\"ExecutorDown\"", "\"ExecutorUp\""]);
        let down: serde_json::Value = serde_json::from_slice(&gone[0]).unwrap();
        assert_eq!(down["data"]["at"], 1_990, "its last heartbeat");
        let later = changes(
            &mut up,
            vec![listed("b", 4, 61_000)],
            61_000,
            "s",
            &mut mark,
        );
        assert_eq!(kinds(&later), ["\"ClusterMark\""]);
    }

    #[test]
    fn a_torn_last_line_is_ended_before_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let name = file_name("s", 0);
        std::fs::write(dir.path().join(&name), "{\"ev\":\"Clu").unwrap();
        let mut file = open_day(dir.path(), &name).unwrap();
        file.write_all(b"{}\n").unwrap();
        let text = std::fs::read_to_string(dir.path().join(&name)).unwrap();
        assert_eq!(text, "{\"ev\":\"Clu\n{}\n");
    }
}
