//! `GET /api/job/{id}/timeline` (JSON, paged) and `timeline.svg` over the
//! log a source has of a job; the timeline itself (its rows and its
//! picture) is `bjh_pictures::timeline`'s.

use crate::error::ApiError;
use crate::params::check;
use crate::source::{JSON, JobSource, SVG, read_log};
use bjh_pictures::timeline::{MAX_LIMIT, TimelineParams, read_timeline, render_svg};
use bjh_recording::live::HttpAnswer;

/// Which timeline of a job is asked for.
#[derive(Debug, Clone, Copy)]
pub enum TimelineRequest {
    /// `GET /api/job/{id}/timeline`, one page.
    Json(TimelineParams),
    /// `GET /api/job/{id}/timeline.svg`.
    Svg,
}

/// The job's timeline, read from the log `source` has of it; `Ok(None)`
/// when it has none. The sources hand out logs; the picture is drawn here.
pub(crate) async fn answer(
    source: &dyn JobSource,
    job_id: &str,
    request: TimelineRequest,
) -> Result<Option<HttpAnswer>, ApiError> {
    let Some((header, path)) = source.log_of(job_id) else {
        return Ok(None);
    };
    let reply = read_log(job_id, move || match request {
        TimelineRequest::Json(params) => read_timeline(&path, &header, params)
            .map(|t| HttpAnswer::ok(JSON, serde_json::to_vec(&t).unwrap_or_default())),
        TimelineRequest::Svg => render_svg(&path, &header).map(|svg| HttpAnswer::ok(SVG, svg)),
    })
    .await?;
    Ok(Some(reply.logged()))
}

/// `GET /api/job/{id}/timeline`'s parameters.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Paging {
    /// Tasks per page: 1 to 100000 (default 1000).
    pub limit: Option<usize>,
    /// Tasks skipped (default 0).
    pub offset: Option<usize>,
}

impl Paging {
    /// The page asked for; a limit out of range is a 400 naming it.
    pub fn params(&self) -> Result<TimelineParams, ApiError> {
        let mut p = TimelineParams::default();
        if let Some(limit) = self.limit {
            let takes = "an integer from 1 to 100000";
            check("limit", limit, (1..=MAX_LIMIT).contains(&limit), takes)?;
            p.limit = limit;
        }
        p.offset = self.offset.unwrap_or(p.offset);
        Ok(p)
    }
}
