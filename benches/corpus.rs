//! A deterministic corpus of event logs, written through our own writer.
//! Shared by the benches (`mod corpus;`).

#![allow(dead_code)]

use ballista_api_types::dto::TaskStatus;
use bjh_format::record::{
    JobEnd, JobEndStatus, JobIndex, JobStart, StageEnd, StageStart, TaskEnd, TaskMetrics,
    raw_or_null,
};
use bjh_metrics::HistoryMetrics;
use bjh_recording::writer::{self, Compression, WriterConfig, WriterMsg};
use std::path::Path;
use std::sync::Arc;

/// A tiny deterministic generator (64-bit LCG).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(
            seed.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const PLAN_LINE: &str =
    "  ProjectionExec: expr=[k@0 as k, count(Int64(1))@1 as count(*), avg(t.v)@2 as avg(t.v)]\n";

fn plan(lines: usize) -> String {
    PLAN_LINE.repeat(lines)
}

/// Task counts of a realistic mix: most jobs 8-64 tasks, some thousands,
/// and (when `big` is set) a few of 50,000.
pub fn mixed_task_count(rng: &mut Rng, big: bool) -> usize {
    match rng.below(100) {
        0 if big => 50_000,
        1..=4 => 1_000 + rng.below(4_000) as usize,
        _ => 8 + rng.below(57) as usize,
    }
}

/// The `/stages` response of a job with `tasks` tasks in one stage.
fn stages_json(tasks: usize, start: u64) -> String {
    let mut s = String::from(
        r#"{"stages":[{"stage_id":"1","stage_status":"Successful","input_rows":1000,"output_rows":100,"elapsed_compute":"12ms","stage_plan":""#,
    );
    s.push_str(&plan(8).replace('\n', "\\n"));
    s.push_str(r#"","tasks":["#);
    for t in 0..tasks {
        if t > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"id":{t},"status":"Successful","partition_id":[{t}],"scheduled_time":{start},"launch_time":{},"start_exec_time":{},"end_exec_time":{},"exec_duration":3,"finish_time":{},"input_rows":1000,"output_rows":100}}"#,
            start + 1,
            start + 2,
            start + 5,
            start + 6
        ));
    }
    s.push_str("]}]}");
    s
}

fn config_json(keys: usize) -> String {
    let entries: Vec<String> = (0..keys)
        .map(|i| format!(r#""datafusion.execution.option_{i:02}":"value-{i}""#))
        .collect();
    format!("{{{}}}", entries.join(","))
}

/// The writer's messages for one job of `tasks` tasks, with responses
/// shaped as the scheduler's (the `/stages` answer lists every task).
pub fn job_messages(id: &str, tasks: usize, start: u64) -> Vec<WriterMsg> {
    let mut out = vec![WriterMsg::Start(JobStart {
        job_id: id.to_string(),
        job_name: format!("query {id}"),
        queued_at: start,
        submitted_at: start + 1,
        scheduler_id: Some("scheduler".into()),
        logical_plan: Some(plan(12)),
        physical_plan: Some(plan(20)),
        executors: None,
    })];
    for chunk in (0..tasks).collect::<Vec<_>>().chunks(64) {
        out.push(WriterMsg::Tasks {
            job_id: id.to_string(),
            tasks: chunk
                .iter()
                .map(|&t| TaskEnd {
                    stage_id: 1,
                    task_id: t as u32,
                    executor_id: "executor-0a1b2c3d".into(),
                    status: TaskStatus::Successful,
                    launch_time: start + 1,
                    start_exec_time: start + 2,
                    end_exec_time: start + 5,
                    metrics: TaskMetrics {
                        input_rows: 1000,
                        output_rows: 100,
                        elapsed_compute_nanos: 3_000_000,
                    },
                    stage_attempt: 0,
                })
                .collect(),
        });
    }
    let job = format!(
        r#"{{"job_id":"{id}","job_name":"query {id}","job_status":"Completed. Produced 1 partition containing 100 rows. Elapsed time: 9 ms.","status":"Completed","num_stages":1,"completed_stages":1,"percent_complete":100,"start_time":{start},"end_time":{},"logical_plan":"{}","physical_plan":"{}","stage_plan":"{}"}}"#,
        start + 9,
        plan(12).replace('\n', "\\n"),
        plan(20).replace('\n', "\\n"),
        plan(30).replace('\n', "\\n"),
    );
    out.push(WriterMsg::End {
        job_id: id.to_string(),
        fallback_start: JobStart::default(),
        stages: vec![(
            StageStart {
                stage_id: 1,
                partitions: tasks as u32,
                start_time: start + 1,
            },
            StageEnd {
                stage_id: 1,
                status: "Successful".into(),
                end_time: start + 6,
            },
        )],
        end: Box::new(JobEnd {
            status: JobEndStatus::Succeeded,
            queued_at: start,
            started_at: start,
            completed_at: start + 9,
            index: JobIndex {
                job_id: id.to_string(),
                job_name: format!("query {id}"),
                status: "Completed".into(),
                job_status: "Completed.".into(),
                start_time: start,
                end_time: start + 9,
                num_stages: 1,
                completed_stages: 1,
                percent_complete: 100,
            },
            job: raw_or_null(&job),
            stages: raw_or_null(&stages_json(tasks, start)),
            config: raw_or_null(&config_json(60)),
            dot: "digraph G {\n  stage_1;\n}\n".into(),
            dropped_records: 0,
            responses: Default::default(),
        }),
        secrets: Vec::new(),
    });
    out
}

/// Sends `messages` to the writer: progress as progress (never blocking),
/// the rest as they must arrive.
pub fn send_all(handle: &writer::WriterHandle, messages: Vec<WriterMsg>) {
    for msg in messages {
        if matches!(msg, WriterMsg::Tasks { .. }) {
            handle.try_progress(msg);
        } else {
            handle.send(msg);
        }
    }
}

/// Writes `jobs` plain logs into `dir`, with task counts from `tasks_of`.
#[allow(dead_code)]
pub fn write_corpus(dir: &Path, jobs: usize, seed: u64, tasks_of: impl FnMut(&mut Rng) -> usize) {
    write_corpus_with(dir, jobs, seed, Compression::None, tasks_of)
}

/// Writes `jobs` logs into `dir` with `compression`, with task counts from
/// `tasks_of`.
pub fn write_corpus_with(
    dir: &Path,
    jobs: usize,
    seed: u64,
    compression: Compression,
    mut tasks_of: impl FnMut(&mut Rng) -> usize,
) {
    let mut rng = Rng::new(seed);
    let mut config = WriterConfig::new(dir);
    config.queue_capacity = usize::MAX;
    config.compression = compression;
    let (handle, thread) = writer::spawn(config, Arc::new(HistoryMetrics::unregistered())).unwrap();
    for j in 0..jobs {
        let tasks = tasks_of(&mut rng);
        send_all(
            &handle,
            job_messages(
                &format!("job{j:07}"),
                tasks,
                1_700_000_000_000 + j as u64 * 1000,
            ),
        );
    }
    handle.send(WriterMsg::Shutdown);
    drop(handle);
    thread.join().unwrap();
}

/// `n` index entries of a history (no logs): a job every 500 ms, one in
/// twenty failed and one in twenty cancelled, 977 distinct names.
#[allow(dead_code)]
pub fn summaries(n: usize) -> Vec<bjh_store::JobSummary> {
    summaries_from(0, n)
}

/// [`summaries`] of the jobs `first..first + n` (later ones are newer).
#[allow(dead_code)]
pub fn summaries_from(first: usize, n: usize) -> Vec<bjh_store::JobSummary> {
    summaries_hashed(first, n, |i| 1 + u64::from(i % 977 == 0))
}

/// [`summaries_from`], job `i` running query `hash(i)`.
#[allow(dead_code)]
pub fn summaries_hashed(
    first: usize,
    n: usize,
    hash: impl Fn(usize) -> u64,
) -> Vec<bjh_store::JobSummary> {
    let mut rng = Rng::new(11 + first as u64);
    (first..first + n)
        .map(|i| {
            let start = 1_700_000_000_000 + i as u64 * 500 + rng.below(400);
            let state = match rng.below(20) {
                0 => bjh_format::JobState::Failed,
                1 => bjh_format::JobState::Cancelled,
                _ => bjh_format::JobState::Completed,
            };
            let id = format!("0{i:012X}");
            let name = format!("nightly report {}", i % 977);
            let file_name = format!("{id}.eventlog");
            bjh_store::JobSummary::restore(bjh_store::SummaryParts {
                facts: bjh_store::query::FactsRef {
                    job_id: &id,
                    job_name: &name,
                    state,
                    queued_time: start.saturating_sub(rng.below(1_000)),
                    start_time: start,
                    end_time: start + 200 + rng.below(60_000),
                    query_hash: hash(i),
                },
                job_status: "Completed. Produced 4 partitions containing 1000 rows. \
                             Elapsed time: 812 ms.",
                status: state.status_word(),
                stages: [3, 3],
                percent_complete: 100,
                dropped_records: 0,
                file_name: &file_name,
                len: 40_000,
                modified: Some(std::time::SystemTime::now()),
                ranges: None,
                scheduler_id: Some(["scheduler-a", "scheduler-b"][i % 2]),
                usage: Some(bjh_format::usage::SlotUsage {
                    busy_slot_ms: 400 + rng.below(100_000),
                    failed_slot_ms: 0,
                }),
                tags: None,
            })
        })
        .collect()
}

/// The median, 99th percentile and maximum of `samples`.
#[allow(dead_code)]
pub fn percentiles(
    mut samples: Vec<std::time::Duration>,
) -> (
    std::time::Duration,
    std::time::Duration,
    std::time::Duration,
) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99), samples[samples.len() - 1])
}

/// Prints a table row of timings: `what`, the p50, p99 and maximum of
/// `samples`, and how many there were.
#[allow(dead_code)]
pub fn row(what: &str, samples: Vec<std::time::Duration>) {
    let runs = samples.len();
    let (p50, p99, max) = percentiles(samples);
    println!(
        "| {what} | {} | {} | {} | {runs} |",
        ms(p50),
        ms(p99),
        ms(max)
    );
}

/// `d` in milliseconds, three decimals.
#[allow(dead_code)]
pub fn ms(d: std::time::Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// A store listing `n` generated jobs (no logs), loaded from a persistent
/// index written into `dir`.
#[allow(dead_code)]
pub fn indexed_store(dir: &Path, n: usize) -> bjh_store::LogStore {
    let index = dir.join("index");
    std::fs::write(&index, bjh_store::snapshot::encode(summaries(n).iter())).unwrap();
    let store =
        bjh_store::LogStore::new(dir.join("empty"), Arc::new(HistoryMetrics::unregistered()))
            .with_index_file(Some(index));
    assert_eq!(store.load_persisted(), n);
    store
}

/// A free port on loopback.
#[allow(dead_code)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 GET on loopback: the whole answer, or `None` when nothing
/// listens yet.
#[allow(dead_code)]
pub fn get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}
