//! A job's use of the cluster's task slots, one rule for every reader: the
//! writer's footer, the SQL `jobs` table, the job page.
//!
//! A task attempt holds its slots from the moment the scheduler hands it
//! out (its launch; its executor start when the launch is unknown) until
//! the executor ends it, and it holds one slot per partition it computes
//! ([`crate::stages::task_slots`]; 1 where the stored `/stages` answer
//! does not list the task). Its busy slot time is that span times those
//! slots. A job's busy slot time is the sum over all its attempts, failed
//! ones included; the failed ones' share is also given apart. An attempt
//! whose end comes before its start (clocks of two machines) counts 0.

use crate::stages::TaskTimes;
use std::collections::BTreeMap;

/// A job's busy slot time, in slot-milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotUsage {
    /// Every attempt's span times its slots, summed.
    pub busy_slot_ms: u64,
    /// The failed attempts' part of `busy_slot_ms`.
    pub failed_slot_ms: u64,
}

impl SlotUsage {
    /// Adds one attempt that held `slots` slots.
    pub fn add(&mut self, task: &impl TaskTimes, slots: u32, failed: bool) {
        let _ = self.add_span(span_ms(task), slots, failed);
    }

    /// Adds one attempt that held `slots` slots for `span_ms`
    /// milliseconds (see [`span_ms`]); gives the slot-milliseconds added.
    pub fn add_span(&mut self, span_ms: u64, slots: u32, failed: bool) -> u64 {
        let ms = span_ms.saturating_mul(u64::from(slots.max(1)));
        self.busy_slot_ms = self.busy_slot_ms.saturating_add(ms);
        if failed {
            self.failed_slot_ms = self.failed_slot_ms.saturating_add(ms);
        }
        ms
    }

    /// The usage of `tasks` (each with whether it failed), their slots
    /// looked up by `(stage id, task id)` in `slots`.
    pub fn of<'a, T: TaskTimes + 'a>(
        tasks: impl IntoIterator<Item = (&'a T, u32, u32, bool)>,
        slots: &BTreeMap<(u32, u32), u32>,
    ) -> Self {
        let mut usage = Self::default();
        for (task, stage_id, task_id, failed) in tasks {
            let held = slots.get(&(stage_id, task_id)).copied().unwrap_or(1);
            usage.add(task, held, failed);
        }
        usage
    }
}

/// How long an attempt held its slots: from its launch (else its executor
/// start) to its end; 0 when either is unknown or the end comes first.
pub fn span_ms(task: &impl TaskTimes) -> u64 {
    let (_, _, end) = task.times();
    let from = task.launched();
    if from == 0 || end == 0 {
        return 0;
    }
    end.saturating_sub(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct T(u64, u64, u64);
    impl TaskTimes for T {
        fn times(&self) -> (u64, u64, u64) {
            (self.0, self.1, self.2)
        }
    }

    #[test]
    fn an_attempt_holds_its_slots_from_launch_to_end() {
        let slots = [((1, 0), 2)].into();
        let a = T(100, 105, 200);
        let b = T(0, 150, 250);
        let c = T(300, 301, 290);
        let usage = SlotUsage::of(
            [(&a, 1, 0, false), (&b, 1, 1, true), (&c, 2, 0, false)],
            &slots,
        );
        // 100 ms on 2 slots, 100 ms on 1 (from the executor start), and a
        // span ending before it began, 0.
        assert_eq!(usage.busy_slot_ms, 300);
        assert_eq!(usage.failed_slot_ms, 100);
        assert_eq!(span_ms(&T(0, 0, 5)), 0);
    }
}
