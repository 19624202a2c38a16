//! `ballista-scheduler`: the upstream scheduler's command line plus ours.
//! It only parses flags and calls the library.

use ballista_core::config::LogRotationPolicy;
use ballista_job_history::{
    ApiToken, Compression, DEFAULT_ORPHAN_GRACE, DEFAULT_PATTERN, DEFAULT_ZSTD_LEVEL, EventLogDir,
    HistoryOptions, Redactor, RemoteOptions, RetentionPolicy, SqlLimits, export_otlp,
    export_parquet, run_history, run_scheduler,
};
use ballista_scheduler::config::{Config, SchedulerConfig};
use bjh_store::retention::{parse_bytes, parse_duration};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

/// A Ballista scheduler that records every job to JSON Lines event logs and
/// keeps serving finished jobs from them; or, with `--history-only`, a
/// server of those logs alone.
#[derive(clap::Parser, Debug)]
#[command(name = "ballista-scheduler", version, about)]
struct Cli {
    #[command(flatten)]
    upstream: Config,

    /// Serve the jobs recorded in --event-log-dir over the scheduler's REST
    /// API, without running a scheduler (no cluster, no gRPC).
    #[arg(long)]
    history_only: bool,

    /// How often the event-log directory is rescanned for new, changed and
    /// deleted logs, in seconds; 0 scans once at startup.
    #[arg(long, default_value_t = 10)]
    update_interval_seconds: u64,

    /// Progress messages that may wait for the writer before new ones are
    /// dropped and counted. A message is one executor's report of the tasks
    /// it finished (one or more task records); job start and end records are
    /// never dropped.
    #[arg(long, default_value_t = 65_536)]
    event_log_queue_capacity: usize,

    /// Event-log files the writer keeps open at once.
    #[arg(long, default_value_t = 256)]
    event_log_max_open_files: usize,

    /// Regular expression for session-config keys whose values are redacted
    /// before they are written.
    #[arg(long, default_value = DEFAULT_PATTERN)]
    event_log_redact_pattern: String,

    /// Seconds a `.running` log may go unwritten before its job is listed as
    /// abandoned rather than running.
    #[arg(long, default_value_t = 600)]
    abandoned_after_seconds: u64,

    /// Store logs compressed: `zstd` writes `<job_id>.eventlog.zst` (upstream's
    /// reader cannot read those); `none` writes plain JSON lines.
    #[arg(long, value_enum, default_value_t = CompressionArg::None)]
    event_log_compression: CompressionArg,

    /// Delete completed logs whose job ended longer ago than this (e.g. 7d,
    /// 12h). Off by default.
    #[arg(long, value_parser = parse_duration)]
    retain_max_age: Option<Duration>,

    /// Keep at most this many completed logs, deleting the oldest (by end
    /// time) first. Off by default.
    #[arg(long)]
    retain_max_jobs: Option<usize>,

    /// Keep at most this many bytes of completed logs (e.g. 50GiB, 500MB),
    /// deleting the oldest first. Off by default.
    #[arg(long, value_parser = parse_bytes)]
    retain_max_bytes: Option<u64>,

    /// How often the cleaner runs (e.g. 1h, 10min).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    retain_interval: Duration,

    /// Log what the cleaner would delete; delete nothing.
    #[arg(long)]
    retain_dry_run: bool,

    /// Delete `.running` logs not modified for this long (a scheduler that
    /// died mid-job leaves them). Applies when the cleaner runs: with any
    /// --retain-max-* limit, or when given. Default 24h.
    #[arg(long, value_parser = parse_duration)]
    orphan_grace: Option<Duration>,

    /// Where to keep the persistent index (a cache of the job list, so a
    /// restart lists jobs at once). Default: `.ballista-job-history.index`
    /// in --event-log-dir (in --event-log-spool for an object store).
    #[arg(long)]
    history_index: Option<std::path::PathBuf>,

    /// Keep no persistent index: every start indexes the directory.
    #[arg(long, conflicts_with = "history_index")]
    no_history_index: bool,

    /// Keep about this many completed jobs' summaries in memory; past
    /// them, each rescan moves them to summary segments on disk beside the
    /// persistent index (`<index>.segments/`), which the job list, counts
    /// and job pages then read, and a restart opens without reading a
    /// log. Default: every job in memory.
    #[arg(long, conflicts_with = "no_history_index")]
    history_memory_jobs: Option<usize>,

    /// Require `Authorization: Bearer <token>` on every `/api` route (the
    /// health checks stay open), the token being this file's content.
    /// Off by default, as upstream's API is open.
    #[arg(long)]
    api_token_file: Option<std::path::PathBuf>,
    /// With an object-store --event-log-dir (s3://, gs://, az://): the local
    /// directory where logs are written while their jobs run and kept until
    /// uploaded (re-scanned at startup), and where the persistent index
    /// lives; one per scheduler (it is locked). Default:
    /// `ballista-job-history-spool/<bind port>` under the system temp
    /// directory.
    #[arg(long)]
    event_log_spool: Option<std::path::PathBuf>,
    /// A custom object-store endpoint: an S3-compatible server
    /// (e.g. http://127.0.0.1:9000), an Azure emulator, a GCS base URL.
    /// Credentials come from the usual environment variables (AWS_*,
    /// GOOGLE_*, AZURE_*).
    #[arg(long)]
    object_store_endpoint: Option<String>,
    /// The S3 region (default: AWS_REGION / AWS_DEFAULT_REGION, else
    /// us-east-1).
    #[arg(long)]
    object_store_region: Option<String>,
    /// Allow a plain http:// object-store endpoint.
    #[arg(long)]
    object_store_allow_http: bool,
    /// How long one object-store request may take (e.g. 30s) before it
    /// fails and is retried later.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    object_store_timeout: Duration,
    /// Listing pages of 1,000 names a rescan of an object-store prefix
    /// reads, going on from where the last one stopped; jobs whose
    /// scheduler published their summaries are known without listing
    /// (docs/operations.md). 0 lists the whole prefix every rescan.
    #[arg(long, default_value_t = 10)]
    listing_pages_per_rescan: usize,

    /// `POST /api/sql`: stop a query after this many seconds.
    #[arg(long, default_value_t = 30)]
    sql_timeout_seconds: u64,
    /// `POST /api/sql`: the memory a query's operators may hold (e.g.
    /// 512MiB); a query needing more fails (nothing spills to disk).
    #[arg(long, value_parser = parse_bytes, default_value = "512MiB")]
    sql_memory_limit: u64,
    /// `POST /api/sql`: answer at most this many rows; more are cut off and
    /// the answer carries `x-ballista-sql-truncated`.
    #[arg(long, default_value_t = 100_000)]
    sql_max_rows: usize,
    /// `POST /api/sql`: answer at most this many bytes (e.g. 64MiB); a
    /// larger answer is refused with a 400.
    #[arg(long, value_parser = parse_bytes, default_value = "64MiB")]
    sql_max_answer_bytes: u64,
    /// `POST /api/sql`: queries run at once, each in a worker process of
    /// its own.
    #[arg(long, default_value_t = 2)]
    sql_workers: usize,
    /// `POST /api/sql`: queries that may wait for a worker; more are
    /// answered 503 at once.
    #[arg(long, default_value_t = 8)]
    sql_queue: usize,
    /// `POST /api/sql`: where a query that names no engine runs: `local`
    /// (a worker process of this server's) or `cluster` (a Ballista job on
    /// the executors of --sql-cluster, by default this scheduler's own).
    #[arg(long, value_enum, default_value = "local")]
    sql_engine: EngineArg,
    /// `POST /api/sql`'s cluster engine: the scheduler (df://host:port)
    /// its jobs are submitted to. Default: a recording scheduler submits
    /// to itself; a --history-only server has no cluster unless named.
    #[arg(long, value_parser = parse_cluster)]
    sql_cluster: Option<String>,
    /// How long an HTTP/1 client may take to send a request header, from
    /// connecting or from its last answer (an idle keep-alive connection
    /// is closed then).
    #[arg(long, default_value_t = 10)]
    http_header_timeout_seconds: u64,
    /// Connections served at once; more are closed when accepted (the
    /// executors' gRPC connections count too).
    #[arg(long, default_value_t = 1024)]
    http_max_connections: usize,
    /// Connections one client (an IPv4 address, or an IPv6 /64) may hold
    /// at once; more are closed when accepted. Default: a sixteenth of
    /// --http-max-connections (64 of 1024), so that sixteen hosts are
    /// needed to fill the port. Behind a proxy every user shares the
    /// proxy's address: raise it there.
    #[arg(long)]
    http_max_connections_per_client: Option<usize>,
    /// How long an HTTP/2 connection (a browser's over a TLS proxy, an
    /// executor's gRPC) may stay with no request under way before it is
    /// closed; a client reconnects when it needs to.
    #[arg(long, default_value_t = 120)]
    http_idle_timeout_seconds: u64,
    /// How long a SIGTERM may take before the process exits: jobs still
    /// running are cancelled and recorded (up to a third of it), then open
    /// connections and streams are given the rest to finish, then closed;
    /// the event-log writer is always drained. A second SIGTERM (or
    /// Ctrl-C) exits at once.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout_seconds: u64,
    /// Without --api-token-file: host names the server answers besides IP
    /// addresses, localhost, this machine's name and --bind-host
    /// (comma-separated; `.example.com` for a domain and the names under
    /// it, `*` for any). Requests naming another host get a 403, so a web
    /// page cannot read the history by DNS rebinding.
    #[arg(long, value_delimiter = ',', conflicts_with = "api_token_file")]
    allowed_hosts: Vec<String>,
    /// `/api/metrics`: export series of their own (last duration, ratio to
    /// the median, regression flag, runs) for this many recurring
    /// queries, those with the most runs; 0 exports none.
    #[arg(long, default_value_t = 20)]
    metrics_top_queries: usize,
    /// The price of one task-slot hour (any currency), for the costs
    /// `/api/usage` and the Usage page show; without it they show none.
    #[arg(long, value_parser = parse_price)]
    slot_hour_price: Option<f64>,
    /// Session-config keys (comma-separated) whose values each job's log
    /// states as its usage tags, to group `/api/usage` by
    /// (`group_by=tag`); a redacted key is refused.
    #[arg(long, value_delimiter = ',')]
    usage_tags: Vec<String>,
    /// With --history-only: write the SQL tables (jobs, stages, tasks,
    /// operators) as Parquet under this directory, then exit (see
    /// docs/sql.md for the layout).
    #[arg(long)]
    export_parquet: Option<std::path::PathBuf>,
    /// Send each finished job as an OpenTelemetry trace to this OTLP/gRPC
    /// receiver (e.g. http://collector:4317): a scheduler sends its jobs as
    /// they end; with --history-only it needs --export-otlp.
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// With --history-only and --otlp-endpoint: send the trace of every
    /// job in the directory, then exit.
    #[arg(long, requires = "otlp_endpoint")]
    export_otlp: bool,
    /// The id this scheduler runs under and records in every log, so one
    /// history of several clusters tells their jobs apart (letters,
    /// digits and . _ - : @, at most 128). Default: upstream's --id when
    /// given, else an id kept in the directory (the spool for an object
    /// store) across restarts.
    #[arg(long = "scheduler-id")]
    our_scheduler_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EngineArg {
    /// A worker process of this server's.
    Local,
    /// A Ballista job on a cluster.
    Cluster,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CompressionArg {
    /// Plain JSON lines.
    None,
    /// zstd.
    Zstd,
}

impl Cli {
    /// The cleaner's policy, when any retention flag asks for one.
    fn retention(&self) -> Option<RetentionPolicy> {
        let wanted = self.retain_max_age.is_some()
            || self.retain_max_jobs.is_some()
            || self.retain_max_bytes.is_some()
            || self.orphan_grace.is_some();
        wanted.then(|| RetentionPolicy {
            max_age: self.retain_max_age,
            max_jobs: self.retain_max_jobs,
            max_bytes: self.retain_max_bytes,
            orphan_grace: self.orphan_grace.unwrap_or(DEFAULT_ORPHAN_GRACE),
            interval: self.retain_interval,
            dry_run: self.retain_dry_run,
        })
    }
}

/// Our flags that only act on an event-log directory (`--history-only`
/// aside, which says so itself).
const NEED_EVENT_LOG_DIR: &[&str] = &[
    "update_interval_seconds",
    "event_log_queue_capacity",
    "event_log_max_open_files",
    "event_log_redact_pattern",
    "abandoned_after_seconds",
    "event_log_compression",
    "retain_max_age",
    "retain_max_jobs",
    "retain_max_bytes",
    "retain_interval",
    "retain_dry_run",
    "orphan_grace",
    "history_index",
    "no_history_index",
    "history_memory_jobs",
    "api_token_file",
    "event_log_spool",
    "object_store_endpoint",
    "object_store_region",
    "object_store_allow_http",
    "object_store_timeout",
    "listing_pages_per_rescan",
    "sql_timeout_seconds",
    "sql_memory_limit",
    "sql_max_rows",
    "sql_max_answer_bytes",
    "sql_workers",
    "sql_queue",
    "sql_engine",
    "sql_cluster",
    "http_header_timeout_seconds",
    "http_max_connections",
    "http_max_connections_per_client",
    "http_idle_timeout_seconds",
    "shutdown_timeout_seconds",
    "allowed_hosts",
    "metrics_top_queries",
    "slot_hour_price",
    "usage_tags",
    "export_parquet",
    "otlp_endpoint",
    "export_otlp",
    "our_scheduler_id",
];

/// Flags of the recording half, which a `--history-only` server lacks.
const RECORDING_ONLY: &[&str] = &[
    "our_scheduler_id",
    "event_log_queue_capacity",
    "event_log_max_open_files",
    "event_log_redact_pattern",
    "event_log_compression",
    "usage_tags",
];

/// Flags of the object-store half.
const OBJECT_STORE_ONLY: &[&str] = &[
    "event_log_spool",
    "object_store_endpoint",
    "object_store_region",
    "object_store_allow_http",
    "object_store_timeout",
    "listing_pages_per_rescan",
];

/// Whether the user gave a flag, rather than its default applying.
fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// `--some-flag` for the argument id `some_flag`.
fn flag(id: &str) -> String {
    // Upstream's `--id` has the id `scheduler_id`: ours is named apart.
    let id = id.strip_prefix("our_").unwrap_or(id);
    format!("--{}", id.replace('_', "-"))
}

/// Refuses a flag that would do nothing in the mode asked for, naming it
/// and the fix: every flag either works or stops startup.
fn refuse_idle_flags(cli: &Cli, matches: &ArgMatches, remote: bool) -> Result<(), String> {
    let first = |ids: &[&'static str]| -> Option<&'static str> {
        ids.iter().copied().find(|id| given(matches, id))
    };
    if cli.upstream.event_log_dir.is_none() {
        if let Some(id) = first(NEED_EVENT_LOG_DIR) {
            return Err(format!(
                "{} does nothing without --event-log-dir DIR: add --event-log-dir, or drop {}",
                flag(id),
                flag(id)
            ));
        }
        return Ok(());
    }
    if cli.history_only
        && let Some(id) = first(RECORDING_ONLY)
    {
        return Err(format!(
            "{} sets how jobs are recorded, and a --history-only server records none: drop {}",
            flag(id),
            flag(id)
        ));
    }
    if !remote && let Some(id) = first(OBJECT_STORE_ONLY) {
        return Err(format!(
            "{} needs an object-store --event-log-dir (s3://, gs:// or az://): drop {} for a \
             local directory",
            flag(id),
            flag(id)
        ));
    }
    if remote && given(matches, "abandoned_after_seconds") {
        return Err(
            "--abandoned-after-seconds applies to local directories: in an object store \
                    an unfinished log is a stopped scheduler's leftover and is listed as abandoned \
                    at once; drop --abandoned-after-seconds"
                .into(),
        );
    }
    if !cli.history_only && cli.export_otlp {
        return Err(
            "--export-otlp is a one-shot of a --history-only server (a scheduler sends each \
             job as it ends): add --history-only, or drop --export-otlp"
                .into(),
        );
    }
    if cli.history_only && cli.otlp_endpoint.is_some() && !cli.export_otlp {
        return Err(
            "a --history-only server sends traces only with --export-otlp (every job in the \
             directory, then exit): add --export-otlp, or drop --otlp-endpoint"
                .into(),
        );
    }
    if cli.history_only && cli.sql_engine == EngineArg::Cluster && cli.sql_cluster.is_none() {
        return Err(
            "--sql-engine cluster on a --history-only server needs a cluster to run on: \
             add --sql-cluster df://host:port, or drop --sql-engine"
                .into(),
        );
    }
    if cli.export_otlp && cli.export_parquet.is_some() {
        return Err("--export-otlp and --export-parquet are two one-shots: run them apart".into());
    }
    if !cli.history_only && given(matches, "export_parquet") {
        return Err(
            "--export-parquet is a one-shot of a --history-only server: add --history-only".into(),
        );
    }
    if let (Some(ours), Some(theirs)) = (&cli.our_scheduler_id, &cli.upstream.scheduler_id)
        && ours != theirs
    {
        return Err(format!(
            "--scheduler-id {ours} and --id {theirs} name two ids for one scheduler: give one"
        ));
    }
    if !cli.history_only
        && let Some(id) = cli
            .our_scheduler_id
            .as_ref()
            .or(cli.upstream.scheduler_id.as_ref())
        && let Some(why) = bjh_recording::scheduler_id::invalid(id)
    {
        return Err(format!("--scheduler-id: {why}"));
    }
    if cli.retention().is_none()
        && let Some(id) = first(&["retain_dry_run", "retain_interval"])
    {
        return Err(format!(
            "{} needs the cleaner, which runs only with a limit: add --retain-max-age, \
             --retain-max-jobs, --retain-max-bytes or --orphan-grace, or drop {}",
            flag(id),
            flag(id)
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    // A SQL worker started by the server answers its one query and exits.
    if let Some(code) = ballista_job_history::run_if_worker() {
        return code;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(32 * 1024 * 1024)
        .build()
        .expect("a Tokio runtime");
    let matches = Cli::command()
        .mut_arg("cors_allowed_origins", |arg| {
            arg.help(
                "Comma-separated origins whose pages may read the REST API across sites (* for \
                 any). Without --event-log-dir, upstream's default when empty: \
                 http://localhost:8080 and https://nightlies.apache.org. With --event-log-dir, \
                 only the origins named here",
            )
        })
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match runtime.block_on(run(cli, &matches)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ballista-scheduler: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stdout or `--log-dir`; with `one_line` (a log directory is
/// served, whose file names and logs anyone who can write there chooses),
/// every record is one line: a line break or other control character
/// inside it is written escaped (`\n`), so a name cannot forge lines.
fn init_logging(opt: &Config, one_line: bool) {
    let filter = EnvFilter::new(
        std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or_else(|_| opt.log_level_setting.clone()),
    );
    let fmt = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_thread_names(opt.print_thread_info)
        .with_thread_ids(opt.print_thread_info)
        .with_env_filter(filter);
    match &opt.log_dir {
        Some(dir) => {
            let prefix = format!(
                "scheduler_{}_{}_{}",
                opt.namespace, opt.external_host, opt.bind_port
            );
            let appender = match opt.log_rotation_policy {
                LogRotationPolicy::Minutely => tracing_appender::rolling::minutely(dir, prefix),
                LogRotationPolicy::Hourly => tracing_appender::rolling::hourly(dir, prefix),
                LogRotationPolicy::Daily => tracing_appender::rolling::daily(dir, prefix),
                LogRotationPolicy::Never => tracing_appender::rolling::never(dir, prefix),
            };
            fmt.with_writer(OneLine(appender, one_line)).init();
        }
        None => fmt.with_writer(OneLine(std::io::stdout, one_line)).init(),
    }
}

/// A log writer whose records are one line each (when `.1`).
struct OneLine<M>(M, bool);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for OneLine<M>
{
    type Writer = OneLineWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter(self.0.make_writer(), self.1)
    }
}

/// Writes each record (one `write` of the formatter's buffer) with the
/// control characters before its final line break escaped.
struct OneLineWriter<W>(W, bool);

impl<W: std::io::Write> std::io::Write for OneLineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.1 {
            return self.0.write(buf);
        }
        let (body, end) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, &b"\n"[..]),
            None => (buf, &b""[..]),
        };
        let mut out = Vec::with_capacity(buf.len() + 8);
        for &b in body {
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.push(b),
                0..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                _ => out.push(b),
            }
        }
        out.extend_from_slice(end);
        self.0.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Resolves at the first SIGTERM or Ctrl-C; from then on, a second one
/// exits the process at once (a shutdown that hangs on a slow disk or a
/// stuck peer can always be cut short; unfinished logs stay `.running`,
/// which readers list as abandoned).
async fn shutdown_signal() {
    stop_signal().await;
    log::info!("stopping: a second SIGTERM or Ctrl-C exits at once");
    tokio::spawn(async {
        stop_signal().await;
        eprintln!("ballista-scheduler: a second stop signal: exiting now");
        std::process::exit(130);
    });
}

/// The next SIGTERM or Ctrl-C.
async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// The recording and history options the flags give for `dir`.
fn history_options(
    cli: &Cli,
    matches: &ArgMatches,
    dir: EventLogDir,
    spool: Option<std::path::PathBuf>,
    redactor: Redactor,
    retention: Option<RetentionPolicy>,
    api_token: Option<ApiToken>,
) -> HistoryOptions {
    let mut options = match dir {
        EventLogDir::Local(path) => HistoryOptions::new(path),
        EventLogDir::Remote(remote) => {
            HistoryOptions::remote(remote, spool.expect("a spool for a remote dir"))
        }
    };
    options.update_interval = Duration::from_secs(cli.update_interval_seconds);
    options.listing_pages = cli.listing_pages_per_rescan;
    options.queue_capacity = cli.event_log_queue_capacity;
    options.max_open_files = cli.event_log_max_open_files;
    options.redactor = redactor;
    options.abandoned_after = Duration::from_secs(cli.abandoned_after_seconds);
    options.compression = match cli.event_log_compression {
        CompressionArg::None => Compression::None,
        CompressionArg::Zstd => Compression::Zstd(DEFAULT_ZSTD_LEVEL),
    };
    options.retention = retention;
    options.api_token = api_token;
    options.sql = SqlLimits {
        timeout: Duration::from_secs(cli.sql_timeout_seconds.max(1)),
        memory: usize::try_from(cli.sql_memory_limit).unwrap_or(usize::MAX),
        max_rows: cli.sql_max_rows.max(1),
        max_answer_bytes: usize::try_from(cli.sql_max_answer_bytes).unwrap_or(usize::MAX),
        workers: cli.sql_workers.max(1),
        queue: cli.sql_queue,
    };
    options.sql_engine = match cli.sql_engine {
        EngineArg::Local => ballista_job_history::SqlEngineKind::Local,
        EngineArg::Cluster => ballista_job_history::SqlEngineKind::Cluster,
    };
    options.sql_cluster = cli.sql_cluster.clone();
    let shutdown = Duration::from_secs(cli.shutdown_timeout_seconds.max(1));
    options.http = ballista_job_history::HttpLimits {
        header_timeout: Duration::from_secs(cli.http_header_timeout_seconds.max(1)),
        max_connections: cli.http_max_connections.max(1),
        max_connections_per_client: cli
            .http_max_connections_per_client
            .unwrap_or(cli.http_max_connections / ballista_job_history::HttpLimits::CLIENTS_TO_FILL)
            .max(1),
        idle_timeout: Duration::from_secs(cli.http_idle_timeout_seconds.max(1)),
        drain_timeout: shutdown - shutdown / 3,
    };
    options.jobs_end_timeout = shutdown / 3;
    // CORS grants the origins an operator named, and no others.
    options.cors_allowed_origins =
        given(matches, "cors_allowed_origins").then(|| cli.upstream.cors_allowed_origins.clone());
    options.allowed_hosts = cli.allowed_hosts.clone();
    options.metrics_top_queries = cli.metrics_top_queries;
    options.slot_hour_price = cli.slot_hour_price;
    options.usage_tags = cli.usage_tags.clone();
    options.otlp_endpoint = cli.otlp_endpoint.clone();
    options.scheduler_id = cli
        .our_scheduler_id
        .clone()
        .or_else(|| cli.upstream.scheduler_id.clone());
    options.allowed_hosts.push(cli.upstream.bind_host.clone());
    if cli.no_history_index {
        options.index_file = None;
    } else if let Some(path) = &cli.history_index {
        options.index_file = Some(path.clone());
    }
    options.memory_jobs = cli.history_memory_jobs;
    options
}

async fn run(cli: Cli, matches: &ArgMatches) -> Result<(), Box<dyn std::error::Error>> {
    init_logging(&cli.upstream, cli.upstream.event_log_dir.is_some());
    let redactor = Redactor::new(&cli.event_log_redact_pattern)
        .map_err(|e| format!("--event-log-redact-pattern: {e}"))?;
    let retention = cli.retention();
    let api_token = cli
        .api_token_file
        .as_deref()
        .map(ApiToken::from_file)
        .transpose()?;
    let remote_options = RemoteOptions {
        endpoint: cli.object_store_endpoint.clone(),
        region: cli.object_store_region.clone(),
        allow_http: cli.object_store_allow_http,
        timeout: cli.object_store_timeout,
    };
    let dir = cli
        .upstream
        .event_log_dir
        .as_deref()
        .map(|dir| EventLogDir::parse(dir, &remote_options))
        .transpose()?;
    refuse_idle_flags(&cli, matches, matches!(dir, Some(EventLogDir::Remote(_))))?;
    // The default spool is checked to be private before anything runs.
    let spool = match (&dir, &cli.event_log_spool) {
        (Some(EventLogDir::Remote(_)), None) => {
            Some(ballista_job_history::default_spool(cli.upstream.bind_port)?)
        }
        (_, named) => named.clone(),
    };
    let history =
        dir.map(|dir| history_options(&cli, matches, dir, spool, redactor, retention, api_token));
    // A one-shot export serves nothing: it listens on no port, so it runs
    // beside a scheduler or history server on the same machine.
    if cli.history_only
        && let Some(out) = &cli.export_parquet
    {
        let history = history.ok_or("--history-only needs --event-log-dir DIR")?;
        let written = export_parquet(history, out).await?;
        println!("{written}");
        return Ok(());
    }
    if cli.history_only
        && cli.export_otlp
        && let Some(endpoint) = &cli.otlp_endpoint
    {
        let history = history.ok_or("--history-only needs --event-log-dir DIR")?;
        let sent = export_otlp(history, endpoint).await?;
        println!("{sent}");
        return Ok(());
    }
    let addr = format!("{}:{}", cli.upstream.bind_host, cli.upstream.bind_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    if cli.history_only {
        let history = history.ok_or("--history-only needs --event-log-dir DIR")?;
        run_history(listener, history, shutdown_signal()).await?;
        return Ok(());
    }

    let config: SchedulerConfig = cli.upstream.try_into()?;
    let config = config
        .with_override_config_producer(Arc::new(
            ballista_core::object_store::session_config_with_s3_support,
        ))
        .with_override_session_builder(Arc::new(
            ballista_core::object_store::session_state_with_s3_support,
        ));
    run_scheduler(listener, config, history, shutdown_signal()).await?;
    Ok(())
}

/// Parses a scheduler's address for the SQL cluster engine.
fn parse_cluster(text: &str) -> Result<String, String> {
    ballista_job_history::scheduler_address(text).map(|_| text.to_string())
}

/// Parses a price: a finite number, 0 or more.
fn parse_price(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(price) if price.is_finite() && price >= 0.0 => Ok(price),
        _ => Err(format!(
            "{text:?} is not a price like 0.05 (a number, 0 or more)"
        )),
    }
}
