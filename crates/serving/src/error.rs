//! `ApiError`: every failure a route answers, as the scheduler's JSON error
//! body (`{"http_code", "reason", "error"}`). Messages never carry file
//! paths: details go to the log.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};

/// An error answered as the scheduler's JSON error body.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No such job (or no such response of it).
    #[error("not found")]
    NotFound,
    /// Not found, with a reason worth telling the client.
    #[error("{0}")]
    Missing(String),
    /// A bad parameter.
    #[error("{0}")]
    BadRequest(String),
    /// Something failed on our side; the message says what, without paths.
    #[error("{0}")]
    Internal(String),
    /// The API is protected by a token and the request did not carry it.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// Too much work already under way; the client may try again soon.
    #[error("{0}")]
    Busy(String),
    /// This client has its share of such work under way already.
    #[error("{0}")]
    TooMany(String),
    /// A request body of a type the route does not take.
    #[error("{0}")]
    UnsupportedType(String),
    /// A request this server does not answer (a Host header that does not
    /// name it).
    #[error("{0}")]
    Forbidden(String),
    /// A request the resource cannot answer in its present state (a
    /// replay of a job still running).
    #[error("{0}")]
    Conflict(String),
}

/// The JSON body of every error: the scheduler's own shape.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    /// The status code.
    http_code: u16,
    /// The status's reason phrase.
    reason: Option<&'static str>,
    /// What went wrong (never a file path).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound | ApiError::Missing(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::UnsupportedType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = match &self {
            ApiError::Busy(_) | ApiError::TooMany(_) => Some("1".to_string()),
            _ => None,
        };
        let error = match self {
            ApiError::NotFound => None,
            ApiError::Missing(e)
            | ApiError::BadRequest(e)
            | ApiError::Internal(e)
            | ApiError::Busy(e)
            | ApiError::TooMany(e)
            | ApiError::UnsupportedType(e)
            | ApiError::Forbidden(e)
            | ApiError::Conflict(e) => Some(e),
            ApiError::Unauthorized(e) => Some(e.to_string()),
        };
        let body = ErrorBody {
            http_code: status.as_u16(),
            reason: status.canonical_reason(),
            error,
        };
        let mut response = (status, Json(body)).into_response();
        if let Some(seconds) = retry_after.and_then(|s| http::HeaderValue::from_str(&s).ok()) {
            response.headers_mut().insert(header::RETRY_AFTER, seconds);
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer realm=\"ballista\""),
            );
        }
        response
    }
}

impl From<bjh_sql::SqlError> for ApiError {
    fn from(e: bjh_sql::SqlError) -> Self {
        match e {
            bjh_sql::SqlError::BadRequest(m) => ApiError::BadRequest(m),
            bjh_sql::SqlError::Busy(m) => ApiError::Busy(m),
            bjh_sql::SqlError::Internal(m) => ApiError::Internal(m),
        }
    }
}

/// The status an SQL error is answered with: the one its [`ApiError`] has.
pub fn sql_status(e: &bjh_sql::SqlError) -> StatusCode {
    ApiError::from(e.clone()).status()
}
