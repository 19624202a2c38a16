//! Live pages without polling: a running job's page, in Chromium, follows
//! its event stream (`/ui/events`). A real job's log (recorded by a real
//! scheduler and executor) is replayed into the directory of a
//! history-only server, a few task records at a time, as the scheduler
//! wrote it: the page's timeline grows in place (the same element, never
//! emptied), the page is never reloaded, and when the log completes the
//! page shows the job ended and stops following it. Then the stream's
//! bounds: past its limit a stream is refused and the page falls back to
//! fetching itself.

use crate::browser::Browser;
use crate::harness::*;
use std::io::Write;

/// Appends `lines` to `path`.
fn append(path: &std::path::Path, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
    f.sync_all().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    no_chromium,
    ignore = "chromium and chromium-driver (Debian) are not installed"
)]
async fn a_running_jobs_page_grows_from_its_event_stream_without_a_reload() {
    // A real job with several task records.
    let cluster = Cluster::start(&[]).await;
    let sql = "SELECT a.k, count(*) FROM t a JOIN t b ON a.k = b.k GROUP BY a.k";
    let (job, result) = run_job(&cluster.sched, &cluster.ctx, sql).await;
    assert!(result.is_ok(), "{result:?}");
    let lines = completed_log(&cluster.logs, &job).await;
    let kinds = kinds(&lines);
    let tasks: Vec<usize> = (0..lines.len())
        .filter(|&i| kinds[i] == "TaskEnd")
        .collect();
    assert!(tasks.len() >= 4, "{kinds:?}");
    // The scheduler writes the start and the task records as they come,
    // the stages and the end last.
    let last_task = *tasks.last().unwrap();
    assert!(
        kinds[..=last_task]
            .iter()
            .all(|k| k == "JobStart" || k == "TaskEnd")
    );

    let tmp = tempfile::tempdir().unwrap();
    let running = tmp.path().join(format!("{job}.eventlog.running"));
    append(&running, &lines[..=tasks[0]]);
    let mut server = Proc::history(tmp.path(), &["--update-interval-seconds", "1"]);
    server.wait_healthy().await;
    eventually("the server lists the job as running", || async {
        get_json(&server.url("/api/jobs?status=running"))
            .await
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["job_id"] == job.as_str())
    })
    .await;

    let b = Browser::start().await;
    b.open(&server.url(&format!("/ui/job/{job}"))).await;
    assert_eq!(b.js("return document.body.dataset.refresh;").await, "5");
    b.until(
        "the event stream is live",
        "document.body.dataset.events === 'live'",
    )
    .await;
    b.until(
        "the first task is drawn",
        "document.getElementById('timeline').dataset.tasks === '1'",
    )
    .await;
    // Marks that a reload or a redrawn timeline would lose.
    b.js("window.sameDocument = true; \
          const t = document.getElementById('timeline'); t.marked = true; \
          t.querySelector('canvas').marked = true; return true;")
        .await;

    // Half the remaining task records, then the rest: the timeline grows.
    let half = tasks.len() / 2;
    append(&running, &lines[tasks[0] + 1..=tasks[half]]);
    b.until(
        "the timeline grows to half",
        &format!(
            "document.getElementById('timeline').dataset.tasks === '{}'",
            half + 1
        ),
    )
    .await;
    append(&running, &lines[tasks[half] + 1..=last_task]);
    b.until(
        "the timeline grows to every task",
        &format!(
            "document.getElementById('timeline').dataset.tasks === '{}'",
            tasks.len()
        ),
    )
    .await;
    let same = b
        .js("const t = document.getElementById('timeline'); \
             return [window.sameDocument === true, t.marked === true, \
                     t.querySelector('canvas').marked === true, Number(t.dataset.grown || 0)];")
        .await;
    let same = same.as_array().unwrap();
    assert_eq!(
        same[..3],
        [true, true, true],
        "reloaded or redrawn: {same:?}"
    );
    assert!(same[3].as_u64().unwrap() >= 2, "grown in place: {same:?}");

    // The job ends: its log completes as the writer completes it.
    append(&running, &lines[last_task + 1..]);
    std::fs::rename(&running, tmp.path().join(format!("{job}.eventlog"))).unwrap();
    b.until(
        "the page stops following the job",
        "!document.body.dataset.refresh",
    )
    .await;
    assert_eq!(b.text("dl.facts dd").await, "Completed");
    assert_eq!(b.js("return window.sameDocument === true;").await, true);
    b.shot("job-followed").await;
    drop(b);
    streams_past_the_limit_are_refused(&server).await;
}

/// One client's 17th stream at once is refused with `Retry-After` (another
/// client is still served); a stream's end gives its place back.
async fn streams_past_the_limit_are_refused(server: &Proc) {
    const PER_CLIENT: usize = 16;
    let from = |ip: [u8; 4]| {
        reqwest::Client::builder()
            .no_proxy()
            .local_address(std::net::IpAddr::from(ip))
            .build()
            .unwrap()
    };
    let one = from([127, 0, 0, 21]);
    let mut open = Vec::new();
    for _ in 0..PER_CLIENT {
        let r = one.get(server.url("/ui/events")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        open.push(r);
    }
    let refused = one.get(server.url("/ui/events")).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let other = from([127, 0, 0, 22]);
    let served = other.get(server.url("/ui/events")).send().await.unwrap();
    assert_eq!(served.status(), 200, "another client is served");
    // A stream sends its first event at once.
    let first = open[0].chunk().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).starts_with("event: change"),
        "{first:?}"
    );
    drop(open);
    eventually("the places are given back", || async {
        one.get(server.url("/ui/events"))
            .send()
            .await
            .unwrap()
            .status()
            == 200
    })
    .await;
}
