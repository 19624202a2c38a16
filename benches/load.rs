//! Load: the binary under many connections, and the cost of recording to
//! scheduling.
//!
//! 1. A `--history-only` server over the 2,000-job mixed corpus, rescanning
//!    every second while new logs arrive and the cleaner deletes them, is
//!    driven by `LOAD_CONNECTIONS` (64) connections for `LOAD_SECONDS` (60)
//!    seconds across the list, job, stages and timeline routes. Prints
//!    requests, errors and latency percentiles per route.
//! 2. A live scheduler with a real executor runs `LOAD_JOBS` (200) short
//!    jobs from 8 clients, with and without `--event-log-dir`, alternating
//!    A/B/A/B; prints jobs per second and the ratio.
//!
//! `cargo bench --bench load`. Client and server share the machine.

#![allow(clippy::disallowed_methods)] // scratch files and test channels

mod corpus;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The binary on `port` with `args`; killed on drop.
struct Server(Child);

impl Server {
    fn start(port: u16, args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_ballista-scheduler"))
            .args(["--bind-host", "127.0.0.1", "--external-host", "127.0.0.1"])
            .args(["--bind-port", &port.to_string()])
            .args(args)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// A tiny completed log that ended in 1970, so the cleaner deletes it
/// before any corpus job.
fn churn_log(dir: &Path, n: u64) {
    let id = format!("churn{n:08}");
    let line = format!(
        r#"{{"ev":"JobEnd","version":1,"data":{{"status":"Succeeded","queued_at":1,"started_at":2,"completed_at":3,"index":{{"job_id":"{id}","job_name":"churn","status":"Completed","job_status":"Completed.","start_time":2,"end_time":3,"num_stages":1,"completed_stages":1,"percent_complete":100}},"job":{{}},"stages":{{}},"config":{{}},"dot":""}}}}"#
    );
    std::fs::write(dir.join(format!("{id}.eventlog")), line + "\n").unwrap();
}

/// A route's name and its path for a job number.
type Route = (&'static str, fn(usize) -> String);

fn serve_under_load(runtime: &tokio::runtime::Runtime) {
    const JOBS: usize = 2_000;
    let connections = env_usize("LOAD_CONNECTIONS", 64);
    let seconds = env_usize("LOAD_SECONDS", 60) as u64;
    let dir = tempfile::tempdir().unwrap();
    corpus::write_corpus(dir.path(), JOBS, 7, |rng| {
        corpus::mixed_task_count(rng, false)
    });
    let port = corpus::free_port();
    let dir_arg = dir.path().to_str().unwrap();
    let _server = Server::start(
        port,
        &[
            "--history-only",
            "--event-log-dir",
            dir_arg,
            "--update-interval-seconds",
            "1",
            "--retain-max-jobs",
            &JOBS.to_string(),
            "--retain-interval",
            "1s",
        ],
    );
    let base = format!("http://127.0.0.1:{port}");
    let stop = Arc::new(AtomicBool::new(false));
    // New logs keep arriving; the cleaner keeps deleting them.
    let churned = Arc::new(AtomicU64::new(0));
    let churn = {
        let (stop, churned, dir) = (stop.clone(), churned.clone(), dir.path().to_path_buf());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                churn_log(&dir, churned.fetch_add(1, Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let routes: [Route; 4] = [
        ("GET /api/jobs?limit=100", |_| "/api/jobs?limit=100".into()),
        ("GET /api/job/{id}", |j| format!("/api/job/job{j:07}")),
        ("GET /api/job/{id}/stages", |j| {
            format!("/api/job/job{j:07}/stages")
        }),
        ("GET /api/job/{id}/timeline", |j| {
            format!("/api/job/job{j:07}/timeline?limit=1000")
        }),
    ];
    let results = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(connections)
            .build()
            .unwrap();
        // Load starts once the first pass over the directory is done (a
        // job not yet indexed is a 404).
        let ready = format!("{base}/readyz");
        while !client
            .get(&ready)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let until = Instant::now() + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..connections)
            .map(|c| {
                let (client, base) = (client.clone(), base.clone());
                tokio::spawn(async move {
                    let mut rng = corpus::Rng::new(c as u64 + 1);
                    let mut samples: Vec<(usize, Duration, bool)> = Vec::new();
                    while Instant::now() < until {
                        let route = rng.below(4) as usize;
                        let job = rng.below(JOBS as u64) as usize;
                        let url = format!("{base}{}", routes[route].1(job));
                        let started = Instant::now();
                        let ok = match client.get(&url).send().await {
                            Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                            Ok(r) => {
                                let status = r.status();
                                let body = r.text().await.unwrap_or_default();
                                eprintln!("error: {url}: {status} {body}");
                                false
                            }
                            Err(e) => {
                                eprintln!("error: {url}: {e}");
                                false
                            }
                        };
                        samples.push((route, started.elapsed(), ok));
                    }
                    samples
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    let left = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("churn"))
        .count();
    println!(
        "## {connections} connections for {seconds} s, history-only over {JOBS} mixed jobs \
         (rescans every 1 s; {} new logs arrived, the cleaner left {left})\n",
        churned.load(Ordering::Relaxed)
    );
    println!("| route | requests | errors | p50 | p99 | max |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut total = (0, 0);
    for (i, (name, _)) in routes.iter().enumerate() {
        let mut times: Vec<Duration> = results.iter().filter(|r| r.0 == i).map(|r| r.1).collect();
        times.sort();
        let errors = results.iter().filter(|r| r.0 == i && !r.2).count();
        total = (total.0 + times.len(), total.1 + errors);
        println!(
            "| `{name}` | {} | {errors} | {} | {} | {} |",
            times.len(),
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            ms(*times.last().unwrap())
        );
    }
    let mut times: Vec<Duration> = results.iter().map(|r| r.1).collect();
    times.sort();
    println!(
        "| all | {} ({:.0}/s) | {} | {} | {} | {} |\n",
        total.0,
        total.0 as f64 / seconds as f64,
        total.1,
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(*times.last().unwrap())
    );
}

async fn executor(port: u16) {
    use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
    let client = SchedulerGrpcClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    ballista_executor::new_standalone_executor(
        client,
        2,
        ballista_core::serde::BallistaCodec::default(),
    )
    .await
    .unwrap();
}

/// Jobs per second through a live scheduler, recording or not.
async fn throughput(recording: Option<&Path>, jobs: usize, data: &Path) -> f64 {
    use ballista::prelude::*;
    use datafusion::prelude::{CsvReadOptions, SessionContext};
    let port = corpus::free_port();
    let mut args = vec!["--scheduler-policy", "pull-staged"];
    let dir;
    if let Some(path) = recording {
        dir = path.to_str().unwrap().to_string();
        args.extend(["--event-log-dir", &dir]);
    }
    let _server = Server::start(port, &args);
    executor(port).await;
    let ctx = SessionContext::remote(&format!("df://127.0.0.1:{port}"))
        .await
        .unwrap();
    ctx.register_csv("t", data.to_str().unwrap(), CsvReadOptions::new())
        .await
        .unwrap();
    // Warm up.
    ctx.sql("SELECT k, count(*) FROM t GROUP BY k")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let started = Instant::now();
    let per_client = jobs / 8;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                for _ in 0..per_client {
                    ctx.sql("SELECT k, count(*) FROM t GROUP BY k")
                        .await
                        .unwrap()
                        .collect()
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    (per_client * 8) as f64 / started.elapsed().as_secs_f64()
}

fn scheduling_with_and_without_recording(runtime: &tokio::runtime::Runtime) {
    let jobs = env_usize("LOAD_JOBS", 200);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("t.csv");
    let mut csv = String::from("k,v\n");
    for i in 0..2_000 {
        csv.push_str(&format!("{},{}\n", i % 100, i));
    }
    std::fs::write(&data, csv).unwrap();
    let mut off = Vec::new();
    let mut on = Vec::new();
    for round in 0..2 {
        off.push(runtime.block_on(throughput(None, jobs, &data)));
        let logs = tmp.path().join(format!("logs{round}"));
        on.push(runtime.block_on(throughput(Some(&logs), jobs, &data)));
        let recorded = std::fs::read_dir(&logs)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".eventlog"))
            .count();
        assert!(recorded > jobs / 2, "{recorded} jobs recorded");
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!("## Scheduling throughput, {jobs} jobs from 8 clients, one executor\n");
    println!("| scheduler | runs (jobs/s) | mean |");
    println!("| --- | --- | --- |");
    for (name, runs) in [("without recording", &off), ("recording", &on)] {
        let list: Vec<String> = runs.iter().map(|r| format!("{r:.1}")).collect();
        println!("| {name} | {} | {:.1} |", list.join(", "), mean(runs));
    }
    println!("\nrecording / not recording: {:.3}", mean(&on) / mean(&off));
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if only.as_deref().is_none_or(|o| "serve".contains(o)) {
        serve_under_load(&runtime);
    }
    if only.as_deref().is_none_or(|o| "schedule".contains(o)) {
        scheduling_with_and_without_recording(&runtime);
    }
}
