//! A job's page (`/ui/job/{id}`), and what it shares with the stage page
//! and the timeline's data: the stored responses it reads and the stage
//! numbers worked out from the log's task records.
//!
//! The job page is a summary, then one of six tabs (`?tab=`): the
//! overview (stage graph, stage table with task quantiles, timeline), the
//! profile, the plans (`&format=text|tree|metrics`), the config (`&q=`
//! filters it), the diagnosis and the what-if replay (`ui::whatif`). The stage numbers come from the log's task records, read
//! once per page; the plans, config and DOT are the stored responses.

use crate::error::ApiError;
use crate::params::{Params, check};
use crate::source::{Resource, read_log};
use crate::ui::page::{self, Nav, count, duration, duration_ns, job_href, query_string, segment};
use crate::ui::profile::{profile, stage_graph};
use crate::ui::{Ui, api_error, error, html_response};
use axum::extract::{Path, State};
use axum::response::Response;
use ballista_api_types::dto::PlanFormat;
use bjh_analysis::diagnosis::Diagnosis;
use bjh_analysis::stats::quantile;
use bjh_format::stages::{StageAnswer, StagesAnswer};
use bjh_pictures::graph::Dot;
use bjh_store::query::{Facts, ListQuery};
use bjh_store::records::{JobHeader, JobRecords, Task};
use bytes::Bytes;
use http::StatusCode;
use maud::{Markup, html};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// The job page's parameters.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TabParams {
    /// The tab: overview (the default), profile, plans, config,
    /// diagnosis or whatif.
    pub tab: Option<String>,
    /// The plans' format: text (the default), tree or metrics.
    pub format: Option<String>,
    /// The config tab's filter: keys or values containing this text.
    pub q: Option<String>,
}

/// What the job page shows of `GET /api/job/{id}`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct JobView {
    job_name: String,
    job_status: String,
    status: String,
    num_stages: u64,
    completed_stages: u64,
    start_time: u64,
    end_time: u64,
    logical_plan: Option<String>,
    physical_plan: Option<String>,
}

/// The body of a stored response, when the source has it.
pub async fn body(ui: &Ui, job_id: &str, resource: Resource) -> Option<Bytes> {
    match ui.source.get(job_id, resource).await {
        Ok(Some(a)) if a.status == StatusCode::OK => Some(a.body),
        _ => None,
    }
}

pub async fn stored_stages(
    ui: &Ui,
    job_id: &str,
    format: PlanFormat,
) -> BTreeMap<u32, StageAnswer> {
    let parsed = match body(ui, job_id, Resource::Stages(format)).await {
        Some(b) => StagesAnswer::parse(&b),
        None => StagesAnswer::default(),
    };
    parsed.stages.into_iter().map(|s| (s.stage_id, s)).collect()
}

/// The job's log records, when the source has its log.
pub async fn records(ui: &Ui, job_id: &str) -> Result<Option<(JobHeader, JobRecords)>, ApiError> {
    let Some((header, log)) = ui.source.log_of(job_id) else {
        return Ok(None);
    };
    let records = read_log(job_id, move || JobRecords::read(&log)).await?;
    Ok(Some((header, records)))
}

/// Five quantiles: min, p25, median, p75, max.
pub fn five(mut values: Vec<u64>) -> [u64; 5] {
    values.sort_unstable();
    [0.0, 0.25, 0.5, 0.75, 1.0].map(|q| quantile(&values, q))
}

/// A stage's numbers, from its task attempts.
#[derive(Default)]
pub struct StageStats {
    pub(super) stage_id: u32,
    pub(super) status: String,
    pub(super) failed: usize,
    pub(super) succeeded: usize,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) input_rows: u64,
    pub(super) output_rows: u64,
    /// Compute: the operators' `elapsed_compute`, summed over the
    /// stage's operators and its succeeded tasks, in ns.
    pub(super) compute_nanos: u64,
    pub(super) duration: [u64; 5],
    pub(super) rows_in: [u64; 5],
    pub(super) rows_out: [u64; 5],
    /// Per task compute (ns): min, quartiles, max.
    pub(super) compute: [u64; 5],
}

pub fn stage_stats(
    records: Option<&JobRecords>,
    stored: &BTreeMap<u32, StageAnswer>,
    dot: &Dot,
) -> Vec<StageStats> {
    let mut by_stage: BTreeMap<u32, Vec<&Task>> = BTreeMap::new();
    for id in stored.keys() {
        by_stage.entry(*id).or_default();
    }
    // Each stage's status in the DOT, the first cluster of an id winning.
    let mut dot_status: HashMap<u32, &str> = HashMap::new();
    for s in &dot.stages {
        if let Some(id) = s.stage_id {
            by_stage.entry(id).or_default();
            dot_status.entry(id).or_insert(&s.status);
        }
    }
    if let Some(r) = records {
        for id in r.stages.keys() {
            by_stage.entry(*id).or_default();
        }
        for t in &r.tasks {
            by_stage.entry(t.stage_id).or_default().push(t);
        }
    }
    by_stage
        .into_iter()
        .map(|(stage_id, tasks)| {
            let ok: Vec<&&Task> = tasks.iter().filter(|t| t.succeeded()).collect();
            let marks = records.and_then(|r| r.stages.get(&stage_id));
            let from_json = stored.get(&stage_id);
            let status = marks
                .and_then(|m| m.status.clone())
                .or_else(|| from_json.map(|s| s.stage_status.clone()))
                .filter(|s| !s.is_empty())
                .or_else(|| dot_status.get(&stage_id).map(|s| s.to_string()))
                .unwrap_or_else(|| "Unknown".into());
            let start = tasks.iter().map(|t| t.begin()).filter(|&t| t > 0).min();
            let end = tasks.iter().map(|t| t.end_exec_time).max();
            let (input_rows, output_rows) = if ok.is_empty() {
                from_json.map_or((0, 0), |s| (s.input_rows, s.output_rows))
            } else {
                (
                    ok.iter().map(|t| t.input_rows).sum(),
                    ok.iter().map(|t| t.output_rows).sum(),
                )
            };
            StageStats {
                stage_id,
                status,
                failed: tasks.len() - ok.len(),
                succeeded: ok.len(),
                start: marks
                    .map(|m| m.start_time)
                    .filter(|&t| t > 0)
                    .or(start)
                    .unwrap_or(0),
                end: marks
                    .map(|m| m.end_time)
                    .filter(|&t| t > 0)
                    .or(end)
                    .unwrap_or(0),
                input_rows,
                output_rows,
                compute_nanos: ok.iter().map(|t| t.compute_nanos).sum::<u64>(),
                duration: five(ok.iter().map(|t| t.duration()).collect()),
                rows_in: five(ok.iter().map(|t| t.input_rows).collect()),
                rows_out: five(ok.iter().map(|t| t.output_rows).collect()),
                compute: five(ok.iter().map(|t| t.compute_nanos).collect()),
            }
        })
        .collect()
}

/// The summary at the top of the job page.
pub fn summary(
    job_id: &str,
    facts: &Facts,
    view: &JobView,
    records: Option<&JobRecords>,
    usage: Option<bjh_format::usage::SlotUsage>,
    dropped: Option<u64>,
) -> Markup {
    // Only the tabs that read the log's records know the attempts; the
    // others say nothing rather than 0.
    let attempts = records.map(|r| {
        let failed = r.tasks.iter().filter(|t| !t.succeeded()).count();
        (r.tasks.len(), failed)
    });
    let start = if view.start_time > 0 {
        view.start_time
    } else {
        facts.start_time
    };
    let end = if view.end_time > 0 {
        view.end_time
    } else {
        facts.end_time
    };
    html! {
        h1 { "Job " span.id { (job_id) } }
        @if !view.job_name.is_empty() { p.job-name { (view.job_name) } }
        @else if let Some(label) = view.logical_plan.as_deref().and_then(bjh_format::label::query_label) {
            p.job-name { (crate::ui::page::name_or_label("", Some(&label))) }
        }
        dl.facts {
            div { dt { "Status" } dd { (page::status(facts.state.status_word())) } }
            div { dt { "Queued" } dd { (page::time(facts.queued_time)) } }
            div { dt { "Started" } dd { (page::time(start)) } }
            div { dt { "Ended" } dd { (page::time(end)) } }
            div { dt { "Duration" } dd {
                @if start > 0 && end >= start { (duration(end - start)) } @else { span.muted { "—" } }
            } }
            div { dt { "Stages" } dd { (view.completed_stages) " / " (view.num_stages) " completed" } }
            @if let Some((attempts, failed)) = attempts {
                div { dt { "Task attempts" } dd {
                    (count(attempts as u64))
                    @if failed > 0 { ", " span.status.bad { (failed) " failed" } }
                } }
            }
            @if let Some(u) = usage {
                div { dt title="Each task attempt's span, from launch to end, times the task slots it held" { "Slot time" } dd {
                    (duration(u.busy_slot_ms))
                    @if u.failed_slot_ms > 0 { ", " span.status.bad { (duration(u.failed_slot_ms)) " in failed attempts" } }
                } }
            }
            @if let Some(r) = records.filter(|r| !r.tasks.is_empty()) {
                @let ran: u64 = r.tasks.iter().map(|t| t.end_exec_time.saturating_sub(t.start_exec_time)).sum();
                div { dt title="Each task attempt's time on its executor, from its start there to its end, summed" { "Executor time" } dd { (duration(ran)) } }
            }
            @if facts.query_hash != 0 {
                @let hash = bjh_format::query_hash::hash_text(facts.query_hash);
                div { dt { "Query hash" } dd {
                    a href={ "/" (query_string([("query_hash", hash.as_str())])) } title="Every run of this query" { code { (hash) } }
                } }
            }
            @if let Some(d) = dropped.filter(|&d| d > 0) {
                div { dt { "Dropped records" } dd { span.status.warn { (d) } " (the timeline and stage numbers may miss tasks)" } }
            }
        }
        @if facts.state == bjh_format::JobState::Failed || view.status == "Failed" {
            div.error-box role="alert" {
                strong { "Why it failed" }
                pre { (view.job_status) }
            }
        } @else if !view.job_status.is_empty() {
            p.muted { (view.job_status) }
        }
    }
}

/// The tabs of the job page.
pub const TABS: &[(&str, &str)] = &[
    ("overview", "Overview"),
    ("profile", "Profile"),
    ("plans", "Plans"),
    ("config", "Config"),
    ("diagnosis", "Diagnosis"),
    ("whatif", "What if"),
];

/// The newest run of the same query before this one, if any.
pub async fn previous_run(ui: &Ui, facts: &Facts) -> Option<String> {
    if facts.query_hash == 0 {
        return None;
    }
    let query = ListQuery {
        query_hash: Some(facts.query_hash),
        after: Some(facts.job_id.to_string()),
        limit: Some(1),
        ..ListQuery::default()
    };
    let page = ui.source.list(&query, Some(facts)).await.ok()?;
    page.rows.first().map(|r| r.facts.job_id().to_string())
}

/// The job page's view: its tab, the plans' format and the config filter,
/// parsed once from the query string.
pub struct JobTab {
    tab: &'static str,
    format: PlanFormat,
    filter: String,
}

impl JobTab {
    /// The view `p` asks for; a bad value is the 400.
    pub fn new(p: &TabParams) -> Result<Self, ApiError> {
        let tab = p.tab.as_deref().unwrap_or("overview");
        let known = TABS.iter().find(|t| t.0 == tab);
        let takes = "overview, profile, plans, config, diagnosis or whatif";
        check("tab", tab, known.is_some(), takes)?;
        let asked = p.format.as_deref().unwrap_or_default();
        let format = match asked {
            "text" | "" => Some(PlanFormat::Default),
            "tree" => Some(PlanFormat::Tree),
            "metrics" => Some(PlanFormat::Metrics),
            _ => None,
        };
        check("format", asked, format.is_some(), "text, tree or metrics")?;
        Ok(JobTab {
            tab: known.map_or("overview", |t| t.0),
            format: format.unwrap_or(PlanFormat::Default),
            filter: p.q.as_deref().unwrap_or_default().to_lowercase(),
        })
    }
}

/// `GET /ui/job/{id}`.
pub async fn page(
    State(ui): State<Ui>,
    Path(job_id): Path<String>,
    params: Result<Params<TabParams>, ApiError>,
) -> Response {
    let JobTab {
        tab,
        format,
        filter,
    } = match params.and_then(|p| JobTab::new(&p.value)) {
        Ok(view) => view,
        Err(e) => return api_error(&ui, e),
    };
    let facts = match ui.source.facts(&job_id).await {
        Ok(Some(f)) => f,
        Ok(None) => {
            return error(
                &ui,
                StatusCode::NOT_FOUND,
                &format!(
                    "No job {job_id:?} here: it may never have run on this scheduler, or its log \
                 may have been removed by retention."
                ),
            );
        }
        Err(e) => return api_error(&ui, e),
    };
    let view: JobView = match body(&ui, &job_id, Resource::Job(format)).await {
        Some(b) => serde_json::from_slice(&b).unwrap_or_default(),
        None => JobView::default(),
    };
    let needs_records = matches!(tab, "overview" | "diagnosis");
    let loaded = if needs_records {
        match records(&ui, &job_id).await {
            Ok(r) => r,
            Err(e) => return api_error(&ui, e),
        }
    } else {
        None
    };
    let dropped = ui
        .source
        .log_of(&job_id)
        .and_then(|(h, _)| h.dropped_records);
    // Slot time from the records (upstream's logs too), each task's slots
    // from the stored `/stages`.
    let usage = match &loaded {
        Some((_, records)) => {
            let stages = stored_stages(&ui, &job_id, PlanFormat::Default).await;
            Some(records.usage(&bjh_format::stages::task_slots(stages.values())))
        }
        None => None,
    };
    let prev = previous_run(&ui, &facts).await;
    let content = match tab {
        "overview" => overview(&ui, &job_id, loaded.as_ref().map(|l| &l.1)).await,
        "profile" => profile(&ui, &job_id).await,
        "plans" => plans(&ui, &job_id, &view, format).await,
        "config" => config(&ui, &job_id, &filter).await,
        "whatif" => crate::ui::whatif::whatif_tab(&ui, &job_id).await,
        _ => diagnosis_tab(&ui, &job_id, loaded.as_ref()).await,
    };
    // A running job's page follows it, on a scheduler or on a history
    // server over the directory a scheduler records into.
    let live = facts.state.is_unfinished() && facts.state != bjh_format::JobState::Abandoned;
    let body = html! {
        nav.crumbs aria-label="Breadcrumb" { a href="/" { "Jobs" } " › " (job_id) }
        (summary(&job_id, &facts, &view, loaded.as_ref().map(|l| &l.1), usage, dropped))
        (tabs(&job_id, tab, prev.as_deref()))
        @if live { p.notice.live role="status" { "The job is running: this page refreshes as it changes." } }
        (content)
    };
    html_response(
        StatusCode::OK,
        page::frame(&ui, &format!("Job {job_id}"), Nav::Jobs, live, body),
    )
}

/// The tabs, the log's download and the link to compare with the
/// previous run of the same query.
pub fn tabs(job_id: &str, tab: &str, prev: Option<&str>) -> Markup {
    let base = job_href(job_id);
    html! {
        nav.tabs aria-label="Job sections" {
            @for (key, label) in TABS {
                a href={ (base) (query_string([("tab", *key)])) } aria-current=[(tab == *key).then_some("page")] { (label) }
            }
            span.spacer {}
            a.action href={ (base) "/eventlog" } download { "Download event log" }
            @if let Some(prev) = prev {
                a.action href={ "/ui/compare" (query_string([("a", prev), ("b", job_id)])) } { "Compare with previous run" }
            }
        }
    }
}

pub async fn overview(ui: &Ui, job_id: &str, records: Option<&JobRecords>) -> Markup {
    let dot = body(ui, job_id, Resource::Dot).await;
    let dot = Dot::parse(
        dot.as_deref()
            .map(String::from_utf8_lossy)
            .as_deref()
            .unwrap_or(""),
    );
    let stored = stored_stages(ui, job_id, PlanFormat::Default).await;
    let stats = stage_stats(records, &stored, &dot);
    let base = job_href(job_id);
    html! {
        section.stages aria-labelledby="stages-h" {
            h2 id="stages-h" { "Stages" }
            div.split {
                div.graph-box { (stage_graph(job_id, &dot, &stored)) }
                div.table-wrap {
                    table.stages {
                        thead {
                            tr {
                                th rowspan="2" { "Stage" } th rowspan="2" { "Status" }
                                th.num rowspan="2" { "Tasks" } th.num rowspan="2" { "Rows in" }
                                th.num rowspan="2" { "Rows out" } th.num rowspan="2" { "Compute" }
                                th.num rowspan="2" { "Duration" }
                                th.group colspan="5" { "Task duration" }
                                th.group colspan="5" { "Rows out per task" }
                            }
                            tr {
                                @for _ in 0..2 { th.num { "min" } th.num { "p25" } th.num { "median" } th.num { "p75" } th.num { "max" } }
                            }
                        }
                        tbody {
                            @for s in &stats {
                                tr {
                                    td { a href={ (base) "/stage/" (s.stage_id) } { "Stage " (s.stage_id) } }
                                    td { (page::status(&s.status)) }
                                    td.num {
                                        (s.succeeded)
                                        @if s.failed > 0 { " " span.status.bad title="failed attempts" { "+" (s.failed) " failed" } }
                                    }
                                    td.num { (count(s.input_rows)) }
                                    td.num { (count(s.output_rows)) }
                                    td.num { (duration_ns(s.compute_nanos)) }
                                    td.num { @if s.start > 0 && s.end >= s.start { (duration(s.end - s.start)) } @else { "—" } }
                                    @for d in s.duration { td.num.q { (duration(d)) } }
                                    @for r in s.rows_out { td.num.q { (count(r)) } }
                                }
                            }
                        }
                    }
                }
            }
            @if records.is_none() {
                p.muted { "No event log of this job here: the stage numbers are the scheduler's." }
            }
        }
        section.timeline-section aria-labelledby="timeline-h" {
            h2 id="timeline-h" { "Task timeline" }
            div.timeline id="timeline" data-src={ (base) "/timeline.json" } {
                p.muted.loading { "Drawing the timeline…" }
                noscript {
                    p { "The interactive timeline needs scripts. "
                        a href={ (base) "/timeline.svg" } { "The timeline as a picture" } "." }
                }
            }
            script src={ "/ui/assets/timeline.js?v=" (env!("CARGO_PKG_VERSION")) } defer {}
        }
    }
}

pub fn plan_block(title: &str, text: Option<&str>) -> Markup {
    html! {
        details open {
            summary { (title) }
            @match text.filter(|t| !t.trim().is_empty()) {
                Some(t) => pre.plan { (t) },
                None => p.muted { "Not recorded." },
            }
        }
    }
}

pub async fn plans(ui: &Ui, job_id: &str, view: &JobView, format: PlanFormat) -> Markup {
    let stored = stored_stages(ui, job_id, format).await;
    let base = job_href(job_id);
    let current = match format {
        PlanFormat::Default => "text",
        PlanFormat::Tree => "tree",
        PlanFormat::Metrics => "metrics",
    };
    html! {
        nav.formats aria-label="Plan format" {
            @for f in ["text", "tree", "metrics"] {
                a href={ (base) (query_string([("tab", "plans"), ("format", f)])) } aria-current=[(f == current).then_some("page")] { (f) }
            }
        }
        (plan_block("Logical plan", view.logical_plan.as_deref()))
        (plan_block("Physical plan", view.physical_plan.as_deref()))
        @for s in stored.values() {
            (plan_block(&format!("Stage {} plan · {}", s.stage_id, s.stage_status), Some(s.plan())))
        }
    }
}

pub async fn config(ui: &Ui, job_id: &str, filter: &str) -> Markup {
    let pairs: Vec<(String, String)> = match body(ui, job_id, Resource::Config).await {
        Some(b) => match serde_json::from_slice::<BTreeMap<String, serde_json::Value>>(&b) {
            Ok(map) => map
                .into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (k, v)
                })
                .collect(),
            Err(_) => Vec::new(),
        },
        None => Vec::new(),
    };
    let shown: Vec<&(String, String)> = pairs
        .iter()
        .filter(|(k, v)| {
            filter.is_empty()
                || k.to_lowercase().contains(filter)
                || v.to_lowercase().contains(filter)
        })
        .collect();
    html! {
        form.filters method="get" role="search" {
            input type="hidden" name="tab" value="config";
            label { "Search " input id="config-filter" type="search" name="q" value=(filter) placeholder="key or value"; }
            button type="submit" { "Filter" }
        }
        p.summary { (shown.len()) " of " (pairs.len()) " settings" }
        div.table-wrap {
            table.config id="config-table" {
                thead { tr { th { "Key" } th { "Value" } } }
                tbody {
                    @for (k, v) in shown {
                        tr {
                            td { code { (k) } }
                            td { @if v == bjh_recording::redact::REDACTED { span.muted { (v) } } @else { code { (v) } } }
                        }
                    }
                }
            }
        }
    }
}

pub async fn diagnosis_tab(
    ui: &Ui,
    job_id: &str,
    loaded: Option<&(JobHeader, JobRecords)>,
) -> Markup {
    let no_log =
        html! { p.muted { "No event log of this job here: a diagnosis reads the job's log." } };
    if loaded.is_none() {
        return no_log;
    }
    // The route's own answer: computed off the async threads, kept by
    // the log's identity.
    let d: Diagnosis = match crate::insight::diagnosis_of(&*ui.source, job_id).await {
        Ok(Some(d)) => d,
        Ok(None) => return no_log,
        Err(e) => return html! { p.notice { "The diagnosis cannot be made: " (e.to_string()) } },
    };
    let base = job_href(job_id);
    html! {
        @if d.partial {
            p.notice { "This diagnosis may miss something: " (d.partial_reasons.join("; ")) }
        }
        p.summary {
            (d.task_attempts) " task attempts (" (d.failed_attempts) " failed) over "
            (d.stages) " stages and " (d.executors) " executors."
        }
        @if d.findings.is_empty() {
            p.ok-box { "Nothing stands out: no skew, straggler, slow executor, failure, spill or queueing beyond the thresholds." }
        }
        @for f in &d.findings {
            article.finding {
                h3 {
                    span class={ "severity " (format!("{:?}", f.severity).to_lowercase()) } { (format!("{:?}", f.severity)) }
                    " " code { (f.kind) }
                    @if let Some(s) = f.stage_id { " · " a href={ (base) "/stage/" (s) } { "stage " (s) } }
                    @if let Some(e) = &f.executor { " · executor " code { (e) } }
                }
                p { (f.message) }
                @if !f.evidence.is_empty() {
                    dl.evidence {
                        @for (k, v) in &f.evidence {
                            div { dt { (k) } dd { (match v { serde_json::Value::String(s) => s.clone(), other => other.to_string() }) } }
                        }
                    }
                }
                @if !f.tasks.is_empty() {
                    p.muted { "Tasks: " (f.tasks.iter().take(20).map(u32::to_string).collect::<Vec<_>>().join(", "))
                        @if f.tasks.len() > 20 { " …" } }
                }
            }
        }
        @if !d.advice.is_empty() {
            h3 { "Settings with a predicted effect" }
            div.table-wrap { table id="advice" {
                thead { tr { th { "Set" } th { "to" } th.num { "predicted" } th.num { "saves" } th.num { "slot-seconds" } th { "how it was predicted" } th { "the next run" } } }
                tbody {
                    @for a in &d.advice {
                        tr {
                            td { code { (a.setting) } } td { code { (a.value) } }
                            td.num { @match a.predicted_ms { Some(ms) => (duration(ms)), None => "—" } }
                            td.num { @match a.saving_ms { Some(ms) if ms >= 0 => (duration(ms as u64)), Some(ms) => { "−" (duration(ms.unsigned_abs())) }, None => "—" } }
                            td.num { @match a.slot_seconds { Some(s) => { (format!("{s:.1}")) " (now " (format!("{:.1}", a.current_slot_seconds)) ")" }, None => "—" } }
                            td.muted { (a.basis) }
                            td { @match &a.next_run {
                                Some(c) => {
                                    @let verdict = if c.contradicted { "contradicted" } else { "confirmed" };
                                    span class={ "checked " (verdict) } title={ "the query's next run ran on this shape: predicted " (format!("{:.0}%", c.error * 100.0)) " off" } { (verdict) }
                                    ": " a href=(job_href(&c.job_id)) { "took " (duration(c.actual_ms)) } " (off by " (format!("{:.0}%", c.error * 100.0)) ")"
                                },
                                None => span.muted { "—" },
                            } }
                        }
                    }
                }
            } }
        }
        @if let Some(n) = &d.next_run {
            p id="next-run" {
                "The next run of this query, " a href=(job_href(&n.job_id)) { (n.job_id) } ", ran on "
                (n.shape.executors) " executor" @if n.shape.executors != 1 { "s" } " of " (n.shape.slots) " slot" @if n.shape.slots != 1 { "s" }
                " and took " (duration(n.observed_ms)) ". "
                @match (n.predicted_ms, n.error) {
                    (Some(p), Some(e)) => { "This job replayed on that shape predicted " (duration(p)) " (off by " (format!("{:.0}%", e * 100.0)) ")." },
                    _ => { "It computed other partitions (" (n.partitions) " in its widest stage): other tasks, which no replay of this job's predicts." },
                }
            }
        }
        p.muted { "Thresholds and kinds: see docs/diagnosis.md. As JSON: " code { "/api/job/" (segment(job_id)) "/diagnosis" } }
    }
}
