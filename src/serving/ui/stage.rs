//! A stage's page (`/ui/job/{id}/stage/{n}`): the summary metrics of its
//! completed tasks (min, quartiles, max), its operators drawn from the
//! stored DOT, its plan with metrics, and its task attempts, sortable and
//! paged, failed ones with their reasons.

use crate::analysis::records::Task;
use crate::serving::source::Resource;
use crate::serving::ui::graph::Dot;
use crate::serving::ui::job::{body, operator_graph, records, stage_stats, stored_stages};
use crate::serving::ui::page::{self, Nav, count, duration, job_href, query_string};
use crate::serving::ui::{Ui, api_error, error, html_response};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use ballista_api_types::dto::PlanFormat;
use http::StatusCode;
use maud::html;

type Pairs = Query<Vec<(String, String)>>;

/// Task table sort keys.
const TASK_SORTS: &[&str] = &[
    "finish", "duration", "start", "rows_in", "rows_out", "compute", "executor", "status",
];
/// Task rows per page.
const TASK_ROWS: usize = 100;

/// `GET /ui/job/{id}/stage/{n}`.
pub(crate) async fn stage_page(
    State(ui): State<Ui>,
    Path((job_id, stage)): Path<(String, String)>,
    Query(pairs): Pairs,
) -> Response {
    let Ok(stage_id) = stage.parse::<u32>() else {
        return error(
            &ui,
            StatusCode::BAD_REQUEST,
            &format!("{stage:?} is not a stage id: expected a non-negative integer"),
        );
    };
    let (mut sort, mut desc, mut page_no) = ("finish", false, 0usize);
    for (k, v) in &pairs {
        match k.as_str() {
            "sort" => match TASK_SORTS.iter().find(|s| *s == v) {
                Some(s) => sort = s,
                None => {
                    return error(
                        &ui,
                        StatusCode::BAD_REQUEST,
                        &format!(
                            "invalid value {v:?} for parameter `sort`: expected one of {}",
                            TASK_SORTS.join(", ")
                        ),
                    );
                }
            },
            "order" => {
                desc = match v.as_str() {
                    "asc" => false,
                    "desc" => true,
                    _ => {
                        return error(
                            &ui,
                            StatusCode::BAD_REQUEST,
                            &format!(
                                "invalid value {v:?} for parameter `order`: expected asc or desc"
                            ),
                        );
                    }
                }
            }
            "page" => match v.parse::<usize>() {
                Ok(n) if n >= 1 => page_no = n - 1,
                _ => {
                    return error(
                        &ui,
                        StatusCode::BAD_REQUEST,
                        &format!(
                            "invalid value {v:?} for parameter `page`: expected a page number from 1"
                        ),
                    );
                }
            },
            _ => {}
        }
    }
    if !matches!(ui.source.facts(&job_id).await, Ok(Some(_))) {
        return error(
            &ui,
            StatusCode::NOT_FOUND,
            &format!("No job {job_id:?} here."),
        );
    }
    let loaded = match records(&ui, &job_id).await {
        Ok(r) => r,
        Err(e) => return api_error(&ui, e),
    };
    let records = loaded.as_ref().map(|l| &l.1);
    let with_metrics = stored_stages(&ui, &job_id, PlanFormat::Metrics).await;
    let job_dot = body(&ui, &job_id, Resource::Dot).await;
    let job_dot = Dot::parse(
        job_dot
            .as_deref()
            .map(String::from_utf8_lossy)
            .as_deref()
            .unwrap_or(""),
    );
    let stats = stage_stats(records, &with_metrics, &job_dot);
    let Some(s) = stats.iter().find(|s| s.stage_id == stage_id) else {
        return error(
            &ui,
            StatusCode::NOT_FOUND,
            &format!("Job {job_id} has no stage {stage_id}."),
        );
    };
    let dot = match body(&ui, &job_id, Resource::StageDot(stage_id as usize)).await {
        Some(b) => Dot::parse(&String::from_utf8_lossy(&b)),
        None => job_dot.clone(),
    };
    let executors: &[String] = records.map_or(&[], |r| &r.executors);
    let mut tasks: Vec<&Task> = records
        .map(|r| r.tasks.iter().filter(|t| t.stage_id == stage_id).collect())
        .unwrap_or_default();
    let executor = |t: &Task| {
        executors
            .get(t.executor as usize)
            .map_or("", String::as_str)
    };
    match sort {
        "duration" => tasks.sort_by_key(|t| t.duration()),
        "start" => tasks.sort_by_key(|t| t.begin()),
        "rows_in" => tasks.sort_by_key(|t| t.input_rows),
        "rows_out" => tasks.sort_by_key(|t| t.output_rows),
        "compute" => tasks.sort_by_key(|t| t.compute_nanos),
        "executor" => tasks.sort_by(|a, b| executor(a).cmp(executor(b))),
        "status" => tasks.sort_by_key(|t| t.succeeded()),
        _ => {}
    }
    if desc {
        tasks.reverse();
    }
    let pages = tasks.len().div_ceil(TASK_ROWS).max(1);
    let page_no = page_no.min(pages - 1);
    let shown = tasks.iter().skip(page_no * TASK_ROWS).take(TASK_ROWS);
    let base = format!("{}/stage/{stage_id}", job_href(&job_id));
    let head = |key: &'static str, label: &'static str, num: bool| {
        let active = sort == key;
        let order = if active && !desc { "desc" } else { "asc" };
        html! {
            th class=[num.then_some("num")] aria-sort=[active.then_some(if desc { "descending" } else { "ascending" })] {
                a href={ (base) (query_string([("sort", key), ("order", order)])) } {
                    (label) @if active { @if desc { " ▼" } @else { " ▲" } }
                }
            }
        }
    };
    let plan = with_metrics.get(&stage_id).map(|s| s.plan());
    let compute_total = with_metrics
        .get(&stage_id)
        .and_then(|s| s.elapsed_compute.as_deref())
        .unwrap_or("");
    let body = html! {
        nav.crumbs aria-label="Breadcrumb" {
            a href="/" { "Jobs" } " › " a href=(job_href(&job_id)) { (job_id) } " › stage " (stage_id)
        }
        h1 { "Stage " (stage_id) " of job " span.id { (job_id) } }
        dl.facts {
            div { dt { "Status" } dd { (page::status(&s.status)) } }
            div { dt { "Started" } dd { (page::time(s.start)) } }
            div { dt { "Ended" } dd { (page::time(s.end)) } }
            div { dt { "Duration" } dd { @if s.start > 0 && s.end >= s.start { (duration(s.end - s.start)) } @else { "—" } } }
            div { dt { "Tasks" } dd { (s.succeeded) " succeeded" @if s.failed > 0 { ", " span.status.bad { (s.failed) " failed attempts" } } } }
            div { dt { "Rows" } dd { (count(s.input_rows)) " in, " (count(s.output_rows)) " out" } }
            div { dt { "Compute" } dd { (duration(s.compute_ms)) @if !compute_total.is_empty() { " (scheduler: " (compute_total) ")" } } }
        }
        section aria-labelledby="q-h" {
            h2 id="q-h" { "Summary metrics for " (s.succeeded) " completed tasks" }
            table.quantiles {
                thead { tr { th { "Metric" } th.num { "Min" } th.num { "25th percentile" } th.num { "Median" } th.num { "75th percentile" } th.num { "Max" } } }
                tbody {
                    tr { td { "Duration" } @for v in s.duration { td.num { (duration(v)) } } }
                    tr { td { "Rows in" } @for v in s.rows_in { td.num { (count(v)) } } }
                    tr { td { "Rows out" } @for v in s.rows_out { td.num { (count(v)) } } }
                    tr { td { "Compute" } @for v in s.compute { td.num { (duration(v)) } } }
                }
            }
        }
        div.split {
            section aria-labelledby="ops-h" {
                h2 id="ops-h" { "Operators" }
                div.graph-box { (operator_graph(&dot, stage_id)) }
            }
            section aria-labelledby="plan-h" {
                h2 id="plan-h" { "Plan" @if with_metrics.contains_key(&stage_id) { " with metrics" } }
                @match plan.filter(|p| !p.is_empty()) {
                    Some(p) => pre.plan { (p) },
                    None => p.muted { "Not recorded." },
                }
            }
        }
        section aria-labelledby="tasks-h" {
            h2 id="tasks-h" { "Task attempts (" (tasks.len()) ")" }
            div.table-wrap {
                table.tasks {
                    thead { tr {
                        th.num { "Task" } th.num { "Attempt" }
                        (head("executor", "Executor", false)) (head("status", "Status", false))
                        (head("start", "Started", false)) (head("duration", "Duration", true))
                        (head("rows_in", "Rows in", true)) (head("rows_out", "Rows out", true))
                        (head("compute", "Compute", true)) th { "Failure" }
                    } }
                    tbody {
                        @for t in shown {
                            tr class=[(!t.succeeded()).then_some("failed")] {
                                td.num { (t.task_id) }
                                td.num { (t.stage_attempt) }
                                td { code { (executor(t)) } }
                                td { (page::status(if t.succeeded() { "Successful" } else { "Failed" })) }
                                td { (page::time(t.begin())) }
                                td.num { (duration(t.duration())) }
                                td.num { (count(t.input_rows)) }
                                td.num { (count(t.output_rows)) }
                                td.num { (duration(t.compute_nanos / 1_000_000)) }
                                td.failure {
                                    @if let Some((reason, err)) = &t.failure {
                                        details { summary { (reason) } pre { (err) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if pages > 1 {
                nav.pager aria-label="Task pages" {
                    @let keep = |n: usize| {
                        let n = n.to_string();
                        query_string([("sort", sort), ("order", if desc { "desc" } else { "asc" }), ("page", n.as_str())])
                    };
                    @if page_no > 0 { a rel="prev" href={ (base) (keep(page_no)) } { "‹ Previous" } }
                    span { "Page " (page_no + 1) " of " (pages) }
                    @if page_no + 1 < pages { a rel="next" href={ (base) (keep(page_no + 2)) } { "Next ›" } }
                }
            }
        }
    };
    html_response(
        StatusCode::OK,
        page::frame(
            &ui,
            &format!("Stage {stage_id} of job {job_id}"),
            Nav::Jobs,
            false,
            body,
        ),
    )
}
