//! `/ui/usage`: how full the cluster was and who used it. The same
//! figures as `GET /api/usage` (`crate::usage`): utilisation over the range
//! as a picture (slots up, busy, idle, by hour or by a few hours), the
//! totals, and the groups (queries, names or schedulers) by what they used,
//! each linking to its runs.

use crate::error::ApiError;
use crate::params::Params;
use crate::ui::page::{self, Nav, duration, query_string};
use crate::ui::{Ui, api_error, html_response};
use crate::usage::{GroupBy, UsageParams, asked, usage_of};
use axum::extract::State;
use axum::response::Response;
use bjh_analysis::usage::{HourUsage, Usage};
use http::StatusCode;
use maud::{Markup, html};

/// Groups listed on the page.
const SHOWN_GROUPS: usize = 50;
/// Columns of the picture at most (hours are summed into wider columns).
const COLUMNS: usize = 240;
/// The range presets: word, label, span.
const PRESETS: [(&str, &str, u64); 3] = [
    ("24h", "Last 24 hours", 86_400_000),
    ("7d", "Last 7 days", 7 * 86_400_000),
    ("30d", "Last 30 days", 30 * 86_400_000),
];

/// The page's parameters: the API's, and a preset range.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// `24h`, `7d` or `30d` before now (when `from` is not given).
    pub range: Option<String>,
    /// As `/api/usage` takes it.
    pub from: Option<String>,
    /// As `/api/usage` takes it.
    pub to: Option<String>,
    /// As `/api/usage` takes it.
    pub group_by: Option<String>,
    /// As `/api/usage` takes it.
    pub tag: Option<String>,
    /// As `/api/usage` takes it: one cluster.
    pub scheduler_id: Option<String>,
}

/// `GET /ui/usage`.
pub async fn page(State(ui): State<Ui>, params: Result<Params<PageParams>, ApiError>) -> Response {
    let p = match params {
        Ok(p) => p.value,
        Err(e) => return api_error(&ui, e),
    };
    let now = bjh_format::now_millis();
    let preset = PRESETS
        .iter()
        .find(|r| p.range.as_deref() == Some(r.0))
        .or_else(|| p.from.is_none().then_some(&PRESETS[0]));
    let asked_params = UsageParams {
        from: p
            .from
            .clone()
            .or(preset.map(|r| now.saturating_sub(r.2).to_string())),
        to: p.to.clone(),
        group_by: p.group_by.clone(),
        tag: p.tag.clone(),
        scheduler_id: p.scheduler_id.clone(),
    };
    let group_by = match asked(&asked_params, now) {
        Ok((_, _, g)) => g,
        Err(e) => return api_error(&ui, e),
    };
    let price = ui.usage.slot_hour_price;
    let usage = match usage_of(ui.store.clone(), &asked_params, price).await {
        Ok(u) => u,
        Err(e) => return api_error(&ui, e),
    };
    let body = html! {
        h1 { "Usage" }
        (choices(preset.map(|r| r.0), group_by, &p))
        (totals(&usage))
        (picture(&usage.hours))
        (groups(&usage, group_by))
        p.muted {
            "Capacity is each executor's task slots times the time it was registered, from the \
             scheduler's cluster log; busy is the jobs' slot time (every task attempt's span times \
             its slots), spread over each job's run; idle goes to the jobs that ran in the same hour \
             by their share of the busy time, or stays unattributed. "
            a href={ "/api/usage" (query_string([("from", usage.from.to_string().as_str()), ("to", usage.to.to_string().as_str()), ("group_by", group_by.word())].into_iter().chain(p.scheduler_id.as_deref().map(|s| ("scheduler_id", s))))) } { "The same as JSON" }
            "."
        }
    };
    html_response(
        StatusCode::OK,
        page::frame(&ui, "Usage", Nav::Usage, false, body),
    )
}

/// The range presets and groupings, as links that keep the other choice.
fn choices(preset: Option<&str>, group_by: GroupBy, p: &PageParams) -> Markup {
    // One cluster stays chosen whatever else is.
    let cluster = p.scheduler_id.as_deref().map(|s| ("scheduler_id", s));
    let range = |word: &str| {
        query_string(
            [("range", word), ("group_by", group_by.word())]
                .into_iter()
                .chain(cluster),
        )
    };
    let by = |g: GroupBy| match (preset, &p.from) {
        (_, Some(from)) => query_string(
            [
                ("from", from.as_str()),
                ("to", p.to.as_deref().unwrap_or("")),
                ("group_by", g.word()),
            ]
            .into_iter()
            .chain(cluster),
        ),
        (word, None) => query_string(
            [("range", word.unwrap_or("24h")), ("group_by", g.word())]
                .into_iter()
                .chain(cluster),
        ),
    };
    html! {
        nav.choices aria-label="Range and grouping" {
            @for (word, label, _) in PRESETS {
                a href={ "/ui/usage" (range(word)) } aria-current=[(preset == Some(word)).then_some("true")] { (label) }
            }
            " · by "
            @for (word, g) in GroupBy::WORDS {
                a href={ "/ui/usage" (by(g)) } aria-current=[(g == group_by).then_some("true")] { (word) }
            }
        }
    }
}

fn totals(u: &Usage) -> Markup {
    html! {
        dl.facts.usage-totals {
            div { dt { "Range" } dd { (page::time(u.from)) " – " (page::time(u.to)) } }
            div { dt { "Slot time up" } dd { (duration(u.capacity_slot_ms)) } }
            div { dt { "Busy" } dd { (duration(u.busy_slot_ms)) } }
            div { dt { "Idle" } dd { (duration(u.idle_slot_ms)) } }
            div { dt { "Idle, no job running" } dd { (duration(u.unattributed_idle_slot_ms)) } }
            div { dt title="From queued to started, summed over the jobs" { "Jobs waited" } dd { (duration(u.waited_ms)) } }
            div { dt { "Utilisation" } dd {
                @match u.utilisation { Some(x) => (format!("{:.1} %", x * 100.0)), None => span.muted { "no cluster log in this range" } }
            } }
            @if let Some(cost) = u.cost { div { dt { "Cost" } dd { (format!("{cost:.2}")) } } }
            @if u.over_capacity_slot_ms > 0 {
                div { dt { "Busy beyond the recorded capacity" } dd { span.status.warn { (duration(u.over_capacity_slot_ms)) } } }
            }
            @if u.estimated_capacity_slot_ms > 0 {
                div { dt { "Estimated capacity" } dd { (duration(u.estimated_capacity_slot_ms)) " (executors whose end was not recorded)" } }
            }
            @if u.jobs_without_usage > 0 {
                div { dt { "Jobs without slot time" } dd { (u.jobs_without_usage) " (their logs do not state it)" } }
            }
        }
    }
}

/// Columns of at most [`COLUMNS`], hours summed into each.
fn columns(hours: &[HourUsage]) -> Vec<HourUsage> {
    let per = hours.len().div_ceil(COLUMNS).max(1);
    hours
        .chunks(per)
        .map(|c| HourUsage {
            start: c[0].start,
            capacity_slot_ms: c.iter().map(|h| h.capacity_slot_ms).sum(),
            busy_slot_ms: c.iter().map(|h| h.busy_slot_ms).sum(),
            idle_slot_ms: c.iter().map(|h| h.idle_slot_ms).sum(),
            peak_slots: c.iter().map(|h| h.peak_slots).max().unwrap_or(0),
        })
        .collect()
}

/// Slots up (outline), busy (filled) and idle (light) per column.
fn picture(hours: &[HourUsage]) -> Markup {
    let cols = columns(hours);
    let top = cols
        .iter()
        .map(|c| c.capacity_slot_ms.max(c.busy_slot_ms))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let (w, h) = (900.0, 160.0);
    let step = w / cols.len().max(1) as f64;
    let y = |v: u64| h - v as f64 / top * h;
    html! {
        figure.usage-chart {
            svg role="img" aria-label="Slot time by hour: up, busy and idle" viewBox={ "0 0 " (w) " " (h) } preserveAspectRatio="none" {
                @for (i, c) in cols.iter().enumerate() {
                    @let x = i as f64 * step;
                    g {
                        title { (page::time_text(c.start)) ": " (duration(c.busy_slot_ms)) " busy of " (duration(c.capacity_slot_ms)) " up, peak " (c.peak_slots) " slots" }
                        rect.idle x=(format!("{x:.2}")) y=(format!("{:.2}", y(c.capacity_slot_ms))) width=(format!("{:.2}", step * 0.9)) height=(format!("{:.2}", h - y(c.capacity_slot_ms))) {}
                        rect.busy x=(format!("{x:.2}")) y=(format!("{:.2}", y(c.busy_slot_ms))) width=(format!("{:.2}", step * 0.9)) height=(format!("{:.2}", h - y(c.busy_slot_ms))) {}
                    }
                }
            }
            figcaption {
                span.key.busy { "busy" } " " span.key.idle { "idle (up, not busy)" }
                @if let (Some(a), Some(b)) = (cols.first(), cols.last()) { " · " (page::time(a.start)) " to " (page::time(b.start)) }
            }
        }
    }
}

fn groups(u: &Usage, group_by: GroupBy) -> Markup {
    let labels = bjh_store::labels::all();
    let link = |key: &str| -> String {
        match group_by {
            GroupBy::Query => format!("/{}", query_string([("query_hash", key)])),
            GroupBy::Name => format!("/{}", query_string([("name", key)])),
            GroupBy::Scheduler => format!("/{}", query_string([("scheduler_id", key)])),
            // The job list has no tag or executor filter.
            GroupBy::Tag | GroupBy::Executor => String::new(),
        }
    };
    html! {
        h2 { "By " (group_by.word()) }
        @if u.groups.is_empty() {
            p.empty { "No finished job with a known slot time ran in this range." }
        } @else {
            div.table-wrap { table {
                thead { tr {
                    th { (group_by.word()) } th.num { "Jobs" } th.num { "Busy" } th.num { "Idle share" } th.num { "Total" } th.num title="From queued to started, summed" { "Waited" }
                    @if u.cost.is_some() { th.num { "Cost" } }
                } }
                tbody {
                    @for g in u.groups.iter().take(SHOWN_GROUPS) {
                        tr {
                            td.name {
                                @if g.key.is_empty() || g.key == "(others)" { span.muted { @if g.key.is_empty() { "(none)" } @else { "(others)" } } }
                                @else if matches!(group_by, GroupBy::Tag | GroupBy::Executor) { (g.key) }
                                @else {
                                    a href=(link(&g.key)) title="Its runs" {
                                        @if group_by == GroupBy::Query { code { (g.key) } } @else { (g.key) }
                                    }
                                    @if group_by == GroupBy::Query {
                                        @if let Some(label) = bjh_format::query_hash::parse_hash(&g.key).and_then(|h| labels.get(h)) { " " span.label { (label) } }
                                    }
                                }
                            }
                            td.num { (g.jobs) }
                            td.num { (duration(g.busy_slot_ms)) }
                            td.num { (duration(g.idle_share_slot_ms)) }
                            td.num { (duration(g.total_slot_ms)) }
                            td.num { (duration(g.waited_ms)) }
                            @if let Some(cost) = g.cost { td.num { (format!("{cost:.2}")) } }
                        }
                    }
                }
            } }
        }
    }
}
