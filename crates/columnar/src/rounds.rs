//! A refresh's rounds: each reads the store's jobs by id beside the index
//! (`held`) (or, when the store's journal knows what changed since the
//! last refresh, only those jobs beside the index's rows near them),
//! rewrites the segments holding jobs the store no longer lists
//! and merges small ones, writes segments for the jobs no segment holds
//! (from the writer's records, else from their logs), and writes the index
//! as the round leaves it. A round takes [`held::ROUND`] new or gone jobs
//! at most, so a refresh's memory is bounded however many jobs are new
//! (a first refresh over a directory of millions of logs takes many).

use super::*;
use held::{Diff, Reader, Rewrite};

/// How long a refresh goes on from the store's journal before it reads
/// every job again (the journal is kept right by tests; this bounds what
/// a change it missed could cost).
pub(super) const FULL_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Where the store's journal stood when the files were last brought up
/// to it, and when every job was last read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Journal {
    at: u64,
    full: std::time::Instant,
}

impl Columnar {
    /// Rounds until the segments hold every completed job the store lists
    /// (but logs that failed and are not due) and none other. Whether
    /// anything changed.
    pub(super) async fn catch_up(
        &self,
        state: &mut State,
        store: &Arc<LogStore>,
        every: bool,
    ) -> Result<bool, ColumnarError> {
        if !every && let Some(changed) = self.catch_up_changes(state, store).await? {
            return Ok(changed);
        }
        // Where the journal stands before the walk: what changes during it
        // is read again by the next refresh.
        let (at, started) = (store.changes_at(), std::time::Instant::now());
        state.journal = None;
        let changed = self.catch_up_every(state, store).await?;
        if !state.again {
            state.journal = Some(Journal { at, full: started });
        }
        Ok(changed)
    }

    /// [`Columnar::catch_up`] from the store's journal: the jobs added or
    /// removed since the last refresh (and the logs that failed and are
    /// due) compared with the index's rows near them, in one round, no job
    /// walked. `None` when the journal does not know (a first refresh, a
    /// restart, more than a round's changes, a change in bulk), or when
    /// [`FULL_EVERY`] passed since every job was last read: then every
    /// job is read.
    async fn catch_up_changes(
        &self,
        state: &mut State,
        store: &Arc<LogStore>,
    ) -> Result<Option<bool>, ColumnarError> {
        let Some(seen) = state.journal else {
            return Ok(None);
        };
        if seen.full.elapsed() > FULL_EVERY {
            return Ok(None);
        }
        let Some((mut ids, end)) = store.changed_since(seen.at) else {
            return Ok(None);
        };
        let now = std::time::Instant::now();
        let due = (state.unreadable.iter())
            .filter(|(_, (_, at))| *at <= now)
            .map(|(id, _)| id.clone())
            .take(RETRIES_PER_REFRESH);
        ids.extend(due);
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > held::ROUND {
            return Ok(None);
        }
        let waiting: HashSet<String> = (state.unreadable.iter())
            .filter(|(_, (_, at))| *at > now)
            .map(|(id, _)| id.clone())
            .collect();
        let index = (state.manifest.index.as_ref()).map(|i| held::index_path(&self.dir, i.seq));
        let (live, listing) = (state.manifest.live(), store.clone());
        let diff = tokio::task::spawn_blocking(move || {
            let held = index
                .as_deref()
                .map(|p| Reader::open_near(p, &ids))
                .transpose()?;
            held::reconcile_changed(
                &ids,
                held,
                &live,
                |id| listing.contains(id),
                |id| !waiting.contains(id),
            )
        })
        .await?;
        // A damaged index: every job is read, and the damage dealt with.
        let Ok(diff) = diff else {
            return Ok(None);
        };
        let this = self.apply(state, store, diff).await?;
        state.journal = (!state.again).then_some(Journal {
            at: end,
            full: seen.full,
        });
        Ok(Some(this))
    }

    /// Rounds over every job (below).
    async fn catch_up_every(
        &self,
        state: &mut State,
        store: &Arc<LogStore>,
    ) -> Result<bool, ColumnarError> {
        let (mut changed, mut retries) = (false, 0);
        state.full_reads += 1;
        loop {
            let diff = match self.reconcile(state, store, &mut retries).await? {
                Ok(diff) => diff,
                Err(e) => {
                    log::warn!(
                        "history: the columnar index is damaged ({e}); every job is read from \
                         its log again"
                    );
                    changed |= self.forget_all(state);
                    continue;
                }
            };
            let more = diff.more;
            changed |= self.apply(state, store, diff).await?;
            // Each round's new jobs are held after it or wait to be read
            // again, so the next round takes others; a merge that failed
            // would fail again: left to the next refresh.
            if !more || state.again {
                return Ok(changed);
            }
        }
    }

    /// Makes one round's difference: segments rewritten without the jobs
    /// gone, new ones written, the index written as they leave it.
    /// Whether anything changed.
    async fn apply(
        &self,
        state: &mut State,
        store: &Arc<LogStore>,
        diff: Diff,
    ) -> Result<bool, ColumnarError> {
        let mut round = Rewrite::new();
        let mut this = self.rewrite_and_merge(state, diff.gone, &mut round).await?;
        let mut new = diff.new;
        this |= self.add_written(state, &mut new, &mut round).await?;
        this |= self.add_from_logs(state, store, &new, &mut round).await?;
        if this {
            self.write_index(state, round).await;
        }
        Ok(this)
    }

    /// One round's difference between the store and the index, read on
    /// the blocking pool; the inner error: the index is damaged.
    async fn reconcile(
        &self,
        state: &State,
        store: &Arc<LogStore>,
        retries: &mut usize,
    ) -> Result<Result<Diff, ColumnarError>, ColumnarError> {
        let now = std::time::Instant::now();
        // Logs that failed: those not due are left out; of those due, a
        // bounded number is read again.
        let waiting: HashMap<String, bool> = (state.unreadable.iter())
            .map(|(id, (_, at))| (id.clone(), *at <= now))
            .collect();
        let index = (state.manifest.index.as_ref()).map(|i| held::index_path(&self.dir, i.seq));
        let (live, store) = (state.manifest.live(), store.clone());
        let mut tried = *retries;
        let diff = tokio::task::spawn_blocking(move || {
            let held = index.as_deref().map(Reader::open).transpose();
            let wanted = |id: &str| match waiting.get(id) {
                None => true,
                Some(false) => false,
                Some(true) => {
                    tried += 1;
                    tried <= RETRIES_PER_REFRESH
                }
            };
            let diff = held.and_then(|held| {
                store.with_completed_by_id(|jobs| {
                    let mut ids = jobs.map(|j| bjh_store::query::JobFacts::job_id(&*j).to_string());
                    held::reconcile(&mut ids, held, &live, wanted)
                })
            });
            (diff, tried)
        });
        let (diff, tried) = diff.await?;
        *retries = tried;
        Ok(diff)
    }

    /// Rewrites each segment holding jobs gone from the store, alone, and
    /// merges each group of small ones.
    async fn rewrite_and_merge(
        &self,
        state: &mut State,
        gone: HashMap<u64, HashSet<String>>,
        round: &mut Rewrite,
    ) -> Result<bool, ColumnarError> {
        let segments = &state.manifest.segments;
        let rewrite = (0..segments.len()).filter(|&i| gone.contains_key(&segments[i].seq));
        let merge = small_groups(segments);
        let merged: HashSet<usize> = merge.iter().flatten().copied().collect();
        let groups: Vec<Vec<usize>> = rewrite
            .filter(|i| !merged.contains(i))
            .map(|i| vec![i])
            .chain(merge)
            .collect();
        let mut slots: Vec<Option<Segment>> = state.manifest.segments.drain(..).map(Some).collect();
        let taken: Vec<Vec<Segment>> = groups
            .iter()
            .map(|g| g.iter().filter_map(|&i| slots[i].take()).collect())
            .collect();
        state.manifest.segments = slots.into_iter().flatten().collect();
        let changed = !taken.is_empty();
        let gone = Arc::new(gone);
        for old in taken {
            let seq = state.manifest.take_seq();
            let (dir, olds, drop) = (self.dir.clone(), old.clone(), gone.clone());
            let merged =
                tokio::task::spawn_blocking(move || merge_segments(&dir, &olds, &drop, seq))
                    .await?;
            match merged {
                Ok(merged) => {
                    let to = merged.as_ref().map(|m| m.seq);
                    state.manifest.segments.extend(merged);
                    for s in &old {
                        round.moved.insert(s.seq, to);
                        if let Some(d) = gone.get(&s.seq) {
                            round.dropped.insert(s.seq, d.clone());
                        }
                        for (table, _) in TABLES {
                            self.retire(&state.current, seg_path(&self.dir, table, s.seq));
                        }
                    }
                }
                Err(e) => {
                    // Kept as they were: the next refresh tries again, or
                    // drops the ones that are damaged (their jobs are read
                    // from the logs), never losing their jobs meanwhile.
                    log::warn!("history: columnar segments not merged ({e}); tried again later");
                    state.manifest.segments.extend(old);
                    state.again = true;
                }
            }
        }
        Ok(changed)
    }

    /// Jobs of `new` the writer handed over: their rows from its records
    /// (taken out of `new`).
    async fn add_written(
        &self,
        state: &mut State,
        new: &mut Vec<String>,
        round: &mut Rewrite,
    ) -> Result<bool, ColumnarError> {
        let written = self
            .fresh
            .take(|id| new.binary_search_by(|n| n.as_str().cmp(id)).is_ok());
        if written.is_empty() {
            return Ok(false);
        }
        let taken: HashSet<&str> = written.iter().map(|j| j.start.job_id.as_str()).collect();
        new.retain(|id| !taken.contains(id.as_str()));
        let n = written.len() as u64;
        let seq = state.manifest.take_seq();
        let dir = self.dir.clone();
        let (seg, held) = tokio::task::spawn_blocking(move || {
            // The one copy, unless another taker (the trace exporter)
            // still holds it.
            let rows = written
                .into_iter()
                .map(|job| rows_of_written(Arc::unwrap_or_clone(job)))
                .collect();
            write_segment(&dir, seq, rows)
        })
        .await??;
        self.metrics.columnar_jobs_from_writer.inc_by(n);
        state.manifest.segments.push(seg);
        round.added.extend(held);
        Ok(true)
    }

    /// Jobs of `new`: read their logs, write a segment per chunk of them,
    /// so memory stays bounded however many jobs are new.
    pub(super) async fn add_from_logs(
        &self,
        state: &mut State,
        store: &Arc<LogStore>,
        new: &[String],
        round: &mut Rewrite,
    ) -> Result<bool, ColumnarError> {
        let mut changed = false;
        for chunk in new.chunks(CHUNK) {
            let rows = self.read_rows(state, store, chunk).await;
            if rows.is_empty() {
                continue;
            }
            let seq = state.manifest.take_seq();
            let dir = self.dir.clone();
            let (seg, held) =
                tokio::task::spawn_blocking(move || write_segment(&dir, seq, rows)).await??;
            state.manifest.segments.push(seg);
            round.added.extend(held);
            changed = true;
        }
        Ok(changed)
    }

    /// The rows of `ids` from their logs; a log that does not read is left
    /// out (and tried again later).
    async fn read_rows(
        &self,
        state: &mut State,
        store: &Arc<LogStore>,
        ids: &[String],
    ) -> Vec<(String, JobRows)> {
        let rows: Vec<(String, Result<JobRows, ColumnarError>)> =
            futures::stream::iter(ids.iter().cloned())
                .map(|id| async move {
                    let rows = rows_of(store, &id).await;
                    (id, rows)
                })
                .buffer_unordered(READERS)
                .collect()
                .await;
        let mut read = Vec::with_capacity(rows.len());
        for (id, rows) in rows {
            match rows {
                Ok(r) => {
                    self.metrics.columnar_logs_read.inc();
                    state.unreadable.remove(&id);
                    read.push((id, r));
                }
                Err(e) => {
                    let tries = state.unreadable.get(&id).map_or(0, |(n, _)| *n) + 1;
                    let wait = retry_wait(tries);
                    if tries == 1 {
                        log::warn!(
                            "history: job {id:?} left out of the SQL tables for now ({e}); \
                             its log is read again in {wait:?}"
                        );
                    }
                    state
                        .unreadable
                        .insert(id, (tries, std::time::Instant::now() + wait));
                }
            }
        }
        read
    }

    /// Writes the index as `round` leaves it, and names it in the
    /// manifest. When it cannot be written the segments would hold jobs
    /// the index does not name (and read them again, twice): every
    /// segment is let go instead, and their jobs read from their logs.
    pub(super) async fn write_index(&self, state: &mut State, round: Rewrite) {
        let old = (state.manifest.index.as_ref()).map(|i| held::index_path(&self.dir, i.seq));
        let seq = state.manifest.take_seq();
        let path = held::index_path(&self.dir, seq);
        let live = state.manifest.live();
        // The jobs whose totals this index adds or drops (a move between
        // segments changes none).
        let changed: Vec<String> = (round.added.iter().map(|h| h.id.clone()))
            .chain(round.dropped.values().flatten().cloned())
            .collect();
        let written = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let old = old.as_deref().map(Reader::open).transpose()?;
                round.write(old, &live, &path)
            })
            .await
        };
        match written.map_err(ColumnarError::from).and_then(|w| w) {
            Ok((size, sum)) => {
                for id in &changed {
                    self.changes.note(id);
                }
                if let Some(old) = state.manifest.index.replace(IndexFile { seq, size, sum }) {
                    self.retire(&state.current, held::index_path(&self.dir, old.seq));
                }
            }
            Err(e) => {
                log::warn!(
                    "history: the columnar index cannot be written ({e}); every job is read \
                     from its log again"
                );
                let _ = std::fs::remove_file(&path);
                self.forget_all(state);
                // Their jobs are not in the store's journal: the next
                // refresh reads every job.
                state.again = true;
                state.journal = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;

    /// Copies of the upstream fixtures, each under a new id: `copies` of
    /// each; gives each job's task records, counted in its log.
    fn logs(dir: &Path, copies: usize) -> BTreeMap<String, i64> {
        logs_as(dir, copies, "")
    }

    /// [`logs`], each id starting with `tag`.
    fn logs_as(dir: &Path, copies: usize, tag: &str) -> BTreeMap<String, i64> {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/upstream");
        let mut tasks = BTreeMap::new();
        for entry in std::fs::read_dir(fixtures).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap();
            let Some(id) = name.strip_suffix(".eventlog").filter(|n| !n.contains('-')) else {
                continue;
            };
            let text = std::fs::read_to_string(&path).unwrap();
            let n = text
                .lines()
                .filter(|l| l.contains(r#""ev":"TaskEnd""#))
                .count();
            for k in 0..copies {
                let new = format!("{tag}{k:03}{}", &id[3..]);
                std::fs::write(dir.join(format!("{new}.eventlog")), text.replace(id, &new))
                    .unwrap();
                tasks.insert(new, n as i64);
            }
        }
        tasks
    }

    /// Each job's task rows in the generation's `tasks` files.
    fn task_rows(g: &Generation) -> BTreeMap<String, i64> {
        let mut rows = BTreeMap::new();
        for file in &g.files[1] {
            let file = std::fs::File::open(file).unwrap();
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap()
                .build()
                .unwrap();
            for batch in reader {
                for id in batch.unwrap().column(0).as_string_view().iter() {
                    *rows.entry(id.unwrap().to_string()).or_default() += 1;
                }
            }
        }
        rows
    }

    /// What the generation holds is `want`: each job's task rows once in
    /// the files, and its totals from the index, asked for by id.
    fn holds(g: &Generation, want: &BTreeMap<String, i64>, what: &str) {
        let with_tasks: BTreeMap<String, i64> = (want.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(task_rows(g), with_tasks, "{what}: the tasks files");
        let mut totals = g.totals();
        for (id, n) in want {
            assert_eq!(totals.get(id).map(|t| t.tasks), Some(*n), "{what}: {id}");
        }
        assert_eq!(g.task_rows, want.values().sum::<i64>() as u64, "{what}");
    }

    /// Through rounds of at most `ROUND` new jobs (120 here), logs gone
    /// (retention) and new ones (read from the store's journal, then, past
    /// a round's worth, by a walk), a damaged index and a manifest of
    /// version 1, every
    /// completed job's task rows are held once and its totals read back by
    /// id; the manifest names no job. The oracle: each log's task records,
    /// counted in the text.
    #[tokio::test]
    async fn every_job_is_held_once_through_rounds_retention_damage_and_an_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        let mut want = logs(dir.path(), 24);
        assert!(want.len() > 2 * held::ROUND);
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let index = dir.path().join("store-index");
        let store = Arc::new(
            LogStore::new(dir.path(), metrics.clone())
                .with_index_file(Some(index.clone()))
                .with_memory_jobs(Some(50), Some(&index)),
        );
        store.rescan();
        assert_eq!(store.len(), want.len());
        let folder = dir.path().join("columnar");
        let columnar = Columnar::open(Some(folder.clone()), metrics.clone());
        let g = columnar.refresh(&store, false).await.unwrap();
        holds(&g, &want, "first");
        assert_eq!(metrics.columnar_logs_read.get(), want.len() as u64);
        let manifest = std::fs::read_to_string(folder.join("manifest.json")).unwrap();
        assert!(
            !manifest.contains(want.keys().next().unwrap()),
            "{manifest}"
        );
        // Retention: a quarter of the logs gone.
        let gone: Vec<String> = want.keys().step_by(4).cloned().collect();
        for id in &gone {
            std::fs::remove_file(dir.path().join(format!("{id}.eventlog"))).unwrap();
            want.remove(id);
        }
        store.rescan();
        let g = columnar.refresh(&store, false).await.unwrap();
        holds(&g, &want, "after retention");
        assert!(g.totals().get(&gone[0]).is_none());
        // New logs, fewer than a round: read from the journal, no walk.
        let more = logs_as(dir.path(), 2, "new");
        want.extend(more);
        store.rescan();
        let g = columnar.refresh(&store, false).await.unwrap();
        holds(&g, &want, "new logs");
        assert_eq!(
            columnar.state.lock().await.full_reads,
            1,
            "the retention and the new logs: from the journal"
        );
        // More than a round's changes: every job read.
        for id in want
            .keys()
            .skip(1)
            .step_by(2)
            .take(held::ROUND + 1)
            .cloned()
            .collect::<Vec<_>>()
        {
            std::fs::remove_file(dir.path().join(format!("{id}.eventlog"))).unwrap();
            want.remove(&id);
        }
        store.rescan();
        let g = columnar.refresh(&store, false).await.unwrap();
        holds(&g, &want, "many gone");
        assert_eq!(columnar.state.lock().await.full_reads, 2);
        // The index damaged: every job read from its log again, once.
        let read = metrics.columnar_logs_read.get();
        let index_file = g.index.clone().unwrap();
        std::fs::write(&index_file, b"not an index").unwrap();
        drop(g);
        let g = columnar.refresh(&store, false).await.unwrap();
        holds(&g, &want, "after damage");
        assert_eq!(metrics.columnar_logs_read.get() - read, want.len() as u64);
        // A manifest of version 1 (every job listed in its segment):
        // opened, its jobs go to an index, and no log is read again.
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(folder.join("manifest.json")).unwrap()).unwrap();
        let mut totals = g.totals();
        let mut by_seq: BTreeMap<u64, serde_json::Map<String, serde_json::Value>> = BTreeMap::new();
        let rows: Vec<held::Held> = Reader::open(g.index.as_ref().unwrap())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for h in &rows {
            let t = totals.get(&h.id).unwrap();
            by_seq.entry(h.seq).or_default().insert(
                h.id.clone(),
                serde_json::json!({"tasks": t.tasks, "failed": t.failed_tasks, "rows": t.output_rows,
                                   "scheduler": t.scheduler_id}),
            );
        }
        for s in m["segments"].as_array_mut().unwrap() {
            let seq = s["seq"].as_u64().unwrap();
            s["jobs"] = by_seq.remove(&seq).unwrap_or_default().into();
            s.as_object_mut().unwrap().remove("held");
        }
        m["version"] = 1.into();
        m.as_object_mut().unwrap().remove("index");
        std::fs::write(folder.join("manifest.json"), m.to_string()).unwrap();
        drop((g, columnar));
        let read = metrics.columnar_logs_read.get();
        let columnar = Columnar::open(Some(folder.clone()), metrics.clone());
        let g = columnar.refresh(&store, false).await.unwrap();
        holds(&g, &want, "after the upgrade");
        assert_eq!(metrics.columnar_logs_read.get(), read, "no log read again");
        let manifest = std::fs::read_to_string(folder.join("manifest.json")).unwrap();
        assert!(manifest.contains(r#""version":2"#), "{manifest}");
    }

    /// The files under the tables' and the index's folders.
    fn listing(folder: &Path) -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = (TABLES.iter().map(|(t, _)| *t).chain(["index"]))
            .filter_map(|f| std::fs::read_dir(folder.join(f)).ok())
            .flat_map(|d| d.map(|e| e.unwrap().path()))
            .collect();
        all.sort();
        all
    }

    /// A process that stopped between writing files and naming them (a
    /// segment, an index, a temporary, a fetched index set aside) left
    /// them in the folder: the next to open it removes them and keeps
    /// every file its manifest names (a folder planted there is left),
    /// and the history reads as before, no log read again. A second
    /// history over the folder while the first holds it keeps a folder of
    /// its own: nothing of the first's written or removed; so does one
    /// over a link planted in the folder's place. The oracle:
    /// the folder's listing before the strays, and each log's task
    /// records counted in its text.
    #[tokio::test]
    async fn files_no_manifest_names_are_removed_by_the_folders_one_owner() {
        let dir = tempfile::tempdir().unwrap();
        let want = logs(dir.path(), 2);
        let metrics = Arc::new(HistoryMetrics::unregistered());
        let store = Arc::new(LogStore::new(dir.path(), metrics.clone()));
        store.rescan();
        let folder = dir.path().join("columnar");
        let columnar = Columnar::open(Some(folder.clone()), metrics.clone());
        let g = columnar.refresh(&store, false).await.unwrap();
        holds(&g, &want, "first");
        let named = listing(&folder);
        assert!(named.len() >= 4, "{named:?}");

        let second = Columnar::open(Some(folder.clone()), metrics.clone());
        assert_ne!(second.dir(), folder, "a folder of its own");
        let theirs = second.refresh(&store, false).await.unwrap();
        holds(&theirs, &want, "the second's own");
        assert_eq!(listing(&folder), named, "nothing of the first's touched");
        drop((theirs, second));

        let strays = [
            seg_path(&folder, "tasks", 999),
            held::index_path(&folder, 998),
            folder.join("stages").join(".tmp-abc123"),
            folder.join("index").join("fetched.parquet"),
        ];
        for stray in &strays {
            std::fs::write(stray, b"PAR1 left behind").unwrap();
        }
        let planted = folder.join("operators").join("a folder");
        std::fs::create_dir(&planted).unwrap();
        drop((g, columnar));
        let read = metrics.columnar_logs_read.get();
        let reopened = Columnar::open(Some(folder.clone()), metrics.clone());
        assert_eq!(reopened.dir(), folder);
        for stray in &strays {
            assert!(!stray.exists(), "{stray:?}");
        }
        assert!(planted.is_dir());
        std::fs::remove_dir(&planted).unwrap();
        assert_eq!(listing(&folder), named);
        let g = reopened.refresh(&store, false).await.unwrap();
        holds(&g, &want, "reopened");
        assert_eq!(metrics.columnar_logs_read.get(), read, "no log read again");
        drop((g, reopened));

        // A link planted in the folder's place: not taken, nothing
        // written or removed through it.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(elsewhere.path().join("tasks")).unwrap();
        let theirs = elsewhere.path().join("tasks").join("theirs.parquet");
        std::fs::write(&theirs, b"someone else's").unwrap();
        let planted = dir.path().join("planted");
        std::os::unix::fs::symlink(elsewhere.path(), &planted).unwrap();
        let other = Columnar::open(Some(planted.clone()), metrics.clone());
        assert_ne!(other.dir(), planted);
        holds(
            &other.refresh(&store, false).await.unwrap(),
            &want,
            "beside the link",
        );
        assert!(theirs.is_file());
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 1);
    }
}
