#![doc = include_str!("../README.md")]
#![cfg_attr(test, allow(clippy::disallowed_methods))]
#![warn(missing_docs)]

// The process on top of the layers (the workspace's crates, ARCHITECTURE.md).
mod plugin;
mod server;

// The plugin (a scheduler of one's own records and serves its jobs), the
// process's run functions and their options, and what the binary's flags
// are read into.
pub use bjh_recording::redact::{DEFAULT_PATTERN, Redactor};
pub use bjh_recording::writer::{Compression, DEFAULT_ZSTD_LEVEL};
pub use bjh_serving::auth::ApiToken;
pub use bjh_serving::http::HttpLimits;
pub use bjh_sql::cluster::scheduler_address;
pub use bjh_sql::worker::run_if_worker;
pub use bjh_sql::{Engine as SqlEngineKind, SqlLimits};
pub use bjh_store::remote::{EventLogDir, RemoteDir, RemoteOptions};
pub use bjh_store::retention::{DEFAULT_ORPHAN_GRACE, RetentionPolicy};
pub use plugin::{JobHistory, Running};
pub use server::{
    HistoryOptions, ServerError, default_spool, export_otlp, export_parquet, history_router,
    run_history, run_scheduler,
};
