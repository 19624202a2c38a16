//! The last line of a log, read backwards from its end: whole (a footer,
//! a `JobEnd` line), or, for a reader that needs only a long line's first
//! and last fields, by its two ends.
//!
//! **Invariant:** memory is one search buffer (at most [`TAIL_CHUNK_MAX`])
//! plus what is returned, whatever the file holds.

use super::*;

/// Bytes read from the end of a file first (then doubling). A footer line
/// is well under 4 KiB, so indexing a log costs one small read whatever
/// its size.
pub(super) const TAIL_CHUNK: u64 = 4 * 1024;
/// The largest chunk the search for a long last line's start reads.
pub(super) const TAIL_CHUNK_MAX: u64 = 1024 * 1024;
/// A file this small is read whole, in one read: a small log without a
/// footer costs one open and one read.
pub(super) const SMALL_FILE: u64 = 32 * 1024;
/// A file this small whose last line does not fit the first chunk is
/// read whole at the second read.
pub(super) const WHOLE_FILE: u64 = 1024 * 1024;

/// A last line at least this long is read by its ends when only its first
/// and last fields are wanted (indexing a log without a footer).
pub(super) const ENDS_FROM: u64 = 2 * TAIL_CHUNK_MAX;
/// How much of each end of such a line is read.
pub(super) const END_BYTES: u64 = 256 * 1024;

/// The two ends of a long last line: its first and last [`END_BYTES`].
pub(super) struct LineEnds {
    /// Where the line starts in the file.
    pub(super) start: u64,
    /// The line's length.
    pub(super) len: u64,
    /// Its first bytes.
    pub(super) head: Vec<u8>,
    /// Its last bytes.
    pub(super) tail: Vec<u8>,
}

/// A file's last line, whole or (a long one, when asked) by its ends.
pub(super) enum Last {
    /// The whole line.
    Whole(TailLine),
    /// A long line's ends.
    Ends(LineEnds),
}

/// The last line of a file, read backwards from the end.
pub(super) struct TailLine {
    pub(super) file_len: u64,
    /// Where the line starts in the file.
    pub(super) start: u64,
    /// The last non-blank line, without its newline.
    pub(super) line: Vec<u8>,
}

impl TailLine {
    pub(super) fn read(path: &LogRef) -> Result<Self, StoreError> {
        match Self::read_last(path, false)? {
            Last::Whole(line) => Ok(line),
            Last::Ends(_) => unreachable!("ends are read only when asked for"),
        }
    }

    /// The last line, or with `ends` a line of [`ENDS_FROM`] bytes or more
    /// by its ends.
    pub(super) fn read_last(path: &LogRef, ends: bool) -> Result<Last, StoreError> {
        let (mut file, file_len) = path.open()?;
        // Backwards in chunks that grow from 4 KiB to `TAIL_CHUNK_MAX`,
        // remembering only where the line ends; then the line is read once.
        // Memory is one chunk plus the line, whatever the file holds; the
        // chunk stops growing at 1 MiB so that a 10 MB line costs one
        // buffer of 1 MiB for the search, not fresh pages of 16 MiB (a new
        // process pays for every page it touches first).
        let mut chunk = Vec::new();
        let mut step = TAIL_CHUNK;
        let mut end: Option<u64> = None;
        let mut pos = file_len;
        // A small file is read whole at once; a larger one whose last line
        // is longer than the first chunk (a log without a footer) is read
        // whole at the second read, up to `WHOLE_FILE`.
        let mut whole = file_len <= SMALL_FILE;
        if whole {
            chunk.resize(file_len as usize, 0);
            file.read_exact(&mut chunk)?;
            pos = 0;
        }
        while pos > 0 && !whole {
            if pos < file_len && file_len <= WHOLE_FILE {
                whole = true;
                break;
            }
            let from = pos.saturating_sub(step);
            chunk.resize((pos - from) as usize, 0);
            file.seek(SeekFrom::Start(from))?;
            file.read_exact(&mut chunk)?;
            let mut search = &chunk[..];
            let mut ends_here = false;
            if end.is_none()
                && let Some(last) = chunk.iter().rposition(|b| !b.is_ascii_whitespace())
            {
                end = Some(from + last as u64 + 1);
                search = &chunk[..last];
                ends_here = true;
            }
            if let Some(end) = end {
                if let Some(nl) = memchr::memrchr(b'\n', search) {
                    if ends_here {
                        // The whole line is in this chunk (the usual case:
                        // a footer in the last 4 KiB).
                        let line = chunk[nl + 1..(end - from) as usize].to_vec();
                        let start = from + nl as u64 + 1;
                        return Ok(Last::Whole(Self {
                            file_len,
                            start,
                            line,
                        }));
                    }
                    let start = from + nl as u64 + 1;
                    return Self::line_or_ends(&mut *file, file_len, start, end, ends);
                }
                if end - from > MAX_LINE {
                    return Err(StoreError::Malformed(format!(
                        "the last line is longer than {MAX_LINE} bytes"
                    )));
                }
            }
            pos = from;
            step = (step * 2).min(TAIL_CHUNK_MAX);
        }
        if whole {
            // The rest of the file, before the chunk already read.
            let mut all = vec![0; pos as usize];
            if pos > 0 {
                file.seek(SeekFrom::Start(0))?;
                file.read_exact(&mut all)?;
            }
            all.extend_from_slice(&chunk);
            let Some(last) = all.iter().rposition(|b| !b.is_ascii_whitespace()) else {
                return Err(StoreError::NoTerminalRecord);
            };
            let start = memchr::memrchr(b'\n', &all[..last]).map_or(0, |nl| nl + 1);
            all.truncate(last + 1);
            all.drain(..start);
            return Ok(Last::Whole(Self {
                file_len,
                start: start as u64,
                line: all,
            }));
        }
        match end {
            Some(end) => Self::line_or_ends(&mut *file, file_len, 0, end, ends),
            None => Err(StoreError::NoTerminalRecord),
        }
    }

    /// The line `start..end`: by its ends when `ends` and it is long.
    fn line_or_ends(
        file: &mut dyn ReadSeek,
        file_len: u64,
        start: u64,
        end: u64,
        ends: bool,
    ) -> Result<Last, StoreError> {
        let len = end - start;
        if !ends || len < ENDS_FROM {
            return Self::line_at(file, file_len, start, end).map(Last::Whole);
        }
        let mut head = vec![0; END_BYTES as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut head)?;
        let mut tail = vec![0; END_BYTES as usize];
        file.seek(SeekFrom::Start(end - END_BYTES))?;
        file.read_exact(&mut tail)?;
        Ok(Last::Ends(LineEnds {
            start,
            len,
            head,
            tail,
        }))
    }

    pub(super) fn line_at(
        file: &mut dyn ReadSeek,
        file_len: u64,
        start: u64,
        end: u64,
    ) -> Result<Self, StoreError> {
        if end - start > MAX_LINE {
            return Err(StoreError::Malformed(format!(
                "the last line is longer than {MAX_LINE} bytes"
            )));
        }
        let mut line = vec![0; (end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut line)?;
        Ok(Self {
            file_len,
            start,
            line,
        })
    }
}
