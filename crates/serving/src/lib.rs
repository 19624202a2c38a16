//! Serving: answering HTTP requests about jobs.
//!
//! A [`source::JobSource`] is where answers come from (the live scheduler,
//! the store, or live then store); the list query, the timeline and the
//! router are the same code for every source; `insight` and `whatif` serve
//! what `analysis` computes (diagnosis, recurring queries, comparison,
//! replays on other cluster shapes); `ui`
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
//! **Rule:** this crate imports every layer below it: `format`, `files`,
//! `metrics`, `store`, `recording` (the live scheduler's adapter and the
//! task tap), `analysis`, `columnar`, `sql` and `pictures`; only the
//! process on top (the plugin and the binary) imports it.

#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod auth;
pub mod clients;
pub mod clusters;
pub mod error;
pub mod fuzzing;
pub mod headers;
pub mod heavy;
pub mod hosts;
pub mod http;
pub mod insight;
pub mod job_metrics;
pub mod jobs_params;
pub mod live;
pub mod mcp;
pub mod openapi;
pub mod params;
pub mod router;
pub mod source;
pub mod sql_route;
pub mod timeline;
pub mod ui;
pub mod usage;
pub mod walks;
pub mod whatif;
pub mod whatif_sql;

/// What the routes of one server share.
#[derive(Clone)]
pub struct PerServer {
    /// Cancelled when the server begins to stop: every stream it serves
    /// ends then.
    pub stopping: tokio_util::sync::CancellationToken,
    /// Its live-page event streams.
    pub hub: std::sync::Arc<ui::events::EventHub>,
    /// Its job-level series of `/api/metrics` (with a log directory).
    pub gauges: Option<std::sync::Arc<job_metrics::JobGauges>>,
    /// How `/api/usage` and the Usage page price slot time.
    pub usage: usage::UsageSettings,
}

impl PerServer {
    /// A server's shares, with the job-level series of `store` (the `top`
    /// recurring queries) when it has one.
    pub fn new(store: Option<&std::sync::Arc<bjh_store::LogStore>>, top: usize) -> Self {
        let stopping = tokio_util::sync::CancellationToken::new();
        let looks = bjh_metrics::HistoryMetrics::global()
            .live_page_looks
            .clone();
        Self {
            hub: ui::events::EventHub::new(stopping.clone(), looks),
            stopping,
            gauges: store.map(|s| job_metrics::gauges(s.clone(), top)),
            usage: usage::UsageSettings::default(),
        }
    }

    /// The same, pricing slot time as `usage` says.
    pub fn with_usage(mut self, usage: usage::UsageSettings) -> Self {
        self.usage = usage;
        self
    }
}
