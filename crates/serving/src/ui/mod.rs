//! The web UI: server-rendered pages over the same [`JobSource`] as the
//! REST routes, served by the same binary with `--event-log-dir`.
//!
//! - `/`: the jobs (`jobs`);
//! - `/ui/job/{id}` and `/ui/job/{id}/stage/{n}`: a job (`job`) and a
//!   stage (`stage`), with the stage graph drawn from the stored DOT
//!   (`graph`), the profile (`profile`) and the what-if replay's curve
//!   (`whatif`); what their scripts fetch and their links download
//!   (`data`);
//! - `/ui/queries` and `/ui/compare?a=&b=`: recurring queries and a
//!   comparison of two runs (`insight`);
//! - `/ui/accuracy`: the what-if replays graded against the next runs
//!   (`accuracy`);
//! - `/ui/usage`: how full the cluster was and who used it (`usage`);
//! - `/ui/sql?q=`: SQL over the history, with the documented questions
//!   (`sql`);
//! - `/ui/events`: server-sent events telling a live page when what it
//!   shows changed (`events`);
//! - `/ui/login`: asks for the API token when the server has one;
//! - `/ui/assets/*`: the one CSS file and the scripts, compiled in.
//!
//! Pages are complete without scripts (the timeline aside); the scripts
//! show times in the viewer's zone, refresh live pages when their event
//! stream says they changed (every few seconds without one), filter the
//! config and draw the timeline on a canvas, growing it as tasks end.
//!
//! **Invariants:** every text from a log reaches a page through maud's
//! escaping splice; pages are served with a content security policy that
//! allows this server's own scripts and styles only; a page refuses no
//! request the API would accept and shows nothing the API would refuse
//! (the token guards both, see `auth`).

pub(crate) mod accuracy;
pub(crate) mod clusters;
pub(crate) mod data;
pub(crate) mod events;
pub(crate) mod insight;
pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod page;
pub(crate) mod profile;
pub(crate) mod sql;
pub(crate) mod stage;
pub(crate) mod usage;
pub(crate) mod whatif;

use crate::auth::ApiToken;
use crate::params::Params;
use crate::source::JobSource;
use axum::Router;
use axum::extract::{Form, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use bjh_store::LogStore;
use http::{HeaderValue, StatusCode, header};
use maud::{Markup, html};
use std::sync::Arc;

/// What every page handler holds.
#[derive(Clone)]
pub struct Ui {
    pub source: Arc<dyn JobSource>,
    /// The log directory behind the source, for the recurring queries.
    pub store: Option<Arc<LogStore>>,
    /// A live scheduler (else a history server).
    pub live: bool,
    /// The scheduler's id, shown in the top bar.
    pub scheduler_id: String,
    /// The API token, when the server has one.
    pub token: Option<ApiToken>,
    /// The SQL engine, when the server answers SQL.
    pub sql: Option<Arc<bjh_sql::SqlEngine>>,
    /// The server's live-page event streams.
    pub hub: Arc<events::EventHub>,
    /// How the Usage page prices slot time.
    pub usage: crate::usage::UsageSettings,
}

/// The pages, over what `ui` holds.
pub fn routes(ui: Ui) -> Router {
    Router::new()
        .route("/", get(jobs::page))
        .route("/ui", get(|| async { Redirect::permanent("/") }))
        .route("/ui/", get(|| async { Redirect::permanent("/") }))
        // Pages that replay, diagnose or compare: a share per client.
        .route(
            "/ui/job/{job_id}",
            get(job::page).route_layer(axum::middleware::from_fn(crate::heavy::one_share)),
        )
        .route("/ui/job/{job_id}/stage/{stage_id}", get(stage::stage_page))
        .route("/ui/job/{job_id}/timeline.json", get(data::timeline_data))
        .route("/ui/job/{job_id}/timeline.svg", get(data::timeline_svg))
        .route("/ui/job/{job_id}/eventlog", get(data::eventlog))
        .route("/ui/queries", get(insight::queries_page))
        .route(
            "/ui/compare",
            get(insight::compare_page)
                .route_layer(axum::middleware::from_fn(crate::heavy::one_share)),
        )
        .route(
            "/ui/accuracy",
            get(accuracy::page).route_layer(axum::middleware::from_fn(crate::heavy::one_share)),
        )
        .route("/ui/usage", get(usage::page))
        .route("/ui/clusters", get(clusters::page))
        .route("/ui/sql", get(sql::page))
        .route("/ui/sql.csv", get(sql::csv))
        .route("/ui/events", get(events::events))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", axum::routing::post(logout))
        .route("/ui/assets/{name}", get(asset))
        .route("/ui/{*rest}", get(not_found))
        .with_state(ui)
}

/// The policy every page is served with: this server's scripts, styles and
/// fetches only; no frames; no plugins.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A page as a response, with the policy.
pub fn html_response(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An error page with `status`.
pub fn error(ui: &Ui, status: StatusCode, message: &str) -> Response {
    let title = match status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::BAD_REQUEST => "Bad request",
        _ => "Something went wrong",
    };
    html_response(status, page::error_page(ui, title, message))
}

/// An `ApiError` as an error page.
pub fn api_error(ui: &Ui, e: crate::error::ApiError) -> Response {
    let message = match &e {
        crate::error::ApiError::NotFound => "No such job here.".to_string(),
        other => other.to_string(),
    };
    error(ui, e.status(), &message)
}

pub async fn not_found(State(ui): State<Ui>) -> Response {
    error(
        &ui,
        StatusCode::NOT_FOUND,
        "There is no page at this address. The job list is the way in.",
    )
}

pub struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// An asset of `assets/`, served under its file name.
macro_rules! asset {
    ($name:literal, $content_type:literal) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_str!(concat!("assets/", $name)),
        }
    };
}

pub const ASSETS: &[Asset] = &[
    asset!("ui.css", "text/css; charset=utf-8"),
    asset!("ui.js", "text/javascript; charset=utf-8"),
    asset!("timeline.js", "text/javascript; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
];

pub async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                // URLs carry the version, so a day's caching is safe.
                (header::CACHE_CONTROL, "public, max-age=86400"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            a.body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// Where the sign-in page sends the browser on.
#[derive(serde::Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Next {
    /// A path of this server (else the list).
    #[serde(default)]
    next: String,
}

/// Where to go after signing in: a path of this server, else the list.
pub fn local(next: &str) -> &str {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control);
    if ok { next } else { "/" }
}

pub fn login_form(ui: &Ui, next: &str, alert: Option<&str>) -> Markup {
    page::frame(
        ui,
        "API token",
        page::Nav::None,
        false,
        html! {
            h1 { "This server needs its API token" }
            p {
                "The scheduler was started with " code { "--api-token-file" }
                ". Paste the token from that file to browse its jobs. The browser is signed \
                 in for 12 hours (the token itself is never stored in it), until you choose \
                 “Forget token”."
            }
            @if let Some(alert) = alert {
                p.error-box role="alert" { (alert) }
            }
            form.login method="post" action="/ui/login" {
                input type="hidden" name="next" value=(local(next));
                label for="token" { "API token" }
                input id="token" name="token" type="password" autocomplete="current-password"
                    required autofocus;
                button type="submit" { "Sign in" }
            }
        },
    )
}

pub async fn login_page(
    State(ui): State<Ui>,
    Params { value: next, .. }: Params<Next>,
) -> Response {
    if ui.token.is_none() {
        return Redirect::to(local(&next.next)).into_response();
    }
    html_response(StatusCode::OK, login_form(&ui, &next.next, None))
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
}

pub async fn login(
    State(ui): State<Ui>,
    headers: http::HeaderMap,
    extensions: http::Extensions,
    Form(form): Form<LoginForm>,
) -> Response {
    let Some(token) = &ui.token else {
        return Redirect::to(local(&form.next)).into_response();
    };
    match token.sign_in(&form.token, &headers, &extensions).await {
        Some(cookie) => {
            let mut response = Redirect::to(local(&form.next)).into_response();
            if let Ok(cookie) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            response
        }
        None => {
            let wrong = "That token is not the one this server accepts.";
            html_response(
                StatusCode::UNAUTHORIZED,
                login_form(&ui, &form.next, Some(wrong)),
            )
        }
    }
}

pub async fn logout(State(ui): State<Ui>, headers: http::HeaderMap) -> Response {
    let mut response = Redirect::to("/ui/login").into_response();
    if let Some(token) = &ui.token {
        for gone in token.sign_out(&headers) {
            if let Ok(gone) = HeaderValue::from_str(&gone) {
                response.headers_mut().append(header::SET_COOKIE, gone);
            }
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::local;

    #[test]
    fn sign_in_goes_back_to_this_server_only() {
        assert_eq!(local("/ui/job/x?tab=config"), "/ui/job/x?tab=config");
        for away in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "",
            "x",
        ] {
            assert_eq!(local(away), "/", "{away}");
        }
    }
}
