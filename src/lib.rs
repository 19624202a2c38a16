#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// Layers, bottom up; a module imports only from its own layer or below
// (ARCHITECTURE.md; checked by `tests/it/tidy.rs`).
mod analysis;
mod columnar;
mod files;
mod format;
mod fuzzing;
mod metrics;
mod recording;
mod server;
mod serving;
mod store;
mod traces;

#[doc(hidden)]
pub mod bench_support;

// The entry points an embedder uses: the server's run functions and their
// options, the task tap and writer for a scheduler of its own, and the
// store for reading logs. Nothing else is public.
pub use format::JobState;
pub use metrics::HistoryMetrics;
pub use recording::listener::TaskTap;
pub use recording::redact::{DEFAULT_PATTERN, Redactor};
pub use recording::scheduler_id;
pub use recording::writer::{
    Compression, DEFAULT_ZSTD_LEVEL, WriterConfig, WriterHandle, WriterMsg, spawn as spawn_writer,
};
pub use server::{
    COLUMNAR_DIR, HistoryOptions, ServerError, default_spool, export_otlp, export_parquet,
    history_router, run_history, run_scheduler,
};
pub use serving::auth::ApiToken;
pub use serving::http::HttpLimits;
pub use serving::sql::worker::run_if_worker;
pub use serving::sql::{SqlEngine, SqlLimits};
pub use store::remote::{EventLogDir, RemoteDir, RemoteOptions};
pub use store::retention::{DEFAULT_ORPHAN_GRACE, RetentionPolicy, parse_bytes, parse_duration};
pub use store::{JobSummary, LogStore, StoreError};
