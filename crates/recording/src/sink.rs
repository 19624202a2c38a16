//! The writer's open log file: plain JSON lines, or a zstd frame in
//! progress; and a task line scrubbed of its job's secrets before it is
//! written.

use crate::redact::scrub;
use std::fs::File;
use std::io::{BufWriter, Write};

/// An open log file: plain, or a zstd frame in progress.
pub(super) enum Sink {
    Plain(BufWriter<File>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

impl Sink {
    pub(super) fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(bytes),
            Sink::Zstd(w) => w.write_all(bytes),
        }
    }

    /// Makes everything written so far readable from the file (for zstd,
    /// a complete block of the current frame).
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Zstd(w) => w.flush(),
        }
    }

    /// Ends the current zstd frame (if any) and returns the file.
    pub(super) fn finish(self) -> std::io::Result<BufWriter<File>> {
        let mut file = match self {
            Sink::Plain(w) => w,
            Sink::Zstd(w) => w.finish()?,
        };
        file.flush()?;
        Ok(file)
    }
}

/// A task line with the job's secrets scrubbed (the line itself when there
/// are none, or none occurs).
pub(super) fn scrubbed(line: Vec<u8>, secrets: &[String]) -> Vec<u8> {
    if secrets.is_empty() {
        return line;
    }
    match String::from_utf8(line) {
        Ok(text) => scrub(&text, secrets).into_bytes(),
        Err(e) => e.into_bytes(),
    }
}
