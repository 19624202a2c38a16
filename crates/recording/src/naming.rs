//! Names for a job's log that no other log has. Two schedulers on one
//! directory can mint the same job id (see `format::name`): the writer
//! never truncates, appends to or renames over a log it did not create.
//! A new `.running` log is created exclusively and never through a link;
//! a completed one takes its name only where no file has it
//! (`files::rename_new`). A log that finds its name taken is written as a
//! second name of its job, `<job_id>!<tag>` with a random tag.

use bjh_format::name::{COMPLETED_SUFFIX, ZST_COMPLETED_SUFFIX, second_name};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Names tried before giving up (each after the first is random).
const TRIES: usize = 8;

/// Creates job `job_id`'s `.running` log (`running` is its suffix) in
/// `dir`: its stem and the file. The job id when neither a running nor a
/// completed log has it, else a second name.
pub(super) fn create_running(
    dir: &Path,
    job_id: &str,
    running: &str,
) -> io::Result<(String, File)> {
    let mut stem = job_id.to_string();
    for _ in 0..TRIES {
        let taken = [COMPLETED_SUFFIX, ZST_COMPLETED_SUFFIX]
            .iter()
            .any(|suffix| std::fs::symlink_metadata(dir.join(format!("{stem}{suffix}"))).is_ok());
        if !taken {
            match bjh_files::create_new(&dir.join(format!("{stem}{running}"))) {
                Ok(file) => return Ok((stem, file)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        stem = second_name(job_id, &bjh_files::random_tag());
    }
    Err(io::Error::other(format!(
        "every name tried for the log of {job_id} is taken"
    )))
}

/// Renames the running log `from` of job `job_id`, named `stem`, to its
/// completed name (`completed` is the suffix) in `dir`, or to a second
/// name where a file has that name: the stem used and the new path. The
/// caller fsyncs the directory.
pub(super) fn complete(
    dir: &Path,
    from: &Path,
    job_id: &str,
    stem: &str,
    completed: &str,
) -> io::Result<(String, PathBuf)> {
    let mut stem = stem.to_string();
    for _ in 0..TRIES {
        let to = dir.join(format!("{stem}{completed}"));
        match bjh_files::rename_new(from, &to) {
            Ok(()) => return Ok((stem, to)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                stem = second_name(job_id, &bjh_files::random_tag());
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "every completed name tried for the log of {job_id} is taken"
    )))
}
