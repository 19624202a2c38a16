//! The jobs page (`/`): counts per status, filters, the table, and paging
//! by cursor, all as URL parameters. The parameters are `GET /api/jobs`'
//! own ([`JobsParams`], parsed by the same extractor), so a filtered
//! list's URL names the same jobs in both; the filter form has a control
//! for each of them (a hidden one for those it does not show).
//!
//! **Invariant:** a page reads one page of the source, never the list: the
//! counts come from the store's running tallies, so the page costs the
//! same at a million jobs as at ten.

use crate::error::ApiError;
use crate::jobs_params::{JobsParams, RANGES};
use crate::params::{Params, described};
use crate::router::cursor_facts;
use crate::ui::page::{self, Nav, count, duration, exact, job_href, query_string};
use crate::ui::{Ui, api_error, html_response};
use axum::extract::State;
use axum::response::Response;
use bjh_format::JobState;
use bjh_store::query::{ListQuery, Order, Page, Row, Sort};
use http::StatusCode;
use maud::{Markup, html};

/// Rows per page unless `limit` says otherwise.
pub const PAGE_ROWS: usize = 50;

/// The list entry fields the table shows beyond the facts.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub struct Entry {
    job_status: String,
    num_stages: u64,
    completed_stages: u64,
    query_label: Option<String>,
}

/// The query's parameters without the cursor: what every link of the page
/// keeps.
pub fn kept(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "after" | "before" | "offset"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// `kept` with `key` set to `value` (or removed when `None`).
pub fn with<'a>(
    kept: &[(&'a str, &'a str)],
    key: &'a str,
    value: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<_> = kept.iter().filter(|(k, _)| *k != key).copied().collect();
    if let Some(v) = value {
        out.push((key, v));
    }
    out
}

/// The page's view: its parameters (without empty fields, as link
/// pairs), the list query they make, the `range` preset and the names
/// ignored.
pub struct View {
    pairs: Vec<(String, String)>,
    query: ListQuery,
    range: Option<&'static str>,
    ignored: Vec<String>,
}

impl View {
    /// The view `params` ask for; a bad value is the 400.
    pub fn new(params: Params<JobsParams>) -> Result<Self, ApiError> {
        let Params { value, ignored } = params;
        let mut query = value.query(bjh_format::now_millis())?;
        query.limit.get_or_insert(PAGE_ROWS);
        let range = value.range.as_deref();
        let range = RANGES.iter().find(|r| Some(r.0) == range).map(|r| r.0);
        // The same struct the route parsed, written back as the page's
        // links keep it: a form's empty fields dropped.
        let written = serde_html_form::to_string(&value).unwrap_or_default();
        let pairs = url::form_urlencoded::parse(written.as_bytes())
            .into_owned()
            .filter(|(_, v)| !v.is_empty())
            .collect();
        Ok(View {
            pairs,
            query,
            range,
            ignored,
        })
    }
}

/// `GET /`.
pub async fn page(State(ui): State<Ui>, params: Result<Params<JobsParams>, ApiError>) -> Response {
    let view = match params.and_then(View::new) {
        Ok(view) => view,
        Err(e) => return api_error(&ui, e),
    };
    let query = &view.query;
    let cursor = match cursor_facts(&*ui.source, query).await {
        Ok(c) => c,
        Err(e) => return api_error(&ui, e),
    };
    let (page, counts) = match (
        ui.source.list(query, cursor.as_ref()).await,
        ui.source.counts(query.wants_unfinished()).await,
    ) {
        (Ok(p), Ok(c)) => (p, c),
        (Err(e), _) | (_, Err(e)) => return api_error(&ui, e),
    };
    let running = page
        .rows
        .iter()
        .any(|r| r.facts.state().is_unfinished() && r.facts.state() != JobState::Abandoned)
        || counts[JobState::Running.index()] + counts[JobState::Queued.index()] > 0;
    let refresh = running && query.cursor_id().is_none();
    let body = render(&view, &page, &counts, refresh);
    html_response(
        StatusCode::OK,
        page::frame(&ui, "Jobs", Nav::Jobs, refresh, body),
    )
}

/// The page's body: counts, filters, notices, the table, the pager.
pub fn render(view: &View, page: &Page, counts: &[usize; 6], refresh: bool) -> Markup {
    let (query, kept) = (&view.query, kept(&view.pairs));
    html! {
        h1 { "Jobs" }
        (status_counts(query, &kept, counts))
        (filters(&view.pairs, query, view.range))
        @if !view.ignored.is_empty() {
            p.notice { "Ignored unknown parameters: " (view.ignored.join(", ")) }
        }
        @if refresh {
            p.notice.live role="status" { "Jobs are running: this list refreshes as they change." }
        }
        p.summary {
            (exact(page.total)) " job" @if page.total != 1 { "s" } " match"
            @if page.total == 1 { "es" } "."
        }
        @if page.rows.is_empty() {
            p.empty { "No job matches these filters." }
        } @else {
            (table(query, &kept, page))
        }
        (pager(query, &kept, page))
    }
}

/// The links that narrow the list to one status, with their counts.
pub fn status_counts(query: &ListQuery, kept: &[(&str, &str)], counts: &[usize; 6]) -> Markup {
    let chosen: Vec<JobState> = query.states.clone().unwrap_or_default();
    html! {
        nav.counts aria-label="Jobs by status" {
            a href={ "/" (query_string(with(kept, "status", None))) }
                aria-current=[chosen.is_empty().then_some("true")] {
                "All " span.n { (exact(counts.iter().sum())) }
            }
            @for (word, state) in JobState::ALL {
                @let n = counts[state.index()];
                @if n > 0 || chosen.contains(&state) || !state.is_unfinished() {
                    a href={ "/" (query_string(with(kept, "status", Some(word)))) }
                        aria-current=[(chosen == [state]).then_some("true")] {
                        (page::status(state.status_word())) " " span.n { (exact(n)) }
                    }
                }
            }
        }
    }
}

/// A sortable column's head: a click on the active column turns it; on
/// another, sorts by it in its default direction.
pub fn sort_head(
    query: &ListQuery,
    kept: &[(&str, &str)],
    key: &str,
    sort: Sort,
    label: &str,
) -> Markup {
    let active = query.sort == sort;
    let order = query.order();
    let next_order = match (active, order) {
        (true, Order::Desc) => "asc",
        (true, Order::Asc) => "desc",
        (false, _) if sort == Sort::Name => "asc",
        (false, _) => "desc",
    };
    let href = query_string(with(
        &with(kept, "sort", Some(key)),
        "order",
        Some(next_order),
    ));
    let aria = active.then_some(match order {
        Order::Asc => "ascending",
        Order::Desc => "descending",
    });
    html! {
        th aria-sort=[aria] {
            a href={ "/" (href) } { (label) @if active { @if order == Order::Asc { " ▲" } @else { " ▼" } } }
        }
    }
}

/// The page's jobs.
pub fn table(query: &ListQuery, kept: &[(&str, &str)], page: &Page) -> Markup {
    let longest = page.rows.iter().filter_map(|r| r.facts.duration()).max();
    let longest = longest.unwrap_or(0);
    let dropped_any = page.rows.iter().any(|r| r.facts.dropped_records() > 0);
    // Schedulers are shown once a log on the page names one (a history of
    // one cluster written before ids were recorded shows no column of
    // blanks), or when the list is filtered by them.
    let schedulers =
        query.scheduler_ids.is_some() || page.rows.iter().any(|r| r.facts.scheduler_id().is_some());
    let head = |key, sort, label| sort_head(query, kept, key, sort, label);
    html! {
        div.table-wrap {
            table.jobs {
                thead { tr {
                    th { "Job" }
                    (head("name", Sort::Name, "Name"))
                    th { "Status" }
                    (head("queued_time", Sort::QueuedTime, "Queued"))
                    (head("start_time", Sort::StartTime, "Started"))
                    (head("duration", Sort::Duration, "Duration"))
                    th.num { "Stages" }
                    @if schedulers { th { "Scheduler" } }
                    @if dropped_any { th.num title="Progress records dropped under backpressure" { "Dropped" } }
                } }
                tbody {
                    @for row in &page.rows { (job_row(row, longest, schedulers, dropped_any)) }
                }
            }
        }
    }
}

/// One job's row.
pub fn job_row(row: &Row, longest: u64, schedulers: bool, dropped_any: bool) -> Markup {
    let f = &row.facts;
    let entry: Entry = serde_json::from_slice(&row.entry).unwrap_or_default();
    html! {
        tr {
            td.id { a href=(job_href(f.job_id())) { (f.job_id()) } }
            td.name title=[(f.job_name().len() > 40).then_some(f.job_name())] { (page::name_or_label(f.job_name(), entry.query_label.as_deref())) }
            td title=[(f.state() == JobState::Failed).then_some(&entry.job_status)] { (page::status(f.state().status_word())) }
            td { (page::time(f.queued_time())) }
            td { (page::time(f.start_time())) }
            td.num {
                @match f.duration() {
                    Some(d) => {
                        (duration(d))
                        i class={ "bar b" (bar_step(d, longest)) } {}
                    }
                    None => span.muted { "—" },
                }
            }
            td.num { (entry.completed_stages) " / " (entry.num_stages) }
            @if schedulers {
                td.scheduler {
                    @match f.scheduler_id() {
                        Some(id) => a href={ "/" (query_string([("scheduler_id", id)])) } { (id) },
                        None => span.muted title="Its log was written before the scheduler id was recorded" { "not recorded" },
                    }
                }
            }
            @if dropped_any {
                td.num { @if f.dropped_records() > 0 { span.warn { (count(f.dropped_records())) } } }
            }
        }
    }
}

/// The links to the newest, previous and next pages.
pub fn pager(query: &ListQuery, kept: &[(&str, &str)], page: &Page) -> Markup {
    let first = page.rows.first().map(|r| r.facts.job_id().to_string());
    let last = page.rows.last().map(|r| r.facts.job_id().to_string());
    let full = Some(page.rows.len()) == query.limit;
    let has_prev = query.after.is_some() || (query.before.is_some() && full);
    let has_next = full || query.before.is_some();
    html! {
        nav.pager aria-label="Pages" {
            @if query.cursor_id().is_some() {
                a href={ "/" (query_string(kept.iter().copied())) } { "« Newest" }
            }
            @if has_prev && let Some(first) = &first {
                a rel="prev" href={ "/" (query_string(with(kept, "before", Some(first)))) } { "‹ Previous" }
            }
            @if has_next && let Some(last) = &last {
                a rel="next" href={ "/" (query_string(with(kept, "after", Some(last)))) } { "Next ›" }
            }
        }
    }
}

/// The bar of a duration: 0 to 20 twentieths of the page's longest.
pub fn bar_step(d: u64, longest: u64) -> u64 {
    (d.saturating_mul(20) / longest.max(1)).min(20)
}

/// The list's parameters the filter form shows a control for. The others
/// it keeps as hidden fields, but for the cursor (`after`, `before`,
/// `offset`): new filters start at the first page.
pub const SHOWN: &[&str] = &[
    "status",
    "name",
    "range",
    "started_after",
    "started_before",
    "min_duration_ms",
    "scheduler_id",
    "include_unfinished",
];

/// The parameters the form keeps hidden: every one of the list's that it
/// neither shows nor drops.
pub fn hidden() -> Vec<String> {
    described::<JobsParams>()
        .into_iter()
        .map(|p| p.name)
        .filter(|n| {
            !SHOWN.contains(&n.as_str()) && !matches!(n.as_str(), "after" | "before" | "offset")
        })
        .collect()
}

/// The filter row: a plain GET form, so it works without scripts and its
/// result is a URL.
pub fn filters(pairs: &[(String, String)], query: &ListQuery, range: Option<&str>) -> Markup {
    let value = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let one_status = query.states.as_ref().filter(|s| s.len() == 1).map(|s| s[0]);
    html! {
        form.filters method="get" action="/" role="search" {
            label { "Status "
                select name="status" {
                    option value="" selected[one_status.is_none()] { "Any" }
                    @for (word, state) in JobState::ALL {
                        option value=(word) selected[one_status == Some(state)] { (state.status_word()) }
                    }
                }
            }
            label { "Name "
                input type="search" name="name" value=(value("name")) placeholder="contains…" size="16";
            }
            label { "Started "
                select name="range" {
                    option value="" selected[range.is_none()] { "Any time" }
                    @for (key, label, _) in RANGES {
                        option value=(key) selected[range == Some(*key)] { (label) }
                    }
                }
            }
            label { "from "
                input type="text" name="started_after" value=(value("started_after"))
                    placeholder="2026-01-01T00:00:00Z" size="20" title="RFC 3339 time or epoch milliseconds";
            }
            label { "to "
                input type="text" name="started_before" value=(value("started_before"))
                    placeholder="2026-01-02T00:00:00Z" size="20" title="RFC 3339 time or epoch milliseconds";
            }
            label { "Min duration (ms) "
                input type="number" name="min_duration_ms" min="0" value=(value("min_duration_ms")) size="8";
            }
            label { "Scheduler "
                input type="search" name="scheduler_id" value=(value("scheduler_id")) placeholder="id, id…" size="14"
                    title="Only jobs these schedulers ran (comma-separated ids)";
            }
            label.check {
                input type="checkbox" name="include_unfinished" value="true" checked[query.include_unfinished];
                " Unfinished (running, abandoned) logs"
            }
            @for key in hidden() {
                @if !value(&key).is_empty() {
                    input type="hidden" name=(key) value=(value(&key));
                }
            }
            button type="submit" { "Apply" }
            " "
            a href="/" { "Reset" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter form keeps every list parameter a filtered URL can
    /// carry, shown or hidden: what the API description lists (the
    /// struct's own description, not a list kept here) but the cursor.
    #[test]
    fn the_filter_form_has_a_control_for_every_list_parameter() {
        let names: Vec<String> = described::<JobsParams>()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert!(names.len() > 15, "{names:?}");
        let pairs: Vec<(String, String)> =
            names.iter().map(|n| (n.clone(), "v".to_string())).collect();
        let form = filters(&pairs, &ListQuery::default(), None).into_string();
        for name in &names {
            let kept = form.contains(&format!("name=\"{name}\""));
            let cursor = matches!(name.as_str(), "after" | "before" | "offset");
            assert_eq!(kept, !cursor, "{name}: {form}");
        }
    }
}
