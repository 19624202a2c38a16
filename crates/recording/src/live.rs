//! What the recorder needs of the live scheduler ([`LiveScheduler`]: its
//! answers, rendered by its own REST router, and a job's status), the
//! shape of one whole HTTP answer, and a job's API path. The adapter to
//! upstream's router is serving's (`serving/live.rs`).
//!
//! Rendering a job's responses through the scheduler's own router is what
//! makes a stored response identical to the live one: there is no second
//! implementation of the responses to drift.

use ballista_core::serde::protobuf::{JobStatus, job_status};
use bytes::Bytes;
use http::StatusCode;

/// One whole HTTP answer about a job: the live router's, or one replayed
/// from an event log.
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// Body bytes.
    pub body: Bytes,
    /// Whether the answer came from an event log rather than the live
    /// scheduler (sent as the `x-ballista-history` header).
    pub from_log: bool,
}

impl HttpAnswer {
    /// A 200 with `body` of `content_type`.
    pub fn ok(content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status: StatusCode::OK,
            content_type: Some(content_type.to_string()),
            body: body.into(),
            from_log: false,
        }
    }

    /// The same answer, marked as read from an event log.
    pub fn logged(mut self) -> Self {
        self.from_log = true;
        self
    }

    /// The body as UTF-8 text, if it is.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }
}

/// What of a job id is percent-encoded in a path: all but RFC 3986's
/// unreserved characters, so an id stays one path segment.
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `/api/job/{id}{rest}`, with the id percent-encoded where needed (by
/// the `percent-encoding` crate, the `url` crate's own encoder).
pub fn job_path(job_id: &str, rest: &str) -> String {
    let id = percent_encoding::utf8_percent_encode(job_id, NOT_UNRESERVED);
    format!("/api/job/{id}{rest}")
}

/// What the recorder asks of the running scheduler: its answers, rendered
/// by its own REST router, a job's status and its id. Serving's `LiveApi`
/// (the adapter to upstream's router) answers it; the recorder knows only
/// this.
#[async_trait::async_trait]
pub trait LiveScheduler: Send + Sync {
    /// `GET` through the scheduler's router, in process.
    async fn get(&self, path_and_query: &str) -> HttpAnswer;
    /// The job's status as the scheduler holds it, if it holds the job.
    async fn job_status(&self, job_id: &str) -> Option<JobStatus>;
    /// The scheduler's id.
    fn scheduler_id(&self) -> &str;
}

/// Whether a status is terminal (succeeded or failed; a cancelled job is a
/// failed one to the scheduler).
pub fn is_terminal(status: &JobStatus) -> bool {
    matches!(
        status.status,
        Some(job_status::Status::Successful(_)) | Some(job_status::Status::Failed(_))
    )
}

/// Header set on answers served from an event log.
pub const FROM_LOG_HEADER: &str = "x-ballista-history";

impl axum::response::IntoResponse for HttpAnswer {
    fn into_response(self) -> axum::response::Response {
        let mut response = axum::response::IntoResponse::into_response((self.status, self.body));
        if let Some(ct) = self.content_type.and_then(|c| c.parse().ok()) {
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, ct);
        }
        if self.from_log {
            response
                .headers_mut()
                .insert(FROM_LOG_HEADER, http::HeaderValue::from_static("event-log"));
        }
        response
    }
}
