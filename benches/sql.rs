//! SQL over a generated history of 10,000,000 task records (200 jobs of
//! 50,000 tasks on 16 executors), as the columnar history holds them:
//! the aggregate `SELECT executor, count(*), avg(duration_ms) FROM tasks
//! GROUP BY 1` and one job's tasks, ours (DataFusion through the engine's
//! own session) against DuckDB (PyPI `duckdb`) over the same Parquet
//! files in the same run, and against reading the JSON logs per query.
//! Also what building the columnar rows of one job costs beside writing
//! its log.
//!
//! `cargo bench --bench sql`; `SQL_JOBS` changes the 200 jobs. DuckDB is
//! run by `python3` (`pip install duckdb`); without it its rows are left
//! out and say so.

mod corpus;

use ballista_job_history::analysis::records::{JobRecords, Task};
use ballista_job_history::serving::sql::columnar::{Generation, write_file};
use ballista_job_history::serving::sql::tables::{TASKS, job_rows};
use ballista_job_history::serving::sql::{SqlLimits, query_files};
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

/// Writes the same rows with dictionaries for text columns only (the
/// layout compared against, and not kept: both engines read it slower).
fn write_text_dictionaries(path: &Path, batch: &datafusion::arrow::array::RecordBatch) {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::parquet::basic::{Compression, ZstdLevel};
    use datafusion::parquet::file::properties::WriterProperties;
    let mut props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(64 * 1024))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(false);
    for field in TASKS.fields() {
        if field.data_type() == &DataType::Utf8View {
            props = props.set_column_dictionary_enabled(field.name().as_str().into(), true);
        }
    }
    let props = props.build();
    let file = std::fs::File::create(path).unwrap();
    let mut w =
        datafusion::parquet::arrow::ArrowWriter::try_new(file, TASKS.clone(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// Writes the tasks of `jobs` jobs as segments of 20 jobs, as the columnar
/// history writes them, and again in `alt` with text-only dictionaries;
/// gives the files of each.
fn write_history(dir: &Path, alt: &Path, jobs: usize) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut rng = corpus::Rng::new(7);
    let mut files = Vec::new();
    let mut alts = Vec::new();
    for first in (0..jobs).step_by(20) {
        let batches: Vec<_> = (first..(first + 20).min(jobs))
            .map(|j| job_rows(&job_id(j), &records(j, &mut rng), &BTreeMap::new(), &[]).tasks)
            .collect();
        let batch = datafusion::arrow::compute::concat_batches(&TASKS, &batches).unwrap();
        let path = dir.join(format!("seg-{:08}.parquet", first / 20));
        write_file(&path, &TASKS, &batch).unwrap();
        files.push(path);
        let path = alt.join(format!("seg-{:08}.parquet", first / 20));
        write_text_dictionaries(&path, &batch);
        alts.push(path);
    }
    (files, alts)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// DuckDB's median time of `query` over `glob`, run `runs` times in one
/// Python process; `None` when DuckDB is not installed.
fn duckdb(glob: &str, query: &str, runs: usize) -> Option<(Duration, String)> {
    let script = format!(
        "import duckdb, time\n\
         con = duckdb.connect()\n\
         con.execute(\"CREATE VIEW tasks AS SELECT * FROM read_parquet('{glob}')\")\n\
         q = {query:?}\n\
         rows = con.execute(q).fetchall()\n\
         ts = []\n\
         for _ in range({runs}):\n\
         \x20   t = time.perf_counter(); con.execute(q).fetchall(); ts.append(time.perf_counter() - t)\n\
         ts.sort()\n\
         print(ts[len(ts)//2], len(rows))\n"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("duckdb: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut parts = text.split_whitespace();
    let secs: f64 = parts.next()?.parse().ok()?;
    Some((Duration::from_secs_f64(secs), parts.next()?.to_string()))
}

fn main() {
    let jobs = env_usize("SQL_JOBS", 200);
    let dir = tempfile::tempdir().unwrap();
    let alt = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (files, alts) = write_history(dir.path(), alt.path(), jobs);
    let alt_bytes: u64 = alts
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let total = jobs * TASKS_PER_JOB;
    println!(
        "## {total} task records, {jobs} jobs, {} Parquet files of {:.0} MB (written in {:.1} s)\n",
        files.len(),
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    println!(
        "(and again with dictionaries for text columns only: {:.0} MB)\n",
        alt_bytes as f64 / 1e6
    );
    let generation = Generation {
        files: [Vec::new(), files, Vec::new()],
        totals: Default::default(),
    };
    let alt_generation = Generation {
        files: [Vec::new(), alts, Vec::new()],
        totals: Default::default(),
    };
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
    let one = job_id(jobs / 2);
    let cases = [
        (
            "`SELECT executor, count(*), avg(duration_ms) FROM tasks GROUP BY 1`",
            "SELECT executor, count(*), avg(duration_ms) FROM tasks GROUP BY 1".to_string(),
            EXECUTORS,
        ),
        (
            "one job's tasks (`WHERE job_id = ...`)",
            format!("SELECT * FROM tasks WHERE job_id = '{one}'"),
            TASKS_PER_JOB,
        ),
    ];
    println!("| query | files | ours (DataFusion) | DuckDB | ours / DuckDB | runs |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let glob = format!("{}/*.parquet", dir.path().display());
    let alt_glob = format!("{}/*.parquet", alt.path().display());
    let layouts = [
        ("ours", &generation, &glob),
        ("text-only dictionaries", &alt_generation, &alt_glob),
    ];
    for ((what, query, rows), (layout, generation, glob)) in cases
        .iter()
        .flat_map(|c| layouts.iter().map(move |l| (c, l)))
    {
        let runs = 10;
        let mut times = Vec::new();
        for i in 0..=runs {
            let t = Instant::now();
            let answer = runtime
                .block_on(query_files(generation, None, query, limits))
                .unwrap();
            let n: usize = answer.batches.iter().map(|b| b.num_rows()).sum();
            assert_eq!(n, *rows, "{query}");
            if i > 0 {
                times.push(t.elapsed());
            }
        }
        let ours = median(times);
        match duckdb(glob, query, runs) {
            Some((theirs, n)) => {
                assert_eq!(n, rows.to_string(), "duckdb: {query}");
                println!(
                    "| {what} | {layout} | {} | {} | {:.2} | {runs} |",
                    corpus::ms(ours),
                    corpus::ms(theirs),
                    ours.as_secs_f64() / theirs.as_secs_f64()
                );
            }
            None => println!(
                "| {what} | {layout} | {} | (duckdb not installed) | | {runs} |",
                corpus::ms(ours)
            ),
        }
    }

    // Reading the JSON logs per query: the same aggregate over logs of
    // 50,000 tasks, timed over a few logs and scaled to the history.
    let logs = tempfile::tempdir().unwrap();
    let sample = 4;
    corpus::write_corpus(logs.path(), sample, 3, |_| TASKS_PER_JOB);
    let t = Instant::now();
    let mut per_executor: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for j in 0..sample {
        let r = JobRecords::read(logs.path().join(format!("job{j:07}.eventlog"))).unwrap();
        for task in &r.tasks {
            let e = per_executor
                .entry(r.executors[task.executor as usize].clone())
                .or_default();
            e.0 += 1;
            e.1 += task.duration();
        }
    }
    let per_log = t.elapsed() / sample as u32;
    assert_eq!(
        per_executor.values().map(|v| v.0).sum::<u64>() as usize,
        sample * TASKS_PER_JOB
    );
    let scaled = per_log * jobs as u32;
    println!(
        "\nReading the JSON logs for the same aggregate: {} per 50,000-task log, so {:.1} s \
         for the {jobs} jobs ({sample} logs timed, scaled)",
        corpus::ms(per_log),
        scaled.as_secs_f64()
    );

    // `jobs` over a million jobs: built from the summaries for each query.
    let n = env_usize("SQL_INDEX_JOBS", 1_000_000);
    let index_dir = tempfile::tempdir().unwrap();
    let store = corpus::indexed_store(index_dir.path(), n);
    let engine = ballista_job_history::serving::sql::SqlEngine::new(
        std::sync::Arc::new(ballista_job_history::serving::source::DiskSource::new(
            std::sync::Arc::new(store),
        )),
        index_dir.path().join("columnar"),
        limits,
    );
    let failed = (n / 20) as i64;
    let mut times = Vec::new();
    for i in 0..=5 {
        let t = Instant::now();
        let answer = runtime
            .block_on(engine.query("SELECT count(*) AS n FROM jobs WHERE status = 'Failed'"))
            .unwrap();
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
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    println!(
        "
`SELECT count(*) FROM jobs WHERE status = 'Failed'` over {n} jobs (the table built \
         from the index for the query): {} (median of 5)",
        corpus::ms(median(times))
    );

    // The columnar rows of one job beside writing its log.
    let mut rng = corpus::Rng::new(9);
    let r = records(0, &mut rng);
    let t = Instant::now();
    for _ in 0..5 {
        std::hint::black_box(job_rows("j", &r, &BTreeMap::new(), &[]));
    }
    let build = t.elapsed() / 5;
    println!(
        "\nColumnar rows of one 50,000-task job from its records: {} (off the writer's \
         thread; see the writer bench for the log's own cost)",
        corpus::ms(build)
    );
}
