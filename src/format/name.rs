//! Log file names: `<job_id>.eventlog`, compressed, and still running.
//!
//! The writer names files by these rules and every reader (the store's
//! scans, the uploader, the cleaner) classifies names by [`LogName::parse`]
//! alone, so the two sides cannot disagree on what a log is.

/// Suffix of a log still being written.
pub(crate) const RUNNING_SUFFIX: &str = ".eventlog.running";
/// Suffix of a completed log.
pub(crate) const COMPLETED_SUFFIX: &str = ".eventlog";
/// Suffix of a zstd-compressed log still being written.
pub(crate) const ZST_RUNNING_SUFFIX: &str = ".eventlog.zst.running";
/// Suffix of a completed zstd-compressed log.
pub(crate) const ZST_COMPLETED_SUFFIX: &str = ".eventlog.zst";

/// What a file name in a log directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogName<'a> {
    /// The job id (the name without its suffix).
    pub stem: &'a str,
    /// Still being written (`.running`).
    pub running: bool,
    /// zstd-compressed.
    pub zstd: bool,
}

impl<'a> LogName<'a> {
    /// Classifies a file name; `None` for anything that is not a log.
    pub(crate) fn parse(name: &'a str) -> Option<Self> {
        [
            (ZST_RUNNING_SUFFIX, true, true),
            (RUNNING_SUFFIX, true, false),
            (ZST_COMPLETED_SUFFIX, false, true),
            (COMPLETED_SUFFIX, false, false),
        ]
        .into_iter()
        .find_map(|(suffix, running, zstd)| {
            let stem = name.strip_suffix(suffix)?;
            (!stem.is_empty()).then_some(Self {
                stem,
                running,
                zstd,
            })
        })
    }
}
