//! The job's plan as pictures: the stage graph (a box per stage, linked
//! by the DOT's edges and the reads the stage plans state, and, dashed,
//! the inferred links of stages adaptive planning pruned), a stage's own
//! operators, and the query profile (each stage's operators with their
//! share of the job's compute, the hottest marked). The job page's
//! overview and profile tab and the stage page draw with these; the
//! layout itself is `bjh_pictures::graph`'s.

use crate::source::Resource;
use crate::ui::Ui;
use crate::ui::job::{body, stored_stages};
use crate::ui::page::{count, duration_ns, job_href};
use ballista_api_types::dto::PlanFormat;
use bjh_analysis::plan_metrics::{OperatorProfile, operator_profiles};
use bjh_format::stages::{StageAnswer, stage_edges};
use bjh_pictures::graph::{
    Dot, EdgeNotes, Frame, Node, Stage, draw, draw_frames, draw_noted, operator_name,
};
use maud::{Markup, html};
use std::collections::{BTreeMap, HashMap};

use super::page::status_class;

/// The stage graph's edges, by box: the DOT's, then the reads the plans
/// state and the inferred links of pruned stages ([`stage_edges`]); and
/// the notes of the inferred ones.
pub fn graph_edges(
    dot: &Dot,
    stored: &BTreeMap<u32, StageAnswer>,
) -> (Vec<(usize, usize)>, EdgeNotes) {
    let edges = stage_edges(stored.values());
    let pairs: Vec<(u32, u32)> = edges.iter().map(|e| (e.from, e.to)).collect();
    let box_of = |id: u32| dot.stages.iter().position(|s| s.stage_id == Some(id));
    let notes = edges
        .into_iter()
        .filter_map(|e| Some(((box_of(e.from)?, box_of(e.to)?), e.inferred?)))
        .collect();
    (dot.stage_edges(&pairs), notes)
}

/// The stage graph: a box per stage with its operators, linked as
/// [`graph_edges`] says.
pub fn stage_graph(job_id: &str, dot: &Dot, stored: &BTreeMap<u32, StageAnswer>) -> Markup {
    let nodes: Vec<Node> = dot
        .stages
        .iter()
        .map(|s| {
            let ops: Vec<String> = s
                .operators
                .iter()
                .map(|&o| operator_name(&dot.operators[o].label).to_string())
                .collect();
            let title = match s.stage_id {
                Some(id) => format!("Stage {id} · {}", s.status),
                None => format!("Stage · {}", s.status),
            };
            Node {
                hover: format!("{title}\n{}", ops.join("\n")),
                title,
                lines: ops,
                class: status_class(&s.status),
                href: s
                    .stage_id
                    .map(|id| format!("{}/stage/{id}", job_href(job_id))),
            }
        })
        .collect();
    let (edges, notes) = graph_edges(dot, stored);
    draw_noted(&nodes, &edges, &notes, "Stage graph")
}

/// The operators of one stage, from its own DOT or the job's cluster: a
/// query profile when the stage's metrics `plan` is recorded. Each box then
/// carries its operator's figures (rows out, compute and its share of the
/// stage's, spill, peak memory), and the operator with the most compute is
/// marked (`hot`).
pub fn operator_graph(dot: &Dot, stage_id: u32, plan: Option<&str>) -> Markup {
    let members: Vec<usize> = match dot.stages.iter().find(|s| s.stage_id == Some(stage_id)) {
        Some(s) => s.operators.clone(),
        None => (0..dot.operators.len()).collect(),
    };
    let profiles = profiles_of(dot, &members, plan.unwrap_or(""));
    let total = profiles.iter().map(compute_of).sum();
    let mut nodes = operator_boxes(dot, &members, &profiles, total);
    if let Some(hottest) = (0..members.len())
        .filter(|&i| compute_of(&profiles[i]) > 0)
        .max_by_key(|&i| compute_of(&profiles[i]))
    {
        nodes[hottest].class = "hot";
    }
    draw(
        &nodes,
        &inner_edges(dot, &members),
        "Operators of the stage",
    )
}

/// The most operators the query profile marks as hot.
pub const HOT_OPERATORS: usize = 3;

/// The Profile tab: the whole query in one picture, scans at the top and
/// the result at the bottom, each stage a frame around its operators with
/// their figures (shares of the job's compute), the stages joined as in the
/// stage graph, and the operators with the most compute marked.
pub async fn profile(ui: &Ui, job_id: &str) -> Markup {
    let dot = body(ui, job_id, Resource::Dot).await;
    let dot = Dot::parse(&String::from_utf8_lossy(dot.as_deref().unwrap_or(b"")));
    let stored = stored_stages(ui, job_id, PlanFormat::Metrics).await;
    let profiles: Vec<Vec<Option<OperatorProfile>>> = dot
        .stages
        .iter()
        .map(|s| {
            let plan = s
                .stage_id
                .and_then(|id| stored.get(&id))
                .map_or("", StageAnswer::plan);
            profiles_of(&dot, &s.operators, plan)
        })
        .collect();
    let total: u64 = profiles.iter().flatten().map(compute_of).sum();
    let mut frames: Vec<Frame> = dot
        .stages
        .iter()
        .zip(&profiles)
        .map(|(s, p)| stage_frame(job_id, &dot, s, p, total))
        .collect();
    let mut ranked: Vec<(u64, usize, usize)> = profiles
        .iter()
        .enumerate()
        .flat_map(|(f, p)| {
            p.iter()
                .enumerate()
                .map(move |(o, x)| (compute_of(x), f, o))
        })
        .filter(|&(c, _, _)| c > 0)
        .collect();
    ranked.sort_by_key(|&(c, _, _)| std::cmp::Reverse(c));
    for &(_, f, o) in ranked.iter().take(HOT_OPERATORS) {
        frames[f].inner[o].class = "hot";
    }
    let (edges, notes) = graph_edges(&dot, &stored);
    html! {
        section aria-labelledby="profile-h" {
            h2 id="profile-h" { "Query profile" }
            p.muted {
                "Each stage is a frame around its operators, data flowing down. An operator's \
                 figures are the scheduler's metrics for it, combined over the stage's tasks: \
                 rows out, compute (its elapsed_compute) and that compute's share of the job's. \
                 The " (HOT_OPERATORS) " operators with the most compute are outlined."
            }
            div.graph-box { (draw_frames(&frames, &edges, &notes, "Query profile")) }
        }
    }
}

/// One stage of the profile: a frame, titled with the stage and its share
/// of the job's compute, around its operators.
pub fn stage_frame(
    job_id: &str,
    dot: &Dot,
    stage: &Stage,
    profiles: &[Option<OperatorProfile>],
    total: u64,
) -> Frame {
    let compute: u64 = profiles.iter().map(compute_of).sum();
    let title = match stage.stage_id {
        Some(id) => format!("Stage {id} · {}", stage.status),
        None => format!("Stage · {}", stage.status),
    };
    let lines = if compute > 0 && total > 0 {
        vec![format!(
            "compute {} ({:.0}% of the job)",
            duration_ns(compute),
            compute as f64 * 100.0 / total as f64
        )]
    } else {
        Vec::new()
    };
    Frame {
        node: Node {
            hover: std::iter::once(title.clone())
                .chain(lines.clone())
                .collect::<Vec<_>>()
                .join("\n"),
            title,
            lines,
            class: status_class(&stage.status),
            href: stage
                .stage_id
                .map(|id| format!("{}/stage/{id}", job_href(job_id))),
        },
        inner: operator_boxes(dot, &stage.operators, profiles, total),
        inner_edges: inner_edges(dot, &stage.operators),
    }
}

/// An operator's compute (ns), 0 when unknown.
pub fn compute_of(profile: &Option<OperatorProfile>) -> u64 {
    profile.as_ref().and_then(|p| p.compute_ns).unwrap_or(0)
}

/// The boxes of `members` (operators of one stage): the DOT's label, under
/// its first line the operator's figures when known, shares taken of
/// `total` compute (ns).
pub fn operator_boxes(
    dot: &Dot,
    members: &[usize],
    profiles: &[Option<OperatorProfile>],
    total: u64,
) -> Vec<Node> {
    members
        .iter()
        .zip(profiles)
        .map(|(&o, profile)| {
            let label = &dot.operators[o].label;
            let mut lines = label.lines();
            let first = lines.next().unwrap_or_default().to_string();
            let figures = profile
                .as_ref()
                .map(|p| figures(p, total))
                .unwrap_or_default();
            let hover = std::iter::once(label.as_str())
                .chain(figures.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            Node {
                title: first,
                lines: figures
                    .into_iter()
                    .chain(lines.map(str::to_string))
                    .collect(),
                class: "muted",
                href: None,
                hover,
            }
        })
        .collect()
}

/// The DOT's edges between `members`, as indices into `members`.
pub fn inner_edges(dot: &Dot, members: &[usize]) -> Vec<(usize, usize)> {
    let at: HashMap<usize, usize> = members.iter().enumerate().map(|(i, &m)| (m, i)).collect();
    dot.edges
        .iter()
        .filter_map(|(a, b)| Some((*at.get(a)?, *at.get(b)?)))
        .collect()
}

/// The metrics plan's profile of each of `members` (DOT operators of one
/// stage), or none at all when the two cannot be matched. The plan lists
/// operators in pre-order; the DOT names each `stage_<s>_<path>`, its path
/// from the root (`0_1`: the root's second child), so sorting by path gives
/// the same order. When the ids are not paths, or the counts differ, no
/// operator gets figures rather than another's.
pub fn profiles_of(dot: &Dot, members: &[usize], plan: &str) -> Vec<Option<OperatorProfile>> {
    let profiles = operator_profiles(plan);
    let path = |o: usize| -> Option<Vec<u32>> {
        let id = dot.operators[o].id.strip_prefix("stage_")?;
        let (_, path) = id.split_once('_')?;
        path.split('_').map(|n| n.parse().ok()).collect()
    };
    let paths: Option<Vec<Vec<u32>>> = members.iter().map(|&o| path(o)).collect();
    let (Some(paths), true) = (paths, profiles.len() == members.len()) else {
        return vec![None; members.len()];
    };
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
    let mut out = vec![None; members.len()];
    for (position, &member) in order.iter().enumerate() {
        out[member] = Some(profiles[position].clone());
    }
    out
}

/// An operator's figures as its box shows them: `2.00 K rows · 3 ms (42%)`,
/// then spill and peak memory when it has them.
pub fn figures(p: &OperatorProfile, stage_compute_ns: u64) -> Vec<String> {
    let mut first = Vec::new();
    if let Some(rows) = p.output_rows {
        first.push(format!("{} rows", count(rows)));
    }
    if let Some(ns) = p.compute_ns {
        let share = if stage_compute_ns > 0 {
            format!(" ({:.0}%)", ns as f64 * 100.0 / stage_compute_ns as f64)
        } else {
            String::new()
        };
        first.push(format!("{}{share}", duration_ns(ns)));
    }
    let bytes = |b: u64| bytesize::ByteSize::b(b).display().iec().to_string();
    let mut second = Vec::new();
    if p.spill_count > 0 || p.spilled_bytes > 0 {
        second.push(format!(
            "spilled {} ({}x)",
            bytes(p.spilled_bytes),
            p.spill_count
        ));
    }
    if let Some(peak) = p.peak_mem_used.filter(|&b| b > 0) {
        second.push(format!("peak {}", bytes(peak)));
    }
    [first, second]
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(|l| l.join(" · "))
        .collect()
}
