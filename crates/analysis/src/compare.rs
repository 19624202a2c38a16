//! Two runs side by side (`GET /api/compare?a=&b=`): job-level deltas,
//! stages aligned by plan shape with their deltas, config keys that differ,
//! the physical plans' differences as a unified diff, and the findings one
//! run has and the other has not.

use crate::diagnosis::Diagnosis;
use crate::stats::ratio;
use bjh_format::query_hash::hash_text;
use bjh_format::stages::{StageAnswer, StagesAnswer};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// b is a regression when it took this much longer than a...
pub const REGRESSION_RATIO: f64 = 1.2;
/// ...and at least this many milliseconds longer.
pub const REGRESSION_MIN_MS: u64 = 1_000;
/// Plans longer than this (lines, either side) are not diffed.
pub const MAX_DIFF_LINES: usize = 5_000;

/// How long the plan diff may take before it settles for a coarser one.
const DIFF_BUDGET: std::time::Duration = std::time::Duration::from_millis(200);

/// One run, as the comparison reads it.
#[derive(Debug, Clone, Default)]
pub struct ComparedRun {
    /// The job.
    pub job_id: String,
    /// Its name (empty when it has none).
    pub job_name: String,
    /// Its status word.
    pub status: String,
    /// End minus start (ms), when both are known.
    pub duration_ms: Option<u64>,
    /// Its query hash (0 unknown).
    pub query_hash: u64,
    /// `GET /api/job/{id}/stages`, as served.
    pub stages: Vec<u8>,
    /// `GET /api/job/{id}/config`, as served (redacted).
    pub config: Vec<u8>,
    /// The physical plan of `GET /api/job/{id}`.
    pub physical_plan: String,
    /// Its diagnosis.
    pub diagnosis: Option<Diagnosis>,
}

/// One side's job-level facts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Side {
    /// The job.
    pub job_id: String,
    /// Its name (empty when it has none).
    pub job_name: String,
    /// Its query's label, made from the plan (`null`: none known).
    pub query_label: Option<String>,
    /// Its status word.
    pub status: String,
    /// Duration (ms).
    pub duration_ms: Option<u64>,
    /// Its query hash.
    pub query_hash: Option<String>,
    /// Stages.
    pub stages: usize,
    /// Task attempts.
    pub task_attempts: usize,
    /// Failed task attempts.
    pub failed_attempts: usize,
    /// Rows written by its last stage.
    pub output_rows: u64,
}

/// Two aligned stages.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StagePair {
    /// Stage id in a.
    pub a_stage: u32,
    /// Stage id in b.
    pub b_stage: u32,
    /// The operators, one per line (the plan shape both share).
    pub shape: String,
    /// Duration in a (first launch to last finish; ms).
    pub a_duration_ms: u64,
    /// Duration in b.
    pub b_duration_ms: u64,
    /// b minus a (ms).
    pub delta_ms: i64,
    /// b over a.
    pub ratio: f64,
    /// Input rows in a and b.
    #[schema(value_type = Vec<u64>, min_items = 2, max_items = 2)]
    pub input_rows: [u64; 2],
    /// Output rows in a and b.
    #[schema(value_type = Vec<u64>, min_items = 2, max_items = 2)]
    pub output_rows: [u64; 2],
    /// Tasks in a and b.
    #[schema(value_type = Vec<u64>, min_items = 2, max_items = 2)]
    pub tasks: [usize; 2],
}

/// A config key that differs.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ConfigChange {
    /// The key.
    pub key: String,
    /// Its value in a (`null` when absent).
    pub a: Option<String>,
    /// Its value in b.
    pub b: Option<String>,
}

/// A finding in one run and not the other.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord, utoipa::ToSchema)]
pub struct FindingKey {
    /// Its kind.
    pub kind: String,
    /// Its stage.
    pub stage_id: Option<u32>,
    /// Its executor.
    pub executor: Option<String>,
}

/// `GET /api/compare`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Comparison {
    /// The first run.
    pub a: Side,
    /// The second run.
    pub b: Side,
    /// Whether both ran the same query (equal query hashes).
    pub same_query: bool,
    /// Said when they did not, or when it cannot be told.
    pub note: Option<String>,
    /// b minus a, job-level.
    #[schema(value_type = Object)]
    pub delta: BTreeMap<&'static str, Value>,
    /// Whether b is slower than a beyond the threshold.
    pub regression: bool,
    /// The threshold: ratio and minimum milliseconds.
    #[schema(value_type = Object)]
    pub regression_threshold: BTreeMap<&'static str, Value>,
    /// Stages matched by plan shape, in a's order.
    pub stages: Vec<StagePair>,
    /// Stage ids with no match on the other side.
    #[schema(value_type = std::collections::BTreeMap<String, Vec<u32>>)]
    pub unmatched_stages: BTreeMap<&'static str, Vec<u32>>,
    /// Config keys whose values differ.
    pub config: Vec<ConfigChange>,
    /// The physical plans' unified diff (empty when equal).
    pub plan_diff: String,
    /// Findings of b that a has not (`new`), and of a that b has not
    /// (`resolved`).
    #[schema(value_type = std::collections::BTreeMap<String, Vec<FindingKey>>)]
    pub findings: BTreeMap<&'static str, Vec<FindingKey>>,
}

struct StageFacts {
    id: u32,
    shape: String,
    duration: u64,
    input_rows: u64,
    output_rows: u64,
    tasks: usize,
}

fn stage_facts(json: &[u8]) -> Vec<StageFacts> {
    let facts = |s: StageAnswer| StageFacts {
        id: s.stage_id,
        shape: shape(s.plan()),
        duration: s.ended().saturating_sub(s.began()),
        input_rows: s.input_rows,
        output_rows: s.output_rows,
        tasks: s.tasks.len(),
    };
    let mut out: Vec<StageFacts> = StagesAnswer::parse(json)
        .stages
        .into_iter()
        .map(facts)
        .collect();
    out.sort_by_key(|s| s.id);
    out
}

/// A plan's shape: each line's indentation and operator name, without the
/// operator's arguments (file lists, partition counts, literals).
pub fn shape(plan: &str) -> String {
    plan.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let indent = l.len() - l.trim_start().len();
            let name = l.trim().split([':', ',', ' ']).next().unwrap_or("");
            format!("{}{name}", " ".repeat(indent))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn config_map(json: &[u8]) -> BTreeMap<String, String> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(json) else {
        return BTreeMap::new();
    };
    map.into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (k, v)
        })
        .collect()
}

fn side(run: &ComparedRun, stages: &[StageFacts]) -> Side {
    let d = run.diagnosis.as_ref();
    Side {
        job_id: run.job_id.clone(),
        job_name: run.job_name.clone(),
        query_label: bjh_store::labels::get(run.query_hash).map(|l| l.to_string()),
        status: run.status.clone(),
        duration_ms: run.duration_ms,
        query_hash: (run.query_hash != 0).then(|| hash_text(run.query_hash)),
        stages: stages.len(),
        task_attempts: d.map_or(0, |d| d.task_attempts),
        failed_attempts: d.map_or(0, |d| d.failed_attempts),
        output_rows: stages.last().map_or(0, |s| s.output_rows),
    }
}

fn finding_keys(run: &ComparedRun) -> std::collections::BTreeSet<FindingKey> {
    run.diagnosis
        .iter()
        .flat_map(|d| &d.findings)
        .map(|f| FindingKey {
            kind: f.kind.to_string(),
            stage_id: f.stage_id,
            executor: f.executor.clone(),
        })
        .collect()
}

fn signed(b: u64, a: u64) -> i64 {
    i64::try_from(b).unwrap_or(i64::MAX) - i64::try_from(a).unwrap_or(i64::MAX)
}

/// Compares run `a` with run `b`.
pub fn compare(a: &ComparedRun, b: &ComparedRun) -> Comparison {
    let (stages_a, stages_b) = (stage_facts(&a.stages), stage_facts(&b.stages));
    let (side_a, side_b) = (side(a, &stages_a), side(b, &stages_b));
    let same_query = a.query_hash != 0 && a.query_hash == b.query_hash;
    let (delta, regression) = deltas(a, b, &side_a, &side_b);
    let (stages, unmatched_stages) = match_stages(&stages_a, &stages_b);
    let (fa, fb) = (finding_keys(a), finding_keys(b));
    let findings = BTreeMap::from([
        ("new", fb.difference(&fa).cloned().collect()),
        ("resolved", fa.difference(&fb).cloned().collect()),
    ]);
    Comparison {
        a: side_a,
        b: side_b,
        same_query,
        note: query_note(a.query_hash, b.query_hash),
        delta,
        regression,
        regression_threshold: BTreeMap::from([
            ("ratio", Value::from(REGRESSION_RATIO)),
            ("min_ms", Value::from(REGRESSION_MIN_MS)),
        ]),
        stages,
        unmatched_stages,
        config: config_changes(&a.config, &b.config),
        plan_diff: unified_diff(&a.physical_plan, &b.physical_plan, &a.job_id, &b.job_id),
        findings,
    }
}

/// What the comparison can say of the two queries when it cannot say they
/// are the same.
fn query_note(hash_a: u64, hash_b: u64) -> Option<String> {
    if hash_a == 0 || hash_b == 0 {
        Some(
            "a run has no logical plan (it never got as far as planning), so whether both \
              ran the same query cannot be told"
                .to_string(),
        )
    } else if hash_a != hash_b {
        Some(
            "the runs are of different queries (their logical plans differ): stages are \
             matched by plan shape only, and the deltas compare different work"
                .to_string(),
        )
    } else {
        None
    }
}

/// The whole runs' differences (b − a), and whether b is a regression.
fn deltas(
    a: &ComparedRun,
    b: &ComparedRun,
    side_a: &Side,
    side_b: &Side,
) -> (BTreeMap<&'static str, Value>, bool) {
    let mut delta = BTreeMap::new();
    let mut regression = false;
    if let (Some(da), Some(db)) = (a.duration_ms, b.duration_ms) {
        delta.insert("duration_ms", Value::from(signed(db, da)));
        delta.insert("duration_ratio", Value::from(ratio(db, da)));
        regression =
            db as f64 > REGRESSION_RATIO * da as f64 && db.saturating_sub(da) >= REGRESSION_MIN_MS;
    }
    let count = |b: usize, a: usize| Value::from(signed(b as u64, a as u64));
    let attempts = count(side_b.task_attempts, side_a.task_attempts);
    delta.insert("task_attempts", attempts);
    let failed = count(side_b.failed_attempts, side_a.failed_attempts);
    delta.insert("failed_attempts", failed);
    let rows = Value::from(signed(side_b.output_rows, side_a.output_rows));
    delta.insert("output_rows", rows);
    (delta, regression)
}

/// Pairs each stage of a with the first unpaired stage of b of the same
/// plan shape; the stages left over, per side.
fn match_stages(
    stages_a: &[StageFacts],
    stages_b: &[StageFacts],
) -> (Vec<StagePair>, BTreeMap<&'static str, Vec<u32>>) {
    let mut used = vec![false; stages_b.len()];
    let mut pairs = Vec::new();
    let mut unmatched_a = Vec::new();
    for sa in stages_a {
        let found = (0..stages_b.len()).find(|&i| !used[i] && stages_b[i].shape == sa.shape);
        let Some(i) = found else {
            unmatched_a.push(sa.id);
            continue;
        };
        used[i] = true;
        let sb = &stages_b[i];
        pairs.push(StagePair {
            a_stage: sa.id,
            b_stage: sb.id,
            shape: sa.shape.clone(),
            a_duration_ms: sa.duration,
            b_duration_ms: sb.duration,
            delta_ms: signed(sb.duration, sa.duration),
            ratio: ratio(sb.duration, sa.duration),
            input_rows: [sa.input_rows, sb.input_rows],
            output_rows: [sa.output_rows, sb.output_rows],
            tasks: [sa.tasks, sb.tasks],
        });
    }
    let unmatched_b: Vec<u32> = stages_b
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(s, _)| s.id)
        .collect();
    let unmatched = BTreeMap::from([("a", unmatched_a), ("b", unmatched_b)]);
    (pairs, unmatched)
}

/// The config keys whose values differ.
fn config_changes(a: &[u8], b: &[u8]) -> Vec<ConfigChange> {
    let (ca, cb) = (config_map(a), config_map(b));
    let keys: std::collections::BTreeSet<&String> = ca.keys().chain(cb.keys()).collect();
    keys.into_iter()
        .filter(|k| ca.get(*k) != cb.get(*k))
        .map(|k| ConfigChange {
            key: k.clone(),
            a: ca.get(k).cloned(),
            b: cb.get(k).cloned(),
        })
        .collect()
}

/// A unified diff (3 lines of context) of two texts, line by line; empty
/// when they are equal.
pub fn unified_diff(a: &str, b: &str, a_name: &str, b_name: &str) -> String {
    if a == b {
        return String::new();
    }
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    if la.len() > MAX_DIFF_LINES || lb.len() > MAX_DIFF_LINES {
        return format!(
            "--- {a_name}\n+++ {b_name}\nthe plans differ; at {} and {} lines they are too long \
             to diff here\n",
            la.len(),
            lb.len()
        );
    }
    // Myers' algorithm (the `similar` crate, as `diff` uses) with a
    // deadline: past it the diff is coarser, never slower, so two long,
    // unlike plans cost a bounded time. Lines are compared without their
    // ends, as `str::lines` gives them.
    let ended = |t: &str| {
        let mut t = t.to_string();
        if !t.ends_with('\n') {
            t.push('\n');
        }
        t
    };
    let (a, b) = (ended(a), ended(b));
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .deadline(std::time::Instant::now() + DIFF_BUDGET)
        .diff_lines(&a, &b);
    diff.unified_diff()
        .context_radius(3)
        .missing_newline_hint(false)
        .header(a_name, b_name)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Expected outputs are GNU `diff -u`'s for the same inputs, headers
    /// aside.
    #[test]
    fn a_diff_matches_gnu_diff_u() {
        let a = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";
        let b = "one\ntwo\nthree\nfour\nFIVE\nsix\nseven\neight\nnine\nten\neleven\n";
        let expected = "@@ -2,9 +2,10 @@\n two\n three\n four\n-five\n+FIVE\n six\n seven\n \
                        eight\n nine\n ten\n+eleven\n";
        let got = unified_diff(a, b, "a", "b");
        assert_eq!(got.strip_prefix("--- a\n+++ b\n").unwrap(), expected);
        assert_eq!(unified_diff(a, a, "a", "b"), "");
        // seq 1 20, with 2 and 15 spelt out and 18 deleted: two hunks.
        let c: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let d: String = (1..=20)
            .filter(|&i| i != 18)
            .map(|i| match i {
                2 => "two\n".to_string(),
                15 => "fifteen\n".to_string(),
                i => format!("{i}\n"),
            })
            .collect();
        let expected = "@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n\
                        @@ -12,9 +12,8 @@\n 12\n 13\n 14\n-15\n+fifteen\n 16\n 17\n-18\n 19\n 20\n";
        let got = unified_diff(&c, &d, "a", "b");
        assert_eq!(got.strip_prefix("--- a\n+++ b\n").unwrap(), expected);
    }

    #[test]
    fn shapes_drop_arguments() {
        let plan = "ShuffleWriterExec: partitioning: Hash([k@0], 16)\n  AggregateExec: mode=Partial, gby=[k@0 as k]\n    DataSourceExec: file_groups={3 groups: [[a.csv], [b.csv]]}";
        assert_eq!(
            shape(plan),
            "ShuffleWriterExec\n  AggregateExec\n    DataSourceExec"
        );
    }

    fn stages(plans: &[(&str, &str, u64)]) -> Vec<u8> {
        let stages: Vec<Value> = plans
            .iter()
            .map(|(id, plan, ms)| {
                json!({"stage_id": id, "input_rows": 10, "output_rows": 5, "stage_plan": plan,
                       "tasks": [{"launch_time": 1000, "finish_time": 1000 + ms}]})
            })
            .collect();
        json!({ "stages": stages }).to_string().into_bytes()
    }

    #[test]
    fn stages_align_by_shape_and_a_slower_b_is_a_regression() {
        let scan = "ShuffleWriterExec: x\n  DataSourceExec: y";
        let agg = "ShuffleWriterExec: x\n  AggregateExec: z";
        let sort = "SortExec: s";
        let a = ComparedRun {
            job_id: "a".into(),
            job_name: String::new(),
            status: "Completed".into(),
            duration_ms: Some(2_000),
            query_hash: 5,
            stages: stages(&[("0", scan, 500), ("1", agg, 700), ("2", sort, 10)]),
            config: br#"{"k1":"v","k2":"x","secret":"***"}"#.to_vec(),
            physical_plan: "P1\nP2".into(),
            diagnosis: None,
        };
        let b = ComparedRun {
            job_id: "b".into(),
            job_name: String::new(),
            duration_ms: Some(3_500),
            stages: stages(&[("0", agg, 1_700), ("1", scan, 400)]),
            config: br#"{"k1":"v","k2":"y","k3":"new","secret":"***"}"#.to_vec(),
            physical_plan: "P1\nP3".into(),
            ..a.clone()
        };
        let c = compare(&a, &b);
        assert!(c.same_query && c.note.is_none());
        assert!(c.regression, "3.5 s against 2 s");
        assert_eq!(c.delta["duration_ms"], 1_500);
        let pairs: Vec<(u32, u32, i64)> = c
            .stages
            .iter()
            .map(|p| (p.a_stage, p.b_stage, p.delta_ms))
            .collect();
        assert_eq!(pairs, [(0, 1, -100), (1, 0, 1_000)]);
        assert_eq!(c.unmatched_stages["a"], [2]);
        assert!(c.unmatched_stages["b"].is_empty());
        let keys: Vec<&str> = c.config.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["k2", "k3"]);
        assert!(c.plan_diff.contains("-P2\n+P3\n"), "{}", c.plan_diff);
        let other = ComparedRun {
            query_hash: 6,
            duration_ms: Some(2_100),
            ..b.clone()
        };
        let c = compare(&a, &other);
        assert!(!c.same_query && c.note.unwrap().contains("different queries"));
        assert!(!c.regression, "5% slower is within the threshold");
    }
}
