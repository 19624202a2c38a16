//! 10,000 jobs in a bucket: what indexing, rescanning, restarting and
//! reading one payload cost against an S3-compatible server (moto, started
//! on loopback), in time and in requests, next to the same corpus in a
//! local directory. Needs `python3 -m pip install 'moto[server]'`.
//!
//! moto answers a request in about a millisecond on loopback; a real store
//! takes tens of milliseconds, so the request counts printed before the
//! measurements are the figures that carry over, and the times are for
//! comparing within one run.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;
#[path = "../tests/it/moto.rs"]
#[allow(
    dead_code,
    reason = "the bench waits on the port itself and builds its own URLs"
)]
mod moto;
use moto::MotoServer;

use ballista_api_types::dto::PlanFormat;
use bjh_metrics::HistoryMetrics;
use bjh_serving::source::{DiskSource, JobSource, Resource};
use bjh_store::LogStore;
use bjh_store::remote::RemoteDir;
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use object_store::ObjectStoreExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const JOBS: usize = 10_000;
const BUCKET: &str = "bench";

/// moto on a loopback port, its request log in a file; killed on drop.
struct Moto {
    server: MotoServer,
    log: PathBuf,
}

impl Moto {
    fn start(log: PathBuf) -> Moto {
        let stderr = std::fs::File::create(&log).unwrap();
        let server = MotoServer::spawn(stderr.into());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", server.port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "moto did not start");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Moto { server, log }
    }

    /// Requests served so far: (LIST, GET of an object, other).
    fn requests(&self) -> (usize, usize, usize) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let (mut list, mut get, mut other) = (0, 0, 0);
        for line in text.lines().filter(|l| l.contains(" HTTP/1.1\" ")) {
            if line.contains(&format!("\"GET /{BUCKET}?")) {
                list += 1;
            } else if line.contains(&format!("\"GET /{BUCKET}/")) {
                get += 1;
            } else {
                other += 1;
            }
        }
        (list, get, other)
    }
}

fn metrics() -> Arc<HistoryMetrics> {
    Arc::new(HistoryMetrics::unregistered())
}

/// Requests one operation makes, printed for docs/performance.md.
fn count(moto: &Moto, what: &str, run: impl FnOnce()) {
    let (l0, g0, o0) = moto.requests();
    let started = std::time::Instant::now();
    run();
    let took = started.elapsed();
    // The access log is written after each answer; give it a moment.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (l1, g1, o1) = moto.requests();
    println!(
        "requests: {what}: {} LIST, {} GET, {} other ({took:.2?} once)",
        l1 - l0,
        g1 - g0,
        o1 - o0
    );
}

fn bucket(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("logs");
    std::fs::create_dir(&local).unwrap();
    // Small jobs: what is measured (listing, footers, one payload) does not
    // grow with a log's size, and moto keeps every object in memory.
    corpus::write_corpus(&local, JOBS, 11, |_| 8);
    let moto = Moto::start(tmp.path().join("moto.log"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s3 = Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(format!("http://127.0.0.1:{}", moto.server.port))
            .with_allow_http(true)
            .with_access_key_id("bench")
            .with_secret_access_key("bench")
            .with_region("us-east-1")
            .build()
            .unwrap(),
    );
    let bytes = upload(&runtime, &s3, moto.server.port, &local);
    println!("corpus: {JOBS} logs, {:.1} MB", bytes as f64 / 1_000_000.0);
    let remote = RemoteDir::new(
        s3.clone(),
        object_store::path::Path::from("logs"),
        format!("s3://{BUCKET}/logs"),
        runtime.handle().clone(),
    )
    .with_paged_listing(s3);
    // Today's design without summaries: the whole prefix listed each
    // rescan (`--listing-pages-per-rescan 0`).
    let remote_store = || LogStore::remote(remote.clone(), metrics()).with_listing_pages(0);
    // With the summaries published: one page of 1,000 names a rescan.
    let summarized_store = || LogStore::remote(remote.clone(), metrics()).with_listing_pages(1);
    let local_store = || LogStore::new(&local, metrics());

    // Request counts, once each.
    let indexed = Arc::new(remote_store());
    count(&moto, "first index of 10,000 logs", || {
        assert_eq!(indexed.rescan().read, JOBS)
    });
    count(&moto, "rescan, nothing changed", || {
        assert_eq!(indexed.rescan().read, 0)
    });
    let index_file = tmp.path().join("bucket.index");
    let saved = remote_store().with_index_file(Some(index_file.clone()));
    saved.rescan();
    saved.persist(true);
    count(&moto, "restart from the persistent index", || {
        let store = remote_store().with_index_file(Some(index_file.clone()));
        assert_eq!(store.load_persisted(), JOBS);
        assert_eq!(store.rescan().read, 0);
    });
    publish(&runtime, &remote, &indexed);
    count(
        &moto,
        "first index of 10,000 logs from their published summaries",
        || {
            let store = summarized_store();
            assert_eq!(store.rescan().read, 0);
            assert_eq!(store.len(), JOBS);
        },
    );
    let summarized = summarized_store();
    summarized.rescan();
    count(&moto, "rescan with the summaries, nothing changed", || {
        assert_eq!(summarized.rescan().read, 0)
    });
    let source = DiskSource::new(indexed.clone());
    let get = |payload: Resource| {
        runtime.block_on(async {
            let reply = source.get("job0000042", payload).await;
            assert!(reply.unwrap().unwrap().body.len() > 100);
        })
    };
    let job = Resource::Job(PlanFormat::Default);
    count(&moto, "GET /api/job/{id}", || get(job));
    count(&moto, "GET /api/job/{id} again", || get(job));
    count(&moto, "GET /api/job/{id}/stages", || {
        get(Resource::Stages(PlanFormat::Default))
    });

    let mut group = c.benchmark_group("first index of 10,000 logs");
    group.sample_size(10);
    group.bench_function("bucket", |b| {
        b.iter(|| assert_eq!(remote_store().rescan().read, JOBS))
    });
    group.bench_function("bucket, from published summaries", |b| {
        b.iter(|| {
            let store = summarized_store();
            assert_eq!(store.rescan().read, 0);
            assert_eq!(store.len(), JOBS);
        })
    });
    group.bench_function("local directory", |b| {
        b.iter(|| assert_eq!(local_store().rescan().read, JOBS))
    });
    group.finish();

    let local_indexed = local_store();
    local_indexed.rescan();
    let mut group = c.benchmark_group("rescan of 10,000 unchanged logs");
    group.sample_size(10);
    group.bench_function("bucket", |b| {
        b.iter(|| assert_eq!(indexed.rescan().read, 0))
    });
    group.bench_function("bucket, with published summaries", |b| {
        b.iter(|| assert_eq!(summarized.rescan().read, 0))
    });
    group.bench_function("local directory", |b| {
        b.iter(|| assert_eq!(local_indexed.rescan().read, 0))
    });
    group.finish();

    let local_index = tmp.path().join("local.index");
    let saved = local_store().with_index_file(Some(local_index.clone()));
    saved.rescan();
    saved.persist(true);
    let mut group = c.benchmark_group("restart over 10,000 logs with the persistent index");
    group.sample_size(10);
    for (name, file, make) in [
        (
            "bucket",
            &index_file,
            &remote_store as &dyn Fn() -> LogStore,
        ),
        ("local directory", &local_index, &local_store),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let store = make().with_index_file(Some(file.clone()));
                assert_eq!(store.load_persisted(), JOBS);
                assert_eq!(store.rescan().read, 0);
            })
        });
    }
    group.finish();

    let local_source = DiskSource::new(Arc::new(local_indexed));
    let mut group = c.benchmark_group("GET /api/job/{id} of one of 10,000 jobs");
    group.sample_size(20);
    for (name, source) in [("bucket", &source), ("local directory", &local_source)] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let reply = source
                    .get("job0000042", Resource::Job(PlanFormat::Default))
                    .await;
                assert!(reply.unwrap().unwrap().body.len() > 100);
            })
        });
    }
    group.finish();
}

/// Publishes the summaries of `store`'s jobs under the prefix as one
/// segment and its manifest, as a recording scheduler that uploaded them
/// would have.
fn publish(runtime: &tokio::runtime::Runtime, remote: &RemoteDir, store: &LogStore) {
    use bjh_store::published::{
        FOLDER, MANIFEST_SUFFIX, MANIFEST_VERSION, Manifest, SegmentRef, key_of, segment,
    };
    let jobs = store.ran_between(0, u64::MAX);
    assert_eq!(jobs.len(), JOBS);
    let (name, bytes) = segment(jobs.iter().map(|j| &**j));
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        scheduler_id: "bench".into(),
        segments: vec![SegmentRef {
            name: name.clone(),
            jobs: JOBS as u64,
        }],
        removed: Vec::new(),
    };
    let (client, prefix) = remote.client();
    let key = key_of("bench");
    let folder = prefix.clone().join(FOLDER);
    runtime.block_on(async {
        let segment_at = folder.clone().join(key.as_str()).join(name.as_str());
        client.put(&segment_at, bytes.into()).await.unwrap();
        let manifest_at = folder.join(format!("{key}{MANIFEST_SUFFIX}").as_str());
        let manifest = serde_json::to_vec(&manifest).unwrap();
        client.put(&manifest_at, manifest.into()).await.unwrap();
    });
}

/// Creates the bucket and puts every log of `dir` under `logs/`, 32 at a
/// time; returns the bytes uploaded.
fn upload(
    runtime: &tokio::runtime::Runtime,
    s3: &Arc<object_store::aws::AmazonS3>,
    port: u16,
    dir: &Path,
) -> u64 {
    runtime.block_on(async {
        let created = reqwest::Client::new()
            .put(format!("http://127.0.0.1:{port}/{BUCKET}/"))
            .send()
            .await
            .unwrap();
        assert!(created.status().is_success());
        let files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), JOBS);
        let sizes: Vec<u64> = futures::stream::iter(files)
            .map(|path| {
                let s3 = s3.clone();
                async move {
                    let bytes = tokio::fs::read(&path).await.unwrap();
                    let name = path.file_name().unwrap().to_str().unwrap();
                    let len = bytes.len() as u64;
                    let location = object_store::path::Path::from(format!("logs/{name}"));
                    s3.put(&location, bytes.into()).await.unwrap();
                    len
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        sizes.iter().sum()
    })
}

criterion_group!(benches, bucket);
criterion_main!(benches);
