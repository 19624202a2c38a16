#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

// Layers, bottom up; a module imports only from its own layer or below
// (ARCHITECTURE.md; checked by `tests/it/tidy.rs`).
pub mod analysis;
pub mod columnar;
mod files;
pub mod format;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
pub mod recording;
pub mod server;
pub mod serving;
pub mod store;

pub use server::{HistoryOptions, ServerError, run_history, run_scheduler};
