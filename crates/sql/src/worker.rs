//! The SQL worker: the same executable, started by the server (never by
//! a user) with [`WORKER_ENV`] set, answers one query and exits.
//!
//! It reads one request from its standard input (a frame holding
//! `Request` as JSON, then, when the query names `jobs`, the `jobs`
//! rows as an Arrow IPC stream), runs it with DataFusion over the
//! columnar history's Parquet files, and writes the answer to its
//! standard output as frames: a `Head` then the answer's bytes, or one
//! `Refusal`. A frame is a tag byte, a little-endian `u32` length and
//! that many bytes; both sides decode it with `tokio-util`'s
//! length-delimited codec (`frames`), which also enforces the limit.
//!
//! The worker encodes the answer as it streams out of DataFusion, batch
//! by batch, into a buffer capped at the answer limit, and only then
//! sends the head: so every failure (a SQL error, an answer over the
//! limit, a crash) is known before the server has sent a status, while
//! the server itself holds no more than one frame of an answer at a time.
//!
//! **Invariants:** the worker holds no state of the server's and no lock;
//! it reads only the files the request names, through an object store
//! rooted at the columnar folder, so plans and messages name tables and
//! segments (`tasks/seg-00000001.parquet`), never a server path (on the
//! cluster engine, `cluster`, the files are named by absolute path, as
//! executors must read them; messages still hide the folder). The
//! server sets its address-space, CPU-time, file-size and core limits
//! (`pool.rs`); it asks the kernel to kill it when the server dies.

use bjh_columnar::TABLES;
use bjh_columnar::tables;
use bytes::{Bytes, BytesMut};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::codec::{Decoder, LengthDelimitedCodec};

/// Set (to the server's process id) in a worker's environment; the
/// binary's `main` hands control to [`run_if_worker`] when it is.
pub const WORKER_ENV: &str = "BALLISTA_JOB_HISTORY_SQL_WORKER";

/// The URL the columnar folder is served under inside the worker.
pub(crate) const ROOT_URL: &str = "history://columnar/";

/// Frame tags.
pub(crate) const REQUEST: u8 = b'Q';
pub(crate) const HEAD: u8 = b'H';
pub(crate) const DATA: u8 = b'D';
pub(crate) const REFUSAL: u8 = b'E';
/// Bytes of answer in one frame.
const CHUNK: usize = 256 * 1024;
/// The largest frame either side accepts.
pub(crate) const MAX_FRAME: usize = 64 * 1024 * 1024;

/// The answer formats, by `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Format {
    /// A JSON array of objects.
    Json,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream.
    Arrow,
}

/// Content type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

impl Format {
    /// The content type of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Arrow => ARROW_STREAM,
        }
    }
}

/// What the server asks of a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Request {
    pub(crate) sql: String,
    pub(crate) format: Format,
    pub(crate) max_rows: usize,
    /// The memory pool's size.
    pub(crate) memory: usize,
    /// Bytes of encoded answer at most.
    pub(crate) max_answer_bytes: usize,
    /// The columnar folder (never shown: files are named relative to it).
    pub(crate) root: PathBuf,
    /// Per table (as [`TABLES`]), its files relative to `root`.
    pub(crate) files: [Vec<String>; 3],
    /// Whether the `jobs` rows follow as an Arrow IPC stream.
    pub(crate) with_jobs: bool,
    /// The completed jobs' rows of `jobs`, as files relative to `root`
    /// (`jobs_file`), read beside the rows that follow; none: every row
    /// follows.
    #[serde(default)]
    pub(crate) jobs_files: Vec<String>,
    /// Jobs whose rows the first of `jobs_files` (the base) holds and the
    /// table leaves out: changed since it was written (their rows now in
    /// the later files, if any).
    #[serde(default)]
    pub(crate) jobs_left_out: Vec<String>,
    /// Whether the `usage` rows follow (after the `jobs` rows, when those
    /// are sent) as an Arrow IPC stream.
    #[serde(default)]
    pub(crate) with_usage: bool,
    /// Whether the `whatif` rows follow (after the `usage` rows, when
    /// those are sent) as an Arrow IPC stream.
    #[serde(default)]
    pub(crate) with_whatif: bool,
    /// Whether the `whatif_pairs` rows follow (last) as an Arrow IPC
    /// stream.
    #[serde(default)]
    pub(crate) with_pairs: bool,
    /// Run as a Ballista job on a cluster (`cluster`), every table read
    /// from Parquet, no rows following; `None` runs here.
    #[serde(default)]
    pub(crate) cluster: Option<crate::cluster::OnCluster>,
}

/// The rows of the tables the server sends (not read from Parquet).
#[derive(Debug, Default)]
pub(crate) struct Rows {
    /// `jobs`.
    pub(crate) jobs: Vec<RecordBatch>,
    /// `usage`.
    pub(crate) usage: Vec<RecordBatch>,
    /// `whatif`.
    pub(crate) whatif: Vec<RecordBatch>,
    /// `whatif_pairs`.
    pub(crate) pairs: Vec<RecordBatch>,
}

impl Rows {
    /// Their size in memory.
    pub(crate) fn bytes(&self) -> usize {
        self.jobs
            .iter()
            .chain(&self.usage)
            .chain(&self.whatif)
            .chain(&self.pairs)
            .map(RecordBatch::get_array_memory_size)
            .sum()
    }
}

/// The start of an answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Head {
    pub(crate) rows: usize,
    /// Whether rows were cut off at the row limit.
    pub(crate) truncated: bool,
    pub(crate) bytes: usize,
}

/// A query the worker would not or could not answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Refusal {
    pub(crate) message: String,
    /// The answer was over the byte limit.
    pub(crate) too_large: bool,
}

/// Writes one frame.
pub(crate) fn write_frame(out: &mut impl Write, tag: u8, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    out.write_all(&[tag])?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(bytes)
}

/// The frame decoder both sides read with: `tokio-util`'s length-delimited
/// codec set to this wire format (a tag byte, a little-endian `u32`
/// length, that many bytes), the header kept in the frame so the tag is
/// read with it, and a frame over [`MAX_FRAME`] an error.
pub(crate) fn frames() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_offset(1)
        .length_field_type::<u32>()
        .little_endian()
        // The length counts the bytes after the header; the frame keeps
        // the header (5 bytes) too.
        .length_adjustment(5)
        .num_skip(0)
        .max_frame_length(MAX_FRAME + 5)
        .new_codec()
}

/// A decoded frame's tag and bytes.
pub(crate) fn split(frame: BytesMut) -> (u8, Bytes) {
    let tag = frame[0];
    (tag, frame.freeze().slice(5..))
}

/// Reads the first frame of a blocking `input`; `None` when it ends
/// first. The bytes read past the frame (the start of what follows it)
/// come back with it.
fn read_frame(input: &mut impl Read) -> std::io::Result<Option<((u8, Bytes), BytesMut)>> {
    let (mut codec, mut buf) = (frames(), BytesMut::new());
    let mut chunk = vec![0; 64 * 1024];
    loop {
        if let Some(frame) = codec.decode(&mut buf)? {
            return Ok(Some((split(frame), buf)));
        }
        match input.read(&mut chunk)? {
            0 if buf.is_empty() => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Runs the worker when this process was started as one: returns its exit
/// code, or `None` in any other process. A binary that embeds the history
/// server calls this first thing in `main` (the plugin's constructor calls
/// [`exit_if_worker`], which does the same from inside a runtime).
pub fn run_if_worker() -> Option<std::process::ExitCode> {
    worker_code().map(|ok| {
        if ok {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        }
    })
}

/// When this process was started as a worker: runs it on a thread of its
/// own (so it may be called inside an async runtime, which the worker's
/// own runtime cannot be started in) and exits the process with its
/// code. In any other process it returns at once. It must run before the
/// process writes a file or a byte to standard output (a worker may
/// write no file, and its standard output is the server's pipe).
pub fn exit_if_worker() {
    if std::env::var_os(WORKER_ENV).is_none() {
        return;
    }
    let ok = std::thread::Builder::new()
        .name("history-sql-worker-main".into())
        .spawn(worker_code)
        .ok()
        .and_then(|t| t.join().ok())
        .flatten()
        .unwrap_or(false);
    std::process::exit(if ok { 0 } else { 1 });
}

/// The worker run, when this process is one: whether it succeeded.
fn worker_code() -> Option<bool> {
    let parent = std::env::var(WORKER_ENV).ok()?;
    // Dies with the server, and not at all if the server is already gone.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let ppid = rustix::process::getppid().map(|p| p.as_raw_nonzero().get().to_string());
    if ppid.as_deref() != Some(parent.as_str()) {
        return Some(false);
    }
    match serve() {
        Ok(()) => Some(true),
        Err(e) => {
            eprintln!("sql worker: {e}");
            Some(false)
        }
    }
}

fn serve() -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("history-sql-worker")
        .thread_stack_size(32 * 1024 * 1024)
        .enable_all()
        .build()?;
    // Warm up before the request comes: the function registry and the
    // planner's statics are built while the worker waits.
    drop(SessionStateBuilder::new().with_default_features().build());
    let mut input = std::io::stdin().lock();
    let Some(((REQUEST, bytes), read_past)) = read_frame(&mut input)? else {
        // The server went away before asking (an idle worker at shutdown).
        return Ok(());
    };
    let mut input = std::io::Cursor::new(read_past).chain(input);
    let request: Request = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
    let mut stream = |wanted: bool| -> std::io::Result<Vec<RecordBatch>> {
        if !wanted {
            return Ok(Vec::new());
        }
        let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(&mut input, None)
            .map_err(std::io::Error::other)?;
        reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(std::io::Error::other)
    };
    let rows = Rows {
        jobs: stream(request.with_jobs)?,
        usage: stream(request.with_usage)?,
        whatif: stream(request.with_whatif)?,
        pairs: stream(request.with_pairs)?,
    };
    drop(input);
    let answer = runtime.block_on(answer(&request, rows));
    let mut out = std::io::stdout().lock();
    match answer {
        Ok((head, bytes)) => {
            write_frame(&mut out, HEAD, &serde_json::to_vec(&head)?)?;
            for chunk in bytes.chunks(CHUNK) {
                write_frame(&mut out, DATA, chunk)?;
            }
        }
        Err(refusal) => write_frame(&mut out, REFUSAL, &serde_json::to_vec(&refusal)?)?,
    }
    out.flush()?;
    runtime.shutdown_background();
    Ok(())
}

/// The request answered: its head and encoded bytes, or why not.
async fn answer(request: &Request, rows: Rows) -> Result<(Head, Vec<u8>), Refusal> {
    let root = request.root.to_string_lossy().to_string();
    let refuse = |e: &dyn std::fmt::Display| Refusal {
        message: hide_root(&e.to_string(), &root),
        too_large: false,
    };
    let ctx = match &request.cluster {
        Some(on) => crate::cluster::context(&request.root, on, request.memory),
        None => context(request, rows),
    }
    .map_err(|e| refuse(&e))?;
    let options = datafusion::execution::context::SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let frame = ctx
        .sql_with_options(&request.sql, options)
        .await
        .map_err(|e| refuse(&e))?;
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let task = frame.task_ctx();
    let plan = frame.create_physical_plan().await.map_err(|e| refuse(&e))?;
    let stream = datafusion::physical_plan::execute_stream(plan.clone(), Arc::new(task))
        .map_err(|e| refuse(&e))?;
    let Some(on) = &request.cluster else {
        return encode(request, &schema, stream, &root).await;
    };
    // On a cluster, the job is cancelled when the query's time runs out.
    let budget = std::time::Duration::from_millis(on.budget_ms);
    match tokio::time::timeout(budget, encode(request, &schema, stream, &root)).await {
        Ok(answer) => answer,
        Err(_) => {
            let cancelled = match crate::cluster::job_id(&plan) {
                Some(id) if crate::cluster::cancel(&on.scheduler, &id).await => {
                    format!("; its job {id} on the cluster was cancelled")
                }
                Some(id) => format!("; its job {id} on the cluster could not be cancelled"),
                None => String::new(),
            };
            Err(Refusal {
                message: format!(
                    "the query was stopped at its time limit (--sql-timeout-seconds){cancelled}"
                ),
                too_large: false,
            })
        }
    }
}

/// `stream` encoded in the request's format, under its row and byte
/// limits.
async fn encode(
    request: &Request,
    schema: &SchemaRef,
    mut stream: datafusion::execution::SendableRecordBatchStream,
    root: &str,
) -> Result<(Head, Vec<u8>), Refusal> {
    let refuse = |e: &dyn std::fmt::Display| Refusal {
        message: hide_root(&e.to_string(), root),
        too_large: false,
    };
    let mut out = Encoder::new(request.format, schema, request.max_answer_bytes);
    let mut head = Head {
        rows: 0,
        truncated: false,
        bytes: 0,
    };
    while let Some(batch) = stream.next().await {
        let mut batch = batch.map_err(|e| refuse(&e))?;
        if head.rows + batch.num_rows() > request.max_rows {
            batch = batch.slice(0, request.max_rows - head.rows);
            head.truncated = true;
        }
        head.rows += batch.num_rows();
        out.write(&batch).map_err(|e| out.refusal(e, root))?;
        if head.truncated {
            break;
        }
    }
    let bytes = out.finish(schema).map_err(|e| out.refusal(e, root))?;
    head.bytes = bytes.len();
    Ok((head, bytes))
}

/// `message` without the columnar folder's path: files are named from it.
fn hide_root(message: &str, root: &str) -> String {
    if root.is_empty() {
        return message.to_string();
    }
    let root = root.trim_end_matches('/');
    message
        .replace(&format!("{root}/"), "")
        .replace(root, "<columnar>")
}

/// A buffer that refuses to grow past its cap, and says so in `over`.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
    over: Arc<std::sync::atomic::AtomicBool>,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            self.over.store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(std::io::Error::other("the answer is over its byte limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The answer's encoder, one of three formats, fed batch by batch.
struct Encoder {
    kind: Kind,
    cap: usize,
    over: Arc<std::sync::atomic::AtomicBool>,
}

enum Kind {
    Json(datafusion::arrow::json::ArrayWriter<Capped>),
    Csv(Box<datafusion::arrow::csv::Writer<Capped>>, bool),
    /// `None` when even the schema was over the cap.
    Arrow(Option<datafusion::arrow::ipc::writer::StreamWriter<Capped>>),
}

type ArrowResult<T> = Result<T, datafusion::arrow::error::ArrowError>;

impl Encoder {
    fn new(format: Format, schema: &SchemaRef, cap: usize) -> Self {
        let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let buf = Capped {
            bytes: Vec::new(),
            cap,
            over: over.clone(),
        };
        let kind = match format {
            Format::Json => Kind::Json(datafusion::arrow::json::ArrayWriter::new(buf)),
            Format::Csv => Kind::Csv(
                Box::new(
                    datafusion::arrow::csv::WriterBuilder::new()
                        .with_header(true)
                        .build(buf),
                ),
                false,
            ),
            Format::Arrow => {
                Kind::Arrow(datafusion::arrow::ipc::writer::StreamWriter::try_new(buf, schema).ok())
            }
        };
        Self { kind, cap, over }
    }

    fn write(&mut self, batch: &RecordBatch) -> ArrowResult<()> {
        match &mut self.kind {
            Kind::Json(w) => w.write(batch),
            Kind::Csv(w, wrote) => {
                *wrote = true;
                w.write(batch)
            }
            Kind::Arrow(Some(w)) => w.write(batch),
            Kind::Arrow(None) => Err(too_large()),
        }
    }

    /// The bytes, once the answer is whole.
    fn finish(&mut self, schema: &SchemaRef) -> ArrowResult<Vec<u8>> {
        let take = |c: &mut Capped| std::mem::take(&mut c.bytes);
        match std::mem::replace(&mut self.kind, Kind::Arrow(None)) {
            Kind::Json(mut w) => {
                w.finish()?;
                let bytes = take(w.get_mut());
                Ok(if bytes.is_empty() {
                    b"[]".to_vec()
                } else {
                    bytes
                })
            }
            Kind::Csv(mut w, wrote) => {
                if !wrote {
                    w.write(&RecordBatch::new_empty(schema.clone()))?;
                }
                Ok(w.into_inner().bytes)
            }
            Kind::Arrow(Some(mut w)) => {
                w.finish()?;
                Ok(take(w.get_mut()))
            }
            Kind::Arrow(None) => {
                self.over.store(true, std::sync::atomic::Ordering::Relaxed);
                Err(too_large())
            }
        }
    }

    fn refusal(&self, e: datafusion::arrow::error::ArrowError, root: &str) -> Refusal {
        if self.over.load(std::sync::atomic::Ordering::Relaxed) {
            Refusal {
                message: format!(
                    "the answer is over {} (--sql-max-answer-bytes); select fewer rows or columns",
                    bytesize::ByteSize::b(self.cap as u64).display().iec()
                ),
                too_large: true,
            }
        } else {
            Refusal {
                message: hide_root(&e.to_string(), root),
                too_large: false,
            }
        }
    }
}

fn too_large() -> datafusion::arrow::error::ArrowError {
    datafusion::arrow::error::ArrowError::IoError(
        "the answer is over its byte limit".into(),
        std::io::Error::other("over"),
    )
}

/// Parquet footers and file statistics, kept for the worker's one query
/// (a query that reads a file twice reads its footer once).
fn caches() -> CacheManagerConfig {
    use datafusion::execution::cache::cache_manager::{
        DEFAULT_FILE_STATISTICS_MEMORY_LIMIT, DEFAULT_METADATA_CACHE_LIMIT,
    };
    use datafusion::execution::cache::default_cache::DefaultCache;
    CacheManagerConfig::default()
        .with_file_statistics_cache(Some(Arc::new(DefaultCache::new(
            DEFAULT_FILE_STATISTICS_MEMORY_LIMIT,
        ))))
        .with_file_metadata_cache(Some(Arc::new(DefaultCache::new(
            DEFAULT_METADATA_CACHE_LIMIT,
        ))))
        .with_list_files_cache_limit(0)
}

/// A session over the tables, with the memory pool; nothing else
/// registered: no catalog, no URL tables, no object store but the
/// columnar folder's.
fn context(request: &Request, rows: Rows) -> datafusion::error::Result<SessionContext> {
    let runtime = RuntimeEnvBuilder::new()
        .with_cache_manager(caches())
        .with_memory_limit(request.memory, 1.0)
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build_arc()?;
    let mut config = SessionConfig::new()
        .with_target_partitions(2)
        .with_information_schema(false);
    config.options_mut().execution.parquet.pushdown_filters = true;
    config.options_mut().execution.parquet.reorder_filters = true;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    let ctx = SessionContext::new_with_state(state);
    let root = url::Url::parse(ROOT_URL).expect("a valid URL");
    if request.files.iter().any(|f| !f.is_empty()) || !request.jobs_files.is_empty() {
        let store = object_store::local::LocalFileSystem::new_with_prefix(&request.root)?;
        ctx.register_object_store(&root, Arc::new(store));
    }
    let sent = Arc::new(MemTable::try_new(tables::JOBS.clone(), vec![rows.jobs])?);
    let jobs = jobs_table(&request.jobs_files, &request.jobs_left_out, sent)?;
    ctx.register_table("jobs", jobs)?;
    let table = MemTable::try_new(tables::USAGE.clone(), vec![rows.usage])?;
    ctx.register_table("usage", Arc::new(table))?;
    let table = MemTable::try_new(crate::whatif::WHATIF.clone(), vec![rows.whatif])?;
    ctx.register_table("whatif", Arc::new(table))?;
    let table = MemTable::try_new(crate::whatif::WHATIF_PAIRS.clone(), vec![rows.pairs])?;
    ctx.register_table("whatif_pairs", Arc::new(table))?;
    for (t, (name, schema)) in TABLES.iter().enumerate() {
        let files = &request.files[t];
        let provider: Arc<dyn datafusion::catalog::TableProvider> = if files.is_empty() {
            Arc::new(MemTable::try_new((**schema).clone(), vec![vec![]])?)
        } else {
            let urls = files
                .iter()
                .map(|f| ListingTableUrl::parse(format!("{ROOT_URL}{f}")))
                .collect::<Result<Vec<_>, _>>()?;
            parquet_table(urls, (**schema).clone())?
        };
        ctx.register_table(*name, provider)?;
    }
    Ok(ctx)
}

/// The `jobs` table: the rows `sent` over the pipe, and the completed
/// jobs' `files` (relative to the root, the base first) less the base's
/// rows of the jobs `left_out`, as one table (a view of their union:
/// DataFusion inlines it, so filters and projections reach both scans).
fn jobs_table(
    files: &[String],
    left_out: &[String],
    sent: Arc<MemTable>,
) -> datafusion::error::Result<Arc<dyn datafusion::catalog::TableProvider>> {
    use datafusion::datasource::provider_as_source;
    use datafusion::logical_expr::LogicalPlanBuilder;
    if files.is_empty() {
        return Ok(sent);
    }
    let urls = files
        .iter()
        .map(|f| ListingTableUrl::parse(format!("{ROOT_URL}{f}")))
        .collect::<Result<Vec<_>, _>>()?;
    let completed = completed_jobs_table(urls, left_out)?;
    let plan = LogicalPlanBuilder::scan("jobs", provider_as_source(completed), None)?
        .union(LogicalPlanBuilder::scan("jobs", provider_as_source(sent), None)?.build()?)?
        .build()?;
    Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
        plan, None,
    )))
}

/// The `jobs` rows of the Parquet files `urls`, less the rows of the jobs
/// `left_out` that the base file holds (the only file with the column
/// [`crate::jobs_file::BASE_MARK`]; the others read it as null): one scan
/// of every file, filtered and the mark projected away. One scan, not a
/// union of the base and the rest: a Ballista job splits a union's
/// branches over its tasks, and some plans over such a union (a sort
/// pushed into a branch of one partition) came back with a branch's rows
/// twice.
pub(crate) fn completed_jobs_table(
    urls: Vec<ListingTableUrl>,
    left_out: &[String],
) -> datafusion::error::Result<Arc<dyn datafusion::catalog::TableProvider>> {
    use crate::jobs_file::{BASE_MARK, WITH_MARK};
    use datafusion::datasource::provider_as_source;
    use datafusion::logical_expr::LogicalPlanBuilder;
    use datafusion::prelude::{col, lit};
    if left_out.is_empty() {
        return parquet_table(urls, tables::JOBS.clone());
    }
    let all = parquet_table(urls, WITH_MARK.clone())?;
    let ids = left_out.iter().map(|id| lit(id.as_str())).collect();
    let keep = col(BASE_MARK)
        .is_null()
        .or(col("job_id").in_list(ids, true));
    let columns = tables::JOBS.fields().iter().map(|f| col(f.name()));
    let plan = LogicalPlanBuilder::scan("jobs", provider_as_source(all), None)?
        .filter(keep)?
        .project(columns)?
        .build()?;
    Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
        plan, None,
    )))
}

/// A table over the Parquet files `urls`, of `schema`.
pub(crate) fn parquet_table(
    urls: Vec<ListingTableUrl>,
    schema: SchemaRef,
) -> datafusion::error::Result<Arc<dyn datafusion::catalog::TableProvider>> {
    let options =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    Ok(Arc::new(ListingTable::try_new(config)?))
}

/// Runs `request` in this process, as a worker would, and decodes its
/// answer: for the SQL bench, which times the engine apart from the
/// process around it.
#[doc(hidden)]
pub async fn answer_in_process(
    root: PathBuf,
    files: [Vec<String>; 3],
    jobs: Option<Vec<RecordBatch>>,
    sql: &str,
    memory: usize,
) -> Result<usize, String> {
    let request = Request {
        sql: sql.to_string(),
        format: Format::Arrow,
        max_rows: usize::MAX,
        memory,
        max_answer_bytes: usize::MAX / 2,
        root,
        files,
        with_jobs: jobs.is_some(),
        jobs_files: Vec::new(),
        jobs_left_out: Vec::new(),
        with_usage: false,
        with_whatif: false,
        with_pairs: false,
        cluster: None,
    };
    let rows = Rows {
        jobs: jobs.unwrap_or_default(),
        ..Rows::default()
    };
    answer(&request, rows)
        .await
        .map(|(head, _)| head.rows)
        .map_err(|r| r.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `write_frame` writes the codec reads back, with whatever
    /// follows the frame; a frame announcing more than the limit is an
    /// error before anything is allocated for it, and a cut one too.
    #[test]
    fn frames_read_back_as_written_and_the_limit_holds() {
        let mut wire = Vec::new();
        write_frame(&mut wire, REQUEST, b"{\"sql\":1}").unwrap();
        wire.extend_from_slice(b"ARROW");
        let ((tag, bytes), rest) = read_frame(&mut wire.as_slice()).unwrap().unwrap();
        assert_eq!(
            (tag, &bytes[..], &rest[..]),
            (REQUEST, &b"{\"sql\":1}"[..], &b"ARROW"[..])
        );
        assert!(read_frame(&mut &b""[..]).unwrap().is_none());
        let mut huge = vec![DATA];
        huge.extend_from_slice(&(MAX_FRAME as u32 + 1).to_le_bytes());
        assert!(read_frame(&mut huge.as_slice()).is_err());
        assert!(read_frame(&mut &wire[..7]).is_err(), "a cut frame");
    }

    #[test]
    fn messages_name_files_from_the_columnar_folder_never_its_path() {
        let root = "/var/lib/history/.ballista-job-history.columnar";
        let message =
            format!("Object at location {root}/tasks/seg-00000001.parquet not found; {root}");
        let hidden = hide_root(&message, root);
        assert_eq!(
            hidden,
            "Object at location tasks/seg-00000001.parquet not found; <columnar>"
        );
        assert!(!hidden.contains("/var/lib"));
    }

    #[test]
    fn an_answer_over_the_byte_limit_is_refused_as_too_large() {
        let schema = tables::JOBS.clone();
        let mut out = Encoder::new(Format::Json, &schema, 10);
        let batch = RecordBatch::new_empty(schema.clone());
        assert!(out.write(&batch).is_ok(), "an empty batch fits");
        assert_eq!(out.finish(&schema).unwrap(), b"[]", "two bytes fit in ten");
        let mut out = Encoder::new(Format::Csv, &schema, 10);
        let e = out.finish(&schema).unwrap_err();
        let refusal = out.refusal(e, "");
        assert!(
            refusal.too_large,
            "a header of every column does not fit in ten bytes"
        );
        assert!(refusal.message.contains("--sql-max-answer-bytes"));
    }
}
