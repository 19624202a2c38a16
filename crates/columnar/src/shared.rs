//! The columnar history shared through an object store, beside the logs.
//!
//! With an object-store `--event-log-dir`, each server keeps its columnar
//! history in its local spool, and its background refresh publishes it
//! under the prefix (a query never waits for an upload):
//!
//! ```text
//! <prefix>/.ballista-job-history.columnar/manifest.json
//! <prefix>/.ballista-job-history.columnar/<table>/<blake3 of the file>.parquet
//! ```
//!
//! A server whose spool holds no columnar history yet (a new machine, a
//! second history server) fetches the published segments instead of
//! reading every log again, and reads only the logs no segment holds.
//!
//! **Invariants.** A file's name is the BLAKE3 hash of its bytes: uploading
//! it twice is harmless, and a fetched file whose bytes do not match its
//! name is refused, so a server never answers from a file another server
//! changed under it. The manifest is uploaded after every file it names,
//! so whichever server's manifest is read names only files that were whole
//! when it was written; a file deleted since (a newer manifest replaced
//! it) leaves its segment out, and its jobs are read from their logs. The
//! logs stay the truth: deleting the folder loses nothing.
//!
//! **Bounds.** A bucket may be another's, and lie: the manifest is read
//! only when its object is no larger than `MAX_MANIFEST_BYTES`,
//! and a file is fetched only when no larger than the manifest says (a
//! segment's file `MAX_SEGMENT_BYTES` where it does not say; the index
//! never over `MAX_INDEX_BYTES`), streamed to disk a chunk at a time while
//! hashed (a queue of a few chunks between the object store's runtime and
//! the writing thread), never held whole in memory: the index of 100
//! million jobs is about 2 GB. A stream longer than its object said is
//! cut at the bound.

use super::{ColumnarError, IndexFile, Manifest, Segment, TABLES, held, io, seg_path};
use bjh_metrics::HistoryMetrics;
use bjh_store::LogStore;
use bjh_store::remote::RemoteDir;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The largest index fetched when the manifest does not bound it (about
/// 19 bytes a job: 3,600 million jobs).
const MAX_INDEX_BYTES: u64 = 64 << 30;

/// Chunks of a fetched file queued between the object store's runtime
/// and the thread writing it.
const QUEUED_CHUNKS: usize = 4;

/// The folder's name, under the prefix as in the spool.
pub const FOLDER: &str = ".ballista-job-history.columnar";

/// The published columnar history of one prefix.
pub(super) struct Shared {
    dir: RemoteDir,
    metrics: Arc<HistoryMetrics>,
}

impl Shared {
    /// The prefix of `store`'s logs, when they are in an object store.
    pub(super) fn of(store: &LogStore, metrics: Arc<HistoryMetrics>) -> Option<Self> {
        let dir = store.remote_dir()?.clone();
        Some(Self { dir, metrics })
    }

    fn location(&self, rel: &str) -> ObjPath {
        let (_, prefix) = self.dir.client();
        rel.split('/')
            .fold(prefix.join(FOLDER), |path, part| path.join(part))
    }

    /// Runs a request on the store's own runtime.
    async fn run<T: Send + 'static>(
        &self,
        request: impl FnOnce(Arc<dyn ObjectStore>) -> futures::future::BoxFuture<'static, T>,
    ) -> Result<T, ColumnarError> {
        let (client, _) = self.dir.client();
        Ok(self.dir.spawn(request(client)).await?)
    }

    /// The manifest published under the prefix, if any.
    async fn manifest(&self) -> Result<Option<Manifest>, ColumnarError> {
        let location = self.location("manifest.json");
        let got = self
            .run(move |c| {
                Box::pin(async move {
                    let got = c.get(&location).await?;
                    match got.meta.size > super::MAX_MANIFEST_BYTES {
                        true => Ok(Err(got.meta.size)),
                        false => got.bytes().await.map(Ok),
                    }
                })
            })
            .await?;
        match got {
            Ok(Ok(bytes)) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Ok(Err(size)) => Err(ColumnarError::Refused(format!(
                "its manifest is {size} bytes, over the {} it may have",
                super::MAX_MANIFEST_BYTES
            ))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Fetches the published segments into `dir`, numbered from
    /// `next_seq` on, and the index of their jobs; gives those fetched
    /// whole and the index (`None`: nothing to start from). A segment with
    /// a file missing or not matching its name is left out (its jobs are
    /// read from their logs), and so are its jobs from the index; an
    /// index that does not fetch whole leaves every segment out. Adds the
    /// files fetched whole to `whole`.
    pub(super) async fn fetch(
        &self,
        dir: &Path,
        next_seq: &mut u64,
        whole_files: &mut HashSet<String>,
    ) -> Option<(Vec<Segment>, IndexFile)> {
        let published = match self.manifest().await {
            Ok(Some(m)) => m,
            Ok(None) => return None,
            Err(e) => {
                log::warn!(
                    "history: {} ({e}); reading the logs instead",
                    self.dir.url()
                );
                return None;
            }
        };
        let mut fetched = Vec::new();
        let mut moved = HashMap::new();
        for remote in published.segments {
            if remote.sums.len() != TABLES.len() {
                continue;
            }
            let seq = *next_seq;
            *next_seq += 1;
            moved.insert(remote.seq, Some(seq));
            let mut seg = Segment {
                seq,
                rows: remote.rows,
                sizes: Vec::new(),
                sums: remote.sums.clone(),
                held: remote.held,
                jobs: remote.jobs,
            };
            let mut whole = true;
            for (t, ((table, _), sum)) in TABLES.iter().zip(&remote.sums).enumerate() {
                let path = seg_path(dir, table, seq);
                let cap = (remote.sizes.get(t).copied()).unwrap_or(super::MAX_SEGMENT_BYTES);
                match self.fetch_file(table, sum, &path, cap).await {
                    Ok(size) => {
                        seg.sizes.push(size);
                        whole_files.insert(format!("{table}/{sum}.parquet"));
                    }
                    Err(e) => {
                        log::warn!(
                            "history: columnar file {table}/{sum} of {} not used ({e}); its \
                             jobs are read from their logs",
                            self.dir.url()
                        );
                        whole = false;
                        break;
                    }
                }
            }
            if whole {
                self.metrics.columnar_segments_fetched.inc();
                fetched.push(seg);
            } else {
                remove_segment(dir, seq);
            }
        }
        let index = self
            .fetch_index(dir, published.index, &mut fetched, moved, next_seq)
            .await;
        match index {
            // Written here (its segments numbered anew): published as
            // this server's own.
            Ok(index) => Some((fetched, index)),
            Err(e) => {
                log::warn!(
                    "history: the columnar index of {} not used ({e}); every job is read from \
                     its log",
                    self.dir.url()
                );
                for seg in fetched {
                    remove_segment(dir, seg.seq);
                }
                None
            }
        }
    }

    /// The index of the segments `fetched` (renumbered as `moved` says):
    /// the published one, fetched and written again with the segments'
    /// numbers here; or, from a manifest of version 1, written from the
    /// jobs it lists.
    async fn fetch_index(
        &self,
        dir: &Path,
        published: Option<IndexFile>,
        fetched: &mut Vec<Segment>,
        moved: HashMap<u64, Option<u64>>,
        next_seq: &mut u64,
    ) -> Result<IndexFile, ColumnarError> {
        if fetched.iter().any(|s| s.jobs.is_some()) {
            let mut m = Manifest {
                next_seq: *next_seq,
                segments: std::mem::take(fetched),
                ..Manifest::default()
            };
            m.upgrade(dir);
            *next_seq = m.next_seq;
            *fetched = m.segments;
            return m
                .index
                .ok_or_else(|| ColumnarError::Refused("no index written".into()));
        }
        let published = published
            .ok_or_else(|| ColumnarError::Refused("the manifest names no index".into()))?;
        let aside = dir.join("index").join("fetched.parquet");
        let cap = published.size.min(MAX_INDEX_BYTES);
        self.fetch_file("index", &published.sum, &aside, cap)
            .await?;
        let seq = *next_seq;
        *next_seq += 1;
        let path = held::index_path(dir, seq);
        let live: HashSet<u64> = fetched.iter().map(|s| s.seq).collect();
        let rewrite = held::Rewrite {
            moved,
            only_moved: true,
            ..held::Rewrite::new()
        };
        let (aside2, path2) = (aside.clone(), path.clone());
        let written = tokio::task::spawn_blocking(move || {
            rewrite.write(Some(held::Reader::open(&aside2)?), &live, &path2)
        })
        .await;
        let _ = std::fs::remove_file(&aside);
        let (size, sum) = written??;
        Ok(IndexFile { seq, size, sum })
    }

    /// Uploads `bytes` as `name` under the folder.
    async fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), ColumnarError> {
        let location = self.location(name);
        self.run(move |c| Box::pin(async move { c.put(&location, PutPayload::from(bytes)).await }))
            .await??;
        self.metrics.columnar_files_published.inc();
        Ok(())
    }

    /// Downloads `table/sum` to `path` (aside, then renamed) if its bytes
    /// hash to `sum` and are at most `cap`; gives its size. Streamed: a
    /// few chunks in memory at a time (the module's bounds).
    async fn fetch_file(
        &self,
        table: &str,
        sum: &str,
        path: &Path,
        cap: u64,
    ) -> Result<u64, ColumnarError> {
        use futures::StreamExt;
        let location = self.location(&format!("{table}/{sum}.parquet"));
        let over = move |size: u64| {
            ColumnarError::Refused(format!("{size} bytes or more, over the {cap} it may have"))
        };
        let (chunks, mut queued) = tokio::sync::mpsc::channel(QUEUED_CHUNKS);
        let getting = self.run(move |c| {
            Box::pin(async move {
                let got = match c.get(&location).await {
                    Ok(got) if got.meta.size > cap => Err(over(got.meta.size)),
                    Ok(got) => Ok(got.into_stream()),
                    Err(e) => Err(e.into()),
                };
                let mut stream = match got {
                    Ok(stream) => stream,
                    Err(e) => return drop(chunks.send(Err(e)).await),
                };
                while let Some(chunk) = stream.next().await {
                    let failed = chunk.is_err();
                    let chunk = chunk.map_err(ColumnarError::from);
                    // The writer stopped (refused the bytes): no more read.
                    if chunks.send(chunk).await.is_err() || failed {
                        return;
                    }
                }
            })
        });
        let (path, sum, what) = (
            path.to_path_buf(),
            sum.to_string(),
            format!("{table}/{sum}"),
        );
        let writing = tokio::task::spawn_blocking(move || {
            let parent = path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(parent).map_err(io("creating a table's folder"))?;
            let mut size = 0u64;
            bjh_files::replace::<ColumnarError>(&path, 0o644, |f| {
                let mut hasher = blake3::Hasher::new();
                while let Some(chunk) = queued.blocking_recv() {
                    let chunk = chunk?;
                    size += chunk.len() as u64;
                    if size > cap {
                        return Err(over(size));
                    }
                    hasher.update(&chunk);
                    std::io::Write::write_all(f, &chunk).map_err(io(format!("writing {what}")))?;
                }
                match hasher.finalize().to_hex().to_string() {
                    got if got == sum => Ok(()),
                    got => Err(ColumnarError::Refused(format!("its bytes hash to {got}"))),
                }
            })?;
            Ok::<_, ColumnarError>(size)
        });
        let (got, written) = tokio::join!(getting, writing);
        let size = written??;
        got?;
        Ok(size)
    }

    /// Publishes `m` (the files in `dir`): uploads each file not both in
    /// `whole_files` (those this process fetched whole or uploaded; a name
    /// another manifest claims is not trusted) and named by the manifest
    /// in the store, then the manifest, then
    /// deletes the files only the replaced manifest named. Fills in a
    /// segment's missing hashes (written before they were kept) from its
    /// files, and says whether it did.
    pub(super) async fn publish(
        &self,
        dir: &Path,
        m: &mut Manifest,
        whole_files: &mut HashSet<String>,
    ) -> Result<bool, ColumnarError> {
        let before = self.manifest().await.ok().flatten().unwrap_or_default();
        let known: HashSet<String> = names(&before).collect();
        let mut filled = false;
        for seg in &mut m.segments {
            if seg.sums.len() != TABLES.len() {
                filled = true;
                seg.sums = TABLES
                    .iter()
                    .map(|(table, _)| hash_file(&seg_path(dir, table, seg.seq)))
                    .collect::<Result<_, _>>()?;
            }
        }
        if let Some(index) = &m.index {
            let name = format!("index/{}.parquet", index.sum);
            if !(whole_files.contains(&name) && known.contains(&name)) {
                let bytes = bjh_files::read_capped(&held::index_path(dir, index.seq), index.size)
                    .map_err(io("reading the columnar index"))?;
                self.put(&name, bytes).await?;
                whole_files.insert(name);
            }
        }
        for seg in &m.segments {
            for (t, ((table, _), sum)) in TABLES.iter().zip(&seg.sums).enumerate() {
                let name = format!("{table}/{sum}.parquet");
                // Known whole, and named by the manifest in the store (one
                // it does not name may have been deleted since).
                if whole_files.contains(&name) && known.contains(&name) {
                    continue;
                }
                // A segment has the size it was written with.
                let cap = seg
                    .sizes
                    .get(t)
                    .copied()
                    .unwrap_or(super::MAX_SEGMENT_BYTES);
                let bytes = bjh_files::read_capped(&seg_path(dir, table, seg.seq), cap)
                    .map_err(io(format!("reading {table} segment {}", seg.seq)))?;
                self.put(&name, bytes).await?;
                whole_files.insert(name);
            }
        }
        let body = serde_json::to_vec(m)?;
        let location = self.location("manifest.json");
        self.run(move |c| Box::pin(async move { c.put(&location, PutPayload::from(body)).await }))
            .await??;
        let now: HashSet<String> = names(m).collect();
        for gone in known.difference(&now) {
            let location = self.location(gone);
            let _ = self
                .run(move |c| Box::pin(async move { c.delete(&location).await }))
                .await;
        }
        Ok(filled)
    }
}

/// The files a manifest names, as `table/sum.parquet` (and its index's,
/// `index/sum.parquet`).
fn names(m: &Manifest) -> impl Iterator<Item = String> + '_ {
    let index = (m.index.iter()).map(|i| format!("index/{}.parquet", i.sum));
    m.segments
        .iter()
        .flat_map(|s| {
            TABLES
                .iter()
                .zip(&s.sums)
                .map(|((table, _), sum)| format!("{table}/{sum}.parquet"))
        })
        .chain(index)
}

/// Removes the files of segment `seq` from `dir`.
fn remove_segment(dir: &Path, seq: u64) {
    for (table, _) in TABLES {
        let _ = std::fs::remove_file(seg_path(dir, table, seq));
    }
}

/// The BLAKE3 hash of a file, in hex.
fn hash_file(path: &Path) -> Result<String, ColumnarError> {
    let mut hasher = blake3::Hasher::new();
    let (mut file, _) =
        bjh_files::open_regular(path).map_err(io("opening a segment to hash it"))?;
    std::io::copy(&mut file, &mut hasher).map_err(io("hashing a segment"))?;
    Ok(hasher.finalize().to_hex().to_string())
}

/// A writer that hashes what it writes (so a file's hash costs no second
/// read).
pub(super) struct Hashing<W> {
    pub(super) inner: W,
    pub(super) hasher: blake3::Hasher,
}

impl<W: std::io::Write> std::io::Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A bucket that serves each object in chunks of 64 KiB, counting the
    /// bytes a reader pulls, and, when `claim` is set, says every object
    /// is that long whatever it holds.
    #[derive(Debug)]
    struct Lying {
        inner: InMemory,
        pulled: Arc<AtomicU64>,
        claim: Option<u64>,
    }

    impl std::fmt::Display for Lying {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Lying")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Lying {
        async fn put_opts(
            &self,
            location: &ObjPath,
            payload: PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &ObjPath,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &ObjPath,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            use futures::StreamExt;
            let got = self.inner.get_opts(location, options).await?;
            let (mut meta, attributes, range) =
                (got.meta.clone(), got.attributes.clone(), got.range.clone());
            let bytes = got.bytes().await?;
            if let Some(claim) = self.claim {
                meta.size = claim;
            }
            let pulled = self.pulled.clone();
            let chunks: Vec<bytes::Bytes> = (0..bytes.len())
                .step_by(64 * 1024)
                .map(|at| bytes.slice(at..(at + 64 * 1024).min(bytes.len())))
                .collect();
            let stream = futures::stream::iter(chunks).map(move |chunk| {
                pulled.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                Ok(chunk)
            });
            Ok(object_store::GetResult {
                payload: object_store::GetResultPayload::Stream(stream.boxed()),
                meta,
                range,
                attributes,
            })
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<ObjPath>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<ObjPath>> {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&ObjPath>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&ObjPath>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &ObjPath,
            to: &ObjPath,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    fn over_bucket(claim: Option<u64>) -> (Shared, Arc<Lying>) {
        let bucket = Arc::new(Lying {
            inner: InMemory::new(),
            pulled: Arc::new(AtomicU64::new(0)),
            claim,
        });
        let dir = RemoteDir::new(
            bucket.clone(),
            ObjPath::from("p"),
            "memory://p",
            tokio::runtime::Handle::current(),
        );
        let metrics = Arc::new(HistoryMetrics::unregistered());
        (Shared { dir, metrics }, bucket)
    }

    /// `got` is a refusal for being over `cap` bytes.
    fn over(got: Result<u64, ColumnarError>, cap: u64) {
        let refused = got.unwrap_err().to_string();
        assert!(refused.contains(&format!("over the {cap}")), "{refused}");
    }

    /// A published file of `len` bytes: its name (the hash) and bytes.
    fn file(len: usize) -> (String, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        (blake3::hash(&bytes).to_hex().to_string(), bytes)
    }

    /// A bucket's files larger than the manifest says, or than they may
    /// be, are refused without being pulled (by their size) or cut at the
    /// bound (a stream longer than its object said), leaving nothing on
    /// disk; a file within its bound is fetched whole, as named; a
    /// manifest too large is refused by its size. The oracle: the bytes
    /// the bucket counts as pulled.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_larger_than_it_may_be_is_refused_without_being_read_whole() {
        let disk = tempfile::tempdir().unwrap();
        let path = disk.path().join("tasks").join("seg.parquet");
        let (sum, bytes) = file(4 << 20);
        let len = bytes.len() as u64;

        // Honest: fetched whole.
        let (shared, bucket) = over_bucket(None);
        shared
            .put(&format!("tasks/{sum}.parquet"), bytes.clone())
            .await
            .unwrap();
        assert_eq!(
            shared.fetch_file("tasks", &sum, &path, len).await.unwrap(),
            len
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert_eq!(bucket.pulled.load(Ordering::Relaxed), len);
        std::fs::remove_file(&path).unwrap();

        // Larger than the manifest says: refused by its size, unread.
        bucket.pulled.store(0, Ordering::Relaxed);
        over(
            shared.fetch_file("tasks", &sum, &path, 1 << 20).await,
            1 << 20,
        );
        assert_eq!(bucket.pulled.load(Ordering::Relaxed), 0);
        assert!(!path.exists());

        // It says it is small, and streams on: cut at the bound.
        let (shared, bucket) = over_bucket(Some(1 << 20));
        shared
            .put(&format!("tasks/{sum}.parquet"), bytes.clone())
            .await
            .unwrap();
        over(
            shared.fetch_file("tasks", &sum, &path, 1 << 20).await,
            1 << 20,
        );
        let pulled = bucket.pulled.load(Ordering::Relaxed);
        assert!(
            pulled <= (1 << 20) + (QUEUED_CHUNKS as u64 + 2) * 64 * 1024,
            "{pulled} bytes pulled of {len}"
        );
        assert!(!path.exists());
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            0,
            "no temporary left"
        );

        // A manifest larger than a manifest may be: refused, unread.
        let (shared, bucket) = over_bucket(Some(super::super::MAX_MANIFEST_BYTES + 1));
        shared.put("manifest.json", b"{}".to_vec()).await.unwrap();
        let refused = shared.manifest().await.unwrap_err();
        assert!(refused.to_string().contains("manifest"), "{refused}");
        assert_eq!(bucket.pulled.load(Ordering::Relaxed), 0);
    }
}
