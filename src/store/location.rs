//! Where a log lives: a path in a directory, or an object under a prefix,
//! and the stamp (size, modification time) that says whether it changed.

use super::*;

/// A file's size and modification time, to tell whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Stamp {
    pub(crate) len: u64,
    pub(crate) modified: Option<SystemTime>,
}

impl Stamp {
    pub(super) fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// Where one log's bytes are: a local file, or an object in a store.
#[derive(Debug, Clone)]
pub enum LogRef {
    /// A local file.
    File(PathBuf),
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
    /// Opens the log, with its length.
    pub(super) fn open(&self) -> std::io::Result<(Box<dyn ReadSeek>, u64)> {
        match self {
            Self::File(path) => {
                let file = File::open(path)?;
                let len = file.metadata()?.len();
                Ok((Box::new(file), len))
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
            Self::File(path) => path.file_name().and_then(|n| n.to_str()),
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
            Self::File(path) => path.display().to_string(),
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
