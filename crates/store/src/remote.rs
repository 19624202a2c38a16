//! The reading side of event logs in an object store (`s3://`, `gs://`,
//! `az://`): opening the store from a URL, listing a prefix, and reading
//! logs with ranged requests. Uploading completed logs is the recording
//! side's (`recording::upload`).
//!
//! The store's blocking helpers (listing, and the ranged-read file) run
//! the async client on the runtime the store was opened on; they are called
//! from the blocking pool, as every other read of a log is.

use crate::location::Stamp;
use bjh_format::LogName;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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
    /// The same store's paginated listing (S3, GCS, Azure), which can
    /// start after a key and stop after a page: the bounded listing pass.
    /// `None` (an embedder's store, tests' in-memory one): each pass
    /// lists the whole prefix.
    paged: Option<Arc<dyn PaginatedListStore>>,
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
    pub(crate) fn connect(url: &url::Url, options: &RemoteOptions) -> Result<Self, String> {
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
        fn both<S: ObjectStore + PaginatedListStore>(
            s: S,
        ) -> (Arc<dyn ObjectStore>, Arc<dyn PaginatedListStore>) {
            let s = Arc::new(s);
            (s.clone(), s)
        }
        let (store, paged) = match url.scheme() {
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
                both(b.build().map_err(fail)?)
            }
            "gs" => {
                let mut b = GoogleCloudStorageBuilder::from_env()
                    .with_url(url.as_str())
                    .with_client_options(client)
                    .with_retry(retry);
                if let Some(endpoint) = &options.endpoint {
                    b = b.with_config(GoogleConfigKey::BaseUrl, endpoint);
                }
                both(b.build().map_err(fail)?)
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
                both(b.build().map_err(fail)?)
            }
            other => unreachable!("checked above: {other}"),
        };
        let prefix = ObjPath::from_url_path(url.path()).map_err(|e| format!("{shown}: {e}"))?;
        Ok(Self::new(store, prefix, shown, runtime).with_paged_listing(paged))
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
                paged: None,
                prefix,
                url: url.into(),
                runtime,
            }),
        }
    }

    /// Lists through `paged` (the same store's paginated listing), so a
    /// rescan's listing pass asks for one page at a time; without it,
    /// each pass lists the whole prefix and cuts its pages from that.
    pub fn with_paged_listing(self, paged: Arc<dyn PaginatedListStore>) -> Self {
        let inner = &*self.inner;
        Self {
            inner: Arc::new(Inner {
                store: inner.store.clone(),
                paged: Some(paged),
                prefix: inner.prefix.clone(),
                url: inner.url.clone(),
                runtime: inner.runtime.clone(),
            }),
        }
    }

    /// The URL, without credentials.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The store's client and the prefix: what the uploader writes to.
    pub fn client(&self) -> (Arc<dyn ObjectStore>, ObjPath) {
        (self.inner.store.clone(), self.inner.prefix.clone())
    }

    /// Runs `request` on the runtime the store's client was built on
    /// (for callers on another runtime).
    pub fn spawn<T: Send + 'static>(
        &self,
        request: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.inner.runtime.spawn(request)
    }

    fn location(&self, name: &str) -> ObjPath {
        self.inner.prefix.clone().join(name)
    }

    /// The object `name` in `folder` (`a/b`, or empty) under the prefix.
    fn in_folder(&self, folder: &str, name: &str) -> ObjPath {
        folder
            .split('/')
            .filter(|part| !part.is_empty())
            .fold(self.inner.prefix.clone(), |p, part| p.join(part))
            .join(name)
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

    /// Whether the store lists a page at a time ([`RemoteDir::list_page`]
    /// is one request).
    pub(crate) fn lists_by_page(&self) -> bool {
        self.inner.paged.is_some()
    }

    /// At most `max_keys` entries directly under the prefix after the
    /// name `after` (from the first when `None`), in name order: the logs
    /// among them, and the last name the page reached, `None` when it
    /// reached the end. One `LIST` request. A store without a paginated
    /// listing (an embedder's, the tests' in-memory one) is listed whole
    /// and the page cut from it, with the same answer.
    pub(crate) fn list_page(
        &self,
        after: Option<&str>,
        max_keys: usize,
    ) -> Result<(Vec<Listed>, Option<String>), object_store::Error> {
        let Some(paged) = self.inner.paged.clone() else {
            let mut all = self.list()?;
            all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            all.retain(|l| after.is_none_or(|a| l.name.as_str() > a));
            let more = all.len() > max_keys;
            all.truncate(max_keys);
            let next = more.then(|| all.last().map(|l| l.name.clone())).flatten();
            return Ok((all, next));
        };
        let prefix = self.inner.prefix.as_ref();
        let folder = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let options = PaginatedListOptions {
            offset: after.map(|name| format!("{folder}{name}")),
            delimiter: Some("/".into()),
            max_keys: Some(max_keys),
            ..PaginatedListOptions::default()
        };
        let asked = (!folder.is_empty()).then_some(folder.clone());
        let page =
            self.block(async move { paged.list_paginated(asked.as_deref(), options).await })?;
        // The page's last key, object or folder: where the next one starts.
        let last = page
            .result
            .objects
            .iter()
            .map(|m| m.location.as_ref())
            .chain(page.result.common_prefixes.iter().map(|p| p.as_ref()))
            .filter_map(|key| key.strip_prefix(folder.as_str()))
            .max()
            .map(str::to_string);
        let listed = page
            .result
            .objects
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.as_ref().strip_prefix(folder.as_str())?;
                LogName::parse(name)?;
                Some(Listed {
                    name: name.to_string(),
                    stamp: Stamp {
                        len: meta.size,
                        modified: Some(SystemTime::from(meta.last_modified)),
                    },
                })
            })
            .collect();
        Ok((listed, page.page_token.and(last)))
    }

    /// The objects in the folder `folder` under the prefix, by name, with
    /// their stamps (one `LIST` per 1,000).
    pub(crate) fn folder_objects(
        &self,
        folder: &str,
    ) -> Result<Vec<(String, Stamp)>, object_store::Error> {
        let folder = self.location(folder);
        let listed = self.block(self.inner.store.list_with_delimiter(Some(&folder)))?;
        Ok(listed
            .objects
            .into_iter()
            .filter_map(|meta| {
                let name = meta.location.filename()?.to_string();
                let stamp = Stamp {
                    len: meta.size,
                    modified: Some(SystemTime::from(meta.last_modified)),
                };
                Some((name, stamp))
            })
            .collect())
    }

    /// The whole object `folder/name` under the prefix (one `GET`),
    /// refused past `cap` bytes.
    pub(crate) fn read_object(
        &self,
        folder: &str,
        name: &str,
        cap: u64,
    ) -> std::io::Result<Vec<u8>> {
        let location = self.in_folder(folder, name);
        let store = self.inner.store.clone();
        let bytes = self.block(async move {
            let got = store.get(&location).await?;
            if got.meta.size > cap {
                return Ok(None);
            }
            got.bytes().await.map(Some)
        });
        match bytes.map_err(io_error)? {
            Some(b) => Ok(b.to_vec()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("larger than the {cap} bytes it may have"),
            )),
        }
    }

    /// Puts `bytes` as the object `folder/name` under the prefix, whole
    /// (one `PUT`), replacing what was there.
    pub(crate) fn put_object(
        &self,
        folder: &str,
        name: &str,
        bytes: Vec<u8>,
    ) -> std::io::Result<()> {
        let location = self.in_folder(folder, name);
        self.block(self.inner.store.put(&location, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(io_error)
    }

    /// The cluster logs under `<prefix>/.cluster/` (`format::cluster`),
    /// with their sizes and modification times.
    pub(crate) fn cluster_objects(&self) -> Result<Vec<(String, Stamp)>, object_store::Error> {
        use bjh_format::cluster::{CLUSTER_DIR, CLUSTER_SUFFIX};
        let mut listed = self.folder_objects(CLUSTER_DIR)?;
        listed.retain(|(name, _)| name.ends_with(CLUSTER_SUFFIX));
        Ok(listed)
    }

    /// The whole cluster log `name` (one `GET`), refused past `cap` bytes.
    pub(crate) fn read_cluster_object(&self, name: &str, cap: u64) -> std::io::Result<Vec<u8>> {
        self.read_object(bjh_format::cluster::CLUSTER_DIR, name, cap)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => std::io::Error::new(
                    e.kind(),
                    format!("larger than the {cap} bytes a cluster log may have"),
                ),
                _ => e,
            })
    }

    /// The object `name`'s stamp (one `HEAD`). Called from blocking
    /// threads only.
    pub fn stamp(&self, name: &str) -> Result<Stamp, object_store::Error> {
        let meta = self.block(self.inner.store.head(&self.location(name)))?;
        Ok(Stamp {
            len: meta.size,
            modified: Some(SystemTime::from(meta.last_modified)),
        })
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

    /// Deletes the cluster log `name`; one already gone is `NotFound`.
    pub(crate) fn delete_cluster_object(&self, name: &str) -> std::io::Result<()> {
        self.delete_object(bjh_format::cluster::CLUSTER_DIR, name)
    }

    /// Deletes the object `name`; one already gone is `NotFound`.
    pub fn delete(&self, name: &str) -> std::io::Result<()> {
        self.delete_object("", name)
    }

    /// Deletes the object `folder/name` under the prefix (`folder` empty:
    /// directly under it); one already gone is `NotFound`.
    pub(crate) fn delete_object(&self, folder: &str, name: &str) -> std::io::Result<()> {
        let location = self.in_folder(folder, name);
        self.block(self.inner.store.delete(&location))
            .map_err(io_error)
    }
}

/// A store's error as the I/O error a file would give: a missing object is
/// `NotFound`, as a missing file is, so callers treat both alike.
pub(crate) fn io_error(e: object_store::Error) -> std::io::Error {
    match e {
        object_store::Error::NotFound { .. } => {
            std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
        }
        e => std::io::Error::other(e.to_string()),
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
                .map_err(io_error)?;
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bjh_metrics::HistoryMetrics;
    use std::path::Path;

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

    /// A runtime of one worker for a test's store client.
    pub(crate) fn runtime() -> tokio::runtime::Runtime {
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
        use crate::LogStore;
        use crate::query::ListQuery;
        use bjh_format::record::payload;
        let rt = runtime();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests");
        let mut inputs: Vec<PathBuf> = ["fuzz-inputs", "fixtures/upstream"]
            .iter()
            .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_none_or(|e| e != "md"))
            .collect();
        inputs.sort();
        assert!(inputs.len() > 40);
        let query = ListQuery {
            include_unfinished: true,
            ..ListQuery::default()
        };
        let mut compared = 0;
        let mut served = 0;
        // A read's result to compare: the value, or which error (both
        // sides failing alike is equal; failing differently is not).
        fn outcome<T: std::fmt::Debug>(r: Result<T, crate::StoreError>) -> String {
            use crate::StoreError::*;
            match r {
                Ok(v) => format!("ok {v:?}"),
                Err(Io(e)) => format!("io error {:?}", e.kind()),
                Err(NewerSchema { found }) => format!("newer schema {found}"),
                Err(Malformed(_)) => "malformed".into(),
                Err(NoTerminalRecord) => "no terminal record".into(),
                Err(NotItsName { claimed }) => format!("not its name: {claimed}"),
            }
        }
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
                        let (a, b) = (
                            outcome(local.read_payloads(&id, names)),
                            outcome(remote.read_payloads(&id, names)),
                        );
                        served += a.starts_with("ok") as usize;
                        assert_eq!(a, b, "{what}: {names:?}");
                    }
                    let end = |s: &LogStore| outcome(s.read_job_end(&id));
                    assert_eq!(end(&local), end(&remote), "{what}: JobEnd");
                    // The progress records, as the timeline reads them.
                    let timeline = |s: &LogStore| {
                        let mut records = Vec::new();
                        let read = crate::records::scan(&s.log_of(&id).unwrap(), |r| {
                            records.push(format!("{r:?}"))
                        });
                        outcome(read.map(|()| records))
                    };
                    assert_eq!(timeline(&local), timeline(&remote), "{what}: timeline");
                    compared += 1;
                }
            }
        }
        assert!(compared > 10, "only {compared} jobs were listed");
        assert!(served > 10, "only {served} reads succeeded");
    }

    /// The cleaner over a bucket: completed objects by the limits, and an
    /// unfinished one (a leftover) once it is older than the orphan grace.
    #[test]
    fn the_cleaner_deletes_objects() {
        use crate::LogStore;
        use crate::retention::{Cleaner, RetentionPolicy};
        let rt = runtime();
        let (memory, dir) = memory_dir(&rt);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/upstream");
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
}
