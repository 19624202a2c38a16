//! The rows of SQL's `whatif` table (`bjh_sql::whatif`): each recurring
//! query's newest completed run replayed, as `GET /api/job/{id}/whatif`
//! replays it, on its own shape and on the others `whatif::shapes` names.
//! A run replayed once is kept (its log does not change) while it is
//! still its query's newest, so a query over the table reads only the
//! logs of runs new since the last. And the rows of `whatif_pairs`: the
//! pairs `GET /api/whatif/accuracy` grades, kept the same way.

use crate::source::JobSource;
use crate::whatif::load;
use bjh_analysis::whatif::{MAX_EXECUTORS, MAX_SLOTS, Shape, Work};
use bjh_format::JobState;
use bjh_format::query_hash::hash_text;
use bjh_sql::whatif::{MAX_QUERIES, PairRow, WhatIfRow, shapes};
use bjh_store::LogStore;
use bjh_store::query::JobFacts;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Replays kept by run, and graded pairs by pair of runs.
#[derive(Default)]
pub struct Kept {
    runs: Mutex<HashMap<String, Vec<WhatIfRow>>>,
    pairs: crate::whatif::KeptPairs,
}

/// The `whatif_pairs` rows: the newest [`bjh_sql::whatif::MAX_PAIRS`]
/// pairs of consecutive completed runs of each query, graded.
pub async fn pairs(
    source: Arc<dyn JobSource>,
    store: Arc<LogStore>,
    kept: &Kept,
) -> Result<Vec<PairRow>, String> {
    let graded = crate::whatif::accuracy_kept(
        source,
        store,
        None,
        bjh_sql::whatif::MAX_PAIRS,
        Some(&kept.pairs),
        false,
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(graded
        .pairs
        .into_iter()
        .map(|p| PairRow {
            query_label: bjh_format::query_hash::parse_hash(&p.query_hash)
                .and_then(bjh_store::labels::get)
                .map(|l| l.to_string()),
            kind: p.kind().to_string(),
            earlier_shape: (p.shape_a.executors, p.shape_a.slots),
            later_shape: (p.shape_b.executors, p.shape_b.slots),
            partitions: (p.partitions_a, p.partitions_b),
            query_hash: p.query_hash,
            earlier_job_id: p.a,
            later_job_id: p.b,
            predicted_ms: p.predicted_ms,
            actual_ms: p.actual_ms,
            naive_ms: p.naive_ms,
        })
        .collect())
}

/// The table's rows: the newest completed run of each of the
/// [`MAX_QUERIES`] most recently run recurring queries (newest queued
/// first), replayed on each shape. A run whose log cannot be read is left
/// out.
pub async fn predictions(
    source: &dyn JobSource,
    store: Arc<LogStore>,
    kept: &Kept,
) -> Result<Vec<WhatIfRow>, String> {
    let newest: Vec<(u64, String, Option<String>)> = tokio::task::spawn_blocking(move || {
        store.with_completed(|jobs| {
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            for job in jobs {
                if job.state() == JobState::Completed
                    && job.query_hash() != 0
                    && seen.insert(job.query_hash())
                {
                    out.push((
                        job.query_hash(),
                        job.job_id().to_string(),
                        job.scheduler_id().map(str::to_string),
                    ));
                    if out.len() >= MAX_QUERIES {
                        break;
                    }
                }
            }
            out
        })
    })
    .await
    .map_err(|e| format!("listing the runs failed: {e}"))?;
    let mut rows = Vec::new();
    for (hash, job_id, scheduler_id) in &newest {
        let known = kept.runs.lock().get(job_id).cloned();
        let replayed = match known {
            Some(r) => r,
            None => {
                let Ok(loaded) = load(source, job_id).await else {
                    continue;
                };
                let (hash, id, scheduler_id) = (*hash, job_id.clone(), scheduler_id.clone());
                let r = tokio::task::spawn_blocking(move || {
                    replays(&loaded.work, hash, &id, scheduler_id)
                })
                .await
                .map_err(|e| format!("the replay failed: {e}"))?;
                kept.runs.lock().insert(job_id.clone(), r.clone());
                r
            }
        };
        rows.extend(replayed);
    }
    let wanted: HashSet<&String> = newest.iter().map(|n| &n.1).collect();
    kept.runs.lock().retain(|id, _| wanted.contains(id));
    Ok(rows)
}

/// One run's rows: replayed on each shape within the replay's limits.
fn replays(work: &Work, hash: u64, job_id: &str, scheduler_id: Option<String>) -> Vec<WhatIfRow> {
    let seen = work.observed_shape();
    let replayed_ms = work.replay(seen);
    let critical_path_ms = work.critical_path();
    let label = bjh_store::labels::get(hash).map(|l| l.to_string());
    shapes(seen.executors, seen.slots)
        .into_iter()
        .filter(|&(e, s)| (1..=MAX_EXECUTORS).contains(&e) && (1..=MAX_SLOTS).contains(&s))
        .map(|(executors, slots)| {
            let shape = Shape { executors, slots };
            WhatIfRow {
                query_hash: hash_text(hash),
                query_label: label.clone(),
                job_id: job_id.to_string(),
                scheduler_id: scheduler_id.clone(),
                observed_executors: seen.executors,
                observed_slots: seen.slots,
                shape_inferred: !work.shape_recorded(),
                executors,
                slots,
                observed_ms: work.observed_ms(),
                replayed_ms,
                predicted_ms: work.replay(shape),
                critical_path_ms,
                ideal_ms: work.ideal(shape),
            }
        })
        .collect()
}
