//! Settings with a predicted effect: for a finished job, each piece of
//! advice names a setting and a value, what the job is predicted to take
//! with it and what it saves, from the what-if replay (`whatif`) of the
//! job's own tasks, ranked by the time saved.
//!
//! The candidates: one more executor, twice the executors, twice the task
//! slots per executor (`--concurrent-tasks`), the knee of the curve (the
//! smallest shape within 10% of the critical path), one executor fewer
//! when it costs (almost) no time, and for a `slow_executor` finding the
//! job with that executor's tasks run at the others' pace. Savings are
//! measured against the replay on the shape the job ran on, not against
//! the run itself, so the model's error on this job cancels out of them.
//! Advice about partitions (`datafusion.execution.target_partitions`) or
//! memory is not predicted: changing either changes the tasks themselves,
//! which a replay of the recorded tasks cannot know; such advice says so.
//!
//! The findings the advice answers gain its numbers in their message.
//!
//! The next run checks it ([`check_next_run`]): when the query's next
//! completed run ran on a shape a piece of advice named, with the same
//! partitions, what it took is set beside what the advice predicted, and
//! the advice is marked contradicted when the prediction was off by more
//! than [`CONTRADICTED`] or a saving it promised did not come (the next
//! run was no faster than this one). A next run on other partitions ran
//! other tasks: it checks nothing, and says so.

use crate::diagnosis::Finding;
use crate::whatif::{Shape, Work, knee};
use serde::Serialize;

/// A change worth less than this share of the replayed time is not
/// advised (a faster run) ...
const MIN_SAVING: f64 = 0.05;
/// ... and a smaller shape is advised when it costs at most this share.
const MAX_SLOWDOWN: f64 = 0.02;

/// One piece of advice.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Advice {
    /// What to set: `executors`, `--concurrent-tasks` (task slots per
    /// executor), `executor` (replace one), or a session setting.
    pub setting: String,
    /// The value to set it to (for `executor`, the one to replace).
    pub value: String,
    /// The job's predicted time with it (ms); `null` when not predicted.
    pub predicted_ms: Option<u64>,
    /// Time saved against the replay on the job's own shape (ms; negative
    /// for a slower, cheaper shape).
    pub saving_ms: Option<i64>,
    /// Slot-seconds the job would hold the cluster for with it (its time
    /// times the shape's slots), beside the replay's on its own shape.
    pub slot_seconds: Option<f64>,
    /// The same for the shape it ran on.
    pub current_slot_seconds: f64,
    /// How the number was had, and what it assumes.
    pub basis: String,
    /// The finding it answers, if one.
    pub finding: Option<&'static str>,
    /// The shape it predicts for, where it is one (`executors`,
    /// `--concurrent-tasks`).
    pub shape: Option<Shape>,
    /// What the query's next run did, when it ran on [`Advice::shape`]
    /// with the same partitions.
    pub next_run: Option<Checked>,
}

/// A prediction is contradicted past this error (`|predicted - actual| /
/// actual`): the bound past which a query's replays are unreliable.
pub const CONTRADICTED: f64 = crate::accuracy::UNRELIABLE_ERROR;

/// A piece of advice set beside what the next run on its shape did.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Checked {
    /// The next run.
    pub job_id: String,
    /// What it took (ms).
    pub actual_ms: u64,
    /// `|predicted_ms - actual_ms| / actual_ms`.
    pub error: f64,
    /// Off by more than [`CONTRADICTED`], or a promised saving that did
    /// not come.
    pub contradicted: bool,
}

/// The query's next completed run, and this job's replay on its shape.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct NextRun {
    /// The next run.
    pub job_id: String,
    /// The shape it ran on.
    pub shape: Shape,
    /// What it took (ms).
    pub observed_ms: u64,
    /// The partitions of its widest stage, beside this job's.
    pub partitions: u64,
    /// It computed other partitions than this job: other tasks, which no
    /// replay of this job's predicts (`predicted_ms` and `error` are
    /// then `null`).
    pub partitions_changed: bool,
    /// This job replayed on its shape (ms).
    pub predicted_ms: Option<u64>,
    /// `|predicted_ms - observed_ms| / observed_ms`.
    pub error: Option<f64>,
}

/// Sets `next` (the query's next completed run, `next_id`) beside `work`
/// (this job) and the advice given for it: each piece of advice on the
/// shape `next` ran on gains what it did.
pub fn check_next_run(work: &Work, advice: &mut [Advice], next_id: &str, next: &Work) -> NextRun {
    let shape = next.observed_shape();
    let actual = next.observed_ms();
    let changed = work.partitions() != next.partitions();
    let error = |predicted: u64| (predicted as f64 - actual as f64).abs() / actual.max(1) as f64;
    let predicted = (!changed).then(|| work.replay(shape));
    if !changed {
        for a in advice.iter_mut().filter(|a| a.shape == Some(shape)) {
            let Some(p) = a.predicted_ms else { continue };
            let promised = a.saving_ms.is_some_and(|s| s > 0);
            a.next_run = Some(Checked {
                job_id: next_id.to_string(),
                actual_ms: actual,
                error: error(p),
                contradicted: error(p) > CONTRADICTED || (promised && actual >= work.observed_ms()),
            });
        }
    }
    NextRun {
        job_id: next_id.to_string(),
        shape,
        observed_ms: actual,
        partitions: next.partitions(),
        partitions_changed: changed,
        predicted_ms: predicted,
        error: predicted.map(error),
    }
}

/// The advice for `work` (a finished job), ranked by the time it saves,
/// then by the slot-seconds it saves. `executors` are the job's executor
/// ids in the records' order (for `slow_executor` findings, whose
/// messages gain the prediction).
pub fn advise(work: &Work, executors: &[String], findings: &mut [Finding]) -> Vec<Advice> {
    let seen = work.observed_shape();
    let base = work.replay(seen);
    let slot_seconds = |ms: u64, s: Shape| ms as f64 * s.total() as f64 / 1000.0;
    let current = slot_seconds(base, seen);
    let mut out: Vec<Advice> = Vec::new();
    let mut shape_advice = |setting: &str, value: String, shape: Shape, basis: &str| {
        let predicted = work.replay(shape);
        let saving = base as i64 - predicted as i64;
        let cheaper =
            shape.total() < seen.total() && predicted as f64 <= base as f64 * (1.0 + MAX_SLOWDOWN);
        if shape == seen || (saving as f64) < base as f64 * MIN_SAVING && !cheaper {
            return;
        }
        if out.iter().any(|a| a.setting == setting && a.value == value) {
            return;
        }
        out.push(Advice {
            setting: setting.to_string(),
            value,
            predicted_ms: Some(predicted),
            saving_ms: Some(saving),
            slot_seconds: Some(slot_seconds(predicted, shape)),
            current_slot_seconds: current,
            basis: basis.to_string(),
            finding: None,
            shape: Some(shape),
            next_run: None,
        });
    };
    let replay = "the job's tasks replayed on that shape";
    let more = Shape {
        executors: seen.executors + 1,
        ..seen
    };
    shape_advice("executors", more.executors.to_string(), more, replay);
    let double = Shape {
        executors: seen.executors * 2,
        ..seen
    };
    if double != more {
        shape_advice("executors", double.executors.to_string(), double, replay);
    }
    let slots = Shape {
        slots: seen.slots * 2,
        ..seen
    };
    shape_advice(
        "--concurrent-tasks",
        slots.slots.to_string(),
        slots,
        "the job's tasks replayed on that shape, assuming each executor has the cores and \
         memory for twice the tasks at the same speed",
    );
    if seen.executors > 1 {
        let fewer = Shape {
            executors: seen.executors - 1,
            ..seen
        };
        shape_advice("executors", fewer.executors.to_string(), fewer, replay);
    }
    if let Some(k) = knee(&work.curve(seen.slots), work.critical_path())
        && k.shape.executors != more.executors
        && k.shape.executors != double.executors
    {
        shape_advice(
            "executors",
            k.shape.executors.to_string(),
            k.shape,
            "the job's tasks replayed on that shape: the knee, the fewest executors within 10% \
             of the critical path",
        );
    }
    answer_findings(
        work,
        executors,
        findings,
        (seen, more, base, current),
        &mut out,
    );
    out.sort_by(|a, b| {
        let key = |x: &Advice| {
            (
                x.saving_ms.is_none(),
                std::cmp::Reverse(x.saving_ms.unwrap_or(0)),
                x.slot_seconds.map_or(0, |s| (s * 1000.0) as i64),
            )
        };
        key(a).cmp(&key(b))
    });
    out
}

/// Advice for the findings a replay can price (a slow executor; queueing
/// gains a figure), and the settings that change the tasks, unpriced.
fn answer_findings(
    work: &Work,
    executors: &[String],
    findings: &mut [Finding],
    (seen, more, base, current): (Shape, Shape, u64, f64),
    out: &mut Vec<Advice>,
) {
    let slot_seconds = |ms: u64, s: Shape| ms as f64 * s.total() as f64 / 1000.0;
    for f in findings.iter_mut() {
        match f.kind {
            "slow_executor" => {
                let Some(id) = f.executor.clone() else {
                    continue;
                };
                let Some(x) = executors.iter().position(|e| *e == id) else {
                    continue;
                };
                let predicted = work.without_executor(x as u32).replay(seen);
                let saving = base as i64 - predicted as i64;
                f.message.push_str(&format!(
                    " Replayed with its tasks at the other executors' pace, the job is predicted \
                     to take {predicted} ms against {base} ms replayed as it ran."
                ));
                out.push(Advice {
                    setting: "executor".into(),
                    value: id,
                    predicted_ms: Some(predicted),
                    saving_ms: Some(saving),
                    slot_seconds: Some(slot_seconds(predicted, seen)),
                    current_slot_seconds: current,
                    basis: "the job replayed with this executor's tasks at the other executors' \
                            median pace on each stage: replace or drain it"
                        .into(),
                    finding: Some("slow_executor"),
                    shape: None,
                    next_run: None,
                });
            }
            "queueing" => {
                let predicted = work.replay(more);
                f.message.push_str(&format!(
                    " With {} executors its own tasks are predicted to take {predicted} ms \
                     against {base} ms replayed on its shape (the wait for slots other jobs \
                     held is not replayed).",
                    more.executors
                ));
            }
            "skew" | "executor_imbalance" | "spill" | "peak_memory" => {
                let (setting, value) = match f.kind {
                    "spill" | "peak_memory" => ("executor memory", "more"),
                    _ => ("datafusion.execution.target_partitions", "more"),
                };
                if out.iter().any(|a| a.setting == setting) {
                    continue;
                }
                out.push(Advice {
                    setting: setting.into(),
                    value: value.into(),
                    predicted_ms: None,
                    saving_ms: None,
                    slot_seconds: None,
                    current_slot_seconds: current,
                    basis: "not predicted: changing it changes the tasks themselves, which a \
                            replay of the recorded tasks cannot know"
                        .into(),
                    finding: Some(f.kind),
                    shape: None,
                    next_run: None,
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
