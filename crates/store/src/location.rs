//! Where a log lives: a path in a directory, or an object under a prefix,
//! and the stamp (size, modification time) that says whether it changed.
//!
//! **Invariant:** a local log is opened without following a link and
//! without blocking (`O_NOFOLLOW | O_NONBLOCK`), and read only if the
//! descriptor is a regular file, and, for a log the index knows, the
//! same file it indexed (its stamp). A log swapped after it was indexed
//! (for a link to another file, a FIFO, a different file) is never read:
//! the request fails and the next rescan indexes what is there now.

use super::*;
use bjh_files::open_regular;

/// A file's size and modification time, to tell whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    pub len: u64,
    pub(crate) modified: Option<SystemTime>,
}

impl Stamp {
    pub(super) fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }

    /// Whether `other` stamps the same file or object. An object store's
    /// listing states times to the millisecond and its `HEAD` (the
    /// uploader's word, a published summary) to the second, so objects
    /// (`whole_seconds`) compare by whole seconds.
    pub(crate) fn same(self, other: Stamp, whole_seconds: bool) -> bool {
        if !whole_seconds {
            return self == other;
        }
        let secs = |m: Option<SystemTime>| {
            m.and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
        };
        self.len == other.len && secs(self.modified) == secs(other.modified)
    }
}

/// Where one log's bytes are: a local file, or an object in a store.
#[derive(Debug, Clone)]
pub enum LogRef {
    /// A local file.
    File(PathBuf),
    /// A local file as the index knows it: read only while it has this
    /// stamp.
    Indexed {
        /// The file.
        path: PathBuf,
        /// Its size and modification time when it was indexed.
        stamp: Stamp,
    },
    /// An object under a store's prefix, with its length as listed.
    Object {
        /// The store and prefix.
        dir: RemoteDir,
        /// The object's name under the prefix.
        name: Arc<str>,
        /// Its length.
        len: u64,
    },
}

/// A log opened for reading: a file, or an object read with ranged requests.
pub(crate) trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

impl LogRef {
    /// The log's length as it is now (a file's, read from the file system)
    /// or as it was indexed or listed; `None` when a file cannot be read.
    pub fn current_len(&self) -> Option<u64> {
        match self {
            LogRef::File(path) => std::fs::symlink_metadata(path).ok().map(|m| m.len()),
            LogRef::Indexed { path, .. } => std::fs::symlink_metadata(path).ok().map(|m| m.len()),
            LogRef::Object { len, .. } => Some(*len),
        }
    }

    /// What tells this log's bytes from any other's: its path with its
    /// size and modification time as indexed (a file's size as it is now
    /// when it was not indexed: a log still growing), or its object's name
    /// and length. What is computed from a log is kept by it, and a log
    /// replaced or grown has another.
    pub fn identity(&self) -> String {
        match self {
            LogRef::File(path) => format!("{}|{:?}", path.display(), self.current_len()),
            LogRef::Indexed { path, stamp } => {
                let modified = stamp
                    .modified
                    .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos());
                format!("{}|{}|{modified:?}", path.display(), stamp.len)
            }
            LogRef::Object { dir, name, len } => format!("{}/{name}|{len}", dir.url()),
        }
    }

    /// Opens the log, with its length.
    pub(super) fn open(&self) -> std::io::Result<(Box<dyn ReadSeek>, u64)> {
        match self {
            Self::File(path) => {
                let (file, meta) = open_regular(path)?;
                Ok((Box::new(file), meta.len()))
            }
            Self::Indexed { path, stamp } => {
                let (file, meta) = open_regular(path)?;
                if Stamp::of(&meta) != *stamp {
                    return Err(std::io::Error::other(
                        "the log is not the file that was indexed (replaced or changed since); \
                         the next rescan indexes it again",
                    ));
                }
                Ok((Box::new(file), meta.len()))
            }
            Self::Object { dir, name, len } => {
                let object = dir.open(name, *len);
                let len = object.len();
                Ok((Box::new(object), len))
            }
        }
    }

    /// The log's file name.
    pub(crate) fn name(&self) -> Option<&str> {
        match self {
            Self::File(path) | Self::Indexed { path, .. } => {
                path.file_name().and_then(|n| n.to_str())
            }
            Self::Object { name, .. } => Some(name),
        }
    }

    /// Whether the log is zstd-compressed (by its name).
    pub(crate) fn is_zstd(&self) -> bool {
        self.name().and_then(LogName::parse).is_some_and(|n| n.zstd)
    }

    /// The log for messages: its path, or the store's URL and its name.
    pub(super) fn shown(&self) -> String {
        match self {
            Self::File(path) | Self::Indexed { path, .. } => path.display().to_string(),
            Self::Object { dir, name, .. } => format!("{}/{name}", dir.url().trim_end_matches('/')),
        }
    }
}

impl From<&Path> for LogRef {
    fn from(path: &Path) -> Self {
        Self::File(path.to_path_buf())
    }
}

impl From<&PathBuf> for LogRef {
    fn from(path: &PathBuf) -> Self {
        Self::File(path.clone())
    }
}

impl From<PathBuf> for LogRef {
    fn from(path: PathBuf) -> Self {
        Self::File(path)
    }
}

impl From<&LogRef> for LogRef {
    fn from(log: &LogRef) -> Self {
        log.clone()
    }
}
