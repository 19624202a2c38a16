//! The recording path: the scheduler-side hook (`TaskTap::observe`, one
//! finished task per call) and the writer thread's throughput in `TaskEnd`
//! records per second (batches of 64, 100,000 records per iteration).

mod corpus;

use ballista_core::serde::protobuf::{self as pb, SuccessfulTask, task_status};
use ballista_job_history::format::record::{JobStart, TaskEnd, TaskMetrics};
use ballista_job_history::metrics::HistoryMetrics;
use ballista_job_history::recording::listener::TaskTap;
use ballista_job_history::recording::writer::{self, WriterConfig, WriterMsg};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;

fn status(task_id: u32) -> pb::TaskStatus {
    pb::TaskStatus {
        task_id,
        job_id: "job".into(),
        stage_id: 1,
        stage_attempt_num: 0,
        launch_time: 1,
        start_exec_time: 2,
        end_exec_time: 3,
        metrics: vec![],
        status: Some(task_status::Status::Successful(SuccessfulTask::default())),
    }
}

fn hook(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (handle, thread) = writer::spawn(
        WriterConfig::new(dir.path()),
        Arc::new(HistoryMetrics::unregistered()),
    )
    .unwrap();
    handle.send(WriterMsg::Start(JobStart {
        job_id: "job".into(),
        ..Default::default()
    }));
    let tap = TaskTap::new(handle.clone());
    let batch = [status(0)];
    c.bench_function("hook: TaskTap::observe, one finished task", |b| {
        b.iter(|| tap.observe("executor", &batch))
    });
    drop(tap);
    handle.send(WriterMsg::Shutdown);
    drop(handle);
    thread.join().unwrap();
}

fn throughput(c: &mut Criterion) {
    const RECORDS: u64 = 100_000;
    let task = |t: u32| TaskEnd {
        stage_id: 1,
        task_id: t,
        executor_id: "executor-0a1b2c3d".into(),
        status: ballista_api_types::dto::TaskStatus::Successful,
        launch_time: 1_700_000_000_001,
        start_exec_time: 1_700_000_000_002,
        end_exec_time: 1_700_000_000_005,
        metrics: TaskMetrics {
            input_rows: 1000,
            output_rows: 100,
            elapsed_compute_nanos: 3_000_000,
        },
        stage_attempt: 0,
    };
    let mut group = c.benchmark_group("writer");
    group.throughput(Throughput::Elements(RECORDS));
    group.sample_size(10);
    group.bench_function("TaskEnd records through the writer thread", |b| {
        b.iter(|| {
            let dir = tempfile::tempdir().unwrap();
            let mut config = WriterConfig::new(dir.path());
            config.queue_capacity = usize::MAX;
            let (handle, thread) =
                writer::spawn(config, Arc::new(HistoryMetrics::unregistered())).unwrap();
            handle.send(WriterMsg::Start(JobStart {
                job_id: "job".into(),
                ..Default::default()
            }));
            for chunk in 0..(RECORDS / 64) as u32 {
                handle.try_progress(WriterMsg::Tasks {
                    job_id: "job".into(),
                    tasks: (0..64).map(|i| task(chunk * 64 + i)).collect(),
                });
            }
            handle.send(WriterMsg::Shutdown);
            drop(handle);
            thread.join().unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, hook, throughput);
criterion_main!(benches);
