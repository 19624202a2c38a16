//! The stage graph as a picture: the stored DOT (the scheduler's
//! `/api/job/{id}/dot`) read into stages, operators and edges, then laid
//! out in layers (data flows down) and drawn as inline SVG, each stage a
//! link to its page.
//!
//! The layout is a small Sugiyama-style one written here: longest-path
//! layers, a point per layer for each edge that skips layers, barycenter
//! sweeps for the order, each edge routed through its points. The crate
//! for this, `rust-sugiyama` 0.4, returns the vertices' positions only: its
//! dummy vertices are not tied to the edges they belong to (a fork that
//! returns them is not on crates.io), so edges could not be routed around
//! boxes with it. The code is a few hundred lines, linear-ish in the
//! graph's size, and tested for what matters: no edge crosses a box it
//! does not join.
//!
//! The DOT reader takes what the scheduler writes (clusters per stage,
//! boxes per operator, edges) and is lenient with anything else: what it
//! does not understand it skips, so a strange DOT draws fewer boxes, never
//! an error. It is a flat token loop written here rather than a DOT crate:
//! the DOT comes from a log, so it is untrusted, and `graphviz-rust`
//! 0.9.9 (pest, the most used DOT parser on crates.io) recurses per
//! nesting level: 10,000 nested `subgraph {` (110 KB) overflowed the main
//! thread's stack and aborted the process, which no `catch_unwind` stops.
//! It also refuses a whole graph for one token it does not know, where
//! this reader keeps the rest.

use maud::{Markup, html};
use std::collections::{HashMap, HashSet};

/// One operator box of the DOT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// The DOT node id.
    pub id: String,
    /// Its label, lines as written.
    pub label: String,
}

/// One stage (a DOT cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stage {
    /// Stage id, from the label `Stage N [Status]` or the name `clusterN`.
    pub stage_id: Option<u32>,
    /// The status word of its label.
    pub status: String,
    /// Its operators, in the DOT's order (the writer first).
    pub operators: Vec<usize>,
}

/// A job's DOT, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dot {
    pub operators: Vec<Operator>,
    pub stages: Vec<Stage>,
    /// Edges between operators (data flows from the first to the second).
    pub edges: Vec<(usize, usize)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Word(String),
    Quoted(String),
    Sym(char),
    Arrow,
}

pub fn tokens(text: &str) -> Vec<Token> {
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
    pub fn parse(text: &str) -> Self {
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
    pub fn node(
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

    /// The edges between stages (by index into `stages`), once each: the
    /// DOT's, in the order of their first operator edge (an operator
    /// belongs to the first stage that declares it), then those of `reads`
    /// the DOT left out. `reads` holds `(from, to)` stage ids as the stage
    /// plans state them (`StageAnswer::reads_from`): upstream's DOT has no
    /// edge into a stage that reads through a range shuffle.
    pub fn stage_edges(&self, reads: &[(u32, u32)]) -> Vec<(usize, usize)> {
        let mut stage_of: Vec<Option<usize>> = vec![None; self.operators.len()];
        for (s, stage) in self.stages.iter().enumerate() {
            for &op in &stage.operators {
                stage_of[op].get_or_insert(s);
            }
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let operator_edges = self.edges.iter().map(|&(a, b)| (stage_of[a], stage_of[b]));
        let mut index: HashMap<u32, usize> = HashMap::new();
        for (s, stage) in self.stages.iter().enumerate() {
            if let Some(id) = stage.stage_id {
                index.entry(id).or_insert(s);
            }
        }
        let plan_edges = reads
            .iter()
            .map(|(from, to)| (index.get(from).copied(), index.get(to).copied()));
        for (x, y) in operator_edges.chain(plan_edges) {
            if let (Some(x), Some(y)) = (x, y)
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
pub fn stage_label(label: &str) -> (Option<u32>, String) {
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
pub struct Node {
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

pub const LINE: f64 = 15.0;
pub const MAX_CHARS: usize = 48;
pub const GAP_X: f64 = 28.0;
pub const GAP_Y: f64 = 36.0;

pub fn clip(s: &str) -> String {
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
pub const MAX_NODES: usize = 2_000;

/// The layer of each node: the longest path from a node without inputs,
/// in one pass over the nodes in topological order (Kahn's), so linear in
/// nodes and edges. Nodes on a cycle stay below the inputs that were
/// placed before the cycle.
pub fn layers(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
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

/// The most points long edges add to one picture: past this, further long
/// edges are drawn as one curve (which may cross a box) rather than letting
/// a pathological graph make the layout quadratic.
pub const MAX_POINTS: usize = 4 * MAX_NODES;

/// The graph as it is placed: the boxes (`0..n`), then one point for each
/// layer a long edge passes (the dummy nodes of Sugiyama-style layouts), so
/// every step of every edge joins neighbouring layers and a long edge has
/// a place of its own in each layer it crosses.
pub struct Routed {
    /// The layer of each box and point.
    layer: Vec<usize>,
    /// Each drawn edge: its source, its target, and the boxes and points
    /// it passes, source first and target last.
    paths: Vec<(usize, usize, Vec<usize>)>,
    /// For each box and point, the ones its edges come from and go to.
    inputs: Vec<Vec<usize>>,
    outputs: Vec<Vec<usize>>,
}

/// Layers the boxes and gives each edge that skips layers one point per
/// layer it crosses.
pub fn route(n: usize, edges: &[(usize, usize)]) -> Routed {
    let mut layer = layers(n, edges);
    let mut inputs: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut outputs: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut paths = Vec::with_capacity(edges.len());
    for &(a, b) in edges {
        if a == b || a >= n || b >= n {
            continue;
        }
        let mut chain = vec![a];
        let (from, to) = (layer[a], layer[b]);
        if to > from + 1 && layer.len() - n + (to - from - 1) <= MAX_POINTS {
            for l in from + 1..to {
                chain.push(layer.len());
                layer.push(l);
                inputs.push(Vec::new());
                outputs.push(Vec::new());
            }
        }
        chain.push(b);
        // Only edges that go down order the layers; one against the flow
        // (on a cycle) is drawn but does not pull.
        if to > from {
            for step in chain.windows(2) {
                outputs[step[0]].push(step[1]);
                inputs[step[1]].push(step[0]);
            }
        }
        paths.push((a, b, chain));
    }
    Routed {
        layer,
        paths,
        inputs,
        outputs,
    }
}

/// The members of each layer, left to right: first in the graph's order,
/// then three sweeps (down, up, down) that sort each layer by the mean
/// position of its neighbours in the layer the sweep came from (the
/// barycenter heuristic for fewer crossings). A sweep sorts each layer
/// once, so the whole is near-linear in boxes, points and edges.
pub fn ordered_rows(routed: &Routed) -> Vec<Vec<usize>> {
    let depth = routed.layer.iter().max().map_or(0, |&l| l + 1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (v, &l) in routed.layer.iter().enumerate() {
        rows[l].push(v);
    }
    let mut pos = vec![0.0f64; routed.layer.len()];
    for row in &rows {
        for (i, &v) in row.iter().enumerate() {
            pos[v] = i as f64;
        }
    }
    let downwards: Vec<usize> = (0..depth).collect();
    let upwards: Vec<usize> = (0..depth).rev().collect();
    for (order, neighbours) in [
        (&downwards, &routed.inputs),
        (&upwards, &routed.outputs),
        (&downwards, &routed.inputs),
    ] {
        for &l in order {
            let mut keyed: Vec<(f64, f64, usize)> = rows[l]
                .iter()
                .map(|&v| {
                    let around = &neighbours[v];
                    let key = if around.is_empty() {
                        pos[v]
                    } else {
                        around.iter().map(|&u| pos[u]).sum::<f64>() / around.len() as f64
                    };
                    (key, pos[v], v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            rows[l] = keyed.into_iter().map(|(_, _, v)| v).collect();
            for (i, &v) in rows[l].iter().enumerate() {
                pos[v] = i as f64;
            }
        }
    }
    rows
}

/// Where everything goes: each box's and point's top-left corner and size
/// (a point has none), the top and bottom of each layer, the edges' paths
/// and the picture's size.
pub struct Layout {
    at: Vec<(f64, f64)>,
    size: Vec<(f64, f64)>,
    layer: Vec<usize>,
    rows: Vec<(f64, f64)>,
    paths: Vec<(usize, usize, Vec<usize>)>,
    width: f64,
    height: f64,
}

/// What is said of some edges, by `(from, to)` node: an edge with a note
/// is drawn dashed (`class="edge noted"`), the note its tooltip (a stage
/// link that adaptive planning removed from its consumer's plan, and why).
pub type EdgeNotes = HashMap<(usize, usize), String>;

/// Draws `nodes` in layers with `edges` (data flowing downwards).
pub fn draw(nodes: &[Node], edges: &[(usize, usize)], label: &str) -> Markup {
    draw_noted(nodes, edges, &EdgeNotes::new(), label)
}

/// [`draw`], the edges in `notes` dashed with their notes.
pub fn draw_noted(
    nodes: &[Node],
    edges: &[(usize, usize)],
    notes: &EdgeNotes,
    label: &str,
) -> Markup {
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
    let layout = layout(nodes.iter().map(box_size).collect(), edges);
    html! {
        svg.graph viewBox={ "0 0 " (layout.width.ceil()) " " (layout.height.ceil()) }
            width=(layout.width.ceil()) height=(layout.height.ceil())
            role="img" aria-label=(label) {
            (arrow_marker())
            (render_edges(&layout, true, notes))
            (render_boxes(nodes, &layout, true))
        }
    }
}

/// A frame of a nested picture: a box (a stage) drawn around a layered
/// picture of its own boxes (its operators).
pub struct Frame {
    /// The frame's own title, lines, class and link.
    pub node: Node,
    /// The boxes inside.
    pub inner: Vec<Node>,
    /// Edges between the boxes inside.
    pub inner_edges: Vec<(usize, usize)>,
}

/// The padding inside a frame, around its picture.
pub const PAD: f64 = 10.0;

/// Draws `frames` in layers with `edges` between them (data flowing
/// downwards), each frame around the layered picture of its own boxes: one
/// picture of a whole query, stages as frames and operators inside, laid
/// out by the same code at both levels (the inner pictures first, so each
/// frame is sized to its content). The edges in `notes` are dashed.
pub fn draw_frames(
    frames: &[Frame],
    edges: &[(usize, usize)],
    notes: &EdgeNotes,
    label: &str,
) -> Markup {
    let boxes: usize = frames.iter().map(|f| 1 + f.inner.len()).sum();
    if frames.is_empty() {
        return html! { p.muted { "No graph was recorded for this job." } };
    }
    if boxes > MAX_NODES {
        return html! {
            p.muted role="note" {
                (label) " has " (boxes) " boxes, more than the " (MAX_NODES)
                " a page draws; the stage pages draw each stage's operators."
            }
        };
    }
    let inner: Vec<Layout> = frames
        .iter()
        .map(|f| layout(f.inner.iter().map(box_size).collect(), &f.inner_edges))
        .collect();
    let sizes = frames
        .iter()
        .zip(&inner)
        .map(|(f, l)| {
            let (w, header) = box_size(&f.node);
            let picture = if f.inner.is_empty() {
                (0.0, 0.0)
            } else {
                (l.width, l.height)
            };
            (w.max(picture.0 + 2.0 * PAD), header + picture.1 + PAD)
        })
        .collect();
    let outer = layout(sizes, edges);
    html! {
        svg.graph.frames viewBox={ "0 0 " (outer.width.ceil()) " " (outer.height.ceil()) }
            width=(outer.width.ceil()) height=(outer.height.ceil())
            role="img" aria-label=(label) {
            (arrow_marker())
            (render_edges(&outer, true, notes))
            @for (v, frame) in frames.iter().enumerate() {
                @let (x, y) = outer.at[v];
                @let (w, h) = outer.size[v];
                @let header = box_size(&frame.node).1;
                @let offset = (x + (w - inner[v].width) / 2.0, y + header);
                @let body = html! {
                    g.frame {
                        title { (frame.node.hover) }
                        rect class={ "frame " (frame.node.class) } data-node=(v)
                            x=(format!("{x:.1}")) y=(format!("{y:.1}"))
                            width=(format!("{w:.1}")) height=(format!("{h:.1}")) rx="7" {}
                        (box_text(&frame.node, x, y))
                    }
                };
                @match &frame.node.href {
                    Some(href) => a href=(href) { (body) },
                    None => (body),
                }
                @if !frame.inner.is_empty() {
                    g transform=(format!("translate({:.1} {:.1})", offset.0, offset.1)) {
                        (render(&frame.inner, &inner[v], false))
                    }
                }
            }
        }
    }
}

/// The arrowhead every edge ends in.
pub fn arrow_marker() -> Markup {
    html! {
        defs {
            marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5"
                markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                path.arrowhead d="M 0 0 L 10 5 L 0 10 z" {}
            }
        }
    }
}

/// A box's size: wide enough for its longest (clipped) line, tall enough
/// for its lines.
pub fn box_size(n: &Node) -> (f64, f64) {
    let lines = n.lines.iter().chain([&n.title]);
    let chars = lines.map(|l| clip(l).chars().count()).max().unwrap_or(8);
    (
        (chars as f64 * 6.6 + 20.0).clamp(110.0, 340.0),
        12.0 + LINE * (1 + n.lines.len()) as f64,
    )
}

/// Places boxes of the given sizes, and the points of long edges: layers
/// top to bottom, each row centred, each box centred in its row's height.
pub fn layout(mut size: Vec<(f64, f64)>, edges: &[(usize, usize)]) -> Layout {
    let routed = route(size.len(), edges);
    let rows = ordered_rows(&routed);
    size.resize(routed.layer.len(), (0.0, 0.0));
    let row_width = |row: &[usize]| {
        row.iter().map(|&v| size[v].0).sum::<f64>() + GAP_X * row.len().saturating_sub(1) as f64
    };
    let width = rows.iter().map(|r| row_width(r)).fold(0.0, f64::max) + 20.0;
    let mut at = vec![(0.0f64, 0.0f64); size.len()];
    let mut spans = Vec::with_capacity(rows.len());
    let mut y = 10.0;
    for row in &rows {
        let mut x = (width - row_width(row)) / 2.0;
        let height = row.iter().map(|&v| size[v].1).fold(0.0, f64::max);
        for &v in row {
            at[v] = (x, y + (height - size[v].1) / 2.0);
            x += size[v].0 + GAP_X;
        }
        spans.push((y, y + height));
        y += height + GAP_Y;
    }
    Layout {
        at,
        size,
        layer: routed.layer,
        rows: spans,
        paths: routed.paths,
        width,
        height: y - GAP_Y + 10.0,
    }
}

/// An edge's path along its chain: straight down out of its source's box
/// to the bottom of the source's layer, a curve across each gap between
/// layers, straight down through each layer it crosses (at its point's
/// place) and into its target's box. In a layer nothing shares the
/// x-range of a box or the x of a point, and the gaps hold no box, so the
/// path meets no box but its own two. An edge against the flow (on a
/// cycle) is one curve.
pub fn edge_path(l: &Layout, chain: &[usize]) -> String {
    use std::fmt::Write;
    let centre = |v: usize| l.at[v].0 + l.size[v].0 / 2.0;
    let (a, b) = (chain[0], chain[chain.len() - 1]);
    let (mut x, mut y) = (centre(a), l.at[a].1 + l.size[a].1);
    let mut d = format!("M {x:.1} {y:.1}");
    let curve_to = |d: &mut String, (x, y): (f64, f64), (x2, y2): (f64, f64)| {
        let mid = (y + y2) / 2.0;
        let _ = write!(d, " C {x:.1} {mid:.1}, {x2:.1} {mid:.1}, {x2:.1} {y2:.1}");
    };
    if l.layer[b] <= l.layer[a] {
        curve_to(&mut d, (x, y), (centre(b), l.at[b].1 - 1.0));
        return d;
    }
    let down_to = |d: &mut String, x: f64, y: &mut f64, to: f64| {
        if to - *y > 0.5 {
            let _ = write!(d, " L {x:.1} {to:.1}");
            *y = to;
        }
    };
    down_to(&mut d, x, &mut y, l.rows[l.layer[a]].1);
    for &v in &chain[1..] {
        let next = (centre(v), l.rows[l.layer[v]].0);
        curve_to(&mut d, (x, y), next);
        (x, y) = next;
        let bottom = if v == b {
            l.at[v].1 - 1.0
        } else {
            l.rows[l.layer[v]].1
        };
        down_to(&mut d, x, &mut y, bottom);
    }
    d
}

/// The edges of a layout. The edges of the outer picture say which boxes
/// they join (`data-from`, `data-to`), so a reader (or a test) can check
/// the geometry; those inside a frame are marked `op`.
pub fn render_edges(layout: &Layout, outer: bool, notes: &EdgeNotes) -> Markup {
    html! {
        @for (a, b, chain) in &layout.paths {
            @if let Some(note) = notes.get(&(*a, *b)).filter(|_| outer) {
                path.edge.noted d=(edge_path(layout, chain)) data-from=(a) data-to=(b)
                    marker-end="url(#arrow)" { title { (note) } }
            } @else if outer {
                path.edge d=(edge_path(layout, chain)) data-from=(a) data-to=(b)
                    marker-end="url(#arrow)" {}
            } @else {
                path.edge.op d=(edge_path(layout, chain)) marker-end="url(#arrow)" {}
            }
        }
    }
}

/// A box's title and lines, its top-left corner at `(x, y)`.
pub fn box_text(node: &Node, x: f64, y: f64) -> Markup {
    html! {
        text.title x=(format!("{:.1}", x + 10.0)) y=(format!("{:.1}", y + 18.0)) { (clip(&node.title)) }
        @for (i, line) in node.lines.iter().enumerate() {
            text x=(format!("{:.1}", x + 10.0)) y=(format!("{:.1}", y + 18.0 + LINE * (i + 1) as f64)) { (clip(line)) }
        }
    }
}

/// The edges and boxes of a layout. A box of the outer picture says which
/// node it is (`data-node`); one inside a frame is marked `data-op`.
pub fn render(nodes: &[Node], layout: &Layout, outer: bool) -> Markup {
    html! {
        (render_edges(layout, outer, &EdgeNotes::new()))
        (render_boxes(nodes, layout, outer))
    }
}

/// The boxes of a layout, as [`render`] draws them.
pub fn render_boxes(nodes: &[Node], layout: &Layout, outer: bool) -> Markup {
    html! {
        @for (v, node) in nodes.iter().enumerate() {
            @let (x, y) = layout.at[v];
            @let (w, h) = layout.size[v];
            @let body = html! {
                g.node {
                    title { (node.hover) }
                    @if outer {
                        rect class=(node.class) data-node=(v) x=(format!("{x:.1}")) y=(format!("{y:.1}"))
                            width=(format!("{w:.1}")) height=(format!("{h:.1}")) rx="5" {}
                    } @else {
                        rect class=(node.class) data-op=(v) x=(format!("{x:.1}")) y=(format!("{y:.1}"))
                            width=(format!("{w:.1}")) height=(format!("{h:.1}")) rx="5" {}
                    }
                    (box_text(node, x, y))
                }
            };
            @match &node.href {
                Some(href) => a href=(href) { (body) },
                None => (body),
            }
        }
    }
}

/// The operator's name: the label's first line up to its first `:`.
pub fn operator_name(label: &str) -> &str {
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
        assert_eq!(dot.stage_edges(&[]), [(0, 2), (1, 2)]);
        assert_eq!(dot.operators[1].label, "DataSourceExec: \"a\"");
        assert_eq!(
            dot.operators[0].label,
            "ShuffleWriterExec\npartitioning=Hash([k@0], 4)"
        );
        // The two inputs sit above the join.
        assert_eq!(layers(3, &dot.stage_edges(&[])), [0, 0, 1]);
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
                    class: "muted",
                    href: None,
                    hover: String::new(),
                })
                .collect();
            let drawn = draw(&nodes, &dot.edges, "g").into_string();
            assert_eq!(drawn.matches("<rect").count(), read.1, "{text}");
        }
        // A cycle alone: no node is placed below another.
        assert_eq!(layers(2, &[(0, 1), (1, 0)]), [0, 0]);
        // Nesting a recursive parser cannot survive (see the module doc),
        // and one token a strict one refuses: the edge is still read.
        let deep = format!(
            "digraph G {{ {} a -> b; ??? {} }}",
            "subgraph { ".repeat(100_000),
            "} ".repeat(100_000)
        );
        let dot = Dot::parse(&deep);
        assert_eq!((dot.stages.len(), dot.edges.len()), (100_000, 1));
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
        let edges = dot.stage_edges(&[]);
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
        // A chain with an edge from its head to every box would need two
        // million points: the points stop at the cap, every edge is drawn.
        let mut fan: Vec<(usize, usize)> = edges[..MAX_NODES - 1].to_vec();
        fan.extend((2..MAX_NODES).map(|i| (0, i)));
        let routed = route(MAX_NODES, &fan);
        assert!(routed.layer.len() - MAX_NODES <= MAX_POINTS);
        assert_eq!(routed.paths.len(), fan.len());
        let drawn = draw(&nodes[..MAX_NODES], &fan, "g").into_string();
        assert_eq!(drawn.matches("class=\"edge\"").count(), fan.len());
    }

    fn boxes(n: usize) -> Vec<Node> {
        (0..n)
            .map(|i| Node {
                title: format!("Stage {i}"),
                lines: vec!["ShuffleWriterExec".into(); i % 3],
                class: "ok",
                href: None,
                hover: String::new(),
            })
            .collect()
    }

    /// A long edge gets a point in each layer it crosses, placed apart from
    /// that layer's boxes, and its path goes down through that point.
    #[test]
    fn a_long_edge_passes_beside_the_boxes_of_the_layers_it_skips() {
        // 0 -> 1 -> 2 -> 3, and 0 -> 3 skipping two layers.
        let edges = [(0, 1), (1, 2), (2, 3), (0, 3)];
        let nodes = boxes(4);
        let l = layout(nodes.iter().map(box_size).collect(), &edges);
        assert_eq!(l.layer.len(), 6, "two points for the long edge");
        let (_, _, chain) = l.paths.iter().find(|(a, b, _)| (*a, *b) == (0, 3)).unwrap();
        assert_eq!(chain.len(), 4);
        for &p in &chain[1..3] {
            let x = l.at[p].0;
            let (bx, bw) = (l.at[p - 3].0, l.size[p - 3].0);
            assert!(
                x < bx || x > bx + bw,
                "point {p} at {x} inside box {} ({bx}+{bw})",
                p - 3
            );
            let d = edge_path(&l, chain);
            let (top, bottom) = l.rows[l.layer[p]];
            assert!(
                d.contains(&format!("{x:.1} {top:.1} L {x:.1} {bottom:.1}")),
                "{d}"
            );
        }
        // Every edge is drawn once, each saying which boxes it joins.
        let svg = draw(&nodes, &edges, "g").into_string();
        for (a, b) in edges {
            let tag = format!(r#"data-from="{a}" data-to="{b}""#);
            assert_eq!(svg.matches(&tag).count(), 1, "{tag}");
        }
    }

    /// Random DAGs of 40 stages: in every layer, each long edge's point
    /// lies outside every box of that layer, and nothing of a layer
    /// overlaps anything else of it.
    #[test]
    fn forty_stage_graphs_keep_long_edges_beside_every_box() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..50 {
            let n = 40;
            // Each stage reads one to three earlier ones.
            let mut edges: Vec<(usize, usize)> = Vec::new();
            for b in 1..n {
                for _ in 0..1 + next(3) {
                    let a = next(b as u64) as usize;
                    if !edges.contains(&(a, b)) {
                        edges.push((a, b));
                    }
                }
            }
            let nodes = boxes(n);
            let l = layout(nodes.iter().map(box_size).collect(), &edges);
            let mut by_layer: Vec<Vec<usize>> = vec![Vec::new(); l.rows.len()];
            for (v, &layer) in l.layer.iter().enumerate() {
                by_layer[layer].push(v);
            }
            for row in &by_layer {
                let mut spans: Vec<(f64, f64)> = row
                    .iter()
                    .map(|&v| (l.at[v].0, l.at[v].0 + l.size[v].0))
                    .collect();
                spans.sort_by(|a, b| a.0.total_cmp(&b.0));
                for pair in spans.windows(2) {
                    assert!(pair[0].1 < pair[1].0, "overlap in a layer: {pair:?}");
                }
            }
            assert_eq!(l.paths.len(), edges.len());
            for (a, b, chain) in &l.paths {
                assert_eq!(
                    l.layer[*b] - l.layer[*a],
                    chain.len() - 1,
                    "one step per layer"
                );
            }
        }
    }

    #[test]
    fn plan_reads_add_the_edges_the_dot_left_out_once() {
        let dot = Dot::parse(JOIN);
        // The DOT's two, then stage 2 reading 0 again (already there) and
        // stage 1 reading 0 (new); unknown stages are ignored.
        let reads = [(0, 2), (0, 1), (7, 2), (2, 2)];
        assert_eq!(dot.stage_edges(&reads), [(0, 2), (1, 2), (0, 1)]);
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
    fn a_noted_edge_is_dashed_with_its_note_escaped_and_only_that_one() {
        let node = |t: &str| Node {
            title: t.into(),
            lines: vec![],
            class: "ok",
            href: None,
            hover: t.into(),
        };
        let nodes = [node("a"), node("b"), node("c")];
        let notes = EdgeNotes::from([((0, 2), "inferred <b>&</b>".to_string())]);
        let svg = draw_noted(&nodes, &[(0, 1), (0, 2), (1, 2)], &notes, "g").into_string();
        assert_eq!(svg.matches("class=\"edge noted\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("class=\"edge\"").count(), 2, "{svg}");
        assert!(svg.contains("data-from=\"0\" data-to=\"2\""), "{svg}");
        assert!(
            svg.contains("<title>inferred &lt;b&gt;&amp;&lt;/b&gt;</title>"),
            "{svg}"
        );
        // The same edges without notes draw no dashed one.
        assert!(
            !draw(&nodes, &[(0, 1), (0, 2)], "g")
                .into_string()
                .contains("noted")
        );
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
