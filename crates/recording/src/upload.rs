//! The upload side of object-store logs: a recording scheduler writes
//! each job's log to a local spool exactly as it does to a local directory
//! (`.running`, fsync, rename to `.eventlog`); the `Uploader` then puts
//! the completed file into the store with one `PUT` (a multipart upload
//! for large logs, completed in one request), so an object appears whole
//! or not at all. A file leaves the spool only after its object exists, so
//! a crash at any point loses nothing: the next start finds the file and
//! uploads it again, or sees that the object already exists with the same
//! bytes and only removes the file. An object of the same name with other
//! bytes is another scheduler's log of the same job id: this one is kept
//! beside it under a second name (`format::name`).
//!
//! **Invariant:** the scheduler never waits on the store. The writer hands
//! the uploader a path over an unbounded channel; uploads, retries and
//! their backoff happen on the uploader's own task.
//!
//! This module knows the store only as a `Bucket` (a client and a
//! prefix); opening one from a URL and reading it belong to the store.

use bjh_format::LogName;
use bjh_format::name::second_name;
use bjh_metrics::HistoryMetrics;
use futures::FutureExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

/// The spool's directory name under the system temp directory, by default.
pub const DEFAULT_SPOOL_DIR: &str = "ballista-job-history-spool";

/// Where completed logs go: a prefix of an object store, and its URL
/// (without credentials) for messages.
#[derive(Clone)]
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    prefix: ObjPath,
    url: String,
}

impl Bucket {
    /// The prefix `prefix` of `store`, shown as `url`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: ObjPath, url: impl Into<String>) -> Self {
        Self {
            store,
            prefix,
            url: url.into(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn location(&self, name: &str) -> ObjPath {
        self.prefix.clone().join(name)
    }

    /// Puts `bytes` as the object `name` in the folder `folder` under the
    /// prefix, replacing what was there (one `PUT`: the object is whole or
    /// absent). For files that only grow, as cluster logs do.
    pub async fn replace(&self, folder: &str, name: &str, bytes: Vec<u8>) -> Result<(), String> {
        let location = self.location(folder).join(name);
        self.store
            .put(&location, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| format!("putting {location} in {}: {e}", self.url))
    }
}

/// Logs up to this size are uploaded with one `PUT`; larger ones with a
/// multipart upload in parts of this size.
pub const SINGLE_PUT_MAX: u64 = 32 * 1024 * 1024;
/// The first retry of a failed upload waits this long, doubling up to
/// [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait after the `failures`th failure in a row of one file's upload
/// (`backon`'s exponential schedule).
pub fn retry_wait(failures: u32) -> Duration {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::new()
        .with_min_delay(FIRST_BACKOFF)
        .with_max_delay(MAX_BACKOFF)
        .without_max_times()
        .build()
        .nth(failures.clamp(1, 64) as usize - 1)
        .unwrap_or(MAX_BACKOFF)
}
/// How long a shutdown waits for uploads still due.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Uploads completed logs from the spool to the store, retrying with
/// backoff, and removes each file once its object exists.
pub struct Uploader {
    bucket: Bucket,
    spool: PathBuf,
    metrics: Arc<HistoryMetrics>,
    /// Files waiting, with their failed attempts and next try.
    pending: BTreeMap<PathBuf, (u32, Instant)>,
    /// Whether the last attempt failed (so an outage is logged once).
    failing: bool,
    /// Told each object name put (or found already there): a recording
    /// scheduler's store lists the job at once, whatever its rescan
    /// interval (`--update-interval-seconds 0` included).
    told: Option<Told>,
}

/// What the uploader tells of each object it put.
pub type Told = Arc<dyn Fn(String) + Send + Sync>;

/// What an upload attempt found.
pub enum Uploaded {
    /// Put now.
    Put,
    /// Already there, the same bytes (an earlier attempt put it, then the
    /// process stopped before removing the file).
    Already,
    /// The file is gone from the spool.
    Gone,
}

impl Uploader {
    /// An uploader of `spool`'s completed logs to `dir`.
    pub fn new(bucket: Bucket, spool: impl Into<PathBuf>, metrics: Arc<HistoryMetrics>) -> Self {
        Self {
            bucket,
            spool: spool.into(),
            metrics,
            pending: BTreeMap::new(),
            failing: false,
            told: None,
        }
    }

    /// Tells `told` the name of each object put.
    pub fn telling(mut self, told: Told) -> Self {
        self.told = Some(told);
        self
    }

    /// Also uploads these unfinished logs: `.running` logs an earlier run
    /// left in the spool when it died mid-job (see [`running_logs`]), so
    /// readers list their jobs as abandoned.
    pub fn with_orphans(mut self, orphans: Vec<PathBuf>) -> Self {
        let now = Instant::now();
        for path in orphans {
            self.pending.insert(path, (0, now));
        }
        self
    }

    /// Completed logs in the spool (left by an earlier run, or by uploads
    /// that failed).
    pub fn scan_spool(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.spool) else {
            return;
        };
        let now = Instant::now();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if LogName::parse(name).is_some_and(|n| !n.running)
                && entry.file_type().is_ok_and(|t| t.is_file())
            {
                self.pending.entry(entry.path()).or_insert((0, now));
            }
        }
    }

    /// Uploads the spool's completed logs, then each log the writer
    /// completes (sent on `completed`), until `stop` resolves; then tries
    /// once more, briefly, for what is still due.
    pub async fn run(
        mut self,
        mut completed: UnboundedReceiver<PathBuf>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        self.scan_spool();
        if !self.pending.is_empty() {
            log::info!(
                "event log: {} logs in the spool {} to upload to {}",
                self.pending.len(),
                self.spool.display(),
                self.bucket.url()
            );
        }
        tokio::pin!(stop);
        loop {
            let next = self.pending.values().map(|(_, at)| *at).min();
            let due = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                path = completed.recv() => match path {
                    Some(path) => {
                        self.pending.entry(path).or_insert((0, Instant::now()));
                    }
                    None => break,
                },
                () = due => self.upload_due().await,
                () = &mut stop => break,
            }
        }
        while let Ok(path) = completed.try_recv() {
            self.pending.entry(path).or_insert((0, Instant::now()));
        }
        if !self.pending.is_empty() {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.upload_due()).await;
        }
        if !self.pending.is_empty() {
            log::warn!(
                "event log: {} completed logs stay in the spool {}; the next start uploads them",
                self.pending.len(),
                self.spool.display()
            );
        }
    }

    /// Tries every upload whose time has come, oldest file name first; an
    /// outage stops the round at its first failure.
    pub async fn upload_due(&mut self) {
        let now = Instant::now();
        let due: Vec<PathBuf> = self
            .pending
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(p, _)| p.clone())
            .collect();
        for path in due {
            match self.upload(&path).await {
                Ok((found, name)) => {
                    self.pending.remove(&path);
                    if let (Some(told), Some(name)) = (&self.told, name) {
                        told(name);
                    }
                    if self.failing {
                        self.failing = false;
                        log::info!("event log: uploads to {} resumed", self.bucket.url());
                    }
                    if !matches!(found, Uploaded::Gone) {
                        self.metrics.uploads.inc();
                    }
                }
                Err(e) => {
                    self.metrics.upload_errors.inc();
                    if !self.failing {
                        self.failing = true;
                        log::warn!(
                            "event log: cannot upload {} to {}: {e}; it stays in the spool and \
                             is retried (further failures are counted, not logged)",
                            path.display(),
                            self.bucket.url()
                        );
                    }
                    let entry = self.pending.entry(path).or_insert((0, now));
                    entry.0 += 1;
                    let backoff = retry_wait(entry.0);
                    entry.1 = Instant::now() + backoff;
                    // The store is down: the other due files wait for the
                    // next round rather than each waiting for a timeout.
                    let later = entry.1;
                    for (_, at) in self.pending.values_mut() {
                        if *at <= now {
                            *at = later;
                        }
                    }
                    return;
                }
            }
        }
    }

    /// Puts one spool file into the store, then removes the file: what
    /// was found, and the object's name (none for a file gone).
    pub async fn upload(&self, path: &Path) -> Result<(Uploaded, Option<String>), String> {
        let len = match tokio::fs::symlink_metadata(path).await {
            Ok(meta) if !meta.file_type().is_file() => {
                return Err("not a regular file (a link or a FIFO planted in the spool)".into());
            }
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Uploaded::Gone, None));
            }
            Err(e) => return Err(format!("reading the spool: {e}")),
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("not a log name")?;
        let (found, put_as) = match self.put_new(path, len, name).await? {
            Some(found) => (found, name.to_string()),
            None => {
                // Another scheduler's job with the same id: keep both. The
                // second name comes from this log's contents, so a retry
                // after a crash finds its own object there.
                let tag = content_tag(path).await?;
                let other = format!("{}{}", second_name(stem_of(name), &tag), suffix_of(name));
                log::warn!(
                    "event log: {} already holds a different {name}; uploading this one as \
                     {other}",
                    self.bucket.url(),
                );
                let found = self
                    .put_new(path, len, &other)
                    .await?
                    .ok_or_else(|| format!("{other} exists too, with other contents"))?;
                (found, other)
            }
        };
        match tokio::fs::remove_file(path).await {
            Ok(()) => Ok((found, Some(put_as))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((found, Some(put_as))),
            Err(e) => Err(format!("removing the uploaded file from the spool: {e}")),
        }
    }

    /// Creates the object `name` from the file unless it exists: `Put`,
    /// `Already` when an object of that name and the same bytes is there
    /// (this log, put by an earlier attempt), `None` when a different one
    /// is (compared byte for byte: a size or an ETag says too little, and
    /// ETags differ between stores and upload kinds). A log up
    /// to [`SINGLE_PUT_MAX`] is one conditional `PUT` (create only); a
    /// larger one, or a store without conditional puts, is looked up first.
    pub async fn put_new(
        &self,
        path: &Path,
        len: u64,
        name: &str,
    ) -> Result<Option<Uploaded>, String> {
        use object_store::{PutMode, PutOptions};
        let store = &self.bucket.store;
        let location = self.bucket.location(name);
        // A small log is read once and sent in one request.
        let whole = if len <= SINGLE_PUT_MAX {
            let bytes = bjh_files::read_capped_async(path, SINGLE_PUT_MAX)
                .await
                .map_err(|e| format!("reading the spool: {e}"))?;
            Some(bytes::Bytes::from(bytes))
        } else {
            None
        };
        if let Some(bytes) = &whole {
            let create = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match store
                .put_opts(&location, PutPayload::from(bytes.clone()), create)
                .await
            {
                Ok(_) => return Ok(Some(Uploaded::Put)),
                Err(object_store::Error::AlreadyExists { .. }) => {
                    let same = self.same_bytes(&location, path, len).await?;
                    return Ok(same.then_some(Uploaded::Already));
                }
                Err(object_store::Error::NotImplemented { .. }) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        match store.head(&location).await {
            Ok(_) => {
                let same = self.same_bytes(&location, path, len).await?;
                return Ok(same.then_some(Uploaded::Already));
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.to_string()),
        }
        match whole {
            Some(bytes) => {
                store
                    .put(&location, PutPayload::from(bytes))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            None => {
                self.put_parts(path, &location).await?;
                self.metrics.uploads_in_parts.inc();
            }
        }
        Ok(Some(Uploaded::Put))
    }

    /// Whether the object at `location` holds exactly the file's `len`
    /// bytes: read side by side, a chunk at a time.
    pub async fn same_bytes(
        &self,
        location: &ObjPath,
        path: &Path,
        len: u64,
    ) -> Result<bool, String> {
        use futures::StreamExt;
        use tokio::io::AsyncReadExt;
        let object = match self.bucket.store.get(location).await {
            Ok(object) => object,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e.to_string()),
        };
        if object.meta.size != len {
            return Ok(false);
        }
        let (mut file, _) = bjh_files::open_regular_async(path)
            .await
            .map_err(|e| format!("reading the spool: {e}"))?;
        let mut stream = object.into_stream();
        let mut mine = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            mine.resize(chunk.len(), 0);
            if file.read_exact(&mut mine).await.is_err() || mine[..] != chunk[..] {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A multipart upload of the file, which only exists once completed
    /// (aborted on failure).
    pub async fn put_parts(&self, path: &Path, location: &ObjPath) -> Result<(), String> {
        let store = &self.bucket.store;
        let upload = store
            .put_multipart(location)
            .await
            .map_err(|e| e.to_string())?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, SINGLE_PUT_MAX as usize);
        let result: Result<(), String> = async {
            use tokio::io::AsyncReadExt;
            let (mut file, _) = bjh_files::open_regular_async(path)
                .await
                .map_err(|e| format!("reading the spool: {e}"))?;
            let mut chunk = vec![0u8; 8 * 1024 * 1024];
            loop {
                writer
                    .wait_for_capacity(2)
                    .await
                    .map_err(|e| e.to_string())?;
                let n = file
                    .read(&mut chunk)
                    .await
                    .map_err(|e| format!("reading the spool: {e}"))?;
                if n == 0 {
                    return Ok(());
                }
                writer.write(&chunk[..n]);
            }
        }
        .await;
        match result {
            Ok(()) => writer.finish().await.map(drop).map_err(|e| e.to_string()),
            Err(e) => {
                let _ = writer.abort().now_or_never();
                Err(e)
            }
        }
    }
}

/// Takes the spool for this process: an exclusive lock on `SPOOL/.lock`,
/// held while the returned file lives (the OS drops it when the process
/// dies). A second scheduler on the same spool would upload the first one's
/// running logs as leftovers, so it is refused.
pub fn lock_spool(spool: &Path) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(spool)
        .map_err(|e| format!("--event-log-spool {}: {e}", spool.display()))?;
    let path = spool.join(".lock");
    let file = bjh_files::open_lock(&path)
        .map_err(|e| format!("--event-log-spool {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "--event-log-spool {} is in use by another scheduler; give each its own",
            spool.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(format!("--event-log-spool {}: {e}", path.display()))
        }
    }
}

/// The `.running` logs in `spool`: call before the writer starts, when
/// every one of them was left by an earlier run.
pub fn running_logs(spool: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(LogName::parse)
                .is_some_and(|n| n.running)
                && e.file_type().is_ok_and(|t| t.is_file())
        })
        .map(|e| e.path())
        .collect()
}

/// A tag made from a file's bytes (the start of their BLAKE3 hash): the
/// same log always gets the same second name.
pub async fn content_tag(path: &Path) -> Result<String, String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut hasher = blake3::Hasher::new();
        hasher.update_reader(bjh_files::open_regular(&path)?.0)?;
        Ok::<_, std::io::Error>(hasher.finalize().to_hex()[..12].to_string())
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("reading the spool: {e}"))
}

pub fn suffix_of(name: &str) -> &str {
    let stem = stem_of(name);
    &name[stem.len()..]
}

pub fn stem_of(name: &str) -> &str {
    LogName::parse(name).map_or(name, |n| n.stem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[test]
    fn an_upload_waits_1_2_4_seconds_up_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|n| retry_wait(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_wait(u32::MAX), MAX_BACKOFF);
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    fn memory_bucket() -> (Arc<object_store::memory::InMemory>, Bucket) {
        let memory = Arc::new(object_store::memory::InMemory::new());
        let bucket = Bucket::new(memory.clone(), ObjPath::from("p"), "memory://p");
        (memory, bucket)
    }

    /// The uploader creates objects and never overwrites: a log already
    /// there with the same bytes was this one (the spool file just goes); a
    /// different one of the same name is another job, and this one is kept
    /// under a second name.
    #[test]
    fn uploads_create_once_and_keep_a_clash() {
        let rt = runtime();
        let (memory, dir) = memory_bucket();
        let spool = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("a.eventlog", "same"),
            ("b.eventlog", "mine"),
            ("c.eventlog", "new"),
            ("e.eventlog", "mine"),
        ] {
            std::fs::write(spool.path().join(name), text).unwrap();
        }
        std::fs::write(spool.path().join("d.eventlog.running"), "left").unwrap();
        rt.block_on(async {
            memory
                .put(&ObjPath::from("p/a.eventlog"), "same".into())
                .await
                .unwrap();
            memory
                .put(&ObjPath::from("p/b.eventlog"), "theirs, longer".into())
                .await
                .unwrap();
            // Regression: the same name and size, other bytes, was taken
            // for this log and the spool copy deleted.
            memory
                .put(&ObjPath::from("p/e.eventlog"), "them".into())
                .await
                .unwrap();
        });
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let orphans = running_logs(spool.path());
        assert_eq!(orphans.len(), 1);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        drop(tx);
        let uploader = Uploader::new(dir, spool.path(), metrics.clone()).with_orphans(orphans);
        rt.block_on(uploader.run(rx, std::future::pending()));
        let objects = rt.block_on(async {
            use futures::TryStreamExt;
            let listed: Vec<_> = memory.list(None).try_collect().await.unwrap();
            let mut objects = Vec::new();
            for meta in listed {
                let bytes = memory
                    .get(&meta.location)
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
                objects.push((
                    meta.location.to_string(),
                    String::from_utf8(bytes.to_vec()).unwrap(),
                ));
            }
            objects.sort();
            objects
        });
        let tag = &blake3::hash(b"mine").to_hex()[..12];
        let mut expected: Vec<(String, String)> = [
            ("p/a.eventlog".to_string(), "same"),
            (format!("p/b!{tag}.eventlog"), "mine"),
            ("p/b.eventlog".to_string(), "theirs, longer"),
            ("p/c.eventlog".to_string(), "new"),
            ("p/d.eventlog.running".to_string(), "left"),
            (format!("p/e!{tag}.eventlog"), "mine"),
            ("p/e.eventlog".to_string(), "them"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        expected.sort();
        assert_eq!(objects, expected);
        assert_eq!(
            std::fs::read_dir(spool.path()).unwrap().count(),
            0,
            "spool emptied"
        );
        assert_eq!(metrics.uploads.get(), 5);
        assert_eq!(
            metrics.uploads_in_parts.get(),
            0,
            "small logs go in one PUT"
        );
        assert_eq!(metrics.upload_errors.get(), 0);
    }

    /// A log larger than one `PUT` goes up as a multipart upload, whole.
    #[test]
    fn a_large_log_is_uploaded_in_parts() {
        let rt = runtime();
        let (memory, dir) = memory_bucket();
        let spool = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..SINGLE_PUT_MAX + 5_000_000)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        std::fs::write(spool.path().join("big.eventlog"), &big).unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        drop(tx);
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let uploader = Uploader::new(dir, spool.path(), metrics.clone());
        rt.block_on(uploader.run(rx, std::future::pending()));
        let stored = rt.block_on(async {
            let got = memory.get(&ObjPath::from("p/big.eventlog")).await.unwrap();
            got.bytes().await.unwrap()
        });
        assert!(stored == big, "the object holds the whole log");
        assert_eq!(metrics.uploads.get(), 1);
        assert_eq!(metrics.uploads_in_parts.get(), 1, "sent in parts");
        assert!(!spool.path().join("big.eventlog").exists());
    }

    #[test]
    fn a_spool_has_one_owner_at_a_time() {
        let spool = tempfile::tempdir().unwrap();
        let held = lock_spool(spool.path()).unwrap();
        let err = lock_spool(spool.path()).unwrap_err();
        assert!(err.contains("in use by another scheduler"), "{err}");
        drop(held);
        lock_spool(spool.path()).unwrap();
    }

    #[test]
    fn a_conflicting_name_keeps_its_suffix() {
        assert_eq!(stem_of("abc.eventlog.zst"), "abc");
        assert_eq!(suffix_of("abc.eventlog.zst"), ".eventlog.zst");
        assert_eq!(suffix_of("abc.eventlog"), ".eventlog");
    }
}
