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

use super::{ColumnarError, Manifest, Segment, TABLES, io, seg_path};
use bjh_metrics::HistoryMetrics;
use bjh_store::LogStore;
use bjh_store::remote::RemoteDir;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::HashSet;
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
    /// `next_seq` on; gives those fetched whole. A segment with a file
    /// missing or not matching its name is left out (its jobs are read
    /// from their logs). Adds the files fetched whole to `whole`.
    pub(super) async fn fetch(
        &self,
        dir: &Path,
        next_seq: &mut u64,
        whole_files: &mut HashSet<String>,
    ) -> Vec<Segment> {
        let published = match self.manifest().await {
            Ok(Some(m)) => m,
            Ok(None) => return Vec::new(),
            Err(e) => {
                log::warn!(
                    "history: {} ({e}); reading the logs instead",
                    self.dir.url()
                );
                return Vec::new();
            }
        };
        let mut fetched = Vec::new();
        for remote in published.segments {
            if remote.sums.len() != TABLES.len() {
                continue;
            }
            let seq = *next_seq;
            *next_seq += 1;
            let mut seg = Segment {
                seq,
                rows: remote.rows,
                sizes: Vec::new(),
                sums: remote.sums.clone(),
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
                for (table, _) in TABLES {
                    let _ = std::fs::remove_file(seg_path(dir, table, seq));
                }
            }
        }
        fetched
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
                let location = self.location(&name);
                self.run(move |c| {
                    Box::pin(async move { c.put(&location, PutPayload::from(bytes)).await })
                })
                .await??;
                self.metrics.columnar_files_published.inc();
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

/// The files a manifest names, as `table/sum.parquet`.
fn names(m: &Manifest) -> impl Iterator<Item = String> + '_ {
    m.segments.iter().flat_map(|s| {
        TABLES
            .iter()
            .zip(&s.sums)
            .map(|((table, _), sum)| format!("{table}/{sum}.parquet"))
    })
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
