//! What the pages fetch or link beside HTML: the timeline's data (for the
//! canvas), the timeline picture (for pages without scripts) and the raw
//! event log, each behind the same guard as the pages.

use crate::error::ApiError;
use crate::ui::job::{records, stage_stats, stored_stages};
use crate::ui::{Ui, api_error, error};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use ballista_api_types::dto::PlanFormat;
use bjh_pictures::graph::Dot;
use http::StatusCode;
use serde::Serialize;

/// What the timeline script draws: columns of numbers, times relative to
/// `t0`, so 50,000 tasks stay a few hundred kilobytes.
#[derive(Serialize, Default)]
pub struct TimelineData {
    job_id: String,
    status: &'static str,
    t0: u64,
    end: u64,
    complete: bool,
    executors: Vec<String>,
    stages: Vec<TimelineStage>,
    stage: Vec<u32>,
    task: Vec<u32>,
    attempt: Vec<u32>,
    exec: Vec<u32>,
    start: Vec<u64>,
    finish: Vec<u64>,
    failed: Vec<u8>,
    rows_in: Vec<u64>,
    rows_out: Vec<u64>,
}

#[derive(Serialize)]
pub struct TimelineStage {
    id: u32,
    status: String,
    start: u64,
    end: u64,
}

/// `GET /ui/job/{id}/timeline.json`.
pub async fn timeline_data(State(ui): State<Ui>, Path(job_id): Path<String>) -> Response {
    let loaded = match records(&ui, &job_id).await {
        Ok(Some(l)) => l,
        Ok(None) => {
            return ApiError::Missing(format!("no event log of job {job_id} here")).into_response();
        }
        Err(e) => return e.into_response(),
    };
    let (header, records) = loaded;
    let t0 = records
        .tasks
        .iter()
        .map(|t| t.begin())
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(header.start_time);
    let rel = |t: u64| t.saturating_sub(t0);
    let stored = stored_stages(&ui, &job_id, PlanFormat::Default).await;
    let stats = stage_stats(Some(&records), &stored, &Dot::default());
    let n = records.tasks.len();
    let mut d = TimelineData {
        job_id: job_id.clone(),
        status: header.state.status_word(),
        t0,
        end: rel(records
            .tasks
            .iter()
            .map(|t| t.end_exec_time)
            .max()
            .unwrap_or(t0)),
        complete: !header.state.is_unfinished() && header.dropped_records == Some(0),
        executors: records.executors.clone(),
        stages: stats
            .iter()
            .map(|s| TimelineStage {
                id: s.stage_id,
                status: s.status.clone(),
                start: rel(s.start),
                end: rel(s.end),
            })
            .collect(),
        stage: Vec::with_capacity(n),
        task: Vec::with_capacity(n),
        attempt: Vec::with_capacity(n),
        exec: Vec::with_capacity(n),
        start: Vec::with_capacity(n),
        finish: Vec::with_capacity(n),
        failed: Vec::with_capacity(n),
        rows_in: Vec::with_capacity(n),
        rows_out: Vec::with_capacity(n),
    };
    for t in &records.tasks {
        d.stage.push(t.stage_id);
        d.task.push(t.task_id);
        d.attempt.push(t.stage_attempt);
        d.exec.push(t.executor);
        d.start.push(rel(t.begin()));
        d.finish.push(rel(t.end_exec_time.max(t.begin())));
        d.failed.push(u8::from(!t.succeeded()));
        d.rows_in.push(t.input_rows);
        d.rows_out.push(t.output_rows);
    }
    axum::Json(d).into_response()
}

/// `GET /ui/job/{id}/timeline.svg`: the API's picture, for pages without
/// scripts.
pub async fn timeline_svg(State(ui): State<Ui>, Path(job_id): Path<String>) -> Response {
    let svg = crate::timeline::TimelineRequest::Svg;
    match crate::timeline::answer(&*ui.source, &job_id, svg).await {
        Ok(Some(a)) => a.into_response(),
        Ok(None) => error(
            &ui,
            StatusCode::NOT_FOUND,
            &format!("No event log of job {job_id:?} here."),
        ),
        Err(e) => api_error(&ui, e),
    }
}

/// `GET /ui/job/{id}/eventlog`: the API's download, for a page's link.
pub async fn eventlog(State(ui): State<Ui>, Path(job_id): Path<String>) -> Response {
    match crate::router::eventlog(&ui.source, &job_id).await {
        Ok(r) => r,
        Err(e) => api_error(&ui, e),
    }
}
