//! Counters for the recording and serving halves, exported with the
//! scheduler's own metrics on `GET /api/metrics`.
//!
//! They live in Prometheus' default registry, which is the one the
//! scheduler's collector gathers from, so no second endpoint is needed.
//!
//! **Rule:** this crate imports none of the workspace's; every layer may
//! import it.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};

/// The counters. One instance per process is registered; tests use
/// [`HistoryMetrics::unregistered`].
#[derive(Debug, Clone)]
pub struct HistoryMetrics {
    /// Progress records dropped because the writer's queue was full.
    pub dropped_records: IntCounter,
    /// Failed file operations of the writer.
    pub write_errors: IntCounter,
    /// Completed logs written.
    pub jobs_recorded: IntCounter,
    /// Logs that could not be indexed (corrupt, truncated, newer schema).
    pub unreadable_logs: IntCounter,
    /// Listings of the log directory or prefix that failed (the catalog
    /// was kept as it was).
    pub listing_errors: IntCounter,
    /// Connections closed when accepted, over `--http-max-connections`.
    pub connections_refused: IntCounter,
    /// Completed logs deleted by retention.
    pub retention_removed_jobs: IntCounter,
    /// Bytes of completed logs deleted by retention.
    pub retention_removed_bytes: IntCounter,
    /// Orphaned `.running` logs deleted by the cleaner.
    pub retention_removed_orphans: IntCounter,
    /// Cleaner passes run.
    pub retention_passes: IntCounter,
    /// Completed logs uploaded from the spool to an object store.
    pub uploads: IntCounter,
    /// Failed upload attempts (each is retried).
    pub upload_errors: IntCounter,
    /// Of the uploads, those sent as multipart uploads (logs over one
    /// `PUT`).
    pub uploads_in_parts: IntCounter,
    /// Logs read to build the columnar history (the SQL tables).
    pub columnar_logs_read: IntCounter,
    /// Columnar segments taken from the object store instead of being
    /// built from their logs.
    pub columnar_segments_fetched: IntCounter,
    /// Columnar files uploaded to the object store beside the logs.
    pub columnar_files_published: IntCounter,
    /// Jobs added to the columnar history from the records the writer
    /// kept, without reading their logs.
    pub columnar_jobs_from_writer: IntCounter,
    /// Rows of the SQL `jobs` table built from the store's summaries:
    /// every completed job's when it is built whole, the changed jobs'
    /// after a few changes.
    pub sql_jobs_rows_built: IntCounter,
    /// SQL queries by how they ended (`outcome`: answered, refused,
    /// too_large, timeout, memory_limit, cpu_limit, crashed, busy,
    /// client_gone).
    pub sql_queries: IntCounterVec,
    /// Jobs whose completed log the store took in after its first pass
    /// (jobs that finished while this process ran), by `status`
    /// (completed, failed, cancelled).
    pub jobs_finished: IntCounterVec,
    /// Those jobs' durations (start to end), by `status`.
    pub job_duration: HistogramVec,
    /// Jobs whose traces were sent over OTLP.
    pub otlp_jobs_exported: IntCounter,
    /// Jobs whose traces were not sent because the exporter's queue was
    /// full.
    pub otlp_jobs_dropped: IntCounter,
    /// OTLP requests that failed (their job's spans were let go).
    pub otlp_export_errors: IntCounter,
    /// Passes over the log directory or prefix (the first index and each
    /// rescan).
    pub rescans: IntCounter,
    /// Looks the live pages' producers took (one a second per watched
    /// list or job, however many pages watch it).
    pub live_page_looks: IntCounter,
    /// Wrong API tokens presented (bearer or sign-in).
    pub wrong_tokens: IntCounter,
    /// Pieces of a request's heavy work (a replay, a grade, a diagnosis,
    /// a job's tasks read for them) computed.
    pub heavy_computed: IntCounter,
    /// Pieces of heavy work answered from what was kept for the same
    /// question about the same logs.
    pub heavy_kept: IntCounter,
    /// Summary segments found damaged and set aside (their jobs read
    /// again from their logs).
    pub segments_set_aside: IntCounter,
    /// Published manifests not believed (naming another scheduler's jobs
    /// or figures beyond their bounds).
    pub manifests_distrusted: IntCounter,
}

/// The `status` labels of the finished-job series.
pub(crate) const FINISHED_STATUSES: [&str; 3] = ["completed", "failed", "cancelled"];

/// The job duration histogram's buckets (seconds): a tenth of a second to
/// two hours.
const DURATION_BUCKETS: [f64; 14] = [
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
];

/// The `outcome` labels of `ballista_job_history_sql_queries_total`, one
/// per way a SQL query ends (`docs/sql.md`).
pub const SQL_OUTCOMES: [&str; 11] = [
    "answered",
    "refused",
    "too_large",
    "timeout",
    "memory_limit",
    "cpu_limit",
    "crashed",
    "busy",
    "client_gone",
    "wrong_type",
    "cross_site",
];

/// `ballista_job_history_sql_queries_total{outcome}`, every outcome at zero.
fn sql_queries() -> IntCounterVec {
    let vec = IntCounterVec::new(
        Opts::new(
            "ballista_job_history_sql_queries_total",
            "SQL queries by how they ended",
        ),
        &["outcome"],
    )
    .expect("valid metric name");
    // Every outcome is exported from the start, at zero.
    for outcome in SQL_OUTCOMES {
        vec.with_label_values(&[outcome]);
    }
    vec
}

/// `ballista_job_history_jobs_finished_total{status}`, every status at zero.
fn jobs_finished() -> IntCounterVec {
    let vec = IntCounterVec::new(
        Opts::new(
            "ballista_job_history_jobs_finished_total",
            "Jobs whose completed event log was taken in while this process ran, by status",
        ),
        &["status"],
    )
    .expect("valid metric name");
    for status in FINISHED_STATUSES {
        vec.with_label_values(&[status]);
    }
    vec
}

/// `ballista_job_history_job_duration_seconds{status}`.
fn job_duration() -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(
            "ballista_job_history_job_duration_seconds",
            "Durations (start to end) of the jobs counted by ballista_job_history_jobs_finished_total",
        )
        .buckets(DURATION_BUCKETS.to_vec()),
        &["status"],
    )
    .expect("valid metric name")
}

fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::with_opts(Opts::new(name, help)).expect("valid metric name")
}

/// The passes' and the live pages' counters.
fn pass_counters() -> [IntCounter; 2] {
    [
        counter(
            "ballista_job_history_rescans_total",
            "Passes over the event-log directory or prefix (the first index and each rescan)",
        ),
        counter(
            "ballista_job_history_live_page_looks_total",
            "Looks taken for the live pages' event streams (one a second per watched list or job, however many pages watch it)",
        ),
    ]
}

/// The guards' counters: wrong tokens; the heavy work computed and
/// answered from what was kept; damaged segments set aside.
fn guard_counters() -> [IntCounter; 5] {
    [
        counter(
            "ballista_job_history_wrong_tokens_total",
            "Wrong API tokens presented, as bearer headers or on the sign-in page",
        ),
        counter(
            "ballista_job_history_heavy_computed_total",
            "Pieces of a request's heavy work (replays, grades, diagnoses, a job's tasks read for them) computed off the async threads",
        ),
        counter(
            "ballista_job_history_heavy_kept_total",
            "Pieces of a request's heavy work answered from what was kept for the same question about the same logs",
        ),
        counter(
            "ballista_job_history_segments_set_aside_total",
            "Job summary segments found damaged and set aside (renamed *.damaged); their jobs are read again from their logs",
        ),
        counter(
            "ballista_job_history_manifests_distrusted_total",
            "Published summary manifests not believed: an entry of another scheduler's job, or figures beyond their bounds",
        ),
    ]
}

/// The retention cleaner's counters: jobs, bytes and orphans removed,
/// passes.
fn retention_counters() -> [IntCounter; 4] {
    [
        counter(
            "ballista_job_history_retention_removed_jobs_total",
            "Completed event logs deleted by the retention cleaner",
        ),
        counter(
            "ballista_job_history_retention_removed_bytes_total",
            "Bytes of completed event logs deleted by the retention cleaner",
        ),
        counter(
            "ballista_job_history_retention_removed_orphans_total",
            "Orphaned .running event logs deleted by the retention cleaner",
        ),
        counter(
            "ballista_job_history_retention_passes_total",
            "Retention cleaner passes run",
        ),
    ]
}

impl HistoryMetrics {
    /// Counters registered nowhere.
    pub fn unregistered() -> Self {
        let [
            retention_removed_jobs,
            retention_removed_bytes,
            retention_removed_orphans,
            retention_passes,
        ] = retention_counters();
        let [
            wrong_tokens,
            heavy_computed,
            heavy_kept,
            segments_set_aside,
            manifests_distrusted,
        ] = guard_counters();
        let [rescans, live_page_looks] = pass_counters();
        Self {
            dropped_records: counter(
                "ballista_job_history_dropped_records_total",
                "Event-log progress records dropped because the writer's queue was full",
            ),
            write_errors: counter(
                "ballista_job_history_write_errors_total",
                "Event-log file operations that failed (the affected job's log is lost)",
            ),
            jobs_recorded: counter(
                "ballista_job_history_jobs_recorded_total",
                "Completed event logs written",
            ),
            unreadable_logs: counter(
                "ballista_job_history_unreadable_logs_total",
                "Event logs skipped by the index because they could not be read",
            ),
            listing_errors: counter(
                "ballista_job_history_listing_errors_total",
                "Listings of the event-log directory or prefix that failed; the jobs already indexed were kept",
            ),
            connections_refused: counter(
                "ballista_job_history_connections_refused_total",
                "Connections closed as soon as they were accepted, over --http-max-connections",
            ),
            retention_removed_jobs,
            retention_removed_bytes,
            retention_removed_orphans,
            retention_passes,
            uploads: counter(
                "ballista_job_history_uploads_total",
                "Completed event logs uploaded from the spool to the object store",
            ),
            uploads_in_parts: counter(
                "ballista_job_history_uploads_in_parts_total",
                "Event logs uploaded as multipart uploads (larger than one PUT)",
            ),
            upload_errors: counter(
                "ballista_job_history_upload_errors_total",
                "Failed attempts to upload an event log to the object store (each is retried)",
            ),
            columnar_logs_read: counter(
                "ballista_job_history_columnar_logs_read_total",
                "Event logs read to build the columnar history of the SQL tables",
            ),
            columnar_segments_fetched: counter(
                "ballista_job_history_columnar_segments_fetched_total",
                "Columnar segments fetched from the object store instead of built from logs",
            ),
            columnar_files_published: counter(
                "ballista_job_history_columnar_files_published_total",
                "Columnar history files uploaded to the object store beside the logs",
            ),
            columnar_jobs_from_writer: counter(
                "ballista_job_history_columnar_jobs_from_writer_total",
                "Jobs added to the columnar history from the records the writer kept",
            ),
            sql_jobs_rows_built: counter(
                "ballista_job_history_sql_jobs_rows_built_total",
                "Rows of the SQL jobs table built: every completed job's when built whole, the changed jobs' after a few changes",
            ),
            sql_queries: sql_queries(),
            jobs_finished: jobs_finished(),
            job_duration: job_duration(),
            otlp_jobs_exported: counter(
                "ballista_job_history_otlp_jobs_exported_total",
                "Jobs whose traces were sent over OTLP",
            ),
            otlp_jobs_dropped: counter(
                "ballista_job_history_otlp_jobs_dropped_total",
                "Jobs whose traces were not sent because the OTLP exporter's queue was full",
            ),
            otlp_export_errors: counter(
                "ballista_job_history_otlp_export_errors_total",
                "OTLP export requests that failed (their job's spans were let go)",
            ),
            rescans,
            live_page_looks,
            wrong_tokens,
            heavy_computed,
            heavy_kept,
            segments_set_aside,
            manifests_distrusted,
        }
    }

    /// Counts a job that finished while this process ran: its status word
    /// (lower case) and its duration in milliseconds.
    pub fn job_finished(&self, status: &str, duration_ms: Option<u64>) {
        let Some(status) = FINISHED_STATUSES
            .iter()
            .find(|s| s.eq_ignore_ascii_case(status))
        else {
            return;
        };
        self.jobs_finished.with_label_values(&[status]).inc();
        if let Some(ms) = duration_ms {
            self.job_duration
                .with_label_values(&[status])
                .observe(ms as f64 / 1000.0);
        }
    }

    /// The process-wide counters, registered in Prometheus' default registry
    /// on first use.
    pub fn global() -> std::sync::Arc<Self> {
        static GLOBAL: std::sync::OnceLock<std::sync::Arc<HistoryMetrics>> =
            std::sync::OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let metrics = Self::unregistered();
                if let Err(e) = metrics.register(prometheus::default_registry()) {
                    log::warn!("job history metrics are not exported: {e}");
                }
                std::sync::Arc::new(metrics)
            })
            .clone()
    }

    /// Registers every counter in `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        for c in [
            &self.dropped_records,
            &self.write_errors,
            &self.jobs_recorded,
            &self.unreadable_logs,
            &self.listing_errors,
            &self.connections_refused,
            &self.retention_removed_jobs,
            &self.retention_removed_bytes,
            &self.retention_removed_orphans,
            &self.retention_passes,
            &self.uploads,
            &self.upload_errors,
            &self.uploads_in_parts,
            &self.columnar_logs_read,
            &self.columnar_segments_fetched,
            &self.columnar_files_published,
            &self.columnar_jobs_from_writer,
            &self.sql_jobs_rows_built,
            &self.otlp_jobs_exported,
            &self.otlp_jobs_dropped,
            &self.otlp_export_errors,
            &self.rescans,
            &self.live_page_looks,
            &self.wrong_tokens,
            &self.heavy_computed,
            &self.heavy_kept,
            &self.segments_set_aside,
            &self.manifests_distrusted,
        ] {
            registry.register(Box::new(c.clone()))?;
        }
        registry.register(Box::new(self.sql_queries.clone()))?;
        registry.register(Box::new(self.jobs_finished.clone()))?;
        registry.register(Box::new(self.job_duration.clone()))?;
        Ok(())
    }
}
