//! Replays of jobs whose answers are worked out by hand.

use super::testing::*;
use super::*;
use bjh_format::record::ExecutorSlots;

#[test]
fn a_chain_of_stages_takes_its_length_on_any_shape() {
    // Three stages of one 100 ms task each, A -> B -> C; the job started
    // 10 ms before its first launch and ended 5 ms after its last task.
    let jobs = records(vec![
        task(1, 0, 0, 1_010, 1_110),
        task(2, 0, 0, 1_110, 1_210),
        task(3, 0, 0, 1_210, 1_310),
    ]);
    let work = Work::of(&jobs, &graph(&[(1, 2), (2, 3)]), at(1_000), at(1_315));
    assert_eq!(work.observed_ms(), 315);
    assert_eq!(work.observed_shape(), shape(1, 1));
    // 10 + 300 + 5 whatever the shape: nothing runs side by side.
    assert_eq!(work.replay(shape(1, 1)), 315);
    assert_eq!(work.replay(shape(4, 4)), 315);
    assert_eq!(work.critical_path(), 315);
    // All 300 ms spread over 3 slots: 100, plus the 15 ms carried over.
    assert_eq!(work.ideal(shape(1, 3)), 115);
    assert_eq!(work.ideal(shape(1, 1)), 315);
}

#[test]
fn a_wide_stage_on_one_slot_shrinks_with_slots_until_its_longest_task() {
    // Four 100 ms tasks, back to back on one executor's one slot.
    let jobs = records(
        (0..4)
            .map(|i| task(1, i, 0, i as u64 * 100, (i as u64 + 1) * 100))
            .collect(),
    );
    let work = Work::of(&jobs, &graph(&[]), at(0), at(400));
    assert_eq!(work.observed_shape(), shape(1, 1));
    assert_eq!(work.replay(shape(1, 1)), 400);
    assert_eq!(work.replay(shape(1, 2)), 200);
    // Three slots still need two rounds for four tasks.
    assert_eq!(work.replay(shape(1, 3)), 200);
    assert_eq!(work.replay(shape(2, 2)), 100);
    assert_eq!(work.critical_path(), 100);
    // 400 ms over 3 slots, rounded up.
    assert_eq!(work.ideal(shape(1, 3)), 134);
    let curve = work.curve(1);
    let points: Vec<(u32, u64)> = curve
        .iter()
        .map(|p| (p.shape.executors, p.predicted_ms))
        .collect();
    assert_eq!(points, [(1, 400), (2, 200), (3, 200), (4, 100)]);
    assert_eq!(
        knee(&curve, work.critical_path()).map(|p| p.total_slots),
        Some(4)
    );
}

#[test]
fn a_straggler_on_the_critical_path_sets_the_floor() {
    // Stage 1: tasks of 100, 100 and 500 ms (the last one straggles), on
    // three slots; stage 2 reads stage 1: one 100 ms task.
    let jobs = records(vec![
        task(1, 0, 0, 0, 100),
        task(1, 1, 0, 0, 100),
        task(1, 2, 0, 0, 500),
        task(2, 0, 0, 500, 600),
    ]);
    let work = Work::of(&jobs, &graph(&[(1, 2)]), at(0), at(600));
    assert_eq!(work.observed_shape(), shape(1, 3));
    assert_eq!(work.replay(shape(1, 3)), 600);
    assert_eq!(work.critical_path(), 600);
    // One slot: 700 ms of stage 1, then 100.
    assert_eq!(work.replay(shape(1, 1)), 800);
    // Two slots: tasks 0 and 1 side by side until 100, the straggler
    // from 100 to 600, then stage 2.
    assert_eq!(work.replay(shape(1, 2)), 700);
    assert_eq!(work.ideal(shape(1, 2)), 400);
}

#[test]
fn gaps_and_failed_attempts_are_carried_over() {
    // A [0, 100]; its failed attempt [0, 60] beside it; B [150, 250]
    // after a 50 ms stretch in which nothing ran.
    let mut failed = task(1, 1, 0, 0, 60);
    failed.failure = Some(("ExecutionError".into(), "boom".into()));
    let jobs = records(vec![task(1, 0, 0, 0, 100), failed, task(2, 0, 0, 150, 250)]);
    let work = Work::of(&jobs, &graph(&[(1, 2)]), at(0), at(250));
    assert_eq!(work.observed_shape(), shape(1, 2));
    assert_eq!(work.replay(shape(1, 2)), 250);
    // On one slot the failed attempt still takes its 60 ms.
    assert_eq!(work.replay(shape(1, 1)), 310);
}

#[test]
fn a_slow_executor_replaced_by_the_others_pace() {
    // Executor 0 runs tasks 0 and 2 in 100 ms each, executor 1 tasks 1
    // and 3 in 400 ms each; one slot each.
    let jobs = records(vec![
        task(1, 0, 0, 0, 100),
        task(1, 2, 0, 100, 200),
        task(1, 1, 1, 0, 400),
        task(1, 3, 1, 400, 800),
    ]);
    let work = Work::of(&jobs, &graph(&[]), at(0), at(800));
    assert_eq!(work.observed_shape(), shape(2, 1));
    // Handed out in task order to the first free slot: 0 [0,100] and
    // 1 [0,400], 2 [100,200], 3 [200,600].
    assert_eq!(work.replay(shape(2, 1)), 600);
    let without = work.without_executor(1);
    assert_eq!(without.replay(shape(2, 1)), 200);
    // An executor that ran nothing changes nothing.
    assert_eq!(work.without_executor(7).replay(shape(2, 1)), 600);
}

#[test]
fn a_lying_graph_neither_loops_nor_drops_work() {
    // Stages 1 and 2 read each other; stage 3 reads itself and a stage
    // that does not exist.
    let jobs = records(vec![
        task(1, 0, 0, 0, 100),
        task(2, 0, 0, 0, 100),
        task(3, 0, 0, 0, 100),
    ]);
    let work = Work::of(
        &jobs,
        &graph(&[(1, 2), (2, 1), (3, 3), (9, 3)]),
        at(0),
        at(100),
    );
    // Stage 3 runs at once (its own and unknown inputs ignored); nothing
    // else can, so the cycle is broken at its lowest stage once all that
    // could run has run: 1 at 100, then 2 after it. Every task is placed.
    assert_eq!(work.replay(shape(1, 3)), 300);
    assert_eq!(work.replay(shape(1, 1)), 300);
    assert_eq!(work.critical_path(), 300);
    assert_eq!(work.ideal(shape(1, 3)), 100);
}

#[test]
fn shapes_beyond_the_tasks_cost_nothing_more() {
    let jobs = records((0..4).map(|i| task(1, i, 0, 0, 100)).collect());
    let work = Work::of(&jobs, &graph(&[]), at(0), at(100));
    assert_eq!(work.observed_shape(), shape(1, 4));
    assert_eq!(work.replay(shape(MAX_EXECUTORS, MAX_SLOTS)), 100);
}

#[test]
fn a_job_without_tasks_is_its_overheads() {
    let work = Work::of(
        &JobRecords::default(),
        &graph(&[(1, 2)]),
        at(1_000),
        at(1_700),
    );
    assert_eq!(work.replay(shape(3, 3)), 700);
    assert_eq!(work.critical_path(), 700);
    assert_eq!(work.ideal(shape(3, 3)), 700);
    assert_eq!(work.curve(2).len(), 1);
    // Times that run backwards give zero, never a wrap.
    let backwards = records(vec![task(1, 0, 0, 500, 100)]);
    assert_eq!(
        Work::of(&backwards, &graph(&[]), at(900), at(0)).replay(shape(1, 1)),
        0
    );
}

#[test]
fn two_executors_show_their_slots() {
    // Executor 0 holds two attempts at once, executor 1 one; an attempt
    // ending as another starts hands its slot on.
    let jobs = records(vec![
        task(1, 0, 0, 0, 100),
        task(1, 1, 0, 50, 150),
        task(1, 2, 0, 150, 200),
        task(1, 3, 1, 0, 100),
    ]);
    assert_eq!(
        Work::of(&jobs, &graph(&[]), at(0), at(200)).observed_shape(),
        shape(2, 2)
    );
}

#[test]
fn a_task_of_two_partitions_holds_two_slots() {
    // One executor of two slots ran four partitions as two tasks of two,
    // one after the other (100 ms each): as Ballista packs them.
    let jobs = records(vec![task(1, 0, 0, 0, 100), task(1, 1, 0, 100, 200)]);
    let layout = Layout {
        task_slots: [((1, 0), 2), ((1, 1), 2)].into(),
        ..Layout::default()
    };
    let work = Work::of(&jobs, &layout, at(0), at(200));
    assert_eq!(work.observed_shape(), shape(1, 2));
    // Four units of 100 ms: two rounds on two slots, one on four, four on
    // one; counting tasks instead would have said 100 ms on two slots.
    assert_eq!(work.replay(shape(1, 2)), 200);
    assert_eq!(work.replay(shape(2, 2)), 100);
    assert_eq!(work.replay(shape(1, 1)), 400);
    assert_eq!(work.ideal(shape(1, 1)), 400);
    assert_eq!(work.critical_path(), 100);
    // A lying count is capped, not multiplied without end.
    let lying = Layout {
        task_slots: [((1, 0), u32::MAX)].into(),
        ..Layout::default()
    };
    let work = Work::of(&jobs, &lying, at(0), at(200));
    assert_eq!(work.observed_shape(), shape(1, MAX_SLOTS));
    assert_eq!(work.replay(shape(1, 1)), (u64::from(MAX_SLOTS) + 1) * 100);
}

#[test]
fn an_oversubscribed_executor_counts_each_attempt_at_its_share_of_a_slot() {
    // The log records one executor of 2 slots; it ran three attempts side
    // by side for 300 ms (as Ballista's pull mode can), so each had 2/3
    // of a slot: 200 ms of work.
    let mut jobs = records((0..3).map(|i| task(1, i, 0, 0, 300)).collect());
    jobs.executors = vec!["e0".into()];
    jobs.start.executors = Some(vec![ExecutorSlots {
        id: "e0".into(),
        slots: 2,
    }]);
    let work = Work::of(&jobs, &graph(&[]), at(0), at(300));
    assert!(work.shape_recorded());
    assert_eq!(work.observed_shape(), shape(1, 2));
    assert_eq!(work.replay(shape(1, 1)), 600);
    assert_eq!(work.replay(shape(1, 3)), 200);
    // On its own two slots, one unit each: two side by side, then one.
    assert_eq!(work.replay(shape(1, 2)), 400);
    assert_eq!(work.ideal(shape(1, 2)), 300);
    // Slots shared for part of a run: one slot, attempt A on [0, 200]
    // and B on [100, 300] each held 1.5 slots on average, 2/3 of a slot
    // each: 133 ms of work apiece.
    jobs.tasks = vec![task(1, 0, 0, 0, 200), task(1, 1, 0, 100, 300)];
    jobs.start.executors = Some(vec![ExecutorSlots {
        id: "e0".into(),
        slots: 1,
    }]);
    let work = Work::of(&jobs, &graph(&[]), at(0), at(300));
    assert_eq!(work.replay(shape(1, 1)), 266);
    // An executor the start did not see (registered later) keeps its
    // times; the shape is still the one recorded.
    jobs.executors = vec!["late".into()];
    let work = Work::of(&jobs, &graph(&[]), at(0), at(300));
    assert_eq!(work.replay(shape(1, 1)), 400);
    assert_eq!(work.observed_shape(), shape(1, 1));
    assert!(work.shape_recorded());
}
