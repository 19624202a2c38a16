//! The stage graph as a picture: the stored DOT (the scheduler's
//! `/api/job/{id}/dot`) read into stages, operators and edges, then laid
//! out in layers (data flows down) and drawn as inline SVG, each stage a
//! link to its page.
//!
//! The DOT reader takes what the scheduler writes (clusters per stage,
//! boxes per operator, edges) and is lenient with anything else: what it
//! does not understand it skips, so a strange DOT draws fewer boxes, never
//! an error.

use maud::{Markup, html};
use std::collections::{HashMap, HashSet};

/// One operator box of the DOT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operator {
    /// The DOT node id.
    pub id: String,
    /// Its label, lines as written.
    pub label: String,
}

/// One stage (a DOT cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stage {
    /// Stage id, from the label `Stage N [Status]` or the name `clusterN`.
    pub stage_id: Option<u32>,
    /// The status word of its label.
    pub status: String,
    /// Its operators, in the DOT's order (the writer first).
    pub operators: Vec<usize>,
}

/// A job's DOT, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dot {
    pub operators: Vec<Operator>,
    pub stages: Vec<Stage>,
    /// Edges between operators (data flows from the first to the second).
    pub edges: Vec<(usize, usize)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Sym(char),
    Arrow,
}

fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '"' => {
                let mut s = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some('n' | 'l' | 'r') => s.push('\n'),
                            Some(other) => s.push(other),
                            None => break,
                        },
                        c => s.push(c),
                    }
                }
                out.push(Token::Quoted(s));
            }
            '-' if chars.peek() == Some(&'>') => {
                chars.next();
                out.push(Token::Arrow);
            }
            '{' | '}' | '[' | ']' | '=' | ';' | ',' => out.push(Token::Sym(c)),
            c => {
                let mut s = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || "{}[]=;,\"".contains(n) || n == '-' {
                        break;
                    }
                    s.push(n);
                    chars.next();
                }
                out.push(Token::Word(s));
            }
        }
    }
    out
}

impl Dot {
    /// Reads `text`.
    pub(crate) fn parse(text: &str) -> Self {
        let toks = tokens(text);
        let mut dot = Dot::default();
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut members: HashSet<(usize, usize)> = HashSet::new();
        let mut open: Vec<Option<usize>> = Vec::new();
        let word = |t: &Token| match t {
            Token::Word(w) | Token::Quoted(w) => Some(w.clone()),
            _ => None,
        };
        let mut i = 0;
        while i < toks.len() {
            match &toks[i] {
                Token::Word(w) if w == "subgraph" => {
                    let name = toks.get(i + 1).and_then(word).unwrap_or_default();
                    let stage_id = name.strip_prefix("cluster").and_then(|n| n.parse().ok());
                    dot.stages.push(Stage {
                        stage_id,
                        ..Stage::default()
                    });
                    open.push(Some(dot.stages.len() - 1));
                    while i < toks.len() && toks[i] != Token::Sym('{') {
                        i += 1;
                    }
                }
                Token::Sym('{') => open.push(None),
                Token::Sym('}') => {
                    open.pop();
                }
                t @ (Token::Word(_) | Token::Quoted(_)) => {
                    let name = word(t).unwrap_or_default();
                    match toks.get(i + 1) {
                        Some(Token::Sym('=')) => {
                            let value = toks.get(i + 2).and_then(word).unwrap_or_default();
                            if name == "label"
                                && let Some(Some(s)) = open.last()
                            {
                                let stage = &mut dot.stages[*s];
                                let (id, status) = stage_label(&value);
                                stage.stage_id = id.or(stage.stage_id);
                                stage.status = status;
                            }
                            i += 2;
                        }
                        Some(Token::Arrow) => {
                            let mut from = name;
                            while let (Some(Token::Arrow), Some(to)) =
                                (toks.get(i + 1), toks.get(i + 2).and_then(word))
                            {
                                let a = dot.node(&mut ids, &mut members, &from, None);
                                let b = dot.node(&mut ids, &mut members, &to, None);
                                dot.edges.push((a, b));
                                from = to;
                                i += 2;
                            }
                        }
                        Some(Token::Sym('['))
                            if !matches!(name.as_str(), "node" | "edge" | "graph") =>
                        {
                            let mut label = None;
                            let mut j = i + 2;
                            while j < toks.len() && toks[j] != Token::Sym(']') {
                                if toks[j] == Token::Word("label".into())
                                    && toks.get(j + 1) == Some(&Token::Sym('='))
                                {
                                    label = toks.get(j + 2).and_then(word);
                                }
                                j += 1;
                            }
                            let cluster = open.iter().rev().find_map(|c| *c);
                            dot.node(&mut ids, &mut members, &name, Some((label, cluster)));
                            i = j;
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
            i += 1;
        }
        dot
    }

    /// The index of operator `id`, added when new; `declared` gives its
    /// label and cluster when this is its declaration.
    fn node(
        &mut self,
        ids: &mut HashMap<String, usize>,
        members: &mut HashSet<(usize, usize)>,
        id: &str,
        declared: Option<(Option<String>, Option<usize>)>,
    ) -> usize {
        let n = *ids.entry(id.to_string()).or_insert_with(|| {
            self.operators.push(Operator {
                id: id.to_string(),
                label: id.to_string(),
            });
            self.operators.len() - 1
        });
        if let Some((label, cluster)) = declared {
            if let Some(label) = label {
                self.operators[n].label = label;
            }
            if let Some(c) = cluster
                && members.insert((c, n))
            {
                self.stages[c].operators.push(n);
            }
        }
        n
    }

    /// The edges between stages (by index into `stages`), once each, in
    /// the order of their first operator edge. An operator belongs to the
    /// first stage that declares it.
    pub(crate) fn stage_edges(&self) -> Vec<(usize, usize)> {
        let mut stage_of: Vec<Option<usize>> = vec![None; self.operators.len()];
        for (s, stage) in self.stages.iter().enumerate() {
            for &op in &stage.operators {
                stage_of[op].get_or_insert(s);
            }
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for &(a, b) in &self.edges {
            if let (Some(x), Some(y)) = (stage_of[a], stage_of[b])
                && x != y
                && seen.insert((x, y))
            {
                out.push((x, y));
            }
        }
        out
    }
}

/// `Stage 3 [Successful]` → (3, "Successful").
fn stage_label(label: &str) -> (Option<u32>, String) {
    let rest = label.trim().strip_prefix("Stage ").unwrap_or(label);
    let id = rest
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok());
    let status = rest
        .split_once('[')
        .and_then(|(_, s)| s.split_once(']'))
        .map(|(s, _)| s.trim().to_string())
        .unwrap_or_default();
    (id, status)
}

/// One box to draw.
pub(crate) struct Node {
    /// Bold first line.
    pub title: String,
    /// Lines under it.
    pub lines: Vec<String>,
    /// CSS class of the box (a status).
    pub class: &'static str,
    /// Where a click goes.
    pub href: Option<String>,
    /// The full text on hover.
    pub hover: String,
}

const LINE: f64 = 15.0;
const MAX_CHARS: usize = 48;
const GAP_X: f64 = 28.0;
const GAP_Y: f64 = 36.0;

fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_CHARS {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(MAX_CHARS - 1).collect();
        c.push('…');
        c
    }
}

/// The most boxes a picture draws: past this a graph is no picture a
/// reader can use, and the page says so instead of drawing it.
pub(crate) const MAX_NODES: usize = 2_000;

/// The layer of each node: the longest path from a node without inputs,
/// in one pass over the nodes in topological order (Kahn's), so linear in
/// nodes and edges. Nodes on a cycle stay below the inputs that were
/// placed before the cycle.
fn layers(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut layer = vec![0; n];
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges {
        if a != b && a < n && b < n {
            indegree[b] += 1;
            out[a].push(b);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
    while let Some(a) = ready.pop() {
        for &b in &out[a] {
            layer[b] = layer[b].max(layer[a] + 1);
            indegree[b] -= 1;
            if indegree[b] == 0 {
                ready.push(b);
            }
        }
    }
    layer
}

/// Where each box goes: its top-left corner and size, and the picture's
/// size.
struct Layout {
    at: Vec<(f64, f64)>,
    size: Vec<(f64, f64)>,
    width: f64,
    height: f64,
}

/// Draws `nodes` in layers with `edges` (data flowing downwards).
pub(crate) fn draw(nodes: &[Node], edges: &[(usize, usize)], label: &str) -> Markup {
    if nodes.is_empty() {
        return html! { p.muted { "No graph was recorded for this job." } };
    }
    if nodes.len() > MAX_NODES {
        return html! {
            p.muted role="note" {
                (label) " has " (nodes.len()) " boxes, more than the " (MAX_NODES)
                " a page draws; the tables and the recorded DOT hold all of them."
            }
        };
    }
    let layout = layout(nodes, edges);
    render(nodes, edges, label, &layout)
}

/// A box's size: wide enough for its longest (clipped) line, tall enough
/// for its lines.
fn box_size(n: &Node) -> (f64, f64) {
    let lines = n.lines.iter().chain([&n.title]);
    let chars = lines.map(|l| clip(l).chars().count()).max().unwrap_or(8);
    (
        (chars as f64 * 6.6 + 20.0).clamp(110.0, 340.0),
        12.0 + LINE * (1 + n.lines.len()) as f64,
    )
}

/// The boxes of each layer, each layer ordered by the mean position of its
/// inputs, then by index.
fn ordered_rows(n: usize, edges: &[(usize, usize)], layer: &[usize]) -> Vec<Vec<usize>> {
    let depth = layer.iter().max().copied().unwrap_or(0) + 1;
    let mut by_layer: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for v in 0..n {
        by_layer[layer[v]].push(v);
    }
    let mut inputs_of: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges {
        if a < n && b < n {
            inputs_of[b].push(a);
        }
    }
    let mut pos = vec![0.0f64; n];
    let mut rows: Vec<Vec<usize>> = Vec::with_capacity(depth);
    for (l, members) in by_layer.iter().enumerate() {
        let key = |v: usize| {
            let inputs = inputs_of[v].iter().filter(|&&a| layer[a] < l);
            let (sum, count) = inputs.fold((0.0, 0), |(s, c), &a| (s + pos[a], c + 1));
            if count == 0 {
                v as f64
            } else {
                sum / count as f64
            }
        };
        let mut members: Vec<(f64, usize)> = members.iter().map(|&v| (key(v), v)).collect();
        members.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (i, (_, v)) in members.iter().enumerate() {
            pos[*v] = i as f64;
        }
        rows.push(members.into_iter().map(|(_, v)| v).collect());
    }
    rows
}

/// Places the boxes: layers top to bottom, each row centred.
fn layout(nodes: &[Node], edges: &[(usize, usize)]) -> Layout {
    let layer = layers(nodes.len(), edges);
    let size: Vec<(f64, f64)> = nodes.iter().map(box_size).collect();
    let rows = ordered_rows(nodes.len(), edges, &layer);
    let row_width = |row: &[usize]| {
        row.iter().map(|&v| size[v].0).sum::<f64>() + GAP_X * row.len().saturating_sub(1) as f64
    };
    let width = rows.iter().map(|r| row_width(r)).fold(0.0, f64::max) + 20.0;
    let mut at = vec![(0.0f64, 0.0f64); nodes.len()];
    let mut y = 10.0;
    for row in &rows {
        let mut x = (width - row_width(row)) / 2.0;
        let height = row.iter().map(|&v| size[v].1).fold(0.0, f64::max);
        for &v in row {
            at[v] = (x, y + (height - size[v].1) / 2.0);
            x += size[v].0 + GAP_X;
        }
        y += height + GAP_Y;
    }
    let height = y - GAP_Y + 10.0;
    Layout {
        at,
        size,
        width,
        height,
    }
}

/// The picture of a layout.
fn render(nodes: &[Node], edges: &[(usize, usize)], label: &str, layout: &Layout) -> Markup {
    let Layout {
        at,
        size,
        width,
        height,
    } = layout;
    html! {
        svg.graph viewBox={ "0 0 " (width.ceil()) " " (height.ceil()) }
            width=(width.ceil()) height=(height.ceil())
            role="img" aria-label=(label) {
            defs {
                marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5"
                    markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                    path.arrowhead d="M 0 0 L 10 5 L 0 10 z" {}
                }
            }
            @for &(a, b) in edges {
                @if a < nodes.len() && b < nodes.len() && a != b {
                    @let (x1, y1) = (at[a].0 + size[a].0 / 2.0, at[a].1 + size[a].1);
                    @let (x2, y2) = (at[b].0 + size[b].0 / 2.0, at[b].1);
                    @let mid = (y1 + y2) / 2.0;
                    path.edge d=(format!("M {x1:.1} {y1:.1} C {x1:.1} {mid:.1}, {x2:.1} {mid:.1}, {x2:.1} {:.1}", y2 - 1.0))
                        marker-end="url(#arrow)" {}
                }
            }
            @for (v, node) in nodes.iter().enumerate() {
                @let (x, y) = at[v];
                @let (w, h) = size[v];
                @let body = html! {
                    g.node {
                        title { (node.hover) }
                        rect class=(node.class) x=(format!("{x:.1}")) y=(format!("{y:.1}"))
                            width=(format!("{w:.1}")) height=(format!("{h:.1}")) rx="5" {}
                        text.title x=(format!("{:.1}", x + 10.0)) y=(format!("{:.1}", y + 18.0)) { (clip(&node.title)) }
                        @for (i, line) in node.lines.iter().enumerate() {
                            text x=(format!("{:.1}", x + 10.0)) y=(format!("{:.1}", y + 18.0 + LINE * (i + 1) as f64)) { (clip(line)) }
                        }
                    }
                };
                @match &node.href {
                    Some(href) => a href=(href) { (body) },
                    None => (body),
                }
            }
        }
    }
}

/// The operator's name: the label's first line up to its first `:`.
pub(crate) fn operator_name(label: &str) -> &str {
    let first = label.lines().next().unwrap_or(label);
    first.split(':').next().unwrap_or(first).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOIN: &str = r#"digraph G {
	subgraph cluster0 {
		label = "Stage 0 [Successful]";
		stage_0_0 [shape=box, label="ShuffleWriterExec
partitioning=Hash([k@0], 4)"]
		stage_0_0_0 [shape=box, label="DataSourceExec: \"a\""]
		stage_0_0_0 -> stage_0_0
	}
	subgraph cluster1 {
		label = "Stage 1 [Running]";
		stage_1_0 [shape=box, label="ShuffleWriterExec"]
		stage_1_0_0 [shape=box, label="DataSourceExec"]
		stage_1_0_0 -> stage_1_0
	}
	subgraph cluster2 {
		label = "Stage 2 [Unresolved]";
		stage_2_0 [shape=box, label="HashJoinExec"]
		stage_2_0_0 [shape=box, label="ShuffleReaderExec"]
		stage_2_0_1 [shape=box, label="ShuffleReaderExec"]
		stage_2_0_0 -> stage_2_0
		stage_2_0_1 -> stage_2_0
	}
	stage_0_0 -> stage_2_0_0
	stage_1_0 -> stage_2_0_1
}"#;

    #[test]
    fn a_join_reads_as_three_stages_and_two_stage_edges() {
        let dot = Dot::parse(JOIN);
        let ids: Vec<_> = dot.stages.iter().map(|s| s.stage_id).collect();
        assert_eq!(ids, [Some(0), Some(1), Some(2)]);
        let statuses: Vec<_> = dot.stages.iter().map(|s| s.status.as_str()).collect();
        assert_eq!(statuses, ["Successful", "Running", "Unresolved"]);
        assert_eq!(dot.stages[2].operators.len(), 3);
        assert_eq!(dot.operators.len(), 7);
        assert_eq!(dot.stage_edges(), [(0, 2), (1, 2)]);
        assert_eq!(dot.operators[1].label, "DataSourceExec: \"a\"");
        assert_eq!(
            dot.operators[0].label,
            "ShuffleWriterExec\npartitioning=Hash([k@0], 4)"
        );
        // The two inputs sit above the join.
        assert_eq!(layers(3, &dot.stage_edges()), [0, 0, 1]);
    }

    #[test]
    fn garbage_draws_nothing_and_does_not_fail() {
        // Each: (stages, operators, edges) read.
        for (text, read) in [
            ("", (0, 0, 0)),
            ("}}}{{", (0, 0, 0)),
            ("digraph { a -> }", (0, 0, 0)),
            ("\"unterminated", (0, 0, 0)),
            ("subgraph", (1, 0, 0)),
            ("digraph { a -> b -> }", (0, 2, 1)),
        ] {
            let dot = Dot::parse(text);
            assert_eq!(
                (dot.stages.len(), dot.operators.len(), dot.edges.len()),
                read,
                "{text}"
            );
            let nodes: Vec<Node> = dot
                .operators
                .iter()
                .map(|o| Node {
                    title: o.label.clone(),
                    lines: Vec::new(),
                    class: "idle",
                    href: None,
                    hover: String::new(),
                })
                .collect();
            let drawn = draw(&nodes, &dot.edges, "g").into_string();
            assert_eq!(drawn.matches("<rect").count(), read.1, "{text}");
        }
        // A cycle alone: no node is placed below another.
        assert_eq!(layers(2, &[(0, 1), (1, 0)]), [0, 0]);
    }

    /// Regression: layers were found by relaxing every edge up to once per
    /// node, and each layer's members by a walk over every node, so a
    /// stored DOT of 40,000 chained stages took half a minute to draw.
    #[test]
    fn a_long_chain_is_laid_out_at_once_and_a_huge_graph_is_refused() {
        let n = 40_000;
        let mut text = String::from("digraph G {\n");
        for i in 0..n {
            text.push_str(&format!(
                "subgraph cluster{i} {{ label = \"Stage {i} [Successful]\"; s{i} [shape=box, label=\"ShuffleWriterExec\"] }}\n"
            ));
        }
        for i in 1..n {
            text.push_str(&format!("s{} -> s{i}\n", i - 1));
        }
        text.push('}');
        let dot = Dot::parse(&text);
        assert_eq!(dot.stages.len(), n);
        let edges = dot.stage_edges();
        assert_eq!(edges.len(), n - 1);
        // Each stage one layer below the one it reads.
        let layer = layers(n, &edges);
        assert!(layer.iter().enumerate().all(|(i, &l)| l == i));
        // A diamond: the join sits below its longest input.
        assert_eq!(
            layers(4, &[(0, 1), (1, 3), (0, 2), (2, 3), (0, 3)]),
            [0, 1, 1, 2]
        );
        // A cycle ends the walk without looping: its nodes stay unplaced.
        assert_eq!(layers(3, &[(0, 1), (1, 2), (2, 1)]), [0, 1, 0]);
        let node = |i: usize| Node {
            title: format!("Stage {i}"),
            lines: Vec::new(),
            class: "ok",
            href: None,
            hover: String::new(),
        };
        let nodes: Vec<Node> = (0..n).map(node).collect();
        let refused = draw(&nodes, &edges, "Stage graph").into_string();
        assert!(!refused.contains("<svg"), "{}", &refused[..200]);
        assert!(
            refused.contains("40000 boxes, more than the 2000"),
            "{refused}"
        );
        let drawn = draw(&nodes[..MAX_NODES], &edges[..MAX_NODES - 1], "g").into_string();
        assert_eq!(drawn.matches("<rect").count(), MAX_NODES);
    }

    #[test]
    fn labels_are_escaped_in_the_picture() {
        let nodes = [Node {
            title: "<script>alert(1)</script>".into(),
            lines: vec!["a & b".into()],
            class: "ok",
            href: Some("/ui/job/x/stage/0".into()),
            hover: "\"q\"".into(),
        }];
        let svg = draw(&nodes, &[], "g").into_string();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"), "{svg}");
        assert!(svg.contains("a &amp; b"), "{svg}");
    }

    #[test]
    fn operator_names_are_the_first_word() {
        assert_eq!(operator_name("SortExec: expr=[a]\nx"), "SortExec");
        assert_eq!(
            operator_name("ShuffleWriterExec\n16 partitions"),
            "ShuffleWriterExec"
        );
    }
}
