//! Recurring queries: the finished jobs of a history grouped by query hash
//! (`GET /api/queries`), each group with its run count, last run, p50 and
//! p95 duration, and the trend of its last runs.

use crate::stats::{quantile, ratio};
use bjh_format::JobState;
use bjh_format::query_hash::hash_text;
use bjh_store::query::JobFacts;
use itertools::Itertools;
use serde::Serialize;
use std::cmp::Ordering;

/// Runs shown per query, and looked at for the trend.
pub const RECENT_RUNS: usize = 10;
/// The last run this much slower than the median of the runs before it
/// is a `slower` trend (and this much faster, inverted, `faster`).
pub const TREND_RATIO: f64 = 1.25;

/// One run of a query.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct RecurringRun {
    /// The job.
    pub job_id: String,
    /// Its start (epoch millis).
    pub start_time: u64,
    /// End minus start (ms).
    pub duration_ms: u64,
    /// Its status word.
    pub status: &'static str,
    /// The scheduler that ran it; `null` when its log does not say.
    pub scheduler_id: Option<String>,
}

/// One row of `GET /api/queries`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct QueryRow {
    /// The query hash.
    pub query_hash: String,
    /// The last run's job name.
    pub job_name: String,
    /// The query's label, made from its plan (`bjh_format::label`); `null`
    /// when none is known. Shown where the name is empty.
    pub query_label: Option<String>,
    /// Finished runs.
    pub runs: usize,
    /// Of which failed or cancelled.
    pub unsuccessful_runs: usize,
    /// The last run (by start time).
    pub last_job_id: String,
    /// Its start.
    pub last_run: u64,
    /// Its status word.
    pub last_status: &'static str,
    /// Median duration of the runs (ms; nearest rank).
    pub p50_duration_ms: u64,
    /// 95th percentile duration (ms; nearest rank).
    pub p95_duration_ms: u64,
    /// `slower`, `faster` or `steady`: the last run against the median of
    /// the (up to nine) runs before it; `too_few_runs` with fewer than 3.
    pub trend: &'static str,
    /// The last run's duration over that median.
    pub trend_ratio: Option<f64>,
    /// The last runs, oldest first.
    pub recent: Vec<RecurringRun>,
    /// The schedulers that ran it, sorted (runs whose logs do not say are
    /// not counted).
    pub scheduler_ids: Vec<String>,
}

/// One query's runs as they are walked: what its row needs, not every
/// run (a duration each for the percentiles, the last runs, the last
/// run's name).
#[derive(Default)]
struct Group {
    runs: usize,
    unsuccessful: usize,
    durations: Vec<u64>,
    /// At most [`RECENT_RUNS`], in no order.
    recent: Vec<RecurringRun>,
    /// The name of the last run (by start, then id).
    name: String,
    schedulers: std::collections::BTreeSet<String>,
}

fn run_key(r: &RecurringRun) -> (u64, &str) {
    (r.start_time, &r.job_id)
}

impl Group {
    fn add(&mut self, run: RecurringRun, name: &str) {
        self.runs += 1;
        self.unsuccessful += usize::from(run.status != "Completed");
        self.durations.push(run.duration_ms);
        if let Some(id) = &run.scheduler_id
            && !self.schedulers.contains(id)
        {
            self.schedulers.insert(id.clone());
        }
        let last = self.recent.iter().map(run_key).max();
        if last.is_none_or(|last| run_key(&run) > last) {
            self.name = name.to_string();
        }
        self.recent.push(run);
        if self.recent.len() > RECENT_RUNS {
            let (oldest, _) = (self.recent.iter().enumerate())
                .min_by(|a, b| run_key(a.1).cmp(&run_key(b.1)))
                .expect("more than one run");
            self.recent.swap_remove(oldest);
        }
    }

    fn row(mut self, hash: u64) -> QueryRow {
        self.recent
            .sort_by(|a, b| (a.start_time, &a.job_id).cmp(&(b.start_time, &b.job_id)));
        self.durations.sort_unstable();
        let last = self.recent.last().expect("a group has a run").clone();
        let (trend, trend_ratio) = trend(&self.recent);
        QueryRow {
            query_hash: hash_text(hash),
            job_name: self.name,
            query_label: bjh_store::labels::get(hash).map(|l| l.to_string()),
            runs: self.runs,
            unsuccessful_runs: self.unsuccessful,
            last_job_id: last.job_id,
            last_run: last.start_time,
            last_status: last.status,
            p50_duration_ms: quantile(&self.durations, 0.5),
            p95_duration_ms: quantile(&self.durations, 0.95),
            trend,
            trend_ratio,
            recent: self.recent,
            scheduler_ids: self.schedulers.into_iter().collect(),
        }
    }
}

/// The recurring queries of `jobs` (finished ones with a query hash; the
/// rest are left out), walked by query hash: each query's runs one after
/// another, in any order among themselves, as
/// `LogStore::with_completed_by_query` walks them. Returns how many
/// queries there are and the `keep` greatest by `rank`, greatest first.
/// What stays in memory is the query being grouped (a duration a run, for
/// exact percentiles, and its last runs) and the rows kept, whatever the
/// number of queries: the top rows through `itertools`' bounded heap
/// (`k_largest_by`), not every row sorted.
pub fn recurring_top<J>(
    jobs: impl Iterator<Item = J>,
    keep: usize,
    rank: impl FnMut(&QueryRow, &QueryRow) -> Ordering,
) -> (usize, Vec<QueryRow>)
where
    J: std::ops::Deref,
    J::Target: JobFacts,
{
    let finished = jobs.filter(|job| {
        let done = matches!(
            job.state(),
            JobState::Completed | JobState::Failed | JobState::Cancelled
        );
        done && job.query_hash() != 0
    });
    let mut last = 0;
    let by_query = finished
        .inspect(|job| {
            debug_assert!(job.query_hash() >= last, "walked by query hash");
            last = job.query_hash();
        })
        .chunk_by(|job| job.query_hash());
    let mut total = 0;
    let rows = (&by_query)
        .into_iter()
        .map(|(hash, runs)| {
            let mut group = Group::default();
            for job in runs {
                let run = RecurringRun {
                    job_id: job.job_id().to_string(),
                    start_time: job.start_time(),
                    duration_ms: job.duration().unwrap_or(0),
                    status: job.state().status_word(),
                    scheduler_id: job.scheduler_id().map(str::to_string),
                };
                group.add(run, job.job_name());
            }
            total += 1;
            group.row(hash)
        })
        .k_largest_by(keep, rank)
        .collect();
    (total, rows)
}

/// The rank of `GET /api/queries`: the most recently run first (then the
/// greater hash).
pub fn most_recent(a: &QueryRow, b: &QueryRow) -> Ordering {
    (a.last_run, &a.query_hash).cmp(&(b.last_run, &b.query_hash))
}

/// The rank of the job-level metrics: the most runs first (then the most
/// recently run, then the greater hash).
pub fn most_runs(a: &QueryRow, b: &QueryRow) -> Ordering {
    (a.runs, a.last_run, &a.query_hash).cmp(&(b.runs, b.last_run, &b.query_hash))
}

fn trend(recent: &[RecurringRun]) -> (&'static str, Option<f64>) {
    let Some((last, before)) = recent.split_last() else {
        return ("too_few_runs", None);
    };
    if before.len() < 2 {
        return ("too_few_runs", None);
    }
    let mut earlier: Vec<u64> = before.iter().map(|r| r.duration_ms).collect();
    earlier.sort_unstable();
    let r = ratio(last.duration_ms, quantile(&earlier, 0.5));
    let word = if r >= TREND_RATIO {
        "slower"
    } else if r <= 1.0 / TREND_RATIO {
        "faster"
    } else {
        "steady"
    };
    (word, Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bjh_store::query::Facts;
    use std::cmp::Reverse;
    use std::collections::HashMap;

    fn run(id: &str, hash: u64, state: JobState, start: u64, ms: u64) -> Facts {
        Facts {
            job_id: id.into(),
            job_name: format!("name of {id}").into(),
            state,
            queued_time: start,
            start_time: start,
            end_time: start + ms,
            query_hash: hash,
        }
    }

    /// Every query of `jobs`, the most recently run first: the jobs
    /// sorted by hash (a stable sort: each query's runs in the order
    /// given), as a store's walk by query gives them.
    fn grouped<'a>(jobs: impl Iterator<Item = &'a Facts>) -> Vec<QueryRow> {
        let mut jobs: Vec<&Facts> = jobs.collect();
        jobs.sort_by_key(|j| j.query_hash);
        let (total, rows) = recurring_top(jobs.into_iter(), usize::MAX, most_recent);
        assert_eq!(total, rows.len());
        rows
    }

    #[test]
    fn groups_by_hash_with_percentiles_and_trend() {
        let mut jobs: Vec<Facts> = (0..20)
            .map(|i| {
                run(
                    &format!("n{i:02}"),
                    1,
                    JobState::Completed,
                    1_000 * i,
                    100 + i,
                )
            })
            .collect();
        // The last nightly run is twice as slow, and failed.
        jobs.push(run("n20", 1, JobState::Failed, 50_000, 240));
        jobs.push(run("adhoc", 2, JobState::Completed, 60_000, 5));
        jobs.push(run("running", 2, JobState::Running, 70_000, 0));
        jobs.push(run("unplanned", 0, JobState::Failed, 80_000, 1));
        let rows = grouped(jobs.iter());
        assert_eq!(rows.len(), 2);
        let (adhoc, nightly) = (&rows[0], &rows[1]);
        assert_eq!((adhoc.runs, adhoc.trend), (1, "too_few_runs"));
        assert_eq!(nightly.runs, 21);
        assert_eq!(nightly.unsuccessful_runs, 1);
        assert_eq!(
            (nightly.last_job_id.as_str(), nightly.last_status),
            ("n20", "Failed")
        );
        // Durations 100..=119 and 240: nearest-rank p50 is the 11th (110),
        // p95 the 20th (119).
        assert_eq!(
            (nightly.p50_duration_ms, nightly.p95_duration_ms),
            (110, 119)
        );
        assert_eq!(nightly.recent.len(), RECENT_RUNS);
        assert_eq!(nightly.recent[0].job_id, "n11");
        // 240 against the median of 111..=119 (115).
        assert_eq!(nightly.trend, "slower");
        assert_eq!(nightly.trend_ratio, Some(2.09));
        assert_eq!(nightly.query_hash, "0000000000000001");
        assert_eq!(nightly.job_name, "name of n20");
        // A query's runs walked in any order among themselves (a store's
        // walk merges segments), the rows are the same.
        let json = |rows: &[QueryRow]| serde_json::to_string(rows).unwrap();
        for step in [7, 11, 13] {
            let n = jobs.len();
            let shuffled = (0..n).map(|i| &jobs[(i * step) % n]);
            let again = grouped(shuffled);
            assert_eq!(json(&again), json(&rows), "step {step}");
        }
        let reversed = grouped(jobs.iter().rev());
        assert_eq!(json(&reversed), json(&rows));
    }

    /// The top rows of many queries, kept a few at a time, are those a
    /// grouping of every run in a map finds (made here: each query's
    /// runs, unsuccessful runs, last run and nearest-rank median), ranked
    /// by either rank; the count is the map's.
    #[test]
    fn the_top_queries_are_those_every_run_grouped_in_a_map_ranks_first() {
        let mut r = crate::below(7);
        let states = [JobState::Completed, JobState::Failed, JobState::Running];
        let jobs: Vec<Facts> = (0..3_000)
            .map(|i| {
                let state = states[r(3) as usize];
                let (start, ms) = (r(50_000), r(10_000));
                run(&format!("j{i:04}"), r(400), state, start, ms)
            })
            .collect();
        type Oracle = (usize, usize, (u64, String), Vec<u64>);
        let mut map: HashMap<u64, Oracle> = HashMap::new();
        for j in jobs
            .iter()
            .filter(|j| j.query_hash != 0 && j.state != JobState::Running)
        {
            let e = map.entry(j.query_hash).or_default();
            e.0 += 1;
            e.1 += usize::from(j.state != JobState::Completed);
            e.2 = e.2.clone().max((j.start_time, j.job_id.to_string()));
            e.3.push(j.end_time - j.start_time);
        }
        let mut sorted: Vec<&Facts> = jobs.iter().collect();
        sorted.sort_by_key(|j| j.query_hash);
        let row_of = |hash: u64| {
            let (runs, unsuccessful, last, mut ds) = map[&hash].clone();
            ds.sort_unstable();
            let p50 = ds[ds.len().div_ceil(2) - 1];
            (hash_text(hash), runs, unsuccessful, last.1, p50)
        };
        let seen = |rows: &[QueryRow]| -> Vec<_> {
            (rows.iter())
                .map(|q| {
                    let (id, p50) = (q.last_job_id.clone(), q.p50_duration_ms);
                    (q.query_hash.clone(), q.runs, q.unsuccessful_runs, id, p50)
                })
                .collect()
        };
        let mut hashes: Vec<u64> = map.keys().copied().collect();
        hashes.sort_by_key(|h| Reverse((map[h].2.0, hash_text(*h))));
        let (total, rows) = recurring_top(sorted.iter().copied(), 25, most_recent);
        assert_eq!(total, map.len());
        let want: Vec<_> = hashes.iter().take(25).map(|&h| row_of(h)).collect();
        assert_eq!(seen(&rows), want);
        hashes.sort_by_key(|h| Reverse((map[h].0, map[h].2.0, hash_text(*h))));
        let (_, rows) = recurring_top(sorted.iter().copied(), 25, most_runs);
        let want: Vec<_> = hashes.iter().take(25).map(|&h| row_of(h)).collect();
        assert_eq!(seen(&rows), want);
    }
}
