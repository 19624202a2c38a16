//! Log file names: `<job_id>.eventlog`, compressed, and still running.
//!
//! The writer names files by these rules and every reader (the store's
//! scans, the uploader, the cleaner) classifies names by [`LogName::parse`]
//! alone, so the two sides cannot disagree on what a log is.
//!
//! **Two logs of one id.** Two schedulers on one directory or prefix can
//! mint the same job id (upstream's default ids are a millisecond clock
//! and a counter, with no machine part). Neither log overwrites the other:
//! the one that finds the name taken is written as `<job_id>!<tag>`
//! ([`second_name`]), a stem that still names its job ([`LogName::names`])
//! and is listed under its own stem, so both jobs stay visible.

/// Suffix of a log still being written.
pub const RUNNING_SUFFIX: &str = ".eventlog.running";
/// Suffix of a completed log.
pub const COMPLETED_SUFFIX: &str = ".eventlog";
/// Suffix of a zstd-compressed log still being written.
pub const ZST_RUNNING_SUFFIX: &str = ".eventlog.zst.running";
/// Suffix of a completed zstd-compressed log.
pub const ZST_COMPLETED_SUFFIX: &str = ".eventlog.zst";

/// What a file name in a log directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogName<'a> {
    /// The job id (the name without its suffix).
    pub stem: &'a str,
    /// Still being written (`.running`).
    pub running: bool,
    /// zstd-compressed.
    pub zstd: bool,
}

impl<'a> LogName<'a> {
    /// Classifies a file name; `None` for anything that is not a log.
    pub fn parse(name: &'a str) -> Option<Self> {
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

/// What separates a job id from the tag of a second log of that id.
pub const SECOND_MARK: char = '!';

impl LogName<'_> {
    /// Whether this file may hold the records of job `id`: its stem is the
    /// id, or the id followed by a second log's tag.
    pub fn names(&self, id: &str) -> bool {
        self.stem == id || second_of(self.stem) == Some(id)
    }
}

/// The stem of another log of job `id`, told apart by `tag` (ASCII letters
/// and digits).
pub fn second_name(id: &str, tag: &str) -> String {
    debug_assert!(!tag.is_empty() && tag.bytes().all(|b| b.is_ascii_alphanumeric()));
    format!("{id}{SECOND_MARK}{tag}")
}

/// The job id of a second log's stem `<id>!<tag>`.
pub fn second_of(stem: &str) -> Option<&str> {
    let (id, tag) = stem.rsplit_once(SECOND_MARK)?;
    let ok = !id.is_empty() && !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_log_names_its_job_and_nothing_else() {
        let second = format!("{}.eventlog", second_name("038HEXYE9M000", "1f3a"));
        assert_eq!(second, "038HEXYE9M000!1f3a.eventlog");
        let name = LogName::parse(&second).unwrap();
        assert!(name.names("038HEXYE9M000"));
        assert!(name.names("038HEXYE9M000!1f3a"));
        assert!(!name.names("038HEXYE9M00"));
        for other in ["a!.eventlog", "!x.eventlog", "a!b-c.eventlog", "a.eventlog"] {
            let name = LogName::parse(other).unwrap();
            assert!(!name.names("x") && !name.names(""), "{other}");
        }
        assert!(LogName::parse("a!b-c.eventlog").unwrap().names("a!b-c"));
    }
}
