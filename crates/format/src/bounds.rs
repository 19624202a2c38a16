//! The bounds a figure read from a file is held to where it is parsed: a
//! log, a footer or a cluster log is written by whoever can write the
//! directory, so none of its times, counts or sums is believed as it
//! stands.
//!
//! - A time is no later than "now" plus [`MAX_SKEW_MS`] (a clock a little
//!   ahead of ours is a clock, a year ahead is a lie): [`Clock::time`]
//!   cuts it there and says so.
//! - A job's slot time is at most its span times [`MAX_JOB_SLOTS`] (no
//!   job held more slots at once), and a part of it no more than the
//!   whole.
//! - Sums of such figures saturate (`u64::saturating_add`): a sum is never
//!   less than one of its parts.
//!
//! **Invariant:** every reader of a file's times and sums goes through
//! here before a loop, an allocation or a bill uses them, so a file dated
//! in the year 30000 or stating 10^19 slot-ms can change no figure beyond
//! these bounds.

use crate::record::{Footer, JobEndSummary};

/// How far ahead of this process's clock a recorded time may be: the
/// clocks of a fleet's machines differ by that much at most.
pub const MAX_SKEW_MS: u64 = 60_000;
/// Task slots one job holds at once, at most (10,000 executors of 100
/// slots): a stated slot time beyond its span times this is a lie.
pub const MAX_JOB_SLOTS: u64 = 1 << 20;
/// Executors a footer's `busy_by_executor` keeps at most (the writer
/// writes no more).
pub const MAX_FOOTER_EXECUTORS: usize = 10_000;
/// Usage tags a footer keeps at most.
pub const MAX_FOOTER_TAGS: usize = 64;

/// The time a file is read at, and the latest time it may state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// Now (epoch millis).
    pub now: u64,
}

impl Clock {
    /// This process's clock, now.
    pub fn now() -> Self {
        Self {
            now: crate::now_millis(),
        }
    }

    /// The latest time a file may state: now plus [`MAX_SKEW_MS`].
    pub fn ceiling(self) -> u64 {
        self.now.saturating_add(MAX_SKEW_MS)
    }

    /// `at`, cut to [`Clock::ceiling`]; `true` when it was cut.
    pub fn time(self, at: u64) -> (u64, bool) {
        let ceiling = self.ceiling();
        if at > ceiling {
            (ceiling, true)
        } else {
            (at, false)
        }
    }

    /// Each of `times` cut to [`Clock::ceiling`]; whether any was.
    pub fn times<const N: usize>(self, times: [&mut u64; N]) -> bool {
        let mut cut = false;
        for at in times {
            let (t, c) = self.time(*at);
            *at = t;
            cut |= c;
        }
        cut
    }
}

/// The most slot time a job that ran from `start` to `end` can have used.
pub fn max_slot_ms(start: u64, end: u64) -> u64 {
    end.saturating_sub(start)
        .max(1)
        .saturating_mul(MAX_JOB_SLOTS)
}

impl JobEndSummary {
    /// This summary with its times cut to `clock` and its slot time to
    /// its span; `true` when anything was cut.
    pub fn bounded(mut self, clock: Clock) -> (Self, bool) {
        let mut cut = clock.times([
            &mut self.queued_at,
            &mut self.index.start_time,
            &mut self.index.end_time,
        ]);
        if let Some(u) = &mut self.usage {
            let most = max_slot_ms(self.index.start_time, self.index.end_time);
            cut |= u.busy_slot_ms > most;
            u.busy_slot_ms = u.busy_slot_ms.min(most);
            u.failed_slot_ms = u.failed_slot_ms.min(u.busy_slot_ms);
        }
        if self.tags.len() > MAX_FOOTER_TAGS {
            cut = true;
            let keep: Vec<String> = self.tags.keys().take(MAX_FOOTER_TAGS).cloned().collect();
            self.tags.retain(|k, _| keep.contains(k));
        }
        (self, cut)
    }
}

impl Footer {
    /// This footer with its times cut to `clock`, its slot times to the
    /// job's span, each executor's part to the whole and the executors
    /// and tags to their caps; `true` when anything was cut.
    pub fn bounded(mut self, clock: Clock) -> (Self, bool) {
        let mut cut = clock.times([
            &mut self.queued_at,
            &mut self.index.start_time,
            &mut self.index.end_time,
        ]);
        let most = max_slot_ms(self.index.start_time, self.index.end_time);
        if let Some(busy) = &mut self.busy_slot_ms {
            cut |= *busy > most;
            *busy = (*busy).min(most);
        }
        let busy = self.busy_slot_ms.unwrap_or(most);
        if let Some(failed) = &mut self.failed_slot_ms {
            *failed = (*failed).min(busy);
        }
        if self.busy_by_executor.len() > MAX_FOOTER_EXECUTORS {
            cut = true;
            while self.busy_by_executor.len() > MAX_FOOTER_EXECUTORS {
                self.busy_by_executor.pop_last();
            }
        }
        for part in self.busy_by_executor.values_mut() {
            cut |= *part > busy;
            *part = (*part).min(busy);
        }
        if self.tags.len() > MAX_FOOTER_TAGS {
            cut = true;
            while self.tags.len() > MAX_FOOTER_TAGS {
                self.tags.pop_last();
            }
        }
        (self, cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footer(start: u64, end: u64, busy: u64) -> Footer {
        let json = format!(
            r#"{{"job_end_offset":0,"job_end_len":1,"status":"Cancelled","queued_at":{start},
            "index":{{"job_id":"j","job_name":"","status":"","job_status":"","start_time":{start},
            "end_time":{end},"num_stages":0,"completed_stages":0,"percent_complete":0}},
            "dropped_records":0,"busy_slot_ms":{busy},"failed_slot_ms":{busy},
            "busy_by_executor":{{"a":{busy},"b":1}}}}"#
        );
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn a_time_past_now_is_cut_to_now_plus_the_skew_and_said_so() {
        let clock = Clock { now: 1_000_000 };
        assert_eq!(clock.time(1_000_000 + MAX_SKEW_MS), (1_060_000, false));
        assert_eq!(clock.time(u64::MAX), (1_060_000, true));
        let (f, cut) = footer(500_000, u64::MAX, 7).bounded(clock);
        assert!(cut);
        assert_eq!(f.index.end_time, clock.ceiling());
        assert_eq!(f.busy_slot_ms, Some(7), "within its span: believed");
    }

    #[test]
    fn a_slot_time_beyond_the_span_is_cut_and_parts_never_exceed_the_whole() {
        let clock = Clock { now: 10_000_000 };
        // 1.2e19 slot-ms over one second: no cluster has that many slots.
        let (f, cut) = footer(1_000_000, 1_001_000, 12_000_000_000_000_000_000).bounded(clock);
        assert!(cut);
        let most = 1_000 * MAX_JOB_SLOTS;
        assert_eq!(f.busy_slot_ms, Some(most));
        assert_eq!(f.failed_slot_ms, Some(most));
        assert_eq!(f.busy_by_executor["a"], most);
        assert_eq!(f.busy_by_executor["b"], 1);
        // Two such footers summed: saturating, never less than a part.
        let two = f.busy_by_executor["a"].saturating_add(u64::MAX);
        assert_eq!(two, u64::MAX);
    }
}
