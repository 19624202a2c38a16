//! Beyond upstream's API, over HTTP against the real binary: paging,
//! filters and sorting of `/api/jobs`, the task timeline, unfinished jobs.

use crate::harness::*;
use ballista_api_types::dto::QueryStagesResponse;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// One crafted completed job.
#[derive(Debug, Clone)]
pub(crate) struct Crafted {
    pub(crate) id: String,
    pub(crate) name: String,
    /// `completed`, `failed` or `cancelled`.
    pub(crate) state: &'static str,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

fn line(ev: &str, data: Value) -> String {
    json!({"ev": ev, "version": 1, "data": data}).to_string() + "\n"
}

fn job_start(id: &str, name: &str, at: u64) -> String {
    line(
        "JobStart",
        json!({"job_id": id, "job_name": name, "queued_at": at - 1, "submitted_at": at,
               "logical_plan": "Projection: x", "physical_plan": "ProjectionExec: x"}),
    )
}

fn task_end(stage: u32, task: u32, exec: &str, start: u64, ok: bool) -> String {
    let status = if ok {
        json!("Successful")
    } else {
        json!({"Failed": {"reason": "ExecutionError", "error": "boom"}})
    };
    line(
        "TaskEnd",
        json!({"stage_id": stage, "task_id": task, "executor_id": exec, "status": status,
               "launch_time": start, "start_exec_time": start + 1, "end_exec_time": start + 20,
               "metrics": {"input_rows": 10, "output_rows": 3, "elapsed_compute_nanos": 5}}),
    )
}

fn job_end(job: &Crafted) -> String {
    let (status, word) = match job.state {
        "completed" => (json!("Succeeded"), "Completed"),
        "failed" => (json!({"Failed": "boom"}), "Failed"),
        _ => (json!("Cancelled"), "Cancelled"),
    };
    line(
        "JobEnd",
        json!({"status": status, "queued_at": job.start - 1, "started_at": job.start,
               "completed_at": job.end,
               "index": {"job_id": job.id, "job_name": job.name, "status": word,
                         "job_status": word, "start_time": job.start, "end_time": job.end,
                         "num_stages": 1, "completed_stages": 1, "percent_complete": 100},
               "job": {"job_id": job.id}, "stages": {"stages": []}, "config": {},
               "dot": "digraph G {}"}),
    )
}

pub(crate) fn write_completed(dir: &Path, job: &Crafted) {
    let text = job_start(&job.id, &job.name, job.start)
        + &task_end(1, 0, "e1", job.start, true)
        + &job_end(job);
    std::fs::write(dir.join(format!("{}.eventlog", job.id)), text).unwrap();
}

/// A `.running` log with `tasks` task records, last written `age` ago.
pub(crate) fn write_running(dir: &Path, id: &str, name: &str, tasks: u32, age: Duration) {
    let mut text = job_start(id, name, 5_000);
    for t in 0..tasks {
        text += &task_end(
            1 + t % 2,
            t,
            &format!("exec-{}", t % 2),
            5_000 + u64::from(t),
            t != 1,
        );
    }
    text += "{\"ev\":\"TaskEnd\",\"ver"; // a record being written
    let path = dir.join(format!("{id}.eventlog.running"));
    std::fs::write(&path, text).unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

/// `GET`, returning the status, the `X-Total-Count` and `X-Next-After`
/// headers, and the JSON body.
async fn get_page(url: &str) -> (u16, Option<usize>, Option<String>, Value) {
    let r = http_client().get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let total = header("x-total-count").map(|v| v.parse().unwrap());
    let next = header("x-next-after");
    (status, total, next, r.json().await.unwrap())
}

pub(crate) fn ids(body: &Value) -> Vec<String> {
    body.as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paging_through_10000_jobs_returns_each_once_while_logs_arrive() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Start times collide in threes, so the order leans on its tie-break.
    let jobs: Vec<Crafted> = (0..10_000)
        .map(|i| Crafted {
            id: format!("job-{i:05}"),
            name: format!("q{i}"),
            state: "completed",
            start: 1_000_000 + (i / 3) * 1000,
            end: 1_000_000 + (i / 3) * 1000 + 50,
        })
        .collect();
    for job in &jobs {
        write_completed(dir, job);
    }
    let mut server = Proc::history(dir, &["--update-interval-seconds", "1"]);
    server.wait_healthy().await;
    eventually("the index is loaded", || async {
        get(&server.url("/readyz")).await.0 == 200
    })
    .await;

    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    let mut arrived = 0u64;
    for page in 0.. {
        let url = match &after {
            Some(a) => server.url(&format!("/api/jobs?limit=1000&after={a}")),
            None => server.url("/api/jobs?limit=1000"),
        };
        let (status, total, next, body) = get_page(&url).await;
        assert_eq!(status, 200);
        assert!(total.unwrap() >= 10_000);
        let page_ids = ids(&body);
        seen.extend(page_ids.iter().cloned());
        match next {
            Some(n) => {
                assert_eq!(Some(&n), page_ids.last());
                after = Some(n);
            }
            None => break,
        }
        if page % 3 == 0 {
            // New jobs arrive, newer and older than the cursor; wait until
            // the server has indexed them.
            for k in 0..10u64 {
                arrived += 1;
                let start = if k % 2 == 0 {
                    9_000_000 + arrived
                } else {
                    1_000 + arrived
                };
                write_completed(
                    dir,
                    &Crafted {
                        id: format!("new-{arrived:03}"),
                        name: "new".into(),
                        state: "completed",
                        start,
                        end: start + 1,
                    },
                );
            }
            let want = 10_000 + arrived as usize;
            eventually("the new logs are indexed", || async {
                get_page(&server.url("/api/jobs?limit=1")).await.1 == Some(want)
            })
            .await;
        }
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no job is listed twice");
    for job in &jobs {
        assert!(unique.contains(&job.id), "{} was never listed", job.id);
    }
    // The original jobs come in the default order: newest start first,
    // ties by id.
    let mut expected = jobs.clone();
    expected.sort_by(|a, b| b.start.cmp(&a.start).then_with(|| a.id.cmp(&b.id)));
    let originals: Vec<&String> = seen.iter().filter(|id| id.starts_with("job-")).collect();
    let expected_ids: Vec<&String> = expected.iter().map(|j| &j.id).collect();
    assert_eq!(originals, expected_ids);

    // Offset paging agrees with the full list.
    let (_, total, _, all) = get_page(&server.url("/api/jobs")).await;
    let all = ids(&all);
    assert_eq!(total, Some(all.len()));
    let (_, _, _, tail) = get_page(&server.url("/api/jobs?limit=100&offset=9950")).await;
    assert_eq!(ids(&tail), all[9950..(9950 + 100).min(all.len())]);
}

pub(crate) fn facts_sample() -> Vec<Crafted> {
    let names = [
        "Nightly ETL",
        "nightly report",
        "adhoc",
        "Ad-hoc export",
        "",
        "Ünïcode NIGHT",
    ];
    let states = ["completed", "failed", "cancelled"];
    (0..30u64)
        .map(|i| Crafted {
            id: format!("f{i:02}"),
            name: names[(i % 6) as usize].to_string(),
            state: states[(i % 3) as usize],
            start: 1_700_000_000_000 + i * 60_000,
            end: 1_700_000_000_000 + i * 60_000 + (i * 7_919) % 50_000,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unfinished_jobs_are_served_and_a_rename_completes_them_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_running(dir, "r-live", "still going", 4, Duration::ZERO);
    write_running(dir, "r-dead", "crashed", 3, Duration::from_secs(3600));
    std::fs::write(dir.join("r-empty.eventlog.running"), "").unwrap();
    let mut server = Proc::history(
        dir,
        &[
            "--update-interval-seconds",
            "1",
            "--abandoned-after-seconds",
            "1800",
        ],
    );
    server.wait_healthy().await;
    eventually("the index is loaded", || async {
        get(&server.url("/readyz")).await.0 == 200
    })
    .await;

    assert!(ids(&get_json(&server.url("/api/jobs")).await).is_empty());
    let live = get_json(&server.url("/api/job/r-live")).await;
    assert_eq!(live["status"], "Running");
    assert_eq!(live["job_name"], "still going");
    assert_eq!(live["physical_plan"], "ProjectionExec: x");
    assert_eq!(live["num_stages"], 2);
    let dead = get_json(&server.url("/api/job/r-dead")).await;
    assert_eq!(dead["status"], "Abandoned");
    assert!(
        dead["job_status"]
            .as_str()
            .unwrap()
            .contains("3 task attempts"),
        "{dead}"
    );
    let (status, _, body) = get(&server.url("/api/job/r-dead/config")).await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("has not finished"));
    let r = http_client()
        .patch(server.url("/api/job/r-dead"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);

    let timeline = get_json(&server.url("/api/job/r-dead/timeline")).await;
    assert_eq!(timeline["status"], "Abandoned");
    assert_eq!(timeline["complete"], false);
    assert_eq!(timeline["dropped_records"], Value::Null);
    assert_eq!(
        timeline["total_tasks"], 3,
        "the torn last line is not a task"
    );
    assert_eq!(timeline["tasks"][1]["status"], "Failed");
    assert_eq!(timeline["tasks"][1]["error"], "boom");

    // The job finishes: its log gets a terminal record and is renamed.
    let running = dir.join("r-live.eventlog.running");
    let mut text = std::fs::read_to_string(&running).unwrap();
    text.truncate(text.rfind('\n').unwrap() + 1);
    let done = Crafted {
        id: "r-live".into(),
        name: "still going".into(),
        state: "completed",
        start: 5_000,
        end: 6_000,
    };
    text += &job_end(&done);
    std::fs::write(&running, text).unwrap();
    std::fs::rename(&running, dir.join("r-live.eventlog")).unwrap();
    eventually("the job is listed as completed", || async {
        ids(&get_json(&server.url("/api/jobs")).await) == ["r-live"]
    })
    .await;
    let all = ids(&get_json(&server.url("/api/jobs?include_unfinished=true")).await);
    assert_eq!(
        all.iter().filter(|id| *id == "r-live").count(),
        1,
        "{all:?}"
    );
    assert!(
        ids(&get_json(&server.url("/api/jobs?status=running")).await)
            .contains(&"r-empty".to_string())
    );
    assert_eq!(
        get_json(&server.url("/api/job/r-live")).await,
        json!({"job_id": "r-live"})
    );
    let timeline = get_json(&server.url("/api/job/r-live/timeline")).await;
    assert_eq!(timeline["status"], "Completed");
    assert_eq!(timeline["total_tasks"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_timeline_of_a_real_job_matches_its_tasks() {
    let Cluster {
        tmp: _tmp,
        logs,
        sched,
        ctx,
        ..
    } = Cluster::start(&["--update-interval-seconds", "1"]).await;
    let (job_id, result) = run_job(
        &sched,
        &ctx,
        "SELECT s, count(*), sum(v) FROM t GROUP BY s ORDER BY s",
    )
    .await;
    assert!(result.is_ok());
    completed_log(&logs, &job_id).await;
    let live: QueryStagesResponse =
        serde_json::from_value(get_json(&sched.url(&format!("/api/job/{job_id}/stages"))).await)
            .unwrap();
    let timeline = wait_for("the timeline is served", || async {
        let (status, _, body) = get(&sched.url(&format!("/api/job/{job_id}/timeline"))).await;
        (status == 200).then(|| serde_json::from_slice::<Value>(&body).unwrap())
    })
    .await;
    assert_eq!(timeline["status"], "Completed");
    assert_eq!(timeline["complete"], true);
    assert_eq!(timeline["dropped_records"], 0);

    // Every task the scheduler shows is in the timeline, with its times and
    // rows, and nothing else is.
    let mut want = BTreeMap::new();
    for stage in &live.stages {
        let stage_id: u64 = stage.stage_id.parse().unwrap();
        for task in stage.tasks.iter().flatten() {
            want.insert(
                (stage_id, task.id as u64),
                (
                    task.launch_time,
                    task.start_exec_time,
                    task.end_exec_time,
                    task.input_rows as u64,
                    task.output_rows as u64,
                ),
            );
        }
    }
    let mut got = BTreeMap::new();
    for task in timeline["tasks"].as_array().unwrap() {
        assert_eq!(task["status"], "Successful");
        assert!(!task["executor_id"].as_str().unwrap().is_empty());
        let n = |k: &str| task[k].as_u64().unwrap();
        got.insert(
            (n("stage_id"), n("task_id")),
            (
                n("launch_time"),
                n("start_exec_time"),
                n("end_exec_time"),
                n("input_rows"),
                n("output_rows"),
            ),
        );
    }
    assert!(!want.is_empty());
    assert_eq!(got, want);
    assert_eq!(timeline["total_tasks"].as_u64(), Some(want.len() as u64));
    let stages: Vec<u64> = timeline["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["status"], "Successful", "{s}");
            assert!(s["start_time"].as_u64() <= s["end_time"].as_u64());
            s["stage_id"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(stages.len(), live.stages.len());

    // Paging a live scheduler's list: its own jobs merged with the logs of
    // other schedulers in its directory, each once.
    crate::history::copy_fixtures(&logs);
    let full = wait_for("the copied logs are listed", || async {
        let (_, total, _, body) = get_page(&sched.url("/api/jobs")).await;
        let all = ids(&body);
        (all.len() >= 7).then(|| {
            assert_eq!(total, Some(all.len()));
            all
        })
    })
    .await;
    assert_eq!(full.iter().filter(|id| **id == job_id).count(), 1);
    let mut paged = Vec::new();
    let mut url = sched.url("/api/jobs?limit=2");
    loop {
        let (status, total, next, body) = get_page(&url).await;
        assert_eq!(status, 200);
        assert_eq!(total, Some(full.len()));
        paged.extend(ids(&body));
        match next {
            Some(after) => url = sched.url(&format!("/api/jobs?limit=2&after={after}")),
            None => break,
        }
    }
    assert_eq!(paged, full);
    let (_, total, _, body) = get_page(&sched.url("/api/jobs?limit=3&offset=2")).await;
    assert_eq!(ids(&body), full[2..5]);
    assert_eq!(total, Some(full.len()));
    let (_, _, _, body) =
        get_page(&sched.url("/api/jobs?status=completed&name=tpch&sort=name")).await;
    assert_eq!(ids(&body), ["golden-v1"]);

    // Paging splits the same tasks.
    let first = get_json(&sched.url(&format!("/api/job/{job_id}/timeline?limit=1"))).await;
    let second =
        get_json(&sched.url(&format!("/api/job/{job_id}/timeline?limit=1&offset=1"))).await;
    assert_eq!(first["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(first["tasks"][0], timeline["tasks"][0]);
    assert_eq!(second["tasks"][0], timeline["tasks"][1]);

    // The picture parses as XML and has one bar per task.
    let (status, content_type, svg) =
        get(&sched.url(&format!("/api/job/{job_id}/timeline.svg"))).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "image/svg+xml");
    let bars = count_task_bars(&svg);
    assert_eq!(bars, want.len());
    let (status, _, _) = get(&sched.url("/api/job/nope/timeline.svg")).await;
    assert_eq!(status, 404);
}

/// Parses `svg` as XML (failing the test if it is not) and counts the
/// `<rect class="task ...">` elements.
fn count_task_bars(svg: &[u8]) -> usize {
    let mut reader = quick_xml::Reader::from_reader(svg);
    let mut buf = Vec::new();
    let mut bars = 0;
    loop {
        match reader
            .read_event_into(&mut buf)
            .expect("the SVG is well-formed XML")
        {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e)
                if e.name().as_ref() == b"rect" =>
            {
                let class = e
                    .try_get_attribute("class")
                    .unwrap()
                    .map(|a| a.unescape_value().unwrap().to_string())
                    .unwrap_or_default();
                if class.starts_with("task ") {
                    bars += 1;
                }
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    bars
}

#[test]
fn a_timeline_picture_of_10000_tasks_has_every_bar() {
    let tmp = tempfile::tempdir().unwrap();
    let mut text = job_start("big", "big", 1_000);
    for t in 0..10_000u32 {
        text += &task_end(
            1 + t / 2_500,
            t,
            &format!("exec-{}", t % 8),
            1_000 + u64::from(t),
            t % 997 != 0,
        );
    }
    let path = tmp.path().join("big.eventlog.running");
    std::fs::write(&path, text).unwrap();
    let header = bjh_pictures::timeline::JobHeader {
        job_id: "big".into(),
        state: bjh_format::JobState::Running,
        start_time: 1_000,
        end_time: 0,
        dropped_records: None,
        query_hash: 0,
    };
    let svg = bjh_pictures::timeline::render_svg(&path, &header).unwrap();
    assert_eq!(count_task_bars(svg.as_bytes()), 10_000);
    // Readable: a bounded picture, every executor labelled.
    assert!(svg.len() < 4 * 1024 * 1024, "{} bytes", svg.len());
    for e in 0..8 {
        assert!(svg.contains(&format!(">exec-{e}</text>")));
    }
}
