//! Writing a file so that no neighbour can redirect it and no crash can
//! tear it: [`replace`] writes under a fresh name created exclusively
//! beside the target (`tempfile`: `O_CREAT | O_EXCL`, a random name, so a
//! link or file planted at a predictable name is never written through),
//! fsyncs it, renames it over the target (a link at the target is
//! replaced, not followed) and fsyncs the directory. It imports nothing
//! of ours, and every layer may use it.

use std::fs::File;
use std::io;
use std::path::Path;

/// Replaces `path` with what `write` writes, as the module says; the file
/// gets `mode` (its permission bits). On an error nothing is left behind.
pub(crate) fn replace<E: From<io::Error>>(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> Result<(), E>,
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
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()?;
    Ok(())
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
}
