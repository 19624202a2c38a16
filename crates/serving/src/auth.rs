//! Optional bearer-token protection of the REST API (`--api-token-file`).
//!
//! With a token, every request under `/api` (and the assistants' `/mcp`) must carry
//! `Authorization: Bearer <token>`, or is answered 401. The health checks
//! (`/healthz`, `/readyz`) stay open for probes, CORS preflight requests
//! (`OPTIONS`, which browsers send without credentials) are left to the
//! CORS layer, and the scheduler's gRPC services (executors and clients)
//! are not HTTP API routes and are unaffected.
//!
//! The comparison takes the same time wherever the first differing byte
//! is, so response times do not reveal how much of a guess was right.
//!
//! **Browsers sign in to a session, never with the token in a cookie.**
//! The sign-in page checks the token once and opens a session: a random
//! 256-bit id (`getrandom`), kept in this process with its expiry
//! (12 hours) and ended by "Forget token". The cookie
//! (built and read by the `cookie` crate) carries only that id: `HttpOnly`,
//! `SameSite=Strict`, and, when the request came over HTTPS (a TLS proxy's
//! `X-Forwarded-Proto` or `Forwarded`), `Secure` under a `__Host-` name,
//! which no other site or port can set. Cookies ignore ports, so another
//! service on the same host name can still receive it over plain HTTP: an
//! id that expires and can be ended, not the token.
//!
//! **Wrong tokens are slowed per client; the right one never is.** A
//! client is an IPv4 address or an IPv6 /64 (`clients::Client`: one host
//! may use every address of its /64). Its first five wrong tokens (bearer
//! or sign-in) are answered at once; each further one is answered only
//! after a wait that doubles from 1 s up to a minute, and a client's slowed
//! answers leave one at a time, so however many it sends at once it learns
//! about one guess per wait (what it holds meanwhile is bounded by its
//! share of connections, `serving::http`). A right token is checked first
//! and let through at once, whatever else came from its address: behind a
//! proxy or a NAT, where every user shares one address, one user's wrong
//! tokens cannot lock out Prometheus, the TUI or anyone else. A session
//! already open is not a guess and is unaffected. Not `governor`: a rate
//! limiter counts every request it is asked about, while this must count
//! only the wrong ones and never stand in the right one's way.
//!
//! The comparison is `subtle`'s constant-time equality, not ours.

use crate::clients::Client;
use crate::error::ApiError;
use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The token requests must present, with the sessions browsers opened
/// with it and the count of wrong guesses per client.
#[derive(Clone)]
pub struct ApiToken {
    pub token: Arc<[u8]>,
    pub sessions: Arc<Sessions>,
    pub guesses: Arc<Guesses>,
}

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
        ok.then(|| Self {
            token: token.as_bytes().into(),
            sessions: Arc::default(),
            guesses: Arc::default(),
        })
    }

    /// Reads the token from `path` (surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let bytes = bjh_files::read_named(path, 64 * 1024).map_err(|source| TokenError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| TokenError::Invalid(path.display().to_string()))?;
        Self::new(text.trim()).ok_or_else(|| TokenError::Invalid(path.display().to_string()))
    }

    /// Checks `presented` (surrounding whitespace ignored) from the client
    /// of `extensions`, counting it when wrong.
    pub fn check(&self, presented: &[u8], extensions: &http::Extensions) -> Checked {
        if same_bytes(&self.token, presented.trim_ascii()) {
            return Checked::Right;
        }
        bjh_metrics::HistoryMetrics::global().wrong_tokens.inc();
        Checked::Wrong(self.guesses.wrong(Client::of_request(extensions)))
    }

    /// Whether an `Authorization` header value presents this token.
    #[cfg(test)]
    fn permits(&self, authorization: Option<&[u8]>) -> bool {
        same_bytes(&self.token, bearer(authorization.unwrap_or_default()))
    }
}

/// The token of an `Authorization: Bearer <token>` header value (empty
/// for any other scheme).
pub fn bearer(value: &[u8]) -> &[u8] {
    match value.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => value[7..].trim_ascii(),
        _ => b"",
    }
}

/// `expected == presented`, in time that depends on the lengths only.
pub fn same_bytes(expected: &[u8], presented: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(expected.ct_eq(presented))
}

/// What a path is, to the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// A REST API route: the bearer header only.
    Api,
    /// A web page or what a page fetches: the header, or the cookie the
    /// sign-in page sets.
    Page,
    /// Health checks, the sign-in page, the pages' CSS and scripts (which
    /// hold no data), and the scheduler's gRPC services.
    Open,
}

pub fn area(path: &str) -> Area {
    if path == "/api" || path.starts_with("/api/") || path == "/mcp" || path.starts_with("/mcp/") {
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

/// How long a browser's session lasts from its sign-in.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most: past this the oldest ends (a sign-in costs a
/// right token, so only the token's holders can fill it).
pub const MAX_SESSIONS: usize = 10_000;
/// The session cookie's name over plain HTTP.
pub const COOKIE: &str = "ballista_session";
/// Its name over HTTPS: `Secure`, no `Domain`, `Path=/`, so no other
/// site or port can set or overwrite it.
pub const HOST_COOKIE: &str = "__Host-ballista_session";

/// The browsers signed in: session id to when it ends.
#[derive(Default)]
pub struct Sessions(parking_lot::Mutex<HashMap<String, Instant>>);

impl Sessions {
    /// A new session: its id.
    pub fn open(&self) -> String {
        let mut id = [0u8; 32];
        getrandom::fill(&mut id).expect("the operating system's random numbers");
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut sessions = self.0.lock();
        sessions.retain(|_, end| *end > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, end)| **end)
                .map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(id.clone(), now + SESSION_LIFETIME);
        id
    }

    pub fn is_open(&self, id: &str) -> bool {
        self.0
            .lock()
            .get(id)
            .is_some_and(|end| *end > Instant::now())
    }

    pub fn close(&self, id: &str) {
        self.0.lock().remove(id);
    }
}

/// Wrong tokens a client may present before its answers are slowed.
pub const FREE_GUESSES: u32 = 5;
/// The longest wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// A client's count is forgotten this long after its last wrong token.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);
/// Clients counted at most (the oldest are forgotten first).
pub const MAX_CLIENTS: usize = 10_000;

/// Wrong tokens per client: how many, when the last was, and the gate
/// its slowed answers leave through one at a time.
#[derive(Default)]
pub struct Guesses(parking_lot::Mutex<HashMap<Client, Guessing>>);

struct Guessing {
    pub wrong: u32,
    pub last: Instant,
    pub gate: Arc<tokio::sync::Semaphore>,
}

/// How long a wrong token's answer waits, and the gate it waits behind.
pub type Slowed = Option<(Duration, Arc<tokio::sync::Semaphore>)>;

impl Guesses {
    /// Counts a wrong token from `client`: how its answer is slowed
    /// (`None` for one of its free guesses).
    pub fn wrong(&self, client: Client) -> Slowed {
        let now = Instant::now();
        let mut clients = self.0.lock();
        if clients.len() >= MAX_CLIENTS {
            clients.retain(|_, g| g.last + FORGET_AFTER > now);
        }
        if clients.len() >= MAX_CLIENTS
            && let Some(oldest) = clients.iter().min_by_key(|(_, g)| g.last).map(|(k, _)| *k)
        {
            clients.remove(&oldest);
        }
        let g = clients.entry(client).or_insert_with(|| Guessing {
            wrong: 0,
            last: now,
            gate: Arc::new(tokio::sync::Semaphore::new(1)),
        });
        if g.last + FORGET_AFTER <= now {
            g.wrong = 0;
        }
        g.wrong = g.wrong.saturating_add(1);
        g.last = now;
        let over = g.wrong.saturating_sub(FREE_GUESSES);
        (over > 0).then(|| {
            use backon::BackoffBuilder;
            // 1, 2, 4 ... up to a minute (`backon`'s exponential schedule).
            let wait = backon::ExponentialBuilder::new()
                .with_min_delay(Duration::from_secs(1))
                .with_max_delay(MAX_WAIT)
                .without_max_times()
                .build()
                .nth(over.min(64) as usize - 1)
                .unwrap_or(MAX_WAIT);
            (wait, g.gate.clone())
        })
    }
}

/// What a presented token is.
pub enum Checked {
    /// The token.
    Right,
    /// Not the token: answer it once [`Checked::slowed`] resolves.
    Wrong(Slowed),
}

impl Checked {
    /// Waits as long as the client's wrong tokens say, behind its earlier
    /// slowed answers.
    pub async fn slowed(self) {
        if let Checked::Wrong(Some((wait, gate))) = self
            && let Ok(_turn) = gate.acquire_owned().await
        {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Whether a request came over HTTPS, as a TLS proxy in front says.
pub fn over_https(headers: &http::HeaderMap) -> bool {
    let says = |name: &str, word: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.to_ascii_lowercase().contains(word))
    };
    says("x-forwarded-proto", "https") || says("forwarded", "proto=https")
}

/// The session id a request's cookies carry.
pub fn session_id(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .flatten()
        .find(|c| c.name() == COOKIE || c.name() == HOST_COOKIE)
        .map(|c| c.value().to_string())
}

impl ApiToken {
    /// Checks a token typed into the sign-in page by the client of
    /// `extensions`: the `Set-Cookie` value of a new session, or `None`
    /// (answer once the check's wait is over).
    pub async fn sign_in(
        &self,
        typed: &str,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Option<String> {
        match self.check(typed.as_bytes(), extensions) {
            Checked::Right => {}
            wrong => {
                wrong.slowed().await;
                return None;
            }
        }
        let secure = over_https(headers);
        let cookie = cookie::Cookie::build((
            if secure { HOST_COOKIE } else { COOKIE },
            self.sessions.open(),
        ))
        .path("/")
        .http_only(true)
        .secure(secure)
        .same_site(cookie::SameSite::Strict)
        .max_age(cookie::time::Duration::seconds(
            SESSION_LIFETIME.as_secs() as i64
        ));
        Some(cookie.to_string())
    }

    /// Ends the session a request's cookie names: the `Set-Cookie` values
    /// that make the browser forget it.
    pub fn sign_out(&self, headers: &http::HeaderMap) -> [String; 2] {
        if let Some(id) = session_id(headers) {
            self.sessions.close(&id);
        }
        [COOKIE, HOST_COOKIE].map(|name| {
            let mut gone = cookie::Cookie::build((name, ""))
                .path("/")
                .http_only(true)
                .secure(name == HOST_COOKIE)
                .same_site(cookie::SameSite::Strict)
                .build();
            gone.make_removal();
            gone.to_string()
        })
    }
}

pub async fn check(State(token): State<ApiToken>, request: Request, next: Next) -> Response {
    let area = area(request.uri().path());
    if request.method() == http::Method::OPTIONS || area == Area::Open {
        return next.run(request).await;
    }
    if area == Area::Page
        && session_id(request.headers()).is_some_and(|id| token.sessions.is_open(&id))
    {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(|v| bearer(v.as_bytes()));
    if let Some(presented) = presented {
        match token.check(presented, request.extensions()) {
            Checked::Right => return next.run(request).await,
            wrong => {
                wrong.slowed().await;
                return ApiError::Unauthorized(
                    "the bearer token is not the one this server accepts",
                )
                .into_response();
            }
        }
    }
    if area == Area::Page
        && (request.method() == http::Method::GET || request.method() == http::Method::HEAD)
    {
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
        return axum::response::Redirect::to(&to).into_response();
    }
    ApiError::Unauthorized("this API needs an `Authorization: Bearer <token>` header")
        .into_response()
}

/// `router`, protected by `token` when there is one.
pub fn protect(router: Router, token: Option<ApiToken>) -> Router {
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

    #[tokio::test]
    async fn a_sign_in_opens_a_session_whose_cookie_holds_no_token() {
        let token = ApiToken::new("s3cret-Token_1").unwrap();
        let plain = http::HeaderMap::new();
        let mut https = http::HeaderMap::new();
        https.insert("x-forwarded-proto", "https".parse().unwrap());
        let none = http::Extensions::new();
        for (headers, name, secure) in [(&plain, COOKIE, false), (&https, HOST_COOKIE, true)] {
            let set = token
                .sign_in("s3cret-Token_1", headers, &none)
                .await
                .unwrap();
            let parsed = cookie::Cookie::parse(set.clone()).unwrap();
            assert_eq!(parsed.name(), name);
            assert_eq!(parsed.secure(), Some(secure).filter(|s| *s), "{set}");
            assert_eq!(parsed.http_only(), Some(true));
            assert_eq!(parsed.same_site(), Some(cookie::SameSite::Strict));
            assert_eq!(parsed.path(), Some("/"));
            assert!(
                !set.contains("s3cret") && !set.contains(&hex("s3cret-Token_1")),
                "{set}"
            );
            assert_eq!(parsed.value().len(), 64);
            assert!(token.sessions.is_open(parsed.value()));
            // Signing out ends it here, not only in the browser.
            let mut cookies = http::HeaderMap::new();
            cookies.insert(
                http::header::COOKIE,
                format!("x=1; {}={}", parsed.name(), parsed.value())
                    .parse()
                    .unwrap(),
            );
            assert_eq!(session_id(&cookies).as_deref(), Some(parsed.value()));
            let gone = token.sign_out(&cookies);
            assert!(gone.iter().all(|g| g.contains("Max-Age=0")), "{gone:?}");
            assert!(!token.sessions.is_open(parsed.value()));
        }
        assert!(!token.sessions.is_open("00"));
    }

    fn hex(text: &str) -> String {
        text.bytes().map(|b| format!("{b:02x}")).collect()
    }

    fn from(ip: &str) -> http::Extensions {
        let mut from = http::Extensions::new();
        let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 1);
        from.insert(axum::extract::ConnectInfo(addr));
        from
    }

    #[tokio::test(start_paused = true)]
    async fn wrong_tokens_are_answered_ever_later_and_the_right_one_at_once() {
        let token = ApiToken::new("right").unwrap();
        let plain = http::HeaderMap::new();
        let mallory = from("10.0.0.7");
        let timed = |typed: &'static str, who: http::Extensions| {
            let token = token.clone();
            let plain = plain.clone();
            async move {
                let at = tokio::time::Instant::now();
                let opened = token.sign_in(typed, &plain, &who).await.is_some();
                (opened, at.elapsed())
            }
        };
        for _ in 0..FREE_GUESSES {
            assert_eq!(
                timed("wrong", mallory.clone()).await,
                (false, Duration::ZERO)
            );
        }
        // Past the free ones, each wrong answer waits twice as long.
        assert_eq!(
            timed("wrong", mallory.clone()).await,
            (false, Duration::from_secs(1))
        );
        assert_eq!(
            timed("wrong", mallory.clone()).await,
            (false, Duration::from_secs(2))
        );
        // The right token from the same address is let in at once.
        assert_eq!(
            timed("right", mallory.clone()).await,
            (true, Duration::ZERO)
        );
        for _ in 0..10 {
            token.guesses.wrong(Client::of_request(&mallory));
        }
        assert_eq!(timed("wrong", mallory.clone()).await, (false, MAX_WAIT));
        // Another client is not slowed.
        assert_eq!(
            timed("wrong", from("10.0.0.8")).await,
            (false, Duration::ZERO)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_clients_slowed_answers_leave_one_at_a_time_and_a_64_is_one_client() {
        let token = ApiToken::new("right").unwrap();
        let plain = http::HeaderMap::new();
        // Forty addresses of one /64 are one client: five free guesses in all.
        for i in 0..FREE_GUESSES {
            let who = from(&format!("2001:db8:0:1::{i:x}"));
            assert!(token.sign_in("wrong", &plain, &who).await.is_none());
        }
        let at = tokio::time::Instant::now();
        let guesses = (0..4).map(|i| {
            let token = token.clone();
            let plain = plain.clone();
            async move {
                let who = from(&format!("2001:db8:0:1::{:x}", 100 + i));
                token.sign_in("wrong", &plain, &who).await;
                at.elapsed()
            }
        });
        let mut took = futures::future::join_all(guesses).await;
        took.sort();
        // Sent at once, answered one after another: 1 s, then 2, 4 and 8
        // more.
        assert_eq!(
            took,
            [1, 3, 7, 15].map(Duration::from_secs),
            "slowed answers leave one at a time"
        );
        // An address of another /64 is another client.
        let other = from("2001:db8:0:2::1");
        let at = tokio::time::Instant::now();
        assert!(token.sign_in("wrong", &plain, &other).await.is_none());
        assert_eq!(at.elapsed(), Duration::ZERO);
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
            "/mcpx",
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
            "/mcp",
            "/mcp/",
        ] {
            assert!(protected(closed), "{closed}");
        }
    }
}
