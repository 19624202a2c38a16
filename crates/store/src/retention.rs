//! The cleaner: deletes the oldest completed logs until every retention
//! limit holds, and `.running` logs nobody has written to for the orphan
//! grace period.
//!
//! **Invariant:** a `.running` log modified within the grace period is never
//! touched, nor is one the local writer has open, whatever its age.
//!
//! **Invariant:** the cleaner deletes in one total order (end time, the
//! earlier of what the log claims and its modification time, then job
//! id), so several cleaners on one directory delete prefixes of the same
//! order: together they never remove more than the largest of their views
//! asks for. A file already gone is not an error.
//!
//! Deleted jobs leave the index at once.
//!
//! Cluster logs (`format::cluster`, one per scheduler and day) follow the
//! jobs: a day file goes once its whole day is older than `max_age`, or,
//! without one, older than the oldest job kept (its capacity could no
//! longer be set beside any job). Today's file is never deleted.

use crate::LogStore;
use bjh_format::LogName;
use bjh_format::epoch_millis;
use bjh_metrics::HistoryMetrics;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The orphan grace period unless `--orphan-grace` says otherwise.
pub const DEFAULT_ORPHAN_GRACE: Duration = Duration::from_secs(24 * 3600);
/// How often the cleaner runs unless `--retain-interval` says otherwise.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(3600);

/// What to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Delete completed logs whose job ended longer ago than this.
    pub max_age: Option<Duration>,
    /// Keep at most this many completed logs.
    pub max_jobs: Option<usize>,
    /// Keep at most this many bytes of completed logs.
    pub max_bytes: Option<u64>,
    /// Delete `.running` logs not modified for this long.
    pub orphan_grace: Duration,
    /// How often a pass runs.
    pub interval: Duration,
    /// Log what would be deleted; delete nothing.
    pub dry_run: bool,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self {
            max_age: None,
            max_jobs: None,
            max_bytes: None,
            orphan_grace: DEFAULT_ORPHAN_GRACE,
            interval: DEFAULT_INTERVAL,
            dry_run: false,
        }
    }
}

/// What one pass did (or, in a dry run, would have done).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Completed logs removed.
    pub removed_jobs: usize,
    /// Their bytes.
    pub removed_bytes: u64,
    /// Orphaned `.running` logs removed.
    pub removed_orphans: usize,
    /// Cluster logs (day files) removed.
    pub removed_cluster_logs: usize,
    /// Completed logs left.
    pub remaining_jobs: usize,
    /// Their bytes.
    pub remaining_bytes: u64,
    /// Deletions that failed (other than the file being gone already).
    pub errors: usize,
}

/// Says whether a job's log is open in this process's writer (and so must
/// not be deleted as an orphan).
pub type Protect = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The cleaner of one directory.
pub struct Cleaner {
    store: Arc<LogStore>,
    policy: RetentionPolicy,
    protect: Option<Protect>,
    metrics: Arc<HistoryMetrics>,
}

pub enum Removal {
    Removed,
    AlreadyGone,
    Failed,
}

impl Cleaner {
    /// A cleaner of `store`'s directory.
    pub fn new(
        store: Arc<LogStore>,
        policy: RetentionPolicy,
        protect: Option<Protect>,
        metrics: Arc<HistoryMetrics>,
    ) -> Self {
        Self {
            store,
            policy,
            protect,
            metrics,
        }
    }

    pub fn remove(&self, name: &str) -> Removal {
        if self.policy.dry_run {
            return Removal::Removed;
        }
        match self.store.remove_log(name) {
            Ok(()) => Removal::Removed,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Removal::AlreadyGone,
            Err(e) => {
                log::warn!("retention: cannot delete {name}: {e}");
                Removal::Failed
            }
        }
    }

    /// One pass at time `now`.
    pub fn pass(&self, now: SystemTime) -> PassReport {
        self.store.rescan();
        let p = &self.policy;
        let now_ms = epoch_millis(now);
        let mut files = self.store.completed_files();
        files.sort_by(|a, b| {
            a.end_time
                .cmp(&b.end_time)
                .then_with(|| a.job_id.cmp(&b.job_id))
        });
        let mut report = PassReport {
            remaining_jobs: files.len(),
            remaining_bytes: files.iter().map(|f| f.len).sum(),
            ..Default::default()
        };
        for f in &files {
            let too_old = p
                .max_age
                .is_some_and(|age| f.end_time.saturating_add(age.as_millis() as u64) < now_ms);
            let too_many = p.max_jobs.is_some_and(|n| report.remaining_jobs > n);
            let too_big = p.max_bytes.is_some_and(|b| report.remaining_bytes > b);
            if !(too_old || too_many || too_big) {
                break;
            }
            match self.remove(&f.file_name) {
                Removal::Removed => {
                    if p.dry_run {
                        log::info!(
                            "retention (dry run): would delete {} (job {}, {} bytes)",
                            f.file_name,
                            f.job_id,
                            f.len
                        );
                    } else {
                        self.store.forget(&f.job_id);
                    }
                    report.removed_jobs += 1;
                    report.removed_bytes += f.len;
                }
                Removal::AlreadyGone => self.store.forget(&f.job_id),
                Removal::Failed => {
                    report.errors += 1;
                    continue;
                }
            }
            report.remaining_jobs -= 1;
            report.remaining_bytes -= f.len;
        }
        self.orphans(now, &mut report);
        let oldest_kept = files
            .iter()
            .rev()
            .take(report.remaining_jobs)
            .map(|f| f.end_time)
            .min();
        self.cluster_logs(now_ms, oldest_kept, &mut report);
        self.report(&report);
        report
    }

    /// Removes the cluster logs whose day ended before the cut (see the
    /// module doc).
    fn cluster_logs(&self, now_ms: u64, oldest_kept: Option<u64>, report: &mut PassReport) {
        let cut = match (self.policy.max_age, oldest_kept) {
            (Some(age), _) => now_ms.saturating_sub(age.as_millis() as u64),
            (None, Some(end)) => end,
            (None, None) => return,
        };
        for name in self.store.cluster_log_names() {
            let Some(day_end) = crate::cluster::day_end(&name) else {
                continue;
            };
            if day_end > cut || day_end > now_ms {
                continue;
            }
            if self.policy.dry_run {
                log::info!("retention (dry run): would delete cluster log {name}");
                report.removed_cluster_logs += 1;
                continue;
            }
            match self.store.remove_cluster_log(&name) {
                Ok(()) => report.removed_cluster_logs += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    log::warn!("retention: cannot delete cluster log {name}: {e}");
                    report.errors += 1;
                }
            }
        }
    }

    pub fn orphans(&self, now: SystemTime, report: &mut PassReport) {
        // In an object store, unfinished logs are leftovers uploaded by a
        // scheduler that restarted; they age from their upload.
        if self.store.remote_dir().is_some() {
            for (id, name, modified) in self.store.unfinished_files() {
                if modified.is_some_and(|m| m + self.policy.orphan_grace < now) {
                    self.remove_orphan(&name, &id, report);
                }
            }
            return;
        }
        let Ok(entries) = std::fs::read_dir(self.store.dir()) else {
            return;
        };
        let mut seen = HashSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(id) = LogName::parse(name).filter(|n| n.running).map(|n| n.stem) else {
                continue;
            };
            if !seen.insert(name.to_string()) {
                continue;
            }
            if self.protect.as_ref().is_some_and(|open| open(id)) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            let Ok(modified) = meta.modified() else {
                continue;
            };
            if !meta.is_file() || modified + self.policy.orphan_grace >= now {
                continue;
            }
            self.remove_orphan(name, id, report);
        }
    }

    pub fn remove_orphan(&self, name: &str, id: &str, report: &mut PassReport) {
        match self.remove(name) {
            Removal::Removed => {
                if self.policy.dry_run {
                    log::info!("retention (dry run): would delete orphaned log {name}");
                } else {
                    self.store.forget_unfinished(id);
                }
                report.removed_orphans += 1;
            }
            Removal::AlreadyGone => self.store.forget_unfinished(id),
            Removal::Failed => report.errors += 1,
        }
    }

    pub fn report(&self, r: &PassReport) {
        self.metrics.retention_passes.inc();
        let verb = if self.policy.dry_run {
            "retention (dry run): would remove"
        } else {
            self.metrics
                .retention_removed_jobs
                .inc_by(r.removed_jobs as u64);
            self.metrics.retention_removed_bytes.inc_by(r.removed_bytes);
            self.metrics
                .retention_removed_orphans
                .inc_by(r.removed_orphans as u64);
            "retention: removed"
        };
        let errors = if r.errors > 0 {
            format!("; {} deletions failed", r.errors)
        } else {
            String::new()
        };
        log::info!(
            "{verb} {} jobs ({}), {} orphaned .running logs and {} cluster logs; {} jobs ({}) \
             remain{errors}",
            r.removed_jobs,
            bytesize::ByteSize(r.removed_bytes),
            r.removed_orphans,
            r.removed_cluster_logs,
            r.remaining_jobs,
            bytesize::ByteSize(r.remaining_bytes),
        );
    }

    /// Runs a pass now and then every `policy.interval` until `stop`
    /// resolves.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let this = Arc::new(self);
        tokio::pin!(stop);
        let mut ticker = tokio::time::interval(this.policy.interval.max(Duration::from_secs(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let cleaner = this.clone();
                    let _ = tokio::task::spawn_blocking(move || cleaner.pass(SystemTime::now())).await;
                }
                () = &mut stop => return,
            }
        }
    }
}

/// Parses a duration such as `7d`, `12h`, `90min`, `30s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration like 7d, 12h or 30min: {e}"))
}

/// Parses a size such as `50GiB`, `500MB`, `1024`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{text:?} is not a size like 50GiB or 500MB: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completed log of `size` bytes or more whose job ended at `end`.
    fn completed(dir: &std::path::Path, id: &str, end: u64, pad: usize) {
        let line = format!(
            r#"{{"ev":"JobEnd","version":1,"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":{end},"index":{{"job_id":"{id}","job_name":"n","status":"Completed","job_status":"Completed.","start_time":2,"end_time":{end},"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{}},"stages":{{}},"config":{{}},"dot":"{}"}}}}"#,
            "x".repeat(pad)
        );
        std::fs::write(dir.join(format!("{id}.eventlog")), line + "\n").unwrap();
    }

    fn running(dir: &std::path::Path, id: &str, age: Duration) {
        let path = dir.join(format!("{id}.eventlog.running"));
        std::fs::write(&path, "{\"ev\":\"JobStart\",\"version\":1,\"data\":{}}\n").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    const HOUR: u64 = 3_600_000;

    /// Ten jobs that ended 10h, 9h, ..., 1h ago (j0 oldest), 1000+ bytes
    /// each, plus a fresh and a day-old `.running` log.
    fn setup() -> (tempfile::TempDir, Arc<LogStore>, SystemTime) {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        for i in 0..10u64 {
            completed(
                dir.path(),
                &format!("j{i}"),
                epoch_millis(now) - (10 - i) * HOUR,
                1000,
            );
        }
        running(dir.path(), "fresh", Duration::from_secs(60));
        running(dir.path(), "stale", Duration::from_secs(25 * 3600));
        let store = Arc::new(LogStore::new(
            dir.path(),
            Arc::new(HistoryMetrics::unregistered()),
        ));
        store.rescan();
        (dir, store, now)
    }

    /// Cluster logs go with the jobs: by age with `max_age`, else when
    /// older than every job kept; today's never.
    #[test]
    fn cluster_logs_follow_the_jobs() {
        let (dir, store, now) = setup();
        let folder = dir.path().join(bjh_format::cluster::CLUSTER_DIR);
        std::fs::create_dir_all(&folder).unwrap();
        let day = 86_400_000;
        let now_ms = epoch_millis(now);
        let names: Vec<String> = [40 * day, 3 * day, 0]
            .iter()
            .map(|ago| bjh_format::cluster::file_name("s", now_ms - ago))
            .collect();
        for name in &names {
            std::fs::write(folder.join(name), "{}\n").unwrap();
        }
        let left = || {
            let mut n: Vec<String> = std::fs::read_dir(&folder)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            n.sort();
            n
        };
        // Every job kept ended within 10 hours: days before go.
        let report = cleaner(&store, RetentionPolicy::default()).pass(now);
        assert_eq!(report.removed_cluster_logs, 2);
        assert_eq!(left(), [names[2].clone()]);
        // By age: today's stays whatever the limit.
        let policy = RetentionPolicy {
            max_age: Some(Duration::from_secs(1)),
            ..Default::default()
        };
        cleaner(&store, policy).pass(now);
        assert_eq!(left(), [names[2].clone()]);
    }

    fn cleaner(store: &Arc<LogStore>, policy: RetentionPolicy) -> Cleaner {
        Cleaner::new(
            store.clone(),
            policy,
            None,
            Arc::new(HistoryMetrics::unregistered()),
        )
    }

    fn left(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn jobs(names: &[String]) -> Vec<&str> {
        names
            .iter()
            .filter_map(|n| n.strip_suffix(".eventlog"))
            .collect()
    }

    #[test]
    fn each_limit_alone_and_combined() {
        let size = {
            let (dir, _, _) = setup();
            std::fs::metadata(dir.path().join("j0.eventlog"))
                .unwrap()
                .len()
        };
        let cases: [(RetentionPolicy, &[&str]); 4] = [
            (
                RetentionPolicy {
                    max_age: Some(Duration::from_secs(5 * 3600 + 1800)),
                    ..Default::default()
                },
                &["j5", "j6", "j7", "j8", "j9"],
            ),
            (
                RetentionPolicy {
                    max_jobs: Some(3),
                    ..Default::default()
                },
                &["j7", "j8", "j9"],
            ),
            (
                RetentionPolicy {
                    max_bytes: Some(4 * size + size / 2),
                    ..Default::default()
                },
                &["j6", "j7", "j8", "j9"],
            ),
            (
                // Every limit must hold: the strictest decides.
                RetentionPolicy {
                    max_age: Some(Duration::from_secs(8 * 3600 + 1800)),
                    max_jobs: Some(6),
                    max_bytes: Some(2 * size),
                    ..Default::default()
                },
                &["j8", "j9"],
            ),
        ];
        for (policy, keep) in cases {
            let (dir, store, now) = setup();
            let report = cleaner(&store, policy.clone()).pass(now);
            let names = left(dir.path());
            assert_eq!(jobs(&names), keep, "{policy:?}");
            assert_eq!(report.removed_jobs, 10 - keep.len());
            assert_eq!(report.removed_bytes, (10 - keep.len()) as u64 * size);
            assert_eq!(report.remaining_jobs, keep.len());
            assert_eq!(report.remaining_bytes, keep.len() as u64 * size);
            // The index forgot them at once.
            assert_eq!(store.len(), keep.len());
            assert!(!store.contains("j0"));
            // The stale `.running` log went, the fresh one stayed.
            assert!(names.contains(&"fresh.eventlog.running".to_string()));
            assert!(!names.contains(&"stale.eventlog.running".to_string()));
            assert_eq!(report.removed_orphans, 1);
        }
    }

    #[test]
    fn a_dry_run_deletes_nothing() {
        let (dir, store, now) = setup();
        let before = left(dir.path());
        let report = cleaner(
            &store,
            RetentionPolicy {
                max_jobs: Some(0),
                dry_run: true,
                ..Default::default()
            },
        )
        .pass(now);
        assert_eq!(left(dir.path()), before);
        assert_eq!(store.len(), 10);
        assert_eq!((report.removed_jobs, report.removed_orphans), (10, 1));
    }

    #[test]
    fn a_recent_or_open_running_log_survives_any_limit() {
        let (dir, store, now) = setup();
        let protect: Protect = Arc::new(|id: &str| id == "stale");
        let report = Cleaner::new(
            store.clone(),
            RetentionPolicy {
                max_age: Some(Duration::ZERO),
                max_jobs: Some(0),
                max_bytes: Some(0),
                orphan_grace: Duration::from_secs(3600),
                ..Default::default()
            },
            Some(protect),
            Arc::new(HistoryMetrics::unregistered()),
        )
        .pass(now);
        assert_eq!(
            left(dir.path()),
            ["fresh.eventlog.running", "stale.eventlog.running"],
            "the writer holds `stale` open"
        );
        assert_eq!(report.removed_orphans, 0);
        assert_eq!(report.remaining_jobs, 0);
    }

    #[test]
    fn two_cleaners_at_once_delete_no_more_than_asked() {
        for _ in 0..20 {
            let (dir, store, now) = setup();
            let other = Arc::new(LogStore::new(
                dir.path(),
                Arc::new(HistoryMetrics::unregistered()),
            ));
            let policy = RetentionPolicy {
                max_jobs: Some(4),
                ..Default::default()
            };
            let barrier = std::sync::Barrier::new(2);
            let reports = std::thread::scope(|s| {
                let a = s.spawn(|| {
                    barrier.wait();
                    cleaner(&store, policy.clone()).pass(now)
                });
                let b = s.spawn(|| {
                    barrier.wait();
                    cleaner(&other, policy.clone()).pass(now)
                });
                [a.join().unwrap(), b.join().unwrap()]
            });
            assert_eq!(jobs(&left(dir.path())), ["j6", "j7", "j8", "j9"]);
            assert!(reports.iter().all(|r| r.errors == 0), "{reports:?}");
            let removed: usize = reports.iter().map(|r| r.removed_jobs).sum();
            assert!((6..=12).contains(&removed), "{reports:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_cleaner_runs_on_its_interval() {
        let (dir, store, _) = setup();
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let c = Cleaner::new(
            store.clone(),
            RetentionPolicy {
                max_jobs: Some(100),
                interval: Duration::from_secs(3600),
                ..Default::default()
            },
            None,
            metrics.clone(),
        );
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(c.run(async {
            let _ = stop_rx.await;
        }));
        let passes = |n: u64| {
            let metrics = metrics.clone();
            async move {
                for _ in 0..1000 {
                    if metrics.retention_passes.get() >= n {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                false
            }
        };
        assert!(passes(1).await, "a pass at start");
        assert_eq!(metrics.retention_passes.get(), 1);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(passes(2).await, "a pass an interval later");
        assert_eq!(metrics.retention_removed_orphans.get(), 1);
        assert_eq!(left(dir.path()).len(), 11);
        stop_tx.send(()).unwrap();
        task.await.unwrap();
    }

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_bytes("50GiB").unwrap(), 50 << 30);
        assert_eq!(parse_bytes("500 MB").unwrap(), 500_000_000);
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(
            parse_duration("12h").unwrap(),
            Duration::from_secs(12 * 3600)
        );
        assert!(parse_bytes("lots").unwrap_err().contains("50GiB"));
        assert!(parse_duration("soon").unwrap_err().contains("7d"));
    }
}
