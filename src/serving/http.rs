//! Serving a port with bounds: what both modes listen with.
//!
//! `axum::serve` sets no timer, so a client that sends half a request
//! header holds its connection (and a descriptor) forever, and nothing
//! caps how many connections there are. Here each connection is served by
//! hyper-util's HTTP/1 and HTTP/2 builder (the one `axum::serve` uses)
//! with a header read timeout, which hyper also applies to an idle
//! keep-alive connection waiting for its next request; and a connection
//! over the cap is closed as soon as it is accepted, so the descriptors
//! the process has are never used up by clients (a rescan that then
//! could not list the directory would be kept out too). HTTP/2 clients
//! (the scheduler's executors and clients over gRPC) are not subject to
//! the header timeout: it is an HTTP/1 rule.
//!
//! **Invariant:** at most `max_connections` connections are served at
//! once, and an HTTP/1 connection that has not sent a whole request
//! header within `header_timeout` (from its start, or from its last
//! answer) is closed.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// The bounds of one listening port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// How long an HTTP/1 client may take to send a request's header,
    /// from its connection's start or its last answer.
    pub header_timeout: Duration,
    /// Connections served at once; more are closed when accepted.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown`
/// resolves, then waits for the connections under way to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    refused: prometheus::IntCounter,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it
                    // was accepted: wait a little rather than spin.
                    log::warn!("history: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused.inc();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service =
            router
                .clone()
                .map_request(move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    request
                });
        let service = hyper_util::service::TowerToHyperService::new(service);
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                log::debug!("history: a connection from {peer} ended: {e}");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
