//! A fleet in one bucket: three recording schedulers (real executors,
//! real queries) publish their jobs' summaries beside their logs; a
//! history server reads the manifests and segments and lists the prefix
//! one bounded page a rescan. A proxy between the history server and the
//! store counts every request it makes, before and after 10,000 more
//! logs arrive in a segment.

use crate::bucket::{Moto, on_bucket, recording_cluster, run_named, wait_listed};
use crate::harness::*;
use bjh_store::published::{FOLDER, MANIFEST_SUFFIX};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy in front of the store that notes each HTTP request's
/// method and target (heads parsed by `httparse`, bodies skipped by their
/// `Content-Length`).
struct Counting {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    refusing: Arc<std::sync::atomic::AtomicBool>,
}

impl Counting {
    async fn start(target: u16) -> Counting {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let refusing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (noted, refuse) = (seen.clone(), refusing.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                if !refuse.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::spawn(relay(socket, target, noted.clone(), refuse.clone()));
                }
            }
        });
        Counting {
            port,
            seen,
            refusing,
        }
    }

    /// Closes every connection at once (open ones at their next read)
    /// while `on`: the store is down for the server.
    fn refuse(&self, on: bool) {
        self.refusing.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

async fn relay(
    client: TcpStream,
    target: u16,
    seen: Arc<Mutex<Vec<String>>>,
    refusing: Arc<std::sync::atomic::AtomicBool>,
) {
    let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_store, mut to_store) = upstream.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_store, &mut to_client).await;
    });
    let mut pending: Vec<u8> = Vec::new();
    let mut body_left = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from_client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if refusing.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        if to_store.write_all(&buf[..n]).await.is_err() {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        loop {
            let skip = body_left.min(pending.len());
            pending.drain(..skip);
            body_left -= skip;
            if body_left > 0 {
                break;
            }
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut request = httparse::Request::new(&mut headers);
            let Ok(httparse::Status::Complete(head)) = request.parse(&pending) else {
                break;
            };
            let line = format!(
                "{} {}",
                request.method.unwrap_or("?"),
                request.path.unwrap_or("?")
            );
            body_left = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .unwrap_or(0);
            seen.lock().unwrap().push(line);
            pending.drain(..head);
        }
    }
    let _ = to_store.shutdown().await;
    let _ = back.await;
}

/// A completed log of job `id`: its one `JobEnd` line.
pub(crate) fn tiny_log(id: &str) -> Vec<u8> {
    format!(
        r#"{{"ev":"JobEnd","version":1,"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"generated {id}","status":"Completed","job_status":"Completed","start_time":1700000000000,"end_time":1700000001000,"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{}},"stages":{{}},"config":{{}},"dot":"","dropped_records":0,"scheduler_id":"fleet-generated"}}}}"#
    )
    .into_bytes()
    .into_iter()
    .chain(*b"\n")
    .collect()
}

/// Publishes, as scheduler `scheduler`, one segment of the summaries of
/// the logs under `prefix/` whose names start with `start`, stamped as
/// the store lists them, and its manifest (straight to the store).
async fn publish_as_listed(moto: &Moto, prefix: &str, scheduler: &str, start: &str) {
    use bjh_store::published::{MANIFEST_VERSION, Manifest, SegmentRef, key_of, segment};
    use bjh_store::query::FactsRef;
    use bjh_store::{JobSummary, SummaryParts};
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let listed: Vec<_> = moto
        .bucket()
        .list(Some(&object_store::path::Path::from(prefix)))
        .try_collect()
        .await
        .unwrap();
    let jobs: Vec<JobSummary> = listed
        .iter()
        .filter_map(|meta| {
            let file = meta.location.filename()?;
            let id = file.strip_suffix(".eventlog")?;
            id.starts_with(start).then(|| {
                JobSummary::restore(SummaryParts {
                    facts: FactsRef {
                        job_id: id,
                        job_name: &format!("generated {id}"),
                        state: bjh_format::JobState::Completed,
                        queued_time: 1,
                        start_time: 1_700_000_000_000,
                        end_time: 1_700_000_001_000,
                        query_hash: 0,
                    },
                    job_status: "Completed",
                    status: "Completed",
                    stages: [1, 1],
                    percent_complete: 100,
                    dropped_records: 0,
                    file_name: file,
                    len: meta.size,
                    modified: Some(meta.last_modified.into()),
                    ranges: None,
                    scheduler_id: Some(scheduler),
                    usage: None,
                    tags: None,
                })
            })
        })
        .collect();
    let (name, bytes) = segment(jobs.iter());
    let key = key_of(scheduler);
    let folder = format!("{prefix}/{FOLDER}");
    put(moto, &format!("{folder}/{key}/{name}"), bytes).await;
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        scheduler_id: scheduler.to_string(),
        segments: vec![SegmentRef {
            name,
            jobs: jobs.len() as u64,
        }],
        removed: Vec::new(),
    };
    let manifest = serde_json::to_vec(&manifest).unwrap();
    put(moto, &format!("{folder}/{key}{MANIFEST_SUFFIX}"), manifest).await;
}

/// The server's rescans so far.
async fn rescans(server: &Proc) -> u64 {
    let metrics = String::from_utf8(get(&server.url("/api/metrics")).await.2).unwrap();
    counter(&metrics, "ballista_job_history_rescans_total")
}

/// The requests the server made to the store over ten rescans (but for
/// the cluster logs' reads, which answer `/api/metrics`), and how many
/// rescans they span.
async fn over_ten_rescans(server: &Proc, store: &Counting) -> (Vec<String>, u64) {
    let r0 = rescans(server).await;
    let c0 = store.requests().len();
    eventually("ten more rescans", || async {
        rescans(server).await >= r0 + 10
    })
    .await;
    let r1 = rescans(server).await;
    // Cluster logs are read for the metrics asked here, not by rescans.
    let requests = store.requests()[c0..]
        .iter()
        .filter(|r| !r.contains(".cluster"))
        .cloned()
        .collect();
    (requests, r1 - r0)
}

/// The number of `LIST` requests among `requests`.
fn lists(requests: &[String]) -> usize {
    requests
        .iter()
        .filter(|r| r.contains("list-type=2"))
        .count()
}

/// Three clusters record into one prefix and publish; a history server
/// over it lists every job with its scheduler, and an upstream log no
/// segment names. 10,000 more logs then arrive with a segment naming
/// them: the server lists them all without reading one of them, and a
/// rescan costs what it cost before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_moto,
    ignore = "moto is not installed (python3 -m pip install 'moto[server]')"
)]
async fn a_fleet_in_one_bucket_is_served_without_listing_every_log() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = write_csv(tmp.path(), "t.csv", 2000);
    let endpoint = moto.url("");
    let mut clusters = Vec::new();
    for i in 0..3 {
        let id = format!("fleet-{i}");
        let extra = ["--scheduler-id", id.as_str()];
        let sched = recording_cluster(tmp.path(), &id, &extra, "fleet", &endpoint).await;
        clusters.push((sched, id));
    }
    let mut jobs = Vec::new();
    for (i, (sched, id)) in clusters.iter().enumerate() {
        let sql = "SELECT k, count(*) FROM t GROUP BY k";
        let job = run_named(sched, &data, &format!("fleet-job-{i}"), sql).await;
        jobs.push((job, id.clone()));
    }
    let folder = format!("fleet/{FOLDER}");
    eventually("each scheduler published its manifest", || async {
        let keys = moto.all_keys(&folder).await;
        keys.iter().filter(|k| k.ends_with(MANIFEST_SUFFIX)).count() == 3
    })
    .await;
    // A log upstream's scheduler wrote: in no segment.
    let local = tmp.path().join("upstream");
    crate::history::copy_fixtures(&local);
    let fixture = std::fs::read_dir(&local).unwrap().next().unwrap().unwrap();
    let fixture_name = fixture.file_name().into_string().unwrap();
    let upstream_id = fixture_name.strip_suffix(".eventlog").unwrap().to_string();
    put(
        &moto,
        &format!("fleet/{fixture_name}"),
        std::fs::read(fixture.path()).unwrap(),
    )
    .await;

    let store = Counting::start(moto.port()).await;
    let mut server = on_bucket(
        free_port(),
        &["--history-only", "--listing-pages-per-rescan", "1"],
        "fleet",
        &store.url(),
        &tmp.path().join("spool-h"),
        &tmp.path().join("h.log"),
    );
    server.wait_healthy().await;
    let mut want: Vec<&String> = jobs.iter().map(|(job, _)| job).collect();
    want.push(&upstream_id);
    wait_listed(&server, &want).await;
    let list = get_json(&server.url("/api/jobs")).await;
    for (job, scheduler) in &jobs {
        let entry = list
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job_id"] == job.as_str())
            .unwrap();
        assert_eq!(entry["scheduler_id"], scheduler.as_str(), "{entry}");
    }
    let (before, spanned) = over_ten_rescans(&server, &store).await;

    // 10,000 more logs arrive with a segment naming them, while the
    // store does not answer the server (so it cannot list them first).
    store.refuse(true);
    // The clusters' part is done: their processes only slow the store.
    drop(clusters);
    let ids: Vec<String> = (0..10_000).map(|i| format!("g{i:06}")).collect();
    {
        use futures::StreamExt;
        use object_store::ObjectStoreExt;
        // One client for all (each new one loads the TLS roots again).
        let bucket = moto.bucket();
        let puts = ids.iter().map(|id| {
            let (bucket, key) = (&bucket, format!("fleet/{id}.eventlog"));
            async move {
                let key = object_store::path::Path::from(key);
                bucket.put(&key, tiny_log(id).into()).await.unwrap();
            }
        });
        futures::stream::iter(puts)
            .buffer_unordered(32)
            .collect::<Vec<()>>()
            .await;
    }
    publish_as_listed(&moto, "fleet", "fleet-generated", "g").await;
    store.refuse(false);
    eventually("the server lists the 10,000 published jobs", || async {
        let answer = http_client()
            .get(server.url("/api/jobs?limit=1"))
            .send()
            .await
            .unwrap();
        answer
            .headers()
            .get("x-total-count")
            .and_then(|v| v.to_str().ok())
            == Some("10004")
    })
    .await;
    let (after, spanned_after) = over_ten_rescans(&server, &store).await;
    let per = |r: &[String], n: u64| r.len() as f64 / n as f64;
    let (b, a) = (per(&before, spanned), per(&after, spanned_after));
    eprintln!(
        "a rescan's requests: {b:.2} with 4 logs, {a:.2} with 10,004 ({} and {} LIST)",
        lists(&before) as f64 / spanned as f64,
        lists(&after) as f64 / spanned_after as f64
    );
    assert!(
        a <= b + 0.5,
        "a rescan cost {b:.1} requests before and {a:.1} after 10,000 more logs: \
         {before:?} then {after:?}"
    );
    assert!(
        lists(&after) as f64 <= 2.5 * spanned_after as f64,
        "a folder LIST and one page a rescan: {after:?}"
    );
    // Logs read: only upstream's. The three recorded jobs came from
    // their schedulers' segments (stamped by `HEAD`, listed to the
    // millisecond: the same to the second), the 10,000 from theirs.
    let reads: Vec<String> = store
        .requests()
        .into_iter()
        .filter(|r| r.contains(".eventlog") && !r.contains("list-type=2"))
        .collect();
    assert!(!reads.is_empty(), "the upstream log was read");
    assert!(
        reads
            .iter()
            .all(|r| r.contains(&format!("/fleet/{upstream_id}.eventlog"))),
        "no log a segment names was read: {:?}",
        &reads[..reads.len().min(20)]
    );
    drop(server);
}

async fn put(moto: &Moto, key: &str, bytes: Vec<u8>) {
    use object_store::ObjectStoreExt;
    moto.bucket()
        .put(&object_store::path::Path::from(key), bytes.into())
        .await
        .unwrap();
}
