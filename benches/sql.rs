//! SQL over a generated history of 10,000,000 task records (200 jobs of
//! 50,000 tasks on 16 executors), as the columnar history holds them:
//! the aggregate `SELECT executor, count(*), avg(duration_ms) FROM tasks
//! GROUP BY 1` and one job's tasks, ours (DataFusion through the engine's
//! own session) against DuckDB (PyPI `duckdb`) and DataFusion's own
//! Python bindings (PyPI `datafusion`, the same engine without our
//! server) over the same Parquet files, run by turns in each round, and
//! the aggregate against reading the JSON logs per query. Also what
//! building the columnar rows of one job costs beside writing its log.
//!
//! Then a one-row query (`SELECT 1`) end to end as the server runs it:
//! in its worker process against the same query answered in this process
//! (as the server did before queries had workers of their own).
//!
//! `cargo bench --bench sql`; `SQL_JOBS` changes the 200 jobs, `SQL_RUNS`
//! the 15 rounds. The Python engines are run by `python3` (`pip install
//! duckdb datafusion`); without one its columns say so.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use bjh_columnar::tables::{TASKS, job_rows};
use bjh_columnar::{Generation, write_file};
use bjh_sql::SqlLimits;
use bjh_sql::worker::answer_in_process;
use bjh_store::records::{JobRecords, Task};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TASKS_PER_JOB: usize = 50_000;
const EXECUTORS: usize = 16;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The records of one generated job.
fn records(job: usize, rng: &mut corpus::Rng) -> JobRecords {
    let start = 1_700_000_000_000 + job as u64 * 3_600_000;
    let tasks = (0..TASKS_PER_JOB)
        .map(|i| {
            let begin = start + rng.below(600_000);
            let failed = rng.below(500) == 0;
            Task {
                stage_id: (i % 4) as u32,
                stage_attempt: 0,
                task_id: (i / 4) as u32,
                executor: rng.below(EXECUTORS as u64) as u32,
                failure: failed.then(|| ("ExecutionError".to_string(), "boom".to_string())),
                launch_time: begin.saturating_sub(3),
                start_exec_time: begin,
                end_exec_time: begin + 5 + rng.below(2_000),
                input_rows: rng.below(100_000),
                output_rows: rng.below(10_000),
                compute_nanos: rng.below(2_000_000_000),
            }
        })
        .collect();
    JobRecords {
        tasks,
        executors: (0..EXECUTORS).map(|e| format!("executor-{e:02}")).collect(),
        ..JobRecords::default()
    }
}

fn job_id(job: usize) -> String {
    format!("038J{job:09}")
}

/// Writes the same rows with zstd on every column: the layout compared
/// against (the columnar history leaves its dictionary-coded columns
/// uncompressed).
fn write_zstd_everywhere(path: &Path, batch: &datafusion::arrow::array::RecordBatch) {
    use datafusion::parquet::basic::{Compression, ZstdLevel};
    use datafusion::parquet::file::properties::WriterProperties;
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(64 * 1024))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut w =
        datafusion::parquet::arrow::ArrowWriter::try_new(file, TASKS.clone(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// Writes the tasks of `jobs` jobs as segments of 20 jobs, as the columnar
/// history writes them, and again in `alt` with zstd on every column;
/// gives the files of each and the seconds each layout took to write.
fn write_history(dir: &Path, alt: &Path, jobs: usize) -> (Vec<PathBuf>, Vec<PathBuf>, f64, f64) {
    let mut rng = corpus::Rng::new(7);
    let mut files = Vec::new();
    let mut alts = Vec::new();
    let (mut ours, mut theirs) = (Duration::ZERO, Duration::ZERO);
    for first in (0..jobs).step_by(20) {
        let batches: Vec<_> = (first..(first + 20).min(jobs))
            .map(|j| {
                job_rows(
                    &job_id(j),
                    &records(j, &mut rng),
                    &BTreeMap::new(),
                    &BTreeMap::new(),
                    &[],
                )
                .tasks
            })
            .collect();
        let batch = datafusion::arrow::compute::concat_batches(&TASKS, &batches).unwrap();
        let path = dir.join(format!("seg-{:08}.parquet", first / 20));
        let t = Instant::now();
        write_file(&path, &TASKS, &batch).unwrap();
        ours += t.elapsed();
        files.push(path);
        let path = alt.join(format!("seg-{:08}.parquet", first / 20));
        let t = Instant::now();
        write_zstd_everywhere(&path, &batch);
        theirs += t.elapsed();
        alts.push(path);
    }
    (files, alts, ours.as_secs_f64(), theirs.as_secs_f64())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Another engine over the same files, in a Python process of its own
/// that answers one query per line of its input, so that its runs can
/// alternate with ours (this machine's speed drifts within a minute).
struct Reference {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl Reference {
    /// DuckDB (PyPI `duckdb`) or DataFusion's Python bindings (PyPI
    /// `datafusion`), on two threads, with `tasks` over `dir`'s files;
    /// `None` when the package is not installed.
    fn start(engine: &str, dir: &Path) -> Option<Reference> {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let open = match engine {
            "duckdb" => format!(
                "import duckdb\n\
                 con = duckdb.connect()\n\
                 con.execute('SET threads = 2')\n\
                 con.execute(\"CREATE VIEW tasks AS SELECT * FROM read_parquet('{}/*.parquet')\")\n\
                 run = lambda q: con.execute(q).fetchall()\n",
                dir.display()
            ),
            _ => format!(
                "from datafusion import SessionContext, SessionConfig\n\
                 ctx = SessionContext(SessionConfig().with_target_partitions(2))\n\
                 ctx.register_parquet('tasks', '{}')\n\
                 run = lambda q: [r for b in ctx.sql(q).collect() for r in range(b.num_rows)]\n",
                dir.display()
            ),
        };
        let script = format!(
            "{open}import sys, json, time\n\
             print('ready', flush=True)\n\
             for line in sys.stdin:\n\
             \x20   q = json.loads(line)\n\
             \x20   t = time.perf_counter(); n = len(run(q)); t = time.perf_counter() - t\n\
             \x20   print(t, n, flush=True)\n"
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let input = child.stdin.take()?;
        let mut output = std::io::BufReader::new(child.stdout.take()?);
        let mut line = String::new();
        output.read_line(&mut line).ok()?;
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        Some(Reference {
            child,
            input,
            output,
        })
    }

    /// One run of `query`: its time and the rows it gave.
    fn run(&mut self, query: &str) -> (Duration, usize) {
        use std::io::{BufRead, Write};
        writeln!(self.input, "{}", serde_json::to_string(query).unwrap()).unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let mut parts = line.split_whitespace();
        let secs: f64 = parts.next().unwrap().parse().unwrap();
        (
            Duration::from_secs_f64(secs),
            parts.next().unwrap().parse().unwrap(),
        )
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The aggregate over the JSON logs: reads `log` and sums its tasks per
/// executor, as answering the query from the logs would for each log.
fn aggregate_log(log: &Path, per_executor: &mut BTreeMap<String, (u64, u64)>) -> usize {
    let r = JobRecords::read(log).unwrap();
    for task in &r.tasks {
        let e = per_executor
            .entry(r.executors[task.executor as usize].clone())
            .or_default();
        e.0 += 1;
        e.1 += task.duration();
    }
    r.tasks.len()
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn main() {
    let jobs = env_usize("SQL_JOBS", 200);
    let runs = env_usize("SQL_RUNS", 15);
    let dir = tempfile::tempdir().unwrap();
    let alt = tempfile::tempdir().unwrap();
    let (files, alts, write_ours, write_alt) = write_history(dir.path(), alt.path(), jobs);
    let size = |files: &[PathBuf]| -> f64 {
        files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum::<u64>() as f64
            / 1e6
    };
    let total = jobs * TASKS_PER_JOB;
    println!(
        "## {total} task records, {jobs} jobs, {} Parquet files\n\n\
         As kept (the dictionary-coded columns uncompressed, zstd on the rest): {:.0} MB, \
         written in {write_ours:.1} s. With zstd on every column: {:.0} MB, written in \
         {write_alt:.1} s.\n",
        files.len(),
        size(&files),
        size(&alts),
    );
    // The tables' files as a worker is handed them: relative to a root.
    let relative = |root: &Path, files: &[PathBuf]| -> [Vec<String>; 3] {
        let tasks = files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        [Vec::new(), tasks, Vec::new()]
    };
    let generation = relative(dir.path(), &files);
    let alt_generation = relative(alt.path(), &alts);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let limits = SqlLimits {
        memory: 4 << 30,
        max_rows: usize::MAX,
        ..SqlLimits::default()
    };
    // The logs the aggregate is also answered from, a few of the same
    // size, one read per round and scaled to the history.
    let logs = tempfile::tempdir().unwrap();
    let sample = 4;
    corpus::write_corpus(logs.path(), sample, 3, |_| TASKS_PER_JOB);
    let one = job_id(jobs / 2);
    let aggregate = "SELECT executor, count(*), avg(duration_ms) FROM tasks GROUP BY 1";
    let cases = [
        (
            "`SELECT executor, count(*), avg(duration_ms) FROM tasks GROUP BY 1`",
            aggregate.to_string(),
            EXECUTORS,
        ),
        (
            "one job's tasks (`WHERE job_id = ...`)",
            format!("SELECT * FROM tasks WHERE job_id = '{one}'"),
            TASKS_PER_JOB,
        ),
    ];
    println!(
        "Medians of {runs} rounds; each round runs the query once in each engine on each \
         layout, one after the other.\n"
    );
    println!(
        "| query | files | ours (DataFusion in the server) | DuckDB | ours / DuckDB | \
         DataFusion's Python bindings | ours / those |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let layouts = [
        ("as kept", &generation, dir.path()),
        ("zstd on every column", &alt_generation, alt.path()),
    ];
    let mut engines: Vec<_> = layouts
        .iter()
        .map(|(_, _, dir)| {
            (
                Reference::start("duckdb", dir),
                Reference::start("datafusion", dir),
            )
        })
        .collect();
    let mut from_logs = None;
    for (what, query, rows) in &cases {
        let with_logs = query == aggregate;
        // Per layout: ours, DuckDB's and the bindings' times.
        let mut times = vec![(Vec::new(), Vec::new(), Vec::new()); layouts.len()];
        let mut logs_read = Vec::new();
        let mut per_executor = BTreeMap::new();
        for round in 0..=runs {
            for (l, (_, generation, root)) in layouts.iter().enumerate() {
                let t = Instant::now();
                let n = runtime
                    .block_on(answer_in_process(
                        root.to_path_buf(),
                        (*generation).clone(),
                        None,
                        query,
                        limits.memory,
                    ))
                    .unwrap();
                let took = t.elapsed();
                assert_eq!(n, *rows, "{query}");
                let (duck, python) = &mut engines[l];
                let duck = duck.as_mut().map(|d| d.run(query));
                let python = python.as_mut().map(|p| p.run(query));
                if round == 0 {
                    continue;
                }
                times[l].0.push(took);
                if let Some((t, n)) = duck {
                    assert_eq!(n, *rows, "duckdb: {query}");
                    times[l].1.push(t);
                }
                if let Some((t, n)) = python {
                    assert_eq!(n, *rows, "datafusion: {query}");
                    times[l].2.push(t);
                }
            }
            if with_logs {
                let t = Instant::now();
                let path = logs
                    .path()
                    .join(format!("job{:07}.eventlog", round % sample));
                assert_eq!(aggregate_log(&path, &mut per_executor), TASKS_PER_JOB);
                if round > 0 {
                    logs_read.push(t.elapsed());
                }
            }
        }
        for ((layout, _, _), (ours, duck, python)) in layouts.iter().zip(times) {
            let ours = median(ours);
            let cell = |times: Vec<Duration>, name: &str| {
                if times.is_empty() {
                    (format!("({name} not installed)"), String::new())
                } else {
                    let m = median(times);
                    (corpus::ms(m), format!("{:.2}", ratio(ours, m)))
                }
            };
            let (duck_ms, duck_ratio) = cell(duck, "duckdb");
            let (py_ms, py_ratio) = cell(python, "datafusion");
            println!(
                "| {what} | {layout} | {} | {duck_ms} | {duck_ratio} | {py_ms} | {py_ratio} |",
                corpus::ms(ours)
            );
            if with_logs && from_logs.is_none() {
                from_logs = Some((median(logs_read.clone()), ours));
            }
        }
    }
    drop(engines);
    let (per_log, ours) = from_logs.unwrap();
    let scaled = per_log * jobs as u32;
    println!(
        "\nReading the JSON logs for the same aggregate (in the same rounds as the files as \
         kept): {} per 50,000-task log, so {:.1} s for the {jobs} jobs; ours over the columnar \
         history is {:.0} times faster",
        corpus::ms(per_log),
        scaled.as_secs_f64(),
        ratio(scaled, ours)
    );

    // `jobs` over a million jobs: the completed jobs' rows as a file the
    // worker reads, against the same rows sent over the worker's pipe
    // for each query (the design before; an engine whose file folder is
    // a planted link takes that path), in one run, by turns.
    let n = env_usize("SQL_INDEX_JOBS", 1_000_000);
    let index_dir = tempfile::tempdir().unwrap();
    let store = corpus::indexed_store(index_dir.path(), n);
    let store = std::sync::Arc::new(store);
    let engine_in = |columnar: std::path::PathBuf| {
        bjh_sql::SqlEngine::new(
            std::sync::Arc::new(bjh_serving::source::OthersOf::new(std::sync::Arc::new(
                bjh_serving::source::DiskSource::new(store.clone()),
            ))),
            store.clone(),
            columnar,
            limits,
            env!("CARGO_BIN_EXE_ballista-scheduler").into(),
            None,
        )
    };
    let engine = engine_in(index_dir.path().join("columnar"));
    let piped_dir = index_dir.path().join("columnar-piped");
    std::fs::create_dir_all(&piped_dir).unwrap();
    let nowhere = index_dir.path().join("nowhere");
    std::fs::create_dir_all(&nowhere).unwrap();
    std::os::unix::fs::symlink(&nowhere, piped_dir.join(bjh_sql::jobs_file::JOBS_DIR)).unwrap();
    let piped = engine_in(piped_dir);
    let failed = (n / 20) as i64;
    let count = |engine: &bjh_sql::SqlEngine| {
        let t = Instant::now();
        let answer = runtime
            .block_on(
                engine.query_rows("SELECT count(*) AS n FROM jobs WHERE status = 'Failed'", 10),
            )
            .unwrap();
        let took = t.elapsed();
        let got = answer.batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .unwrap()
            .value(0);
        assert!(
            (got - failed).abs() < failed / 10,
            "{got} vs about {failed}"
        );
        took
    };
    // The first query also makes the columnar history's first pass (over
    // a million logs this corpus does not have): not timed.
    count(&engine);
    count(&piped);
    let (mut kept, mut kept_piped) = (Vec::new(), Vec::new());
    let (mut changed, mut changed_piped) = (Vec::new(), Vec::new());
    let ids: Vec<String> = runtime
        .block_on(engine.query_rows("SELECT job_id FROM jobs LIMIT 5", 5))
        .unwrap()
        .batches
        .iter()
        .flat_map(|b| {
            let ids = b
                .column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::StringViewArray>()
                .unwrap();
            ids.iter().flatten().map(str::to_string).collect::<Vec<_>>()
        })
        .collect();
    for id in &ids {
        kept.push(count(&engine));
        kept_piped.push(count(&piped));
        // One job fewer: both build their rows again.
        store.forget(id);
        changed.push(count(&engine));
        changed_piped.push(count(&piped));
    }
    let mut builds = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let batches = runtime.block_on(engine.jobs(&std::sync::Arc::new(Generation::default())));
        builds.push(t.elapsed());
        let batches = batches.unwrap();
        assert_eq!(
            batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            n - ids.len()
        );
        bytes = batches.iter().map(|b| b.get_array_memory_size()).sum();
    }
    let file_size: u64 = std::fs::read_dir(
        index_dir
            .path()
            .join("columnar")
            .join(bjh_sql::jobs_file::JOBS_DIR),
    )
    .unwrap()
    .map(|e| e.unwrap().metadata().unwrap().len())
    .sum();
    println!(
        "\n`SELECT count(*) FROM jobs WHERE status = 'Failed'` over {n} jobs, medians of {} by \
         turns; the completed jobs' rows as a file the worker reads / sent over the pipe: \
         unchanged {} / {} ({:.1}x); after a change (one job forgotten, the rows built again) \
         {} / {} ({:.2}x). Building the rows from the index: {}; they hold {:.0} MB in memory, \
         {:.0} MB as the file",
        ids.len(),
        corpus::ms(median(kept.clone())),
        corpus::ms(median(kept_piped.clone())),
        ratio(median(kept_piped), median(kept)),
        corpus::ms(median(changed.clone())),
        corpus::ms(median(changed_piped.clone())),
        ratio(median(changed_piped), median(changed)),
        corpus::ms(median(builds)),
        bytes as f64 / 1e6,
        file_size as f64 / 1e6,
    );

    // One row end to end: in a worker, and in this process as before.
    let empty = tempfile::tempdir().unwrap();
    let empty_store = std::sync::Arc::new(bjh_store::LogStore::new(
        empty.path(),
        std::sync::Arc::new(bjh_metrics::HistoryMetrics::unregistered()),
    ));
    let small = bjh_sql::SqlEngine::new(
        std::sync::Arc::new(bjh_serving::source::OthersOf::new(std::sync::Arc::new(
            bjh_serving::source::DiskSource::new(empty_store.clone()),
        ))),
        empty_store,
        empty.path().join("columnar"),
        SqlLimits::default(),
        env!("CARGO_BIN_EXE_ballista-scheduler").into(),
        None,
    );
    let mut in_worker = Vec::new();
    let mut in_process = Vec::new();
    for round in 0..=50 {
        let t = Instant::now();
        let answer = runtime.block_on(small.query_rows("SELECT 1", 10)).unwrap();
        let worker = t.elapsed();
        assert_eq!(
            answer.batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            1
        );
        let t = Instant::now();
        let rows = runtime
            .block_on(answer_in_process(
                empty.path().to_path_buf(),
                Default::default(),
                None,
                "SELECT 1",
                SqlLimits::default().memory,
            ))
            .unwrap();
        let here = t.elapsed();
        assert_eq!(rows, 1);
        if round > 0 {
            in_worker.push(worker);
            in_process.push(here);
        }
    }
    let quantile = |mut v: Vec<Duration>, q: f64| {
        v.sort();
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    println!(
        "\n`SELECT 1` end to end, 50 rounds by turns: in its worker process p50 {} (p90 {}), \
         in this process p50 {} (p90 {}); the worker adds {} at p50",
        corpus::ms(quantile(in_worker.clone(), 0.5)),
        corpus::ms(quantile(in_worker.clone(), 0.9)),
        corpus::ms(quantile(in_process.clone(), 0.5)),
        corpus::ms(quantile(in_process.clone(), 0.9)),
        corpus::ms(quantile(in_worker, 0.5).saturating_sub(quantile(in_process, 0.5))),
    );

    // The columnar rows of one job beside writing its log.
    let mut rng = corpus::Rng::new(9);
    let r = records(0, &mut rng);
    let t = Instant::now();
    for _ in 0..5 {
        std::hint::black_box(job_rows("j", &r, &BTreeMap::new(), &BTreeMap::new(), &[]));
    }
    let build = t.elapsed() / 5;
    println!(
        "\nColumnar rows of one 50,000-task job from its records: {} (off the writer's \
         thread; see the writer bench for the log's own cost)",
        corpus::ms(build)
    );
}
