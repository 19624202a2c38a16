//! Serving: answering HTTP requests about jobs.
//!
//! A [`source::JobSource`] is where answers come from (the live scheduler,
//! the store, or live then store); the list query, the timeline and the
//! router are the same code for every source; `insight` serves what
//! `analysis` computes (diagnosis, recurring queries, comparison); `ui`
//! renders web pages from the same source; `sql` answers SQL over the
//! history in worker processes over the columnar history; `auth` guards
//! `/api` and the pages; `hosts` answers only the names of this server
//! when it has no token; `http` serves a port within bounds; `words`
//! writes numbers and durations one way for pages and pictures;
//! `openapi` describes the routes; `job_metrics` adds the job-level series
//! to `/api/metrics`; `mcp` offers the routes to assistants as tools;
//! `clients` says who a client is, for its share of connections, streams
//! and wrong tokens.
//!
//! **Per server, never per process:** what one port's routes share (its
//! stop signal, its live streams, its job-level series) is a
//! [`PerServer`], made once for each server, so two servers in one
//! process (an embedder's) never share a cap or a series.
//!
//! **Rule:** this layer imports `format`, `metrics`, `recording` (for the
//! live scheduler's router), `store`, `analysis` and `columnar`; nothing
//! below it imports it, and it never imports `server`.

pub mod auth;
pub(crate) mod clients;
pub mod error;
pub(crate) mod headers;
pub(crate) mod hosts;
pub mod http;
pub mod insight;
pub(crate) mod job_metrics;
pub(crate) mod live;
pub(crate) mod mcp;
pub(crate) mod openapi;
pub mod router;
pub mod source;
pub mod sql;
pub mod timeline;
pub(crate) mod ui;
pub(crate) mod words;

/// What the routes of one server share.
#[derive(Clone)]
pub(crate) struct PerServer {
    /// Cancelled when the server begins to stop: every stream it serves
    /// ends then.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
    /// Its live-page event streams.
    pub(crate) hub: std::sync::Arc<ui::events::EventHub>,
    /// Its job-level series of `/api/metrics` (with a log directory).
    pub(crate) gauges: Option<std::sync::Arc<job_metrics::JobGauges>>,
}

impl PerServer {
    /// A server's shares, with the job-level series of `store` (the `top`
    /// recurring queries) when it has one.
    pub(crate) fn new(store: Option<&std::sync::Arc<crate::store::LogStore>>, top: usize) -> Self {
        let stopping = tokio_util::sync::CancellationToken::new();
        let looks = crate::metrics::HistoryMetrics::global()
            .live_page_looks
            .clone();
        Self {
            hub: ui::events::EventHub::new(stopping.clone(), looks),
            stopping,
            gauges: store.map(|s| job_metrics::gauges(s.clone(), top)),
        }
    }
}
