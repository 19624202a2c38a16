//! Which `Host` a server without a token answers: a guard against DNS
//! rebinding. A web page of another site can point a name of its own at
//! this machine's address, then read the history as a same-origin page
//! would; its requests then carry that name in `Host`. So, without
//! `--api-token-file`, a request is answered only when its `Host` (or
//! HTTP/2 `:authority`) names this server: an IP address (a page at an
//! address is that address's own origin, no rebinding), `localhost` and
//! names under it, this machine's host name, the bind host, and the names
//! `--allowed-hosts` lists (`.example.com` for a domain and every name
//! under it, `*` for any). Anything else gets a 403 that says which flag
//! to use. With a token, a rebound page has no credentials to send, and
//! every host is answered.
//!
//! The scheduler's gRPC (executors and clients, which name the scheduler
//! however their network reaches it) and the health probes are not
//! pages a browser reads: they are answered whatever their host. gRPC is
//! told by what a browser cannot choose, never by a header it can: the
//! request is HTTP/2 over plain TCP (prior knowledge, which no browser
//! speaks; a page reaches this port over HTTP/1.1) and its path is one of
//! the scheduler's gRPC services. A `Content-Type: application/grpc` on
//! an HTTP/1.1 request opens nothing. Without `--event-log-dir` none of
//! this runs: the port is upstream's.

use crate::error::ApiError;
use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

/// The host names a server answers besides addresses and `localhost`.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// Exact names, lowercase.
    names: Vec<String>,
    /// Domains (`.example.com`): the name itself and every name under it.
    domains: Vec<String>,
    /// `*`: every host.
    any: bool,
}

impl AllowedHosts {
    /// `listed` (from `--allowed-hosts` and the bind host) and this
    /// machine's host name.
    pub fn new(listed: &[String]) -> Self {
        let mut hosts = Self::default();
        let machine = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        for entry in listed.iter().map(String::as_str).chain([machine.as_str()]) {
            let entry = entry.trim().trim_end_matches('.').to_ascii_lowercase();
            if entry == "*" {
                hosts.any = true;
            } else if let Some(domain) = entry.strip_prefix('.') {
                if !domain.is_empty() {
                    hosts.domains.push(domain.to_string());
                }
            } else if !entry.is_empty() {
                hosts.names.push(entry);
            }
        }
        hosts
    }

    /// Whether a request whose `Host` is `host` (with or without a port)
    /// is answered.
    pub fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let host = host.trim();
        // `[v6]:port` or `[v6]`: an address.
        if host.starts_with('[') {
            return host
                .strip_prefix('[')
                .and_then(|h| h.split_once(']'))
                .is_some_and(|(ip, _)| ip.parse::<IpAddr>().is_ok());
        }
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name.parse::<IpAddr>().is_ok() || name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        self.names.contains(&name)
            || self.domains.iter().any(|d| {
                name == *d
                    || name
                        .strip_suffix(d.as_str())
                        .is_some_and(|rest| rest.ends_with('.'))
            })
    }
}

/// The path prefixes of the gRPC services a scheduler's port serves
/// (Ballista's scheduler, Arrow Flight's proxy, gRPC's own services).
pub const GRPC_SERVICES: [&str; 3] = ["/ballista.protobuf.", "/arrow.flight.protocol.", "/grpc."];

/// Whether a request is the scheduler's gRPC or a health probe.
pub fn exempt(request: &Request) -> bool {
    let path = request.uri().path();
    path == "/healthz"
        || path == "/readyz"
        || (request.version() == http::Version::HTTP_2
            && GRPC_SERVICES.iter().any(|p| path.starts_with(p)))
}

pub async fn check(
    State(hosts): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            request
                .headers()
                .get(http::header::HOST)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        });
    match host {
        Some(host) if !exempt(&request) && !hosts.allows(&host) => {
            let shown: String = host.chars().take(100).collect();
            ApiError::Forbidden(format!(
                "this server does not answer for the host {shown:?}: name it with \
                 --allowed-hosts, or protect the server with --api-token-file"
            ))
            .into_response()
        }
        // No host at all is no browser's request.
        _ => next.run(request).await,
    }
}

/// `router`, answering only `hosts`.
pub fn guard(router: Router, hosts: AllowedHosts) -> Router {
    router.layer(axum::middleware::from_fn_with_state(Arc::new(hosts), check))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_loopback_and_listed_names_are_answered_and_others_are_not() {
        let hosts = AllowedHosts::new(&[
            "history.internal".into(),
            ".corp.example".into(),
            "Scheduler-1.".into(),
        ]);
        for ok in [
            "127.0.0.1:50050",
            "10.1.2.3",
            "[::1]:50050",
            "[fe80::1]",
            "localhost:50050",
            "LOCALHOST",
            "app.localhost",
            "history.internal:8080",
            "corp.example",
            "a.b.corp.example:1",
            "scheduler-1",
            "scheduler-1.:50050",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:50050",
            "history.internal.evil.example",
            "notcorp.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "[not-an-address]",
            "",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        assert!(AllowedHosts::new(&["*".into()]).allows("evil.example"));
    }
}
