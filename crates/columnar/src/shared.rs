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

use super::{ColumnarError, IndexFile, Manifest, Segment, TABLES, held, io, seg_path};
use bjh_metrics::HistoryMetrics;
use bjh_store::LogStore;
use bjh_store::remote::RemoteDir;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

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
            .run(move |c| Box::pin(async move { c.get(&location).await?.bytes().await }))
            .await?;
        match got {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
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
            for ((table, _), sum) in TABLES.iter().zip(&remote.sums) {
                let path = seg_path(dir, table, seq);
                match self.fetch_file(table, sum, &path).await {
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
        self.fetch_file("index", &published.sum, &aside).await?;
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
    /// hash to `sum`; gives its size.
    async fn fetch_file(&self, table: &str, sum: &str, path: &Path) -> Result<u64, ColumnarError> {
        let location = self.location(&format!("{table}/{sum}.parquet"));
        let bytes = self
            .run(move |c| Box::pin(async move { c.get(&location).await?.bytes().await }))
            .await??;
        let got = blake3::hash(&bytes).to_hex().to_string();
        if got != sum {
            return Err(ColumnarError::Refused(format!("its bytes hash to {got}")));
        }
        let parent = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(io("creating a table's folder"))?;
        bjh_files::replace::<std::io::Error>(path, 0o644, |f| std::io::Write::write_all(f, &bytes))
            .map_err(io(format!("writing {table}/{sum}")))?;
        Ok(bytes.len() as u64)
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
