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
//! to `/api/metrics`; `mcp` offers the routes to assistants as tools.
//!
//! **Rule:** this layer imports `format`, `metrics`, `recording` (for the
//! live scheduler's router), `store`, `analysis` and `columnar`; nothing
//! below it imports it, and it never imports `server`.

pub mod auth;
pub mod error;
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
