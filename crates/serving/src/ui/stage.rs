//! A stage's page (`/ui/job/{id}/stage/{n}`): the summary metrics of its
//! completed tasks (min, quartiles, max), its operators drawn from the
//! stored DOT, its plan with metrics, and its task attempts, sortable and
//! paged, failed ones with their reasons.

use crate::error::ApiError;
use crate::jobs_params::Direction;
use crate::params::{Params, check};
use crate::source::Resource;
use crate::ui::job::{StageStats, body, records, stage_stats, stored_stages};
use crate::ui::page::{self, Nav, count, duration, duration_ns, job_href, query_string};
use crate::ui::profile::operator_graph;
use crate::ui::{Ui, api_error, error, html_response};
use axum::extract::{Path, State};
use axum::response::Response;
use ballista_api_types::dto::PlanFormat;
use bjh_format::stages::StageAnswer;
use bjh_pictures::graph::Dot;
use bjh_store::records::Task;
use http::StatusCode;
use maud::{Markup, html};

/// The stage page's parameters: how its task table is sorted and paged.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TaskParams {
    /// Sort key: finish (the default), duration, start, rows_in, rows_out,
    /// compute, executor or status.
    pub sort: Option<String>,
    /// asc (the default) or desc.
    #[param(value_type = Option<String>)]
    pub order: Option<Direction>,
    /// The page, from 1.
    pub page: Option<usize>,
}

/// Task table sort keys.
pub const TASK_SORTS: &[&str] = &[
    "finish", "duration", "start", "rows_in", "rows_out", "compute", "executor", "status",
];
/// Task rows per page.
pub const TASK_ROWS: usize = 100;

/// The task table's view: its sort key, direction and page (0-based),
/// parsed once from the query string.
pub struct TaskView {
    sort: &'static str,
    desc: bool,
    page: usize,
}

impl TaskView {
    /// The view `p` asks for; a bad value is the 400.
    pub fn new(p: &TaskParams) -> Result<Self, ApiError> {
        let sort = p.sort.as_deref().unwrap_or("finish");
        let known = TASK_SORTS.iter().find(|s| **s == sort);
        check(
            "sort",
            sort,
            known.is_some(),
            &format!("one of {}", TASK_SORTS.join(", ")),
        )?;
        let page = p.page.unwrap_or(1);
        check("page", page, page >= 1, "a page number from 1")?;
        Ok(TaskView {
            sort: known.copied().unwrap_or("finish"),
            desc: p.order == Some(Direction::Desc),
            page: page - 1,
        })
    }

    /// The query string of this view's page `n` (1-based).
    pub fn at(&self, n: usize) -> String {
        let order = if self.desc { "desc" } else { "asc" };
        let n = n.to_string();
        query_string([("sort", self.sort), ("order", order), ("page", n.as_str())])
    }

    /// Sorts `tasks` as the view asks.
    pub fn sort<'a>(&self, tasks: &mut [&'a Task], executor: impl Fn(&Task) -> &'a str) {
        match self.sort {
            "duration" => tasks.sort_by_key(|t| t.duration()),
            "start" => tasks.sort_by_key(|t| t.begin()),
            "rows_in" => tasks.sort_by_key(|t| t.input_rows),
            "rows_out" => tasks.sort_by_key(|t| t.output_rows),
            "compute" => tasks.sort_by_key(|t| t.compute_nanos),
            "executor" => tasks.sort_by(|a, b| executor(a).cmp(executor(b))),
            "status" => tasks.sort_by_key(|t| t.succeeded()),
            _ => {}
        }
        if self.desc {
            tasks.reverse();
        }
    }
}

/// What the stage page shows, loaded.
pub struct Loaded {
    stats: StageStats,
    dot: Dot,
    with_metrics: Option<StageAnswer>,
    executors: Vec<String>,
    tasks: Vec<Task>,
}

/// `GET /ui/job/{id}/stage/{n}`.
pub async fn stage_page(
    State(ui): State<Ui>,
    Path((job_id, stage)): Path<(String, String)>,
    params: Result<Params<TaskParams>, ApiError>,
) -> Response {
    let Ok(stage_id) = stage.parse::<u32>() else {
        let why = format!("{stage:?} is not a stage id: expected a non-negative integer");
        return error(&ui, StatusCode::BAD_REQUEST, &why);
    };
    let view = match params.and_then(|p| TaskView::new(&p.value)) {
        Ok(view) => view,
        Err(e) => return api_error(&ui, e),
    };
    let loaded = match load(&ui, &job_id, stage_id).await {
        Ok(loaded) => loaded,
        Err(answer) => return answer,
    };
    let title = format!("Stage {stage_id} of job {job_id}");
    let body = render(&job_id, stage_id, &view, loaded);
    html_response(
        StatusCode::OK,
        page::frame(&ui, &title, Nav::Jobs, false, body),
    )
}

/// The stage's numbers, operators, plan and tasks; a 404 page when the job
/// or the stage is unknown.
pub async fn load(ui: &Ui, job_id: &str, stage_id: u32) -> Result<Loaded, Response> {
    if !matches!(ui.source.facts(job_id).await, Ok(Some(_))) {
        let why = format!("No job {job_id:?} here.");
        return Err(error(ui, StatusCode::NOT_FOUND, &why));
    }
    let loaded = records(ui, job_id).await.map_err(|e| api_error(ui, e))?;
    let records = loaded.map(|l| l.1);
    let mut with_metrics = stored_stages(ui, job_id, PlanFormat::Metrics).await;
    let job_dot = body(ui, job_id, Resource::Dot).await;
    let job_dot = Dot::parse(&String::from_utf8_lossy(job_dot.as_deref().unwrap_or(b"")));
    let stats = stage_stats(records.as_ref(), &with_metrics, &job_dot);
    let Some(stats) = stats.into_iter().find(|s| s.stage_id == stage_id) else {
        let why = format!("Job {job_id} has no stage {stage_id}.");
        return Err(error(ui, StatusCode::NOT_FOUND, &why));
    };
    let dot = match body(ui, job_id, Resource::StageDot(stage_id as usize)).await {
        Some(b) => Dot::parse(&String::from_utf8_lossy(&b)),
        None => job_dot,
    };
    let (executors, tasks) = records.map_or_else(Default::default, |r| {
        let tasks = r.tasks.into_iter().filter(|t| t.stage_id == stage_id);
        (r.executors, tasks.collect())
    });
    Ok(Loaded {
        stats,
        dot,
        with_metrics: with_metrics.remove(&stage_id),
        executors,
        tasks,
    })
}

/// The page's body.
pub fn render(job_id: &str, stage_id: u32, view: &TaskView, loaded: Loaded) -> Markup {
    let s = &loaded.stats;
    html! {
        nav.crumbs aria-label="Breadcrumb" {
            a href="/" { "Jobs" } " › " a href=(job_href(job_id)) { (job_id) } " › stage " (stage_id)
        }
        h1 { "Stage " (stage_id) " of job " span.id { (job_id) } }
        (facts(s, loaded.with_metrics.as_ref()))
        (quantiles(s))
        div.split {
            section aria-labelledby="ops-h" {
                h2 id="ops-h" { "Operators" }
                div.graph-box { (operator_graph(&loaded.dot, stage_id, loaded.with_metrics.as_ref().map(StageAnswer::plan))) }
            }
            section aria-labelledby="plan-h" {
                h2 id="plan-h" { "Plan" @if loaded.with_metrics.is_some() { " with metrics" } }
                @match loaded.with_metrics.as_ref().map(StageAnswer::plan).filter(|p| !p.is_empty()) {
                    Some(p) => pre.plan { (p) },
                    None => p.muted { "Not recorded." },
                }
            }
        }
        (task_section(job_id, stage_id, view, &loaded))
    }
}

/// The stage's facts: status, times, tasks, rows, compute.
pub fn facts(s: &StageStats, with_metrics: Option<&StageAnswer>) -> Markup {
    // What the scheduler calls the stage's `elapsed_compute` is a span of
    // wall time, not compute: it is shown under its own name.
    let span = with_metrics
        .and_then(|s| s.elapsed_compute.as_deref())
        .unwrap_or("");
    html! {
        dl.facts {
            div { dt { "Status" } dd { (page::status(&s.status)) } }
            div { dt { "Started" } dd { (page::time(s.start)) } }
            div { dt { "Ended" } dd { (page::time(s.end)) } }
            div { dt { "Duration" } dd { @if s.start > 0 && s.end >= s.start { (duration(s.end - s.start)) } @else { "—" } } }
            div { dt { "Tasks" } dd { (s.succeeded) " succeeded" @if s.failed > 0 { ", " span.status.bad { (s.failed) " failed attempts" } } } }
            div { dt { "Rows" } dd { (count(s.input_rows)) " in, " (count(s.output_rows)) " out" } }
            div {
                dt { "Compute" }
                dd title="the operators' elapsed_compute, summed over the stage's operators and its succeeded tasks" {
                    (duration_ns(s.compute_nanos))
                }
            }
            @if !span.is_empty() {
                div {
                    dt { "Task span" }
                    dd title="the scheduler's elapsed_compute for the stage: from the first task's start to the last task's end" {
                        (span)
                    }
                }
            }
        }
    }
}

/// Min, quartiles and max of the completed tasks.
pub fn quantiles(s: &StageStats) -> Markup {
    html! {
        section aria-labelledby="q-h" {
            h2 id="q-h" { "Summary metrics for " (s.succeeded) " completed tasks" }
            table.quantiles {
                thead { tr { th { "Metric" } th.num { "Min" } th.num { "25th percentile" } th.num { "Median" } th.num { "75th percentile" } th.num { "Max" } } }
                tbody {
                    tr { td { "Duration" } @for v in s.duration { td.num { (duration(v)) } } }
                    tr { td { "Rows in" } @for v in s.rows_in { td.num { (count(v)) } } }
                    tr { td { "Rows out" } @for v in s.rows_out { td.num { (count(v)) } } }
                    tr { td { "Compute" } @for v in s.compute { td.num { (duration_ns(v)) } } }
                }
            }
        }
    }
}

/// The task attempts: one sorted page of them, and the pager.
pub fn task_section(job_id: &str, stage_id: u32, view: &TaskView, loaded: &Loaded) -> Markup {
    let executor = |t: &Task| {
        let name = loaded.executors.get(t.executor as usize);
        name.map_or("", String::as_str)
    };
    let mut tasks: Vec<&Task> = loaded.tasks.iter().collect();
    view.sort(&mut tasks, executor);
    let pages = tasks.len().div_ceil(TASK_ROWS).max(1);
    let page_no = view.page.min(pages - 1);
    let shown = tasks.iter().skip(page_no * TASK_ROWS).take(TASK_ROWS);
    let base = format!("{}/stage/{stage_id}", job_href(job_id));
    let head = |key: &'static str, label: &'static str, num: bool| {
        let active = view.sort == key;
        let order = if active && !view.desc { "desc" } else { "asc" };
        let desc = view.desc;
        html! {
            th class=[num.then_some("num")] aria-sort=[active.then_some(if desc { "descending" } else { "ascending" })] {
                a href={ (base) (query_string([("sort", key), ("order", order)])) } {
                    (label) @if active { @if desc { " ▼" } @else { " ▲" } }
                }
            }
        }
    };
    html! {
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
                    tbody { @for t in shown { (task_row(t, executor(t))) } }
                }
            }
            @if pages > 1 {
                nav.pager aria-label="Task pages" {
                    @if page_no > 0 { a rel="prev" href={ (base) (view.at(page_no)) } { "‹ Previous" } }
                    span { "Page " (page_no + 1) " of " (pages) }
                    @if page_no + 1 < pages { a rel="next" href={ (base) (view.at(page_no + 2)) } { "Next ›" } }
                }
            }
        }
    }
}

/// One task attempt's row.
pub fn task_row(t: &Task, executor: &str) -> Markup {
    html! {
        tr class=[(!t.succeeded()).then_some("failed")] {
            td.num { (t.task_id) }
            td.num { (t.stage_attempt) }
            td { code { (executor) } }
            td { (page::status(if t.succeeded() { "Successful" } else { "Failed" })) }
            td { (page::time(t.begin())) }
            td.num { (duration(t.duration())) }
            td.num { (count(t.input_rows)) }
            td.num { (count(t.output_rows)) }
            td.num { (duration_ns(t.compute_nanos)) }
            td.failure {
                @if let Some((reason, err)) = &t.failure {
                    details { summary { (reason) } pre { (err) } }
                }
            }
        }
    }
}
