//! What-if predictions graded against real runs: TPC-H queries over
//! `tpchgen-cli`'s data through real clusters of three shapes (1 executor
//! of 1 slot, 1 of 2, 2 of 1), each query twice at each shape. Every job's
//! replay at its own shape is compared with what it took (the model's
//! error on the job), and its predictions for the two other shapes with
//! what those shapes' runs of the same query took, beside the run-to-run
//! noise of the same runs and the naive prediction "as long as this run".
//! The figures are printed (`--nocapture`) for `docs/diagnosis.md`.

use crate::harness::*;
use crate::tpch_data::{generate, query, register};
use std::path::Path;

/// The shapes: executors x task slots each.
const SHAPES: [(u32, u32); 3] = [(1, 1), (1, 2), (2, 1)];
/// Queries whose tasks take a second or more here at [`SCALE`].
const QUERIES: [u32; 4] = [1, 3, 6, 12];
/// TPC-H scale factor.
const SCALE: &str = "1";

/// One job: its query, the shape it ran on (index into [`SHAPES`]), what
/// it took and its replay at each shape.
struct Run {
    query: u32,
    shape: usize,
    observed: u64,
    predicted: [u64; 3],
    inferred: (u64, u64),
    replayed: u64,
}

/// `|got - want| / want`.
fn rel(got: u64, want: u64) -> f64 {
    (got as f64 - want as f64).abs() / want.max(1) as f64
}

/// The median and the p90 (nearest rank) of `v`.
fn median_p90(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (rank(0.5), rank(0.9))
}

/// Runs every query twice on a fresh cluster of `SHAPES[shape]`, and asks
/// each job's replay at every shape; the scheduler is handed back so that
/// its executors stay in touch with it until the end.
async fn runs_at(tmp: &Path, data: &Path, shape: usize) -> (Proc, Vec<Run>) {
    let (executors, slots) = SHAPES[shape];
    let logs = tmp.join(format!("logs-{executors}x{slots}"));
    let mut sched = Proc::scheduler(&logs, &[]);
    sched.wait_healthy().await;
    for _ in 0..executors {
        start_executor_with(sched.port, slots as usize).await;
    }
    eventually("every executor registered", || async {
        get_json(&sched.url("/api/executors"))
            .await
            .as_array()
            .unwrap()
            .len()
            == executors as usize
    })
    .await;
    let csv = write_csv(tmp, &format!("t{shape}.csv"), 10);
    let options = [("datafusion.execution.target_partitions", "4")];
    let ctx = client_with(sched.port, &csv, &options).await;
    register(&ctx, data).await;
    let mut runs = Vec::new();
    for q in QUERIES {
        for _ in 0..2 {
            let (job_id, result) = run_job(&sched, &ctx, &query(q)).await;
            assert!(result.is_ok(), "q{q} on {executors}x{slots}: {result:?}");
            indexed_log(&sched, &logs, &job_id).await;
            let own = sched.url(&format!("/api/job/{job_id}/whatif"));
            let mut predicted = [0; 3];
            let mut observed = 0;
            let mut inferred = (0, 0);
            for (i, (e, s)) in SHAPES.iter().enumerate() {
                let url = sched.url(&format!("/api/job/{job_id}/whatif?executors={e}&slots={s}"));
                let w = get_json(&url).await;
                predicted[i] = w["predicted_ms"].as_u64().unwrap();
                observed = w["observed_ms"].as_u64().unwrap();
                // The job's start recorded the cluster the test made.
                let seen = &w["observed_shape"];
                let made =
                    serde_json::json!({"executors": executors, "slots": slots, "inferred": false});
                assert_eq!(seen, &made, "{w}");
                inferred = (
                    seen["executors"].as_u64().unwrap(),
                    seen["slots"].as_u64().unwrap(),
                );
            }
            let replayed = get_json(&own).await["replayed_ms"].as_u64().unwrap();
            runs.push(Run {
                query: q,
                shape,
                observed,
                predicted,
                inferred,
                replayed,
            });
        }
    }
    (sched, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(no_tpchgen, ignore = "tpchgen-cli (PyPI) is not installed")]
async fn predictions_for_other_shapes_are_graded_against_their_real_runs() {
    let _heavy = HEAVY.write().await;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("tpch");
    generate(&data, SCALE);
    let mut runs = Vec::new();
    let mut schedulers = Vec::new();
    for shape in 0..SHAPES.len() {
        let (sched, at) = runs_at(tmp.path(), &data, shape).await;
        schedulers.push(sched);
        runs.extend(at);
    }
    let (mut own, mut cross, mut naive, mut noise) = (vec![], vec![], vec![], vec![]);
    for a in &runs {
        own.push(rel(a.replayed, a.observed));
        for b in runs
            .iter()
            .filter(|b| b.query == a.query && !std::ptr::eq(*b, a))
        {
            if b.shape == a.shape {
                noise.push(rel(a.observed, b.observed));
            } else {
                cross.push(rel(a.predicted[b.shape], b.observed));
                naive.push(rel(a.observed, b.observed));
            }
        }
    }
    let pct = |(m, p): (f64, f64)| (m * 100.0, p * 100.0);
    let (own, cross, naive, noise) = (
        pct(median_p90(own)),
        pct(median_p90(cross)),
        pct(median_p90(naive)),
        pct(median_p90(noise)),
    );
    println!("what-if grading, TPC-H SF {SCALE}, queries {QUERIES:?}, shapes {SHAPES:?}:");
    for r in &runs {
        let (e, s) = SHAPES[r.shape];
        println!(
            "  q{} on {e}x{s} (seen {:?}): observed {} ms, replayed at 1x1/1x2/2x1 {:?} ms, at the seen shape {} ms",
            r.query, r.inferred, r.observed, r.predicted, r.replayed
        );
    }
    println!(
        "  self-replay error     median {:5.1}%  p90 {:5.1}%",
        own.0, own.1
    );
    println!(
        "  cross-shape error     median {:5.1}%  p90 {:5.1}%",
        cross.0, cross.1
    );
    println!(
        "  run-to-run noise      median {:5.1}%  p90 {:5.1}%",
        noise.0, noise.1
    );
    println!(
        "  naive (same as run)   median {:5.1}%  p90 {:5.1}%",
        naive.0, naive.1
    );
    // Met here with room: the replay at the shape a job ran on within 5%
    // at the median. Predictions for the other shapes aim under half the
    // naive error and are asserted under three quarters of it: clean-clone
    // runs have given 0.27 (the documented run), 0.51 (17.1% against
    // 33.4%) and 0.62 (18.4% against 29.8%, its noise 6.8%): the naive
    // error is itself the difference of two noisy runs. The cross-shape
    // median within 10 points of the noise's and the p90 within 15 were
    // met in the latest run by margins smaller than this machine moves
    // them; printed, not asserted (`docs/diagnosis.md`).
    assert!(own.0 < 5.0, "self-replay median {:.1}%", own.0);
    assert!(
        cross.0 < naive.0 * 0.75,
        "cross median {:.1}% against naive {:.1}%",
        cross.0,
        naive.0
    );
    drop(schedulers);

    // The history grades itself: a history server over all 24 logs pairs
    // each query's consecutive runs. The same pairs, made here from the
    // order the runs were made in, with the per-job answers above.
    let all = tmp.path().join("all");
    std::fs::create_dir(&all).unwrap();
    for (e, s) in SHAPES {
        for entry in std::fs::read_dir(tmp.path().join(format!("logs-{e}x{s}"))).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|x| x == "eventlog") {
                std::fs::copy(&path, all.join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    let mut history = Proc::history(&all, &[]);
    history.wait_healthy().await;
    eventually("every log is indexed", || async {
        job_ids(&history).await.len() == runs.len()
    })
    .await;
    let graded = get_json(&history.url("/api/whatif/accuracy?limit=200")).await;
    println!(
        "  /api/whatif/accuracy: across shapes {}, same shape {}",
        graded["across_shapes"], graded["same_shape"]
    );
    let (mut across, mut same) = (vec![], vec![]);
    for q in QUERIES {
        let mine: Vec<&Run> = runs.iter().filter(|r| r.query == q).collect();
        for w in mine.windows(2) {
            let (a, b) = (w[0], w[1]);
            let error = rel(a.predicted[b.shape], b.observed);
            if a.shape == b.shape {
                same.push(error)
            } else {
                across.push(error)
            }
        }
    }
    let near = |v: &serde_json::Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-3;
    assert_eq!(graded["across_shapes"]["pairs"], across.len(), "{graded:#}");
    assert_eq!(graded["same_shape"]["pairs"], same.len());
    let (m, p) = median_p90(across);
    assert!(
        near(&graded["across_shapes"]["median_error"], m),
        "{graded:#}: {m}"
    );
    assert!(
        near(&graded["across_shapes"]["p90_error"], p),
        "{graded:#}: {p}"
    );
    assert!(near(
        &graded["same_shape"]["median_error"],
        median_p90(same).0
    ));
    assert_eq!(graded["queries"].as_array().unwrap().len(), QUERIES.len());
    assert_eq!(
        graded["by_kind"]["executors and slots"]["pairs"],
        QUERIES.len()
    );
}
