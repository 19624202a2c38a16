//! Serving a port with bounds: what both modes listen with.
//!
//! `axum::serve` sets no timer, caps nothing and waits for every
//! connection on shutdown, so a client that sends half a request header,
//! a bare HTTP/2 preface, or opens a thousand idle connections holds them
//! (and their descriptors) for ever, and one open event stream keeps a
//! stopping server alive. Here each connection is served by hyper-util's
//! HTTP/1 and HTTP/2 builder (the one `axum::serve` uses) with:
//!
//! - **a share per client** ([`crate::clients`]: an IPv4 address
//!   or an IPv6 /64) and a total: a connection over either is closed as
//!   soon as it is accepted, so one client cannot take the port from the
//!   others (the executors' gRPC shares the port on a live scheduler);
//! - **a first-request deadline** (`header_timeout`): a connection that
//!   has not begun a request by then is closed, whatever it sent (nothing
//!   at all, half a header, an HTTP/2 preface and settings); hyper's own
//!   header timer also closes an HTTP/1 connection idle between requests;
//! - **an idle deadline** (`idle_timeout`): an HTTP/2 connection with no
//!   request or answer under way for that long is closed (GOAWAY); an
//!   answer still being sent (an event stream, a large log) is under way;
//!   HTTP/2 pings find peers that went away without a word;
//! - **a drain deadline** on shutdown (`drain_timeout`): every connection
//!   is asked to finish (its streams end on the server's `stopping`
//!   token), and those still open after the deadline are closed.
//!
//! **Invariant:** at most `max_connections` connections are served at
//! once, at most `max_connections_per_client` from one client; a
//! connection that begins no request within `header_timeout`, or stays
//! idle for `idle_timeout`, is closed; [`serve`] returns at most
//! `drain_timeout` (and the close of what remains) after `shutdown`.

use crate::clients::{Client, Share, Shares};
use axum::Router;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The bounds of one listening port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// How long a connection may take to begin its first request (and an
    /// HTTP/1 client to send a request's header, from its connection's
    /// start or its last answer).
    pub header_timeout: Duration,
    /// Connections served at once; more are closed when accepted.
    pub max_connections: usize,
    /// Connections one client (an IPv4 address, an IPv6 /64) may hold.
    pub max_connections_per_client: usize,
    /// How long an HTTP/2 connection may stay with no request under way.
    pub idle_timeout: Duration,
    /// How long a stopping server waits for its connections to finish
    /// before closing them.
    pub drain_timeout: Duration,
}

impl HttpLimits {
    /// Clients needed to take every connection by default: each may hold
    /// this fraction of them (64 of 1,024), so a few hosts holding their
    /// share leave room for everyone else.
    pub const CLIENTS_TO_FILL: usize = 16;
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_connections_per_client: 1024 / Self::CLIENTS_TO_FILL,
            idle_timeout: Duration::from_secs(120),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// How often an HTTP/2 connection is pinged, and how long an answer to a
/// ping may take before the connection is closed.
pub const PING_EVERY: Duration = Duration::from_secs(30);
pub const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Requests one HTTP/2 connection may have under way at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 128;

/// Serves `router` on `listener` within `limits` until `shutdown`
/// resolves; then cancels `stopping` (every stream of the server ends),
/// asks each connection to finish, and closes those still open after
/// `limits.drain_timeout`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    refused: prometheus::IntCounter,
    stopping: CancellationToken,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let shares = Shares::new(limits.max_connections, limits.max_connections_per_client);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(PING_EVERY)
        .keep_alive_timeout(PING_TIMEOUT)
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    let builder = Arc::new(builder);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
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
        let Ok(share) = shares.take(Client::of(peer.ip())) else {
            refused.inc();
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(serve_one(
            builder.clone(),
            stream,
            peer,
            router.clone(),
            limits,
            stopping.clone(),
            share,
        ));
    }
    drop(listener);
    stopping.cancel();
    let drained = tokio::time::timeout(limits.drain_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        log::warn!(
            "history: {} connections still open {:?} after shutdown began; closing them",
            connections.len(),
            limits.drain_timeout
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    Ok(())
}

/// One connection, from accept to close; `_share` is its client's.
pub async fn serve_one(
    builder: Arc<Builder<TokioExecutor>>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    router: Router,
    limits: HttpLimits,
    stopping: CancellationToken,
    _share: Share,
) {
    let activity = Arc::new(Activity::new());
    let counted = activity.clone();
    let service = tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        let under_way = counted.begin();
        request.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                axum::body::Body::new(UnderWay {
                    body,
                    _under_way: under_way,
                })
            }))
        }
    });
    let service = hyper_util::service::TowerToHyperService::new(service);
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .into_owned();
    tokio::pin!(connection);
    // Once asked to finish, a connection has the drain deadline to do so.
    let mut finish_by: Option<Instant> = None;
    loop {
        let closing = finish_by.is_some();
        let deadline = finish_by.unwrap_or_else(|| Instant::now() + limits.drain_timeout);
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(e) = ended {
                    log::debug!("history: a connection from {peer} ended: {e}");
                }
                return;
            }
            () = stopping.cancelled(), if !closing => {
                connection.as_mut().graceful_shutdown();
                finish_by = Some(Instant::now() + limits.drain_timeout);
            }
            () = activity.idle(limits.header_timeout, limits.idle_timeout), if !closing => {
                // Nothing under way: a client that does not answer the
                // GOAWAY's ping within the header timeout is cut.
                connection.as_mut().graceful_shutdown();
                let grace = limits.header_timeout.min(limits.drain_timeout);
                finish_by = Some(Instant::now() + grace);
            }
            () = tokio::time::sleep_until(deadline), if closing => return,
        }
    }
}

/// What a connection has under way: requests begun and not yet answered
/// to their last byte, and when that last changed.
pub struct Activity {
    under_way: AtomicUsize,
    begun: AtomicBool,
    since: parking_lot::Mutex<Instant>,
    changed: tokio::sync::Notify,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    /// Nothing under way yet, as of now.
    pub fn new() -> Self {
        Self {
            under_way: AtomicUsize::new(0),
            begun: AtomicBool::new(false),
            since: parking_lot::Mutex::new(Instant::now()),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// A request begins: under way until the guard (held by its answer's
    /// body) is dropped.
    pub fn begin(self: &Arc<Self>) -> Ended {
        self.begun.store(true, Ordering::Release);
        self.under_way.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        Ended(self.clone())
    }

    /// Resolves once nothing has been under way for `idle` (`first`
    /// before the first request began).
    pub async fn idle(&self, first: Duration, idle: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.under_way.load(Ordering::Acquire) > 0 {
                changed.await;
                continue;
            }
            let wait = if self.begun.load(Ordering::Acquire) {
                idle
            } else {
                first
            };
            let deadline = *self.since.lock() + wait;
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if self.under_way.load(Ordering::Acquire) == 0 {
                        return;
                    }
                }
                () = changed => {}
            }
        }
    }
}

/// A request under way; its end is noted when dropped.
pub struct Ended(Arc<Activity>);

impl Drop for Ended {
    fn drop(&mut self) {
        let activity = &self.0;
        *activity.since.lock() = Instant::now();
        activity.under_way.fetch_sub(1, Ordering::AcqRel);
        activity.changed.notify_waiters();
    }
}

/// An answer's body that keeps its request under way until it is sent
/// whole or dropped (an event stream, a log being downloaded).
pub struct UnderWay {
    body: axum::body::Body,
    _under_way: Ended,
}

impl http_body::Body for UnderWay {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_with_nothing_under_way() {
        let activity = Arc::new(Activity::new());
        let first = Duration::from_secs(10);
        let idle = Duration::from_secs(120);
        // No request yet: idle after the first-request deadline.
        let start = Instant::now();
        activity.idle(first, idle).await;
        assert_eq!(start.elapsed(), first);
        // A request under way keeps it busy however long it takes.
        let under_way = activity.begin();
        let waiting = tokio::spawn({
            let activity = activity.clone();
            async move {
                let at = Instant::now();
                activity.idle(first, idle).await;
                at.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_secs(1000)).await;
        assert!(!waiting.is_finished());
        drop(under_way);
        // Then the idle deadline counts from its end.
        assert_eq!(waiting.await.unwrap(), Duration::from_secs(1000) + idle);
    }
}
