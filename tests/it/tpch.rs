//! Real queries: the 22 TPC-H queries (`tests/fixtures/tpch/`, the
//! specification's text with its validation parameters; query 15's view
//! written as a `WITH`) over data from PyPI's `tpchgen-cli` at scale factor
//! 0.01, run through a real scheduler and executor. For every job the
//! pages are read back as a user sees them: the stage graph has every edge
//! (every stage but the last feeds another), no edge passes through a box
//! it does not join, and the same holds for the query profile's frames.
//! The job with the most stages is opened in Chromium for the pictures
//! `docs/images/` shows (`BALLISTA_JOB_HISTORY_SCREENSHOTS=docs/images`).

use crate::browser::Browser;
use crate::graph::{drawn_edges, graph_faults, noted_edges};
use crate::harness::*;
use crate::tpch_data::{generate, query, register};
use std::collections::BTreeSet;

/// The stage-to-stage edges a job's stored DOT and stage plans state, each
/// pair once: a DOT edge between two clusters' operators
/// (`stage_1_0 -> stage_2_0_0_0_0`), and each shuffle reader's
/// `upstream_stage: N`.
fn stated_edges(dot: &str, plans: &[(u32, String)]) -> BTreeSet<(u32, u32)> {
    let stage = |node: &str| -> Option<u32> {
        node.trim()
            .strip_prefix("stage_")?
            .split('_')
            .next()?
            .parse()
            .ok()
    };
    let mut out = BTreeSet::new();
    for line in dot.lines() {
        if let Some((a, b)) = line.split_once("->")
            && let (Some(x), Some(y)) = (stage(a), stage(b))
            && x != y
        {
            out.insert((x, y));
        }
    }
    for (id, plan) in plans {
        for (at, _) in plan.match_indices("upstream_stage: ") {
            let rest = &plan[at + "upstream_stage: ".len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            out.insert((digits.parse().unwrap(), *id));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
// One attribute for both tools: two `ignore`s on one test is an error.
#[cfg_attr(
    any(no_tpchgen, no_chromium),
    ignore = "tpchgen-cli (PyPI) or chromium and chromium-driver (Debian) are not installed"
)]
async fn the_22_tpch_queries_draw_whole_stage_graphs_with_no_edge_through_a_box() {
    let _heavy = HEAVY.write().await;
    let cluster = Cluster::start(&[]).await;
    let data = cluster.tmp.path().join("tpch");
    generate(&data, "0.01");
    register(&cluster.ctx, &data).await;
    let sched = &cluster.sched;
    let mut jobs = Vec::new();
    for q in 1..=22 {
        let (job_id, result) = run_job(sched, &cluster.ctx, &query(q)).await;
        assert!(result.is_ok(), "q{q}: {result:?}");
        completed_log(&cluster.logs, &job_id).await;
        jobs.push((q, job_id));
    }
    let mut most = (0, String::new(), 0);
    let mut pruned = Vec::new();
    let mut failures = Vec::new();
    for (q, job_id) in &jobs {
        let answer = get_json(&sched.url(&format!("/api/job/{job_id}/stages"))).await;
        let plans: Vec<(u32, String)> = answer["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let id = s["stage_id"].as_str().unwrap().parse().unwrap();
                (id, s["stage_plan"].as_str().unwrap_or("").to_string())
            })
            .collect();
        let dot =
            String::from_utf8(get(&sched.url(&format!("/api/job/{job_id}/dot"))).await.2).unwrap();
        let expected = stated_edges(&dot, &plans);
        // Adaptive planning replaces a shuffle read whose input turned out
        // empty by `EmptyExec`: the stage it would have read then feeds
        // nothing in the plans. The page draws it feeding the stage it
        // most likely fed, dashed (`decision.rs` checks those), so every
        // stage but the last feeds another. Such jobs are counted and said.
        let last = plans.iter().map(|p| p.0).max().unwrap_or(0);
        let unread = plans
            .iter()
            .filter(|(id, _)| *id != last && !expected.iter().any(|e| e.0 == *id))
            .count();
        if unread > 0 {
            pruned.push(*q);
        }
        let whole = true;
        for path in [
            format!("/ui/job/{job_id}"),
            format!("/ui/job/{job_id}?tab=profile"),
        ] {
            let (status, _, page) = get(&sched.url(&path)).await;
            assert_eq!(status, 200, "q{q} {path}");
            let page = String::from_utf8(page).unwrap();
            let boxes = page.matches(" data-node=\"").count();
            let mut faults = graph_faults(&page, whole);
            if boxes != plans.len() {
                faults.push(format!("{boxes} boxes for {} stages", plans.len()));
            }
            if drawn_edges(&page) != expected.len() + unread || noted_edges(&page) != unread {
                faults.push(format!(
                    "{} edges drawn ({} dashed), the DOT and the plans state {expected:?} \
                     and {unread} stages no plan reads",
                    drawn_edges(&page),
                    noted_edges(&page)
                ));
            }
            if !faults.is_empty() {
                failures.push(format!(
                    "q{q} {path}: {faults:?}\nDOT:\n{dot}\nplans: {plans:?}"
                ));
            }
        }
        if plans.len() > most.2 {
            most = (*q, job_id.clone(), plans.len());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    println!("queries whose plans adaptive planning pruned: {pruned:?}");
    assert!(
        pruned.len() < 11,
        "most queries keep every shuffle read: {pruned:?}"
    );
    let (q, job_id, stages) = most;
    println!("the largest job: q{q}, {stages} stages");
    assert!(stages >= 5, "the largest job has {stages} stages");

    // The largest job as a user opens it: the whole graph in view of the
    // page (not cut off inside a box), and its profile.
    let b = Browser::start().await;
    b.open(&sched.url(&format!("/ui/job/{job_id}"))).await;
    let cut = b
        .js("const box = document.querySelector('.graph-box'); \
             return box.scrollHeight - box.clientHeight;")
        .await;
    assert!(
        cut.as_f64().unwrap() <= 1.0,
        "q{q}: the graph box hides {cut} px"
    );
    b.shot("tpch-job").await;
    b.open(&sched.url(&format!("/ui/job/{job_id}?tab=profile")))
        .await;
    let hot = b
        .js("return document.querySelectorAll('svg.graph.frames rect.hot').length;")
        .await;
    assert_eq!(hot, 3, "q{q}: the three hottest operators are outlined");
    b.shot("tpch-profile").await;
}
