//! Event logs in an object store (`s3://`, `gs://`, `az://`): opening the
//! store from a URL, listing and reading logs with ranged requests, and
//! uploading finished logs from a local spool directory.
//!
//! A recording scheduler writes each job's log to the spool exactly as it
//! does to a local directory (`.running`, fsync, rename to `.eventlog`);
//! the [`Uploader`] then puts the completed file into the store with one
//! `PUT` (a multipart upload for large logs, completed in one request), so
//! an object appears whole or not at all. A file leaves the spool only
//! after its object exists, so a crash at any point loses nothing: the
//! next start finds the file and uploads it again, or sees that the object
//! already exists with the same size and only removes the file.
//!
//! **Invariant:** the scheduler never waits on the store. The writer hands
//! the uploader a path over an unbounded channel; uploads, retries and
//! their backoff happen on the uploader's own task.
//!
//! The store's blocking helpers (listing, and the ranged-read file) run
//! the async client on the runtime the store was opened on; they are called
//! from the blocking pool, as every other read of a log is.

use crate::metrics::HistoryMetrics;
use crate::store::Stamp;
use crate::writer::LogName;
use futures::FutureExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

/// The spool's directory name under the system temp directory, by default.
pub const DEFAULT_SPOOL_DIR: &str = "ballista-job-history-spool";

/// How to reach an object store, beyond what its URL and the usual
/// environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`) say.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// A custom endpoint (an S3-compatible server, an Azure emulator, a GCS
    /// base URL).
    pub endpoint: Option<String>,
    /// The S3 region.
    pub region: Option<String>,
    /// Allow plain `http://` endpoints.
    pub allow_http: bool,
    /// How long one request may take before it fails (and is retried later
    /// by whoever made it).
    pub timeout: Duration,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: None,
            allow_http: false,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Where event logs live: a local directory, or a prefix in an object
/// store.
#[derive(Debug, Clone)]
pub enum EventLogDir {
    /// A local directory (a plain path, or a `file://` URL).
    Local(PathBuf),
    /// A prefix in an object store.
    Remote(RemoteDir),
}

impl EventLogDir {
    /// Reads `--event-log-dir`: a path, or a `file://`, `s3://`, `gs://` or
    /// `az://` URL. The error names the URL without credentials and never
    /// quotes a secret.
    pub fn parse(dir: &str, options: &RemoteOptions) -> Result<Self, String> {
        let Some((scheme, _)) = dir.split_once("://") else {
            return Ok(Self::Local(PathBuf::from(dir)));
        };
        if scheme.contains(['/', '\\']) {
            return Ok(Self::Local(PathBuf::from(dir)));
        }
        let url = url::Url::parse(dir)
            .map_err(|e| format!("--event-log-dir {}: {e}", redacted_url_str(dir)))?;
        if url.scheme() == "file" {
            return url
                .to_file_path()
                .map(Self::Local)
                .map_err(|()| format!("--event-log-dir {}: not a local path", redacted(&url)));
        }
        RemoteDir::connect(&url, options).map(Self::Remote)
    }
}

/// A URL for messages: no user, password or query (where a signature could
/// hide).
fn redacted(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

fn redacted_url_str(dir: &str) -> String {
    match url::Url::parse(dir) {
        Ok(url) => redacted(&url),
        Err(_) => match dir.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://..."),
            None => "...".into(),
        },
    }
}

/// A prefix in an object store, with the runtime its client runs on.
#[derive(Clone)]
pub struct RemoteDir {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    prefix: ObjPath,
    url: String,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for RemoteDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RemoteDir").field(&self.inner.url).finish()
    }
}

/// One listed object: its file name under the prefix, and its stamp.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) name: String,
    pub(crate) stamp: Stamp,
}

impl RemoteDir {
    /// Opens the store a URL names (credentials from the environment), on
    /// the current Tokio runtime. Nothing is requested yet: a store that is
    /// unreachable at startup is retried by whoever uses it.
    pub fn connect(url: &url::Url, options: &RemoteOptions) -> Result<Self, String> {
        use object_store::aws::AmazonS3Builder;
        use object_store::azure::MicrosoftAzureBuilder;
        use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
        use object_store::{ClientOptions, RetryConfig};
        let shown = redacted(url);
        if !matches!(
            url.scheme(),
            "s3" | "s3a" | "gs" | "az" | "azure" | "abfs" | "abfss"
        ) {
            return Err(format!(
                "{shown}: unsupported scheme {}:// (use a path, file://, s3://, gs:// or az://)",
                url.scheme()
            ));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| format!("{shown}: an object store needs a Tokio runtime"))?;
        let client = ClientOptions::new()
            .with_allow_http(options.allow_http)
            .with_timeout(options.timeout)
            .with_connect_timeout(options.timeout.min(Duration::from_secs(5)));
        // A few quick retries inside one call; longer outages are retried
        // by the callers (the next rescan, the uploader's backoff).
        let retry = RetryConfig {
            max_retries: 2,
            retry_timeout: options.timeout,
            ..RetryConfig::default()
        };
        let fail = |e: object_store::Error| format!("{shown}: {e}");
        let store: Arc<dyn ObjectStore> = match url.scheme() {
            "s3" | "s3a" => {
                let mut b = AmazonS3Builder::from_env()
                    .with_url(url.as_str())
                    .with_client_options(client)
                    .with_retry(retry);
                if let Some(endpoint) = &options.endpoint {
                    b = b.with_endpoint(endpoint);
                }
                if let Some(region) = &options.region {
                    b = b.with_region(region);
                }
                Arc::new(b.build().map_err(fail)?)
            }
            "gs" => {
                let mut b = GoogleCloudStorageBuilder::from_env()
                    .with_url(url.as_str())
                    .with_client_options(client)
                    .with_retry(retry);
                if let Some(endpoint) = &options.endpoint {
                    b = b.with_config(GoogleConfigKey::BaseUrl, endpoint);
                }
                Arc::new(b.build().map_err(fail)?)
            }
            "az" | "azure" | "abfs" | "abfss" => {
                let mut b = MicrosoftAzureBuilder::from_env()
                    .with_url(url.as_str())
                    .with_client_options(client)
                    .with_retry(retry)
                    .with_allow_http(options.allow_http);
                if let Some(endpoint) = &options.endpoint {
                    b = b.with_endpoint(endpoint.clone());
                }
                Arc::new(b.build().map_err(fail)?)
            }
            other => unreachable!("checked above: {other}"),
        };
        let prefix = ObjPath::from_url_path(url.path()).map_err(|e| format!("{shown}: {e}"))?;
        Ok(Self::new(store, prefix, shown, runtime))
    }

    /// A prefix of an already built store (for embedders and tests).
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: ObjPath,
        url: impl Into<String>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                prefix,
                url: url.into(),
                runtime,
            }),
        }
    }

    /// The URL, without credentials.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    fn location(&self, name: &str) -> ObjPath {
        self.inner.prefix.clone().join(name)
    }

    /// Runs a request to completion. Called from blocking threads only.
    fn block<T>(&self, request: impl std::future::Future<Output = T>) -> T {
        self.inner.runtime.block_on(request)
    }

    /// The objects directly under the prefix whose names are logs
    /// (completed or running), with their sizes and modification times.
    /// One `LIST` request per 1,000 objects; nothing is read.
    pub(crate) fn list(&self) -> Result<Vec<Listed>, object_store::Error> {
        let prefix = &self.inner.prefix;
        let prefix = (!prefix.as_ref().is_empty()).then_some(prefix);
        let listed = self.block(self.inner.store.list_with_delimiter(prefix))?;
        Ok(listed
            .objects
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.filename()?;
                LogName::parse(name)?;
                Some(Listed {
                    name: name.to_string(),
                    stamp: Stamp {
                        len: meta.size,
                        modified: Some(SystemTime::from(meta.last_modified)),
                    },
                })
            })
            .collect())
    }

    /// A reader of the object `name`, of length `len` (as listed).
    pub(crate) fn open(&self, name: &str, len: u64) -> RemoteFile {
        RemoteFile {
            dir: self.clone(),
            location: self.location(name),
            len,
            pos: 0,
            buf: bytes::Bytes::new(),
            buf_start: 0,
            window: 0,
        }
    }

    /// Deletes the object `name`; one already gone is `NotFound`.
    pub(crate) fn delete(&self, name: &str) -> std::io::Result<()> {
        let location = self.location(name);
        match self.block(self.inner.store.delete(&location)) {
            Ok(()) => Ok(()),
            Err(e @ object_store::Error::NotFound { .. }) => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                e.to_string(),
            )),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }
}

/// The smallest ranged read.
const MIN_READ: u64 = 4 * 1024;
/// Sequential reads start at this window and double up to [`MAX_WINDOW`].
const FIRST_WINDOW: u64 = 256 * 1024;
const MAX_WINDOW: u64 = 8 * 1024 * 1024;

/// An object read with ranged `GET`s, as a file: a seek costs nothing, a
/// read fetches what it asks for (at least [`MIN_READ`]), and sequential
/// reads fetch ahead in growing windows. Blocking: for the blocking pool.
pub(crate) struct RemoteFile {
    dir: RemoteDir,
    location: ObjPath,
    len: u64,
    pos: u64,
    buf: bytes::Bytes,
    buf_start: u64,
    window: u64,
}

impl RemoteFile {
    /// The object's length, as listed.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

impl Read for RemoteFile {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.len || out.is_empty() {
            return Ok(0);
        }
        let buf_end = self.buf_start + self.buf.len() as u64;
        if !(self.buf_start..buf_end).contains(&self.pos) {
            let sequential = !self.buf.is_empty() && self.pos == buf_end;
            self.window = if sequential {
                (self.window * 2).clamp(FIRST_WINDOW, MAX_WINDOW)
            } else {
                0
            };
            let want = (out.len() as u64).max(MIN_READ).max(self.window);
            let end = self.len.min(self.pos.saturating_add(want));
            let range = self.pos..end;
            let store = self.dir.inner.store.clone();
            let location = self.location.clone();
            let bytes = self
                .dir
                .block(async move { store.get_range(&location, range).await })
                .map_err(|e| match e {
                    object_store::Error::NotFound { .. } => {
                        std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
                    }
                    e => std::io::Error::other(e.to_string()),
                })?;
            if bytes.is_empty() {
                return Ok(0);
            }
            self.buf = bytes;
            self.buf_start = self.pos;
        }
        let at = (self.pos - self.buf_start) as usize;
        let n = out.len().min(self.buf.len() - at);
        out[..n].copy_from_slice(&self.buf[at..at + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RemoteFile {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start")
        })?;
        Ok(self.pos)
    }
}

/// Logs up to this size are uploaded with one `PUT`; larger ones with a
/// multipart upload in parts of this size.
const SINGLE_PUT_MAX: u64 = 32 * 1024 * 1024;
/// The first retry of a failed upload waits this long, doubling up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a shutdown waits for uploads still due.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Uploads completed logs from the spool to the store, retrying with
/// backoff, and removes each file once its object exists.
pub struct Uploader {
    dir: RemoteDir,
    spool: PathBuf,
    metrics: Arc<HistoryMetrics>,
    /// Files waiting, with their failed attempts and next try.
    pending: BTreeMap<PathBuf, (u32, Instant)>,
    /// Whether the last attempt failed (so an outage is logged once).
    failing: bool,
}

/// What an upload attempt found.
enum Uploaded {
    /// Put now.
    Put,
    /// Already there, same size (an earlier attempt put it, then the
    /// process stopped before removing the file).
    Already,
    /// The file is gone from the spool.
    Gone,
}

impl Uploader {
    /// An uploader of `spool`'s completed logs to `dir`.
    pub fn new(dir: RemoteDir, spool: impl Into<PathBuf>, metrics: Arc<HistoryMetrics>) -> Self {
        Self {
            dir,
            spool: spool.into(),
            metrics,
            pending: BTreeMap::new(),
            failing: false,
        }
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
    fn scan_spool(&mut self) {
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
                self.dir.url()
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
    async fn upload_due(&mut self) {
        let now = Instant::now();
        let due: Vec<PathBuf> = self
            .pending
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(p, _)| p.clone())
            .collect();
        for path in due {
            match self.upload(&path).await {
                Ok(found) => {
                    self.pending.remove(&path);
                    if self.failing {
                        self.failing = false;
                        log::info!("event log: uploads to {} resumed", self.dir.url());
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
                            self.dir.url()
                        );
                    }
                    let entry = self.pending.entry(path).or_insert((0, now));
                    entry.0 += 1;
                    let backoff = FIRST_BACKOFF
                        .saturating_mul(1 << entry.0.min(16).saturating_sub(1))
                        .min(MAX_BACKOFF);
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

    /// Puts one spool file into the store, then removes the file.
    async fn upload(&self, path: &Path) -> Result<Uploaded, String> {
        let len = match tokio::fs::metadata(path).await {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Uploaded::Gone),
            Err(e) => return Err(format!("reading the spool: {e}")),
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("not a log name")?;
        let found = match self.put_new(path, len, name).await? {
            Some(found) => found,
            None => {
                // Another scheduler's job with the same id: keep both.
                let other = format!("{}-{len:x}{}", stem_of(name), suffix_of(name));
                log::warn!(
                    "event log: {} already holds a different {name}; uploading this one as \
                     {other}",
                    self.dir.url(),
                );
                self.put_new(path, len, &other)
                    .await?
                    .ok_or_else(|| format!("{other} exists too, with other contents"))?
            }
        };
        match tokio::fs::remove_file(path).await {
            Ok(()) => Ok(found),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(found),
            Err(e) => Err(format!("removing the uploaded file from the spool: {e}")),
        }
    }

    /// Creates the object `name` from the file unless it exists: `Put`,
    /// `Already` when an object of that name and size is there (this log,
    /// put by an earlier attempt), `None` when a different one is. A log up
    /// to [`SINGLE_PUT_MAX`] is one conditional `PUT` (create only); a
    /// larger one, or a store without conditional puts, is looked up first.
    async fn put_new(&self, path: &Path, len: u64, name: &str) -> Result<Option<Uploaded>, String> {
        use object_store::{PutMode, PutOptions};
        let store = &self.dir.inner.store;
        let location = self.dir.location(name);
        let same = |size: u64| (size == len).then_some(Uploaded::Already);
        // A small log is read once and sent in one request.
        let whole = if len <= SINGLE_PUT_MAX {
            let bytes = tokio::fs::read(path)
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
                    let meta = store.head(&location).await.map_err(|e| e.to_string())?;
                    return Ok(same(meta.size));
                }
                Err(object_store::Error::NotImplemented { .. }) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        match store.head(&location).await {
            Ok(meta) => return Ok(same(meta.size)),
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
            None => self.put_parts(path, &location).await?,
        }
        Ok(Some(Uploaded::Put))
    }

    /// A multipart upload of the file, which only exists once completed
    /// (aborted on failure).
    async fn put_parts(&self, path: &Path, location: &ObjPath) -> Result<(), String> {
        let store = &self.dir.inner.store;
        let upload = store
            .put_multipart(location)
            .await
            .map_err(|e| e.to_string())?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, SINGLE_PUT_MAX as usize);
        let result: Result<(), String> = async {
            use tokio::io::AsyncReadExt;
            let mut file = tokio::fs::File::open(path)
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
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
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

fn suffix_of(name: &str) -> &str {
    let stem = stem_of(name);
    &name[stem.len()..]
}

fn stem_of(name: &str) -> &str {
    LogName::parse(name).map_or(name, |n| n.stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_parse_from_paths_and_urls() {
        let o = RemoteOptions::default();
        assert!(matches!(
            EventLogDir::parse("./logs", &o),
            Ok(EventLogDir::Local(p)) if p == Path::new("./logs")
        ));
        assert!(matches!(
            EventLogDir::parse("file:///var/log/jobs", &o),
            Ok(EventLogDir::Local(p)) if p == Path::new("/var/log/jobs")
        ));
        let err = EventLogDir::parse("ftp://user:hunter2@host/x?sig=s3cret", &o).unwrap_err();
        assert!(err.contains("unsupported scheme ftp://"), "{err}");
        assert!(!err.contains("hunter2") && !err.contains("s3cret"), "{err}");
    }

    #[tokio::test]
    async fn an_s3_url_opens_without_a_request() {
        let o = RemoteOptions {
            endpoint: Some("http://127.0.0.1:1".into()),
            region: Some("us-east-1".into()),
            allow_http: true,
            timeout: Duration::from_secs(1),
        };
        let Ok(EventLogDir::Remote(dir)) = EventLogDir::parse("s3://bucket/a/b", &o) else {
            panic!("an s3 URL is remote");
        };
        assert_eq!(dir.url(), "s3://bucket/a/b");
        assert_eq!(dir.location("j.eventlog").as_ref(), "a/b/j.eventlog");
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    fn memory_dir(
        rt: &tokio::runtime::Runtime,
    ) -> (Arc<object_store::memory::InMemory>, RemoteDir) {
        let memory = Arc::new(object_store::memory::InMemory::new());
        let dir = RemoteDir::new(
            memory.clone(),
            ObjPath::from("p"),
            "memory://p",
            rt.handle().clone(),
        );
        (memory, dir)
    }

    /// Every kept fuzzing input and upstream fixture, under each log name,
    /// indexed and read from an object store gives what the same file gives
    /// from a directory: the same list entries, payloads, terminal records
    /// and timelines (the reads go through ranged requests).
    #[test]
    fn objects_read_exactly_like_files() {
        use crate::query::ListQuery;
        use crate::record::payload;
        use crate::store::LogStore;
        use crate::timeline::{JobHeader, TimelineParams, read_timeline};
        let rt = runtime();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let mut inputs: Vec<PathBuf> = ["fuzz-inputs", "fixtures/upstream"]
            .iter()
            .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_none_or(|e| e != "md"))
            .collect();
        inputs.sort();
        assert!(inputs.len() > 40);
        let query = ListQuery::parse(&[("include_unfinished".into(), "true".into())]).unwrap();
        let mut compared = 0;
        for input in &inputs {
            let data = std::fs::read(input).unwrap();
            for name in ["x.eventlog", "x.eventlog.zst", "x.eventlog.running"] {
                let local_dir = tempfile::tempdir().unwrap();
                std::fs::write(local_dir.path().join(name), &data).unwrap();
                let (memory, dir) = memory_dir(&rt);
                let location = ObjPath::from(format!("p/{name}"));
                rt.block_on(memory.put(&location, data.clone().into()))
                    .unwrap();
                // The same modification time (unfinished jobs show it).
                let put_at = rt.block_on(memory.head(&location)).unwrap().last_modified;
                std::fs::File::options()
                    .write(true)
                    .open(local_dir.path().join(name))
                    .unwrap()
                    .set_modified(SystemTime::from(put_at))
                    .unwrap();
                let metrics = || Arc::new(HistoryMetrics::unregistered());
                let local =
                    LogStore::new(local_dir.path(), metrics()).with_abandoned_after(Duration::ZERO);
                let remote = LogStore::remote(dir, metrics());
                let what = format!("{} as {name}", input.display());
                let (a, b) = (local.rescan(), remote.rescan());
                assert_eq!((a.read, a.bad), (b.read, b.bad), "{what}");
                let rows = |s: &LogStore| -> Vec<bytes::Bytes> {
                    let page = s.page(&query, None, &Default::default());
                    page.rows.into_iter().map(|r| r.entry).collect()
                };
                assert_eq!(rows(&local), rows(&remote), "{what}");
                for row in local.page(&query, None, &Default::default()).rows {
                    let id = row.facts.job_id().to_string();
                    for names in [
                        &[payload::JOB, payload::STAGES, payload::CONFIG][..],
                        &[payload::DOT, payload::RESPONSES],
                    ] {
                        assert_eq!(
                            local.read_payloads(&id, names).ok(),
                            remote.read_payloads(&id, names).ok(),
                            "{what}: {names:?}"
                        );
                    }
                    let end = |s: &LogStore| s.read_job_end(&id).ok().map(|e| format!("{e:?}"));
                    assert_eq!(end(&local), end(&remote), "{what}: JobEnd");
                    let header = JobHeader {
                        job_id: id.clone(),
                        state: crate::query::JobState::Completed,
                        start_time: 1,
                        end_time: 2,
                        dropped_records: Some(0),
                    };
                    let timeline = |s: &LogStore| {
                        read_timeline(s.log_of(&id).unwrap(), &header, TimelineParams::default())
                            .ok()
                            .map(|t| serde_json::to_string(&t).unwrap())
                    };
                    assert_eq!(timeline(&local), timeline(&remote), "{what}: timeline");
                    compared += 1;
                }
            }
        }
        assert!(compared > 10, "only {compared} jobs were listed");
    }

    /// The uploader creates objects and never overwrites: a log already
    /// there with the same size was this one (the spool file just goes); a
    /// different one of the same name is another job, and this one is kept
    /// under a second name.
    #[test]
    fn uploads_create_once_and_keep_a_clash() {
        let rt = runtime();
        let (memory, dir) = memory_dir(&rt);
        let spool = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("a.eventlog", "same"),
            ("b.eventlog", "mine"),
            ("c.eventlog", "new"),
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
        let expected: Vec<(String, String)> = [
            ("p/a.eventlog", "same"),
            ("p/b-4.eventlog", "mine"),
            ("p/b.eventlog", "theirs, longer"),
            ("p/c.eventlog", "new"),
            ("p/d.eventlog.running", "left"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(objects, expected);
        assert_eq!(
            std::fs::read_dir(spool.path()).unwrap().count(),
            0,
            "spool emptied"
        );
        assert_eq!(metrics.uploads.get(), 4);
        assert_eq!(metrics.upload_errors.get(), 0);
    }

    /// The cleaner over a bucket: completed objects by the limits, and an
    /// unfinished one (a leftover) once it is older than the orphan grace.
    #[test]
    fn the_cleaner_deletes_objects() {
        use crate::retention::{Cleaner, RetentionPolicy};
        use crate::store::LogStore;
        let rt = runtime();
        let (memory, dir) = memory_dir(&rt);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
        let logs = ["038HEXYE9M000.eventlog", "038HEXYEEG000.eventlog"];
        rt.block_on(async {
            for name in logs {
                let bytes = std::fs::read(root.join(name)).unwrap();
                memory
                    .put(&ObjPath::from(format!("p/{name}")), bytes.into())
                    .await
                    .unwrap();
            }
            let start = std::fs::read_to_string(root.join(logs[0])).unwrap();
            let first = start.lines().next().unwrap().to_string() + "\n";
            memory
                .put(&ObjPath::from("p/left.eventlog.running"), first.into())
                .await
                .unwrap();
        });
        let store = Arc::new(LogStore::remote(
            dir,
            Arc::new(HistoryMetrics::unregistered()),
        ));
        store.rescan();
        assert_eq!(store.len(), 2);
        assert_eq!(store.unfinished_files().len(), 1);
        let policy = RetentionPolicy {
            max_jobs: Some(1),
            orphan_grace: Duration::from_secs(24 * 3600),
            ..RetentionPolicy::default()
        };
        let cleaner = Cleaner::new(
            store.clone(),
            policy,
            None,
            Arc::new(HistoryMetrics::unregistered()),
        );
        let report = cleaner.pass(SystemTime::now());
        assert_eq!((report.removed_jobs, report.removed_orphans), (1, 0));
        let report = cleaner.pass(SystemTime::now() + Duration::from_secs(25 * 3600));
        assert_eq!((report.removed_jobs, report.removed_orphans), (0, 1));
        let left = rt.block_on(async {
            use futures::TryStreamExt;
            let listed: Vec<_> = memory.list(None).try_collect().await.unwrap();
            listed
                .into_iter()
                .map(|m| m.location.to_string())
                .collect::<Vec<_>>()
        });
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].ends_with(".eventlog"), "{left:?}");
        assert_eq!(store.len(), 1);
        assert!(store.unfinished_files().is_empty());
    }

    /// A log larger than one `PUT` goes up as a multipart upload, whole.
    #[test]
    fn a_large_log_is_uploaded_in_parts() {
        let rt = runtime();
        let (memory, dir) = memory_dir(&rt);
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
