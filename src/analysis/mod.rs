//! Analysis: what a job's records mean. One job's records gathered
//! (`records`), its diagnosis (`diagnosis`), the recurring queries of a
//! history (`queries`) and the comparison of two runs (`compare`).
//!
//! Pure computation over what the store reads: nothing here serves HTTP or
//! writes anything, so every finding can be tested on generated records.
//!
//! **Rule:** this layer imports `format`, `metrics` and `store`; `serving`
//! imports it, and nothing below `serving` does.

pub mod compare;
pub mod diagnosis;
pub mod plan_metrics;
pub mod queries;
pub mod records;
pub(crate) mod stats;
