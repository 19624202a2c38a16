//! `POST /api/sql`: the query is the body, sent as `Content-Type:
//! application/sql` (the SQL text) or `application/json` (`{"sql": "..."}`);
//! the answer is a JSON array of objects (the default), CSV (`Accept:
//! text/csv`) or an Arrow IPC stream (`Accept:
//! application/vnd.apache.arrow.stream`), streamed from the query's worker
//! with its exact `Content-Length`. An error is the scheduler's JSON error
//! body: 400 for the query's own faults and limits, 415 for another body
//! type, 500 when its worker crashed, 503 when every worker is busy and
//! the queue is full.
//!
//! **Invariant:** no other web site can make the server run SQL. A
//! browser sends a cross-site request without asking first (a CORS
//! preflight) only with `text/plain`, form or multipart bodies (or none),
//! and those are refused; the two types taken need a preflight, and this
//! route is outside the CORS layer, so a preflight grants no origin.

use crate::error::ApiError;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use bjh_sql::SqlEngine;
use bjh_sql::worker::{ARROW_STREAM, Format};
use http::{HeaderMap, HeaderValue, header};
use std::sync::Arc;

/// Header set when rows were cut off at `--sql-max-rows`.
pub const TRUNCATED_HEADER: &str = "x-ballista-sql-truncated";

/// The format an `Accept` header asks for (JSON unless CSV or Arrow is
/// named).
pub fn format_of(headers: &HeaderMap) -> Format {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains(ARROW_STREAM) {
        Format::Arrow
    } else if accept.contains("text/csv") {
        Format::Csv
    } else {
        Format::Json
    }
}

/// The route over `engine`.
pub fn routes(engine: Arc<SqlEngine>) -> Router {
    Router::new()
        .route("/api/sql", post(run_sql))
        .with_state(engine)
}

/// A query sent as `application/json`.
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub(crate) struct SqlRequest {
    /// The SQL text.
    sql: String,
    /// Where it runs: `local` (a worker process of the server's) or
    /// `cluster` (a Ballista job on the cluster's executors); the
    /// server's default (`--sql-engine`) when absent.
    #[serde(default)]
    engine: Option<bjh_sql::Engine>,
}

/// The query a request carries, by its content type, and the engine it
/// asks for.
fn query_of(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(String, Option<bjh_sql::Engine>), ApiError> {
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let text = |b: &[u8]| {
        String::from_utf8(b.to_vec())
            .map_err(|_| ApiError::BadRequest("the query is not UTF-8 text".into()))
    };
    let (sql, engine) = match media.as_str() {
        "application/sql" => (text(body)?, None),
        "application/json" => {
            let request = serde_json::from_slice::<SqlRequest>(body).map_err(|e| {
                ApiError::BadRequest(format!(
                    "the body must be {{\"sql\": \"...\"}} (and optionally \
                     \"engine\": \"local\" or \"cluster\") for application/json: {e}"
                ))
            })?;
            (request.sql, request.engine)
        }
        other => {
            return Err(ApiError::UnsupportedType(format!(
                "send the query as Content-Type: application/sql (the SQL text) or \
                 application/json ({{\"sql\": \"...\"}}), not {}; other types are refused \
                 because any web page could send them",
                if other.is_empty() { "none" } else { other }
            )));
        }
    };
    if sql.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "the request body must be one SQL query, e.g. SELECT count(*) FROM jobs".into(),
        ));
    }
    Ok((sql, engine))
}

/// `POST /api/sql`.
#[utoipa::path(
    post,
    path = "/api/sql",
    tag = "sql",
    request_body(
        description = "One SQL query over the tables `jobs`, `usage`, `whatif`, `whatif_pairs`, `stages`, `tasks` and `operators`",
        content(
            (SqlRequest = "application/json"),
            (String = "application/sql"),
        )
    ),
    responses(
        (status = 200, description = "The rows: JSON objects (the default), CSV (`Accept: text/csv`) or an Arrow IPC stream", content(
            (Vec<Object> = "application/json"),
            ("text/csv"),
            ("application/vnd.apache.arrow.stream"),
        )),
        (status = 400, description = "The query's own fault or a limit it hit", body = crate::error::ErrorBody),
        (status = 415, description = "A body of another type (refused: any web page could send it)", body = crate::error::ErrorBody),
        (status = 500, description = "The query's worker process crashed", body = crate::error::ErrorBody),
        (status = 503, description = "Every worker busy and the queue full: try again soon", body = crate::error::ErrorBody),
    )
)]
pub(crate) async fn run_sql(
    State(sql_engine): State<Arc<SqlEngine>>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Result<Response, ApiError> {
    let (sql, engine) = query_of(&headers, &body).inspect_err(|e| {
        if matches!(e, ApiError::UnsupportedType(_)) {
            sql_engine.refused(bjh_sql::pool::Outcome::WrongType);
        }
    })?;
    let format = format_of(&headers);
    let answer = sql_engine
        .query_on(&sql, format, usize::MAX, engine)
        .await?;
    let mut response = Response::new(Body::from_stream(answer.body));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(answer.bytes));
    if answer.truncated {
        h.insert(
            TRUNCATED_HEADER,
            HeaderValue::from(sql_engine.limits().max_rows),
        );
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_type(t: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = t {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(t).unwrap());
        }
        h
    }

    #[test]
    fn only_bodies_a_browser_must_ask_before_sending_cross_site_carry_a_query() {
        // The CORS-safelisted types (and no type at all) are what a page on
        // another site may send without a preflight.
        for t in [
            None,
            Some("text/plain"),
            Some("text/plain;charset=UTF-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
        ] {
            let e = query_of(&with_type(t), b"SELECT 1").unwrap_err();
            assert_eq!(
                e.status(),
                http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{t:?}"
            );
        }
        assert_eq!(
            query_of(&with_type(Some("application/sql")), b"SELECT 1").unwrap(),
            ("SELECT 1".to_string(), None)
        );
        assert_eq!(
            query_of(
                &with_type(Some("Application/JSON; charset=utf-8")),
                br#"{"sql": "SELECT 2"}"#
            )
            .unwrap(),
            ("SELECT 2".to_string(), None)
        );
        assert_eq!(
            query_of(
                &with_type(Some("application/json")),
                br#"{"sql": "SELECT 3", "engine": "cluster"}"#
            )
            .unwrap(),
            ("SELECT 3".to_string(), Some(bjh_sql::Engine::Cluster))
        );
        let e = query_of(
            &with_type(Some("application/json")),
            br#"{"sql": "SELECT 3", "engine": "gpu"}"#,
        )
        .unwrap_err();
        assert_eq!(e.status(), http::StatusCode::BAD_REQUEST);
        let e = query_of(&with_type(Some("application/json")), b"SELECT 1").unwrap_err();
        assert_eq!(e.status(), http::StatusCode::BAD_REQUEST);
    }
}
