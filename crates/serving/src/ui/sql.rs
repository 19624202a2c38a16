//! The SQL page (`/ui/sql?q=`): an editor, the example questions of
//! `docs/sql.md`, the first [`SHOWN`] rows of the answer as a table, and
//! the whole answer as a CSV download (`/ui/sql.csv?q=`). The query is a
//! URL parameter, so an answer is a link to share; it runs through the
//! same engine, workers, limits and refusals as `POST /api/sql`.
//!
//! **Invariant:** a page of another site cannot make the server run SQL
//! through these URLs: a query runs only for a request that the browser
//! says came from this server's own pages, or from the user directly (a
//! typed or bookmarked link): `Sec-Fetch-Site` `same-origin` or `none`,
//! or no such header (not a browser, or one too old to send it). A link
//! followed from elsewhere opens the page with the query in the editor,
//! not run; an embed from elsewhere is refused.

use crate::params::Params;
use crate::ui::page::{self, Nav, query_string};
use crate::ui::{Ui, api_error, error, html_response};
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use bjh_sql::worker::Format;
use bjh_sql::{Engine, SqlEngine};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use maud::{Markup, html};
use std::sync::Arc;

/// Rows the page shows (the CSV has them all, up to the row limit).
pub const SHOWN: usize = 1_000;

/// Whether the browser says this request came from this server's own
/// pages or from the user (see the module's invariant).
pub fn ours(headers: &HeaderMap) -> bool {
    match headers.get("sec-fetch-site").map(|v| v.as_bytes()) {
        None => true,
        Some(site) => site == b"same-origin" || site == b"none",
    }
}

/// The example questions: each ```sql block of `docs/sql.md` with the
/// sentence before it.
pub fn examples() -> Vec<(String, String)> {
    let doc = include_str!("../../../../docs/sql.md");
    let mut out = Vec::new();
    let mut pieces = doc.split("```sql\n");
    let mut before = pieces.next().unwrap_or("");
    for piece in pieces {
        let (sql, rest) = piece.split_once("```").unwrap_or((piece, ""));
        let title = before
            .trim_end()
            .rsplit("\n\n")
            .next()
            .unwrap_or("")
            .trim()
            .trim_end_matches(':')
            .replace('\n', " ");
        out.push((title, sql.trim().to_string()));
        before = rest;
    }
    out
}

/// The SQL pages' parameters.
#[derive(serde::Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SqlParams {
    /// The query.
    #[serde(default)]
    q: String,
    /// Where it runs (`local` or `cluster`); the server's default when
    /// absent.
    #[serde(default)]
    engine: Option<Engine>,
}

/// The editor; with a cluster to run on, the choice of engine (`chosen`).
pub fn form(q: &str, engine: &SqlEngine, chosen: Option<Engine>) -> Markup {
    let (cluster, default) = engine.engines();
    let chosen = chosen.unwrap_or(default);
    html! {
        form.sql method="get" action="/ui/sql" {
            label for="q" { "SQL over " code { "jobs" } ", " code { "stages" } ", " code { "tasks" } " and " code { "operators" } " (docs/sql.md)" }
            textarea id="q" name="q" rows="8" spellcheck="false" { (q) }
            div {
                button type="submit" { "Run" }
                @if cluster.is_some() {
                    " "
                    label for="engine" { "on " }
                    select id="engine" name="engine" {
                        option value="local" selected[chosen == Engine::Local] { "this server" }
                        option value="cluster" selected[chosen == Engine::Cluster] { "the cluster (a Ballista job)" }
                    }
                }
            }
        }
    }
}

/// The query string of a query on `engine` (left out when not chosen).
fn with_engine(q: &str, engine: Option<Engine>) -> String {
    match engine {
        Some(Engine::Cluster) => query_string([("q", q), ("engine", "cluster")]),
        Some(Engine::Local) => query_string([("q", q), ("engine", "local")]),
        None => query_string([("q", q)]),
    }
}

/// `GET /ui/sql`.
pub async fn page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Params { value: p, .. }: Params<SqlParams>,
) -> Result<Response, Response> {
    let engine = served(&ui)?;
    let q = p.q.trim().to_string();
    let from_elsewhere = !q.is_empty() && !ours(&headers);
    if from_elsewhere {
        engine.refused(bjh_sql::pool::Outcome::CrossSite);
    }
    let limit = SHOWN.min(engine.limits().max_rows);
    let answer = if q.is_empty() || from_elsewhere {
        None
    } else {
        Some(engine.query_rows_on(&q, limit, p.engine).await)
    };
    let status = match &answer {
        Some(Err(e)) => crate::error::sql_status(e),
        _ => StatusCode::OK,
    };
    let body = html! {
        h1 { "SQL" }
        (form(&q, engine, p.engine))
        @if from_elsewhere {
            p.notice role="status" { "This query came from a link on another site, so it was not run. Read it, then press Run to run it." }
        }
        @match &answer {
            None if from_elsewhere => {}
            None => {
                h2 { "Questions to start from" }
                ul.examples {
                    @for (title, sql) in examples() {
                        li { a href={ "/ui/sql" (query_string([("q", sql.as_str())])) } { (title) } }
                    }
                }
            }
            Some(Err(e)) => p.error-box role="alert" { (e.to_string()) },
            Some(Ok(a)) => {
                @let rows: usize = a.batches.iter().map(|b| b.num_rows()).sum();
                p.summary {
                    @if a.truncated && limit == engine.limits().max_rows {
                        (page::exact(rows)) " rows (cut at the row limit)"
                    } @else if a.truncated {
                        "The first " (page::exact(rows)) " rows are shown; the CSV has the whole answer"
                    } @else {
                        (page::exact(rows)) " row" @if rows != 1 { "s" }
                    }
                    " · " a href={ "/ui/sql.csv" (with_engine(&q, p.engine)) } download { "Download CSV" }
                }
                (table(a))
            }
        }
    };
    Ok(html_response(
        status,
        page::frame(&ui, "SQL", Nav::Sql, false, body),
    ))
}

/// The SQL engine, or the page that says SQL is not served here.
#[expect(
    clippy::result_large_err,
    reason = "the error is the answer itself, built once per request and returned at once"
)]
pub fn served(ui: &Ui) -> Result<&Arc<SqlEngine>, Response> {
    let not_served = || error(ui, StatusCode::NOT_FOUND, "SQL is not served here.");
    ui.sql.as_ref().ok_or_else(not_served)
}

pub fn table(a: &bjh_sql::RowsAnswer) -> Markup {
    let options = FormatOptions::default().with_null("null");
    html! {
        div.table-wrap {
            table.result {
                thead { tr { @for f in a.schema.fields() { th { (f.name()) } } } }
                tbody {
                    @for batch in &a.batches {
                        @let cols: Vec<_> = batch.columns().iter().filter_map(|c| ArrayFormatter::try_new(c.as_ref(), &options).ok()).collect();
                        @for row in 0..batch.num_rows() {
                            tr { @for c in &cols { td { (c.value(row).to_string()) } } }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /ui/sql.csv`: the answer as a CSV download, streamed from its
/// worker.
pub async fn csv(
    State(ui): State<Ui>,
    Params { value: p, .. }: Params<SqlParams>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    let engine = served(&ui)?;
    if !ours(&headers) {
        engine.refused(bjh_sql::pool::Outcome::CrossSite);
        return Err(error(
            &ui,
            StatusCode::FORBIDDEN,
            "A page of another site asked for this answer; open the SQL page to run the query.",
        ));
    }
    let answer = engine
        .query_on(&p.q, Format::Csv, usize::MAX, p.engine)
        .await
        .map_err(|e| api_error(&ui, e.into()))?;
    let mut response = Response::new(Body::from_stream(answer.body));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(Format::Csv.content_type()),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(answer.bytes));
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"query.csv\""),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_examples_are_the_documented_questions() {
        let examples = super::examples();
        assert!(examples.len() >= 10, "{}", examples.len());
        assert!(
            examples
                .iter()
                .all(|(t, q)| !t.is_empty() && q.starts_with("SELECT") || q.starts_with("WITH"))
        );
        assert_eq!(examples[0].0, "The slowest queries of the last seven days");
    }
}
