//! `/ui/clusters`: every scheduler this history holds jobs or a cluster
//! log of, as `GET /api/clusters` answers (`crate::clusters`): its jobs and
//! failures (each a link to the list filtered to them), when it was last
//! seen, whether it is recording now, its executors and slots, and its last
//! 24 hours' utilisation (linking to the Usage page by scheduler).

use crate::clusters::clusters_of;
use crate::params::{NoParams, Params};
use crate::ui::page::{self, Nav, query_string, time};
use crate::ui::{Ui, api_error, error, html_response};
use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use maud::html;

/// `GET /ui/clusters`.
pub async fn page(
    State(ui): State<Ui>,
    params: Result<Params<NoParams>, crate::error::ApiError>,
) -> Response {
    if let Err(e) = params {
        return api_error(&ui, e);
    }
    let Some(store) = ui.store.clone() else {
        return error(&ui, StatusCode::NOT_FOUND, "No log directory here.");
    };
    let answer = match clusters_of(store).await {
        Ok(a) => a,
        Err(e) => return api_error(&ui, e),
    };
    let list = |id: &Option<String>, status: Option<&str>| {
        let mut q: Vec<(&str, &str)> = Vec::new();
        if let Some(id) = id {
            q.push(("scheduler_id", id));
        }
        if let Some(s) = status {
            q.push(("status", s));
        }
        format!("/{}", query_string(q))
    };
    let body = html! {
        h1 { "Clusters" }
        p.summary {
            "Every scheduler whose jobs or cluster log this history holds: many clusters can record into one directory or bucket, each under its scheduler id. "
            "Executors and slots are those up at its cluster log's last sight (now, for one recording now); utilisation is its busy slot time over its slots' time up in the last 24 hours."
        }
        @if answer.clusters.is_empty() {
            p.empty { "No scheduler has recorded here yet." }
        } @else {
            div.table-wrap { table id="clusters" {
                thead { tr {
                    th { "Scheduler" } th.num { "jobs" } th.num { "failed" } th.num { "running" }
                    th { "last seen" } th { "" } th.num { "executors" } th.num { "slots" } th.num { "utilisation, 24 h" }
                } }
                tbody {
                    @for c in &answer.clusters {
                        tr {
                            td.name { @match &c.scheduler_id {
                                Some(id) => code { (id) },
                                None => span.muted { "(no scheduler id: upstream's logs)" },
                            } }
                            td.num { a href=(list(&c.scheduler_id, None)) { (c.total_jobs) } }
                            td.num { @match c.jobs.get("failed").copied().unwrap_or(0) {
                                0 => span.muted { "0" },
                                n => a.status.bad href=(list(&c.scheduler_id, Some("failed"))) { (n) },
                            } }
                            td.num { (c.jobs.get("running").copied().unwrap_or(0)) }
                            td { (time(c.last_seen.unwrap_or(0))) }
                            td { @if c.recording { span.status.ok { "recording" } } }
                            td.num { (c.executors) }
                            td.num { (c.slots) }
                            td.num { @match c.utilisation {
                                Some(u) => a href="/ui/usage?group_by=scheduler" { (format!("{:.0}%", u * 100.0)) },
                                None => span.muted { "—" },
                            } }
                        }
                    }
                }
            } }
            @if answer.left_out > 0 {
                p.muted { (answer.left_out) " more schedulers, seen longest ago, are left out." }
            }
        }
        p.muted { "The same as JSON: " code { "/api/clusters" } "." }
    };
    html_response(
        StatusCode::OK,
        page::frame(&ui, "Clusters", Nav::Clusters, false, body),
    )
}
