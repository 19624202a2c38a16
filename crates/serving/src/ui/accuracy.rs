//! `/ui/accuracy`: the history grading its own what-if replays, the same
//! numbers as `GET /api/whatif/accuracy`: overall against the run-to-run
//! noise and the naive guess, by what changed between two runs, by query
//! (the unreliable ones marked), and the newest pairs, each run a link.

use crate::params::Params;
use crate::ui::page::{self, Nav, duration, job_href, name_and_label, query_string};
use crate::ui::{Ui, api_error, error, html_response};
use crate::whatif::{AccuracyParams, DEFAULT_PAIRS, MAX_PAIRS, accuracy_of};
use axum::extract::State;
use axum::response::Response;
use bjh_analysis::accuracy::{Errors, Pair, UNRELIABLE_ERROR, UNRELIABLE_MIN_PAIRS};
use bjh_analysis::whatif::Shape;
use bjh_format::query_hash::parse_hash;
use http::StatusCode;
use maud::html;

/// `GET /ui/accuracy[?limit=N][&query_hash=H]`.
pub async fn page(
    State(ui): State<Ui>,
    params: Result<Params<AccuracyParams>, crate::error::ApiError>,
) -> Response {
    let (limit, only) = match asked(&ui, params) {
        Ok(v) => v,
        Err(page) => return *page,
    };
    let Some(store) = ui.store.clone() else {
        return error(&ui, StatusCode::NOT_FOUND, "No log directory here.");
    };
    let graded = match accuracy_of(ui.source.clone(), store, only, limit).await {
        Ok(g) => g,
        Err(e) => return api_error(&ui, e),
    };
    let pct = |e: f64| format!("{:.1}%", e * 100.0);
    let errors_row = |what: &str, e: &Errors| {
        html! {
            tr {
                td { (what) } td.num { (e.pairs) }
                @if e.pairs == 0 {
                    td.num { "—" } td.num { "—" } td.num { "—" }
                } @else {
                    td.num { (pct(e.median_error)) } td.num { (pct(e.p90_error)) } td.num { (pct(e.naive_median_error)) }
                }
            }
        }
    };
    let body = html! {
        h1 { "What-if accuracy" }
        p.summary {
            "Two runs of one recurring query, one after the other, are an experiment that already happened: "
            "the earlier run replayed on the later run's cluster shape is the prediction, the later run's time what happened. "
            "Pairs on the same shape give the run-to-run noise; \"naive\" predicts the earlier run's time again. "
            "Pairs whose runs computed different partitions (datafusion.execution.target_partitions changed) ran different tasks, "
            "which a replay cannot predict: they are graded apart, in neither the cross-shape figures nor the noise. "
            "The newest " (limit) " pairs"
            @if let Some(h) = only { " of query " code { (bjh_format::query_hash::hash_text(h)) } }
            " are graded. A query whose replays were off by a median of more than "
            (format!("{:.0}%", UNRELIABLE_ERROR * 100.0)) " over " (UNRELIABLE_MIN_PAIRS)
            " pairs or more is marked unreliable, and so is its What-if tab."
        }
        @if graded.pairs.is_empty() {
            p.empty { "No query has two completed runs yet." }
        } @else {
            div.table-wrap { table id="accuracy-overall" {
                thead { tr { th { "" } th.num { "pairs" } th.num { "median error" } th.num { "p90 error" } th.num { "naive median error" } } }
                tbody {
                    (errors_row("across shapes", &graded.across_shapes))
                    (errors_row("same shape (the noise)", &graded.same_shape))
                    @if graded.partitions_changed.pairs > 0 {
                        (errors_row("partitions changed (not predicted)", &graded.partitions_changed))
                    }
                    @for (kind, e) in &graded.by_kind { (errors_row(&format!("what changed: {kind}"), e)) }
                }
            } }
            h2 { "By query" }
            div.table-wrap { table id="accuracy-queries" {
                thead { tr { th { "Query" } th { "Label" } th.num { "pairs" } th.num { "median error" } th.num { "p90" } th.num { "noise (same shape)" } th { "" } } }
                tbody {
                    @for q in &graded.queries {
                        tr {
                            td { a href={ "/ui/accuracy" (query_string([("query_hash", q.query_hash.as_str())])) } { code { (q.query_hash) } } }
                            td.name { (name_and_label("", q.query_label.as_deref())) }
                            td.num { (q.all.pairs) }
                            td.num { (pct(q.all.median_error)) }
                            td.num { (pct(q.all.p90_error)) }
                            td.num { @if q.same_shape.pairs > 0 { (pct(q.same_shape.median_error)) } @else { "—" } }
                            td { @if q.unreliable { span.warn.unreliable { "unreliable" } } }
                        }
                    }
                }
            } }
            (pairs_table(&graded.pairs))
        }
        p.muted { "The same as JSON: " code { "/api/whatif/accuracy?limit=N&query_hash=H" } ". How the replay works: docs/diagnosis.md." }
    };
    html_response(
        StatusCode::OK,
        page::frame(&ui, "What-if accuracy", Nav::Accuracy, false, body),
    )
}

/// The page's `limit` and `query_hash`, or the 400 page naming the bad one.
fn asked(
    ui: &Ui,
    params: Result<Params<AccuracyParams>, crate::error::ApiError>,
) -> Result<(usize, Option<u64>), Box<Response>> {
    let asked = match params {
        Ok(p) => p.value,
        Err(e) => return Err(Box::new(api_error(ui, e))),
    };
    let limit = asked.limit.unwrap_or(DEFAULT_PAIRS);
    if !(1..=MAX_PAIRS).contains(&limit) {
        return Err(Box::new(error(
            ui,
            StatusCode::BAD_REQUEST,
            &format!("parameter `limit`: {limit} is not an integer from 1 to {MAX_PAIRS}"),
        )));
    }
    let only = match asked.query_hash.as_deref().filter(|h| !h.is_empty()) {
        None => None,
        Some(hex) => match parse_hash(hex) {
            Some(h) => Some(h),
            None => {
                return Err(Box::new(error(
                    ui,
                    StatusCode::BAD_REQUEST,
                    "parameter `query_hash`: not 16 hex digits",
                )));
            }
        },
    };
    Ok((limit, only))
}

/// The pairs, newest first, each run a link.
fn pairs_table(pairs: &[Pair]) -> maud::Markup {
    let pct = |e: f64| format!("{:.1}%", e * 100.0);
    html! {
        h2 { "Pairs, newest first" }
        div.table-wrap { table id="accuracy-pairs" {
            thead { tr { th { "Earlier run" } th { "Later run" } th { "Shapes" } th.num { "predicted" } th.num { "took" } th.num { "error" } th.num { "naive error" } } }
            tbody {
                @for p in pairs {
                    tr {
                        td { a href=(job_href(&p.a)) { (p.a) } }
                        td { a href={ (job_href(&p.b)) "?tab=whatif" } { (p.b) } }
                        td { (shape(p.shape_a)) " → " (shape(p.shape_b))
                            @if p.partitions_changed() {
                                " " span.warn.partitions title="the runs computed different partitions: different tasks, not what a replay predicts" {
                                    (p.partitions_a) " → " (p.partitions_b) " partitions"
                                }
                            }
                        }
                        td.num { (duration(p.predicted_ms)) }
                        td.num { (duration(p.actual_ms)) }
                        td.num { (pct(p.error())) }
                        td.num { (pct(p.naive_error())) }
                    }
                }
            }
        } }
    }
}

/// "2×1": executors × slots.
fn shape(s: Shape) -> String {
    format!("{}×{}", s.executors, s.slots)
}
