//! The columnar history's files: a segment's Parquet files (written
//! aside and renamed, one per table), their checks, their merge, and the
//! manifest. Every file is opened as a planted one is (`bjh_files`: no
//! link, no FIFO).
//!
//! **Invariant:** one process writes a folder: it holds an exclusive lock
//! on the folder (`flock` on the directory) while its history lives
//! (`folder`), and a
//! second process over the same folder keeps a private one instead, so
//! segment numbers never clash and the owner may remove, when it opens
//! the folder, every file its manifest does not name (`sweep_unnamed`).

use super::*;

/// The folder the history is kept in, the private folder it is (if so),
/// and the lock making it this process's alone (none for a private one):
/// `dir` (made absolute, created when missing) when it can be created
/// and locked; else a private folder of this process's own (a fresh
/// random name under the system's temporary directory, `0700`).
pub(super) fn folder(
    dir: Option<PathBuf>,
) -> (PathBuf, Option<tempfile::TempDir>, Option<std::fs::File>) {
    // Absolute: the SQL workers run in `/`, and a relative folder
    // (`--event-log-dir ./event-logs`) would name nothing there.
    let dir = dir.map(|d| std::path::absolute(&d).unwrap_or(d));
    let failed = match dir {
        None => None,
        Some(dir) => match std::fs::create_dir_all(&dir).and_then(|()| own(&dir)) {
            Ok(Some(lock)) => return (dir, None, Some(lock)),
            Ok(None) => Some((dir, "another process holds it".to_string())),
            Err(e) => Some((dir, e.to_string())),
        },
    };
    let private = tempfile::Builder::new()
        .prefix(".ballista-job-history.columnar-")
        .tempdir();
    match private {
        Ok(private) => {
            if let Some((dir, why)) = failed {
                log::warn!(
                    "history: cannot keep the columnar history in {} ({why}); keeping it in {} \
                     for this process",
                    dir.display(),
                    private.path().display()
                );
            }
            (private.path().to_path_buf(), Some(private), None)
        }
        Err(e) => {
            log::error!("history: no folder for the columnar history: {e}");
            (std::env::temp_dir().join(shared::FOLDER), None, None)
        }
    }
}

/// Takes `dir` for this process: an exclusive lock on the directory
/// itself (opened for reading), held while the file lives (the system
/// lets go of it when the process dies); `None` when another holds it.
fn own(dir: &Path) -> std::io::Result<Option<std::fs::File>> {
    let file = bjh_files::open_dir(dir)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Removes what is in the tables' and the index's folders under `dir`
/// but the files `m` names (segments and files written, renamed or
/// retired by a process that stopped before naming or deleting them;
/// temporaries; a folder planted there is left): how many. Only for the
/// folder's owner, as it opens it.
pub(super) fn sweep_unnamed(dir: &Path, m: &Manifest) -> usize {
    let mut named: HashSet<PathBuf> = (m.segments.iter())
        .flat_map(|s| TABLES.iter().map(|(table, _)| seg_path(dir, table, s.seq)))
        .collect();
    named.extend((m.index.as_ref()).map(|i| held::index_path(dir, i.seq)));
    let folders = TABLES.iter().map(|(table, _)| *table).chain(["index"]);
    let mut removed = 0;
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(dir.join(folder)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let unnamed = !named.contains(&path) && entry.file_type().is_ok_and(|t| !t.is_dir());
            if unnamed && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

pub(super) fn seg_path(dir: &Path, table: &str, seq: u64) -> PathBuf {
    dir.join(table).join(format!("seg-{seq:08}.parquet"))
}

/// Whether a segment's files are there with the sizes they were written
/// with (a cheap check; [`readable`] reads their footers).
pub(super) fn intact(dir: &Path, s: &Segment) -> bool {
    TABLES.iter().enumerate().all(|(t, (table, _))| {
        std::fs::symlink_metadata(seg_path(dir, table, s.seq))
            .is_ok_and(|m| s.sizes.get(t).is_none_or(|&size| m.len() == size))
    })
}

/// Whether `path` is a Parquet file whose footer reads.
pub(super) fn readable(path: &Path) -> bool {
    let Ok((file, _)) = bjh_files::open_regular(path) else {
        return false;
    };
    ParquetRecordBatchReaderBuilder::try_new(file).is_ok()
}

/// Columns whose dictionary codes are nearly all of their data: few
/// distinct values per row group, so zstd saves them little (0.4% of
/// `executor`, 11% of `duration_ms` in the SQL bench) while every read
/// pays for decompressing them. They are the columns most questions group
/// and average by; leaving them uncompressed made the bench's aggregate
/// about a tenth faster for a file 4% larger (`docs/performance.md`).
pub(super) const UNCOMPRESSED: [&str; 11] = [
    "job_id",
    "stage_id",
    "partition",
    "attempt",
    "executor",
    "status",
    "duration_ms",
    "position",
    "operator",
    "metric",
    "unit",
];

/// Row groups of [`ROW_GROUP`] rows, a dictionary tried on every column
/// (Parquet's default), zstd on every column but [`UNCOMPRESSED`].
/// Text-only dictionaries wrote a third faster and smaller files, but
/// both DataFusion and DuckDB then read the numbers slower
/// (`docs/performance.md`): the files are read far more often than
/// written.
pub(super) fn props() -> WriterProperties {
    let mut props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_compression(Compression::ZSTD(ZstdLevel::default()));
    for column in UNCOMPRESSED {
        props = props.set_column_compression(column.into(), Compression::UNCOMPRESSED);
    }
    props.build()
}

/// Writes `batches` as Parquet to `out`, each taken as the one before
/// is written (a row group's rows at most held), with the columnar files'
/// properties, and nothing synced: for a file derived from what is kept
/// elsewhere and built again whenever it is missing (the SQL `jobs`
/// table's file).
pub fn write_parquet(
    out: impl std::io::Write + Send,
    schema: &SchemaRef,
    batches: impl IntoIterator<Item = RecordBatch>,
) -> Result<(), ColumnarError> {
    let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(props()))?;
    for batch in batches {
        writer.write(&batch)?;
    }
    writer.close()?;
    Ok(())
}

/// Writes `batch` as the Parquet file `path` (aside, then renamed); gives
/// the BLAKE3 hash of its bytes, in hex.
pub fn write_file(
    path: &Path,
    schema: &SchemaRef,
    batch: &RecordBatch,
) -> Result<String, ColumnarError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io("creating a table's folder"))?;
    let mut hash = String::new();
    // Readable by others: a Ballista cluster may read these files.
    bjh_files::replace::<ColumnarError>(path, 0o644, |file| {
        let out = Hashing {
            inner: std::io::BufWriter::new(file),
            hasher: blake3::Hasher::new(),
        };
        let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(props()))?;
        writer.write(batch)?;
        // Writes the footer, and gives the writer back.
        let mut out = writer.into_inner()?;
        std::io::Write::flush(&mut out).map_err(io("writing a columnar file"))?;
        hash = out.hasher.finalize().to_hex().to_string();
        Ok(())
    })?;
    Ok(hash)
}

/// Writes the rows of `rows` as segment `seq`; gives it and the index's
/// rows of its jobs.
pub(super) fn write_segment(
    dir: &Path,
    seq: u64,
    mut rows: Vec<(String, JobRows)>,
) -> Result<(Segment, Vec<held::Held>), ColumnarError> {
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seg = Segment {
        seq,
        held: rows.len() as u64,
        ..Segment::default()
    };
    for (t, (table, schema)) in TABLES.iter().enumerate() {
        let batches: Vec<&RecordBatch> = rows
            .iter()
            .map(|(_, r)| match t {
                0 => &r.stages,
                1 => &r.tasks,
                _ => &r.operators,
            })
            .collect();
        let batch = concat_batches(schema, batches)?;
        if t == 1 {
            seg.rows = batch.num_rows() as u64;
        }
        let path = seg_path(dir, table, seq);
        seg.sums.push(write_file(&path, schema, &batch)?);
        seg.sizes
            .push(std::fs::symlink_metadata(&path).map_or(0, |m| m.len()));
    }
    let held = (rows.into_iter())
        .map(|(id, r)| held::Held {
            id,
            seq,
            totals: r.totals,
        })
        .collect();
    Ok((seg, held))
}

/// One segment of the rows of `old` but those of the jobs `gone` names
/// for each; `None` when none is left.
pub(super) fn merge_segments(
    dir: &Path,
    old: &[Segment],
    gone: &HashMap<u64, HashSet<String>>,
    seq: u64,
) -> Result<Option<Segment>, ColumnarError> {
    use datafusion::arrow::array::{Array, StringViewArray};
    let none = HashSet::new();
    let dropped = |s: &Segment| gone.get(&s.seq).unwrap_or(&none);
    let held: u64 = (old.iter())
        .map(|s| s.held.saturating_sub(dropped(s).len() as u64))
        .sum();
    if held == 0 {
        return Ok(None);
    }
    let mut seg = Segment {
        seq,
        held,
        ..Segment::default()
    };
    for (table, schema) in TABLES {
        let mut kept = Vec::new();
        for s in old {
            let drop = dropped(s);
            let (file, _) = bjh_files::open_regular(&seg_path(dir, table, s.seq))
                .map_err(io(format!("opening {table} segment {}", s.seq)))?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(file).and_then(|b| b.build())?;
            for batch in reader {
                let batch = batch?;
                let ids = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<StringViewArray>()
                    .ok_or_else(|| {
                        ColumnarError::Refused(format!(
                            "{table} segment {}: the job_id column is not text",
                            s.seq
                        ))
                    })?;
                let mask: datafusion::arrow::array::BooleanArray = (0..ids.len())
                    .map(|i| Some(!drop.contains(ids.value(i))))
                    .collect();
                kept.push(datafusion::arrow::compute::filter_record_batch(
                    &batch, &mask,
                )?);
            }
        }
        let batch = concat_batches(schema, &kept)?;
        // Sorted by job id again (the order of rows within a job is not kept).
        let order = datafusion::arrow::compute::sort_to_indices(batch.column(0), None, None)?;
        let batch = datafusion::arrow::compute::take_record_batch(&batch, &order)?;
        if table == "tasks" {
            seg.rows = batch.num_rows() as u64;
        }
        let path = seg_path(dir, table, seq);
        seg.sums.push(write_file(&path, schema, &batch)?);
        seg.sizes
            .push(std::fs::symlink_metadata(&path).map_or(0, |m| m.len()));
    }
    Ok(Some(seg))
}

pub(super) fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), ColumnarError> {
    std::fs::create_dir_all(dir).map_err(io("creating the columnar folder"))?;
    let bytes = serde_json::to_vec(m)?;
    bjh_files::replace::<std::io::Error>(&dir.join("manifest.json"), 0o644, |f| {
        std::io::Write::write_all(f, &bytes)
    })
    .map_err(io("writing the manifest"))
}
