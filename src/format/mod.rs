//! The bottom layer: what an event log is on disk. The record shapes
//! (upstream's schema v1 envelope plus our additions), the names of log
//! files, the footer's framing, and the job-state words and epoch-millisecond
//! times the records use.
//!
//! Everything else builds on this layer and it builds on nothing of the
//! crate: it may import no other module of ours (not even `metrics`). The
//! writer (`recording`) and the readers (`store`) meet only here, so a rule
//! of the format is stated once.

pub mod footer;
pub mod name;
pub mod record;
pub mod state;

pub use name::LogName;
pub use state::{JobState, epoch_millis, now_millis};
