//! `GET /api/job/{id}/whatif`: a finished job replayed on another cluster
//! shape (`analysis::whatif`), its stage graph and its tasks' partitions
//! read from the stored `/stages` answer.

use crate::error::ApiError;
use crate::params::{Params, check};
use crate::source::{JobSource, Resource, read_log};
use axum::Json;
use axum::extract::{Path, State};
use ballista_api_types::dto::PlanFormat;
use bjh_analysis::whatif::{Layout, MAX_EXECUTORS, MAX_SLOTS, Point, Shape, Work, knee};
use bjh_format::stages::{StagesAnswer, plan_reads, task_slots};
use bjh_store::records::JobRecords;
use http::StatusCode;
use serde::Serialize;
use std::sync::Arc;

/// `GET /api/job/{id}/whatif`'s parameters.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WhatIfParams {
    /// Executors of the shape asked (1 to 10000; default: as observed).
    pub executors: Option<u32>,
    /// Task slots on each executor (1 to 1024; default: as observed).
    pub slots: Option<u32>,
    /// An executor whose tasks run at the pace of the others' on the same
    /// stage (what a bad node cost).
    pub without_executor: Option<String>,
}

/// The shape a job ran on, and whether the log said so or its tasks did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ObservedShape {
    /// Executors that ran a task.
    pub executors: u32,
    /// The most task slots one executor held at once (a task holds one
    /// per partition it computes).
    pub slots: u32,
    /// Always `true` for now: the shape is inferred from the tasks'
    /// concurrency, not recorded.
    pub inferred: bool,
}

/// `GET /api/job/{id}/whatif`'s answer. Times (ms) run from the job's
/// `start_time` to its `end_time`, as the job list has them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WhatIf {
    /// The job.
    pub job_id: String,
    /// What the job took.
    pub observed_ms: u64,
    /// The replay on the observed shape: its difference from
    /// `observed_ms` is the model's error on this job.
    pub replayed_ms: u64,
    /// The replay on `shape`.
    pub predicted_ms: u64,
    /// No task ever waiting for a slot: the floor of any shape.
    pub critical_path_ms: u64,
    /// All task time spread evenly over `shape`'s slots.
    pub ideal_ms: u64,
    /// The shape asked (the observed one without parameters).
    pub shape: Shape,
    /// The shape the job ran on.
    pub observed_shape: ObservedShape,
    /// The executor whose tasks were given the others' pace, if asked.
    pub without_executor: Option<String>,
    /// Without `executors` and `slots`: the prediction for 1, 2, ...
    /// executors of the observed slots, up to the critical path.
    pub curve: Vec<Point>,
    /// The smallest shape of `curve` within 10% of the critical path.
    pub knee: Option<Point>,
}

/// `GET /api/job/{id}/whatif`.
#[utoipa::path(
    get,
    path = "/api/job/{job_id}/whatif",
    tag = "history",
    params(("job_id" = String, Path, description = "The job's id"), WhatIfParams),
    responses(
        (status = 200, description = "The job replayed on another shape, with the replay at its own shape, the critical path and the ideal; without a shape, the curve over executor counts", body = WhatIf),
        (status = 400, description = "A shape out of range, or an executor the job did not use", body = crate::error::ErrorBody),
        (status = 404, description = "No event log of this job here", body = crate::error::ErrorBody),
        (status = 409, description = "The job has not finished", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn get_whatif(
    State(source): State<Arc<dyn JobSource>>,
    Path(job_id): Path<String>,
    Params { value, .. }: Params<WhatIfParams>,
) -> Result<Json<WhatIf>, ApiError> {
    Ok(Json(whatif_of(&*source, job_id, value).await?))
}

/// The what-if of `job_id` for `asked`: the route's answer, and the job
/// page's What-if tab.
pub(crate) async fn whatif_of(
    source: &dyn JobSource,
    job_id: String,
    asked: WhatIfParams,
) -> Result<WhatIf, ApiError> {
    let takes = |max| format!("an integer from 1 to {max}");
    if let Some(e) = asked.executors {
        check(
            "executors",
            e,
            (1..=MAX_EXECUTORS).contains(&e),
            &takes(MAX_EXECUTORS),
        )?;
    }
    if let Some(s) = asked.slots {
        check("slots", s, (1..=MAX_SLOTS).contains(&s), &takes(MAX_SLOTS))?;
    }
    let Some((header, log)) = source.log_of(&job_id) else {
        return Err(ApiError::Missing(format!(
            "no event log of job {job_id} here: a what-if reads the job's log"
        )));
    };
    if header.state.is_unfinished() {
        return Err(ApiError::Conflict(format!(
            "job {job_id} has not finished: a what-if replays a finished job"
        )));
    }
    let records = read_log(&job_id, move || JobRecords::read(&log)).await?;
    let layout = match source
        .get(&job_id, Resource::Stages(PlanFormat::Default))
        .await
    {
        Ok(Some(a)) if a.status == StatusCode::OK => {
            let stages = StagesAnswer::parse(&a.body).stages;
            Layout {
                edges: plan_reads(&stages),
                task_slots: task_slots(&stages),
            }
        }
        _ => Layout::default(),
    };
    let without = match &asked.without_executor {
        None => None,
        Some(id) => Some(
            records
                .executors
                .iter()
                .position(|e| e == id)
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "parameter `without_executor`: executor {id:?} ran no task of job {job_id}"
                    ))
                })? as u32,
        ),
    };
    tokio::task::spawn_blocking(move || {
        let mut work = Work::of(&records, &layout, header.start_time, header.end_time);
        let seen = work.observed_shape();
        let replayed_ms = work.replay(seen);
        if let Some(x) = without {
            work = work.without_executor(x);
        }
        let shape = Shape {
            executors: asked.executors.unwrap_or(seen.executors),
            slots: asked.slots.unwrap_or(seen.slots),
        };
        let critical_path_ms = work.critical_path();
        let curve = if asked.executors.is_some() || asked.slots.is_some() {
            Vec::new()
        } else {
            work.curve(shape.slots)
        };
        WhatIf {
            job_id,
            observed_ms: work.observed_ms(),
            replayed_ms,
            predicted_ms: work.replay(shape),
            critical_path_ms,
            ideal_ms: work.ideal(shape),
            shape,
            observed_shape: ObservedShape {
                executors: seen.executors,
                slots: seen.slots,
                inferred: true,
            },
            without_executor: asked.without_executor,
            knee: knee(&curve, critical_path_ms),
            curve,
        }
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the replay failed: {e}")))
}
