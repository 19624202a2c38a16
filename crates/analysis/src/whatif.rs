//! What-if replays: a job's recorded task attempts placed again on a
//! cluster of another shape (executors x task slots each), in the manner of
//! Sparklens' replay of a Spark application's tasks.
//!
//! The model (`docs/diagnosis.md`, "What if"):
//!
//! - **The work** is every task attempt the log records, failed ones
//!   included (they held a slot), each taking the time it held its slot:
//!   from its launch to its end on the executor. Attempts keep their stage
//!   and their order within it (task id). Ballista 55 packs as many of a
//!   stage's partitions into one task as the executor has slots free and
//!   runs them side by side, one slot each (a stage that funnels into one
//!   partition packs them all into a task of one slot), so a task that
//!   held k slots is k units of work of its duration: the replay places
//!   partitions, not tasks, and a shape with other slots packs them
//!   otherwise.
//! - **Slots shared.** Where the log records the executors' slots (ours,
//!   since the `JobStart` record names them), an attempt that ran while
//!   its executor held more partitions than it has slots (Ballista's pull
//!   mode lets a task of several partitions and another task overlap) is
//!   counted at the share of a slot it had: its time times the slots over
//!   the partitions the executor held meanwhile, on average. A shape's
//!   slots then run one unit of work each.
//! - **Dependencies** are the stage graph's edges: a stage becomes
//!   runnable when every stage it reads has finished.
//! - **Placement** follows the scheduler's hand-out: runnable stages in the
//!   order they became runnable, each stage's tasks in task-id order, each
//!   task on the slot that frees first (list scheduling).
//! - **Overheads carried over as measured:** the time from the job's start
//!   to its first launch (queueing, planning), the stretches between its
//!   first launch and its last task's end when no task ran (stage
//!   resolution on the scheduler), and the time from the last task's end to
//!   the job's end. They are the same at every shape.
//!
//! From that model: the replay at the shape the job ran on (its difference
//! from the observed time is the model's error on the job), the prediction
//! at another shape, the critical path (every task on a slot of its own: no
//! slot ever waited for) and the ideal (all task time spread evenly over
//! the slots, dependencies ignored). A replay costs O(tasks x log tasks)
//! whatever the shape asked: more slots than tasks are never used.

use bjh_store::records::{JobRecords, Task};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

/// A cluster's shape: `executors`, each with `slots` task slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Shape {
    /// Executors.
    pub executors: u32,
    /// Task slots on each.
    pub slots: u32,
}

impl Shape {
    /// Task slots in all.
    pub fn total(self) -> u64 {
        u64::from(self.executors) * u64::from(self.slots)
    }
}

/// The most executors, and the most slots per executor, a replay is asked
/// for (a request beyond either is refused before any work).
pub const MAX_EXECUTORS: u32 = 10_000;
/// See [`MAX_EXECUTORS`].
pub const MAX_SLOTS: u32 = 1_024;
/// The most points of a curve.
pub const MAX_POINTS: usize = 32;
/// The most partitions a job's tasks may claim in all before their counts
/// are not believed (each task then counts as one): what a replay places
/// is bounded by the log's size, not by what its stage answer says.
pub const MAX_UNITS: usize = 1_000_000;

/// What the stored stage plans add to a job's records.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// The stage graph's edges, `(from, to)` stage ids: `to` reads `from`.
    pub edges: Vec<(u32, u32)>,
    /// Task slots each task held, by `(stage id, task id)`
    /// (`format::stages::task_slots`); 1 where not known.
    pub task_slots: BTreeMap<(u32, u32), u32>,
}

/// A job's work, as a replay sees it.
#[derive(Debug, Clone)]
pub struct Work {
    /// Stages in id order.
    stages: Vec<StageWork>,
    /// Job start to first launch (ms).
    lead_ms: u64,
    /// No task running, between the first launch and the last end (ms).
    gaps_ms: u64,
    /// Last task's end to the job's end (ms).
    tail_ms: u64,
    /// Job start to job end (ms).
    observed_ms: u64,
    /// The shape the job ran on: recorded, or as its tasks show it.
    observed: Shape,
    /// Whether the log recorded the shape (else it is inferred).
    recorded: bool,
    /// The partitions of its widest stage (see [`Work::partitions`]).
    partitions: u64,
}

/// One stage's work.
#[derive(Debug, Clone, Default)]
struct StageWork {
    /// Indices (into [`Work::stages`]) of the stages it reads.
    inputs: Vec<usize>,
    /// Its attempts in task-id order: the executor each ran on (index
    /// into [`JobRecords::executors`]), the time it held its slots (ms)
    /// and its partitions (slots held).
    tasks: Vec<(u32, u64, u32)>,
}

/// When an attempt took its slot: its launch, where recorded and not after
/// its start on the executor; else its start.
fn took_slot(t: &Task) -> u64 {
    if t.launch_time > 0 && t.launch_time <= t.begin() {
        t.launch_time
    } else {
        t.begin()
    }
}

/// How long an attempt held its slot (ms).
fn held(t: &Task) -> u64 {
    t.end_exec_time.saturating_sub(took_slot(t))
}

impl Work {
    /// The work of a job that ran from `start_time` to `end_time` (epoch
    /// ms, as the job list has them), laid out by `layout`. Edges naming
    /// stages without tasks are ignored; a cycle (a lying log) is broken
    /// where the replay meets it, never followed; a task's slots are
    /// capped at [`MAX_SLOTS`].
    pub fn of(records: &JobRecords, layout: &Layout, start_time: u64, end_time: u64) -> Self {
        let parts = |t: &Task| {
            let known = layout.task_slots.get(&(t.stage_id, t.task_id));
            known.copied().unwrap_or(1).clamp(1, MAX_SLOTS)
        };
        let recorded = records.start.executors.as_deref().filter(|e| !e.is_empty());
        // By id once, so that a long list (a lying log) costs one pass.
        let slots_of: HashMap<&str, u32> = recorded
            .into_iter()
            .flatten()
            .map(|e| (e.id.as_str(), e.slots.max(1)))
            .collect();
        let capacity: Vec<Option<u32>> = records
            .executors
            .iter()
            .map(|id| slots_of.get(id.as_str()).copied())
            .collect();
        let paces = paces(records, &parts, &capacity);
        let mut by_stage: BTreeMap<u32, Vec<(&Task, f64)>> = BTreeMap::new();
        for (t, pace) in records.tasks.iter().zip(paces) {
            by_stage.entry(t.stage_id).or_default().push((t, pace));
        }
        let index: BTreeMap<u32, usize> =
            by_stage.keys().enumerate().map(|(i, &s)| (s, i)).collect();
        let mut stages: Vec<StageWork> = by_stage
            .values_mut()
            .map(|tasks| {
                tasks.sort_by_key(|(t, _)| (t.task_id, t.stage_attempt, took_slot(t)));
                let work = |&(t, pace): &(&Task, f64)| {
                    let took = (held(t) as f64 * pace).round() as u64;
                    (t.executor, took, parts(t))
                };
                StageWork {
                    inputs: Vec::new(),
                    tasks: tasks.iter().map(work).collect(),
                }
            })
            .collect();
        for (from, to) in &layout.edges {
            if let (Some(&f), Some(&t)) = (index.get(from), index.get(to))
                && f != t
                && !stages[t].inputs.contains(&f)
            {
                stages[t].inputs.push(f);
            }
        }
        let claimed: usize = stages
            .iter()
            .flat_map(|s| &s.tasks)
            .map(|t| t.2 as usize)
            .sum();
        let believed = claimed <= MAX_UNITS.max(records.tasks.len());
        if !believed {
            stages
                .iter_mut()
                .flat_map(|s| &mut s.tasks)
                .for_each(|t| t.2 = 1);
        }
        // Each task counted once, whatever its attempts.
        let partitions = by_stage
            .values()
            .map(|tasks| {
                let mut seen = std::collections::HashSet::new();
                tasks
                    .iter()
                    .filter(|(t, _)| seen.insert(t.task_id))
                    .map(|(t, _)| if believed { u64::from(parts(t)) } else { 1 })
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let observed_ms = end_time.saturating_sub(start_time);
        let (lead_ms, gaps_ms, tail_ms) = overheads(records, start_time, end_time);
        Self {
            stages,
            lead_ms,
            gaps_ms,
            tail_ms,
            observed_ms,
            observed: match recorded {
                Some(e) => Shape {
                    executors: (e.len() as u32).clamp(1, MAX_EXECUTORS),
                    slots: e
                        .iter()
                        .map(|e| e.slots)
                        .max()
                        .unwrap_or(1)
                        .clamp(1, MAX_SLOTS),
                },
                None => observed_shape(records, |t| if believed { parts(t) } else { 1 }),
            },
            recorded: recorded.is_some(),
            partitions,
        }
    }

    /// The partitions of the job's widest stage, each task counted once
    /// with the partitions it computed: what
    /// `datafusion.execution.target_partitions` sets, the same for two
    /// runs of one query on any shape (a shape changes how partitions are
    /// grouped into tasks, not how many there are). Two runs that differ
    /// here ran different tasks, which a replay of one cannot predict.
    pub fn partitions(&self) -> u64 {
        self.partitions
    }

    /// The job's time from start to end, as observed (ms).
    pub fn observed_ms(&self) -> u64 {
        self.observed_ms
    }

    /// The shape the job ran on: as its `JobStart` recorded it (the
    /// executors registered, the most slots of one), else as its tasks
    /// show it (the executors that ran a task, the most slots one of them
    /// held at once).
    pub fn observed_shape(&self) -> Shape {
        self.observed
    }

    /// Whether [`Work::observed_shape`] was recorded rather than inferred.
    pub fn shape_recorded(&self) -> bool {
        self.recorded
    }

    /// What is the same at every shape: lead, gaps and tail (ms).
    fn overheads(&self) -> u64 {
        self.lead_ms
            .saturating_add(self.gaps_ms)
            .saturating_add(self.tail_ms)
    }

    /// Units of work in all: partitions of every attempt.
    fn task_count(&self) -> usize {
        let units = self.stages.iter().flat_map(|s| &s.tasks);
        units.map(|t| t.2 as usize).sum()
    }

    /// The job replayed on `shape` (ms, start to end).
    pub fn replay(&self, shape: Shape) -> u64 {
        self.overheads()
            .saturating_add(self.makespan(shape.total()))
    }

    /// The critical path (ms): the replay with a slot for every attempt,
    /// so no task ever waits for one.
    pub fn critical_path(&self) -> u64 {
        self.overheads()
            .saturating_add(self.makespan(self.task_count() as u64))
    }

    /// The ideal on `shape` (ms): all slot time spread evenly over its
    /// slots, dependencies ignored.
    pub fn ideal(&self, shape: Shape) -> u64 {
        let work: u64 = self
            .stages
            .iter()
            .flat_map(|s| &s.tasks)
            .fold(0u64, |a, t| {
                a.saturating_add(t.1.saturating_mul(u64::from(t.2)))
            });
        self.overheads()
            .saturating_add(work.div_ceil(shape.total().max(1)))
    }

    /// The same work with the attempts of `executor` (an index into
    /// [`JobRecords::executors`]) taking what the stage's attempts on the
    /// other executors took at the median; a stage only that executor ran
    /// is left as it was.
    pub fn without_executor(&self, executor: u32) -> Self {
        let mut out = self.clone();
        for stage in &mut out.stages {
            let mut others: Vec<u64> = stage
                .tasks
                .iter()
                .filter(|t| t.0 != executor)
                .map(|t| t.1)
                .collect();
            if others.is_empty() {
                continue;
            }
            others.sort_unstable();
            let pace = crate::stats::quantile(&others, 0.5);
            for t in stage.tasks.iter_mut().filter(|t| t.0 == executor) {
                t.1 = pace;
            }
        }
        out
    }

    /// From the first launch to the last end on `slots` slots (ms).
    fn makespan(&self, slots: u64) -> u64 {
        let n = self.stages.len();
        let width = usize::try_from(slots)
            .unwrap_or(usize::MAX)
            .clamp(1, self.task_count().max(1));
        let mut free: BinaryHeap<Reverse<u64>> = std::iter::repeat_n(Reverse(0), width).collect();
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut waiting: Vec<usize> = Vec::with_capacity(n);
        for (i, s) in self.stages.iter().enumerate() {
            waiting.push(s.inputs.len());
            for &f in &s.inputs {
                readers[f].push(i);
            }
        }
        let mut ready_at = vec![0u64; n];
        let mut queued = vec![false; n];
        let mut runnable: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        for i in (0..n).filter(|&i| waiting[i] == 0) {
            queued[i] = true;
            runnable.push(Reverse((0, i)));
        }
        let (mut placed, mut end_all, mut unplaced_from) = (0, 0u64, 0);
        while placed < n {
            let Some(Reverse((ready, i))) = runnable.pop() else {
                // A cycle: its lowest stage runs once all placed so far is done.
                while queued[unplaced_from] {
                    unplaced_from += 1;
                }
                queued[unplaced_from] = true;
                runnable.push(Reverse((end_all, unplaced_from)));
                continue;
            };
            let mut end = ready;
            for &(_, took, parts) in &self.stages[i].tasks {
                for _ in 0..parts {
                    let Reverse(at) = free.pop().unwrap_or(Reverse(0));
                    let done = at.max(ready).saturating_add(took);
                    free.push(Reverse(done));
                    end = end.max(done);
                }
            }
            placed += 1;
            end_all = end_all.max(end);
            for &r in &readers[i] {
                ready_at[r] = ready_at[r].max(end);
                waiting[r] -= 1;
                if waiting[r] == 0 && !queued[r] {
                    queued[r] = true;
                    runnable.push(Reverse((ready_at[r], r)));
                }
            }
        }
        end_all
    }

    /// Predictions for `slots` per executor and 1, 2, ... executors, up to
    /// [`MAX_POINTS`] points, ending at the first that reaches the critical
    /// path (more executors than that cannot be faster).
    pub fn curve(&self, slots: u32) -> Vec<Point> {
        let floor = self.critical_path();
        let mut out = Vec::new();
        for executors in 1..=MAX_POINTS as u32 {
            let shape = Shape { executors, slots };
            let predicted_ms = self.replay(shape);
            out.push(Point {
                shape,
                total_slots: shape.total(),
                predicted_ms,
            });
            if predicted_ms <= floor || shape.total() >= self.task_count() as u64 {
                break;
            }
        }
        out
    }
}

/// One point of a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Point {
    /// The shape.
    pub shape: Shape,
    /// Its slots in all.
    pub total_slots: u64,
    /// The job's predicted time on it (ms).
    pub predicted_ms: u64,
}

/// The smallest shape of `curve` within 10% of the critical path `floor`.
pub fn knee(curve: &[Point], floor: u64) -> Option<Point> {
    curve
        .iter()
        .find(|p| p.predicted_ms as f64 <= floor as f64 * 1.1)
        .copied()
}

/// What a job spent outside its tasks (ms): from `start_time` to its
/// first launch, the stretches between its first launch and its last end
/// with no task running, and from its last end to `end_time`. With no
/// task, all of it is lead.
fn overheads(records: &JobRecords, start_time: u64, end_time: u64) -> (u64, u64, u64) {
    let mut spans: Vec<(u64, u64)> = records.tasks.iter().map(span).collect();
    spans.sort_unstable();
    let (Some(&(first, _)), Some(last)) = (spans.first(), spans.iter().map(|s| s.1).max()) else {
        return (end_time.saturating_sub(start_time), 0, 0);
    };
    let mut gaps = 0u64;
    let mut reach = first;
    for &(from, to) in &spans {
        gaps += from.saturating_sub(reach);
        reach = reach.max(to);
    }
    let lead = if start_time == 0 {
        0
    } else {
        first.saturating_sub(start_time)
    };
    (lead, gaps, end_time.saturating_sub(last))
}

/// When an attempt held its slot: from [`took_slot`] to its end.
fn span(t: &Task) -> (u64, u64) {
    let from = took_slot(t);
    (from, t.end_exec_time.max(from))
}

/// Each attempt's pace, in the order of `records.tasks`: on an executor
/// whose slots are known (`capacity`, by executor index), its slots over
/// the slots its attempts held on average while this one ran, at most 1;
/// elsewhere 1. One sweep per executor, then a binary search per attempt.
fn paces(
    records: &JobRecords,
    parts: &impl Fn(&Task) -> u32,
    capacity: &[Option<u32>],
) -> Vec<f64> {
    let known = |t: &Task| capacity.get(t.executor as usize).copied().flatten();
    let mut events: BTreeMap<u32, Vec<(u64, i64)>> = BTreeMap::new();
    for t in records.tasks.iter().filter(|t| known(t).is_some()) {
        let ((from, to), held) = (span(t), i64::from(parts(t)));
        let e = events.entry(t.executor).or_default();
        e.extend([(from, held), (to, -held)]);
    }
    // Per executor: (time, slots held from then on, slot-ms held before).
    let curves: BTreeMap<u32, Vec<(u64, i64, f64)>> = events
        .into_iter()
        .map(|(x, mut e)| {
            e.sort_unstable();
            let (mut level, mut area, mut last) = (0i64, 0f64, e.first().map_or(0, |p| p.0));
            let curve = e.into_iter().map(|(t, step)| {
                area += level as f64 * (t - last) as f64;
                (level, last) = (level + step, t);
                (t, level, area)
            });
            (x, curve.collect())
        })
        .collect();
    let area_at = |curve: &[(u64, i64, f64)], t: u64| match curve.partition_point(|p| p.0 <= t) {
        0 => 0.0,
        i => {
            let (at, level, area) = curve[i - 1];
            area + level as f64 * (t - at) as f64
        }
    };
    let pace = |t: &Task| {
        let (Some(slots), Some(curve)) = (known(t), curves.get(&t.executor)) else {
            return 1.0;
        };
        let (from, to) = span(t);
        if to <= from {
            return 1.0;
        }
        let held = (area_at(curve, to) - area_at(curve, from)) / (to - from) as f64;
        (f64::from(slots) / held.max(1.0)).min(1.0)
    };
    records.tasks.iter().map(pace).collect()
}

/// The observed shape: executors that ran a task (at least 1), and the
/// most slots one of them held at once (at least 1), an attempt holding
/// one per partition (`parts`).
fn observed_shape(records: &JobRecords, parts: impl Fn(&Task) -> u32) -> Shape {
    let mut by_executor: BTreeMap<u32, Vec<(u64, i64)>> = BTreeMap::new();
    for t in &records.tasks {
        let events = by_executor.entry(t.executor).or_default();
        let from = took_slot(t);
        let held = i64::from(parts(t));
        // An end sorts before a start at the same instant: a slot handed on.
        events.push((from, held));
        events.push((t.end_exec_time.max(from), -held));
    }
    let slots = by_executor
        .values_mut()
        .map(|events| {
            events.sort_unstable();
            let (mut now, mut most) = (0i64, 0i64);
            for &(_, step) in events.iter() {
                now += step;
                most = most.max(now);
            }
            most
        })
        .max()
        .unwrap_or(1);
    Shape {
        executors: (by_executor.len() as u32).max(1),
        slots: slots.clamp(1, i64::from(MAX_SLOTS)) as u32,
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
