//! The diagnosis on generated jobs: a uniform one has no finding, and each
//! planted problem gives exactly its finding, with the evidence the test
//! computes from what it planted.

use super::*;
use bjh_format::JobState;
use bjh_store::records::Task;

const BASE: u64 = 1_800_000_000_000;
const STAGES: u32 = 3;
const TASKS: u32 = 16;
const EXECUTORS: [&str; 2] = ["exec-a", "exec-b"];

/// What to plant in the generated job.
#[derive(Clone, Copy, PartialEq)]
enum Plant {
    Nothing,
    /// Stage 1's last task on executor a runs 5x as long on the same rows.
    Straggler,
    /// Stage 1's last task on executor a reads 10x the rows and runs 6x as long.
    Skew,
    /// Five attempts in stage 2 fail on executor b before their retries succeed.
    RetryStorm,
    /// Every task on executor b runs 3x as long.
    SlowExecutor,
}

/// The duration and rows of a task before planting: 2,000 ms and 100,000
/// rows, each varied by a few percent.
fn base(stage: u32, task: u32) -> (u64, u64) {
    let wiggle = u64::from((stage * 7 + task * 13) % 9);
    (2_000 + wiggle * 20, 100_000 + wiggle * 500)
}

/// Tasks alternate between the two executors, each running its tasks back
/// to back; a stage starts 50 ms after the previous one ends.
fn job(plant: Plant) -> (JobHeader, JobRecords) {
    let mut tasks = Vec::new();
    let mut at = BASE;
    for stage in 0..STAGES {
        let mut lanes = [at, at];
        for task in 0..TASKS {
            let executor = task % 2;
            let (mut duration, mut rows) = base(stage, task);
            let last_on_a = stage == 1 && task == TASKS - 2;
            match plant {
                Plant::Straggler if last_on_a => duration *= 5,
                Plant::Skew if last_on_a => {
                    duration *= 6;
                    rows *= 10;
                }
                Plant::SlowExecutor if executor == 1 => duration *= 3,
                _ => {}
            }
            let begin = lanes[executor as usize];
            lanes[executor as usize] = begin + duration;
            tasks.push(Task {
                stage_id: stage,
                stage_attempt: 0,
                task_id: task,
                executor,
                failure: None,
                launch_time: begin,
                start_exec_time: begin,
                end_exec_time: begin + duration,
                input_rows: rows,
                output_rows: rows / 10,
                compute_nanos: duration * 900_000,
            });
        }
        if plant == Plant::RetryStorm && stage == 2 {
            for task in 0..5 {
                tasks.push(Task {
                    stage_id: stage,
                    stage_attempt: 0,
                    task_id: task,
                    executor: 1,
                    failure: Some(("ExecutionError".into(), "disk full".into())),
                    launch_time: at,
                    start_exec_time: at,
                    end_exec_time: at + 200,
                    input_rows: 0,
                    output_rows: 0,
                    compute_nanos: 0,
                });
            }
        }
        at = lanes[0].max(lanes[1]) + 50;
    }
    let records = JobRecords {
        start: bjh_format::record::JobStart {
            job_id: "gen".into(),
            queued_at: BASE - 100,
            submitted_at: BASE - 50,
            ..Default::default()
        },
        stages: Default::default(),
        tasks,
        executors: EXECUTORS.iter().map(|e| e.to_string()).collect(),
    };
    let header = JobHeader {
        job_id: "gen".into(),
        state: JobState::Completed,
        start_time: BASE - 50,
        end_time: at,
        dropped_records: Some(0),
        query_hash: 7,
    };
    (header, records)
}

fn kinds(d: &Diagnosis) -> Vec<&'static str> {
    d.findings.iter().map(|f| f.kind).collect()
}

fn run(plant: Plant) -> Diagnosis {
    let (header, records) = job(plant);
    diagnose(&header, &records, &[], &Thresholds::default())
}

#[test]
fn a_uniform_job_has_no_finding() {
    let d = run(Plant::Nothing);
    assert!(d.findings.is_empty(), "{:#?}", d.findings);
    assert!(!d.partial);
    assert_eq!(
        (d.stages, d.task_attempts, d.executors),
        (3, 48, 2),
        "counts"
    );
    assert_eq!(d.query_hash.as_deref(), Some("0000000000000007"));
}

#[test]
fn a_planted_straggler_is_exactly_a_straggler() {
    let d = run(Plant::Straggler);
    assert_eq!(kinds(&d), ["straggler"], "{:#?}", d.findings);
    let f = &d.findings[0];
    assert_eq!(
        (f.stage_id, f.tasks.as_slice()),
        (Some(1), &[TASKS - 2][..])
    );
    assert_eq!(f.executor.as_deref(), Some("exec-a"));
    // The planted duration, and the stage's p75 counted by hand: the 15
    // unplanted durations and the planted one, the 12th smallest.
    let planted = base(1, TASKS - 2).0 * 5;
    let mut durations: Vec<u64> = (0..TASKS)
        .filter(|&t| t != TASKS - 2)
        .map(|t| base(1, t).0)
        .chain([planted])
        .collect();
    durations.sort_unstable();
    assert_eq!(f.evidence["duration_ms"], planted);
    assert_eq!(f.evidence["p75_ms"], durations[11]);
    // It ends after every other task of the stage: by its excess over the
    // other lane's end.
    assert!(f.evidence["delay_ms"].as_u64().unwrap() > 0);
}

#[test]
fn a_planted_skew_is_exactly_a_skew() {
    let d = run(Plant::Skew);
    assert_eq!(kinds(&d), ["skew"], "{:#?}", d.findings);
    let f = &d.findings[0];
    assert_eq!(
        (f.stage_id, f.tasks.as_slice()),
        (Some(1), &[TASKS - 2][..])
    );
    let planted_rows = base(1, TASKS - 2).1 * 10;
    let mut rows: Vec<u64> = (0..TASKS)
        .filter(|&t| t != TASKS - 2)
        .map(|t| base(1, t).1)
        .chain([planted_rows])
        .collect();
    rows.sort_unstable();
    // Nearest-rank median of 16: the 8th smallest.
    assert_eq!(f.evidence["rows_max"], planted_rows);
    assert_eq!(f.evidence["rows_median"], rows[7]);
    let expected = (planted_rows as f64 / rows[7] as f64 * 100.0).round() / 100.0;
    assert_eq!(f.evidence["rows_ratio"], expected);
}

#[test]
fn a_planted_retry_storm_is_exactly_a_retry_storm() {
    let d = run(Plant::RetryStorm);
    assert_eq!(kinds(&d), ["retry_storm"], "{:#?}", d.findings);
    let f = &d.findings[0];
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.stage_id, Some(2));
    assert_eq!(f.tasks, [0, 1, 2, 3, 4]);
    assert_eq!(f.evidence["failed_attempts"], 5);
    assert_eq!(f.evidence["retried_tasks"], 5);
    assert_eq!(f.evidence["unrecovered_tasks"], 0);
    let groups = f.evidence["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["executor"], "exec-b");
    assert_eq!(groups[0]["reason"], "ExecutionError");
    assert_eq!(d.failed_attempts, 5);
}

#[test]
fn a_planted_slow_executor_is_exactly_a_slow_executor() {
    let d = run(Plant::SlowExecutor);
    assert_eq!(kinds(&d), ["slow_executor"], "{:#?}", d.findings);
    let f = &d.findings[0];
    assert_eq!(f.executor.as_deref(), Some("exec-b"));
    assert_eq!(f.evidence["stages"], json!([0, 1, 2]));
    let ratio = f.evidence["ratio"].as_f64().unwrap();
    assert!((2.8..=3.2).contains(&ratio), "planted 3x, found {ratio}");
}

#[test]
fn one_failure_is_failed_tasks_and_a_lost_record_makes_it_partial() {
    let (mut header, mut records) = job(Plant::Nothing);
    let mut failed = records.tasks[0].clone();
    failed.failure = Some(("FetchPartitionError".into(), "peer gone".into()));
    records.tasks.push(failed);
    header.dropped_records = Some(3);
    let d = diagnose(&header, &records, &[], &Thresholds::default());
    assert_eq!(
        kinds(&d),
        ["failed_tasks", "partial_log"],
        "{:#?}",
        d.findings
    );
    assert!(d.partial);
    assert_eq!(d.findings[0].evidence["retried_tasks"], 1);
}

#[test]
fn queueing_and_gaps_are_found() {
    let (header, mut records) = job(Plant::Nothing);
    // Queued a minute before the first task, planned in 40 s.
    records.start.queued_at = BASE - 60_000;
    records.start.submitted_at = BASE - 20_000;
    // Stage 2 starts 30 s late.
    for t in records.tasks.iter_mut().filter(|t| t.stage_id == 2) {
        t.launch_time += 30_000;
        t.start_exec_time += 30_000;
        t.end_exec_time += 30_000;
    }
    let d = diagnose(&header, &records, &[], &Thresholds::default());
    assert_eq!(
        kinds(&d),
        ["queueing", "scheduling_gaps"],
        "{:#?}",
        d.findings
    );
    let q = &d.findings[0].evidence;
    assert_eq!(
        (&q["wait_ms"], &q["planning_ms"], &q["waiting_for_slots_ms"]),
        (&json!(60_000), &json!(40_000), &json!(20_000))
    );
    let g = &d.findings[1].evidence;
    assert_eq!(g["gaps"][0]["ms"], 30_050);
    assert_eq!(g["gaps"][0]["after_stage"], 1);
    assert_eq!(g["gaps"][0]["before_stage"], 2);
}

#[test]
fn spill_and_memory_come_from_metrics_plans() {
    let stages = json!({"stages": [
        {"stage_id": "1", "stage_plan": "ShuffleWriterExec: partitioning: Hash([k@0], 4), metrics=[output_rows=10, write_time=1.2ms]\n  SortExec: expr=[k@0 ASC], preserve_partitioning=[false], metrics=[output_rows=100, elapsed_compute=1.5ms, spill_count=3, spilled_bytes=2.0 MB, spilled_rows=50, peak_mem_used=1.5 GB]\n    DataSourceExec: file_groups={1 group}, metrics=[output_rows=100]"},
        {"stage_id": 2, "stage_plan": "ProjectionExec: expr=[k@0 as k], metrics=[output_rows=4, peak_mem_used=2048]"},
        // As a real run prints it (nothing spilled).
        {"stage_id": "3", "stage_plan": "SortShuffleWriterExec: partitioning=Hash([k@0], 16), metrics=[output_rows=100, input_rows=100, spill_bytes=0, spill_count=0, repart_time=42.31µs, spill_time=2ns, write_time=213.53µs]\n  AggregateExec: mode=Partial, gby=[k@0 as k], aggr=[count(Int64(1))], metrics=[output_rows=100, elapsed_compute=634.18µs, output_bytes=1824.0 B, output_batches=1, spill_count=0, spilled_bytes=0.0 B, spilled_rows=0, reduction_factor=5.03% (100/1.99 K)]"}
    ]});
    let ops = operator_memory(stages.to_string().as_bytes());
    assert_eq!(
        ops,
        [
            OperatorMemory {
                stage_id: 1,
                operator: "SortExec".into(),
                spill_count: 3,
                spilled_bytes: 2 * 1024 * 1024,
                peak_mem_used: 1536 * 1024 * 1024,
            },
            OperatorMemory {
                stage_id: 2,
                operator: "ProjectionExec".into(),
                spill_count: 0,
                spilled_bytes: 0,
                peak_mem_used: 2048,
            },
            OperatorMemory {
                stage_id: 3,
                operator: "SortShuffleWriterExec".into(),
                ..Default::default()
            },
            OperatorMemory {
                stage_id: 3,
                operator: "AggregateExec".into(),
                ..Default::default()
            },
        ]
    );
    let (header, records) = job(Plant::Nothing);
    let d = diagnose(&header, &records, &ops, &Thresholds::default());
    assert_eq!(kinds(&d), ["spill", "peak_memory"], "{:#?}", d.findings);
    assert_eq!(operator_memory(b"not json"), []);
}
