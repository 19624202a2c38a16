//! `POST /api/sql`: the body is the SQL text; the answer is a JSON array
//! of objects (the default), CSV (`Accept: text/csv`) or an Arrow IPC
//! stream (`Accept: application/vnd.apache.arrow.stream`). An error is a
//! 400 with DataFusion's message in the scheduler's JSON error body.

use crate::serving::error::ApiError;
use crate::serving::sql::{Answer, SqlEngine};
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::{HeaderMap, HeaderValue, header};
use std::sync::Arc;

/// Content type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
/// Header set when rows were cut off at `--sql-max-rows`.
pub const TRUNCATED_HEADER: &str = "x-ballista-sql-truncated";

/// The answer formats, by `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A JSON array of objects.
    Json,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream.
    Arrow,
}

impl Format {
    /// The format an `Accept` header asks for (JSON unless CSV or Arrow is
    /// named).
    pub fn of(headers: &HeaderMap) -> Self {
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
}

/// `answer` written in `format`.
pub fn encode(answer: &Answer, format: Format) -> Result<(Vec<u8>, &'static str), ApiError> {
    use datafusion::arrow::{csv, ipc, json};
    let internal = |e: datafusion::arrow::error::ArrowError| ApiError::Internal(e.to_string());
    let mut out = Vec::new();
    let content_type = match format {
        Format::Json => {
            let mut writer = json::ArrayWriter::new(&mut out);
            for b in &answer.batches {
                writer.write(b).map_err(internal)?;
            }
            writer.finish().map_err(internal)?;
            drop(writer);
            if out.is_empty() {
                out.extend_from_slice(b"[]");
            }
            "application/json"
        }
        Format::Csv => {
            let mut writer = csv::WriterBuilder::new().with_header(true).build(&mut out);
            if answer.batches.is_empty() {
                let empty = datafusion::arrow::array::RecordBatch::new_empty(answer.schema.clone());
                writer.write(&empty).map_err(internal)?;
            }
            for b in &answer.batches {
                writer.write(b).map_err(internal)?;
            }
            drop(writer);
            "text/csv; charset=utf-8"
        }
        Format::Arrow => {
            let mut writer =
                ipc::writer::StreamWriter::try_new(&mut out, &answer.schema).map_err(internal)?;
            for b in &answer.batches {
                writer.write(b).map_err(internal)?;
            }
            writer.finish().map_err(internal)?;
            drop(writer);
            ARROW_STREAM
        }
    };
    Ok((out, content_type))
}

/// The route over `engine`.
pub fn routes(engine: Arc<SqlEngine>) -> Router {
    Router::new()
        .route("/api/sql", post(run_sql))
        .with_state(engine)
}

async fn run_sql(
    State(engine): State<Arc<SqlEngine>>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    if body.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "the request body must be one SQL query, e.g. SELECT count(*) FROM jobs".into(),
        ));
    }
    let answer = engine.query(&body).await?;
    let (bytes, content_type) = encode(&answer, Format::of(&headers))?;
    let mut response = ([(header::CONTENT_TYPE, content_type)], bytes).into_response();
    if answer.truncated {
        response.headers_mut().insert(
            TRUNCATED_HEADER,
            HeaderValue::from(engine.limits().max_rows),
        );
    }
    Ok(response)
}
