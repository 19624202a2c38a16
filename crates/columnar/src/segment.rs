//! The columnar history's files: a segment's Parquet files (written
//! aside and renamed, one per table), their checks, their merge, and the
//! manifest. Every file is opened as a planted one is (`bjh_files`: no
//! link, no FIFO).

use super::*;

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
