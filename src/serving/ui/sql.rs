//! The SQL page (`/ui/sql?q=`): an editor, the example questions of
//! `docs/sql.md`, the answer as a table and as a CSV download
//! (`/ui/sql.csv?q=`). The query is a URL parameter, so an answer is a
//! link to share; it runs through the same engine, limits and refusals as
//! `POST /api/sql`.

use crate::serving::sql::route::{Format, encode};
use crate::serving::ui::page::{self, Nav, query_string};
use crate::serving::ui::{Ui, api_error, error, html_response};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use http::{StatusCode, header};
use maud::{Markup, html};

/// Rows the page shows (the CSV has them all, up to the row limit).
const SHOWN: usize = 1_000;

/// The example questions: each ```sql block of `docs/sql.md` with the
/// sentence before it.
fn examples() -> Vec<(String, String)> {
    let doc = include_str!("../../../docs/sql.md");
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

#[derive(serde::Deserialize, Default)]
pub(crate) struct Params {
    #[serde(default)]
    q: String,
}

fn form(q: &str) -> Markup {
    html! {
        form.sql method="get" action="/ui/sql" {
            label for="q" { "SQL over " code { "jobs" } ", " code { "stages" } ", " code { "tasks" } " and " code { "operators" } " (docs/sql.md)" }
            textarea id="q" name="q" rows="8" spellcheck="false" { (q) }
            div { button type="submit" { "Run" } }
        }
    }
}

/// `GET /ui/sql`.
pub(crate) async fn page(State(ui): State<Ui>, Query(p): Query<Params>) -> Response {
    let Some(engine) = &ui.sql else {
        return error(&ui, StatusCode::NOT_FOUND, "SQL is not served here.");
    };
    let q = p.q.trim().to_string();
    let answer = if q.is_empty() {
        None
    } else {
        match engine.query(&q).await {
            Ok(a) => Some(Ok(a)),
            Err(e) => Some(Err(e)),
        }
    };
    let status = match &answer {
        Some(Err(e)) => e.status(),
        _ => StatusCode::OK,
    };
    let body = html! {
        h1 { "SQL" }
        (form(&q))
        @match &answer {
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
                    (page::exact(rows)) " row" @if rows != 1 { "s" }
                    @if a.truncated { " (cut at the row limit)" }
                    @if rows > SHOWN { "; the first " (SHOWN) " are shown" }
                    " · " a href={ "/ui/sql.csv" (query_string([("q", q.as_str())])) } download { "Download CSV" }
                }
                (table(a))
            }
        }
    };
    html_response(status, page::frame(&ui, "SQL", Nav::Sql, false, body))
}

fn table(a: &crate::serving::sql::Answer) -> Markup {
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

/// `GET /ui/sql.csv`: the answer as a CSV download.
pub(crate) async fn csv(State(ui): State<Ui>, Query(p): Query<Params>) -> Response {
    let Some(engine) = &ui.sql else {
        return error(&ui, StatusCode::NOT_FOUND, "SQL is not served here.");
    };
    let answer = match engine.query(&p.q).await {
        Ok(a) => a,
        Err(e) => return api_error(&ui, e),
    };
    match encode(&answer, Format::Csv) {
        Ok((bytes, content_type)) => (
            [
                (header::CONTENT_TYPE, content_type),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"query.csv\"",
                ),
            ],
            bytes,
        )
            .into_response(),
        Err(e) => api_error(&ui, e),
    }
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
