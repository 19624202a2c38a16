//! Recording: turning a live scheduler's jobs into event logs.
//!
//! The listener and the task tap see the scheduler's events without ever
//! making it wait; the capturer renders each job's REST responses through
//! the scheduler's own router (`live`); redaction scrubs secrets from them;
//! the writer thread owns the log files (`naming` picks names no other
//! log has); the uploader puts completed logs into an object store;
//! `hold` keeps a finished job in the scheduler until its log is stored;
//! `scheduler_id` is the id every log records, kept across restarts;
//! `usage` gathers what a footer says of the job's use of the cluster and
//! `cluster` records the cluster's executors beside the jobs.
//!
//! **Rule:** this layer imports only `format`, `metrics` and `files`. It never
//! imports `store` (reading logs back is not its business) nor `serving`.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod capture;
pub mod cluster;
pub mod hold;
pub mod listener;
pub mod live;
pub mod naming;
pub mod redact;
pub mod scheduler_id;
pub mod sink;
pub mod upload;
mod usage;
pub mod writer;
