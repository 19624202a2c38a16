//! Recurring queries: the finished jobs of a history grouped by query hash
//! (`GET /api/queries`), each group with its run count, last run, p50 and
//! p95 duration, and the trend of its last runs.

use crate::stats::{quantile, ratio};
use bjh_format::JobState;
use bjh_format::query_hash::hash_text;
use bjh_store::query::JobFacts;
use serde::Serialize;
use std::collections::HashMap;

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

/// Groups `jobs` (finished ones with a query hash; the rest are left out)
/// by query hash, most recently run first.
pub fn recurring<'a>(jobs: impl Iterator<Item = &'a (dyn JobFacts + 'a)>) -> Vec<QueryRow> {
    let mut groups: HashMap<u64, Vec<(RecurringRun, &'a str)>> = HashMap::new();
    for job in jobs {
        let finished = matches!(
            job.state(),
            JobState::Completed | JobState::Failed | JobState::Cancelled
        );
        if job.query_hash() == 0 || !finished {
            continue;
        }
        groups.entry(job.query_hash()).or_default().push((
            RecurringRun {
                job_id: job.job_id().to_string(),
                start_time: job.start_time(),
                duration_ms: job.duration().unwrap_or(0),
                status: job.state().status_word(),
                scheduler_id: job.scheduler_id().map(str::to_string),
            },
            job.job_name(),
        ));
    }
    let mut rows: Vec<QueryRow> = groups
        .into_iter()
        .map(|(hash, mut runs)| {
            runs.sort_by(|a, b| (a.0.start_time, &a.0.job_id).cmp(&(b.0.start_time, &b.0.job_id)));
            let mut durations: Vec<u64> = runs.iter().map(|r| r.0.duration_ms).collect();
            durations.sort_unstable();
            let (last, name) = runs.last().expect("a group has a run").clone();
            let recent: Vec<RecurringRun> = runs
                .iter()
                .skip(runs.len().saturating_sub(RECENT_RUNS))
                .map(|r| r.0.clone())
                .collect();
            let (trend, trend_ratio) = trend(&recent);
            let scheduler_ids: std::collections::BTreeSet<&str> = runs
                .iter()
                .filter_map(|r| r.0.scheduler_id.as_deref())
                .collect();
            let scheduler_ids = scheduler_ids.into_iter().map(str::to_string).collect();
            QueryRow {
                query_hash: hash_text(hash),
                job_name: name.to_string(),
                query_label: bjh_store::labels::get(hash).map(|l| l.to_string()),
                runs: runs.len(),
                unsuccessful_runs: runs.iter().filter(|r| r.0.status != "Completed").count(),
                last_job_id: last.job_id,
                last_run: last.start_time,
                last_status: last.status,
                p50_duration_ms: quantile(&durations, 0.5),
                p95_duration_ms: quantile(&durations, 0.95),
                trend,
                trend_ratio,
                recent,
                scheduler_ids,
            }
        })
        .collect();
    rows.sort_by(|a, b| (b.last_run, &b.query_hash).cmp(&(a.last_run, &a.query_hash)));
    rows
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
        let rows = recurring(jobs.iter().map(|j| j as &dyn JobFacts));
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
    }
}
