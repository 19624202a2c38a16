//! The one door for the benches, the fuzz targets and the integration
//! tests: the crate's internals they drive, re-exported under the paths of
//! the modules that hold them. Not part of the public API (hidden from the
//! docs, no stability promise): an embedder uses the crate root.

/// The fuzz targets' entry points.
pub mod fuzzing {
    pub use crate::fuzzing::{index_log, read_log};
}

/// What analysis computes.
pub mod analysis {
    /// Diagnoses.
    pub mod diagnosis {
        pub use crate::analysis::diagnosis::{Thresholds, diagnose};
    }
    /// Recurring queries.
    pub mod queries {
        pub use crate::analysis::queries::recurring;
    }
}

/// The SQL tables' files.
pub mod columnar {
    pub use crate::columnar::{Generation, rows_of_written, write_file};
    /// Jobs the writer hands over.
    pub mod fresh {
        pub use crate::columnar::fresh::Fresh;
    }
    /// The tables' schemas and a job's rows.
    pub mod tables {
        pub use crate::columnar::tables::{JobRows, OPERATORS, STAGES, TASKS, job_rows};
    }
}

/// The log format.
pub mod format {
    pub use crate::format::{JobState, epoch_millis};
    /// The records.
    pub mod record {
        pub use crate::format::record::{
            Envelope, JobEnd, JobEndStatus, JobIndex, JobStart, StageEnd, StageStart, TaskEnd,
            TaskMetrics, WrittenJob, encode_line, kind, raw_or_null,
        };
    }
}

/// The metrics.
pub mod metrics {
    pub use crate::metrics::HistoryMetrics;
}

/// The recorder.
pub mod recording {
    /// The task-status tap.
    pub mod listener {
        pub use crate::recording::listener::TaskTap;
    }
    /// Secret redaction.
    pub mod redact {
        pub use crate::recording::redact::{DEFAULT_PATTERN, REDACTED, Redactor};
    }
    /// The writer.
    pub mod writer {
        pub use crate::recording::writer::{
            Compression, DEFAULT_ZSTD_LEVEL, WriterConfig, WriterHandle, WriterMsg, WrittenJobs,
            spawn,
        };
    }
}

/// The process's pieces.
pub mod server {
    pub use crate::server::{COLUMNAR_DIR, default_spool, export_parquet, history_router};
}

/// The serving layer.
pub mod serving {
    /// The API token.
    pub mod auth {
        pub use crate::serving::auth::ApiToken;
    }
    /// Connection limits.
    pub mod http {
        pub use crate::serving::http::HttpLimits;
    }
    /// The job-level series of `/api/metrics`.
    pub mod job_metrics {
        pub use crate::serving::job_metrics::{JobGauges, gauges};
    }
    /// The job routes.
    pub mod router {
        pub use crate::serving::router::job_routes;
    }
    /// Where answers come from.
    pub mod source {
        pub use crate::serving::source::{DiskSource, FROM_LOG_HEADER, JobSource, Resource};
    }
    /// SQL.
    pub mod sql {
        pub use crate::serving::sql::{SqlEngine, SqlLimits};
        /// The SQL worker process.
        pub mod worker {
            pub use crate::serving::sql::worker::{answer_in_process, run_if_worker};
        }
    }
    /// The timeline.
    pub mod timeline {
        pub use crate::serving::timeline::{JobHeader, render_svg};
    }
}

/// Traces.
pub mod traces {
    pub use crate::traces::exporter::{TraceQueue, TraceSender, queue};
}
/// The store.
pub mod store {
    pub use crate::store::{JobSummary, LogStore, SummaryParts, open_decoded};
    /// A job's records, gathered.
    pub mod records {
        pub use crate::store::records::{JobHeader, JobRecords, Task};
    }
    /// List queries.
    pub mod query {
        pub use crate::store::query::{Facts, FactsRef, JobFacts, ListQuery};
    }
    /// Object stores.
    pub mod remote {
        pub use crate::store::remote::{EventLogDir, RemoteDir, RemoteOptions};
    }
    /// Retention.
    pub mod retention {
        pub use crate::store::retention::{
            DEFAULT_ORPHAN_GRACE, RetentionPolicy, parse_bytes, parse_duration,
        };
    }
    /// The persistent index.
    pub mod snapshot {
        pub use crate::store::snapshot::{DEFAULT_FILE_NAME, encode, load};
    }
}
