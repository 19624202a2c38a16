//! Reading the cluster logs (`format::cluster`) back into the intervals
//! each executor was up, with its slots: the capacity side of usage.
//!
//! Each scheduler's files are read in day order as one stream. The rules
//! keep any log, however damaged or lying, from making capacity negative
//! or counting a slot twice:
//! - a line that does not read is skipped and counted;
//! - an executor open at the end of the stream is closed at the stream's
//!   last time, or at `now` when that time is recent enough for the
//!   scheduler to be running still (it marks every minute), and that
//!   interval is *estimated*;
//! - an `ExecutorUp` for an executor already open (a scheduler restarted
//!   without closing) closes the open one at the last time seen before it,
//!   estimated;
//! - a time that goes backwards (a clock step) ends nothing before it
//!   began: an interval is never negative;
//! - intervals of one executor that overlap are merged;
//! - slots are held to 1..=[`MAX_SLOTS`];
//! - a time past now (plus `format::bounds`' skew) is cut there when the
//!   line is read, and counted (`ClusterHistory::future_lines`);
//! - time in a stream never goes backwards: a record dated before one
//!   already read is taken at the latest time read;
//! - a silence longer than the marks' period ([`ALIVE_WITHIN_MS`]: the
//!   scheduler was not recording) closes every open executor at the last
//!   time before it, estimated; so an interval is covered by records at
//!   most that far apart, and a log cannot stretch one over years it did
//!   not record;
//! - at most [`MAX_OPEN`] executors are open at once in a stream (more
//!   are counted as bad lines, not opened).

use bjh_format::bounds::Clock;
use bjh_format::cluster::{
    CLUSTER_DIR, CLUSTER_SUFFIX, ClusterMark, ExecutorDown, ExecutorUp, kind,
};
use bjh_format::record::Envelope;
use std::collections::BTreeMap;
use std::path::Path;

/// Slots one executor is taken to have at most (a lying log's `u32::MAX`
/// would otherwise dwarf every real cluster).
pub const MAX_SLOTS: u32 = 65_536;
/// Executors open at once in one scheduler's stream, at most: a mark
/// listing a million is a lie that would otherwise be a million intervals.
pub const MAX_OPEN: usize = 100_000;
/// A cluster log larger than this is not read (a day of a thousand
/// executors coming and going is a few MB).
const MAX_FILE_BYTES: u64 = 256 << 20;

/// One executor up over `[from, to)` with `slots` slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInterval {
    /// The scheduler it was registered with.
    pub scheduler_id: String,
    /// The executor.
    pub executor_id: String,
    /// Its task slots.
    pub slots: u32,
    /// Up from (epoch millis).
    pub from: u64,
    /// Until (epoch millis).
    pub to: u64,
    /// Whether `to` is the last time seen rather than a recorded end.
    pub estimated: bool,
}

/// Every cluster log of a directory, read.
#[derive(Debug, Default)]
pub struct ClusterHistory {
    /// The intervals, by scheduler and executor, then time.
    pub intervals: Vec<SlotInterval>,
    /// Cluster logs read.
    pub files: usize,
    /// Lines skipped (torn, damaged, or of a newer schema).
    pub bad_lines: u64,
    /// Files not read (too large, unreadable).
    pub bad_files: usize,
    /// Records whose time was past now (plus the skew) and was cut there.
    pub future_lines: u64,
    /// Each scheduler whose cluster log names it, and its last sight
    /// (`now` while its log is still being written): a scheduler with
    /// no executor yet has no interval, but it is seen.
    pub sightings: Vec<(String, u64)>,
}

/// A stream whose last record is at most this old is of a scheduler still
/// running: its executors are taken as up until now.
pub const ALIVE_WITHIN_MS: u64 = 2 * bjh_format::cluster::MARK_EVERY_MS + 5_000;

/// One record of a cluster log, as read.
#[derive(Debug, Clone)]
enum Event {
    Up(ExecutorUp),
    Down(ExecutorDown),
    /// A mark, and whether it bridges: the marks of its run left out
    /// between the one before it and this one came no further apart than
    /// [`ALIVE_WITHIN_MS`], so the time between the two is no silence.
    Mark(ClusterMark, bool),
}

/// One cluster log's records, kept while the file is unchanged. A run of
/// marks listing the same executors keeps its first and last mark only
/// (the ones between change nothing a replay reads but the silences
/// between them: a run is collapsed only over marks that came no further
/// apart than a silence, and its last mark then bridges it).
#[derive(Debug, Default)]
struct ParsedFile {
    stamp: Option<crate::location::Stamp>,
    events: Vec<Event>,
    bad_lines: u64,
    future_lines: u64,
}

impl ParsedFile {
    fn parse(bytes: &[u8], stamp: crate::location::Stamp, clock: Clock) -> Self {
        let mut out = ParsedFile {
            stamp: Some(stamp),
            ..Default::default()
        };
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let read = event(line).map(|mut e| {
                let at = match &mut e {
                    Event::Up(up) => &mut up.at,
                    Event::Down(down) => &mut down.at,
                    Event::Mark(mark, _) => &mut mark.at,
                };
                let (t, cut) = clock.time(*at);
                *at = t;
                out.future_lines += u64::from(cut);
                e
            });
            match read {
                Some(Event::Mark(mark, _)) => {
                    // `.., same, same` → `.., same`: the middle one goes
                    // when no silence is on either side of it.
                    let n = out.events.len();
                    let same = |e: Option<&Event>| matches!(e, Some(Event::Mark(m, _)) if m.executors == mark.executors);
                    let mut bridges = false;
                    if n >= 2 && same(out.events.get(n - 1)) && same(out.events.get(n - 2)) {
                        let (Some(Event::Mark(before, _)), Some(Event::Mark(middle, bridged))) =
                            (out.events.get(n - 2), out.events.get(n - 1))
                        else {
                            unreachable!("two marks, as matched")
                        };
                        let short = |a: u64, b: u64| b.saturating_sub(a) <= ALIVE_WITHIN_MS;
                        bridges =
                            (*bridged || short(before.at, middle.at)) && short(middle.at, mark.at);
                        if bridges {
                            out.events.pop();
                        }
                    }
                    out.events.push(Event::Mark(mark, bridges));
                }
                Some(e) => out.events.push(e),
                None => out.bad_lines += 1,
            }
        }
        out
    }
}

/// One line's record; `None` when it does not read (torn, damaged, of a
/// newer schema or an unknown kind).
fn event(line: &[u8]) -> Option<Event> {
    let env = serde_json::from_slice::<Envelope>(line).ok()?;
    if env.version > bjh_format::record::SCHEMA_VERSION {
        return None;
    }
    let data = env.data.get();
    match env.ev.as_str() {
        kind::EXECUTOR_UP => serde_json::from_str(data).ok().map(Event::Up),
        kind::EXECUTOR_DOWN => serde_json::from_str(data).ok().map(Event::Down),
        kind::CLUSTER_MARK => serde_json::from_str(data)
            .ok()
            .map(|m| Event::Mark(m, false)),
        _ => None,
    }
}

/// The cluster logs read so far, by file name: a file is read again only
/// when its size or modification time changed.
#[derive(Debug, Default)]
pub struct ClusterCache {
    files: BTreeMap<String, ParsedFile>,
}

/// Where cluster logs are read from.
pub(crate) enum Source<'a> {
    Local(&'a Path),
    Remote(&'a crate::remote::RemoteDir),
}

impl ClusterCache {
    /// The history of the cluster logs in `source` as of `now` (epoch
    /// millis), reading only the files that changed.
    pub(crate) fn read(&mut self, source: Source<'_>, now: u64) -> ClusterHistory {
        let mut out = ClusterHistory::default();
        let listed = match &source {
            Source::Local(dir) => local_files(dir),
            Source::Remote(remote) => remote.cluster_objects().unwrap_or_else(|e| {
                log::warn!("cluster logs under {}: not listed: {e}", remote.url());
                Vec::new()
            }),
        };
        self.files
            .retain(|name, _| listed.iter().any(|(n, _)| n == name));
        for (name, stamp) in &listed {
            if self.files.get(name).and_then(|f| f.stamp) == Some(*stamp) {
                continue;
            }
            let bytes = match &source {
                Source::Local(dir) => {
                    bjh_files::read_capped(&dir.join(CLUSTER_DIR).join(name), MAX_FILE_BYTES)
                }
                Source::Remote(remote) => remote.read_cluster_object(name, MAX_FILE_BYTES),
            };
            match bytes {
                Ok(bytes) => {
                    let parsed = ParsedFile::parse(&bytes, *stamp, Clock { now });
                    if parsed.future_lines > 0 {
                        log::warn!(
                            "cluster log {name}: {} records dated past now, cut to now",
                            parsed.future_lines
                        );
                    }
                    self.files.insert(name.clone(), parsed);
                }
                Err(e) => {
                    log::warn!("cluster log {name}: not read: {e}");
                    self.files.remove(name);
                    out.bad_files += 1;
                }
            }
        }
        // `cluster-DAY-HASH`: each scheduler's (hash's) files in day order.
        let mut streams: BTreeMap<&str, Stream> = BTreeMap::new();
        let mut ordered: Vec<(&str, &str, &ParsedFile)> = self
            .files
            .iter()
            .map(|(name, file)| {
                let stem = name.trim_end_matches(CLUSTER_SUFFIX);
                let (day, hash) = stem.rsplit_once('-').unwrap_or((stem, ""));
                (hash, day, file)
            })
            .collect();
        ordered.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        for (hash, _, file) in ordered {
            out.files += 1;
            out.bad_lines += file.bad_lines;
            out.future_lines += file.future_lines;
            let stream = streams.entry(hash).or_default();
            for e in &file.events {
                stream.read(e);
            }
        }
        out.bad_lines += streams.values().map(|s| s.refused).sum::<u64>();
        for (_, stream) in streams {
            if !stream.scheduler_id.is_empty() {
                out.sightings
                    .push((stream.scheduler_id.clone(), stream.last_sight(now)));
            }
            out.intervals.extend(stream.finish(now));
        }
        out.intervals = merged(out.intervals);
        out
    }
}

/// When the day a cluster log's name gives ends (epoch millis).
pub fn day_end(name: &str) -> Option<u64> {
    let stem = name
        .strip_suffix(CLUSTER_SUFFIX)?
        .strip_prefix("cluster-")?;
    let (day, _) = stem.rsplit_once('-')?;
    let date = chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    let start = date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
    u64::try_from(start).ok().map(|s| s + 86_400_000)
}

/// The cluster logs of a local directory, with their stamps.
pub(crate) fn local_files(dir: &Path) -> Vec<(String, crate::location::Stamp)> {
    let Ok(entries) = std::fs::read_dir(dir.join(CLUSTER_DIR)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let meta = e.metadata().ok()?;
            (name.ends_with(CLUSTER_SUFFIX) && meta.is_file()).then(|| {
                let stamp = crate::location::Stamp {
                    len: meta.len(),
                    modified: meta.modified().ok(),
                };
                (name, stamp)
            })
        })
        .collect()
}

/// Reads `dir/.cluster/` as of `now` (epoch millis), without a cache; an
/// absent folder is an empty history.
pub fn read_cluster(dir: &Path, now: u64) -> ClusterHistory {
    ClusterCache::default().read(Source::Local(dir), now)
}

/// One scheduler's records, read in order.
#[derive(Default)]
struct Stream {
    scheduler_id: String,
    /// Executor → (slots, since).
    open: BTreeMap<String, (u32, u64)>,
    /// The latest time read.
    last: u64,
    /// Its last records say the scheduler stopped.
    stopped: bool,
    closed: Vec<SlotInterval>,
    /// Executors not opened: past [`MAX_OPEN`].
    refused: u64,
}

impl Stream {
    fn read(&mut self, event: &Event) {
        self.stopped =
            matches!(event, Event::Down(d) if d.reason == bjh_format::cluster::SCHEDULER_STOPPED);
        let at = match event {
            Event::Up(up) => up.at,
            Event::Down(down) => down.at,
            Event::Mark(mark, _) => mark.at,
        };
        // Never backwards; and a silence closes what was open before it.
        let at = at.max(self.last);
        let bridges = matches!(event, Event::Mark(_, true));
        if self.last > 0 && at - self.last > ALIVE_WITHIN_MS && !bridges {
            let open: Vec<String> = self.open.keys().cloned().collect();
            let last = self.last;
            for id in open {
                self.close(&id, last, true);
            }
        }
        match event {
            Event::Up(up) => {
                if self.open.contains_key(&up.executor_id) {
                    let last = self.last;
                    self.close(&up.executor_id, last, true);
                }
                self.see(at);
                self.open_one(&up.executor_id, up.slots, at);
            }
            Event::Down(down) => {
                self.see(at);
                self.close(&down.executor_id, at, false);
            }
            Event::Mark(mark, _) => {
                self.see(at);
                if self.scheduler_id.is_empty() {
                    self.scheduler_id = mark.scheduler_id.clone();
                }
                // A tick: the scheduler was alive, nothing more.
                let Some(executors) = &mark.executors else {
                    return;
                };
                let listed: BTreeMap<_, _> = executors
                    .iter()
                    .map(|e| (e.executor_id.clone(), e.slots.clamp(1, MAX_SLOTS)))
                    .collect();
                let gone: Vec<String> = self
                    .open
                    .keys()
                    .filter(|id| !listed.contains_key(*id))
                    .cloned()
                    .collect();
                for id in gone {
                    self.close(&id, at, true);
                }
                for (id, slots) in listed {
                    if !self.open.contains_key(&id) {
                        self.open_one(&id, slots, at);
                    }
                }
            }
        }
    }

    /// Opens `executor_id` at `at`, unless [`MAX_OPEN`] are open.
    fn open_one(&mut self, executor_id: &str, slots: u32, at: u64) {
        if self.open.len() >= MAX_OPEN {
            self.refused += 1;
            return;
        }
        self.open
            .insert(executor_id.to_string(), (slots.clamp(1, MAX_SLOTS), at));
    }

    fn see(&mut self, at: u64) {
        self.last = self.last.max(at);
    }

    fn close(&mut self, executor_id: &str, at: u64, estimated: bool) {
        if let Some((slots, from)) = self.open.remove(executor_id) {
            self.closed.push(SlotInterval {
                scheduler_id: String::new(),
                executor_id: executor_id.to_string(),
                slots,
                from,
                to: at.max(from),
                estimated,
            });
        }
    }

    /// The stream's last sight: `now` while it is still being written
    /// (lately, and not ending with the scheduler's stop).
    fn last_sight(&self, now: u64) -> u64 {
        let alive = !self.stopped && now.saturating_sub(self.last) <= ALIVE_WITHIN_MS;
        if alive { now } else { self.last.min(now) }
    }

    fn finish(mut self, now: u64) -> Vec<SlotInterval> {
        let open: Vec<String> = self.open.keys().cloned().collect();
        let last = self.last_sight(now);
        for id in open {
            self.close(&id, last, true);
        }
        let scheduler_id = self.scheduler_id;
        // Nothing is up after now (a time within the skew of it is cut).
        self.closed
            .into_iter()
            .map(|i| SlotInterval {
                scheduler_id: scheduler_id.clone(),
                from: i.from.min(now),
                to: i.to.min(now),
                ..i
            })
            .filter(|i| i.to > i.from)
            .collect()
    }
}

/// `intervals` with the overlapping ones of each executor merged.
fn merged(mut intervals: Vec<SlotInterval>) -> Vec<SlotInterval> {
    intervals.sort_by(|a, b| {
        (&a.scheduler_id, &a.executor_id, a.from).cmp(&(&b.scheduler_id, &b.executor_id, b.from))
    });
    let mut out: Vec<SlotInterval> = Vec::with_capacity(intervals.len());
    for i in intervals {
        if let Some(last) = out.last_mut()
            && last.scheduler_id == i.scheduler_id
            && last.executor_id == i.executor_id
            && i.from <= last.to
        {
            if i.to > last.to {
                last.to = i.to;
                last.estimated = i.estimated;
            }
            last.slots = last.slots.max(i.slots);
            continue;
        }
        out.push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bjh_format::cluster::{UpExecutor, file_name};
    use bjh_format::record::encode_line;

    fn up(id: &str, slots: u32, at: u64) -> Vec<u8> {
        let e = ExecutorUp {
            executor_id: id.into(),
            slots,
            at,
        };
        encode_line(kind::EXECUTOR_UP, &e).unwrap()
    }

    fn down(id: &str, at: u64) -> Vec<u8> {
        let e = ExecutorDown {
            executor_id: id.into(),
            at,
            reason: "removed".into(),
        };
        encode_line(kind::EXECUTOR_DOWN, &e).unwrap()
    }

    fn mark(at: u64, executors: &[(&str, u32)]) -> Vec<u8> {
        let m = ClusterMark {
            scheduler_id: "s".into(),
            at,
            executors: Some(
                executors
                    .iter()
                    .map(|(id, slots)| UpExecutor {
                        executor_id: id.to_string(),
                        slots: *slots,
                    })
                    .collect(),
            ),
        };
        encode_line(kind::CLUSTER_MARK, &m).unwrap()
    }

    fn history(lines: &[Vec<u8>]) -> ClusterHistory {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(CLUSTER_DIR);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(file_name("s", 0)), lines.concat()).unwrap();
        read_cluster(dir.path(), 1_000_000)
    }

    fn spans(h: &ClusterHistory) -> Vec<(&str, u32, u64, u64, bool)> {
        h.intervals
            .iter()
            .map(|i| (i.executor_id.as_str(), i.slots, i.from, i.to, i.estimated))
            .collect()
    }

    #[test]
    fn an_executor_is_up_from_its_registration_to_its_end() {
        let h = history(&[
            up("a", 2, 1_000),
            mark(1_000, &[("a", 2)]),
            down("a", 5_000),
            up("b", 4, 6_000),
            mark(9_000, &[("b", 4)]),
        ]);
        assert_eq!(
            spans(&h),
            [("a", 2, 1_000, 5_000, false), ("b", 4, 6_000, 9_000, true)]
        );
        assert_eq!(h.intervals[0].scheduler_id, "s");
    }

    #[test]
    fn a_flapping_executor_counts_each_time_it_was_up_and_marks_collapse_exactly() {
        let mut lines = vec![up("a", 2, 1_000), down("a", 2_000), up("a", 2, 2_500)];
        // A day of identical marks: the replay keeps two of them.
        for i in 0..1_440u64 {
            lines.push(mark(3_000 + i * 60_000, &[("a", 2)]));
        }
        lines.push(down("a", 3_000 + 1_440 * 60_000));
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(CLUSTER_DIR);
        std::fs::create_dir_all(&folder).unwrap();
        let path = folder.join(file_name("s", 0));
        std::fs::write(&path, lines.concat()).unwrap();
        let mut cache = ClusterCache::default();
        let h = cache.read(Source::Local(dir.path()), u64::MAX);
        assert_eq!(
            spans(&h),
            [
                ("a", 2, 1_000, 2_000, false),
                ("a", 2, 2_500, 86_403_000, false)
            ]
        );
        let kept = cache.files.values().next().unwrap().events.len();
        assert_eq!(kept, 3 + 2 + 1, "two marks of the run kept");
        // The file grows: it is read again, and only then.
        let mut more = lines.concat();
        more.extend(up("b", 1, 90_000_000));
        more.extend(down("b", 90_001_000));
        std::fs::write(&path, more).unwrap();
        let h = cache.read(Source::Local(dir.path()), u64::MAX);
        assert_eq!(h.intervals.len(), 3, "{:?}", spans(&h));
    }

    #[test]
    fn a_scheduler_marking_recently_has_its_executors_up_until_now() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(CLUSTER_DIR);
        std::fs::create_dir_all(&folder).unwrap();
        let lines = [up("a", 2, 1_000), mark(1_000, &[("a", 2)])].concat();
        std::fs::write(folder.join(file_name("s", 0)), lines).unwrap();
        let running = read_cluster(dir.path(), 31_000);
        assert_eq!(spans(&running), [("a", 2, 1_000, 31_000, true)]);
        // Long silent: it stopped after its last mark.
        let stopped = read_cluster(dir.path(), 10_000_000);
        assert!(spans(&stopped).is_empty(), "a zero-length interval is none");
    }

    #[test]
    fn torn_lying_and_stepped_logs_never_count_a_slot_twice_or_below_zero() {
        let h = history(&[
            up("a", u32::MAX, 1_000),
            b"{\"ev\":\"ExecutorDo".to_vec(),
            b"\n".to_vec(),
            // A restart without a close: the open interval ends at the
            // last time seen, estimated.
            mark(2_000, &[("a", 2)]),
            up("a", 2, 3_000),
            // A clock step back: nothing ends before it began.
            down("a", 500),
            // The same executor twice over the same time: merged.
            up("c", 1, 10_000),
            down("c", 20_000),
            up("c", 1, 15_000),
            down("c", 25_000),
        ]);
        assert_eq!(h.bad_lines, 1);
        assert_eq!(
            spans(&h),
            [
                ("a", MAX_SLOTS, 1_000, 2_000, true),
                ("c", 1, 10_000, 25_000, false)
            ]
        );
    }

    /// A regression test: an `ExecutorDown` dated two years (or
    /// `u64::MAX`) ahead made hours of capacity up to then, and an
    /// `ExecutorUp` dated 1970 in today's stream made 56 years of it.
    #[test]
    fn a_log_dated_in_the_future_or_the_distant_past_is_up_only_while_it_recorded() {
        let now = 1_800_000_000_000u64;
        let two_years = 2 * 365 * 86_400_000;
        for far in [now + two_years, u64::MAX] {
            let dir = tempfile::tempdir().unwrap();
            let folder = dir.path().join(CLUSTER_DIR);
            std::fs::create_dir_all(&folder).unwrap();
            let lines = [
                up("a", 2, now - 3_600_000),
                mark(now - 3_600_000, &[("a", 2)]),
                down("a", far),
            ]
            .concat();
            std::fs::write(folder.join(file_name("s", now)), lines).unwrap();
            let h = read_cluster(dir.path(), now);
            assert_eq!(h.future_lines, 1, "the record past now is counted");
            // Up from its registration until now at the latest (an hour
            // without a mark is a silence: it ends at the last record).
            for i in &h.intervals {
                assert!(i.to <= now && i.from >= now - 3_600_000, "{i:?}");
            }
            assert_eq!(h.sightings.len(), 1);
            assert!(h.sightings[0].1 <= now, "{:?}", h.sightings);
        }
        // A record from 1970 after today's: taken at the latest time read.
        let h = history(&[
            up("a", 1, 100_000),
            mark(160_000, &[("a", 1)]),
            up("b", 1, 0),
            down("b", 200_000),
        ]);
        assert_eq!(
            spans(&h),
            [
                ("a", 1, 100_000, 200_000, true),
                ("b", 1, 160_000, 200_000, false)
            ]
        );
    }

    #[test]
    fn a_silence_longer_than_the_marks_period_ends_what_was_up_before_it() {
        let h = history(&[
            up("a", 1, 1_000),
            mark(1_000, &[("a", 1)]),
            mark(61_000, &[("a", 1)]),
            // The scheduler recorded nothing for ten minutes.
            mark(661_000, &[("a", 1)]),
            down("a", 700_000),
        ]);
        assert_eq!(
            spans(&h),
            [
                ("a", 1, 1_000, 61_000, true),
                ("a", 1, 661_000, 700_000, false)
            ]
        );
    }

    #[test]
    fn a_mark_listing_more_executors_than_a_cluster_has_opens_at_most_the_cap() {
        let many: Vec<(String, u32)> = (0..MAX_OPEN + 10).map(|i| (format!("e{i}"), 1)).collect();
        let refs: Vec<(&str, u32)> = many.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        let h = history(&[mark(1_000, &refs), mark(2_000, &refs)]);
        assert_eq!(h.intervals.len(), MAX_OPEN);
        assert!(h.bad_lines >= 10, "the executors past the cap are counted");
    }
}
