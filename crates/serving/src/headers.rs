//! The headers a server's answers carry beyond a route's own: the
//! version headers the scheduler sends, our `nosniff` and default content
//! security policy, and one CORS policy for every route of the port (the
//! origins an operator named, none by default).

use axum::Router;
use ballista_core::BALLISTA_VERSION;
use ballista_scheduler::config::SchedulerConfig;
use http::{HeaderName, HeaderValue};
/// The CORS policy [`cors`] makes.
pub use tower_http::cors::CorsLayer;
use tower_http::cors::{AllowHeaders, AllowMethods, AllowOrigin};
use tower_http::set_header::SetResponseHeaderLayer;

/// What every answer of a server with a log directory carries: `nosniff`,
/// and, for an answer that sets no policy of its own (a raw log, DOT,
/// SVG, JSON, an error), a policy that runs nothing, loads nothing and
/// may not be framed, so a stored text opened in a browser stays text.
/// The pages set their own (`serving/ui`).
pub fn with_history_headers(router: Router) -> Router {
    router
        .layer(SetResponseHeaderLayer::overriding(
            http::header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            http::header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'; sandbox"),
        ))
}

/// Adds the `Server` and `X-Powered-By` headers the scheduler sends.
pub fn with_version_headers(router: Router) -> Router {
    router
        .layer(SetResponseHeaderLayer::overriding(
            http::header::SERVER,
            HeaderValue::from_str(&format!("ballista/{BALLISTA_VERSION}")).expect("valid header"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("x-powered-by"),
            HeaderValue::from_str(&format!("datafusion/{}", datafusion::DATAFUSION_VERSION))
                .expect("valid header"),
        ))
}

/// The CORS policy of our routes: the origins an operator named
/// (`--cors-allowed-origins`, `*` for any) with the scheduler's methods;
/// without a list, no origin (another site's script reads nothing).
pub fn cors(origins: Option<&str>, config: &SchedulerConfig) -> CorsLayer {
    let origins = match origins.map(str::trim) {
        Some("*") => AllowOrigin::any(),
        Some(listed) => AllowOrigin::list(
            listed
                .split(',')
                .filter_map(|o| o.trim().parse().ok())
                .filter(|o: &HeaderValue| !o.is_empty()),
        ),
        None => AllowOrigin::list(Vec::<HeaderValue>::new()),
    };
    let methods: Vec<http::Method> = config
        .cors_allowed_methods
        .split(',')
        .filter_map(|m| m.trim().parse().ok())
        .filter(|m: &http::Method| !m.as_str().is_empty())
        .collect();
    let methods = match config.cors_allowed_methods.trim() {
        "*" => AllowMethods::any(),
        _ if methods.is_empty() => AllowMethods::list([
            http::Method::GET,
            http::Method::OPTIONS,
            http::Method::PATCH,
        ]),
        _ => AllowMethods::list(methods),
    };
    CorsLayer::new()
        .allow_origin(origins)
        .allow_methods(methods)
        .allow_headers(AllowHeaders::any())
}

/// Upstream's routes behind ours on a recording scheduler, their own
/// CORS answers taken off (they grant upstream's default origins), then
/// ours added: one policy for every route of the port.
pub fn under_our_cors(router: Router, cors: CorsLayer) -> Router {
    router
        .layer(axum::middleware::map_response(
            |mut response: axum::response::Response| async move {
                let headers = response.headers_mut();
                let granted: Vec<HeaderName> = headers
                    .keys()
                    .filter(|k| k.as_str().starts_with("access-control-"))
                    .cloned()
                    .collect();
                for name in granted {
                    headers.remove(name);
                }
                response
            },
        ))
        .layer(cors)
}
