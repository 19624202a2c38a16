//! The scheduler id every log records, so that one history of several
//! clusters tells their jobs apart.
//!
//! It is `--scheduler-id` when given (or upstream's `--id`); otherwise it
//! is kept in [`FILE_NAME`] in the event-log directory (the spool, for an
//! object store), made once as this machine's name and a random tag, so a
//! scheduler keeps its id across restarts rather than taking upstream's
//! fresh UUID each start. Two schedulers that share one local directory
//! share that file too: give each its own `--scheduler-id`.
//!
//! The file is made the way `bjh_files` makes files (an exclusive
//! temporary, fsync, then a rename that never replaces), so two schedulers
//! starting at once agree on one id, and read the way planted files are
//! (`bjh_files::open_regular`: a link is not followed, a FIFO does not
//! block). A file that cannot be read, is not a regular file, or holds no
//! valid id (a swapped or damaged file), is left alone: the scheduler
//! runs under a fresh id for this start and says so. Nothing here can stop
//! it from starting.

use std::path::Path;

/// The file that keeps the id, in the event-log directory or spool.
pub const FILE_NAME: &str = ".ballista-scheduler-id";

/// The longest id taken.
pub const MAX_LEN: usize = 128;

/// Why `id` is not a scheduler id, if it is not: 1 to [`MAX_LEN`]
/// letters, digits and `. _ - : @` (an id is a label of metrics, a
/// column of tables and a filter of the list).
pub fn invalid(id: &str) -> Option<String> {
    if id.is_empty() || id.len() > MAX_LEN {
        return Some(format!(
            "a scheduler id has 1 to {MAX_LEN} characters, not {}",
            id.len()
        ));
    }
    id.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-:@".contains(*c)))
        .map(|c| {
            format!("a scheduler id has letters, digits and . _ - : @ only, not {c:?} (in {id:?})")
        })
}

/// A new id: this machine's name (its letters, digits, `-` and `.`) and
/// a random tag.
pub fn fresh() -> String {
    let name = rustix::system::uname();
    let host: String = name
        .nodename()
        .to_string_lossy()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(64)
        .collect();
    let tag = bjh_files::random_tag();
    if host.is_empty() {
        format!("scheduler-{tag}")
    } else {
        format!("{host}-{tag}")
    }
}

/// The id a recording scheduler runs under: `given` when valid (an
/// invalid one is an error naming why), else the one kept in `dir`.
pub fn resolve(given: Option<&str>, dir: &Path) -> Result<String, String> {
    match given {
        Some(id) => match invalid(id) {
            Some(why) => Err(format!("--scheduler-id: {why}")),
            None => Ok(id.to_string()),
        },
        None => Ok(stable(dir)),
    }
}

/// The id kept in `dir` (made there when there is none).
pub fn stable(dir: &Path) -> String {
    let path = dir.join(FILE_NAME);
    match read(&path) {
        Ok(Some(id)) => return id,
        Ok(None) => {}
        Err(why) => {
            let id = fresh();
            log::warn!(
                "scheduler id: {} {why}; this start runs as {id} (give --scheduler-id to keep one)",
                path.display()
            );
            return id;
        }
    }
    let id = fresh();
    match keep(dir, &path, &id) {
        Ok(()) => id,
        // Another scheduler made it first: its id is the directory's.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read(&path) {
            Ok(Some(theirs)) => theirs,
            _ => id,
        },
        Err(e) => {
            log::warn!(
                "scheduler id: cannot keep it in {}: {e}; this start runs as {id} \
                 (give --scheduler-id to keep one)",
                path.display()
            );
            id
        }
    }
}

/// The id in `path`; `Ok(None)` when there is no file.
fn read(path: &Path) -> Result<Option<String>, String> {
    let bytes = match bjh_files::read_capped(path, MAX_LEN as u64 + 2) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read ({e})")),
    };
    let text = String::from_utf8_lossy(&bytes);
    let id = text.trim();
    match invalid(id) {
        None => Ok(Some(id.to_string())),
        Some(why) => Err(format!("holds no scheduler id: {why}")),
    }
}

/// Writes `id` to `path` unless a file is there.
fn keep(dir: &Path, path: &Path, id: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    bjh_files::create_whole(path, 0o644, |file| writeln!(file, "{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt as _;

    #[test]
    fn an_id_is_kept_across_starts_and_shared_by_racers() {
        let dir = tempfile::tempdir().unwrap();
        let first = stable(dir.path());
        assert!(invalid(&first).is_none(), "{first}");
        assert_eq!(stable(dir.path()), first);
        let on_disk = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(on_disk.trim(), first);
        // Only the id file is left: no temporary.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME]);
    }

    #[test]
    fn a_damaged_file_is_left_alone_and_a_fresh_id_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, "<script>alert(1)</script>\n").unwrap();
        let id = stable(dir.path());
        assert!(invalid(&id).is_none(), "{id}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "<script>alert(1)</script>\n"
        );
        std::fs::write(&path, "x".repeat(10_000)).unwrap();
        assert!(invalid(&stable(dir.path())).is_none());
    }

    /// `stable(dir)` on another thread, given up after a minute (a start
    /// that hangs on a planted file fails the test instead of hanging it).
    fn stable_within_a_minute(dir: &Path) -> String {
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || tx.send(stable(&dir)));
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the scheduler id was not settled: the start would hang")
    }

    #[test]
    fn a_planted_fifo_does_not_hold_up_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        rustix::fs::mkfifoat(rustix::fs::CWD, &path, rustix::fs::Mode::from(0o600)).unwrap();
        let id = stable_within_a_minute(dir.path());
        assert!(invalid(&id).is_none(), "{id}");
        // Left alone: still the FIFO.
        assert!(
            std::fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_fifo()
        );
    }

    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        // A file elsewhere whose text would pass as an id (a token, say).
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cr3t-t0ken\n").unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::os::unix::fs::symlink(&secret, logs.join(FILE_NAME)).unwrap();
        let id = stable_within_a_minute(&logs);
        assert!(invalid(&id).is_none(), "{id}");
        assert_ne!(id, "s3cr3t-t0ken", "the link was followed");
        assert!(
            std::fs::symlink_metadata(logs.join(FILE_NAME))
                .unwrap()
                .is_symlink()
        );
    }

    #[test]
    fn ids_are_refused_by_length_and_characters() {
        assert!(invalid("sched-eu-1").is_none());
        assert!(invalid("3f1c0e8a-7a9d-4b8e-9d2b-1a2b3c4d5e6f").is_none());
        assert!(invalid("").is_some());
        assert!(invalid(&"a".repeat(MAX_LEN + 1)).is_some());
        for bad in ["a b", "a\"b", "a<b", "a\nb", "a/b", "é"] {
            assert!(invalid(bad).is_some(), "{bad:?}");
        }
    }
}
