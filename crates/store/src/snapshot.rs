//! The persistent index: the completed jobs' list summaries in one file, so
//! a restart serves the job list at once and verifies the directory in the
//! background.
//!
//! It is a cache. The directory is the truth: after loading, the first
//! rescan checks every log's size and modification time against the stamp
//! stored here and re-reads the ones that differ. A missing, truncated,
//! corrupt or foreign file is detected (magic, length, checksum) and
//! ignored, and the index is rebuilt from the directory; nothing is lost.
//!
//! Format (little-endian): the magic `BJHIDX08`, then one record per job,
//! then the record count (u64) and a checksum (u64) of everything before it.
//! A record: file name, job id, job name (each a u32 length and UTF-8
//! bytes), state (u8), queue, start and end times (u64 millis), query hash
//! (u64, 0 unknown), long and short
//! status (strings), stages, completed stages (u32), percent (u8), dropped
//! records (u64), file length (u64), modification time (i64 seconds, u32
//! nanoseconds; `i64::MIN` when unknown), then the payload ranges of a log
//! without a footer: a u8 (0 none, 1 present) and, when present, five
//! `[offset, length]` pairs (u64) for `job`, `stages`, `config`, `dot` and
//! `responses` (length 0: absent), the scheduler id (a string, empty when
//! the log does not say), the query's label (a string, empty when
//! none is known; see `labels`), the busy and failed
//! slot-milliseconds (u64 each; `u64::MAX` when the log does not say),
//! and last the usage tags (a string: a JSON object's text, empty when
//! none).
//!
//! Written to a temporary file and renamed over the old one, so a reader
//! never sees a torn index; several processes may share one (the last
//! writer wins, and each is verified on load).

use crate::query::{FactsRef, JobFacts};
use crate::summary::{JobSummary, PayloadRanges, SummaryParts};
use bjh_format::JobState;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The index file's name inside the log directory, by default.
pub const DEFAULT_FILE_NAME: &str = ".ballista-job-history.index";
const MAGIC: &[u8; 8] = b"BJHIDX08";

/// Why a persisted index was not used.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Reading failed.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    /// Not an index of this format (foreign file, older/newer format).
    #[error("it is not an index of this version")]
    Foreign,
    /// Truncated or corrupt.
    #[error("it is damaged ({0})")]
    Damaged(&'static str),
}

/// A fast 64-bit checksum (FNV-1a over 8-byte words).
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        hash ^= u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash ^ bytes.len() as u64
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Encodes `jobs` in the index format.
pub fn encode<'a>(jobs: impl Iterator<Item = &'a JobSummary>) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    let mut count: u64 = 0;
    let labels = crate::labels::all();
    let mut labelled = std::collections::HashSet::new();
    for s in jobs {
        count += 1;
        // A query's label once, with its first job: a million runs of a
        // few queries do not repeat it (decoding learns it from that one).
        let hash = s.query_hash();
        let label = labels.get(hash).filter(|_| labelled.insert(hash));
        encode_record(&mut out, s, label);
    }
    out.extend_from_slice(&count.to_le_bytes());
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Appends one job's record (the format above; `label`, the query's label
/// when this record is to carry it).
pub(crate) fn encode_record(out: &mut Vec<u8>, s: &JobSummary, label: Option<&str>) {
    put_str(out, &s.file_name());
    put_str(out, s.job_id());
    put_str(out, s.job_name());
    out.push(s.state().index() as u8);
    out.extend_from_slice(&s.queued_time().to_le_bytes());
    out.extend_from_slice(&s.start_time().to_le_bytes());
    out.extend_from_slice(&s.end_time().to_le_bytes());
    out.extend_from_slice(&s.query_hash().to_le_bytes());
    put_str(out, s.job_status());
    put_str(out, s.status());
    out.extend_from_slice(&s.num_stages.to_le_bytes());
    out.extend_from_slice(&s.completed_stages.to_le_bytes());
    out.push(s.percent_complete);
    out.extend_from_slice(&s.dropped_records.to_le_bytes());
    let stamp = s.stamp();
    out.extend_from_slice(&stamp.len.to_le_bytes());
    let (secs, nanos) = match stamp
        .modified
        .map(|m| m.duration_since(SystemTime::UNIX_EPOCH))
    {
        Some(Ok(d)) => (d.as_secs() as i64, d.subsec_nanos()),
        Some(Err(e)) => (-(e.duration().as_secs() as i64) - 1, 0),
        None => (i64::MIN, 0),
    };
    out.extend_from_slice(&secs.to_le_bytes());
    out.extend_from_slice(&nanos.to_le_bytes());
    match s.ranges() {
        None => out.push(0),
        Some(r) => {
            out.push(1);
            for [offset, len] in r.0 {
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
        }
    }
    put_str(out, s.scheduler_id().unwrap_or(""));
    put_str(out, label.unwrap_or(""));
    let usage = s.usage();
    for ms in [
        usage.map_or(u64::MAX, |u| u.busy_slot_ms),
        usage.map_or(u64::MAX, |u| u.failed_slot_ms),
    ] {
        out.extend_from_slice(&ms.to_le_bytes());
    }
    put_str(out, s.tags().unwrap_or(""));
}

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn done(&self) -> bool {
        self.at == self.bytes.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], IndexError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(IndexError::Damaged("a record runs past the end"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, IndexError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, IndexError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, IndexError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    pub(crate) fn str(&mut self) -> Result<&'a str, IndexError> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| IndexError::Damaged("invalid UTF-8"))
    }
}

/// Reads one job's record at the cursor: the summary, and the query's
/// label the record carries (empty when none).
pub(crate) fn decode_record<'a>(c: &mut Cursor<'a>) -> Result<(JobSummary, &'a str), IndexError> {
    let file_name = c.str()?;
    let job_id = c.str()?;
    let job_name = c.str()?;
    let state = JobState::at_index(c.u8()?).ok_or(IndexError::Damaged("unknown state"))?;
    let queued_time = c.u64()?;
    let start_time = c.u64()?;
    let end_time = c.u64()?;
    let query_hash = c.u64()?;
    let job_status = c.str()?;
    let status = c.str()?;
    let num_stages = c.u32()?;
    let completed_stages = c.u32()?;
    let percent_complete = c.u8()?;
    let dropped_records = c.u64()?;
    let len = c.u64()?;
    let secs = c.u64()? as i64;
    let nanos = c.u32()?;
    let ranges = match c.u8()? {
        0 => None,
        1 => {
            let mut r = PayloadRanges::default();
            for pair in &mut r.0 {
                *pair = [c.u64()?, c.u64()?];
            }
            Some(r)
        }
        _ => return Err(IndexError::Damaged("unknown payload-ranges flag")),
    };
    let scheduler_id = Some(c.str()?).filter(|s| !s.is_empty());
    let label = c.str()?;
    let (busy_slot_ms, failed_slot_ms) = (c.u64()?, c.u64()?);
    let usage = (busy_slot_ms != u64::MAX).then_some(bjh_format::usage::SlotUsage {
        busy_slot_ms,
        failed_slot_ms: failed_slot_ms.min(busy_slot_ms),
    });
    let tags = Some(c.str()?).filter(|t| !t.is_empty());
    let modified = match secs {
        i64::MIN => None,
        s if s >= 0 => Some(SystemTime::UNIX_EPOCH + Duration::new(s as u64, nanos)),
        s => Some(SystemTime::UNIX_EPOCH - Duration::from_secs((-(s + 1)) as u64)),
    };
    let summary = JobSummary::restore(SummaryParts {
        facts: FactsRef {
            job_id,
            job_name,
            state,
            queued_time,
            start_time,
            end_time,
            query_hash,
        },
        job_status,
        status,
        stages: [num_stages, completed_stages],
        percent_complete,
        dropped_records,
        file_name,
        len,
        modified,
        ranges,
        scheduler_id,
        usage,
        tags,
    });
    Ok((summary, label))
}

/// Decodes an index; any damage is an error (the caller rebuilds).
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<JobSummary>, IndexError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(IndexError::Foreign);
    }
    if bytes.len() < MAGIC.len() + 16 {
        return Err(IndexError::Damaged("too short"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if checksum(body) != u64::from_le_bytes(sum.try_into().expect("8")) {
        return Err(IndexError::Damaged("checksum mismatch"));
    }
    let (records, count) = body.split_at(body.len() - 8);
    let count = u64::from_le_bytes(count.try_into().expect("8"));
    let mut c = Cursor {
        bytes: records,
        at: MAGIC.len(),
    };
    let mut out = Vec::with_capacity(count.min(10_000_000) as usize);
    let mut labels = Vec::new();
    while c.at < records.len() {
        let (summary, label) = decode_record(&mut c)?;
        if !label.is_empty() {
            labels.push((summary.query_hash(), label));
        }
        out.push(summary);
    }
    if out.len() as u64 != count {
        return Err(IndexError::Damaged("record count mismatch"));
    }
    for (hash, label) in labels {
        crate::labels::remember(hash, Some(label));
    }
    Ok(out)
}

/// The largest index read: about 200 bytes a job, twenty million jobs.
const MAX_BYTES: u64 = 4 << 30;

/// Reads the index at `path`: opened as a planted file is (no link, no
/// FIFO, at most 4 GiB), and a file that does not start with the
/// magic is refused before the rest of it is read.
pub fn load(path: &Path) -> Result<Vec<JobSummary>, IndexError> {
    load_summed(path).map(|(jobs, _)| jobs)
}

/// [`load`], with the index's own checksum (its last eight bytes: what
/// the spilled segments' manifest names it by).
pub(crate) fn load_summed(path: &Path) -> Result<(Vec<JobSummary>, u64), IndexError> {
    use std::io::Read;
    let (mut file, meta) = bjh_files::open_capped(path, MAX_BYTES)?;
    let mut bytes = vec![0u8; MAGIC.len()];
    if file.read_exact(&mut bytes).is_err() || bytes[..] != MAGIC[..] {
        return Err(IndexError::Foreign);
    }
    bytes.reserve(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_BYTES).read_to_end(&mut bytes)?;
    let jobs = decode(&bytes)?;
    Ok((jobs, sum_of(&bytes)))
}

/// An encoded index's own checksum (its last eight bytes).
pub(crate) fn sum_of(bytes: &[u8]) -> u64 {
    let tail = &bytes[bytes.len().saturating_sub(8)..];
    tail.try_into().map_or(0, u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogStore;
    use crate::query::ListQuery;
    use bjh_metrics::HistoryMetrics;
    use std::collections::HashSet;
    use std::path::PathBuf;
    use std::sync::Arc;

    fn log(dir: &Path, id: &str, start: u64) {
        let line = format!(
            r#"{{"ev":"JobEnd","version":1,"data":{{"status":{{"Failed":"x"}},"queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"ünï {id}","status":"Failed","job_status":"Failed: x","start_time":{start},"end_time":{},"num_stages":3,"completed_stages":1,"percent_complete":33}},"job":{{}},"stages":{{}},"config":{{}},"dot":"","dropped_records":7}}}}"#,
            start + 5
        );
        std::fs::write(dir.join(format!("{id}.eventlog")), line + "\n").unwrap();
    }

    fn store(dir: &Path, index: &Path) -> LogStore {
        LogStore::new(dir, Arc::new(HistoryMetrics::unregistered()))
            .with_index_file(Some(index.to_path_buf()))
    }

    fn listing(s: &LogStore) -> Vec<(String, Vec<u8>)> {
        s.page(&ListQuery::default(), None, &HashSet::new())
            .rows
            .into_iter()
            .map(|r| (r.facts.job_id().to_string(), r.entry.to_vec()))
            .collect()
    }

    fn setup(n: u64) -> (tempfile::TempDir, PathBuf, Vec<(String, Vec<u8>)>) {
        setup_as(n, |s| s)
    }

    /// [`setup`] with every job in the index itself (none spilled to
    /// segments, whatever `BJH_STORE_SPILL` says): for the tests of the
    /// index's own bytes.
    fn setup_whole(n: u64) -> (tempfile::TempDir, PathBuf, Vec<(String, Vec<u8>)>) {
        setup_as(n, LogStore::no_spill)
    }

    fn setup_as(
        n: u64,
        how: fn(LogStore) -> LogStore,
    ) -> (tempfile::TempDir, PathBuf, Vec<(String, Vec<u8>)>) {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..n {
            log(dir.path(), &format!("j{i:03}"), 1000 + i);
        }
        let index = dir.path().join(DEFAULT_FILE_NAME);
        let first = how(store(dir.path(), &index));
        first.rescan();
        first.persist(true);
        assert!(index.exists());
        let want = listing(&first);
        assert_eq!(want.len() as u64, n);
        (dir, index, want)
    }

    #[test]
    fn a_restart_lists_from_the_index_before_reading_any_log() {
        let (dir, index, want) = setup(50);
        let second = store(dir.path(), &index);
        assert_eq!(second.load_persisted(), 50);
        assert!(second.is_ready());
        assert_eq!(listing(&second), want, "served at once, byte for byte");
        let summary = second.summary("j007").unwrap();
        assert_eq!(summary.dropped_records, 7);
        // Verifying an unchanged directory reads no log.
        assert_eq!(second.rescan().read, 0);
        assert_eq!(listing(&second), want);
    }

    #[test]
    fn an_index_listing_a_job_twice_is_not_used() {
        let (dir, index, want) = setup_whole(5);
        let jobs = load(&index).unwrap();
        std::fs::write(&index, encode(jobs.iter().chain(&jobs))).unwrap();
        let s = store(dir.path(), &index);
        assert_eq!(s.load_persisted(), 0);
        assert!(s.is_empty() && !s.is_ready());
        assert_eq!(s.rescan().read, 5);
        assert_eq!(listing(&s), want);
    }

    #[test]
    fn a_stale_index_is_corrected_by_the_first_rescan() {
        let (dir, index, _) = setup(10);
        std::fs::remove_file(dir.path().join("j003.eventlog")).unwrap();
        log(dir.path(), "new", 5000);
        log(dir.path(), "j004", 9000); // rewritten: a different stamp
        let s = store(dir.path(), &index);
        assert_eq!(s.load_persisted(), 10);
        let report = s.rescan();
        assert_eq!((report.removed, report.read), (1, 2));
        assert!(!s.contains("j003") && s.contains("new"));
        assert_eq!(s.facts("j004").unwrap().start_time, 9000);
        s.persist(true);
        let again = store(dir.path(), &index);
        assert_eq!(again.load_persisted(), 10);
        assert!(again.contains("new") && !again.contains("j003"));
    }

    #[test]
    fn a_deleted_truncated_or_garbage_index_is_rebuilt_and_nothing_is_lost() {
        let (dir, index, want) = setup_whole(20);
        let good = std::fs::read(&index).unwrap();
        let damage: [(&str, Vec<u8>); 5] = [
            ("deleted", Vec::new()),
            ("truncated", good[..good.len() / 2].to_vec()),
            ("one byte flipped", {
                let mut b = good.clone();
                b[40] ^= 0x55;
                b
            }),
            ("garbage", b"not an index at all".to_vec()),
            ("empty", Vec::new()),
        ];
        for (what, bytes) in damage {
            if what == "deleted" {
                std::fs::remove_file(&index).unwrap();
            } else {
                std::fs::write(&index, &bytes).unwrap();
            }
            // Its bytes compared: every job in the index itself.
            let s = store(dir.path(), &index).no_spill();
            assert_eq!(s.load_persisted(), 0, "{what}");
            s.rescan();
            assert_eq!(listing(&s), want, "{what}: nothing lost");
            s.persist(true);
            assert_eq!(std::fs::read(&index).unwrap(), good, "{what}: rebuilt");
        }
    }

    #[test]
    fn decoding_rejects_every_truncation() {
        let (_dir, index, _) = setup_whole(3);
        let good = std::fs::read(&index).unwrap();
        assert_eq!(decode(&good).unwrap().len(), 3);
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "truncated to {len}");
        }
    }

    #[test]
    fn a_label_is_written_once_per_query_and_every_run_reads_it_back() {
        let hash = 0x5eed_1abe_1000_0001;
        let label = "snapshot_label_table · sort";
        crate::labels::remember(hash, Some(label));
        let job = |id: &str| {
            JobSummary::restore(SummaryParts {
                facts: FactsRef {
                    job_id: id,
                    job_name: "",
                    state: JobState::Completed,
                    queued_time: 1,
                    start_time: 2,
                    end_time: 3,
                    query_hash: hash,
                },
                job_status: "",
                status: "Completed",
                stages: [1, 1],
                percent_complete: 100,
                dropped_records: 0,
                file_name: &format!("{id}.eventlog"),
                len: 10,
                modified: None,
                ranges: None,
                scheduler_id: Some("s"),
                usage: (id != "j0").then_some(bjh_format::usage::SlotUsage {
                    busy_slot_ms: 70,
                    failed_slot_ms: 20,
                }),
                tags: (id == "j1").then_some(r#"{"team":"etl"}"#),
            })
        };
        let jobs: Vec<JobSummary> = (0..50).map(|i| job(&format!("j{i}"))).collect();
        let bytes = encode(jobs.iter());
        let times = memchr::memmem::find_iter(&bytes, label.as_bytes()).count();
        assert_eq!(times, 1, "the label once for 50 runs of its query");
        let back = decode(&bytes).unwrap();
        assert_eq!(back.len(), 50);
        assert!(back.iter().all(|j| j.query_hash() == hash));
        assert_eq!(crate::labels::get(hash).as_deref(), Some(label));
        // A slot time stated comes back; one not stated stays unknown.
        let usage: Vec<_> = back
            .iter()
            .map(|j| j.usage().map(|u| u.busy_slot_ms))
            .collect();
        assert_eq!(usage[0], None);
        assert!(usage[1..].iter().all(|u| *u == Some(70)));
        assert_eq!(back[1].usage().unwrap().failed_slot_ms, 20);
        assert_eq!(back[1].tags(), Some(r#"{"team":"etl"}"#));
        assert_eq!(back[2].tags(), None);
    }
}
