//! A segment's jobs walked in its order by query hash: each query's runs
//! one after another, so that a caller grouping by query (the recurring
//! queries, the what-if accuracy route's pairs) keeps one query's runs at
//! a time rather than every query's; and in its order by id, so that a
//! caller joining the jobs with another list sorted by id (the columnar
//! history's index of the jobs it holds) reads both once, in step. The
//! orders are two of the three each segment already holds; a walk reads
//! one a block of row numbers at a time, then each row and its record.

use super::{BLOCK, Perm, Segment, partition};
use crate::snapshot::IndexError;
use crate::summary::JobSummary;
use std::ops::RangeInclusive;
use std::sync::Arc;

impl Segment {
    /// The jobs whose query hash is in `hashes`, by query hash (lowest
    /// first; one query's runs in the default order). A read that fails
    /// is an error in its place and the walk goes on after it (a block of
    /// row numbers that cannot be read is one error for the block).
    pub(super) fn jobs_by_query(
        &self,
        hashes: RangeInclusive<u64>,
    ) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        let hash_of = |i: usize| -> Result<u64, IndexError> {
            Ok(self.fixed(self.perm(Perm::Query, i)?)?.hash)
        };
        let (from, to) = (*hashes.start(), *hashes.end());
        let bounds = partition(self.rows, |i| Ok(hash_of(i)? < from)).and_then(|lo| {
            let hi = partition(self.rows, |i| Ok(hash_of(i)? <= to))?;
            Ok((lo, hi.max(lo)))
        });
        let (lo, hi, failed) = match bounds {
            Ok((lo, hi)) => (lo, hi, None),
            Err(e) => (0, 0, Some(Err(e))),
        };
        failed.into_iter().chain(self.walk(Perm::Query, lo, hi))
    }

    /// Every job, by id (bytewise), as [`Segment::jobs_by_query`] walks.
    pub(super) fn jobs_by_id(
        &self,
    ) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        self.walk(Perm::Id, 0, self.rows)
    }

    /// The jobs of entries `lo..hi` of the order `which`, a block of row
    /// numbers read at a time; a block that cannot be read is one error.
    fn walk(
        &self,
        which: Perm,
        lo: usize,
        hi: usize,
    ) -> impl Iterator<Item = Result<Arc<JobSummary>, IndexError>> + '_ {
        (lo..hi).step_by(BLOCK).flat_map(move |at| {
            match self.rows_of(which, at, BLOCK.min(hi - at)) {
                Ok(rows) => rows.into_iter().map(|row| self.summary(row)).collect(),
                Err(e) => vec![Err(e)],
            }
        })
    }

    /// The row numbers `at..at + n` of the order `which`, in one read,
    /// each checked to be a row of the segment.
    fn rows_of(&self, which: Perm, at: usize, n: usize) -> Result<Vec<usize>, IndexError> {
        let bytes = self.read(self.at[which as usize] + (at * 4) as u64, n * 4)?;
        (bytes.chunks_exact(4))
            .map(|b| {
                let row = u32::from_le_bytes(b.try_into().expect("4")) as usize;
                (row < self.rows)
                    .then_some(row)
                    .ok_or(IndexError::Damaged("a row number past the end"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::jobs;
    use super::*;
    use crate::query::JobFacts;
    use std::cmp::Reverse;

    /// A row number past the end in the second block of the order by
    /// query is one error for that block; every other job is walked, by
    /// hash. The oracle: the segment's jobs sorted by hash, then in the
    /// default order (newest queued first, then id), made here.
    #[test]
    fn a_damaged_block_of_the_order_by_query_is_one_error_and_the_walk_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let all = jobs(500, 61);
        let path = dir.path().join("s");
        Segment::write(&path, &all.iter().map(|j| &**j).collect::<Vec<_>>()).unwrap();
        let mut sorted: Vec<&Arc<JobSummary>> = all.iter().collect();
        sorted.sort_by_key(|j| (j.query_hash(), Reverse(j.position_key()), j.job_id()));
        let ids = |js: &[&Arc<JobSummary>]| -> Vec<String> {
            js.iter().map(|j| j.job_id().to_string()).collect()
        };
        let whole = Segment::open(&path).unwrap();
        let walked: Vec<Arc<JobSummary>> = (whole.jobs_by_query(0..=u64::MAX))
            .map(Result::unwrap)
            .collect();
        assert_eq!(ids(&walked.iter().collect::<Vec<_>>()), ids(&sorted));
        // The hashes 1 to 3: the range's jobs alone.
        let some: Vec<String> = (whole.jobs_by_query(1..=3))
            .map(|j| j.unwrap().job_id().to_string())
            .collect();
        let want: Vec<&Arc<JobSummary>> = (sorted.iter().copied())
            .filter(|j| (1..=3).contains(&j.query_hash()))
            .collect();
        assert_eq!(some, ids(&want));
        // Entry BLOCK + 1 of the order made to name a row past the end.
        let at = whole.at[Perm::Query as usize] as usize + (BLOCK + 1) * 4;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, bytes).unwrap();
        let damaged = Segment::open(&path).unwrap();
        let walked: Vec<_> = damaged.jobs_by_query(0..=u64::MAX).collect();
        assert_eq!(walked.iter().filter(|j| j.is_err()).count(), 1);
        let got: Vec<Arc<JobSummary>> = walked.into_iter().flatten().collect();
        let mut want = sorted.clone();
        want.drain(BLOCK..2 * BLOCK);
        assert_eq!(ids(&got.iter().collect::<Vec<_>>()), ids(&want));
    }
}
