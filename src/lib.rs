#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod capture;
#[doc(hidden)]
pub mod fuzzing;
pub mod listener;
pub mod live;
pub mod metrics;
pub mod persist;
pub mod query;
pub mod record;
pub mod redact;
pub mod remote;
pub mod retention;
pub mod server;
pub mod source;
pub mod store;
pub mod timeline;
pub mod writer;

pub use server::{HistoryOptions, ServerError, run_history, run_scheduler};
