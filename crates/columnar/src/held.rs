//! The index of the jobs the columnar history holds: one Parquet file,
//! `index/index-NNNNNNNN.parquet`, a row a job sorted by job id (bytewise):
//! its id, the segment holding its rows, and the totals `jobs` shows of
//! it (tasks, failed tasks, output rows, scheduler, slot time).
//!
//! The manifest names the segments and this file, nothing a job: it stays
//! a few hundred bytes a segment however many jobs the segments hold. A
//! refresh reads the file beside the store's jobs walked by id
//! ([`reconcile`]), both in step, to find the jobs no segment holds and
//! those the store no longer lists, and writes the file again ([`Rewrite`])
//! when it changed anything: memory stays in proportion to what one
//! round changes ([`ROUND`] jobs at most), not to the jobs held. The SQL
//! `jobs` table's totals are read the same way ([`Totals`]): the table is
//! built walking the store by id.
//!
//! Parquet, written and read with the `parquet` crate DataFusion already
//! carries (a column of ids compresses to about 9 bytes a job, and the
//! file is read a batch at a time), not a format of our own.
//!
//! **Invariant:** a job is in the file exactly when a segment of the
//! manifest holds its rows. A file that cannot be read, or whose ids are
//! not in order, is damaged: every segment is let go and their jobs are
//! read from their logs again, never counted twice. A row naming a
//! segment the manifest does not list (one dropped as damaged) is left
//! out, so its job is read from its log again.

#[cfg(not(test))]
use super::ROW_GROUP;
use super::{ColumnarError, JobTotals, io};
use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, Int64Builder, RecordBatch, StringArray, StringBuilder,
    UInt64Array, UInt64Builder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::{
    ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

/// New or gone jobs one round of a refresh takes at most; the next round
/// (of the same refresh) takes the rest.
#[cfg(not(test))]
pub(super) const ROUND: usize = 100_000;
#[cfg(test)]
pub(super) const ROUND: usize = 40;
/// Rows read or written at once.
const BATCH: usize = 4096;
/// Rows of a row group of the index (a read near some ids reads the
/// groups whose range holds one).
#[cfg(not(test))]
const GROUP: usize = ROW_GROUP;
#[cfg(test)]
const GROUP: usize = 16;

static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("job_id", DataType::Utf8, false),
        Field::new("segment", DataType::UInt64, false),
        Field::new("tasks", DataType::Int64, false),
        Field::new("failed_tasks", DataType::Int64, false),
        Field::new("output_rows", DataType::Int64, false),
        Field::new("scheduler_id", DataType::Utf8, true),
        Field::new("busy_slot_ms", DataType::UInt64, true),
        Field::new("failed_slot_ms", DataType::UInt64, true),
    ]))
});

/// One job the segments hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) id: String,
    /// The segment holding its rows.
    pub(crate) seq: u64,
    pub(crate) totals: JobTotals,
}

/// The index file numbered `n` under `dir`.
pub(super) fn index_path(dir: &Path, n: u64) -> PathBuf {
    dir.join("index").join(format!("index-{n:08}.parquet"))
}

/// The rows of an index file, in order; an error (and nothing after it)
/// when a batch does not read or an id is not after the one before.
pub(crate) struct Reader {
    batches: ParquetRecordBatchReader,
    columns: Option<Columns>,
    at: usize,
    last: Option<String>,
    failed: bool,
}

struct Columns {
    id: StringArray,
    seq: UInt64Array,
    ints: [Int64Array; 3],
    scheduler: StringArray,
    slots: [UInt64Array; 2],
}

impl Reader {
    /// The file at `path`, opened as a planted file is (no link, no FIFO).
    pub(crate) fn open(path: &Path) -> Result<Self, ColumnarError> {
        Self::open_with(path, None)
    }

    /// The file at `path`, but only its row groups whose ids' range holds
    /// one of `ids` (sorted): the rows of `ids` and others near them.
    pub(crate) fn open_near(path: &Path, ids: &[String]) -> Result<Self, ColumnarError> {
        Self::open_with(path, Some(ids))
    }

    fn open_with(path: &Path, near: Option<&[String]>) -> Result<Self, ColumnarError> {
        let (file, _) = bjh_files::open_regular(path).map_err(io("opening the columnar index"))?;
        let mut builder = ParquetRecordBatchReaderBuilder::try_new(file)?.with_batch_size(BATCH);
        if let Some(ids) = near {
            let groups: Vec<usize> = (builder.metadata().row_groups().iter().enumerate())
                .filter(|(_, g)| {
                    let stats = g.column(0).statistics();
                    match stats.map(|s| (s.min_bytes_opt(), s.max_bytes_opt())) {
                        Some((Some(lo), Some(hi))) => {
                            let i = ids.partition_point(|id| id.as_bytes() < lo);
                            ids.get(i).is_some_and(|id| id.as_bytes() <= hi)
                        }
                        _ => true,
                    }
                })
                .map(|(i, _)| i)
                .collect();
            builder = builder.with_row_groups(groups);
        }
        Ok(Self {
            batches: builder.build()?,
            columns: None,
            at: 0,
            last: None,
            failed: false,
        })
    }

    fn next_batch(&mut self) -> Result<bool, ColumnarError> {
        let Some(batch) = self.batches.next().transpose()? else {
            return Ok(false);
        };
        if batch.schema().fields() != SCHEMA.fields() {
            return Err(ColumnarError::Refused(
                "the columnar index has other columns than its own".into(),
            ));
        }
        let col = |i: usize| batch.column(i).clone();
        fn cast<T: Clone + 'static>(a: ArrayRef) -> T {
            a.as_any()
                .downcast_ref::<T>()
                .expect("the fields were checked")
                .clone()
        }
        self.columns = Some(Columns {
            id: cast(col(0)),
            seq: cast(col(1)),
            ints: [cast(col(2)), cast(col(3)), cast(col(4))],
            scheduler: cast(col(5)),
            slots: [cast(col(6)), cast(col(7))],
        });
        self.at = 0;
        Ok(true)
    }

    fn row(&mut self) -> Result<Option<Held>, ColumnarError> {
        loop {
            if let Some(c) = &self.columns
                && self.at < c.id.len()
            {
                let i = self.at;
                self.at += 1;
                let opt = |a: &UInt64Array| a.is_valid(i).then(|| a.value(i));
                let usage = match (opt(&c.slots[0]), opt(&c.slots[1])) {
                    (Some(busy_slot_ms), Some(failed_slot_ms)) => {
                        Some(bjh_format::usage::SlotUsage {
                            busy_slot_ms,
                            failed_slot_ms,
                        })
                    }
                    _ => None,
                };
                let held = Held {
                    id: c.id.value(i).to_string(),
                    seq: c.seq.value(i),
                    totals: JobTotals {
                        tasks: c.ints[0].value(i),
                        failed_tasks: c.ints[1].value(i),
                        output_rows: c.ints[2].value(i),
                        scheduler_id: (c.scheduler.is_valid(i))
                            .then(|| c.scheduler.value(i).to_string()),
                        usage,
                    },
                };
                if self.last.as_ref().is_some_and(|l| *l >= held.id) {
                    return Err(ColumnarError::Refused(format!(
                        "the columnar index lists job {:?} out of order",
                        held.id
                    )));
                }
                self.last = Some(held.id.clone());
                return Ok(Some(held));
            }
            if !self.next_batch()? {
                return Ok(None);
            }
        }
    }
}

impl Iterator for Reader {
    type Item = Result<Held, ColumnarError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let row = self.row().transpose();
        self.failed = matches!(row, Some(Err(_)));
        row
    }
}

/// What one round of a refresh changes: the jobs no segment holds (sorted
/// by id) and, by segment, the jobs the store no longer lists.
#[derive(Debug, Default)]
pub(super) struct Diff {
    pub(super) new: Vec<String>,
    pub(super) gone: HashMap<u64, HashSet<String>>,
    /// A bound was met: another round finds more.
    pub(super) more: bool,
}

/// The rows of `held` (and its error) in the segments of `live`.
fn of_live(
    held: Option<Reader>,
    live: &HashSet<u64>,
) -> std::iter::Peekable<impl Iterator<Item = Result<Held, ColumnarError>> + '_> {
    (held.into_iter().flatten())
        .filter(|h| h.as_ref().map_or(true, |h| live.contains(&h.seq)))
        .peekable()
}

/// Reads the store's job ids (`completed`, by id) beside the index's rows
/// (`held`, by id; those of segments not in `live` left out): the ids the
/// index lacks and `wanted` accepts are new, the rows whose ids the store
/// lacks are gone. Stops once [`ROUND`] of either are found. An index
/// that fails to read (or lists an id twice, or out of order) is an
/// error.
pub(super) fn reconcile(
    completed: &mut dyn Iterator<Item = String>,
    held: Option<Reader>,
    live: &HashSet<u64>,
    mut wanted: impl FnMut(&str) -> bool,
) -> Result<Diff, ColumnarError> {
    let mut held = of_live(held, live);
    let mut diff = Diff::default();
    let mut last_held: Option<String> = None;
    let mut id = completed.next();
    loop {
        if diff.new.len() >= ROUND || diff.gone.values().map(HashSet::len).sum::<usize>() >= ROUND {
            diff.more = id.is_some() || held.peek().is_some();
            return Ok(diff);
        }
        let take_id = match (&id, held.peek()) {
            (None, None) => return Ok(diff),
            (_, Some(Err(_))) => return Err(held.next().expect("peeked").expect_err("an error")),
            (Some(_), None) => true,
            (Some(i), Some(Ok(h))) => i.as_str() < h.id.as_str(),
            (None, Some(Ok(_))) => false,
        };
        if take_id {
            let i = id.take().expect("there is one");
            // Not a job the index holds, met twice.
            if last_held.as_deref() != Some(&i) && wanted(&i) {
                diff.new.push(i);
            }
        } else {
            let h = held.next().expect("peeked").expect("not an error");
            // (The reader refuses an id met twice.)
            if id.as_deref() == Some(h.id.as_str()) {
                id = None;
            } else {
                diff.gone.entry(h.seq).or_default().insert(h.id.clone());
            }
            last_held = Some(h.id);
        }
        if id.is_none() {
            id = completed.next();
        }
    }
}

/// [`reconcile`] for the jobs `changed` alone (sorted, each once: those
/// the store's journal says were added or removed), beside the index's
/// rows near them: a changed id `listed` and not held (and `wanted`) is
/// new, one held and not listed is gone. Never more than `changed` of
/// either, so never `more`.
pub(super) fn reconcile_changed(
    changed: &[String],
    held: Option<Reader>,
    live: &HashSet<u64>,
    listed: impl Fn(&str) -> bool,
    mut wanted: impl FnMut(&str) -> bool,
) -> Result<Diff, ColumnarError> {
    let mut held = of_live(held, live);
    let mut diff = Diff::default();
    for id in changed {
        let mut holding = None;
        while let Some(h) = held.next_if(|h| h.as_ref().map_or(true, |h| h.id <= *id)) {
            let h = h?;
            if h.id == *id {
                holding = Some(h.seq);
            }
        }
        match (listed(id), holding) {
            (true, None) if wanted(id) => diff.new.push(id.clone()),
            (false, Some(seq)) => drop(diff.gone.entry(seq).or_default().insert(id.clone())),
            _ => {}
        }
    }
    Ok(diff)
}

/// The index as a round leaves it: the rows of the one before, their
/// segments renumbered where segments were merged (`moved`), less those
/// of segments no longer listed and the jobs `dropped`, and the rows
/// `added`.
pub(super) struct Rewrite {
    /// Old segment to the segment its rows are in now; `None`: its rows
    /// are gone.
    pub(super) moved: HashMap<u64, Option<u64>>,
    /// By old segment, the jobs removed from it when it was rewritten.
    pub(super) dropped: HashMap<u64, HashSet<String>>,
    /// Rows of the jobs added, in any order.
    pub(super) added: Vec<Held>,
    /// Rows of segments `moved` does not name are left out (an index
    /// fetched from another server, whose segments are numbered anew).
    pub(super) only_moved: bool,
}

impl Rewrite {
    pub(super) fn new() -> Self {
        Self {
            moved: HashMap::new(),
            dropped: HashMap::new(),
            added: Vec::new(),
            only_moved: false,
        }
    }

    /// Writes the index `old` (if any) as this round leaves it, keeping
    /// the segments of `live`, to `path`: its size and BLAKE3 hash.
    pub(super) fn write(
        mut self,
        old: Option<Reader>,
        live: &HashSet<u64>,
        path: &Path,
    ) -> Result<(u64, String), ColumnarError> {
        self.added.sort_by(|a, b| a.id.cmp(&b.id));
        let (moved, dropped, only_moved) = (&self.moved, &self.dropped, self.only_moved);
        let kept = old.into_iter().flatten().filter_map(|h| match h {
            Err(e) => Some(Err(e)),
            Ok(mut h) => {
                if let Some(to) = moved.get(&h.seq) {
                    if dropped.get(&h.seq).is_some_and(|d| d.contains(&h.id)) {
                        return None;
                    }
                    h.seq = (*to)?;
                } else if only_moved {
                    return None;
                }
                live.contains(&h.seq).then_some(Ok(h))
            }
        });
        use itertools::Itertools;
        let rows = kept.merge_by(self.added.into_iter().map(Ok), |a, b| match (a, b) {
            (Ok(a), Ok(b)) => a.id <= b.id,
            (a, _) => a.is_err(),
        });
        write(path, rows)
    }
}

/// Writes `rows` (sorted by id) as the index file `path` (aside, then
/// renamed): its size and BLAKE3 hash. The first error read is the
/// write's, and nothing is renamed.
pub(super) fn write(
    path: &Path,
    rows: impl Iterator<Item = Result<Held, ColumnarError>>,
) -> Result<(u64, String), ColumnarError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io("creating the index's folder"))?;
    let mut hash = String::new();
    let mut rows = rows.peekable();
    bjh_files::replace::<ColumnarError>(path, 0o644, |file| {
        let out = super::Hashing {
            inner: std::io::BufWriter::new(file),
            hasher: blake3::Hasher::new(),
        };
        let props = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(GROUP))
            .build();
        let mut writer = ArrowWriter::try_new(out, SCHEMA.clone(), Some(props))?;
        loop {
            let chunk: Vec<Held> = (&mut rows).take(BATCH).collect::<Result<_, _>>()?;
            if chunk.is_empty() {
                break;
            }
            writer.write(&batch(&chunk)?)?;
        }
        let mut out = writer.into_inner()?;
        std::io::Write::flush(&mut out).map_err(io("writing the columnar index"))?;
        hash = out.hasher.finalize().to_hex().to_string();
        Ok(())
    })?;
    let size = std::fs::symlink_metadata(path).map_or(0, |m| m.len());
    Ok((size, hash))
}

fn batch(rows: &[Held]) -> Result<RecordBatch, ColumnarError> {
    let n = rows.len();
    let mut id = StringBuilder::with_capacity(n, n * 16);
    let mut seq = UInt64Builder::with_capacity(n);
    let mut ints: [Int64Builder; 3] = std::array::from_fn(|_| Int64Builder::with_capacity(n));
    let mut scheduler = StringBuilder::new();
    let mut slots: [UInt64Builder; 2] = std::array::from_fn(|_| UInt64Builder::with_capacity(n));
    for h in rows {
        let t = &h.totals;
        id.append_value(&h.id);
        seq.append_value(h.seq);
        ints[0].append_value(t.tasks);
        ints[1].append_value(t.failed_tasks);
        ints[2].append_value(t.output_rows);
        scheduler.append_option(t.scheduler_id.as_deref());
        slots[0].append_option(t.usage.map(|u| u.busy_slot_ms));
        slots[1].append_option(t.usage.map(|u| u.failed_slot_ms));
    }
    let [tasks, failed, output] = ints;
    let [busy, failed_slots] = slots;
    Ok(RecordBatch::try_new(
        SCHEMA.clone(),
        vec![
            Arc::new({ id }.finish()),
            Arc::new({ seq }.finish()),
            Arc::new({ tasks }.finish()),
            Arc::new({ failed }.finish()),
            Arc::new({ output }.finish()),
            Arc::new({ scheduler }.finish()),
            Arc::new({ busy }.finish()),
            Arc::new({ failed_slots }.finish()),
        ],
    )?)
}

/// The totals of the jobs a generation holds, asked for in increasing id
/// order (as the store's walk by id gives them): each file row is read
/// once. A file that fails to read gives no more totals (logged once).
pub struct Totals {
    rows: Option<std::iter::Peekable<Reader>>,
}

impl Totals {
    pub(super) fn of(path: Option<&Path>, near: Option<&[String]>) -> Self {
        let open = |p| match near {
            Some(ids) => Reader::open_near(p, ids),
            None => Reader::open(p),
        };
        let rows = path.map(open).transpose().unwrap_or_else(|e| {
            log::warn!("history: the SQL jobs table is built without the task totals: {e}");
            None
        });
        Self {
            rows: rows.map(Iterator::peekable),
        }
    }

    /// The totals of `id`, if held; `id` must not come before the one
    /// asked for last.
    pub fn get(&mut self, id: &str) -> Option<JobTotals> {
        let rows = self.rows.as_mut()?;
        loop {
            match rows.peek()? {
                Err(_) => {
                    if let Some(Err(e)) = rows.next() {
                        log::warn!("history: the SQL jobs table lacks some task totals: {e}");
                    }
                    self.rows = None;
                    return None;
                }
                Ok(h) if h.id.as_str() < id => {
                    rows.next();
                }
                Ok(h) if h.id == id => return rows.next().and_then(Result::ok).map(|h| h.totals),
                Ok(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            (seed >> 33) % n
        }
    }

    fn row(id: &str, seq: u64, tasks: i64) -> Held {
        Held {
            id: id.to_string(),
            seq,
            totals: JobTotals {
                tasks,
                scheduler_id: (tasks % 2 == 0).then(|| format!("s{tasks}")),
                usage: (tasks % 3 == 0).then_some(bjh_format::usage::SlotUsage {
                    busy_slot_ms: tasks as u64 * 10,
                    failed_slot_ms: 1,
                }),
                ..JobTotals::default()
            },
        }
    }

    /// Over random stores and indexes, a round finds as new the ids a set
    /// difference finds (those `wanted` accepts, sorted) and as gone the
    /// index's rows of live segments the store lacks, by segment; rows of
    /// segments not live are as if absent. Under the bound, one round
    /// finds them all; past it, rounds that take the new ones in find
    /// the rest.
    #[test]
    fn a_round_finds_what_set_differences_find() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rng(7);
        for case in 0..200 {
            let n = 1 + r(60) as usize;
            let ids: Vec<String> = (0..n)
                .map(|i| format!("j{:03}", r(90) * 10 + i as u64 % 10))
                .collect();
            let store: std::collections::BTreeSet<String> =
                ids.iter().filter(|_| r(4) > 0).cloned().collect();
            let mut index: BTreeMap<String, u64> = BTreeMap::new();
            for id in &ids {
                if r(3) > 0 {
                    index.insert(id.clone(), r(5));
                }
            }
            let live: HashSet<u64> = (0..5).filter(|_| r(4) > 0).collect();
            let path = dir.path().join(format!("i{case}"));
            let rows: Vec<Held> = (index.iter()).map(|(id, &seq)| row(id, seq, 1)).collect();
            write(&path, rows.into_iter().map(Ok)).unwrap();
            let unwanted = |id: &str| id.ends_with('7');
            let held: HashSet<&String> = (index.iter())
                .filter(|(_, s)| live.contains(s))
                .map(|(id, _)| id)
                .collect();
            let want_new: Vec<String> = (store.iter())
                .filter(|id| !held.contains(id) && !unwanted(id))
                .cloned()
                .collect();
            let mut want_gone: HashMap<u64, HashSet<String>> = HashMap::new();
            for (id, seq) in &index {
                if live.contains(seq) && !store.contains(id) {
                    want_gone.entry(*seq).or_default().insert(id.clone());
                }
            }
            let diff = reconcile(
                &mut store.iter().cloned(),
                Some(Reader::open(&path).unwrap()),
                &live,
                |id| !unwanted(id),
            )
            .unwrap();
            let gone: usize = want_gone.values().map(HashSet::len).sum();
            if want_new.len() < ROUND && gone < ROUND {
                assert!(!diff.more, "case {case}");
                assert_eq!(diff.new, want_new, "case {case}");
                assert_eq!(diff.gone, want_gone, "case {case}");
            } else {
                assert!(diff.more, "case {case}");
                assert!(want_new.starts_with(&diff.new), "case {case}");
                for (seq, ids) in &diff.gone {
                    assert!(ids.is_subset(&want_gone[seq]), "case {case}");
                }
            }
        }
    }

    /// For the ids the journal names, a round read near them finds what
    /// set differences find: changed, listed and not held in a live
    /// segment (and wanted) is new; changed, held and not listed is gone;
    /// nothing else, whatever the index holds beyond them. The index has
    /// row groups of 16 rows here, so the read near the ids skips most.
    #[test]
    fn a_round_over_the_changed_jobs_finds_what_set_differences_find() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rng(23);
        for case in 0..200 {
            let ids: Vec<String> = (0..300).map(|i| format!("j{i:04}")).collect();
            let mut index: BTreeMap<String, u64> = BTreeMap::new();
            for id in &ids {
                if r(2) == 0 {
                    index.insert(id.clone(), r(5));
                }
            }
            let path = dir.path().join(format!("i{case}"));
            let rows = (index.iter()).map(|(id, &seq)| Ok(row(id, seq, 1)));
            write(&path, rows).unwrap();
            let mut changed: Vec<String> =
                (0..r(30)).map(|_| ids[r(300) as usize].clone()).collect();
            changed.sort();
            changed.dedup();
            let listed: HashSet<String> = ids.iter().filter(|_| r(2) == 0).cloned().collect();
            let live: HashSet<u64> = (0..5).filter(|_| r(5) > 0).collect();
            let unwanted = |id: &str| id.ends_with('3');
            let held = |id: &String| index.get(id).filter(|s| live.contains(s));
            let want_new: Vec<String> = (changed.iter())
                .filter(|id| listed.contains(*id) && held(id).is_none() && !unwanted(id))
                .cloned()
                .collect();
            let mut want_gone: HashMap<u64, HashSet<String>> = HashMap::new();
            for id in &changed {
                if let Some(seq) = held(id).filter(|_| !listed.contains(id)) {
                    want_gone.entry(*seq).or_default().insert(id.clone());
                }
            }
            let diff = reconcile_changed(
                &changed,
                Some(Reader::open_near(&path, &changed).unwrap()),
                &live,
                |id| listed.contains(id),
                |id| !unwanted(id),
            )
            .unwrap();
            assert_eq!(diff.new, want_new, "case {case}");
            assert_eq!(diff.gone, want_gone, "case {case}");
            assert!(!diff.more);
        }
        // The read near one id reads one row group of 16, not the 300.
        let path = dir.path().join("all");
        let ids: Vec<String> = (0..300).map(|i| format!("j{i:04}")).collect();
        write(&path, ids.iter().map(|id| Ok(row(id, 0, 1)))).unwrap();
        let near = Reader::open_near(&path, &ids[100..101]).unwrap().count();
        assert_eq!(near, 16);
    }

    /// An index whose ids are out of order, or name a job twice, is an
    /// error of the read (and of a round), not an answer.
    #[test]
    fn an_index_out_of_order_or_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (i, ids) in [["a", "c", "b"], ["a", "b", "b"]].iter().enumerate() {
            let path = dir.path().join(format!("i{i}"));
            let rows = ids.iter().map(|id| Ok(row(id, 0, 1)));
            write(&path, rows).unwrap();
            let read: Vec<_> = Reader::open(&path).unwrap().collect();
            assert_eq!(read.len(), 3, "{ids:?}");
            assert!(read[2].is_err(), "{ids:?}");
            let live = HashSet::from([0]);
            let store = ["a".to_string()];
            let round = reconcile(
                &mut store.iter().cloned(),
                Some(Reader::open(&path).unwrap()),
                &live,
                |_| true,
            );
            assert!(round.is_err(), "{ids:?}");
        }
        // Not an index at all.
        let other = dir.path().join("other");
        std::fs::write(&other, b"PAR1 but nothing else").unwrap();
        assert!(Reader::open(&other).is_err());
    }

    /// Written again, the index keeps each row of a live segment, with
    /// its segment renumbered where it moved, less the jobs dropped from
    /// the segment it was in, plus the rows added; every total read back
    /// as written. The oracle: the same edits made to a map.
    #[test]
    fn an_index_written_again_is_the_edits_made_to_a_map() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = rng(11);
        for case in 0..50 {
            let mut index: BTreeMap<String, Held> = BTreeMap::new();
            for i in 0..r(80) {
                let id = format!("j{:04}", i * 3);
                index.insert(id.clone(), row(&id, r(6), r(9) as i64));
            }
            let old = dir.path().join(format!("old{case}"));
            write(&old, index.values().cloned().map(Ok)).unwrap();
            let mut rewrite = Rewrite::new();
            // Segments 0 and 1 merged into 10; 2 rewritten to nothing.
            rewrite
                .moved
                .extend([(0, Some(10)), (1, Some(10)), (2, None)]);
            for h in index.values().filter(|h| h.seq < 2 && r(3) == 0) {
                rewrite
                    .dropped
                    .entry(h.seq)
                    .or_default()
                    .insert(h.id.clone());
            }
            for i in 0..r(20) {
                rewrite
                    .added
                    .push(row(&format!("j{:04}", i * 3 + 1), 11, i as i64));
            }
            let live = HashSet::from([3, 4, 10, 11]);
            let mut want: BTreeMap<String, Held> = BTreeMap::new();
            for h in index.values() {
                let dropped = rewrite
                    .dropped
                    .get(&h.seq)
                    .is_some_and(|d| d.contains(&h.id));
                let seq = match rewrite.moved.get(&h.seq) {
                    Some(to) if !dropped => *to,
                    Some(_) => None,
                    None => Some(h.seq),
                };
                if let Some(seq) = seq.filter(|s| live.contains(s)) {
                    want.insert(h.id.clone(), Held { seq, ..h.clone() });
                }
            }
            for h in &rewrite.added {
                want.insert(h.id.clone(), h.clone());
            }
            let new = dir.path().join(format!("new{case}"));
            rewrite
                .write(Some(Reader::open(&old).unwrap()), &live, &new)
                .unwrap();
            let got: Vec<Held> = Reader::open(&new).unwrap().map(Result::unwrap).collect();
            assert_eq!(got, want.into_values().collect::<Vec<_>>(), "case {case}");
        }
    }
}
