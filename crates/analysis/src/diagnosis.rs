//! A job's diagnosis: findings that say why it took as long as it did,
//! each with the stage and tasks it concerns, the evidence as numbers, and
//! one sentence a user can act on (`GET /api/job/{id}/diagnosis`).
//!
//! Every finding is computed from the task records of the log (and, for
//! memory and spill, from the operator metrics of the stored
//! `?plan_format=metrics` stage plans). The thresholds are [`Thresholds`];
//! their defaults do not flag a healthy job: each has an absolute floor, so
//! millisecond tasks never look skewed however their ratios fall.
//! `docs/diagnosis.md` explains each kind.

use crate::stats::{quantile, ratio};
use bjh_format::query_hash::hash_text;
use bjh_format::stages::TaskTimes;
use bjh_store::records::{JobHeader, JobRecords, Task};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// When a finding is raised. Ratios compare a task or executor with its
/// stage; every ratio has an absolute floor beside it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Thresholds {
    /// Successful tasks a stage needs before its spread means anything.
    pub min_tasks: usize,
    /// Skew: the largest task's rows over the median task's.
    pub skew_ratio: f64,
    /// Skew: the largest task reads at least this many rows...
    pub skew_min_rows: u64,
    /// ...and runs at least this long (ms).
    pub skew_min_duration_ms: u64,
    /// Straggler: a task's duration over the stage's p75.
    pub straggler_ratio: f64,
    /// Straggler: and at least this much longer than the p75 (ms).
    pub straggler_min_excess_ms: u64,
    /// Slow executor: its median task over the other executors' median,
    /// on the same stage.
    pub slow_executor_ratio: f64,
    /// Slow executor: and at least this much slower (ms).
    pub slow_executor_min_excess_ms: u64,
    /// Slow executor: tasks each executor must have run in the stage.
    pub slow_executor_min_tasks: usize,
    /// Imbalance: one executor's share of a stage's rows (or tasks).
    pub imbalance_share: f64,
    /// Imbalance: only for stages whose tasks ran this long in total (ms).
    pub imbalance_min_stage_ms: u64,
    /// Failed attempts in one stage that make a retry storm.
    pub retry_storm_failures: usize,
    /// Peak memory of one operator worth reporting (bytes).
    pub peak_memory_bytes: u64,
    /// Queueing: time from queued to first task at least this (ms)...
    pub queue_min_ms: u64,
    /// ...and this share of the job's time from queued to end.
    pub queue_share: f64,
    /// Gaps: a stretch with no task running at least this long (ms)...
    pub gap_min_ms: u64,
    /// ...adding up to this share of the time from first to last task.
    pub gap_share: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            min_tasks: 4,
            skew_ratio: 4.0,
            skew_min_rows: 10_000,
            skew_min_duration_ms: 1_000,
            straggler_ratio: 2.0,
            straggler_min_excess_ms: 1_000,
            slow_executor_ratio: 2.0,
            slow_executor_min_excess_ms: 500,
            slow_executor_min_tasks: 3,
            imbalance_share: 0.75,
            imbalance_min_stage_ms: 10_000,
            retry_storm_failures: 3,
            peak_memory_bytes: 1 << 30,
            queue_min_ms: 5_000,
            queue_share: 0.2,
            gap_min_ms: 2_000,
            gap_share: 0.1,
        }
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Cost the job time.
    Warning,
    /// Cost the job much time, or failed it.
    Critical,
}

pub use crate::plan_metrics::{OperatorMemory, operator_memory};

/// One finding.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Finding {
    /// What was found: `skew`, `straggler`, `slow_executor`,
    /// `executor_imbalance`, `failed_tasks`, `retry_storm`, `spill`,
    /// `peak_memory`, `queueing`, `scheduling_gaps`, `partial_log`.
    pub kind: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// The stage it concerns, if one.
    pub stage_id: Option<u32>,
    /// The executor it concerns, if one.
    pub executor: Option<String>,
    /// The tasks it concerns (ids within the stage), worst first.
    pub tasks: Vec<u32>,
    /// The numbers behind it.
    #[schema(value_type = Object)]
    pub evidence: Map<String, Value>,
    /// What to do about it, in one sentence.
    pub message: String,
}

/// `GET /api/job/{id}/diagnosis`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Diagnosis {
    /// The job.
    pub job_id: String,
    /// Its status word.
    pub status: &'static str,
    /// Its query hash, when known.
    pub query_hash: Option<String>,
    /// Whether the findings may miss something (the job has not finished,
    /// or its log lost records); `partial_reasons` says why.
    pub partial: bool,
    /// Why the diagnosis is partial.
    pub partial_reasons: Vec<String>,
    /// Stages seen in task records.
    pub stages: usize,
    /// Task attempts recorded.
    pub task_attempts: usize,
    /// Of which failed.
    pub failed_attempts: usize,
    /// Executors that ran tasks.
    pub executors: usize,
    /// The thresholds in force.
    pub thresholds: Thresholds,
    /// What was found, most severe first.
    pub findings: Vec<Finding>,
    /// Settings with a predicted effect, ranked by the time they save
    /// (`advice`): empty for a job still running, and where the log
    /// cannot be replayed.
    pub advice: Vec<crate::advice::Advice>,
    /// The next completed run of the same query, and what this job's
    /// replay predicted for it (`advice::check_next_run`): `null` without
    /// one.
    pub next_run: Option<crate::advice::NextRun>,
}

fn finding(kind: &'static str, severity: Severity, message: String) -> Finding {
    Finding {
        kind,
        severity,
        stage_id: None,
        executor: None,
        tasks: Vec::new(),
        evidence: Map::new(),
        message,
    }
}

/// The successful attempts of one stage, with what the findings share.
struct StageView<'a> {
    stage_id: u32,
    tasks: Vec<&'a Task>,
    durations: Vec<u64>,
    /// Rows per task: input rows, or output rows when no task read any.
    rows: Vec<u64>,
    median_rows: u64,
    p75: u64,
}

impl<'a> StageView<'a> {
    fn new(stage_id: u32, tasks: Vec<&'a Task>) -> Self {
        let by_input = tasks.iter().any(|t| t.input_rows > 0);
        let rows_of = |t: &Task| {
            if by_input {
                t.input_rows
            } else {
                t.output_rows
            }
        };
        let mut durations: Vec<u64> = tasks.iter().map(|t| t.duration()).collect();
        let mut rows: Vec<u64> = tasks.iter().map(|t| rows_of(t)).collect();
        let (unsorted_d, unsorted_r) = (durations.clone(), rows.clone());
        durations.sort_unstable();
        rows.sort_unstable();
        let (median_rows, p75) = (quantile(&rows, 0.5), quantile(&durations, 0.75));
        Self {
            stage_id,
            tasks,
            durations: unsorted_d,
            rows: unsorted_r,
            median_rows,
            p75,
        }
    }

    fn median_duration(&self) -> u64 {
        let mut d = self.durations.clone();
        d.sort_unstable();
        quantile(&d, 0.5)
    }
}

/// Diagnoses a job from its records and, when stored, its operators'
/// memory metrics.
pub fn diagnose(
    header: &JobHeader,
    records: &JobRecords,
    operators: &[OperatorMemory],
    th: &Thresholds,
) -> Diagnosis {
    let mut findings = Vec::new();
    let mut by_stage: BTreeMap<u32, Vec<&Task>> = BTreeMap::new();
    let mut failed_by_stage: BTreeMap<u32, Vec<&Task>> = BTreeMap::new();
    for t in &records.tasks {
        if t.succeeded() {
            by_stage.entry(t.stage_id).or_default().push(t);
        } else {
            failed_by_stage.entry(t.stage_id).or_default().push(t);
        }
    }
    let views: Vec<StageView> = by_stage
        .into_iter()
        .map(|(id, tasks)| StageView::new(id, tasks))
        .filter(|v| v.tasks.len() >= th.min_tasks)
        .collect();
    let executor_name = |i: u32| {
        records
            .executors
            .get(i as usize)
            .cloned()
            .unwrap_or_default()
    };

    let slow = slow_executors(&views, records, th, &mut findings);
    for v in &views {
        skew(v, th, &mut findings);
        stragglers(v, &slow, th, &executor_name, &mut findings);
        imbalance(v, records, th, &executor_name, &mut findings);
    }
    for (stage_id, failed) in &failed_by_stage {
        failures(
            *stage_id,
            failed,
            records,
            th,
            &executor_name,
            &mut findings,
        );
    }
    memory(operators, th, &mut findings);
    queueing(header, records, th, &mut findings);
    gaps(records, th, &mut findings);

    let mut partial_reasons = Vec::new();
    if header.state.is_unfinished() {
        partial_reasons.push(format!(
            "the job has not finished ({}): only the tasks recorded so far are diagnosed",
            header.state.status_word()
        ));
    }
    if let Some(dropped) = header.dropped_records.filter(|&d| d > 0) {
        partial_reasons.push(format!(
            "its log lost {dropped} progress records under backpressure"
        ));
        let mut f = finding(
            "partial_log",
            Severity::Info,
            format!(
                "This job's log lost {dropped} progress records while the writer was \
                 overloaded, so task-based findings may miss tasks; raise \
                 --event-log-queue-capacity if it happens often."
            ),
        );
        f.evidence.insert("dropped_records".into(), json!(dropped));
        findings.push(f);
    }
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.stage_id.cmp(&b.stage_id))
            .then(a.kind.cmp(b.kind))
    });
    let stages: std::collections::BTreeSet<u32> =
        records.tasks.iter().map(|t| t.stage_id).collect();
    Diagnosis {
        job_id: header.job_id.clone(),
        status: header.state.status_word(),
        query_hash: (header.query_hash != 0).then(|| hash_text(header.query_hash)),
        partial: !partial_reasons.is_empty(),
        partial_reasons,
        stages: stages.len(),
        task_attempts: records.tasks.len(),
        failed_attempts: records.tasks.iter().filter(|t| !t.succeeded()).count(),
        executors: records.executors.len(),
        thresholds: th.clone(),
        findings,
        advice: Vec::new(),
        next_run: None,
    }
}

fn skew(v: &StageView, th: &Thresholds, out: &mut Vec<Finding>) {
    let max_rows = v.rows.iter().copied().max().unwrap_or(0);
    if max_rows < th.skew_min_rows
        || (max_rows as f64) < th.skew_ratio * v.median_rows.max(1) as f64
    {
        return;
    }
    let hot = |i: usize| v.rows[i] as f64 >= th.skew_ratio * v.median_rows.max(1) as f64;
    let mut heavy: Vec<usize> = (0..v.tasks.len()).filter(|&i| hot(i)).collect();
    heavy.sort_by_key(|&i| std::cmp::Reverse(v.rows[i]));
    let worst = heavy[0];
    if v.durations[worst] < th.skew_min_duration_ms {
        return;
    }
    let median_d = v.median_duration();
    let mut f = finding(
        "skew",
        Severity::Warning,
        format!(
            "Stage {}: task {} read {} rows, {}x the median task's {}, and ran {} ms against \
             a median of {} ms; spread the hot key (salt it, or partition on a column with \
             more distinct values) or raise datafusion.execution.target_partitions.",
            v.stage_id,
            v.tasks[worst].task_id,
            max_rows,
            ratio(max_rows, v.median_rows),
            v.median_rows,
            v.durations[worst],
            median_d
        ),
    );
    f.stage_id = Some(v.stage_id);
    f.tasks = heavy.iter().map(|&i| v.tasks[i].task_id).collect();
    let e = &mut f.evidence;
    e.insert("rows_max".into(), json!(max_rows));
    e.insert("rows_median".into(), json!(v.median_rows));
    e.insert("rows_ratio".into(), json!(ratio(max_rows, v.median_rows)));
    e.insert("duration_max_ms".into(), json!(v.durations[worst]));
    e.insert("duration_median_ms".into(), json!(median_d));
    e.insert(
        "duration_ratio".into(),
        json!(ratio(v.durations[worst], median_d)),
    );
    out.push(f);
}

fn stragglers(
    v: &StageView,
    slow: &BTreeSet<(u32, u32)>,
    th: &Thresholds,
    executor_name: &dyn Fn(u32) -> String,
    out: &mut Vec<Finding>,
) {
    let explained_by_rows =
        |i: usize| v.rows[i] as f64 >= th.skew_ratio * v.median_rows.max(1) as f64;
    let candidates: Vec<usize> = (0..v.tasks.len())
        .filter(|&i| {
            let d = v.durations[i];
            d as f64 >= th.straggler_ratio * v.p75.max(1) as f64
                && d.saturating_sub(v.p75) >= th.straggler_min_excess_ms
                && !explained_by_rows(i)
                && !slow.contains(&(v.stage_id, v.tasks[i].executor))
        })
        .collect();
    if candidates.is_empty() {
        return;
    }
    // The others' last end: a straggler holds the stage's end past it.
    let others_end = (0..v.tasks.len())
        .filter(|i| !candidates.contains(i))
        .map(|i| v.tasks[i].end_exec_time)
        .max()
        .unwrap_or(0);
    let mut holding: Vec<usize> = candidates
        .into_iter()
        .filter(|&i| v.tasks[i].end_exec_time > others_end)
        .collect();
    if holding.is_empty() {
        return;
    }
    holding.sort_by_key(|&i| std::cmp::Reverse(v.durations[i]));
    let worst = holding[0];
    let t = v.tasks[worst];
    let delay = holding
        .iter()
        .map(|&i| v.tasks[i].end_exec_time)
        .max()
        .unwrap_or(0)
        .saturating_sub(others_end);
    let mut f = finding(
        "straggler",
        Severity::Warning,
        format!(
            "Stage {}: task {} ran {} ms, {}x the stage's p75 of {} ms on no more data than \
             the others, and held the stage's end by {} ms; look at executor {}'s host \
             (CPU, disk, memory pressure) at that time.",
            v.stage_id,
            t.task_id,
            v.durations[worst],
            ratio(v.durations[worst], v.p75),
            v.p75,
            delay,
            executor_name(t.executor)
        ),
    );
    f.stage_id = Some(v.stage_id);
    f.executor = Some(executor_name(t.executor));
    f.tasks = holding.iter().map(|&i| v.tasks[i].task_id).collect();
    let e = &mut f.evidence;
    e.insert("duration_ms".into(), json!(v.durations[worst]));
    e.insert("p75_ms".into(), json!(v.p75));
    e.insert("ratio".into(), json!(ratio(v.durations[worst], v.p75)));
    e.insert("delay_ms".into(), json!(delay));
    e.insert("rows".into(), json!(v.rows[worst]));
    e.insert("rows_median".into(), json!(v.median_rows));
    out.push(f);
}

/// One stage where an executor was slow: its median task, the others'.
struct SlowStage {
    stage_id: u32,
    median: u64,
    others: u64,
    tasks: Vec<u32>,
}

/// Finds executors markedly slower than the others on the same stage's
/// work; one finding per executor. Gives the (stage, executor) pairs
/// flagged, so their tasks are not also called stragglers.
fn slow_executors(
    views: &[StageView],
    records: &JobRecords,
    th: &Thresholds,
    out: &mut Vec<Finding>,
) -> BTreeSet<(u32, u32)> {
    let mut flagged = BTreeSet::new();
    let mut per_executor: BTreeMap<u32, Vec<SlowStage>> = BTreeMap::new();
    for v in views {
        let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, t) in v.tasks.iter().enumerate() {
            groups.entry(t.executor).or_default().push(i);
        }
        let eligible: Vec<u32> = groups
            .iter()
            .filter(|(_, ix)| ix.len() >= th.slow_executor_min_tasks)
            .map(|(e, _)| *e)
            .collect();
        if eligible.len() < 2 {
            continue;
        }
        for &e in &eligible {
            let pick = |mine: bool, what: &dyn Fn(usize) -> u64| {
                let mut values: Vec<u64> = (0..v.tasks.len())
                    .filter(|&i| (v.tasks[i].executor == e) == mine)
                    .map(what)
                    .collect();
                values.sort_unstable();
                quantile(&values, 0.5)
            };
            let (mine, others) = (
                pick(true, &|i| v.durations[i]),
                pick(false, &|i| v.durations[i]),
            );
            let (my_rows, other_rows) = (pick(true, &|i| v.rows[i]), pick(false, &|i| v.rows[i]));
            let same_work = my_rows as f64 <= 1.5 * other_rows.max(1) as f64;
            if same_work
                && mine as f64 >= th.slow_executor_ratio * others.max(1) as f64
                && mine.saturating_sub(others) >= th.slow_executor_min_excess_ms
            {
                flagged.insert((v.stage_id, e));
                let tasks = groups[&e].iter().map(|&i| v.tasks[i].task_id).collect();
                per_executor.entry(e).or_default().push(SlowStage {
                    stage_id: v.stage_id,
                    median: mine,
                    others,
                    tasks,
                });
            }
        }
    }
    for (e, stages) in per_executor {
        let name = records
            .executors
            .get(e as usize)
            .cloned()
            .unwrap_or_default();
        let worst = stages
            .iter()
            .max_by(|a, b| ratio(a.median, a.others).total_cmp(&ratio(b.median, b.others)))
            .expect("at least one stage");
        let (worst_stage, mine, others) = (worst.stage_id, worst.median, worst.others);
        let ids: Vec<u32> = stages.iter().map(|s| s.stage_id).collect();
        let mut f = finding(
            "slow_executor",
            Severity::Warning,
            format!(
                "Executor {name} took {}x as long as the other executors on the same work \
                 (median task {mine} ms against {others} ms in stage {worst_stage}; stages \
                 {ids:?}); check its host, or stop it so the others take its tasks.",
                ratio(mine, others)
            ),
        );
        f.executor = Some(name);
        if let [only] = ids.as_slice() {
            f.stage_id = Some(*only);
            f.tasks = stages[0].tasks.clone();
        }
        let e = &mut f.evidence;
        e.insert("median_ms".into(), json!(mine));
        e.insert("others_median_ms".into(), json!(others));
        e.insert("ratio".into(), json!(ratio(mine, others)));
        e.insert("stages".into(), json!(ids));
        out.push(f);
    }
    flagged
}

fn imbalance(
    v: &StageView,
    records: &JobRecords,
    th: &Thresholds,
    executor_name: &dyn Fn(u32) -> String,
    out: &mut Vec<Finding>,
) {
    if records.executors.len() < 2 || v.durations.iter().sum::<u64>() < th.imbalance_min_stage_ms {
        return;
    }
    let total_rows: u64 = v.rows.iter().sum();
    let mut work: BTreeMap<u32, u64> = BTreeMap::new();
    for (i, t) in v.tasks.iter().enumerate() {
        *work.entry(t.executor).or_default() += if total_rows > 0 { v.rows[i] } else { 1 };
    }
    let total = if total_rows > 0 {
        total_rows
    } else {
        v.tasks.len() as u64
    };
    let Some((&top, &amount)) = work.iter().max_by_key(|(_, w)| **w) else {
        return;
    };
    let share = amount as f64 / total.max(1) as f64;
    if share < th.imbalance_share {
        return;
    }
    let unit = if total_rows > 0 { "rows" } else { "tasks" };
    let mut f = finding(
        "executor_imbalance",
        Severity::Info,
        format!(
            "Stage {}: executor {} did {:.0}% of the stage's work ({amount} of {total} {unit}) \
             while {} executors ran this job's tasks; give executors equal task slots, and \
             start them before the job so each can take its share.",
            v.stage_id,
            executor_name(top),
            share * 100.0,
            records.executors.len()
        ),
    );
    f.stage_id = Some(v.stage_id);
    f.executor = Some(executor_name(top));
    let e = &mut f.evidence;
    e.insert("share".into(), json!((share * 100.0).round() / 100.0));
    e.insert("work".into(), json!(amount));
    e.insert("stage_total".into(), json!(total));
    e.insert("unit".into(), json!(unit));
    e.insert("executors".into(), json!(records.executors.len()));
    out.push(f);
}

fn failures(
    stage_id: u32,
    failed: &[&Task],
    records: &JobRecords,
    th: &Thresholds,
    executor_name: &dyn Fn(u32) -> String,
    out: &mut Vec<Finding>,
) {
    let mut groups: BTreeMap<(&str, u32), (u64, &str)> = BTreeMap::new();
    for t in failed {
        let (reason, error) = t.failure.as_ref().expect("failed");
        let g = groups
            .entry((reason.as_str(), t.executor))
            .or_insert((0, error));
        g.0 += 1;
    }
    let succeeded: std::collections::HashSet<u32> = records
        .tasks
        .iter()
        .filter(|t| t.stage_id == stage_id && t.succeeded())
        .map(|t| t.task_id)
        .collect();
    let mut task_ids: Vec<u32> = failed.iter().map(|t| t.task_id).collect();
    task_ids.sort_unstable();
    task_ids.dedup();
    let retried = task_ids.iter().filter(|id| succeeded.contains(id)).count();
    let unrecovered = task_ids.len() - retried;
    let ((top_reason, top_executor), (top_count, _)) = groups
        .iter()
        .max_by_key(|(_, (n, _))| *n)
        .map(|(k, v)| (*k, *v))
        .expect("at least one failure");
    let storm = failed.len() >= th.retry_storm_failures;
    let (kind, severity) = if storm {
        ("retry_storm", Severity::Critical)
    } else {
        ("failed_tasks", Severity::Warning)
    };
    let advice = if unrecovered > 0 {
        "a task whose every attempt fails fails the job: the errors in the evidence say why"
    } else if storm {
        "fix the cause rather than count on retries: each retry reruns the task's work"
    } else {
        "the retries recovered, but each reran the task's work"
    };
    let attempts = if failed.len() == 1 {
        "1 task attempt".to_string()
    } else {
        format!("{} task attempts", failed.len())
    };
    let mut f = finding(
        kind,
        severity,
        format!(
            "Stage {stage_id}: {attempts} failed ({top_count} of them {top_reason} on executor \
             {}), {retried} of its tasks recovered on retry and {unrecovered} did not; {advice}.",
            executor_name(top_executor)
        ),
    );
    f.stage_id = Some(stage_id);
    f.tasks = task_ids;
    let e = &mut f.evidence;
    e.insert("failed_attempts".into(), json!(failed.len()));
    e.insert("retried_tasks".into(), json!(retried));
    e.insert("unrecovered_tasks".into(), json!(unrecovered));
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|((reason, executor), (count, error))| {
            let example: String = error.chars().take(300).collect();
            json!({"reason": reason, "executor": executor_name(executor), "count": count,
                   "example_error": example})
        })
        .collect();
    e.insert("groups".into(), Value::Array(groups));
    out.push(f);
}

fn memory(operators: &[OperatorMemory], th: &Thresholds, out: &mut Vec<Finding>) {
    for op in operators {
        if op.spill_count > 0 || op.spilled_bytes > 0 {
            let mut f = finding(
                "spill",
                Severity::Warning,
                format!(
                    "Stage {}: {} spilled {} bytes to disk in {} spills; give it more memory \
                     (executor memory pool, or fewer concurrent tasks per executor) or reduce \
                     its input.",
                    op.stage_id, op.operator, op.spilled_bytes, op.spill_count
                ),
            );
            f.stage_id = Some(op.stage_id);
            f.evidence.insert("operator".into(), json!(op.operator));
            f.evidence
                .insert("spill_count".into(), json!(op.spill_count));
            f.evidence
                .insert("spilled_bytes".into(), json!(op.spilled_bytes));
            f.evidence
                .insert("peak_mem_used".into(), json!(op.peak_mem_used));
            out.push(f);
        }
        if op.peak_mem_used >= th.peak_memory_bytes {
            let mut f = finding(
                "peak_memory",
                Severity::Info,
                format!(
                    "Stage {}: {} held up to {} bytes of memory; size executor memory for it, \
                     or split its input into more partitions.",
                    op.stage_id, op.operator, op.peak_mem_used
                ),
            );
            f.stage_id = Some(op.stage_id);
            f.evidence.insert("operator".into(), json!(op.operator));
            f.evidence
                .insert("peak_mem_used".into(), json!(op.peak_mem_used));
            out.push(f);
        }
    }
}

fn queueing(header: &JobHeader, records: &JobRecords, th: &Thresholds, out: &mut Vec<Finding>) {
    let queued = records.start.queued_at;
    let first = records
        .tasks
        .iter()
        .map(TaskTimes::launched)
        .filter(|&t| t > 0)
        .min();
    let (Some(first), true) = (first, queued > 0) else {
        return;
    };
    let last = records
        .tasks
        .iter()
        .map(|t| t.end_exec_time)
        .max()
        .unwrap_or(0);
    let end = if header.end_time > 0 {
        header.end_time
    } else {
        last
    };
    let wait = first.saturating_sub(queued);
    let total = end.saturating_sub(queued);
    if wait < th.queue_min_ms || (wait as f64) < th.queue_share * total as f64 {
        return;
    }
    let submitted = records.start.submitted_at.clamp(queued, first);
    let (planning, waiting) = (submitted - queued, first - submitted);
    let mut f = finding(
        "queueing",
        Severity::Warning,
        format!(
            "The job waited {wait} ms of its {total} ms before its first task ran ({planning} ms \
             queued and planning, {waiting} ms waiting for a free task slot); add executors or \
             task slots, or run fewer jobs at once."
        ),
    );
    let e = &mut f.evidence;
    e.insert("wait_ms".into(), json!(wait));
    e.insert("planning_ms".into(), json!(planning));
    e.insert("waiting_for_slots_ms".into(), json!(waiting));
    e.insert("job_ms".into(), json!(total));
    e.insert("share".into(), json!(ratio(wait * 100, total) / 100.0));
    out.push(f);
}

fn gaps(records: &JobRecords, th: &Thresholds, out: &mut Vec<Finding>) {
    let mut spans: Vec<(u64, u64, u32)> = records
        .tasks
        .iter()
        .map(|t| (t.begin(), t.end_exec_time.max(t.begin()), t.stage_id))
        .filter(|s| s.0 > 0)
        .collect();
    if spans.len() < 2 {
        return;
    }
    spans.sort_unstable();
    let (first, last) = (spans[0].0, spans.iter().map(|s| s.1).max().unwrap_or(0));
    let mut found = Vec::new();
    let (mut reach, mut reach_stage) = (spans[0].1, spans[0].2);
    for &(begin, end, stage) in &spans[1..] {
        if begin > reach && begin - reach >= th.gap_min_ms {
            found.push(json!({"from": reach, "to": begin, "ms": begin - reach,
                              "after_stage": reach_stage, "before_stage": stage}));
        }
        if end > reach {
            (reach, reach_stage) = (end, stage);
        }
    }
    let total: u64 = found.iter().filter_map(|g| g["ms"].as_u64()).sum();
    let span = last.saturating_sub(first);
    if found.is_empty() || (total as f64) < th.gap_share * span as f64 {
        return;
    }
    let mut f = finding(
        "scheduling_gaps",
        Severity::Warning,
        format!(
            "No task ran for {total} ms of the {span} ms between the job's first and last task \
             ({} gaps of {} ms or more); the scheduler waited between stages: check its \
             event-loop load and executor heartbeats.",
            found.len(),
            th.gap_min_ms
        ),
    );
    let e = &mut f.evidence;
    e.insert("total_gap_ms".into(), json!(total));
    e.insert("span_ms".into(), json!(span));
    e.insert("gaps".into(), Value::Array(found));
    out.push(f);
}

#[cfg(test)]
mod tests;
