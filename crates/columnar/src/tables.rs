//! The four tables' schemas, and the rows of one job: `stages`, `tasks`
//! and `operators` from its log's records and stored metrics plans, and
//! the per-job facts `jobs` takes from them (task counts, rows out).
//!
//! Times are UTC timestamps in milliseconds, durations `Int64`
//! milliseconds; a value not known is null, never 0.

use bjh_analysis::plan_metrics::OperatorMetric;
use bjh_analysis::stats::quantile;
use bjh_store::query::JobFacts;
use bjh_store::records::{JobRecords, StageMarks, Task};
use datafusion::arrow::array::{
    ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringViewBuilder,
    TimestampMillisecondBuilder, UInt32Builder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
}

fn field(name: &str, t: DataType, nullable: bool) -> Field {
    Field::new(name, t, nullable)
}

/// `jobs`: one row per job.
pub static JOBS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        field("job_id", DataType::Utf8View, false),
        field("job_name", DataType::Utf8View, false),
        field("status", DataType::Utf8View, false),
        field("queued_time", ts(), true),
        field("start_time", ts(), true),
        field("end_time", ts(), true),
        field("duration_ms", DataType::Int64, true),
        field("stages", DataType::Int64, true),
        field("completed_stages", DataType::Int64, true),
        field("tasks", DataType::Int64, true),
        field("failed_tasks", DataType::Int64, true),
        field("output_rows", DataType::Int64, true),
        field("error_message", DataType::Utf8View, true),
        field("dropped_records", DataType::Int64, true),
        field("scheduler_id", DataType::Utf8View, true),
        field("log_size", DataType::Int64, true),
        field("query_hash", DataType::Utf8View, true),
        field("query_label", DataType::Utf8View, true),
        field("busy_slot_ms", DataType::Int64, true),
        field("failed_slot_ms", DataType::Int64, true),
    ]))
});

/// `usage`: one row per hour and executor the cluster log shows up
/// (`store::cluster`): its slots, how long it was up in the hour, and
/// the slot time that makes.
pub static USAGE: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        field("hour", ts(), false),
        field("scheduler_id", DataType::Utf8View, false),
        field("executor_id", DataType::Utf8View, false),
        field("slots", DataType::Int64, false),
        field("up_ms", DataType::Int64, false),
        field("capacity_slot_ms", DataType::Int64, false),
        field("estimated", DataType::Boolean, false),
    ]))
});

/// Rows the `usage` table holds at most (an executor's hour each: 100
/// executors over a year and more); past it, the oldest hours are left
/// out and the server's log says so.
pub const MAX_USAGE_ROWS: usize = 1 << 20;

/// The `usage` rows of `intervals`, cut into hours.
pub fn usage_batch(intervals: &[bjh_store::cluster::SlotInterval]) -> RecordBatch {
    use datafusion::arrow::array::BooleanBuilder;
    const HOUR: u64 = 3_600_000;
    let mut hour = TimestampMillisecondBuilder::new();
    let mut text: [StringViewBuilder; 2] = Default::default();
    let mut ints: [Int64Builder; 3] = Default::default();
    let mut estimated = BooleanBuilder::new();
    // The newest intervals first, so that past the cap the oldest hours
    // are the ones left out (the store's intervals end at now, so a log
    // dated ahead adds none).
    let mut order: Vec<&bjh_store::cluster::SlotInterval> = intervals.iter().collect();
    order.sort_by_key(|i| std::cmp::Reverse(i.to));
    let mut rows = 0usize;
    for i in order {
        let mut at = i.from - i.from % HOUR;
        while at < i.to && rows < MAX_USAGE_ROWS {
            rows += 1;
            let up = i.to.min(at + HOUR).saturating_sub(i.from.max(at));
            if up > 0 {
                hour.append_value(at as i64);
                text[0].append_value(&i.scheduler_id);
                text[1].append_value(&i.executor_id);
                ints[0].append_value(i64::from(i.slots));
                ints[1].append_value(up as i64);
                ints[2].append_value(clamp(up.saturating_mul(u64::from(i.slots))));
                estimated.append_value(i.estimated && i.to <= at + HOUR);
            }
            at += HOUR;
        }
    }
    if rows >= MAX_USAGE_ROWS {
        log::warn!("the usage table holds its newest {MAX_USAGE_ROWS} executor-hours only");
    }
    let [scheduler, executor] = text;
    let [slots, up, capacity] = ints;
    finish(
        &USAGE,
        vec![
            Arc::new(with_utc(hour)),
            Arc::new({ scheduler }.finish()),
            Arc::new({ executor }.finish()),
            Arc::new({ slots }.finish()),
            Arc::new({ up }.finish()),
            Arc::new({ capacity }.finish()),
            Arc::new(estimated.finish()),
        ],
    )
}

/// `stages`: one row per stage of a job.
pub static STAGES: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        field("job_id", DataType::Utf8View, false),
        field("stage_id", DataType::UInt32, false),
        field("status", DataType::Utf8View, true),
        field("start_time", ts(), true),
        field("end_time", ts(), true),
        field("duration_ms", DataType::Int64, true),
        field("tasks", DataType::Int64, false),
        field("failed_tasks", DataType::Int64, false),
        field("input_rows", DataType::Int64, false),
        field("output_rows", DataType::Int64, false),
        field("elapsed_compute_ms", DataType::Int64, false),
        field("task_duration_min_ms", DataType::Int64, true),
        field("task_duration_p25_ms", DataType::Int64, true),
        field("task_duration_p50_ms", DataType::Int64, true),
        field("task_duration_p75_ms", DataType::Int64, true),
        field("task_duration_max_ms", DataType::Int64, true),
    ]))
});

/// `tasks`: one row per task attempt.
pub static TASKS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        field("job_id", DataType::Utf8View, false),
        field("stage_id", DataType::UInt32, false),
        field("partition", DataType::UInt32, false),
        field("attempt", DataType::UInt32, false),
        field("executor", DataType::Utf8View, false),
        field("status", DataType::Utf8View, false),
        field("failure_reason", DataType::Utf8View, true),
        field("launch_time", ts(), true),
        field("start_time", ts(), true),
        field("end_time", ts(), true),
        field("duration_ms", DataType::Int64, false),
        field("input_rows", DataType::Int64, false),
        field("output_rows", DataType::Int64, false),
        field("compute_ms", DataType::Int64, false),
    ]))
});

/// `operators`: one row per metric of an operator, where the stage's
/// metrics plan was recorded.
pub static OPERATORS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        field("job_id", DataType::Utf8View, false),
        field("stage_id", DataType::UInt32, false),
        field("position", DataType::UInt32, false),
        field("operator", DataType::Utf8View, false),
        field("metric", DataType::Utf8View, false),
        field("value", DataType::Float64, false),
        field("unit", DataType::Utf8View, false),
    ]))
});

/// What `jobs` takes from a job's records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobTotals {
    /// Task attempts.
    pub tasks: i64,
    /// Failed attempts.
    pub failed_tasks: i64,
    /// Rows written by the last stage's successful tasks.
    pub output_rows: i64,
    /// The scheduler that ran it, when recorded.
    pub scheduler_id: Option<String>,
    /// Its slot time (`format::usage`); `None` in segments written before
    /// it was kept.
    pub usage: Option<bjh_format::usage::SlotUsage>,
}

/// One job's rows of the three record tables, and its totals.
#[derive(Debug, Clone)]
pub struct JobRows {
    /// Its `stages` rows.
    pub stages: RecordBatch,
    /// Its `tasks` rows.
    pub tasks: RecordBatch,
    /// Its `operators` rows.
    pub operators: RecordBatch,
    /// What `jobs` shows of it.
    pub totals: JobTotals,
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn opt_ts(t: u64) -> Option<i64> {
    (t > 0).then_some(t as i64)
}

fn finish(schema: &SchemaRef, columns: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(schema.clone(), columns).expect("columns built to the schema")
}

/// The rows of job `job_id` from its records, the status of each stage
/// where known, and its operators' metrics.
pub fn job_rows(
    job_id: &str,
    records: &JobRecords,
    stage_status: &BTreeMap<u32, String>,
    slots: &BTreeMap<(u32, u32), u32>,
    metrics: &[OperatorMetric],
) -> JobRows {
    let mut tasks = TaskColumns::default();
    let mut by_stage: BTreeMap<u32, Vec<&Task>> = BTreeMap::new();
    for id in records.stages.keys().chain(stage_status.keys()) {
        by_stage.entry(*id).or_default();
    }
    for task in &records.tasks {
        by_stage.entry(task.stage_id).or_default().push(task);
        let executor = records.executors.get(task.executor as usize);
        tasks.push(job_id, task, executor.map_or("", String::as_str));
    }
    let mut stages = StageColumns::default();
    let mut last_stage_rows = 0i64;
    for (stage_id, tasks) in &by_stage {
        let marks = records.stages.get(stage_id);
        let status = marks
            .and_then(|m| m.status.clone())
            .or_else(|| stage_status.get(stage_id).cloned());
        last_stage_rows = stages.push(job_id, *stage_id, status, marks, tasks);
    }
    let mut operators = OperatorColumns::default();
    for m in metrics {
        operators.push(job_id, m);
    }
    JobRows {
        stages: stages.finish(),
        tasks: tasks.finish(),
        operators: operators.finish(),
        totals: JobTotals {
            tasks: records.tasks.len() as i64,
            failed_tasks: records.tasks.iter().filter(|t| !t.succeeded()).count() as i64,
            output_rows: last_stage_rows,
            scheduler_id: records.start.scheduler_id.clone(),
            usage: Some(records.usage(slots)),
        },
    }
}

/// The `tasks` columns being built, in the table's order.
#[derive(Default)]
struct TaskColumns {
    job_id: StringViewBuilder,
    stage_id: UInt32Builder,
    task_id: UInt32Builder,
    stage_attempt: UInt32Builder,
    executor: StringViewBuilder,
    status: StringViewBuilder,
    failure_reason: StringViewBuilder,
    launch: TimestampMillisecondBuilder,
    start: TimestampMillisecondBuilder,
    end: TimestampMillisecondBuilder,
    duration: Int64Builder,
    input_rows: Int64Builder,
    output_rows: Int64Builder,
    compute: Int64Builder,
}

impl TaskColumns {
    fn push(&mut self, job_id: &str, task: &Task, executor: &str) {
        self.job_id.append_value(job_id);
        self.stage_id.append_value(task.stage_id);
        self.task_id.append_value(task.task_id);
        self.stage_attempt.append_value(task.stage_attempt);
        self.executor.append_value(executor);
        let status = if task.succeeded() {
            "Successful"
        } else {
            "Failed"
        };
        self.status.append_value(status);
        let reason = task.failure.as_ref().map(|(reason, _)| reason.as_str());
        self.failure_reason.append_option(reason);
        self.launch.append_option(opt_ts(task.launch_time));
        self.start.append_option(opt_ts(task.begin()));
        self.end.append_option(opt_ts(task.end_exec_time));
        self.duration.append_value(task.duration() as i64);
        self.input_rows.append_value(task.input_rows as i64);
        self.output_rows.append_value(task.output_rows as i64);
        self.compute
            .append_value((task.compute_nanos / 1_000_000) as i64);
    }

    fn finish(mut self) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.job_id.finish()),
            Arc::new(self.stage_id.finish()),
            Arc::new(self.task_id.finish()),
            Arc::new(self.stage_attempt.finish()),
            Arc::new(self.executor.finish()),
            Arc::new(self.status.finish()),
            Arc::new(self.failure_reason.finish()),
            Arc::new(with_utc(self.launch)),
            Arc::new(with_utc(self.start)),
            Arc::new(with_utc(self.end)),
            Arc::new(self.duration.finish()),
            Arc::new(self.input_rows.finish()),
            Arc::new(self.output_rows.finish()),
            Arc::new(self.compute.finish()),
        ];
        finish(&TASKS, columns)
    }
}

/// The `stages` columns being built, in the table's order.
#[derive(Default)]
struct StageColumns {
    job_id: StringViewBuilder,
    stage_id: UInt32Builder,
    status: StringViewBuilder,
    start: TimestampMillisecondBuilder,
    end: TimestampMillisecondBuilder,
    duration: Int64Builder,
    succeeded: Int64Builder,
    failed: Int64Builder,
    input_rows: Int64Builder,
    output_rows: Int64Builder,
    compute: Int64Builder,
    /// Task durations: min, p25, median, p75, max.
    quantiles: [Int64Builder; 5],
}

impl StageColumns {
    /// Adds a stage's row from its marks (when recorded) and its task
    /// attempts; gives the rows its successful tasks wrote.
    fn push(
        &mut self,
        job_id: &str,
        stage_id: u32,
        status: Option<String>,
        marks: Option<&StageMarks>,
        tasks: &[&Task],
    ) -> i64 {
        let ok: Vec<_> = tasks.iter().filter(|t| t.succeeded()).collect();
        let begin = marks
            .map(|m| m.start_time)
            .filter(|&t| t > 0)
            .or_else(|| tasks.iter().map(|t| t.begin()).filter(|&t| t > 0).min());
        let finish_time = marks
            .map(|m| m.end_time)
            .filter(|&t| t > 0)
            .or_else(|| tasks.iter().map(|t| t.end_exec_time).max());
        let mut durations: Vec<u64> = ok.iter().map(|t| t.duration()).collect();
        durations.sort_unstable();
        let output_rows: i64 = ok.iter().map(|t| t.output_rows as i64).sum();
        self.job_id.append_value(job_id);
        self.stage_id.append_value(stage_id);
        self.status.append_option(status);
        self.start.append_option(begin.and_then(opt_ts));
        self.end.append_option(finish_time.and_then(opt_ts));
        self.duration.append_option(match (begin, finish_time) {
            (Some(a), Some(b)) if a > 0 && b >= a => Some((b - a) as i64),
            _ => None,
        });
        self.succeeded.append_value(ok.len() as i64);
        self.failed.append_value((tasks.len() - ok.len()) as i64);
        self.input_rows
            .append_value(ok.iter().map(|t| t.input_rows as i64).sum());
        self.output_rows.append_value(output_rows);
        let compute = ok.iter().map(|t| t.compute_nanos).sum::<u64>() as i64 / 1_000_000;
        self.compute.append_value(compute);
        for (b, p) in self.quantiles.iter_mut().zip([0.0, 0.25, 0.5, 0.75, 1.0]) {
            b.append_option((!durations.is_empty()).then(|| quantile(&durations, p) as i64));
        }
        output_rows
    }

    fn finish(mut self) -> RecordBatch {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.job_id.finish()),
            Arc::new(self.stage_id.finish()),
            Arc::new(self.status.finish()),
            Arc::new(with_utc(self.start)),
            Arc::new(with_utc(self.end)),
            Arc::new(self.duration.finish()),
            Arc::new(self.succeeded.finish()),
            Arc::new(self.failed.finish()),
            Arc::new(self.input_rows.finish()),
            Arc::new(self.output_rows.finish()),
            Arc::new(self.compute.finish()),
        ];
        for mut q in self.quantiles {
            columns.push(Arc::new(q.finish()));
        }
        finish(&STAGES, columns)
    }
}

/// The `operators` columns being built, in the table's order.
#[derive(Default)]
struct OperatorColumns {
    job_id: StringViewBuilder,
    stage_id: UInt32Builder,
    position: UInt32Builder,
    operator: StringViewBuilder,
    metric: StringViewBuilder,
    value: Float64Builder,
    unit: StringViewBuilder,
}

impl OperatorColumns {
    fn push(&mut self, job_id: &str, m: &OperatorMetric) {
        self.job_id.append_value(job_id);
        self.stage_id.append_value(m.stage_id);
        self.position.append_value(m.position);
        self.operator.append_value(&m.operator);
        self.metric.append_value(&m.metric);
        self.value.append_value(m.value);
        self.unit.append_value(m.unit);
    }

    fn finish(mut self) -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.job_id.finish()),
            Arc::new(self.stage_id.finish()),
            Arc::new(self.position.finish()),
            Arc::new(self.operator.finish()),
            Arc::new(self.metric.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.unit.finish()),
        ];
        finish(&OPERATORS, columns)
    }
}

fn with_utc(
    mut b: TimestampMillisecondBuilder,
) -> datafusion::arrow::array::TimestampMillisecondArray {
    b.finish().with_timezone("UTC")
}

/// What `jobs` shows of one job beside its index facts.
pub struct JobLine<'a> {
    /// The index's facts.
    pub facts: &'a dyn JobFacts,
    /// `Completed.`, `Failed: ...`: the scheduler's long status.
    pub job_status: &'a str,
    /// Stages.
    pub stages: u32,
    /// Of which completed.
    pub completed_stages: u32,
    /// Its log's size, when there is a log.
    pub log_size: Option<u64>,
    /// From the job's rows, when the columnar history has them.
    pub totals: Option<&'a JobTotals>,
}

/// The `jobs` table of `lines`.
pub fn jobs_batch(lines: &[JobLine<'_>]) -> RecordBatch {
    let n = lines.len();
    let mut text: [StringViewBuilder; 3] = Default::default();
    let mut times: [TimestampMillisecondBuilder; 3] = Default::default();
    let mut ints: [Int64Builder; 11] = Default::default();
    let mut extra: [StringViewBuilder; 4] = Default::default();
    for b in &mut ints {
        *b = Int64Builder::with_capacity(n);
    }
    let labels = bjh_store::labels::all();
    for l in lines {
        let f = l.facts;
        text[0].append_value(f.job_id());
        text[1].append_value(f.job_name());
        text[2].append_value(f.state().status_word());
        times[0].append_option(opt_ts(f.queued_time()));
        times[1].append_option(opt_ts(f.start_time()));
        times[2].append_option(opt_ts(f.end_time()));
        ints[0].append_option(f.duration().map(|d| d as i64));
        ints[1].append_value(i64::from(l.stages));
        ints[2].append_value(i64::from(l.completed_stages));
        ints[3].append_option(l.totals.map(|t| t.tasks));
        ints[4].append_option(l.totals.map(|t| t.failed_tasks));
        ints[5].append_option(l.totals.map(|t| t.output_rows));
        extra[0].append_option((f.state() == bjh_format::JobState::Failed).then_some(l.job_status));
        ints[6].append_value(f.dropped_records() as i64);
        extra[1].append_option(l.totals.and_then(|t| t.scheduler_id.as_deref()));
        ints[7].append_option(l.log_size.map(|s| s as i64));
        let usage = l.totals.and_then(|t| t.usage);
        ints[9].append_option(usage.map(|u| clamp(u.busy_slot_ms)));
        ints[10].append_option(usage.map(|u| clamp(u.failed_slot_ms)));
        extra[2].append_option(
            (f.query_hash() != 0).then(|| bjh_format::query_hash::hash_text(f.query_hash())),
        );
        extra[3].append_option(labels.get(f.query_hash()));
    }
    drop(labels);
    let [id, name, status] = text;
    let [queued, start, end] = times;
    let [
        duration,
        stages,
        completed,
        tasks,
        failed,
        rows,
        dropped,
        size,
        _,
        busy,
        failed_slots,
    ] = ints;
    let [error, scheduler, hash, label] = extra;
    finish(
        &JOBS,
        vec![
            Arc::new({ id }.finish()),
            Arc::new({ name }.finish()),
            Arc::new({ status }.finish()),
            Arc::new(with_utc(queued)),
            Arc::new(with_utc(start)),
            Arc::new(with_utc(end)),
            Arc::new({ duration }.finish()),
            Arc::new({ stages }.finish()),
            Arc::new({ completed }.finish()),
            Arc::new({ tasks }.finish()),
            Arc::new({ failed }.finish()),
            Arc::new({ rows }.finish()),
            Arc::new({ error }.finish()),
            Arc::new({ dropped }.finish()),
            Arc::new({ scheduler }.finish()),
            Arc::new({ size }.finish()),
            Arc::new({ hash }.finish()),
            Arc::new({ label }.finish()),
            Arc::new({ busy }.finish()),
            Arc::new({ failed_slots }.finish()),
        ],
    )
}
