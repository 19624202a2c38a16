//! `GET /api/job/{id}/timeline` (JSON, paged) and `timeline.svg` over the
//! log a source has of a job; the timeline itself (its rows and its
//! picture) is `bjh_pictures::timeline`'s.

use crate::error::ApiError;
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

/// Parses the timeline's query pairs; anything else is a 400 naming it.
pub(crate) fn parse_params(pairs: &[(String, String)]) -> Result<TimelineParams, ApiError> {
    {
        let mut p = TimelineParams::default();
        for (key, value) in pairs {
            let number = || {
                value.parse::<usize>().map_err(|_| {
                    ApiError::BadRequest(format!(
                        "invalid value {value:?} for parameter `{key}`: expected a non-negative integer"
                    ))
                })
            };
            match key.as_str() {
                "limit" => {
                    p.limit = number()?;
                    if p.limit == 0 || p.limit > MAX_LIMIT {
                        return Err(ApiError::BadRequest(format!(
                            "invalid value {value:?} for parameter `limit`: expected an integer \
                             from 1 to {MAX_LIMIT}"
                        )));
                    }
                }
                "offset" => p.offset = number()?,
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "unknown parameter `{other}`: the timeline accepts limit and offset"
                    )));
                }
            }
        }
        Ok(p)
    }
}
