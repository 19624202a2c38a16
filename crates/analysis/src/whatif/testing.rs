//! Jobs built by hand for the tests of the replay and of what it advises.

use super::{Layout, Shape};
use bjh_store::records::{JobRecords, Task};

/// Where the tests' clocks start (epoch ms; 0 reads as "not recorded").
pub(crate) const T0: u64 = 1_000_000;

/// `ms` after [`T0`].
pub(crate) fn at(ms: u64) -> u64 {
    T0 + ms
}

/// A successful attempt of `stage`/`task` on `executor`, holding its slot
/// from `from` to `to` (ms after [`T0`]).
pub(crate) fn task(stage: u32, task: u32, executor: u32, from: u64, to: u64) -> Task {
    let (from, to) = (at(from), at(to));
    Task {
        stage_id: stage,
        stage_attempt: 0,
        task_id: task,
        executor,
        failure: None,
        launch_time: from,
        start_exec_time: from,
        end_exec_time: to,
        input_rows: 0,
        output_rows: 0,
        compute_nanos: 0,
    }
}

pub(crate) fn records(tasks: Vec<Task>) -> JobRecords {
    JobRecords {
        tasks,
        ..JobRecords::default()
    }
}

/// A layout of `edges` alone: every task one partition.
pub(crate) fn graph(edges: &[(u32, u32)]) -> Layout {
    Layout {
        edges: edges.to_vec(),
        ..Layout::default()
    }
}

pub(crate) fn shape(executors: u32, slots: u32) -> Shape {
    Shape { executors, slots }
}
