//! One job's reads: its terminal record through the footer's payload
//! ranges, else backwards from the end of the file, else by a forward scan;
//! and the decoded reader every other pass over a log uses.
//!
//! **Invariant:** a request reads what it asks for and nothing else: one
//! payload's bytes where the footer locates them, the `JobEnd` line where it
//! does not.

use super::tail::{Last, LineEnds, TailLine};
use super::*;

/// Where a log's payloads are, from its footer.
pub(super) struct Ranges {
    pub(super) payloads: std::collections::BTreeMap<String, [u64; 2]>,
    pub(super) file_len: u64,
}

/// Footers of objects remembered at most (about 1 KiB each).
pub(super) const REMEMBERED_FOOTERS: usize = 4096;

/// A reader of a log's decoded bytes: the file itself, or its zstd stream
/// (skippable frames skipped; a torn last frame, as a crash leaves it, ends
/// the stream quietly).
pub fn open_decoded(log: impl Into<LogRef>) -> std::io::Result<Box<dyn BufRead + Send>> {
    let log = log.into();
    let (file, _) = log.open()?;
    if log.is_zstd() {
        Ok(Box::new(BufReader::with_capacity(
            64 * 1024,
            Tolerant::new(zstd::stream::read::Decoder::new(file)?),
        )))
    } else {
        Ok(Box::new(BufReader::with_capacity(64 * 1024, file)))
    }
}

/// A reader that ends quietly at its first error (a torn zstd frame).
pub(super) struct Tolerant<R> {
    pub(super) inner: R,
    pub(super) failed: bool,
}

impl<R> Tolerant<R> {
    pub(super) fn new(inner: R) -> Self {
        Self {
            inner,
            failed: false,
        }
    }
}

impl<R: Read> Read for Tolerant<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.failed {
            return Ok(0);
        }
        match self.inner.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(_) => {
                self.failed = true;
                Ok(0)
            }
            ok => ok,
        }
    }
}

/// The `JobStart` record of a log (its first line).
pub fn read_job_start(log: impl Into<LogRef>) -> Result<JobStart, StoreError> {
    let mut reader = open_decoded(log)?;
    let mut line = Vec::new();
    read_line(&mut reader, &mut line, MAX_LINE)?;
    let env = envelope(&line)?;
    if env.ev != kind::JOB_START {
        return Err(StoreError::Malformed(
            "the first line is not a JobStart record".into(),
        ));
    }
    serde_json::from_str(env.data.get()).map_err(|e| StoreError::Malformed(e.to_string()))
}

/// The summary of a completed log, from its footer when it has one.
pub fn read_summary(log: impl Into<LogRef>) -> Result<JobEndSummary, StoreError> {
    read_summary_located(log).map(|(summary, _)| summary)
}

/// [`read_summary`], with the payloads' byte ranges of a plain log without
/// a footer whose last line is its `JobEnd` (learnt from the line in hand,
/// so later reads take one seek per payload, as with a footer).
pub fn read_summary_located(
    log: impl Into<LogRef>,
) -> Result<(JobEndSummary, Option<PayloadRanges>), StoreError> {
    let path: &LogRef = &log.into();
    if path.is_zstd() {
        if let Some((footer, file_len)) = zst_footer(path)? {
            return Ok((footer_summary(path, footer, file_len), None));
        }
        let line = forward_scan(open_decoded(path)?)?;
        let env = envelope(&line)?;
        return serde_json::from_str(env.data.get())
            .map(|s| (s, None))
            .map_err(|e| StoreError::Malformed(e.to_string()));
    }
    let tail = match TailLine::read_last(path, true)? {
        Last::Whole(line) => line,
        Last::Ends(ends) => {
            // A long last line (no footer is that long): its first and
            // last fields are all a summary needs.
            if let Some(found) = located_by_ends(&ends) {
                return Ok(found);
            }
            TailLine::read(path)?
        }
    };
    if let Some(footer) = tail.footer()? {
        return Ok((footer_summary(path, footer, tail.file_len), None));
    }
    if tail.line.starts_with(br#"{"ev":"JobEnd","#) || is_job_end_line(&tail.line) {
        return summary_and_ranges(&tail.line, tail.start);
    }
    let line = tail.job_end_line(path)?;
    let env = envelope(&line)?;
    serde_json::from_str(env.data.get())
        .map(|s| (s, None))
        .map_err(|e| StoreError::Malformed(e.to_string()))
}

/// The summary of a `JobEnd` line starting at byte `start` of its file,
/// and where each payload's JSON value sits in the file. The payloads are
/// skipped as raw JSON (checked, never built); only the `job` payload's
/// logical plan is read, for the query hash. The usual case is a scan
/// ([`located`]); a line the scan does not fit is parsed ([`parsed`]).
pub(super) fn summary_and_ranges(
    line: &[u8],
    start: u64,
) -> Result<(JobEndSummary, Option<PayloadRanges>), StoreError> {
    match located(line, start) {
        Some(found) => Ok(found),
        None => parsed(line, start),
    }
}

/// The fields located by a scan, the summary's parsed from their slices,
/// the payloads never built; `None` when the scan does not fit the line.
fn located(line: &[u8], start: u64) -> Option<(JobEndSummary, Option<PayloadRanges>)> {
    let found = super::locate::job_end_fields(line)?;
    summary_of(&found, |key| found.get(line, key), start)
}

/// [`located`] for a long line read by its ends: every field but `stages`
/// from the end that holds it; `None` when one is in neither.
fn located_by_ends(ends: &LineEnds) -> Option<(JobEndSummary, Option<PayloadRanges>)> {
    let len = usize::try_from(ends.len).ok()?;
    let found = super::locate::job_end_fields_ends(&ends.head, &ends.tail, len)?;
    let base = len - ends.tail.len();
    let value = |key: &str| {
        let [at, n] = found.range(key)?.map(|v| v as usize);
        if at + n <= ends.head.len() {
            ends.head.get(at..at + n)
        } else {
            ends.tail.get(at.checked_sub(base)?..at - base + n)
        }
    };
    summary_of(&found, value, ends.start)
}

/// The summary from the located fields, each value given by `value`.
fn summary_of<'a>(
    found: &super::locate::Fields,
    value: impl Fn(&str) -> Option<&'a [u8]>,
    start: u64,
) -> Option<(JobEndSummary, Option<PayloadRanges>)> {
    if found.version > SCHEMA_VERSION {
        return None;
    }
    let number = |key: &str| value(key).map_or(Some(0), |v| serde_json::from_slice::<u64>(v).ok());
    let status = serde_json::from_slice(value("status")?).ok()?;
    let index = serde_json::from_slice(value("index")?).ok()?;
    let (queued_at, dropped_records) = (number("queued_at")?, number("dropped_records")?);
    // The logical plan alone, found the same way inside `job`.
    let plans = PlansOfJob {
        logical_plan: value(bjh_format::record::payload::JOB)
            .and_then(|job| super::locate::object_field(job, "logical_plan"))
            .and_then(|plan| serde_json::from_slice(plan).ok()),
    };
    let mut ranges = PayloadRanges::default();
    for name in PayloadRanges::NAMES {
        if let Some([at, len]) = found.range(name) {
            ranges.set(name, [start + at, len]);
        }
    }
    let summary = JobEndSummary {
        status,
        queued_at,
        index,
        dropped_records,
        plans,
        stated_hash: None,
        stated_label: None,
        scheduler_id: None,
        usage: None,
        tags: Default::default(),
    };
    Some((summary, Some(ranges)))
}

/// One pass over the line with serde; when it does not fit (another
/// record, a newer schema, damage) the envelope alone says why.
fn parsed(line: &[u8], start: u64) -> Result<(JobEndSummary, Option<PayloadRanges>), StoreError> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct End<'a> {
        status: bjh_format::record::JobEndStatus,
        #[serde(default)]
        queued_at: u64,
        index: bjh_format::record::JobIndex,
        #[serde(default)]
        dropped_records: u64,
        #[serde(borrow, default)]
        job: Option<&'a RawValue>,
        #[serde(borrow, default)]
        stages: Option<&'a RawValue>,
        #[serde(borrow, default)]
        config: Option<&'a RawValue>,
        #[serde(borrow, default)]
        dot: Option<&'a RawValue>,
        #[serde(borrow, default)]
        responses: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Whole<'a> {
        #[serde(borrow)]
        ev: &'a str,
        version: u32,
        #[serde(borrow)]
        data: End<'a>,
    }
    let end = match serde_json::from_slice::<Whole>(line) {
        Ok(w) if w.ev == kind::JOB_END && w.version <= SCHEMA_VERSION => w.data,
        Ok(_) | Err(_) => {
            let env = envelope(line)?;
            serde_json::from_str::<End>(env.data.get())
                .map_err(|e| StoreError::Malformed(e.to_string()))?
        }
    };
    let plans: PlansOfJob = end
        .job
        .and_then(|j| serde_json::from_str(j.get()).ok())
        .unwrap_or_default();
    // Where a borrowed value sits: its distance from the line's first byte.
    let base = line.as_ptr() as usize;
    let mut ranges = PayloadRanges::default();
    let payloads = [end.job, end.stages, end.config, end.dot, end.responses];
    for (name, value) in PayloadRanges::NAMES.iter().zip(payloads) {
        let Some(value) = value.map(RawValue::get) else {
            continue;
        };
        let at = (value.as_ptr() as usize).wrapping_sub(base);
        if at + value.len() <= line.len() && line[at..].starts_with(value.as_bytes()) {
            ranges.set(name, [start + at as u64, value.len() as u64]);
        }
    }
    let summary = JobEndSummary {
        status: end.status,
        queued_at: end.queued_at,
        index: end.index,
        dropped_records: end.dropped_records,
        plans,
        stated_hash: None,
        stated_label: None,
        scheduler_id: None,
        usage: None,
        tags: Default::default(),
    };
    Ok((summary, Some(ranges)))
}

/// A summary from a footer. A footer written before it stated the query
/// hash, or the label of a query not labelled yet, has them made from the
/// `job` payload it locates (one more read, once per query for a label);
/// what cannot be had is left unknown rather than failing the log.
fn footer_summary(path: &LogRef, footer: Footer, file_len: u64) -> JobEndSummary {
    let stated_hash = footer
        .query_hash
        .as_deref()
        .and_then(bjh_format::query_hash::parse_hash);
    let unlabelled =
        footer.query_label.is_none() && stated_hash.is_none_or(|h| !crate::labels::known(h));
    let plans = if stated_hash.is_none() || unlabelled {
        footer
            .payloads
            .get(bjh_format::record::payload::JOB)
            .and_then(|&[offset, len]| {
                let bytes = if path.is_zstd() {
                    read_at(path, offset, len, file_len).and_then(|f| decompress_all(&f))
                } else {
                    read_located(
                        path,
                        bjh_format::record::payload::JOB,
                        offset,
                        len,
                        file_len,
                    )
                };
                serde_json::from_slice::<PlansOfJob>(&bytes.ok()?).ok()
            })
            .unwrap_or_default()
    } else {
        PlansOfJob::default()
    };
    JobEndSummary {
        status: footer.status,
        queued_at: footer.queued_at,
        index: footer.index,
        dropped_records: footer.dropped_records,
        plans,
        stated_hash,
        stated_label: footer.query_label,
        scheduler_id: footer.scheduler_id,
        usage: footer
            .busy_slot_ms
            .map(|busy_slot_ms| bjh_format::usage::SlotUsage {
                busy_slot_ms,
                failed_slot_ms: footer.failed_slot_ms.unwrap_or(0).min(busy_slot_ms),
            }),
        tags: footer.tags,
    }
}

/// `summary` (of job `id`'s log) within `format::bounds`, said in the
/// log when it was not.
pub(crate) fn bounded(summary: JobEndSummary, id: &str) -> JobEndSummary {
    let (summary, cut) = summary.bounded(bjh_format::bounds::Clock::now());
    if cut {
        log::warn!(
            "the log of job {id} states a time past now or a slot time beyond its span: \
             cut to the bounds (format::bounds)"
        );
    }
    summary
}

/// The bytes of the log's `JobEnd` line: where the footer says it is, else
/// (no footer, or one that does not match the file) read the slow way.
pub fn terminal_line(log: impl Into<LogRef>) -> Result<Vec<u8>, StoreError> {
    let path: &LogRef = &log.into();
    let located = if path.is_zstd() {
        zst_footer(path)?.map(|(footer, file_len)| {
            read_at(path, footer.job_end_offset, footer.job_end_len, file_len)
                .and_then(|frame| decompress_line(&frame))
        })
    } else {
        let tail = TailLine::read(path)?;
        match tail.footer()? {
            Some(footer) => Some(read_at(
                path,
                footer.job_end_offset,
                footer.job_end_len,
                tail.file_len,
            )),
            None => return tail.job_end_line(path),
        }
    };
    match located {
        Some(Ok(line)) if is_job_end_line(&line) => return Ok(line),
        Some(_) => log::warn!(
            "history: the footer of {} does not match the file (rewritten in place?); \
             reading it the slow way",
            path.shown()
        ),
        None => {}
    }
    forward_scan(open_decoded(path)?)
}

/// A payload of a plain log at `[offset, offset + len)`, checked to sit
/// right after its `"name":` key and before a `,` or `}`.
pub(super) fn read_located(
    path: &LogRef,
    name: &str,
    offset: u64,
    len: u64,
    file_len: u64,
) -> std::io::Result<Vec<u8>> {
    let key = format!("\"{name}\":");
    let before = key.len() as u64;
    let start = offset
        .checked_sub(before)
        .ok_or_else(|| std::io::Error::other("payload offset before the file"))?;
    let mut bytes = read_at(path, start, before + len + 1, file_len)?;
    let after = bytes.pop();
    if !bytes.starts_with(key.as_bytes()) || !matches!(after, Some(b',' | b'}')) {
        return Err(std::io::Error::other(
            "payload range does not match its key",
        ));
    }
    bytes.drain(..before as usize);
    Ok(bytes)
}

/// Whether `bytes` look like the payload `name`: a JSON string for the
/// graph, a JSON object for the others.
pub(super) fn plausible(name: &str, bytes: &[u8]) -> bool {
    let (open, close) = if name == bjh_format::record::payload::DOT {
        (b'"', b'"')
    } else {
        (b'{', b'}')
    };
    bytes.len() >= 2 && bytes[0] == open && bytes[bytes.len() - 1] == close
}

/// Decodes zstd frames (bounded by [`MAX_LINE`]).
pub(super) fn decompress_all(frames: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(frames)?
        .take(MAX_LINE + 1)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// One zstd frame holding one line, decoded, without its newline.
pub(super) fn decompress_line(frame: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    zstd::stream::read::Decoder::new(frame)?
        .take(MAX_LINE + 1)
        .read_to_end(&mut line)?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    Ok(line)
}

/// The footer of a log of either format, with the file's length.
pub(super) fn footer_of(path: &LogRef) -> Result<Option<(Footer, u64)>, StoreError> {
    if path.is_zstd() {
        return zst_footer(path);
    }
    let tail = TailLine::read(path)?;
    Ok(tail.footer()?.map(|f| (f, tail.file_len)))
}

/// The footer of a compressed log, from the skippable frame at its end,
/// with the file's length. `None` when the file does not end with one.
pub(super) fn zst_footer(path: &LogRef) -> Result<Option<(Footer, u64)>, StoreError> {
    let (mut file, file_len) = path.open()?;
    if file_len < 16 {
        return Ok(None);
    }
    let mut trailer = [0u8; 8];
    file.seek(SeekFrom::Start(file_len - 8))?;
    file.read_exact(&mut trailer)?;
    if &trailer[4..] != FOOTER_FRAME_TAG {
        return Ok(None);
    }
    let total = u64::from(u32::from_le_bytes(
        trailer[..4].try_into().expect("4 bytes"),
    ));
    if !(16..=file_len.min(MAX_FOOTER_FRAME)).contains(&total) {
        return Ok(None);
    }
    let mut frame = vec![0u8; total as usize];
    file.seek(SeekFrom::Start(file_len - total))?;
    file.read_exact(&mut frame)?;
    let magic = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes"));
    let size = u64::from(u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes")));
    if magic != FOOTER_FRAME_MAGIC || size != total - 8 {
        return Ok(None);
    }
    let line = frame[8..frame.len() - 8].trim_ascii_end();
    Ok(parse_footer(line)?.map(|f| (f, file_len)))
}

pub(super) fn decode_job_end(line: &[u8]) -> Result<JobEnd, StoreError> {
    let env = envelope(line)?;
    serde_json::from_str(env.data.get()).map_err(|e| StoreError::Malformed(e.to_string()))
}

pub(super) fn envelope(line: &[u8]) -> Result<Envelope<'_>, StoreError> {
    let env: Envelope =
        serde_json::from_slice(line).map_err(|e| StoreError::Malformed(e.to_string()))?;
    if env.version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: env.version });
    }
    Ok(env)
}

pub(super) fn is_job_end_line(line: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        ev: &'a str,
    }
    line.starts_with(b"{")
        && serde_json::from_slice::<Kind>(line)
            .map(|k| k.ev == kind::JOB_END)
            .unwrap_or(false)
}

/// The largest footer frame of a compressed log that is read.
pub(super) const MAX_FOOTER_FRAME: u64 = 4 * 1024 * 1024;
/// The longest line read whole, by every reader of a log (a `JobEnd` line
/// of a very large job is the longest a log holds); longer lines are
/// skipped without being kept.
pub const MAX_LINE: u64 = 512 * 1024 * 1024;

/// What the index asks of a last line.
impl TailLine {
    /// The footer, when the last line is one.
    pub(super) fn footer(&self) -> Result<Option<Footer>, StoreError> {
        parse_footer(&self.line)
    }

    /// The `JobEnd` line of a log without a footer: the last line when it
    /// is one, else found by a forward scan.
    pub(super) fn job_end_line(&self, path: &LogRef) -> Result<Vec<u8>, StoreError> {
        if is_job_end_line(&self.line) {
            Ok(self.line.clone())
        } else {
            forward_scan(open_decoded(path)?)
        }
    }
}

/// The footer record in `line`, if it is one.
pub(super) fn parse_footer(line: &[u8]) -> Result<Option<Footer>, StoreError> {
    // Every writer puts `ev` first: another record kind is told from its
    // first bytes, without reading the line (a `JobEnd` line may be long).
    if let Some(rest) = line.strip_prefix(br#"{"ev":""#)
        && !rest.starts_with(br#"Footer""#)
    {
        return Ok(None);
    }
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        ev: &'a str,
        version: u32,
    }
    let Ok(k) = serde_json::from_slice::<Kind>(line) else {
        return Ok(None);
    };
    if k.ev != kind::FOOTER {
        return Ok(None);
    }
    if k.version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: k.version });
    }
    let env = envelope(line)?;
    match serde_json::from_str::<Footer>(env.data.get()) {
        Ok(footer) => {
            let (footer, cut) = footer.bounded(bjh_format::bounds::Clock::now());
            if cut {
                log::warn!(
                    "the footer of job {} states a time past now or a slot time beyond its \
                     span: cut to the bounds (format::bounds)",
                    footer.index.job_id
                );
            }
            Ok(Some(footer))
        }
        Err(e) => Err(StoreError::Malformed(format!("footer: {e}"))),
    }
}

pub(super) fn read_at(
    path: &LogRef,
    offset: u64,
    len: u64,
    file_len: u64,
) -> std::io::Result<Vec<u8>> {
    if offset.checked_add(len).is_none_or(|end| end > file_len) || len > MAX_LINE {
        return Err(std::io::Error::other("footer offsets are outside the file"));
    }
    let (mut file, _) = path.open()?;
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0; len as usize];
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// The first `JobEnd` line, scanning from the start: the slow path, for
/// logs whose last record is something else.
pub(super) fn forward_scan(mut reader: impl BufRead) -> Result<Vec<u8>, StoreError> {
    let mut line = Vec::new();
    while let Some(whole) = bounded_line(&mut reader, &mut line, MAX_LINE)? {
        if whole && line.starts_with(b"{") && is_job_end_line(&line) {
            return Ok(line);
        }
    }
    Err(StoreError::NoTerminalRecord)
}

/// What [`read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line ended by a newline (not kept in the buffer).
    Ended,
    /// The input ended before a newline: a log's unterminated last line, or
    /// a line still being written.
    Unended,
    /// A line over the limit: skipped without being kept; whether a newline
    /// ended it.
    Overlong {
        /// A newline ended it.
        ended: bool,
    },
}

/// The one line reader of every pass over a log: reads the next line
/// (without its `\n`) into `line`, keeping at most `max` bytes (callers pass
/// [`MAX_LINE`]) and skipping the rest of a longer line unread into memory.
/// Gives what it found and the bytes it consumed; `None` at the end.
pub fn read_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: u64,
) -> std::io::Result<Option<(Line, u64)>> {
    line.clear();
    let n = reader.by_ref().take(max + 1).read_until(b'\n', line)? as u64;
    if n == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        return Ok(Some((Line::Ended, n)));
    }
    if (line.len() as u64) <= max {
        return Ok(Some((Line::Unended, n)));
    }
    line.clear();
    let (rest, ended) = skip_line(reader)?;
    Ok(Some((Line::Overlong { ended }, n + rest)))
}

/// [`read_line`] for passes that take an unterminated last line as a line:
/// `Some(true)` for a line, `Some(false)` for an overlong one (skipped),
/// `None` at the end.
pub(super) fn bounded_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: u64,
) -> std::io::Result<Option<bool>> {
    Ok(read_line(reader, line, max)?.map(|(found, _)| !matches!(found, Line::Overlong { .. })))
}

/// Consumes the rest of the current line, newline included, without
/// keeping it: the bytes consumed, and whether a newline ended them.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<(u64, bool)> {
    let mut skipped = 0;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok((skipped, false));
        }
        let (n, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (chunk.len(), false),
        };
        reader.consume(n);
        skipped += n as u64;
        if ended {
            return Ok((skipped, true));
        }
    }
}

impl LogStore {
    /// Reads the job's terminal record. `Ok(None)` when the job is not
    /// indexed as completed.
    pub fn read_job_end(&self, job_id: &str) -> Result<Option<JobEnd>, StoreError> {
        let Some(path) = self.completed_path(job_id) else {
            return Ok(None);
        };
        let line = terminal_line(&path)?;
        decode_job_end(&line).map(Some)
    }

    /// The completed job's stored `/api/job/{id}/stages` answer, in the
    /// `?plan_format=` variant `name` (`None`: the default): from the
    /// payloads its footer locates, else from its terminal record.
    /// `Ok(None)` when the job is not indexed as completed or its log
    /// stored no such answer.
    pub fn stored_stages(
        &self,
        job_id: &str,
        name: Option<&str>,
    ) -> Result<Option<String>, StoreError> {
        use bjh_format::record::payload::{RESPONSES, STAGES};
        use bjh_format::record::{Responses, Variant};
        let unfit = || StoreError::Malformed("a stored plan variant does not fit its log".into());
        if let Some(parts) = self.read_payloads(job_id, &[STAGES, RESPONSES])? {
            let base =
                std::str::from_utf8(&parts[0]).map_err(|e| StoreError::Malformed(e.to_string()))?;
            let stored: Responses = serde_json::from_slice(&parts[1])
                .map_err(|e| StoreError::Malformed(e.to_string()))?;
            return Variant::pick(base, &stored.stages, name)
                .map(Some)
                .ok_or_else(unfit);
        }
        let Some(end) = self.read_job_end(job_id)? else {
            return Ok(None);
        };
        if end.responses.missing.iter().any(|m| m == "stages") {
            return Ok(None);
        }
        Variant::pick(end.stages.get(), &end.responses.stages, name)
            .map(Some)
            .ok_or_else(unfit)
    }

    /// Reads the named payloads (see [`bjh_format::record::payload`]) of a
    /// completed job through its footer's byte ranges: one small read from
    /// the end of the file, then one read per payload. `Ok(None)` when the
    /// job is not indexed, or its footer does not locate every one of them
    /// (an upstream or older log, a response the job had no answer for):
    /// the caller then reads the whole terminal record. A range that does
    /// not hold what it should (a log rewritten in place) is logged and
    /// answered `None` too, never served.
    pub fn read_payloads(
        &self,
        job_id: &str,
        names: &[&str],
    ) -> Result<Option<Vec<Vec<u8>>>, StoreError> {
        let Some(path) = self.completed_path(job_id) else {
            return Ok(None);
        };
        let zstd = path.is_zstd();
        let (ranges, learnt) = match self.remembered_ranges(job_id, &path) {
            Some(ranges) => (ranges, true),
            None => match self.ranges_of(&path)? {
                Some(ranges) => (ranges, false),
                None => return Ok(None),
            },
        };
        let file_len = ranges.file_len;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Some(&[offset, len]) = ranges.payloads.get(*name) else {
                return Ok(None);
            };
            let bytes = if zstd {
                read_at(&path, offset, len, file_len).and_then(|frame| decompress_all(&frame))
            } else {
                read_located(&path, name, offset, len, file_len)
            };
            match bytes {
                Ok(bytes) if plausible(name, &bytes) => out.push(bytes),
                _ => {
                    if let Some(object) = path.name() {
                        self.ranges.lock().remove(object);
                    }
                    log::warn!(
                        "history: the payload ranges {} of {} do not match the file \
                         (rewritten in place?); reading it the slow way",
                        if learnt {
                            "learnt when indexing"
                        } else {
                            "in the footer"
                        },
                        path.shown()
                    );
                    return Ok(None);
                }
            }
        }
        Ok(Some(out))
    }

    /// The payload ranges learnt when a log without a footer was indexed,
    /// if the log is still what was indexed: the same length (and, for a
    /// file, the same modification time). Each range is then checked
    /// against its key as it is read, so a log rewritten in place is never
    /// served from stale ranges.
    fn remembered_ranges(&self, job_id: &str, path: &LogRef) -> Option<Arc<Ranges>> {
        let (ranges, stamp) = {
            let summary = self.completed(job_id)?;
            (summary.ranges()?, summary.stamp())
        };
        let unchanged = match path {
            LogRef::File(file) | LogRef::Indexed { path: file, .. } => {
                std::fs::symlink_metadata(file).is_ok_and(|m| Stamp::of(&m) == stamp)
            }
            LogRef::Object { len, .. } => *len == stamp.len,
        };
        unchanged.then(|| {
            Arc::new(Ranges {
                payloads: ranges.to_map(),
                file_len: stamp.len,
            })
        })
    }

    /// The payload ranges of a completed log's footer: remembered for
    /// objects (a read costs a request), read each time for files.
    pub(super) fn ranges_of(&self, path: &LogRef) -> Result<Option<Arc<Ranges>>, StoreError> {
        let LogRef::Object { name, len, .. } = path else {
            return Ok(footer_of(path)?.map(|(footer, file_len)| {
                Arc::new(Ranges {
                    payloads: footer.payloads,
                    file_len,
                })
            }));
        };
        if let Some(known) = self.ranges.lock().get(name)
            && known.file_len == *len
        {
            return Ok(Some(known.clone()));
        }
        let Some((footer, file_len)) = footer_of(path)? else {
            return Ok(None);
        };
        let ranges = Arc::new(Ranges {
            payloads: footer.payloads,
            file_len,
        });
        let mut known = self.ranges.lock();
        if known.len() >= REMEMBERED_FOOTERS {
            known.clear();
        }
        known.insert(name.clone(), ranges.clone());
        Ok(Some(ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tail::{END_BYTES, ENDS_FROM};

    /// A `JobEnd` line of `len` bytes and more whose `job` payload holds
    /// the logical plan `plan`.
    fn long_job_end(plan: &str) -> String {
        let stages = format!(r#"{{"stages":[{{"plan":"{}"}}]}}"#, "s".repeat(3_000_000));
        format!(
            r#"{{"ev":"JobEnd","version":1,"data":{{"status":{{"Failed":"a \"}}\""}},"queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"j","job_name":"n","status":"Failed","job_status":"Failed.","start_time":2,"end_time":3,"num_stages":1,"completed_stages":0,"percent_complete":0}},"job":{{"job_id":"j","logical_plan":"{plan}"}},"stages":{stages},"config":{{"k":"v"}},"dot":"digraph G {{}}","dropped_records":4}}}}"#
        )
    }

    /// A last line of `ENDS_FROM` bytes or more is indexed from its two
    /// ends, and gives what serde's reading of the whole line gives; one
    /// whose `job` does not fit an end is read whole, with the same answer.
    #[test]
    fn a_long_last_line_is_indexed_from_its_ends() {
        let dir = tempfile::tempdir().unwrap();
        let first = "{\"ev\":\"JobStart\",\"version\":1,\"data\":{}}\n";
        for (name, plan, by_ends) in [
            ("ends", "Projection: a\\n  TableScan: t".to_string(), true),
            ("whole", "p".repeat(END_BYTES as usize), false),
        ] {
            let line = long_job_end(&plan);
            assert!(line.len() as u64 >= ENDS_FROM);
            let path = dir.path().join(format!("{name}.eventlog"));
            std::fs::write(&path, format!("{first}{line}\n")).unwrap();
            let log = LogRef::from(path.as_path());
            let Last::Ends(ends) = TailLine::read_last(&log, true).unwrap() else {
                panic!("{name}: a long line is read by its ends");
            };
            assert_eq!(ends.start, first.len() as u64);
            assert_eq!(ends.len, line.len() as u64);
            assert_eq!(located_by_ends(&ends).is_some(), by_ends, "{name}");
            let (summary, ranges) = read_summary_located(log).unwrap();
            let (want, want_ranges) = parsed(line.as_bytes(), first.len() as u64).unwrap();
            assert_eq!(format!("{summary:?}"), format!("{want:?}"), "{name}");
            assert_eq!(ranges, want_ranges, "{name}");
            assert_eq!(summary.dropped_records, 4);
        }
    }
}
