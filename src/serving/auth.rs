//! Optional bearer-token protection of the REST API (`--api-token-file`).
//!
//! With a token, every request under `/api` must carry
//! `Authorization: Bearer <token>`, or is answered 401. The health checks
//! (`/healthz`, `/readyz`) stay open for probes, CORS preflight requests
//! (`OPTIONS`, which browsers send without credentials) are left to the
//! CORS layer, and the scheduler's gRPC services (executors and clients)
//! are not HTTP API routes and are unaffected.
//!
//! The comparison takes the same time wherever the first differing byte
//! is, so response times do not reveal how much of a guess was right.

use crate::serving::error::ApiError;
use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::path::Path;
use std::sync::Arc;

/// The token requests must present.
#[derive(Clone)]
pub struct ApiToken(Arc<[u8]>);

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

/// Why a token was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read.
    #[error("cannot read the API token file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Empty, or not usable in an HTTP header.
    #[error(
        "the API token file {0} must hold one token of visible ASCII characters \
         (surrounding whitespace and a trailing newline are ignored)"
    )]
    Invalid(String),
}

impl ApiToken {
    /// A token: visible ASCII, at least one character.
    pub(crate) fn new(token: &str) -> Option<Self> {
        let ok = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic());
        ok.then(|| Self(token.as_bytes().into()))
    }

    /// Reads the token from `path` (surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::new(text.trim()).ok_or_else(|| TokenError::Invalid(path.display().to_string()))
    }

    /// Whether `presented` is this token.
    pub(crate) fn is(&self, presented: &str) -> bool {
        same_bytes(&self.0, presented.trim().as_bytes())
    }

    /// Whether an `Authorization` header value presents this token.
    pub(crate) fn permits(&self, authorization: Option<&[u8]>) -> bool {
        let presented = authorization
            .and_then(|v| {
                let scheme = v.get(..7)?;
                scheme
                    .eq_ignore_ascii_case(b"bearer ")
                    .then(|| v[7..].trim_ascii())
            })
            .unwrap_or_default();
        same_bytes(&self.0, presented)
    }
}

/// `expected == presented`, in time that depends on the lengths only.
fn same_bytes(expected: &[u8], presented: &[u8]) -> bool {
    let mut diff = u8::from(expected.len() != presented.len());
    for (i, &e) in expected.iter().enumerate() {
        let p = presented.get(i).copied().unwrap_or(!e);
        diff |= std::hint::black_box(e ^ p);
    }
    diff == 0
}

/// What a path is, to the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Area {
    /// A REST API route: the bearer header only.
    Api,
    /// A web page or what a page fetches: the header, or the cookie the
    /// sign-in page sets.
    Page,
    /// Health checks, the sign-in page, the pages' CSS and scripts (which
    /// hold no data), and the scheduler's gRPC services.
    Open,
}

fn area(path: &str) -> Area {
    if path == "/api" || path.starts_with("/api/") {
        Area::Api
    } else if path == "/ui/login" || path == "/ui/logout" || path.starts_with("/ui/assets/") {
        Area::Open
    } else if path == "/" || path == "/ui" || path.starts_with("/ui/") {
        Area::Page
    } else {
        Area::Open
    }
}

/// Whether `path` is a REST API route the token protects.
#[cfg(test)]
fn protected(path: &str) -> bool {
    area(path) == Area::Api
}

/// The cookie the sign-in page sets: the token, hex-encoded (a token may
/// hold characters a cookie value may not).
pub(crate) const COOKIE: &str = "ballista_token";

/// The `Set-Cookie` value that signs a browser in with `token`: sent back
/// on same-site requests only, never readable by scripts.
pub(crate) fn sign_in_cookie(token: &str) -> String {
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{COOKIE}={hex}; Path=/; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value that forgets the token.
pub(crate) const SIGN_OUT_COOKIE: &str =
    "ballista_token=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0";

/// The token a request's cookies carry, decoded.
fn cookie_token(headers: &http::HeaderMap) -> Option<Vec<u8>> {
    let hex = headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

async fn check(State(token): State<ApiToken>, request: Request, next: Next) -> Response {
    let area = area(request.uri().path());
    let exempt = request.method() == http::Method::OPTIONS || area == Area::Open;
    let presented = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    if exempt || token.permits(presented) {
        return next.run(request).await;
    }
    if area == Area::Page {
        if cookie_token(request.headers()).is_some_and(|t| same_bytes(&token.0, &t)) {
            return next.run(request).await;
        }
        // A page asks for the token and comes back here.
        let back = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let to = format!(
            "/ui/login?{}",
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("next", &back)
                .finish()
        );
        if request.method() == http::Method::GET || request.method() == http::Method::HEAD {
            return axum::response::Redirect::to(&to).into_response();
        }
    }
    if presented.is_none() {
        ApiError::Unauthorized("this API needs an `Authorization: Bearer <token>` header")
            .into_response()
    } else {
        ApiError::Unauthorized("the bearer token is not the one this server accepts")
            .into_response()
    }
}

/// `router`, protected by `token` when there is one.
pub(crate) fn protect(router: Router, token: Option<ApiToken>) -> Router {
    match token {
        Some(token) => router.layer(axum::middleware::from_fn_with_state(token, check)),
        None => router,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_is_accepted() {
        let token = ApiToken::new("s3cret-Token_1").unwrap();
        assert!(token.permits(Some(b"Bearer s3cret-Token_1")));
        assert!(token.permits(Some(b"bearer  s3cret-Token_1 ")));
        for wrong in [
            &b"Bearer s3cret-Token_"[..],
            b"Bearer s3cret-Token_11",
            b"Bearer S3cret-Token_1",
            b"Basic s3cret-Token_1",
            b"s3cret-Token_1",
            b"Bearer ",
            b"Bearer",
            b"",
        ] {
            assert!(
                !token.permits(Some(wrong)),
                "{}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(!token.permits(None));
    }

    #[test]
    fn unusable_tokens_are_refused() {
        for bad in ["", "two words", "tab\there", "ünïcode"] {
            assert!(ApiToken::new(bad).is_none(), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  abc123\n").unwrap();
        assert!(
            ApiToken::from_file(&path)
                .unwrap()
                .permits(Some(b"Bearer abc123"))
        );
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(
            ApiToken::from_file(&path),
            Err(TokenError::Invalid(_))
        ));
        let missing = ApiToken::from_file(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("cannot read"), "{missing}");
        assert!(!format!("{:?}", ApiToken::new("abc123").unwrap()).contains("abc123"));
    }

    #[test]
    fn the_comparison_looks_at_every_byte() {
        assert!(same_bytes(b"abc", b"abc"));
        assert!(!same_bytes(b"abc", b"abd"));
        assert!(!same_bytes(b"abc", b"xbc"));
        assert!(!same_bytes(b"abc", b"ab"));
        assert!(!same_bytes(b"abc", b"abcd"));
        assert!(!same_bytes(b"\xff", b""));
    }

    #[test]
    fn the_cookie_carries_any_token_back() {
        for token in ["abc", "a;b,c\"d=", "~!@#$%^&*()"] {
            let set = sign_in_cookie(token);
            let value = set.split(';').next().unwrap();
            let mut headers = http::HeaderMap::new();
            headers.insert(
                http::header::COOKIE,
                format!("x=1; {value}").parse().unwrap(),
            );
            assert_eq!(cookie_token(&headers).unwrap(), token.as_bytes(), "{set}");
        }
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::COOKIE, "ballista_token=zz".parse().unwrap());
        assert_eq!(cookie_token(&headers), None);
    }

    #[test]
    fn pages_are_guarded_and_their_assets_are_not() {
        for page in ["/", "/ui/job/x", "/ui/job/x/eventlog", "/ui/queries"] {
            assert_eq!(area(page), Area::Page, "{page}");
        }
        for open in ["/ui/login", "/ui/assets/ui.css", "/healthz"] {
            assert_eq!(area(open), Area::Open, "{open}");
        }
    }

    #[test]
    fn health_checks_and_non_api_paths_are_not_protected() {
        for open in [
            "/healthz",
            "/readyz",
            "/apis",
            "/ballista.protobuf.SchedulerGrpc/PollWork",
        ] {
            assert!(!protected(open), "{open}");
        }
        for closed in [
            "/api",
            "/api/jobs",
            "/api/job/x/stages",
            "/api/metrics",
            "/api/state",
        ] {
            assert!(protected(closed), "{closed}");
        }
    }
}
