//! The job page's What-if tab: the job replayed on 1, 2, ... executors
//! (`GET /api/job/{id}/whatif`'s curve) drawn as predicted time against
//! task slots, with the critical path as its floor, this run and the knee
//! marked, and the same points as a table.

use crate::error::ApiError;
use crate::ui::Ui;
use crate::ui::page::{duration, segment};
use crate::whatif::{WhatIf, WhatIfParams, history_of, whatif_of};
use bjh_analysis::whatif::Point;
use maud::{Markup, html};

/// The chart's size and margins (px).
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 36.0;

/// The What-if tab of `job_id`.
pub async fn whatif_tab(ui: &Ui, job_id: &str) -> Markup {
    let answer = whatif_of(&*ui.source, job_id.to_string(), WhatIfParams::default()).await;
    let w = match answer {
        Ok(w) => w,
        Err(ApiError::Conflict(m) | ApiError::Missing(m)) => {
            return html! { p.notice { (m) } };
        }
        Err(e) => return html! { p.notice { "No replay: " (e.to_string()) } },
    };
    let seen = &w.observed_shape;
    let error = w.replayed_ms as f64 / w.observed_ms.max(1) as f64 - 1.0;
    let history = match &ui.store {
        Some(store) => history_of(ui.source.clone(), store.clone(), job_id)
            .await
            .ok()
            .flatten(),
        None => None,
    };
    html! {
        @if let Some(h) = &history {
            @let pct = |e: f64| format!("{:.0}%", e * 100.0);
            @if h.unreliable {
                p.notice.unreliable id="whatif-unreliable" {
                    strong { "Unreliable for this query: " }
                    "its replays were off by a median of " (pct(h.all.median_error))
                    " against its next runs (" (h.all.pairs) " pairs). Read the curve as a rough guide."
                }
            }
            p.muted id="whatif-history" {
                "This query's record: " (h.all.pairs) " of its runs replayed on the next run's shape were off by a median of "
                (pct(h.all.median_error)) " (p90 " (pct(h.all.p90_error)) "); \"same time as before\" was off by "
                (pct(h.all.naive_median_error)) ". "
                a href={ "/ui/accuracy?query_hash=" (h.query_hash) } { "Every graded pair" }
            }
        }
        p.summary id="whatif-summary" {
            "This run took " (duration(w.observed_ms)) " on " (shape(seen.executors, seen.slots))
            (if seen.inferred { " (inferred from its tasks)" } else { " (as recorded when it started)" })
            ". Replayed on that shape: "
            (duration(w.replayed_ms)) " (" (format!("{:+.1}%", error * 100.0)) ", the model's error on this job). "
            "Critical path: " (duration(w.critical_path_ms)) ", no shape is faster."
        }
        @if let Some(k) = &w.knee {
            p id="whatif-knee" {
                "Knee: " strong { (shape(k.shape.executors, k.shape.slots)) }
                " (" (k.total_slots) " slots) would take " (duration(k.predicted_ms))
                ", within 10% of the critical path."
            }
        }
        (chart(&w))
        div.table-wrap {
            table id="whatif-table" {
                thead { tr { th.num { "executors" } th.num { "slots each" } th.num { "slots" } th.num { "predicted" } th.num { "vs this run" } } }
                tbody {
                    @for p in &w.curve {
                        tr {
                            td.num { (p.shape.executors) } td.num { (p.shape.slots) } td.num { (p.total_slots) }
                            td.num { (duration(p.predicted_ms)) }
                            td.num { (format!("{:+.0}%", (p.predicted_ms as f64 / w.observed_ms.max(1) as f64 - 1.0) * 100.0)) }
                        }
                    }
                }
            }
        }
        p.muted {
            "How the replay works and where it is wrong: docs/diagnosis.md. Any shape as JSON: "
            code { "/api/job/" (segment(&w.job_id)) "/whatif?executors=E&slots=S" }
        }
    }
}

/// The curve as an SVG: predicted time (y) against task slots (x).
fn chart(w: &WhatIf) -> Markup {
    let seen_slots = u64::from(w.observed_shape.executors) * u64::from(w.observed_shape.slots);
    let max_x = w
        .curve
        .iter()
        .map(|p| p.total_slots)
        .chain([seen_slots, 1])
        .max()
        .unwrap_or(1);
    let max_y = w
        .curve
        .iter()
        .map(|p| p.predicted_ms)
        .chain([w.observed_ms, w.critical_path_ms, 1])
        .max()
        .unwrap_or(1) as f64
        * 1.05;
    let x = |slots: u64| {
        LEFT + slots.saturating_sub(1) as f64 / (max_x.max(2) - 1) as f64 * (WIDTH - LEFT - RIGHT)
    };
    let y = |ms: u64| TOP + (1.0 - ms as f64 / max_y) * (HEIGHT - TOP - BOTTOM);
    let line: Vec<String> = w
        .curve
        .iter()
        .map(|p| format!("{:.1},{:.1}", x(p.total_slots), y(p.predicted_ms)))
        .collect();
    let ticks = x_ticks(max_x);
    let floor = y(w.critical_path_ms);
    html! {
        svg.chart id="whatif-curve" width=(WIDTH) height=(HEIGHT) viewBox={ "0 0 " (WIDTH) " " (HEIGHT) }
            role="img" aria-label="Predicted time against task slots" {
            line.axis x1=(LEFT) y1=(HEIGHT - BOTTOM) x2=(WIDTH - RIGHT) y2=(HEIGHT - BOTTOM) {}
            line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(HEIGHT - BOTTOM) {}
            @for ms in [0, (max_y / 2.0) as u64, max_y as u64] {
                text.tick x=(LEFT - 6.0) y=(y(ms) + 4.0) text-anchor="end" { (duration(ms)) }
            }
            @for t in &ticks {
                text.tick x=(x(*t)) y=(HEIGHT - BOTTOM + 16.0) text-anchor="middle" { (t) }
            }
            text.tick x=((LEFT + WIDTH - RIGHT) / 2.0) y=(HEIGHT - 4.0) text-anchor="middle" { "task slots" }
            line.floor x1=(LEFT) y1=(floor) x2=(WIDTH - RIGHT) y2=(floor) { title { "critical path " (duration(w.critical_path_ms)) } }
            text.floor-label x=(WIDTH - RIGHT) y=(floor - 6.0) text-anchor="end" { "critical path " (duration(w.critical_path_ms)) }
            polyline.curve points=(line.join(" ")) {}
            @for p in &w.curve {
                (point(p, x(p.total_slots), y(p.predicted_ms), w.knee.as_ref() == Some(p)))
            }
            circle.observed cx=(x(seen_slots)) cy=(y(w.observed_ms)) r="6" {
                title { "this run: " (duration(w.observed_ms)) " on " (seen_slots) " slots" }
            }
        }
    }
}

/// One point of the curve, the knee drawn larger.
fn point(p: &Point, cx: f64, cy: f64, knee: bool) -> Markup {
    let class = if knee { "predicted knee" } else { "predicted" };
    html! {
        circle class=(class) cx=(format!("{cx:.1}")) cy=(format!("{cy:.1}")) r=(if knee { "5" } else { "3" }) {
            title { (shape(p.shape.executors, p.shape.slots)) ": " (duration(p.predicted_ms)) }
        }
    }
}

/// "2 executors × 1 slot".
fn shape(executors: u32, slots: u32) -> String {
    let s = |n: u32, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    format!("{} × {}", s(executors, "executor"), s(slots, "slot"))
}

/// Slot counts to label on the x axis: at most about eight, always 1 and
/// `max`.
fn x_ticks(max: u64) -> Vec<u64> {
    let step = max.div_ceil(8).max(1);
    let mut out: Vec<u64> = (1..=max).step_by(step as usize).collect();
    if out.last() != Some(&max) {
        out.push(max);
    }
    out
}
