//! Advice for jobs whose replays are worked out by hand.

use super::*;
use crate::diagnosis::Severity;
use crate::whatif::Layout;
use crate::whatif::testing::*;

fn finding(kind: &'static str, executor: Option<&str>) -> Finding {
    Finding {
        kind,
        severity: Severity::Warning,
        stage_id: None,
        executor: executor.map(str::to_string),
        tasks: Vec::new(),
        evidence: Default::default(),
        message: "Found.".into(),
    }
}

/// Eight 1,000 ms tasks of one stage, back to back on one executor's one
/// slot; the job started with its first launch and ended with its last
/// task: 8,000 ms. By hand: 2 executors, 4,000; 2 slots each, 4,000 (the
/// same, so both are advised, one setting each); the knee (within 10% of
/// the 1,000 ms critical path) is 8 executors, 1,000.
#[test]
fn one_slot_busy_all_along_gets_more_of_them_ranked_by_the_time_saved() {
    let jobs = records(
        (0..8)
            .map(|i| task(1, i, 0, i as u64 * 1_000, (i as u64 + 1) * 1_000))
            .collect(),
    );
    let work = Work::of(&jobs, &Layout::default(), at(0), at(8_000));
    let mut findings = vec![finding("skew", None)];
    let advice = advise(&work, &["e0".into()], &mut findings);
    let got: Vec<(&str, &str, Option<u64>, Option<i64>)> = advice
        .iter()
        .map(|a| {
            (
                a.setting.as_str(),
                a.value.as_str(),
                a.predicted_ms,
                a.saving_ms,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("executors", "8", Some(1_000), Some(7_000)),
            ("executors", "2", Some(4_000), Some(4_000)),
            ("--concurrent-tasks", "2", Some(4_000), Some(4_000)),
            ("datafusion.execution.target_partitions", "more", None, None),
        ]
    );
    // Slot-seconds: 8 s on one slot now; the knee holds 8 slots for 1 s.
    assert_eq!(advice[0].current_slot_seconds, 8.0);
    assert_eq!(advice[0].slot_seconds, Some(8.0));
    assert_eq!(advice[3].finding, Some("skew"));
}

/// Two executors of one slot, each running one 1,000 ms task, then a
/// 1,000 ms task on executor 0: 2,000 ms. One more executor gains nothing
/// (the third task waits for the first stage... here for nothing, it
/// runs after the first two on a free slot: 2,000 ms either way), so it is
/// not advised; one executor fewer takes 3,000 ms: not advised either.
/// Executor 1 slow (its task 3,000 ms, the others 1,000): run at the
/// others' pace the job takes 2,000 ms instead of 3,000.
#[test]
fn a_slow_executor_is_priced_and_its_finding_says_so() {
    let jobs = records(vec![
        task(1, 0, 0, 0, 1_000),
        task(1, 1, 1, 0, 3_000),
        task(1, 2, 0, 1_000, 2_000),
    ]);
    let work = Work::of(&jobs, &Layout::default(), at(0), at(3_000));
    assert_eq!(work.replay(work.observed_shape()), 3_000);
    let mut findings = vec![finding("slow_executor", Some("e1"))];
    let advice = advise(&work, &["e0".into(), "e1".into()], &mut findings);
    let slow = advice.iter().find(|a| a.setting == "executor").unwrap();
    assert_eq!(
        (slow.value.as_str(), slow.predicted_ms, slow.saving_ms),
        ("e1", Some(2_000), Some(1_000))
    );
    assert!(
        findings[0]
            .message
            .ends_with("predicted to take 2000 ms against 3000 ms replayed as it ran."),
        "{}",
        findings[0].message
    );
    assert!(
        !advice
            .iter()
            .any(|a| a.setting == "executors" && a.value == "1")
    );
}

/// A chain of two 1,000 ms stages on a cluster its start recorded as two
/// executors of one slot: the second executor never helps, so one fewer
/// is advised as the cheaper shape (saving 0 ms, half the slot-seconds).
#[test]
fn an_executor_the_job_cannot_use_is_advised_away() {
    let mut jobs = records(vec![task(1, 0, 0, 0, 1_000), task(2, 0, 0, 1_000, 2_000)]);
    jobs.executors = vec!["e0".into()];
    jobs.start.executors = Some(
        ["e0", "e1"]
            .map(|id| bjh_format::record::ExecutorSlots {
                id: id.into(),
                slots: 1,
            })
            .to_vec(),
    );
    let work = Work::of(&jobs, &graph(&[(1, 2)]), at(0), at(2_000));
    assert_eq!(work.observed_shape(), shape(2, 1));
    let advice = advise(&work, &jobs.executors, &mut []);
    let fewer = advice
        .iter()
        .find(|a| a.setting == "executors" && a.value == "1")
        .unwrap_or_else(|| panic!("{advice:#?}"));
    assert_eq!(fewer.predicted_ms, Some(2_000));
    assert_eq!(fewer.saving_ms, Some(0));
    assert_eq!(fewer.slot_seconds, Some(2.0));
    assert_eq!(fewer.current_slot_seconds, 4.0);
    assert_eq!(advice.len(), 1, "nothing else helps a chain: {advice:#?}");
}
