//! The completed jobs' rows of the `jobs` table as a Parquet file that
//! the worker reads itself. Built from the store's summaries when its
//! completed jobs or the columnar generation change, kept while they do
//! not, and named in each query's request: a query sends only the jobs
//! the store has not completed over the worker's pipe (the completed
//! ones were 245 MB a query there at a million jobs), and the worker
//! reads only the columns and row groups the query needs.
//!
//! Parquet, written by the columnar history's own writer
//! (`bjh_columnar::write_parquet`), rather than Arrow's IPC file: the
//! other tables are Parquet, so one reader (DataFusion's listing table)
//! serves all of them, its row-group statistics skip what a filter on
//! `job_id` or a time cannot match, and the cluster engine's executors
//! read the same file.
//!
//! Each build is a file of its own, `<columnar>/sql-jobs/jobs-*.parquet`,
//! removed when it is replaced and the last query that named it has its
//! answer. A file left by a process that died is removed by the next
//! engine's start once an hour old ([`crate::cluster::sweep`]); a kept
//! file found missing or changed is built again. Where it cannot be
//! written (a folder planted as a link, an unwritable or full disk), the
//! rows go over the pipe as before: a query never fails for it.

use datafusion::arrow::array::RecordBatch;
use std::path::Path;

/// The folder of the files, under the columnar history's.
pub const JOBS_DIR: &str = "sql-jobs";

/// One build of the completed jobs' rows, as a file; removed when
/// dropped.
#[derive(Debug)]
pub(crate) struct JobsFile {
    path: tempfile::TempPath,
    /// Its inode, length and modification time as written.
    written: Written,
    /// Its name relative to the columnar folder, as requests name files.
    pub(crate) relative: String,
}

/// What tells a file apart from another put in its place.
type Written = (u64, u64, Option<std::time::SystemTime>);

fn written(meta: &std::fs::Metadata) -> Written {
    use std::os::unix::fs::MetadataExt;
    (meta.ino(), meta.len(), meta.modified().ok())
}

impl JobsFile {
    /// Writes `batches` as a new file under `root`'s [`JOBS_DIR`], each
    /// taken as the one before is written.
    pub(crate) fn write(
        root: &Path,
        batches: impl IntoIterator<Item = RecordBatch>,
    ) -> Result<Self, String> {
        // Executors of the cluster engine read the files too.
        let dir = crate::cluster::shared_folder(root, JOBS_DIR)?;
        let mut file = tempfile::Builder::new()
            .prefix("jobs-")
            .suffix(".parquet")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(&dir)
            .map_err(|e| e.to_string())?;
        let mut out = std::io::BufWriter::new(file.as_file_mut());
        bjh_columnar::write_parquet(&mut out, &bjh_columnar::tables::JOBS, batches)
            .map_err(|e| e.to_string())?;
        std::io::Write::flush(&mut out).map_err(|e| e.to_string())?;
        drop(out);
        let written = written(&file.as_file().metadata().map_err(|e| e.to_string())?);
        let path = file.into_temp_path();
        let relative = path
            .strip_prefix(root)
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            path,
            written,
            relative,
        })
    }

    /// Whether the file is still there as it was written (a sweep by
    /// another process over the same folder may have removed it; a file
    /// put in its place, even of its length, is not it).
    pub(crate) fn is_there(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.is_file() && written(&m) == self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> RecordBatch {
        bjh_columnar::tables::jobs_batch(&[])
    }

    #[test]
    fn a_file_goes_with_its_last_holder_and_a_planted_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let file = std::sync::Arc::new(JobsFile::write(root.path(), [batch()]).unwrap());
        let path = root.path().join(&file.relative);
        assert!(file.is_there() && path.is_file());
        assert!(file.relative.starts_with(JOBS_DIR));
        let held = file.clone();
        drop(file);
        assert!(path.is_file(), "a query still holds it");
        drop(held);
        assert!(!path.exists(), "removed with its last holder");

        // Swapped under us for a file of the same length: not it (the
        // caller builds it again).
        let file = JobsFile::write(root.path(), [batch()]).unwrap();
        let path = root.path().join(&file.relative);
        let swapped = root.path().join("swapped");
        std::fs::write(
            &swapped,
            vec![b'x'; std::fs::metadata(&path).unwrap().len() as usize],
        )
        .unwrap();
        std::fs::rename(&swapped, &path).unwrap();
        assert!(!file.is_there());
        drop(file);

        // Left by a process that died: swept at an engine's start once old.
        let left = JobsFile::write(root.path(), [batch()])
            .unwrap()
            .path
            .keep()
            .unwrap();
        assert_eq!(
            crate::cluster::sweep(root.path(), crate::cluster::STAGED_LEFTOVER),
            0
        );
        assert!(left.is_file());
        assert_eq!(
            crate::cluster::sweep(root.path(), std::time::Duration::ZERO),
            1
        );
        assert!(!left.exists());

        // A link planted in the folder's place: nothing written through it.
        let elsewhere = tempfile::tempdir().unwrap();
        let planted = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), planted.path().join(JOBS_DIR)).unwrap();
        let refused = JobsFile::write(planted.path(), [batch()]).unwrap_err();
        assert!(refused.contains("not a folder"), "{refused}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
