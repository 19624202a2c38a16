//! The history grades its own replays: two runs of one recurring query
//! (same query hash), one after the other, are an experiment that already
//! happened. The earlier run's replay at the later run's shape is a
//! prediction, and the later run's time is what happened
//! (`GET /api/whatif/accuracy`). Pairs on the same shape are graded too:
//! their error is the run-to-run noise the other kinds are read against.
//!
//! A pair whose runs computed different partitions (their widest stages
//! differ: `datafusion.execution.target_partitions` changed between them,
//! `whatif::Work::partitions`) ran different tasks: a replay of the
//! earlier run's tasks does not predict the later, and no what-if claims
//! to. Such pairs are graded apart (`partitions_changed`, kinds
//! `partitions` and `partitions and shape`), in neither the cross-shape
//! figures nor the noise, so that a user's change of setting does not pass
//! for the model's error.
//!
//! A query whose replays were off by a median of more than
//! [`UNRELIABLE_ERROR`] over at least [`UNRELIABLE_MIN_PAIRS`] pairs (of
//! any kind: a query whose runs differ that much on one shape cannot be
//! predicted on another either) is `unreliable`, and its predictions say
//! so.

use crate::whatif::Shape;
use bjh_format::JobState;
use bjh_store::query::JobFacts;
use itertools::Itertools;
use serde::Serialize;
use std::collections::BTreeMap;

/// One graded pair: run `a`, then run `b` of the same query.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Pair {
    /// The query hash (16 hex digits).
    pub query_hash: String,
    /// The earlier run.
    pub a: String,
    /// The later run.
    pub b: String,
    /// The shape `a` ran on.
    pub shape_a: Shape,
    /// The shape `b` ran on.
    pub shape_b: Shape,
    /// `a` replayed on `b`'s shape (ms).
    pub predicted_ms: u64,
    /// What `b` took (ms).
    pub actual_ms: u64,
    /// What `a` took: the naive prediction (ms).
    pub naive_ms: u64,
    /// The partitions of `a`'s widest stage.
    pub partitions_a: u64,
    /// The partitions of `b`'s widest stage.
    pub partitions_b: u64,
}

impl Pair {
    /// What changed between the runs: `same shape`, `executors`, `slots`
    /// or `executors and slots`; `partitions` or `partitions and shape`
    /// when the runs computed different partitions.
    pub fn kind(&self) -> &'static str {
        let (a, b) = (self.shape_a, self.shape_b);
        if self.partitions_changed() {
            return if a == b {
                "partitions"
            } else {
                "partitions and shape"
            };
        }
        match (a.executors == b.executors, a.slots == b.slots) {
            (true, true) => "same shape",
            (false, true) => "executors",
            (true, false) => "slots",
            (false, false) => "executors and slots",
        }
    }

    /// Whether the runs computed different partitions (see the module).
    pub fn partitions_changed(&self) -> bool {
        self.partitions_a != self.partitions_b
    }

    /// `|predicted - actual| / actual`.
    pub fn error(&self) -> f64 {
        relative(self.predicted_ms, self.actual_ms)
    }

    /// The naive prediction's error.
    pub fn naive_error(&self) -> f64 {
        relative(self.naive_ms, self.actual_ms)
    }
}

/// `|got - want| / want` (a `want` of 0 read as 1 ms).
fn relative(got: u64, want: u64) -> f64 {
    (got as f64 - want as f64).abs() / want.max(1) as f64
}

/// How far a set of pairs' predictions were off, as fractions.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Errors {
    /// Pairs graded.
    pub pairs: usize,
    /// The median of `|predicted - actual| / actual`.
    pub median_error: f64,
    /// Its 90th percentile (nearest rank).
    pub p90_error: f64,
    /// The median error of the naive prediction (`b` takes what `a`
    /// took), beside it.
    pub naive_median_error: f64,
}

impl Errors {
    fn of<'a>(pairs: impl Iterator<Item = &'a Pair>) -> Self {
        let (errors, naive): (Vec<f64>, Vec<f64>) =
            pairs.map(|p| (p.error(), p.naive_error())).unzip();
        Self {
            pairs: errors.len(),
            median_error: rank(errors.clone(), 0.5),
            p90_error: rank(errors, 0.9),
            naive_median_error: rank(naive, 0.5),
        }
    }
}

/// The `q`-quantile by nearest rank, rounded to four decimals; 0 for none.
fn rank(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let at = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    (v[at] * 10_000.0).round() / 10_000.0
}

/// A query's replays are unreliable past this median error...
pub const UNRELIABLE_ERROR: f64 = 0.25;
/// ...over at least this many graded pairs.
pub const UNRELIABLE_MIN_PAIRS: usize = 3;

/// One query's grades.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct QueryGrades {
    /// The query hash.
    pub query_hash: String,
    /// The query's label (`bjh_format::label`), when known.
    pub query_label: Option<String>,
    /// All its pairs, whatever changed.
    pub all: Errors,
    /// Its replays were off by a median over [`UNRELIABLE_ERROR`] in at
    /// least [`UNRELIABLE_MIN_PAIRS`] pairs (of those on the same
    /// partitions).
    pub unreliable: bool,
    /// Its pairs on different shapes, the same partitions.
    pub across_shapes: Errors,
    /// Its pairs on the same shape and partitions: the noise.
    pub same_shape: Errors,
    /// Its pairs whose runs computed different partitions.
    pub partitions_changed: Errors,
}

/// `GET /api/whatif/accuracy`'s answer.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Accuracy {
    /// Every pair on different shapes, the same partitions.
    pub across_shapes: Errors,
    /// Every pair on the same shape and partitions: the run-to-run noise.
    pub same_shape: Errors,
    /// Every pair whose runs computed different partitions: not what a
    /// replay predicts, shown apart.
    pub partitions_changed: Errors,
    /// By what changed between the runs.
    pub by_kind: BTreeMap<String, Errors>,
    /// By query, most pairs first.
    pub queries: Vec<QueryGrades>,
    /// The pairs themselves, the newest first.
    pub pairs: Vec<Pair>,
}

/// Grades `pairs` (the newest first).
pub fn grade(pairs: Vec<Pair>) -> Accuracy {
    let across = |p: &&Pair| p.shape_a != p.shape_b && !p.partitions_changed();
    let same = |p: &&Pair| p.shape_a == p.shape_b && !p.partitions_changed();
    let changed = |p: &&Pair| p.partitions_changed();
    let mut kinds: BTreeMap<&str, Vec<&Pair>> = BTreeMap::new();
    let mut queries: BTreeMap<&str, Vec<&Pair>> = BTreeMap::new();
    for p in &pairs {
        kinds.entry(p.kind()).or_default().push(p);
        queries.entry(&p.query_hash).or_default().push(p);
    }
    let mut by_query: Vec<QueryGrades> = queries
        .into_iter()
        .map(|(hash, ps)| {
            let kept = Errors::of(ps.iter().copied().filter(|p| !p.partitions_changed()));
            QueryGrades {
                query_hash: hash.to_string(),
                query_label: bjh_format::query_hash::parse_hash(hash)
                    .and_then(bjh_store::labels::get)
                    .map(|l| l.to_string()),
                unreliable: kept.pairs >= UNRELIABLE_MIN_PAIRS
                    && kept.median_error > UNRELIABLE_ERROR,
                all: Errors::of(ps.iter().copied()),
                across_shapes: Errors::of(ps.iter().copied().filter(across)),
                same_shape: Errors::of(ps.iter().copied().filter(same)),
                partitions_changed: Errors::of(ps.iter().copied().filter(changed)),
            }
        })
        .collect();
    by_query.sort_by_key(|q| std::cmp::Reverse(q.all.pairs));
    Accuracy {
        across_shapes: Errors::of(pairs.iter().filter(across)),
        same_shape: Errors::of(pairs.iter().filter(same)),
        partitions_changed: Errors::of(pairs.iter().filter(changed)),
        by_kind: kinds
            .into_iter()
            .map(|(k, ps)| (k.to_string(), Errors::of(ps.into_iter())))
            .collect(),
        queries: by_query,
        pairs,
    }
}

/// A completed run as the pairs name it: its query hash, start and id.
pub type Run = (u64, u64, String);

/// The newest `limit` pairs of consecutive completed runs of one query
/// (consecutive by start, then id), the newest later run first, from
/// `jobs` walked by query hash (each query's runs one after another, in
/// any order among themselves, as `LogStore::with_completed_by_query`
/// walks them). What stays in memory is one query's runs and the pairs
/// kept, whatever the number of runs (`itertools`' bounded heap).
pub fn newest_pairs<J>(jobs: impl Iterator<Item = J>, limit: usize) -> Vec<(Run, Run)>
where
    J: std::ops::Deref,
    J::Target: JobFacts,
{
    let completed = jobs.filter(|j| j.state() == JobState::Completed && j.query_hash() != 0);
    let by_query = completed.chunk_by(|j| j.query_hash());
    (&by_query)
        .into_iter()
        .flat_map(|(hash, runs)| {
            let mut runs: Vec<Run> = runs
                .map(|j| (hash, j.start_time(), j.job_id().to_string()))
                .collect();
            runs.sort_unstable();
            let pairs: Vec<(Run, Run)> = (runs.windows(2))
                .map(|w| (w[0].clone(), w[1].clone()))
                .collect();
            pairs
        })
        .k_largest_by(limit, |(_, x), (_, y)| (x.1, &x.2).cmp(&(y.1, &y.2)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: (u32, u32), b: (u32, u32), predicted_ms: u64, actual_ms: u64) -> Pair {
        let shape = |(executors, slots)| Shape { executors, slots };
        Pair {
            query_hash: "q".into(),
            a: "a".into(),
            b: "b".into(),
            shape_a: shape(a),
            shape_b: shape(b),
            predicted_ms,
            actual_ms,
            naive_ms: 1_000,
            partitions_a: 8,
            partitions_b: 8,
        }
    }

    #[test]
    fn pairs_are_graded_by_what_changed() {
        // Worked by hand: errors 0.1, 0.3 and 0.5 across shapes; 0.02 on
        // the same shape; naive errors 0, 1 and 1 across.
        let pairs = vec![
            pair((1, 1), (2, 1), 1_100, 1_000),
            pair((2, 1), (1, 2), 650, 500),
            pair((1, 2), (1, 1), 750, 500),
            pair((1, 1), (1, 1), 980, 1_000),
        ];
        let graded = grade(pairs);
        assert_eq!(graded.across_shapes.pairs, 3);
        assert_eq!(graded.across_shapes.median_error, 0.3);
        assert_eq!(graded.across_shapes.p90_error, 0.5);
        assert_eq!(graded.across_shapes.naive_median_error, 1.0);
        assert_eq!(graded.same_shape.pairs, 1);
        assert_eq!(graded.same_shape.median_error, 0.02);
        let kinds: Vec<(&str, usize)> = graded
            .by_kind
            .iter()
            .map(|(k, e)| (k.as_str(), e.pairs))
            .collect();
        assert_eq!(
            kinds,
            [
                ("executors", 1),
                ("executors and slots", 1),
                ("same shape", 1),
                ("slots", 1)
            ]
        );
        assert_eq!(graded.queries.len(), 1);
        assert_eq!(graded.queries[0].across_shapes.pairs, 3);
        // Errors 0.02, 0.1, 0.3, 0.5: a median (nearest rank) of 0.1.
        assert_eq!(graded.queries[0].all.median_error, 0.1);
        assert!(!graded.queries[0].unreliable);
        let empty = grade(Vec::new());
        assert_eq!(
            (empty.across_shapes.pairs, empty.across_shapes.median_error),
            (0, 0.0)
        );
    }

    /// Worked by hand: errors 0.3, 0.4 and 0.5 (median 0.4) over three
    /// pairs is unreliable; the same query's two pairs off by 0.9 are too
    /// few to say; three pairs with a median of exactly the bound are not.
    #[test]
    fn a_query_whose_replays_were_far_off_is_unreliable() {
        let off = |hash: &str, errors: &[f64]| -> Vec<Pair> {
            errors
                .iter()
                .map(|e| Pair {
                    query_hash: hash.into(),
                    ..pair((1, 1), (2, 1), (1_000.0 * (1.0 + e)) as u64, 1_000)
                })
                .collect()
        };
        let mut pairs = off("far", &[0.3, 0.4, 0.5]);
        pairs.extend(off("few", &[0.9, 0.9]));
        pairs.extend(off("edge", &[0.1, 0.25, 0.6]));
        let graded = grade(pairs);
        let unreliable = |hash: &str| {
            let q = graded
                .queries
                .iter()
                .find(|q| q.query_hash == hash)
                .unwrap();
            (q.all.pairs, q.unreliable)
        };
        assert_eq!(unreliable("far"), (3, true));
        assert_eq!(unreliable("few"), (2, false));
        assert_eq!(unreliable("edge"), (3, false));
    }

    /// Worked by hand: a pair whose later run computed 16 partitions
    /// where the earlier computed 8 is graded apart, as `partitions` on
    /// one shape and `partitions and shape` across; the cross-shape
    /// figures and the noise keep only the pairs on 8, and three such
    /// pairs far off do not make the query unreliable.
    #[test]
    fn pairs_whose_partitions_changed_are_graded_apart() {
        let changed = |a, b, predicted_ms| Pair {
            partitions_b: 16,
            ..pair(a, b, predicted_ms, 1_000)
        };
        let pairs = vec![
            pair((1, 1), (2, 1), 1_100, 1_000),
            pair((1, 1), (1, 1), 1_020, 1_000),
            changed((1, 1), (1, 1), 2_000),
            changed((1, 1), (2, 1), 3_000),
            changed((2, 1), (1, 2), 4_000),
        ];
        assert_eq!(pairs[2].kind(), "partitions");
        assert_eq!(pairs[3].kind(), "partitions and shape");
        let graded = grade(pairs);
        assert_eq!(
            (
                graded.across_shapes.pairs,
                graded.across_shapes.median_error
            ),
            (1, 0.1)
        );
        assert_eq!(
            (graded.same_shape.pairs, graded.same_shape.median_error),
            (1, 0.02)
        );
        // Errors 1, 2 and 3.
        let apart = &graded.partitions_changed;
        assert_eq!(
            (apart.pairs, apart.median_error, apart.p90_error),
            (3, 2.0, 3.0)
        );
        assert_eq!(graded.by_kind["partitions"].pairs, 1);
        assert_eq!(graded.by_kind["partitions and shape"].pairs, 2);
        let q = &graded.queries[0];
        assert_eq!((q.all.pairs, q.partitions_changed.pairs), (5, 3));
        assert!(!q.unreliable, "two pairs on one partitioning say nothing");
    }

    /// The newest pairs, found query by query a few at a time, are those
    /// of every completed run sorted at once (hash, start, id), paired
    /// within a hash and the newest later runs kept: the route's way
    /// before the walk by query, made here.
    #[test]
    fn the_newest_pairs_are_those_of_every_run_sorted_at_once() {
        use bjh_store::query::Facts;
        let mut r = crate::below(3);
        let states = [JobState::Completed, JobState::Completed, JobState::Failed];
        let jobs: Vec<Facts> = (0..2_000)
            .map(|i| {
                let start = r(5_000);
                Facts {
                    job_id: format!("j{:04}", r(10_000) * 10 + i % 10).into(),
                    job_name: "".into(),
                    state: states[r(3) as usize],
                    queued_time: start,
                    start_time: start,
                    end_time: start + 1,
                    query_hash: r(150),
                }
            })
            .collect();
        let mut runs: Vec<Run> = (jobs.iter())
            .filter(|j| j.state == JobState::Completed && j.query_hash != 0)
            .map(|j| (j.query_hash, j.start_time, j.job_id.to_string()))
            .collect();
        runs.sort_unstable();
        let mut want: Vec<(Run, Run)> = (runs.windows(2))
            .filter(|w| w[0].0 == w[1].0)
            .map(|w| (w[0].clone(), w[1].clone()))
            .collect();
        want.sort_by(|(_, x), (_, y)| (y.1, &y.2).cmp(&(x.1, &x.2)));
        // Walked by hash, each query's runs in the order given.
        let mut walked: Vec<&Facts> = jobs.iter().collect();
        walked.sort_by_key(|j| j.query_hash);
        for limit in [1, 7, 50, 10_000] {
            let got = newest_pairs(walked.iter().copied(), limit);
            assert_eq!(got, want[..limit.min(want.len())], "limit {limit}");
        }
    }
}
