//! The frame every page shares, the error page, and the ways numbers,
//! times and links are written.
//!
//! **Invariant:** text reaches HTML only through maud's `(...)` splices,
//! which escape it; nothing here splices unescaped text.

use crate::ui::Ui;
pub(crate) use bjh_pictures::words::{count, duration, duration_ns};
use maud::{DOCTYPE, Markup, html};

/// Which item of the top bar is the current page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Jobs,
    Queries,
    Accuracy,
    Usage,
    Clusters,
    Sql,
    None,
}

/// The asset version in URLs, so a new binary's CSS and JS are fetched anew.
pub const V: &str = env!("CARGO_PKG_VERSION");

/// A whole page: head, top bar, `body` in `<main>`.
pub fn frame(ui: &Ui, title: &str, nav: Nav, refresh: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " · Ballista job history" }
                link rel="stylesheet" href={ "/ui/assets/ui.css?v=" (V) };
                link rel="icon" href={ "/ui/assets/icon.svg?v=" (V) } type="image/svg+xml";
                script src={ "/ui/assets/ui.js?v=" (V) } defer {}
            }
            body data-refresh=[refresh.then_some("5")] {
                header.top {
                    a.brand href="/" { "Ballista job history" }
                    span.mode title="Where these jobs come from" {
                        @if ui.live {
                            "Live scheduler " (ui.scheduler_id)
                        } @else {
                            "History server"
                        }
                        " · Ballista " (ballista_core::BALLISTA_VERSION)
                    }
                    nav aria-label="Pages" {
                        a href="/" aria-current=[(nav == Nav::Jobs).then_some("page")] { "Jobs" }
                        a href="/ui/queries" aria-current=[(nav == Nav::Queries).then_some("page")] { "Recurring queries" }
                        a href="/ui/accuracy" aria-current=[(nav == Nav::Accuracy).then_some("page")] { "What-if accuracy" }
                        a href="/ui/usage" aria-current=[(nav == Nav::Usage).then_some("page")] { "Usage" }
                        a href="/ui/clusters" aria-current=[(nav == Nav::Clusters).then_some("page")] { "Clusters" }
                        @if ui.sql.is_some() {
                            a href="/ui/sql" aria-current=[(nav == Nav::Sql).then_some("page")] { "SQL" }
                        }
                        @if ui.token.is_some() {
                            form.inline method="post" action="/ui/logout" {
                                button.link type="submit" { "Forget token" }
                            }
                        }
                    }
                }
                main id="content" { (body) }
            }
        }
    }
}

/// A page that says what went wrong, with a way back.
pub fn error_page(ui: &Ui, title: &str, message: &str) -> Markup {
    frame(
        ui,
        title,
        Nav::None,
        false,
        html! {
            h1 { (title) }
            p.error-box role="alert" { (message) }
            p { a href="/" { "Back to the job list" } }
        },
    )
}

/// `1 234 567` for exact counts.
pub fn exact(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An epoch-millisecond time: UTC in the text, machine-readable in
/// `datetime` (the script shows it in the viewer's zone, UTC on hover).
pub fn time(ms: u64) -> Markup {
    let Some(t) = (ms > 0)
        .then(|| chrono::DateTime::from_timestamp_millis(ms as i64))
        .flatten()
    else {
        return html! { span.muted { "—" } };
    };
    html! {
        time datetime=(t.format("%Y-%m-%dT%H:%M:%S%.3fZ")) { (t.format("%Y-%m-%d %H:%M:%S UTC")) }
    }
}

/// An epoch-millisecond time as plain UTC text (for a tooltip).
pub fn time_text(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default()
}

/// The one colour of a status word (a job's, a stage's or a task's), as
/// a class: the words, the stage boxes and the list share it.
pub fn status_class(word: &str) -> &'static str {
    match word {
        "Completed" | "Successful" => "ok",
        "Failed" => "bad",
        "Cancelled" | "Abandoned" => "warn",
        "Running" | "Queued" | "Resolved" => "run",
        _ => "muted",
    }
}

/// A status word as a coloured word (the colour repeats the word).
pub fn status(word: &str) -> Markup {
    html! { span class={ "status " (status_class(word)) } { (word) } }
}

/// A job's name, or where it has none its query's label (made from the
/// plan, `bjh_format::label`), set apart so it is not taken for a name.
pub fn name_or_label(name: &str, label: Option<&str>) -> Markup {
    name_and_label(name, label.filter(|_| name.is_empty()))
}

/// A name and, under it, the query's label (where the rows are queries,
/// whose runs' names vary and whose label does not).
pub fn name_and_label(name: &str, label: Option<&str>) -> Markup {
    html! {
        (name)
        @if let Some(label) = label {
            @if !name.is_empty() { br; }
            span.qlabel title="A label made from the query's plan" { (label) }
        }
    }
}

/// A query string of `pairs` (`?a=1&b=2`, or empty).
pub fn query_string<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    let s = s.finish();
    if s.is_empty() { s } else { format!("?{s}") }
}

/// The path of a job's page (the id percent-encoded as one segment).
pub fn job_href(job_id: &str) -> String {
    format!("/ui/job/{}", segment(job_id))
}

/// `s` percent-encoded as one path segment.
pub fn segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(exact(1_234_567), "1,234,567");
        assert_eq!(exact(999), "999");
    }

    #[test]
    fn odd_ids_stay_one_path_segment() {
        assert_eq!(job_href("a/../b c"), "/ui/job/a%2F..%2Fb%20c");
        assert_eq!(job_href("<x>"), "/ui/job/%3Cx%3E");
    }

    #[test]
    fn times_carry_utc() {
        let t = time(1_767_225_600_000).into_string();
        assert!(t.contains("2026-01-01 00:00:00 UTC"), "{t}");
        assert!(t.contains("datetime=\"2026-01-01T00:00:00.000Z\""), "{t}");
        assert!(time(0).into_string().contains('—'));
    }
}
