//! A decision-support workload (`tests/fixtures/decision/`: seven queries
//! of our own and TPC-DS's q38 (`q8.sql`) over TPC-DS's schema and data, from PyPI's `tpcgen-cli` at
//! scale factor 0.01): many-stage plans, three-way unions, INTERSECT,
//! ROLLUP, window functions over aggregates, and intermediate results that
//! come back empty. Adaptive planning (on by default) replaces a read
//! whose input came back empty with `EmptyExec`, dropping the reads of
//! every input of the operator it replaced, so the plans alone leave
//! stages that feed nothing.
//!
//! For every job, the pages draw the whole graph: every stage but the
//! last feeds another, each stage no plan reads (counted here from the
//! stored plans) by a dashed edge that says it is inferred and why, and
//! no edge passes through a box. (Each query runs under
//! [`QUERY_DEADLINE`]: Ballista 55's adaptive planner sometimes replans a
//! stage that is already running, whose tasks' statuses it then drops, and
//! such a job never ends; q5's empty branch is written to avoid that.) The what-if replay's critical path is at
//! least the longest chain of stages along the plans' reads, each stage
//! counted as its longest task (a lower bound computed here from the
//! stored stages). The workload must prune: at least one job has a stage
//! no plan reads.

use crate::graph::{drawn_edges, graph_faults, noted_edges};
use crate::harness::*;
use datafusion::prelude::ParquetReadOptions;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const TABLES: [&str; 13] = [
    "catalog_returns",
    "catalog_sales",
    "customer",
    "date_dim",
    "inventory",
    "item",
    "reason",
    "store",
    "store_returns",
    "store_sales",
    "warehouse",
    "web_returns",
    "web_sales",
];

/// The workload's queries.
const QUERIES: u32 = 8;

/// Writes TPC-DS's tables at scale factor 0.01 as Parquet into `dir`.
fn generate(dir: &Path) {
    let status = std::process::Command::new("tpcgen-cli")
        .args(["tpcds", "parquet", "-s", "0.01", "--output-dir"])
        .arg(dir)
        .status()
        .expect("tpcgen-cli runs (pip install tpcgen-cli)");
    assert!(status.success());
}

fn query(q: u32) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/decision");
    std::fs::read_to_string(dir.join(format!("q{q}.sql"))).unwrap()
}

/// The `upstream_stage: N` reads of each stage's plan, as `(N, stage)`.
fn plan_reads(stages: &[serde_json::Value]) -> BTreeSet<(u32, u32)> {
    let mut out = BTreeSet::new();
    for s in stages {
        let id: u32 = s["stage_id"].as_str().unwrap().parse().unwrap();
        let plan = s["stage_plan"].as_str().unwrap_or("");
        for (at, _) in plan.match_indices("upstream_stage: ") {
            let digits: String = plan[at + 16..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            out.insert((digits.parse().unwrap(), id));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_tpcgen, ignore = "tpcgen-cli (PyPI) is not installed")]
async fn a_decision_support_workload_draws_every_stage_link_adaptive_planning_pruned() {
    let _heavy = HEAVY.write().await;
    let cluster = Cluster::start(&[]).await;
    let data = cluster.tmp.path().join("tpcds");
    generate(&data);
    for table in TABLES {
        let path = data.join(format!("{table}.parquet"));
        cluster
            .ctx
            .register_parquet(table, path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    let sched = &cluster.sched;
    let mut failures = Vec::new();
    let mut pruned_jobs = Vec::new();
    let mut most_stages = 0;
    for q in 1..=QUERIES {
        let (job_id, result) = run_job(sched, &cluster.ctx, &query(q)).await;
        println!("q{q}: job {job_id}");
        assert!(result.is_ok(), "q{q}: {result:?}");
        indexed_log(sched, &cluster.logs, &job_id).await;
        let whatif_url = sched.url(&format!("/api/job/{job_id}/whatif?executors=1"));
        let answer = get_json(&sched.url(&format!("/api/job/{job_id}/stages"))).await;
        let stages = answer["stages"].as_array().unwrap().clone();
        let ids: BTreeSet<u32> = stages
            .iter()
            .map(|s| s["stage_id"].as_str().unwrap().parse().unwrap())
            .collect();
        most_stages = most_stages.max(ids.len());
        let reads = plan_reads(&stages);
        // The stages whose output no plan reads, the last one aside: each
        // is drawn feeding another, dashed, its link inferred.
        let last = *ids.iter().next_back().unwrap();
        let unread = ids
            .iter()
            .filter(|&&id| id != last && !reads.iter().any(|r| r.0 == id))
            .count();
        if unread > 0 {
            pruned_jobs.push(q);
        }
        let mut faults = Vec::new();
        for path in [
            format!("/ui/job/{job_id}"),
            format!("/ui/job/{job_id}?tab=profile"),
        ] {
            let (status, _, page) = get(&sched.url(&path)).await;
            assert_eq!(status, 200, "q{q} {path}");
            let page = String::from_utf8(page).unwrap();
            for fault in graph_faults(&page, true) {
                faults.push(format!("{path}: {fault}"));
            }
            if drawn_edges(&page) < reads.len() + unread || noted_edges(&page) != unread {
                faults.push(format!(
                    "{path}: {} edges drawn ({} dashed) for {} reads and {unread} unread stages",
                    drawn_edges(&page),
                    noted_edges(&page),
                    reads.len()
                ));
            }
            if unread > 0 && !page.contains("inferred: no stage") {
                faults.push(format!("{path}: no dashed edge says why"));
            }
        }
        let floor = chain_floor(&stages, &reads);
        let whatif = get_json(&whatif_url).await;
        let critical = whatif["critical_path_ms"].as_u64().unwrap();
        if critical + 1 < floor {
            faults.push(format!(
                "critical path {critical} ms, shorter than the stages' longest chain {floor} ms"
            ));
        }
        if !faults.is_empty() {
            failures.push(format!("q{q} ({job_id}): {faults:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!(
        "queries with stages adaptive planning pruned: {pruned_jobs:?}; most stages {most_stages}"
    );
    assert!(
        !pruned_jobs.is_empty(),
        "the workload's empty intermediate results prune at least one read"
    );
    assert!(
        most_stages >= 8,
        "the workload's largest job has {most_stages} stages"
    );
}

/// The longest chain of stages along `links` (`(from, to)`), each stage counted as its
/// busiest task (a stage cannot take less than its longest task): a floor
/// under any critical path that follows the links.
fn chain_floor(stages: &[serde_json::Value], links: &BTreeSet<(u32, u32)>) -> u64 {
    let mut longest: BTreeMap<u32, u64> = BTreeMap::new();
    for s in stages {
        let id: u32 = s["stage_id"].as_str().unwrap().parse().unwrap();
        let task = s["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let (start, end) = (t["start_exec_time"].as_u64()?, t["end_exec_time"].as_u64()?);
                (start > 0 && end >= start).then(|| end - start)
            })
            .max()
            .unwrap_or(0);
        longest.insert(id, task);
    }
    // Stage ids grow along the links (a stage is numbered when it becomes
    // runnable, after its inputs), so one pass in id order settles each.
    let mut reach: BTreeMap<u32, u64> = BTreeMap::new();
    for (&id, &own) in &longest {
        let before = links
            .iter()
            .filter(|l| l.1 == id)
            .filter_map(|l| reach.get(&l.0))
            .max()
            .copied()
            .unwrap_or(0);
        reach.insert(id, before + own);
    }
    reach.values().max().copied().unwrap_or(0)
}
