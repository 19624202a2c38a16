//! The pages over `analysis`: recurring queries (`/ui/queries`) and the
//! comparison of two runs (`/ui/compare?a=&b=`), the same numbers as
//! `GET /api/queries` and `GET /api/compare`.

use crate::error::ApiError;
use crate::insight::TwoRuns;
use crate::insight::{recurring_queries, run_view};
use crate::params::Params;
use crate::ui::page::{self, Nav, duration, exact, job_href, query_string};
use crate::ui::{Ui, api_error, error, html_response};
use axum::extract::State;
use axum::response::Response;
use bjh_analysis::compare::{Comparison, Side, compare};
use http::StatusCode;
use maud::{Markup, html};

/// Rows of the queries page.
pub const QUERY_ROWS: usize = 200;

/// `GET /ui/queries`.
pub async fn queries_page(State(ui): State<Ui>) -> Response {
    let (total, rows) = match recurring_queries(ui.store.as_ref(), None, QUERY_ROWS, false).await {
        Ok(r) => r,
        Err(e) => return api_error(&ui, e),
    };
    // The schedulers that ran the queries, as a column only when it tells
    // rows apart: more than one id, or ids beside logs that do not say.
    // One cluster's history keeps the page narrow (the header names it).
    let shown = &rows;
    let ids: std::collections::BTreeSet<&str> = shown
        .iter()
        .flat_map(|q| q.scheduler_ids.iter().map(String::as_str))
        .collect();
    let schedulers =
        ids.len() > 1 || (!ids.is_empty() && shown.iter().any(|q| q.scheduler_ids.is_empty()));
    let body = html! {
        h1 { "Recurring queries" }
        p.summary {
            (exact(total)) " distinct queries among finished jobs, most recently run first. "
            "Runs of one query share a hash of its logical plan; the trend compares the last run \
             with the median of the runs before it."
        }
        @if rows.is_empty() {
            p.empty { "No finished job with a known query hash yet." }
        } @else {
            div.table-wrap {
                table {
                    thead { tr {
                        th { "Query hash" } th { "Last name, query" } th.num { "Runs" } th.num { "Unsuccessful" }
                        th { "Last run" } th { "Last status" } th.num { "Median" } th.num { "p95" } th { "Trend" } @if schedulers { th { "Schedulers" } } th { "" }
                    } }
                    tbody {
                        @for q in shown {
                            tr {
                                td { a href={ "/" (query_string([("query_hash", q.query_hash.as_str())])) } { code { (q.query_hash) } } }
                                td.name { (page::name_and_label(&q.job_name, q.query_label.as_deref())) }
                                td.num { (q.runs) }
                                td.num { (q.unsuccessful_runs) }
                                td { a href=(job_href(&q.last_job_id)) { (page::time(q.last_run)) } }
                                td { (page::status(q.last_status)) }
                                td.num { (duration(q.p50_duration_ms)) }
                                td.num { (duration(q.p95_duration_ms)) }
                                td {
                                    span class={ "trend " (q.trend) } { (q.trend.replace('_', " ")) }
                                    @if let Some(r) = q.trend_ratio { " (" (format!("{r:.2}")) "×)" }
                                }
                                @if schedulers { td.scheduler {
                                    @if q.scheduler_ids.is_empty() {
                                        span.muted title="Logs written before the scheduler id was recorded do not say" { "not recorded" }
                                    } @else {
                                        @for (i, id) in q.scheduler_ids.iter().enumerate() {
                                            @if i > 0 { ", " }
                                            a href={ "/" (query_string([("scheduler_id", id.as_str())])) } { (id) }
                                        }
                                    }
                                } }
                                td {
                                    @if q.recent.len() >= 2 {
                                        @let a = &q.recent[q.recent.len() - 2].job_id;
                                        a href={ "/ui/compare" (query_string([("a", a.as_str()), ("b", q.last_job_id.as_str())])) } { "Compare last two" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if total > QUERY_ROWS {
                p.muted { "The " (QUERY_ROWS) " most recently run are shown; " code { "/api/queries?limit=" } " gives more." }
            }
        }
    };
    html_response(
        StatusCode::OK,
        page::frame(&ui, "Recurring queries", Nav::Queries, false, body),
    )
}

/// `GET /ui/compare?a=&b=`.
pub async fn compare_page(
    State(ui): State<Ui>,
    params: Result<Params<TwoRuns>, ApiError>,
) -> Response {
    let Ok(Params {
        value: TwoRuns { a, b },
        ..
    }) = params
    else {
        return error(
            &ui,
            StatusCode::BAD_REQUEST,
            "A comparison needs two job ids: /ui/compare?a=<earlier run>&b=<later run>.",
        );
    };
    let (va, vb) = match (
        run_view(&*ui.source, &a, "a").await,
        run_view(&*ui.source, &b, "b").await,
    ) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return api_error(&ui, e),
    };
    let c = compare(&va, &vb);
    let body = html! {
        nav.crumbs aria-label="Breadcrumb" { a href="/" { "Jobs" } " › compare" }
        h1 { "Run " span.id { (b) } " against " span.id { (a) } }
        @if c.regression {
            p.error-box role="alert" { "Regression: the later run took markedly longer (see the threshold below)." }
        }
        @if let Some(note) = &c.note { p.notice { (note) } }
        @if c.same_query { p.muted { "Both runs ran the same query (equal query hashes)." } }
        (runs(&c))
        h2 { "Stages, matched by plan shape" }
        (stages(&c, &a, &b))
        h2 { "Findings" }
        (findings(&c))
        h2 { "Config changes" }
        (config(&c))
        h2 { "Physical plan" }
        (plan_diff(&c))
    };
    html_response(
        StatusCode::OK,
        page::frame(&ui, "Compare runs", Nav::None, false, body),
    )
}

/// The two runs side by side, and the regression threshold.
pub fn runs(c: &Comparison) -> Markup {
    let side = |s: &Side| {
        html! {
            td { a href=(job_href(&s.job_id)) { (s.job_id) } }
            td.name { (page::name_or_label(&s.job_name, s.query_label.as_deref())) }
            td { (page::status(&s.status)) }
            td.num { @match s.duration_ms { Some(d) => (duration(d)), None => "—" } }
            td.num { (s.stages) }
            td.num { (s.task_attempts) }
            td.num { (s.failed_attempts) }
            td.num { (page::count(s.output_rows)) }
        }
    };
    html! {
        table {
            thead { tr { th { "" } th { "Job" } th { "Name or label" } th { "Status" } th.num { "Duration" } th.num { "Stages" } th.num { "Task attempts" } th.num { "Failed" } th.num { "Rows out" } } }
            tbody {
                tr { th { "a" } (side(&c.a)) }
                tr { th { "b" } (side(&c.b)) }
            }
        }
        p.muted {
            "Regression threshold: "
            @for (k, v) in &c.regression_threshold { (k) " " (v.to_string()) "; " }
        }
    }
}

/// The stages matched by plan shape, and those only one run has.
pub fn stages(c: &Comparison, a: &str, b: &str) -> Markup {
    html! {
        @if c.stages.is_empty() {
            p.muted { "No stage of one run matches a stage of the other." }
        } @else {
            div.table-wrap {
                table {
                    thead { tr { th { "Stage a" } th { "Stage b" } th.num { "Duration a" } th.num { "Duration b" } th.num { "b − a" } th.num { "b / a" } th.num { "Tasks a / b" } th { "Operators" } } }
                    tbody {
                        @for s in &c.stages {
                            tr class=[(s.ratio >= 1.2 && s.delta_ms >= 1000).then_some("slower")] {
                                td { a href={ (job_href(a)) "/stage/" (s.a_stage) } { (s.a_stage) } }
                                td { a href={ (job_href(b)) "/stage/" (s.b_stage) } { (s.b_stage) } }
                                td.num { (duration(s.a_duration_ms)) }
                                td.num { (duration(s.b_duration_ms)) }
                                td.num { @if s.delta_ms < 0 { "−" (duration(s.delta_ms.unsigned_abs())) } @else { "+" (duration(s.delta_ms as u64)) } }
                                td.num { (format!("{:.2}", s.ratio)) }
                                td.num { (s.tasks[0]) " / " (s.tasks[1]) }
                                td { code.shape { (s.shape.replace('\n', " → ")) } }
                            }
                        }
                    }
                }
            }
        }
        @for (side, ids) in &c.unmatched_stages {
            @if !ids.is_empty() {
                p.muted { "Stages only in " (side) ": " (ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")) }
            }
        }
    }
}

/// The findings new in b and resolved since a.
pub fn findings(c: &Comparison) -> Markup {
    html! {
        @for (what, keys) in &c.findings {
            p { strong { (what) ": " }
                @if keys.is_empty() { span.muted { "none" } }
                @for k in keys {
                    code { (k.kind) } @if let Some(s) = k.stage_id { " (stage " (s) ")" } " "
                }
            }
        }
    }
}

/// The config keys whose values differ.
pub fn config(c: &Comparison) -> Markup {
    html! {
        @if c.config.is_empty() {
            p.muted { "The configs are equal." }
        } @else {
            table {
                thead { tr { th { "Key" } th { "a" } th { "b" } } }
                tbody {
                    @for ch in &c.config {
                        tr { td { code { (ch.key) } } td { code { (ch.a.as_deref().unwrap_or("(absent)")) } } td { code { (ch.b.as_deref().unwrap_or("(absent)")) } } }
                    }
                }
            }
        }
    }
}

/// The physical plans' diff, its lines marked.
pub fn plan_diff(c: &Comparison) -> Markup {
    html! {
        @if c.plan_diff.is_empty() {
            p.muted { "The physical plans are equal." }
        } @else {
            pre.plan.diff {
                @for line in c.plan_diff.lines() {
                    @let class = match line.chars().next() { Some('+') => "add", Some('-') => "del", Some('@') => "hunk", _ => "ctx" };
                    span class=(class) { (line) } "\n"
                }
            }
        }
    }
}
