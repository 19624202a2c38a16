//! Scale: a restart over a persistent index of 1,000,000 jobs, pages of
//! that list, and memory per indexed job (ours against upstream's
//! `HistoryStore`). Prints tables; latencies are percentiles over many
//! requests, memory is resident-set growth measured in a child process
//! per case.
//!
//! `cargo bench --bench scale` runs everything; `SCALE_JOBS` changes the
//! 1,000,000; `SCALE_RSS_JOBS` the 100,000 of the memory cases.
//! `SCALE_ONLY=memory` runs the memory cases alone, `SCALE_ONLY=moves` a
//! move to segments alone, `SCALE_ONLY=walks` the walks over every job
//! (of 20 runs a query) alone, `SCALE_ONLY=columnar` the columnar
//! history's index of the jobs it holds, read beside the store, alone;
//! `SCALE_RSS_DIR` keeps the memory cases' logs
//! in a directory (written when it is empty, reused after).

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use bjh_metrics::HistoryMetrics;
use bjh_store::query::{Facts, FactsRef, JobFacts, ListQuery};
use bjh_store::{JobSummary, LogStore, SummaryParts};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The binary, restarted over a directory of `n` (empty) logs and its
/// persistent index: time from spawning the process to the first answer
/// of `/api/jobs?limit=100` that lists all `n` jobs.
fn process_restart(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let stamp = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    let jobs = corpus::summaries(n);
    for job in &jobs {
        let file = std::fs::File::create(dir.path().join(&*job.file_name())).unwrap();
        file.set_modified(stamp).unwrap();
    }
    let index: Vec<JobSummary> = jobs
        .iter()
        .map(|j| {
            JobSummary::restore(SummaryParts {
                facts: FactsRef {
                    job_id: j.job_id(),
                    job_name: j.job_name(),
                    state: j.state(),
                    queued_time: j.queued_time(),
                    start_time: j.start_time(),
                    end_time: j.end_time(),
                    query_hash: j.query_hash(),
                },
                job_status: j.job_status(),
                status: j.status(),
                stages: [j.num_stages, j.completed_stages],
                percent_complete: j.percent_complete,
                dropped_records: j.dropped_records,
                file_name: &j.file_name(),
                len: 0,
                modified: Some(stamp),
                ranges: None,
                scheduler_id: j.scheduler_id(),
                usage: j.usage(),
                tags: j.tags(),
            })
        })
        .collect();
    drop(jobs);
    std::fs::write(
        dir.path().join(bjh_store::snapshot::DEFAULT_FILE_NAME),
        bjh_store::snapshot::encode(index.iter()),
    )
    .unwrap();
    drop(index);
    let mut samples = Vec::new();
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let started = Instant::now();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
            .args(["--history-only", "--bind-host", "127.0.0.1", "--bind-port"])
            .arg(port.to_string())
            .arg("--event-log-dir")
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap();
        let want = format!("x-total-count: {n}\r\n");
        loop {
            if let Some(answer) = corpus::get(port, "/api/jobs?limit=100")
                && answer.to_ascii_lowercase().contains(&want)
            {
                samples.push(started.elapsed());
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "never listed");
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    corpus::row(
        &format!(
            "restart of the binary over {n} logs: process start to the first full \
             `/api/jobs?limit=100`"
        ),
        samples,
    );
}

/// `GET /api/metrics` over `n` jobs: what the endpoint does (gather
/// Prometheus' default registry, the job-level series included, and encode
/// it as text), once the background grouping of the recurring queries is
/// done; beside it, that grouping (what a scrape would cost if it grouped
/// the queries itself, as `/api/queries` does).
fn metrics_scrape(store: Arc<LogStore>, n: usize) {
    use bjh_analysis::queries::{most_runs, recurring_top};
    use prometheus::Encoder as _;
    let gauges = bjh_serving::job_metrics::gauges(store.clone(), 20);
    let scrape = || {
        let mut families = prometheus::gather();
        families.extend(gauges.families());
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&families, &mut text)
            .unwrap();
        String::from_utf8(text).unwrap()
    };
    let started = Instant::now();
    scrape();
    while !scrape().contains("ballista_job_history_query_runs{") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never grouped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let grouped = started.elapsed();
    let samples: Vec<Duration> = (0..200)
        .map(|_| {
            let started = Instant::now();
            let text = scrape();
            assert!(text.contains(
                "ballista_job_history_jobs{scheduler_id=\"scheduler-a\",status=\"completed\"}"
            ));
            started.elapsed()
        })
        .collect();
    corpus::row(
        &format!("`/api/metrics`: gather and encode, job-level series included ({n} jobs)"),
        samples,
    );
    let samples: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let (_, rows) = store
                .with_completed_by_query(1..=u64::MAX, |jobs| recurring_top(jobs, 20, most_runs));
            assert!(!rows.is_empty());
            started.elapsed()
        })
        .collect();
    corpus::row(
        &format!(
            "of which never on a scrape: grouping the recurring queries (background; first one took {})",
            corpus::ms(grouped)
        ),
        samples,
    );
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The heap's bytes, counted by the allocator: what a walk holds at its
/// peak, which resident memory cannot tell in a process whose freed
/// memory the allocator reuses (`peakmem-alloc`: two atomics an
/// allocation, the same for every row of a run).
#[global_allocator]
static HEAP: &peakmem_alloc::PeakMemAlloc<std::alloc::System> = &peakmem_alloc::INSTRUMENTED_SYSTEM;

/// Runs `walk` three times, printing its time and the most heap it held
/// at once beyond what was allocated before it.
fn walks(what: &str, walk: &dyn Fn()) {
    use peakmem_alloc::PeakMemAllocTrait;
    let mut added = 0;
    let samples: Vec<Duration> = (0..3)
        .map(|_| {
            HEAP.reset_peak_memory();
            let started = Instant::now();
            walk();
            let took = started.elapsed();
            added = added.max(HEAP.get_peak_memory());
            took
        })
        .collect();
    corpus::row(
        &format!(
            "{what} (its heap's peak: {:.1} MiB)",
            added as f64 / (1024.0 * 1024.0)
        ),
        samples,
    );
}

/// The walks over every job (the SQL `jobs` file's, the recurring
/// queries', the what-if pairs'): counted, and grouped as the product
/// groups them, beside the grouping before the walk by query (every
/// query's state in a map, as a walk newest first meets its runs).
fn walks_over(store: &LogStore, n: usize) {
    use bjh_analysis::accuracy::newest_pairs;
    use bjh_analysis::queries::{most_recent, recurring_top};
    walks("a walk over every job, newest first, counted", &|| {
        assert_eq!(store.with_completed(|jobs| jobs.count()), n);
    });
    let all = 1..=u64::MAX;
    walks("a walk over every job, by query, counted", &|| {
        assert_eq!(
            store.with_completed_by_query(all.clone(), |jobs| jobs.count()),
            n
        );
    });
    walks(
        "the recurring queries over the walk by query, 100 kept",
        &|| {
            let (total, rows) = store
                .with_completed_by_query(all.clone(), |jobs| recurring_top(jobs, 100, most_recent));
            assert!(total > 0 && !rows.is_empty());
        },
    );
    walks(
        "before: every query in a map over the walk newest first",
        &|| {
            assert!(store.with_completed(every_query_in_a_map) > 0);
        },
    );
    walks(
        "the newest 50 pairs of runs over the walk by query",
        &|| {
            let pairs = store.with_completed_by_query(all.clone(), |jobs| newest_pairs(jobs, 50));
            assert_eq!(pairs.len(), 50);
        },
    );
    walks(
        "before: every completed run's (hash, start, id), sorted",
        &|| {
            let mut runs: Vec<(u64, u64, String)> = store.with_completed(|jobs| {
                jobs.filter(|j| j.state() == bjh_format::JobState::Completed)
                    .map(|j| (j.query_hash(), j.start_time(), j.job_id().to_string()))
                    .collect()
            });
            runs.sort_unstable();
            assert!(runs.len() > n / 2);
        },
    );
}

/// The recurring queries' grouping before the walk by query, for the
/// comparison (less than it held: no name, status or scheduler a run):
/// each query's count, a duration a run and its last ten runs' ids, in a
/// map. Returns the number of queries.
fn every_query_in_a_map(jobs: &mut dyn Iterator<Item = Arc<JobSummary>>) -> usize {
    type Group = (usize, Vec<u64>, Vec<(u64, String)>);
    let mut groups: std::collections::HashMap<u64, Group> = Default::default();
    for j in jobs.filter(|j| j.query_hash() != 0 && !j.state().is_unfinished()) {
        let g = groups.entry(j.query_hash()).or_default();
        g.0 += 1;
        g.1.push(j.duration().unwrap_or(0));
        g.2.push((j.start_time(), j.job_id().to_string()));
        if g.2.len() > 10 {
            let oldest = (0..g.2.len()).min_by_key(|&i| &g.2[i]).unwrap();
            g.2.swap_remove(oldest);
        }
    }
    groups.len()
}

/// `SCALE_ONLY=walks`: the walks over `n` jobs of `n / 20` queries (20
/// runs each, as a fleet's many scheduled queries), held by the catalog
/// and moved to segments (`--history-memory-jobs 0`).
fn walks_alone(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let queries = (n / 20).max(1);
    let jobs = corpus::summaries_hashed(0, n, |i| 1 + (i % queries) as u64);
    std::fs::write(&index, bjh_store::snapshot::encode(jobs.iter())).unwrap();
    drop(jobs);
    let open = |memory: Option<usize>| {
        LogStore::new(
            dir.path().join("empty"),
            Arc::new(HistoryMetrics::unregistered()),
        )
        .with_index_file(Some(index.clone()))
        .with_memory_jobs(memory, Some(&index))
    };
    println!("\n## Walks over {n} jobs of {queries} queries\n");
    println!("| walk | p50 | p99 | max | runs |");
    println!("| --- | --- | --- | --- | --- |");
    println!("| **the catalog in memory** | | | | |");
    let catalog = open(None);
    assert_eq!(catalog.load_persisted(), n);
    walks_over(&catalog, n);
    drop(catalog);
    println!("| **the store, `--history-memory-jobs 0`** | | | | |");
    let store = open(Some(0));
    assert_eq!(store.load_persisted(), n);
    assert_eq!(store.spill().unwrap(), n);
    walks_over(&store, n);
}

/// `SCALE_ONLY=columnar`: what the columnar history knows of `n` jobs (the
/// store's, on disk): its index read beside the store's walk by id (a
/// refresh with nothing new; the SQL `jobs` table's totals), and, for the
/// comparison, the maps it held before the index, built over the same
/// jobs (each job's id and totals in the manifest, and again in the
/// generation; a refresh's set of every completed id).
fn columnar_alone(n: usize) {
    use peakmem_alloc::PeakMemAllocTrait;
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let jobs = corpus::summaries_hashed(0, n, |i| 1 + (i % 1000) as u64);
    std::fs::write(&index, bjh_store::snapshot::encode(jobs.iter())).unwrap();
    drop(jobs);
    let store = LogStore::new(
        dir.path().join("empty"),
        Arc::new(HistoryMetrics::unregistered()),
    )
    .with_index_file(Some(index.clone()))
    .with_memory_jobs(Some(0), Some(&index));
    assert_eq!(store.load_persisted(), n);
    assert_eq!(store.spill().unwrap(), n);
    let held = dir.path().join("held.parquet");
    assert_eq!(bjh_columnar::bench::write_index(&store, &held).unwrap(), n);
    let size = std::fs::metadata(&held).unwrap().len();
    println!(
        "\n## The columnar history's jobs, {n} of them (the index: {:.1} MB)\n",
        size as f64 / 1e6
    );
    println!("| read | p50 | p99 | max | runs |");
    println!("| --- | --- | --- | --- | --- |");
    walks(
        "a refresh, nothing new: the store by id beside the index",
        &|| {
            assert_eq!(bjh_columnar::bench::round(&store, &held).unwrap(), (0, 0));
        },
    );
    // `k` jobs the journal names, spread over the ids.
    let spread = |k: usize| -> Vec<String> {
        store.with_completed_by_id(|jobs| {
            jobs.step_by(n / k)
                .take(k)
                .map(|j| j.job_id().to_string())
                .collect()
        })
    };
    for k in [10, 1_000] {
        let changed = spread(k);
        walks(
            &format!(
                "a refresh from the journal: {k} jobs changed, beside the index's rows near them"
            ),
            &|| {
                let got = bjh_columnar::bench::round_changed(&store, &held, &changed).unwrap();
                assert_eq!(got, (0, 0));
            },
        );
    }
    walks("the `jobs` table's totals: by id beside the index", &|| {
        assert_eq!(bjh_columnar::bench::totals_by_id(&store, &held), n);
    });
    // The SQL `jobs` table's file: built whole (a base: its rows with the
    // totals beside them, written), and after `k` changes, the file of
    // those jobs beside the base.
    let generation = bjh_columnar::bench::generation(&held);
    let root = dir.path().join("columnar");
    std::fs::create_dir(&root).unwrap();
    walks("the SQL `jobs` table built whole (its base file)", &|| {
        let rows = bjh_sql::jobs_file::bench::jobs_whole(&store, &generation, &root);
        assert_eq!(rows, n as u64);
    });
    use bjh_sql::jobs_file::bench::{jobs_changed, jobs_changed_again};
    for k in [10, 1_000, 16_384] {
        let changed = spread(k);
        walks(
            &format!("the SQL `jobs` table after {k} jobs changed: their file beside the base"),
            &|| {
                assert_eq!(
                    jobs_changed(&store, &generation, &root, &changed).0,
                    k as u64
                )
            },
        );
    }
    // 10 more changed after 16,384: the last file's rows kept, theirs built.
    let changed = spread(16_384);
    let (_, last) = jobs_changed(&store, &generation, &root, &changed);
    let again: Vec<String> = changed
        .iter()
        .step_by(16_384 / 10)
        .take(10)
        .cloned()
        .collect();
    walks(
        "the SQL `jobs` table after 16,384 changed, then 10 more: the last file's rows and theirs",
        &|| {
            let (built, held) = jobs_changed_again(&store, &generation, &root, &last, &again);
            assert_eq!((built, held), (10, 16_384));
        },
    );
    // Before: every job's id and totals in the manifest's map and the
    // generation's (held for as long as the process ran), and a refresh's
    // set of every completed id.
    type Totals = (i64, i64, i64, Option<String>, Option<[u64; 2]>);
    HEAP.reset_peak_memory();
    let base = HEAP.get_peak_memory();
    let manifest: std::collections::BTreeMap<String, Totals> = store.with_completed(|jobs| {
        jobs.map(|j| (j.job_id().to_string(), (1, 0, 0, None, None)))
            .collect()
    });
    let generation: std::collections::HashMap<String, bjh_columnar::tables::JobTotals> = manifest
        .keys()
        .map(|id| (id.clone(), bjh_columnar::tables::JobTotals::default()))
        .collect();
    let resident = HEAP.get_peak_memory() - base;
    walks("before: a refresh's set of every completed id", &|| {
        let completed: HashSet<String> =
            store.with_completed(|jobs| jobs.map(|j| j.job_id().to_string()).collect());
        assert_eq!(completed.len(), manifest.len());
    });
    println!(
        "\nBefore, held while the process ran: {:.1} MiB ({:.0} bytes a job); now: none a job \
         (the manifest names segments only).",
        resident as f64 / (1024.0 * 1024.0),
        resident as f64 / n as f64
    );
    std::hint::black_box((&manifest, &generation));
}

/// Child mode: index `dir` with `which` and print the RSS growth in KiB.
fn rss_child(which: &str, dir: &str) {
    let before = rss_kib();
    match which {
        "ours" => {
            let store = LogStore::new(dir, Arc::new(HistoryMetrics::unregistered()));
            store.rescan();
            let after = rss_kib();
            println!("{} {}", after - before, store.len());
            std::hint::black_box(&store);
        }
        _ => {
            let store =
                ballista_scheduler::history::HistoryStore::load(std::path::Path::new(dir)).unwrap();
            let after = rss_kib();
            println!("{} {}", after - before, store.len());
            std::hint::black_box(&store);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--rss-child") {
        rss_child(&args[i + 1], &args[i + 2]);
        return;
    }
    match std::env::var("SCALE_ONLY").as_deref() {
        Ok("moves") => return moves(env_usize("SCALE_JOBS", 1_000_000)),
        Ok("walks") => return walks_alone(env_usize("SCALE_JOBS", 1_000_000)),
        Ok("columnar") => return columnar_alone(env_usize("SCALE_JOBS", 1_000_000)),
        Ok("memory") => {}
        _ => lists_and_restarts(),
    }
    memory();
}

/// A move of a hundredth more jobs to segments holding `n`: written as a
/// run of its own (what a move does when no run on disk is as small),
/// against every segment rewritten with them (what every move did
/// before the runs). `SCALE_ONLY=moves` runs this alone.
fn moves(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_segments(dir.path(), &corpus::summaries(n));
    let extra: Vec<Arc<JobSummary>> = corpus::summaries_from(n, n / 100)
        .into_iter()
        .map(Arc::new)
        .collect();
    let layered =
        bjh_store::ondisk::Layered::new(bjh_store::ondisk::Segments::open(&paths).unwrap());
    println!("\n## A move of {} jobs onto {n} on disk\n", extra.len());
    println!("| what | time | files written | ratio |");
    println!("| --- | --- | --- | --- |");
    let started = Instant::now();
    let (tiered, written) = layered
        .rewrite_some(&extra, &[], dir.path(), "run", 1 << 20, &|| false)
        .unwrap();
    let run = started.elapsed();
    assert_eq!(tiered.len(), n + extra.len());
    let files = written.len();
    drop(tiered);
    let started = Instant::now();
    let (whole, rewritten) = layered
        .rewrite_with(&extra, dir.path(), "whole", 1 << 20)
        .unwrap();
    let all = started.elapsed();
    assert_eq!(whole.len(), n + extra.len());
    println!(
        "| written as a run of its own (the move) | {} | {files} | 1 |",
        corpus::ms(run)
    );
    println!(
        "| every segment rewritten with them (before) | {} | {} | {:.0} |",
        corpus::ms(all),
        rewritten.len(),
        all.as_secs_f64() / run.as_secs_f64()
    );
}

/// A million jobs: restarts, pages, the metrics scrape, the process.
fn lists_and_restarts() {
    let n = env_usize("SCALE_JOBS", 1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let jobs = corpus::summaries(n);
    std::fs::write(&index, bjh_store::snapshot::encode(jobs.iter())).unwrap();
    let segment_paths = write_segments(dir.path(), &jobs);
    // A rescan's listing of the logs: every job's, as a directory lists
    // them (in no order).
    let mut listing: Vec<(String, bjh_store::Stamp)> = jobs
        .iter()
        .map(|j| (j.file_name().into_owned(), j.stamp()))
        .collect();
    let mut rng = corpus::Rng::new(3);
    for i in (1..listing.len()).rev() {
        listing.swap(i, rng.below(i as u64 + 1) as usize);
    }
    drop(jobs);
    let index_bytes = std::fs::metadata(&index).unwrap().len();

    println!("## {n} jobs (persistent index of {index_bytes} bytes)\n");
    println!("| what | p50 | p99 | max | runs |");
    println!("| --- | --- | --- | --- | --- |");
    // Restart: load the index, answer the first page.
    let (mut restarts, mut ordered) = (Vec::new(), Vec::new());
    let mut store = None;
    let mut grown = None;
    for _ in 0..5 {
        let before = rss_kib();
        let started = Instant::now();
        let s = LogStore::new(
            dir.path().join("empty"),
            Arc::new(HistoryMetrics::unregistered()),
        )
        .with_index_file(Some(index.clone()));
        assert_eq!(s.load_persisted(), n);
        let q = ListQuery {
            limit: Some(100),
            ..ListQuery::default()
        };
        assert_eq!(s.page(&q, None, &HashSet::new()).rows.len(), 100);
        restarts.push(started.elapsed());
        // The orders by duration and by query are built afterwards, on a
        // thread of their own: waited for outside the restart's time, so
        // that they do not share the cores with the next restart.
        while !s.second_orders_built() {
            std::thread::yield_now();
        }
        ordered.push(started.elapsed());
        grown.get_or_insert(rss_kib().saturating_sub(before));
        store = Some(s);
    }
    corpus::row(
        "restart: load the index and answer `/api/jobs?limit=100`",
        restarts,
    );
    corpus::row(
        "the same restart until its orders by duration and by query are built (in the background)",
        ordered,
    );
    let grown = grown.unwrap_or(0);
    println!(
        "| resident memory the first load added: {:.0} MiB, {} bytes a job | | | | 1 |",
        grown as f64 / 1024.0,
        grown * 1024 / n as u64
    );
    // Where a restart's time goes.
    let phases: [(&str, &dyn Fn()); 2] = [
        ("of which: reading the index file", &|| {
            std::hint::black_box(std::fs::read(&index).unwrap());
        }),
        ("of which: reading and decoding it", &|| {
            let jobs = bjh_store::snapshot::load(&index).unwrap();
            assert_eq!(jobs.len(), n);
        }),
    ];
    for (what, phase) in phases {
        let samples = (0..5)
            .map(|_| {
                let started = Instant::now();
                phase();
                started.elapsed()
            })
            .collect();
        corpus::row(what, samples);
    }
    let store = store.unwrap();
    // Parsed as the route parses them.
    let parse = |q: &str| {
        let params = bjh_serving::params::Params::<bjh_serving::jobs_params::JobsParams>::parse(q);
        params.unwrap().value.query(0).unwrap()
    };
    let deep = store.facts(&format!("0{:012X}", n / 2)).unwrap();
    // A run of the corpus's recurring query (every 977th job) half-way down.
    let recurring = store
        .facts(&format!("0{:012X}", n / 2 / 977 * 977))
        .unwrap();
    // An hour of the corpus's jobs (one every 500 ms) half-way down.
    let middle = 1_700_000_000_000 + (n as u64 / 2) * 500;
    let hour = ListQuery {
        limit: Some(100),
        started_after: Some(middle),
        started_before: Some(middle + 3_600_000),
        ..ListQuery::default()
    };
    let failed_in_a_day = ListQuery {
        limit: Some(1),
        started_after: Some(middle),
        started_before: Some(middle + 86_400_000),
        ..parse("status=failed")
    };
    let cases: [Case<'_>; 12] = [
        (
            "page of 100, newest first",
            parse("limit=100"),
            None,
            1000,
            100,
        ),
        (
            "page of 100 after a cursor half-way down",
            parse("limit=100"),
            Some(&deep),
            1000,
            100,
        ),
        (
            "page of 100, `status=failed` (one pass)",
            parse("limit=100&status=failed"),
            None,
            20,
            100,
        ),
        (
            "page of 100, `sort=duration` (its order, walked)",
            parse("limit=100&sort=duration"),
            None,
            1000,
            100,
        ),
        (
            "page of 100, `sort=duration` after a cursor half-way down (its order, walked)",
            parse("limit=100&sort=duration"),
            Some(&deep),
            1000,
            100,
        ),
        (
            "page of 100, `sort=duration` by one pass, as before its order (`min_duration_ms=0`)",
            parse("limit=100&sort=duration&min_duration_ms=0"),
            None,
            20,
            100,
        ),
        (
            "page of 100, one query's runs (`query_hash`, one job in 977; its order, walked)",
            parse("limit=100&query_hash=0000000000000002"),
            None,
            1000,
            100,
        ),
        (
            "the run of a job's query before it (`query_hash`, `limit=1` after the job: the job page's lookup)",
            parse("limit=1&query_hash=0000000000000002"),
            Some(&recurring),
            1000,
            1,
        ),
        (
            "the same by one pass, as before its order (`min_duration_ms=0`)",
            parse("limit=1&query_hash=0000000000000002&min_duration_ms=0"),
            Some(&recurring),
            20,
            1,
        ),
        (
            "page of 100, an hour's time range (the part of the order it bounds)",
            hour,
            None,
            20,
            100,
        ),
        (
            "a filtered count: failed jobs in a day (the part of the order it bounds)",
            failed_in_a_day,
            None,
            20,
            1,
        ),
        (
            "page of 100, a name search (`name=report 976`, one job in 977: a pass over every job)",
            parse("limit=100&name=report%20976"),
            None,
            5,
            100,
        ),
    ];
    for (what, q, cursor, runs, rows) in cases.iter().cloned() {
        let samples: Vec<Duration> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                let page = store.page(&q, cursor, &HashSet::new());
                assert_eq!(page.rows.len(), rows.min(page.total), "{what}");
                assert!(page.total >= rows, "{what}: {}", page.total);
                started.elapsed()
            })
            .collect();
        corpus::row(what, samples);
    }
    walks_over(&store, n);
    on_disk(&segment_paths, n, &cases);
    sort_out_listing(&segment_paths, &store, listing);
    metrics_scrape(Arc::new(store), n);
    spilled_store(&index, n, &cases);
    process_restart(env_usize("SCALE_PROCESS_JOBS", n));
}

/// The jobs written as on-disk segments of at most 1,048,576 jobs each,
/// cut from the default order (as a recording scheduler publishes them,
/// newest last).
fn write_segments(dir: &std::path::Path, jobs: &[JobSummary]) -> Vec<std::path::PathBuf> {
    let mut order: Vec<&JobSummary> = jobs.iter().collect();
    order.sort_unstable_by_key(|j| std::cmp::Reverse(j.position_key()));
    order
        .chunks(1 << 20)
        .enumerate()
        .map(|(i, chunk)| {
            let path = dir.join(format!("segment-{i}"));
            bjh_store::ondisk::Segment::write(&path, chunk).unwrap();
            path
        })
        .collect()
}

type Case<'a> = (&'a str, ListQuery, Option<&'a Facts>, usize, usize);

/// A source asked for a page: its rows and total.
type Ask<'a> = dyn Fn(&ListQuery, Option<&Facts>) -> (usize, usize) + 'a;

/// The same jobs and the same pages, answered from on-disk segments: the
/// restart (open them, answer the first page), the memory they keep, and
/// every page row.
fn on_disk(paths: &[std::path::PathBuf], n: usize, cases: &[Case<'_>]) {
    use bjh_store::ondisk::Segments;
    let bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    println!(
        "\n## The same {n} jobs in {} on-disk segments ({bytes} bytes)\n",
        paths.len()
    );
    println!("| what | p50 | p99 | max | runs |");
    println!("| --- | --- | --- | --- | --- |");
    let first_page = ListQuery {
        limit: Some(100),
        ..ListQuery::default()
    };
    let (mut restarts, mut set, mut grown) = (Vec::new(), None, 0);
    for _ in 0..5 {
        drop(set.take());
        let before = rss_kib();
        let started = Instant::now();
        let s = Segments::open(paths).unwrap();
        let (page, total) = s.page(&first_page, None).unwrap();
        assert_eq!((page.len(), total), (100, n));
        restarts.push(started.elapsed());
        grown = rss_kib().saturating_sub(before);
        set = Some(s);
    }
    let set = set.unwrap();
    corpus::row(
        "restart: open the segments and answer `/api/jobs?limit=100`",
        restarts,
    );
    let before = rss_kib();
    every_row(cases, &|q, cursor| {
        let (page, total) = set.page(q, cursor).unwrap();
        (page.len(), total)
    });
    let after_pages = rss_kib().saturating_sub(before);
    let held = set.resident_bytes();
    println!(
        "| resident memory: the segments' headers {held} bytes ({:.3} bytes a job); the process grew {grown} KiB opening them, {after_pages} KiB more answering every row above | | | | 1 |",
        held as f64 / n as f64
    );
    println!(
        "| at 100,000,000 jobs (extrapolated, linear in the headers): {:.1} MiB of headers | | | | |",
        held as f64 / n as f64 * 1e8 / (1024.0 * 1024.0)
    );
    head_of_changes(set, n);
}

/// Segments under a head of 10,000 changes (jobs replaced, a tenth of
/// them then removed): what a change costs, and the first page and a
/// count with them.
fn head_of_changes(set: bjh_store::ondisk::Segments, n: usize) {
    let mut layered = bjh_store::ondisk::Layered::new(set);
    let changes = 10_000.min(n / 2);
    let jobs: Vec<JobSummary> = (0..changes)
        .map(|i| {
            let id = format!("0{:012X}", i * (n / changes));
            let job = layered.get(&id).unwrap().unwrap();
            JobSummary::clone(&job)
        })
        .collect();
    let mut inserts = Vec::with_capacity(changes);
    for job in jobs {
        let started = Instant::now();
        layered.insert(job).unwrap();
        inserts.push(started.elapsed());
    }
    for i in (0..changes).step_by(10) {
        assert!(
            layered
                .remove(&format!("0{:012X}", i * (n / changes)))
                .unwrap()
        );
    }
    assert_eq!(layered.len(), n - changes / 10);
    corpus::row(
        &format!(
            "a change into the head over the segments (replacing a written job: it is looked up and hidden), {changes} of them"
        ),
        inserts,
    );
    let first_page = ListQuery {
        limit: Some(100),
        ..ListQuery::default()
    };
    let failed = ListQuery {
        limit: Some(100),
        states: Some(vec![bjh_format::JobState::Failed]),
        ..ListQuery::default()
    };
    for (what, q) in [
        ("page of 100, newest first, with the head", first_page),
        ("page of 100, `status=failed`, with the head", failed),
    ] {
        let samples: Vec<Duration> = (0..100)
            .map(|_| {
                let started = Instant::now();
                let (page, _) = layered.page(&q, None).unwrap();
                assert_eq!(page.len(), 100);
                started.elapsed()
            })
            .collect();
        corpus::row(what, samples);
    }
}

/// Every page row of `cases` asked of a source (`ask` gives a page's rows
/// and total), timed and printed. The catalog's rows of its old pass
/// (`min_duration_ms=0`) are its own comparison; here they are passes
/// like any other query's. More runs of the fast rows than the
/// catalog's (their p99 is the target); the passes keep theirs.
fn every_row(cases: &[Case<'_>], ask: &Ask<'_>) {
    let walked = cases
        .iter()
        .filter(|c| !c.0.contains("as before its order"));
    for (what, q, cursor, runs, rows) in walked.cloned() {
        let runs = if runs >= 20 { runs.max(100) } else { runs };
        let samples: Vec<Duration> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                let (page, total) = ask(&q, cursor);
                assert_eq!(page, rows.min(total), "{what}");
                assert!(total >= rows, "{what}: {total}");
                started.elapsed()
            })
            .collect();
        corpus::row(what, samples);
    }
}

/// The store itself over the same jobs moved to segments
/// (`--history-memory-jobs 0`): the catalog's index loaded, spilled and
/// saved (the index then holds no job, its manifest names the segments),
/// then restarted as the product restarts (`load_persisted`, the first
/// page) and asked every page row through `LogStore::page`.
fn spilled_store(index: &std::path::Path, n: usize, cases: &[Case<'_>]) {
    let dir = index.parent().unwrap();
    let spilled_index = dir.join("spilled-index");
    std::fs::copy(index, &spilled_index).unwrap();
    let open = || {
        LogStore::new(dir.join("empty"), Arc::new(HistoryMetrics::unregistered()))
            .with_index_file(Some(spilled_index.clone()))
            .with_memory_jobs(Some(0), Some(&spilled_index))
    };
    let started = Instant::now();
    let s = open();
    assert_eq!(s.load_persisted(), n);
    assert_eq!(s.spill().unwrap(), n);
    s.persist(true);
    let spill_took = started.elapsed();
    drop(s);
    println!(
        "\n## The store over the same {n} jobs moved to segments (`--history-memory-jobs 0`)\n"
    );
    println!("| what | p50 | p99 | max | runs |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| the spill itself: load the index, move every job to segments, save | {} | | | 1 |",
        corpus::ms(spill_took)
    );
    let first_page = ListQuery {
        limit: Some(100),
        ..ListQuery::default()
    };
    let (mut restarts, mut store, mut grown) = (Vec::new(), None, 0);
    for _ in 0..5 {
        drop(store.take());
        let before = rss_kib();
        let started = Instant::now();
        let s = open();
        assert_eq!(s.load_persisted(), n);
        assert_eq!(s.page(&first_page, None, &HashSet::new()).rows.len(), 100);
        restarts.push(started.elapsed());
        grown = rss_kib().saturating_sub(before);
        store = Some(s);
    }
    let store = store.unwrap();
    corpus::row(
        "restart: load the index and its manifest, answer `/api/jobs?limit=100`",
        restarts,
    );
    walks_over(&store, n);
    let before = rss_kib();
    every_row(cases, &|q, cursor| {
        let page = store.page(q, cursor, &HashSet::new());
        (page.rows.len(), page.total)
    });
    println!(
        "| resident memory: the restart grew the process {grown} KiB ({:.3} bytes a job); answering every row above, {} KiB more | | | | 1 |",
        grown as f64 * 1024.0 / n as f64,
        rss_kib().saturating_sub(before)
    );
}

/// A rescan's verification of a listing of every log: the catalog looks
/// each log up (a hash lookup and a stamp comparison, as its rescan
/// does); the segments sort the listing out in one merge with their
/// listing tables. Then the same with a hundredth of the logs gone and as
/// many new.
fn sort_out_listing(
    paths: &[std::path::PathBuf],
    store: &LogStore,
    mut listing: Vec<(String, bjh_store::Stamp)>,
) {
    use bjh_store::ondisk::{Segments, Standing};
    use bjh_store::published::Covered;
    let n = listing.len();
    let set = Segments::open(paths).unwrap();
    let catalog = |listing: &[(String, bjh_store::Stamp)]| {
        listing
            .iter()
            .filter(|(name, stamp)| {
                let id = name.strip_suffix(".eventlog").unwrap_or(name);
                store.summary(id).is_some_and(|s| s.stamp() == *stamp)
            })
            .count()
    };
    let segments = |listing: &[(String, bjh_store::Stamp)]| {
        let out = set.sort_out(listing, false, &Covered::All).unwrap();
        let unchanged = out.standing.iter().filter(|s| **s == Standing::Unchanged);
        (unchanged.count(), out.gone.len())
    };
    let time = |what: &str, f: &dyn Fn() -> usize| {
        let samples: Vec<Duration> = (0..3)
            .map(|_| {
                let started = Instant::now();
                assert_eq!(f(), n, "{what}");
                started.elapsed()
            })
            .collect();
        corpus::row(what, samples);
    };
    println!("\n## A rescan's verification of a listing of all {n} logs\n");
    println!("| what | p50 | p99 | max | runs |");
    println!("| --- | --- | --- | --- | --- |");
    time("catalog: a lookup a listed log (in memory)", &|| {
        catalog(&listing)
    });
    time(
        "segments: the listing sorted out in one merge (listed in no order)",
        &|| segments(&listing).0,
    );
    let mut sorted = listing.clone();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    time(
        "segments: the same, listed in name order (as an object store lists)",
        &|| segments(&sorted).0,
    );
    // A hundredth gone and as many new: each counted.
    let gone = n / 100;
    listing.truncate(n - gone);
    listing.extend((0..gone).map(|i| (format!("new-{i}.eventlog"), Default::default())));
    let (unchanged, left) = segments(&listing);
    assert_eq!((unchanged, left), (n - gone, gone));
    assert_eq!(catalog(&listing), n - gone);
}

/// Memory per indexed job, each measured in a fresh process.
fn memory() {
    let rss_jobs = env_usize("SCALE_RSS_JOBS", 100_000);
    let scratch = tempfile::tempdir().unwrap();
    let kept = std::env::var_os("SCALE_RSS_DIR").map(std::path::PathBuf::from);
    let logs = kept.unwrap_or_else(|| scratch.path().to_path_buf());
    std::fs::create_dir_all(&logs).unwrap();
    if std::fs::read_dir(&logs).unwrap().next().is_none() {
        corpus::write_corpus(&logs, rss_jobs, 5, |rng| 8 + rng.below(57) as usize);
    }
    println!("\n## Memory, {rss_jobs} jobs of 8-64 tasks\n");
    println!("| index | RSS growth | per job |");
    println!("| --- | --- | --- |");
    let exe = std::env::current_exe().unwrap();
    for which in ["ours", "upstream"] {
        let out = std::process::Command::new(&exe)
            .args(["--rss-child", which, logs.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text.split_whitespace();
        let kib: u64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let jobs: u64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        assert_eq!(jobs as usize, rss_jobs, "{which}: {text}");
        println!(
            "| {which} | {:.1} MiB | {} bytes |",
            kib as f64 / 1024.0,
            kib * 1024 / jobs
        );
    }
}
