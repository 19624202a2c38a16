//! Indexing a log directory and answering one payload of one job: ours
//! (`LogStore`) against upstream's (`HistoryStore`), on the same corpus.
//! Sizes: a mixed directory of 2,000 jobs (8-64 tasks mostly, some
//! thousands), ten jobs of 50,000 tasks, and one job of 50,000 tasks read
//! route by route.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use ballista_api_types::dto::PlanFormat;
use ballista_scheduler::history::HistoryStore;
use bjh_metrics::HistoryMetrics;
use bjh_recording::writer::{Compression, DEFAULT_ZSTD_LEVEL};
use bjh_serving::source::{DiskSource, JobSource, Resource};
use bjh_store::LogStore;
use criterion::{Criterion, criterion_group, criterion_main};
use std::sync::Arc;

/// The body of `GET path` through a router in process.
async fn body_of(router: &axum::Router, path: &str) -> bytes::Bytes {
    use tower::ServiceExt;
    let request = http::Request::get(path)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
}

/// Both sides' REST routers over one directory, indexed.
fn routers(dir: &std::path::Path) -> (axum::Router, axum::Router) {
    let store = Arc::new(LogStore::new(dir, Arc::new(HistoryMetrics::unregistered())));
    store.rescan();
    let ours =
        bjh_serving::router::job_routes(Arc::new(DiskSource::new(store.clone())), Some(store));
    let upstream =
        ballista_scheduler::history::history_router(Arc::new(HistoryStore::load(dir).unwrap()));
    (ours, upstream)
}

/// A body as JSON when it is JSON (so key order and spacing do not count),
/// else as text.
fn meaning(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into()))
}

/// A group timing the index of `dir` (`jobs` logs) on both sides: our
/// `LogStore::rescan` and upstream's `HistoryStore::load`, each checked
/// to find every job. The caller may add more, then finishes it.
fn index_group<'a>(
    c: &'a mut Criterion,
    name: impl Into<String>,
    dir: &std::path::Path,
    jobs: usize,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let dir = dir.to_path_buf();
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.bench_function("ours: LogStore::rescan", |b| {
        b.iter(|| {
            let store = LogStore::new(&dir, Arc::new(HistoryMetrics::unregistered()));
            assert_eq!(store.rescan().read, jobs);
        })
    });
    group.bench_function("upstream: HistoryStore::load", |b| {
        b.iter(|| {
            let store = HistoryStore::load(&dir).unwrap();
            assert_eq!(store.len(), jobs);
        })
    });
    group
}

fn index(c: &mut Criterion) {
    let mixed = tempfile::tempdir().unwrap();
    corpus::write_corpus(mixed.path(), 2_000, 7, |rng| {
        corpus::mixed_task_count(rng, false)
    });
    let big = tempfile::tempdir().unwrap();
    corpus::write_corpus(big.path(), 10, 3, |_| 50_000);
    for (name, dir, jobs) in [
        ("index 2,000 mixed jobs", mixed.path(), 2_000),
        ("index 10 jobs of 50,000 tasks", big.path(), 10),
    ] {
        let group = index_group(c, name, dir, jobs);
        group.finish();
    }
}

fn read_one(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    corpus::write_corpus(dir.path(), 1, 1, |_| 50_000);
    let store = Arc::new(LogStore::new(
        dir.path(),
        Arc::new(HistoryMetrics::unregistered()),
    ));
    store.rescan();
    let ours = DiskSource::new(store.clone());
    let upstream = HistoryStore::load(dir.path()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let payloads = [
        ("/config", Resource::Config),
        ("/dot", Resource::Dot),
        ("/job", Resource::Job(PlanFormat::Default)),
        ("/stages", Resource::Stages(PlanFormat::Default)),
    ];
    // Both sides answer the same before either is timed: upstream's own
    // history router is the oracle for each route.
    let upstream_router = ballista_scheduler::history::history_router(Arc::new(
        HistoryStore::load(dir.path()).unwrap(),
    ));
    for (route, payload) in payloads {
        let path = match route {
            "/job" => "/api/job/job0000000".to_string(),
            other => format!("/api/job/job0000000{other}"),
        };
        let (mine, theirs) = runtime.block_on(async {
            let mine = ours.get("job0000000", payload).await.unwrap().unwrap().body;
            (mine, body_of(&upstream_router, &path).await)
        });
        assert_eq!(meaning(&mine), meaning(&theirs), "{route}");
    }
    for (route, payload) in payloads {
        let mut group = c.benchmark_group(format!("read {route} of a 50,000-task job"));
        group.sample_size(10);
        group.bench_function("ours: DiskSource::get", |b| {
            b.to_async(&runtime).iter(|| async {
                let reply = ours.get("job0000000", payload).await.unwrap().unwrap();
                assert!(reply.body.len() > 10);
            })
        });
        group.bench_function("upstream: HistoryStore::read_job", |b| {
            b.iter(|| {
                let job = upstream.read_job("job0000000").unwrap();
                assert!(job.config.len() == 60);
            })
        });
        group.finish();
    }
}

fn list(c: &mut Criterion) {
    use tower::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    corpus::write_corpus(dir.path(), 2_000, 7, |rng| {
        corpus::mixed_task_count(rng, false)
    });
    let (ours, upstream) = routers(dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The same jobs with the same entries, before either side is timed
    // (upstream lists in hash-set order, so compare by job id).
    let sorted = |body: bytes::Bytes| {
        let mut jobs: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
        jobs.sort_by(|a, b| a["job_id"].as_str().cmp(&b["job_id"].as_str()));
        jobs
    };
    let (mine, theirs) = runtime.block_on(async {
        (
            body_of(&ours, "/api/jobs").await,
            body_of(&upstream, "/api/jobs").await,
        )
    });
    // Ours adds `scheduler_id`, `query_label` and the slot time to each
    // entry (additive fields: the scheduler that ran the job, the label of
    // its query, none for these plans, the slot time its footer states);
    // every field upstream has is the same.
    let mut mine = sorted(mine);
    for job in &mut mine {
        assert_eq!(job["scheduler_id"], "scheduler");
        assert!(job["query_label"].is_null(), "{job}");
        let job = job.as_object_mut().unwrap();
        job.remove("scheduler_id");
        job.remove("query_label");
        assert!(job["busy_slot_ms"].is_u64(), "{job:?}");
        assert!(job["failed_slot_ms"].is_u64(), "{job:?}");
        job.remove("busy_slot_ms");
        job.remove("failed_slot_ms");
    }
    assert_eq!(mine.len(), 2_000);
    assert_eq!(mine, sorted(theirs));
    let mut group = c.benchmark_group("GET /api/jobs, all 2,000 jobs");
    group.sample_size(20);
    for (name, router) in [("ours", ours), ("upstream", upstream)] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let request = http::Request::get("/api/jobs")
                    .body(axum::body::Body::empty())
                    .unwrap();
                let response = router.clone().oneshot(request).await.unwrap();
                let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .unwrap();
                assert!(body.len() > 100_000);
            })
        });
    }
    group.finish();
}

fn compressed(c: &mut Criterion) {
    let plain = tempfile::tempdir().unwrap();
    let zstd = tempfile::tempdir().unwrap();
    corpus::write_corpus(plain.path(), 1, 1, |_| 50_000);
    corpus::write_corpus_with(
        zstd.path(),
        1,
        1,
        Compression::Zstd(DEFAULT_ZSTD_LEVEL),
        |_| 50_000,
    );
    let stores = [("plain", plain.path()), ("zstd", zstd.path())].map(|(name, dir)| {
        let store = LogStore::new(dir, Arc::new(HistoryMetrics::unregistered()));
        store.rescan();
        (name, store)
    });
    let mut group = c.benchmark_group("read the terminal record of a 50,000-task job");
    group.sample_size(10);
    for (name, store) in &stores {
        group.bench_function(format!("ours: {name}"), |b| {
            b.iter(|| {
                let end = store.read_job_end("job0000000").unwrap().unwrap();
                assert!(end.config.get().len() > 100);
            })
        });
    }
    group.finish();

    let plain = tempfile::tempdir().unwrap();
    let zstd = tempfile::tempdir().unwrap();
    let mixed = |rng: &mut corpus::Rng| corpus::mixed_task_count(rng, false);
    corpus::write_corpus(plain.path(), 500, 7, mixed);
    corpus::write_corpus_with(
        zstd.path(),
        500,
        7,
        Compression::Zstd(DEFAULT_ZSTD_LEVEL),
        mixed,
    );
    let mut group = c.benchmark_group("index 500 mixed jobs, plain vs zstd");
    group.sample_size(10);
    for (name, dir) in [("plain", plain.path()), ("zstd", zstd.path())] {
        group.bench_function(format!("ours: {name}"), |b| {
            b.iter(|| {
                let store = LogStore::new(dir, Arc::new(HistoryMetrics::unregistered()));
                assert_eq!(store.rescan().read, 500);
            })
        });
    }
    group.finish();
}

/// Logs written by upstream's scheduler (no footer, so every read takes the
/// fallback path: the last line, found from the end of the file): the
/// frozen fixtures, each copied `copies` times under new job ids.
fn upstream_written(dir: &std::path::Path, copies: usize) -> Vec<String> {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut ids = Vec::new();
    for (n, entry) in std::fs::read_dir(&fixtures).unwrap().enumerate() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(id) = name.strip_suffix(".eventlog").filter(|id| id.len() == 13) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        for i in 0..copies {
            let new_id = format!("{}{n:02}{i:07}", &id[..4]);
            std::fs::write(
                dir.join(format!("{new_id}.eventlog")),
                text.replace(id, &new_id),
            )
            .unwrap();
            ids.push(new_id);
        }
    }
    ids
}

fn upstream_logs(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let ids = upstream_written(dir.path(), 400);
    let group = index_group(
        c,
        format!("index {} upstream-written logs", ids.len()),
        dir.path(),
        ids.len(),
    );
    group.finish();

    // Each route through each side's router, in process.
    let (ours, upstream) = routers(dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let id = &ids[0];
    for route in ["/config", "/dot", "", "/stages"] {
        let path = format!("/api/job/{id}{route}");
        // Equal answers first: upstream's router is the oracle.
        let (mine, theirs) = runtime
            .block_on(async { (body_of(&ours, &path).await, body_of(&upstream, &path).await) });
        assert_eq!(meaning(&mine), meaning(&theirs), "{path}");
        let mut group = c.benchmark_group(format!(
            "GET /api/job/{{id}}{route} of an upstream-written log"
        ));
        for (name, router) in [("ours", &ours), ("upstream", &upstream)] {
            group.bench_function(name, |b| {
                b.to_async(&runtime)
                    .iter(|| async { body_of(router, &path).await })
            });
        }
        group.finish();
    }
}

/// Removes each log's footer line: the directory then holds logs as
/// upstream's scheduler writes them (no footer, the `JobEnd` line last).
fn strip_footers(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&path).unwrap();
        let body_end = text.trim_end().rfind('\n').unwrap() + 1;
        assert!(text[body_end..].starts_with(r#"{"ev":"Footer""#));
        text.truncate(body_end);
        std::fs::write(&path, text).unwrap();
    }
}

/// Big logs in upstream's format: a mixed directory of 2,000 jobs and ten
/// jobs of 50,000 tasks indexed, and the payloads of a 50,000-task job.
fn upstream_big(c: &mut Criterion) {
    let mixed = tempfile::tempdir().unwrap();
    corpus::write_corpus(mixed.path(), 2_000, 7, |rng| {
        corpus::mixed_task_count(rng, false)
    });
    strip_footers(mixed.path());
    let big = tempfile::tempdir().unwrap();
    corpus::write_corpus(big.path(), 10, 3, |_| 50_000);
    strip_footers(big.path());
    for (name, dir, jobs) in [
        (
            "index 2,000 mixed upstream-written logs",
            mixed.path(),
            2_000,
        ),
        (
            "index 10 upstream-written logs of 50,000 tasks",
            big.path(),
            10,
        ),
    ] {
        let group = index_group(c, name, dir, jobs);
        group.finish();
    }
    let (ours, upstream) = routers(big.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for route in ["/config", "/dot", ""] {
        let path = format!("/api/job/job0000000{route}");
        let (mine, theirs) = runtime
            .block_on(async { (body_of(&ours, &path).await, body_of(&upstream, &path).await) });
        assert_eq!(meaning(&mine), meaning(&theirs), "{path}");
        let mut group = c.benchmark_group(format!(
            "GET /api/job/{{id}}{route} of a 50,000-task upstream-written log"
        ));
        group.sample_size(10);
        for (name, router) in [("ours", &ours), ("upstream", &upstream)] {
            group.bench_function(name, |b| {
                b.to_async(&runtime)
                    .iter(|| async { body_of(router, &path).await })
            });
        }
        group.finish();
    }
}

/// 200,000 small logs written by upstream's scheduler (the smallest
/// fixture, 23 KB, copied under new ids): the floor is one open and one
/// read per file.
fn upstream_many(c: &mut Criterion) {
    const N: usize = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream/038HEXYEMR000.eventlog");
    let text = std::fs::read_to_string(fixture).unwrap();
    for i in 0..N {
        let id = format!("038H{i:09}");
        std::fs::write(
            dir.path().join(format!("{id}.eventlog")),
            text.replace("038HEXYEMR000", &id),
        )
        .unwrap();
    }
    let mut group = index_group(
        c,
        "index 200,000 small upstream-written logs",
        dir.path(),
        N,
    );
    // The floor: list the directory, then open and read each file whole,
    // on as many threads as the rescan uses, parsing nothing.
    group.bench_function("floor: list, open and read each file (4 threads)", |b| {
        b.iter(|| {
            let paths: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    assert!(e.metadata().unwrap().len() > 0);
                    e.path()
                })
                .collect();
            let next = std::sync::atomic::AtomicUsize::new(0);
            let bytes = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|scope| {
                for _ in 0..4 {
                    scope.spawn(|| {
                        let mut buf = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(path) = paths.get(i) else { return };
                            buf.clear();
                            let mut file = std::fs::File::open(path).unwrap();
                            std::io::Read::read_to_end(&mut file, &mut buf).unwrap();
                            bytes.fetch_add(buf.len(), std::sync::atomic::Ordering::Relaxed);
                        }
                    });
                }
            });
            assert_eq!(paths.len(), N);
            assert!(bytes.into_inner() > N);
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    index,
    read_one,
    list,
    compressed,
    upstream_logs,
    upstream_big,
    upstream_many
);
criterion_main!(benches);
