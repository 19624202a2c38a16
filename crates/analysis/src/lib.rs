//! Analysis: what a job's records mean. Its diagnosis (`diagnosis`), the
//! recurring queries of a history (`queries`), the comparison of two runs
//! (`compare`), the metrics of a stage's plan (`plan_metrics`), the
//! replay of a job on another cluster shape (`whatif`) and the grading of
//! those replays against the next run of the same query (`accuracy`).
//!
//! Pure computation over what the store reads (`store::records` hands it a
//! job's records): nothing here opens a file, serves HTTP or writes
//! anything, so every finding can be tested on generated records.
//!
//! **Rule:** this crate imports `format` and `store`; `columnar` (the
//! operators table) and `serving` import it.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod accuracy;
pub mod advice;
pub mod compare;
pub mod diagnosis;
pub mod plan_metrics;
pub mod queries;
pub mod stats;
pub mod usage;
pub mod whatif;

/// A seeded generator of numbers below `n`, for the tests' random jobs.
#[cfg(test)]
pub(crate) fn below(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (seed >> 33) % n
    }
}
