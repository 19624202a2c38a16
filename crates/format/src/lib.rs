//! The bottom layer: what an event log is on disk. The record shapes
//! (upstream's schema v1 envelope plus our additions), the names of log
//! files, the footer's framing, the job-state words and epoch-millisecond
//! times the records use, the query hash and label of a logical plan, and the lenient
//! reading of the stored `/stages` answer with the rule for a task's times.
//!
//! Everything else builds on this layer and it builds on nothing of the
//! crate: it may import no other module of ours (not even `metrics`). The
//! writer (`recording`) and the readers (`store`) meet only here, so a rule
//! of the format is stated once.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod bounds;
pub mod cluster;
pub mod footer;
pub mod label;
pub mod name;
pub mod origin;
pub mod query_hash;
pub mod record;
pub mod stages;
mod state;
pub mod usage;
pub mod written;

pub use name::LogName;
pub use state::now_millis;
pub use state::{JobState, epoch_millis, time_of_millis};
