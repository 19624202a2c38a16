//! Writing a file so that no neighbour can redirect it and no crash can
//! tear it: [`replace`] writes under a fresh name created exclusively
//! beside the target (`tempfile`: `O_CREAT | O_EXCL`, a random name, so a
//! link or file planted at a predictable name is never written through),
//! fsyncs it, renames it over the target (a link at the target is
//! replaced, not followed) and fsyncs the directory. It imports nothing
//! of ours, and every layer may use it.
//!
//! [`rename_new`] renames without replacing: a name another process
//! completed first is never overwritten (`renameat2(RENAME_NOREPLACE)`,
//! or link-then-unlink where the file system lacks it).
//!
//! [`private_dir`] makes a folder of the server's own under a shared
//! directory (the system's temporary one): every level it creates is
//! `0700`, and every level below the shared one must be this user's, a
//! directory (not a link) and closed to others, or it is refused.
//!
//! [`open_regular`] is the one way a file a neighbour could have planted
//! is opened for reading: without following a link or blocking on a FIFO,
//! and only if it is a regular file; [`read_capped`] reads one whole,
//! refusing one larger than its kind may be (a planted 2 GiB "index" is
//! refused by its size, never read into memory). [`create_new`] and
//! [`open_append`] are the writer's two opens of a log (exclusive, never
//! through a link), and [`sync_dir`] makes a rename durable.
//!
//! **Invariant:** nothing else in the crate opens a file: clippy's
//! `disallowed-methods` (`clippy.toml`) refuses the std and Tokio opens
//! and whole-file reads and writes everywhere but here.

#![allow(clippy::disallowed_methods)]

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Replaces `path` with what `write` writes, as the module says; the file
/// gets `mode` (its permission bits). On an error nothing is left behind.
pub fn replace<E: From<io::Error>>(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> Result<(), E>,
) -> Result<(), E> {
    whole(path, mode, write, |tmp, path| {
        tmp.persist(path).map(drop).map_err(|e| e.error)
    })
}

/// Writes `path` whole with what `write` writes, the same durable way as
/// [`replace`], unless a file is there: then `AlreadyExists`, and the file
/// there is untouched (racing writers agree on the first one's content).
pub fn create_whole<E: From<io::Error>>(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> Result<(), E>,
) -> Result<(), E> {
    whole(path, mode, write, |tmp, path| {
        rename_new(tmp.path(), path)?;
        // The temporary's name is gone; nothing is left to delete.
        let _ = tmp.into_temp_path().keep();
        Ok(())
    })
}

/// The one durable whole-file write: a fresh temporary created
/// exclusively beside `path`, written, fsynced, put in place by `put`, and
/// the directory fsynced.
fn whole<E: From<io::Error>>(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> Result<(), E>,
    put: impl FnOnce(tempfile::NamedTempFile, &Path) -> io::Result<()>,
) -> Result<(), E> {
    use std::os::unix::fs::PermissionsExt;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    write(tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    put(tmp, path)?;
    sync_dir(dir)?;
    Ok(())
}

/// Creates `dir` and the levels between `shared` and it (each `0700`),
/// and checks each of them is this user's own directory, closed to
/// others; `Err` says which is not and why.
pub fn private_dir(shared: &Path, dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let below = dir.strip_prefix(shared).map_err(io::Error::other)?;
    let me = rustix::process::geteuid().as_raw();
    let mut at = shared.to_path_buf();
    for part in below.components() {
        at.push(part);
        match std::fs::DirBuilder::new().mode(0o700).create(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = std::fs::symlink_metadata(&at)?;
        let why = if !meta.file_type().is_dir() {
            Some("is not a directory of its own (a link, or a file)".to_string())
        } else if meta.uid() != me {
            Some(format!(
                "belongs to user {}, not to this server's ({me})",
                meta.uid()
            ))
        } else if meta.mode() & 0o077 != 0 {
            Some(format!(
                "is open to others (mode {:o})",
                meta.mode() & 0o777
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} {why}; the server keeps its files only in a folder of its own \
                     (mode 0700): remove it, or name another folder",
                    at.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Renames `from` to `to` unless `to` exists: then `AlreadyExists`, and
/// both files stay as they were.
pub fn rename_new(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::EXIST => Err(io::ErrorKind::AlreadyExists.into()),
        // A file system without the flag: a link fails where the name is
        // taken, as the flag does; then the old name goes.
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        Err(e) => Err(e.into()),
    }
}

/// Eight random letters and digits, for names no one can guess ahead.
pub fn random_tag() -> String {
    let mut bytes = [0u8; 8];
    // Without randomness from the OS, the time and process still make
    // the tag unlike any other this machine makes.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = (nanos ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    bytes
        .iter()
        .map(|b| DIGITS[usize::from(*b) % DIGITS.len()] as char)
        .collect()
}

/// Opens `path` for reading without following a link or blocking, and
/// only if what it names is a regular file.
pub fn open_regular(path: &Path) -> io::Result<(File, std::fs::Metadata)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok((file, meta))
}

/// [`open_regular`], refused (`InvalidData`) when the file is larger than
/// `cap` bytes.
pub fn open_capped(path: &Path, cap: u64) -> io::Result<(File, std::fs::Metadata)> {
    let (file, meta) = open_regular(path)?;
    if meta.len() > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} bytes, more than the {cap} a file of its kind may have",
                meta.len()
            ),
        ));
    }
    Ok((file, meta))
}

/// The whole of `path`, opened as [`open_regular`] does and refused when
/// it is larger than `cap` bytes (also when it grows past `cap` while
/// being read).
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let (file, meta) = open_capped(path, cap)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("grew past the {cap} bytes a file of its kind may have"),
        ));
    }
    Ok(bytes)
}

/// A file the operator named (a token file): a link is followed (a
/// Kubernetes secret is mounted as one), but a FIFO is not waited on and
/// the size is capped, as for [`read_capped`].
pub fn read_named(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    if meta.len() > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} bytes, more than the {cap} it may have", meta.len()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(cap).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_capped`] on the blocking pool, for async code.
pub async fn read_capped_async(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || read_capped(&path, cap))
        .await
        .map_err(io::Error::other)?
}

/// [`open_regular`] on the blocking pool, as a Tokio file.
pub async fn open_regular_async(path: &Path) -> io::Result<(tokio::fs::File, std::fs::Metadata)> {
    let path = path.to_path_buf();
    let (file, meta) = tokio::task::spawn_blocking(move || open_regular(&path))
        .await
        .map_err(io::Error::other)??;
    Ok((tokio::fs::File::from_std(file), meta))
}

/// Creates `path` for writing, failing if any file (or link) has the name.
pub fn create_new(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Opens an existing regular file for appending, never through a link or
/// onto a FIFO.
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Opens (creating when missing) the lock file `path`, never through a
/// link or onto a FIFO.
pub fn open_lock(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Opens the directory `dir` for reading (never through a link): to lock
/// it for this process (`File::try_lock`, a lock that, unlike a lock
/// file opened for writing, does not keep the file system from being
/// remounted read-only).
pub fn open_dir(dir: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
}

/// Makes a rename (or a file created) in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)?
        .sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_planted_beside_the_target_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let target = dir.path().join("index");
        // Links at the target and at every name a fixed scheme would pick.
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("index.tmp")).unwrap();
        replace::<io::Error>(&target, 0o600, |f| {
            use std::io::Write;
            f.write_all(b"new")
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert!(
            !std::fs::symlink_metadata(&target)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // A failed write leaves nothing behind.
        let failed = replace::<io::Error>(&dir.path().join("other"), 0o600, |_| {
            Err(io::Error::other("no"))
        });
        assert!(failed.is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_rename_never_replaces_a_name_taken_first() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        std::fs::write(&a, "mine").unwrap();
        std::fs::write(&b, "theirs").unwrap();
        let e = rename_new(&a, &b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "theirs");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "mine");
        rename_new(&a, &c).unwrap();
        assert!(!a.exists());
        assert_eq!(std::fs::read_to_string(&c).unwrap(), "mine");
        let tags: std::collections::HashSet<String> = (0..100).map(|_| random_tag()).collect();
        assert_eq!(tags.len(), 100);
        assert!(
            tags.iter()
                .all(|t| t.len() == 8 && t.bytes().all(|b| b.is_ascii_alphanumeric()))
        );
    }

    #[test]
    fn a_private_folder_is_made_closed_and_one_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let shared = tempfile::tempdir().unwrap();
        let dir = shared.path().join("spool").join("50050");
        private_dir(shared.path(), &dir).unwrap();
        for level in [shared.path().join("spool"), dir.clone()] {
            let mode = std::fs::metadata(&level).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", level.display());
        }
        // Made again: fine. Opened to others, or a link: refused.
        private_dir(shared.path(), &dir).unwrap();
        std::fs::set_permissions(
            shared.path().join("spool"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let e = private_dir(shared.path(), &dir).unwrap_err();
        assert!(e.to_string().contains("open to others (mode 777)"), "{e}");
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), shared.path().join("linked")).unwrap();
        let e = private_dir(shared.path(), &shared.path().join("linked").join("x")).unwrap_err();
        assert!(e.to_string().contains("not a directory of its own"), "{e}");
        assert!(
            std::fs::read_dir(elsewhere.path())
                .unwrap()
                .next()
                .is_none()
        );
    }

    #[test]
    fn a_fifo_a_link_or_an_oversized_file_is_refused_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from(0o600)).unwrap();
        // No writer ever opens the FIFO: a blocking open would hang here.
        let e = read_capped(&fifo, 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 101]).unwrap();
        let e = read_capped(&big, 100).unwrap_err();
        assert!(e.to_string().contains("101 bytes"), "{e}");
        assert_eq!(read_capped(&big, 101).unwrap().len(), 101);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&big, &link).unwrap();
        assert!(read_capped(&link, 1000).is_err());
        assert!(open_append(&link).is_err());
        assert!(open_append(&fifo).is_err());
        assert!(create_new(&big).is_err());
        assert!(create_new(&link).is_err());
        assert!(open_lock(&fifo).is_err());
        sync_dir(dir.path()).unwrap();
    }
}
