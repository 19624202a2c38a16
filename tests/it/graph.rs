//! The stage graph as served, read back from the page's SVG: every stage
//! but the last feeds another (the whole DAG, including the edges
//! upstream's DOT leaves out), and no edge passes through a box it does not
//! join. The geometry is the served picture's own: its boxes
//! (`rect[data-node]`) and its edges' paths (`path.edge`, `d` sampled
//! along each line and curve).

use ballista_job_history::history_router;
use bjh_metrics::HistoryMetrics;
use bjh_store::LogStore;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A box of the picture.
struct Rect {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

/// An edge of the picture: the boxes it joins and the points along it.
struct Edge {
    from: usize,
    to: usize,
    points: Vec<(f64, f64)>,
    /// Drawn dashed, with a note (a link pruned from its reader's plan).
    noted: bool,
}

/// The first `<svg class="graph">` of an HTML page (or `graph frames`,
/// the profile, whose boxes are the stages' frames), read: its boxes and
/// edges; `None` when the page draws no graph.
fn read_graph(page: &str) -> Option<(BTreeMap<usize, Rect>, Vec<Edge>)> {
    let start = page.find("<svg class=\"graph")?;
    let end = start + page[start..].find("</svg>")? + "</svg>".len();
    let mut reader = quick_xml::Reader::from_str(&page[start..end]);
    let mut rects = BTreeMap::new();
    let mut edges = Vec::new();
    loop {
        let event = reader.read_event().expect("the graph is well-formed XML");
        let e = match event {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => e,
            quick_xml::events::Event::Eof => break,
            _ => continue,
        };
        let attr = |name: &str| {
            e.try_get_attribute(name)
                .unwrap()
                .map(|a| a.unescape_value().unwrap().to_string())
        };
        let number = |name: &str| attr(name).and_then(|v| v.parse::<f64>().ok());
        match e.name().as_ref() {
            b"rect" => {
                if let Some(node) = attr("data-node") {
                    rects.insert(
                        node.parse().unwrap(),
                        Rect {
                            x: number("x").unwrap(),
                            y: number("y").unwrap(),
                            w: number("width").unwrap(),
                            h: number("height").unwrap(),
                        },
                    );
                }
            }
            b"path" if matches!(attr("class").as_deref(), Some("edge" | "edge noted")) => edges
                .push(Edge {
                    from: attr("data-from").unwrap().parse().unwrap(),
                    to: attr("data-to").unwrap().parse().unwrap(),
                    points: sample(&attr("d").unwrap()),
                    noted: attr("class").as_deref() == Some("edge noted"),
                }),
            _ => {}
        }
    }
    Some((rects, edges))
}

/// Points along an SVG path of `M`, `L` and `C` commands (absolute), 50
/// per line or curve.
fn sample(d: &str) -> Vec<(f64, f64)> {
    let mut tokens = d.split([' ', ',']).filter(|t| !t.is_empty());
    fn numbers<'a>(n: usize, tokens: &mut impl Iterator<Item = &'a str>) -> Vec<f64> {
        (0..n)
            .map(|_| {
                tokens
                    .next()
                    .expect("a number")
                    .parse::<f64>()
                    .expect("a number")
            })
            .collect()
    }
    let mut at = (0.0, 0.0);
    let mut points = Vec::new();
    while let Some(command) = tokens.next() {
        match command {
            "M" => {
                let p = numbers(2, &mut tokens);
                at = (p[0], p[1]);
                points.push(at);
            }
            "L" => {
                let p = numbers(2, &mut tokens);
                for i in 1..=50 {
                    let t = f64::from(i) / 50.0;
                    points.push((at.0 + (p[0] - at.0) * t, at.1 + (p[1] - at.1) * t));
                }
                at = (p[0], p[1]);
            }
            "C" => {
                let p = numbers(6, &mut tokens);
                let c = [at, (p[0], p[1]), (p[2], p[3]), (p[4], p[5])];
                for i in 1..=50 {
                    let t = f64::from(i) / 50.0;
                    let u = 1.0 - t;
                    let w = [u * u * u, 3.0 * u * u * t, 3.0 * u * t * t, t * t * t];
                    let x = (0..4).map(|k| w[k] * c[k].0).sum();
                    let y = (0..4).map(|k| w[k] * c[k].1).sum();
                    points.push((x, y));
                }
                at = c[3];
            }
            other => panic!("a path command this test does not read: {other} in {d}"),
        }
    }
    points
}

/// One box of a page's first graph: its class, its title and the lines
/// under it, as drawn.
#[derive(Debug)]
pub(crate) struct Drawn {
    pub class: String,
    pub title: String,
    pub lines: Vec<String>,
}

/// The boxes of the first `<svg class="graph">` on `page`.
pub(crate) fn drawn_boxes(page: &str) -> Vec<Drawn> {
    use quick_xml::events::Event;
    let Some(start) = page.find("<svg class=\"graph") else {
        return Vec::new();
    };
    let end = start + page[start..].find("</svg>").unwrap() + "</svg>".len();
    let mut reader = quick_xml::Reader::from_str(&page[start..end]);
    let mut boxes: Vec<Drawn> = Vec::new();
    let mut in_text: Option<bool> = None;
    loop {
        match reader.read_event().expect("the graph is well-formed XML") {
            Event::Start(e) | Event::Empty(e) => {
                let class = e
                    .try_get_attribute("class")
                    .unwrap()
                    .map(|a| a.unescape_value().unwrap().to_string())
                    .unwrap_or_default();
                match e.name().as_ref() {
                    b"g" if class == "node" => boxes.push(Drawn {
                        class: String::new(),
                        title: String::new(),
                        lines: Vec::new(),
                    }),
                    b"rect" => {
                        if let Some(b) = boxes.last_mut() {
                            b.class = class;
                        }
                    }
                    b"text" => in_text = Some(class == "title"),
                    _ => {}
                }
            }
            Event::Text(t) => {
                if let (Some(is_title), Some(b)) = (in_text.take(), boxes.last_mut()) {
                    // The text up to its first entity (`&gt;` comes as an
                    // event of its own): enough for the checks here.
                    let text = t.decode().unwrap().to_string();
                    if is_title {
                        b.title = text;
                    } else {
                        b.lines.push(text);
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    boxes
}

/// The number of edges the first graph on `page` draws.
pub(crate) fn drawn_edges(page: &str) -> usize {
    read_graph(page).map_or(0, |(_, edges)| edges.len())
}

/// How many of the edges on `page` are drawn dashed, with a note.
pub(crate) fn noted_edges(page: &str) -> usize {
    read_graph(page).map_or(0, |(_, edges)| edges.iter().filter(|e| e.noted).count())
}

/// What is wrong with the stage graph on `page`: stages that feed no other
/// (beyond the one last stage; only when `whole`), and edges that pass
/// through a box they do not join. Empty when the graph is clear, or
/// absent.
pub(crate) fn stage_graph_faults(page: &str) -> Vec<String> {
    graph_faults(page, true)
}

/// [`stage_graph_faults`], the rule that every stage but the last feeds
/// another applied only when `whole`.
pub(crate) fn graph_faults(page: &str, whole: bool) -> Vec<String> {
    let Some((rects, edges)) = read_graph(page) else {
        return Vec::new();
    };
    let mut faults = Vec::new();
    let feeding: BTreeSet<usize> = edges.iter().map(|e| e.from).collect();
    let sinks: Vec<&usize> = rects.keys().filter(|n| !feeding.contains(n)).collect();
    if whole && sinks.len() > 1 {
        faults.push(format!(
            "{} boxes of {} feed no other: {sinks:?} ({} edges)",
            sinks.len(),
            rects.len(),
            edges.len()
        ));
    }
    for edge in &edges {
        for (&node, r) in &rects {
            if node == edge.from || node == edge.to {
                continue;
            }
            let inside = |&(x, y): &(f64, f64)| {
                x > r.x + 1.0 && x < r.x + r.w - 1.0 && y > r.y + 1.0 && y < r.y + r.h - 1.0
            };
            if let Some(p) = edge.points.iter().find(|p| inside(p)) {
                faults.push(format!(
                    "the edge {} -> {} passes through box {node} at {p:?}",
                    edge.from, edge.to
                ));
            }
        }
    }
    faults
}

/// Upstream-written logs, served in process: one of them ends in an
/// `ORDER BY`, whose last stage reads through a range shuffle that the
/// scheduler's DOT has no edge for.
#[tokio::test]
async fn upstream_written_logs_draw_every_stage_edge_and_no_edge_through_a_box() {
    use tower::ServiceExt;
    let tmp = tempfile::tempdir().unwrap();
    crate::history::copy_fixtures(tmp.path());
    let store = Arc::new(LogStore::new(
        tmp.path(),
        Arc::new(HistoryMetrics::unregistered()),
    ));
    store.rescan();
    let router = history_router(store, None, None);
    let mut drawn = 0;
    for entry in std::fs::read_dir(tmp.path()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let id = name.trim_end_matches(".eventlog");
        let request = http::Request::get(format!("/ui/job/{id}"))
            .body(axum::body::Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "{id}");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let page = String::from_utf8(body.to_vec()).unwrap();
        let faults = stage_graph_faults(&page);
        assert!(faults.is_empty(), "{id}: {faults:?}");
        if let Some((rects, edges)) = read_graph(&page) {
            drawn += 1;
            assert!(edges.len() + 1 >= rects.len(), "{id}");
        }
    }
    // The ORDER BY job: three stages, 0 -> 1 from the DOT, 1 -> 2 from
    // stage 2's plan (`RangeShuffleReaderExec: upstream_stage: 1`).
    assert!(drawn >= 5, "{drawn} graphs drawn");
}

/// A picture made to fail: a long edge drawn straight through the box of
/// the layer it skips is found, and so is a stage that feeds nothing.
#[test]
fn the_check_finds_an_edge_through_a_box_and_a_stage_left_alone() {
    let page = r#"<svg class="graph" viewBox="0 0 100 300">
        <path class="edge" d="M 50 40 L 50 200" data-from="0" data-to="2"></path>
        <rect data-node="0" x="0" y="0" width="100" height="40"></rect>
        <rect data-node="1" x="0" y="100" width="100" height="40"></rect>
        <rect data-node="2" x="0" y="200" width="100" height="40"></rect>
        <rect data-node="3" x="0" y="250" width="100" height="40"></rect>
    </svg>"#;
    let faults = stage_graph_faults(page);
    assert_eq!(faults.len(), 2, "{faults:?}");
    assert!(
        faults[0].starts_with("3 boxes of 4 feed no other"),
        "{faults:?}"
    );
    assert!(
        faults[1].contains("0 -> 2 passes through box 1"),
        "{faults:?}"
    );
    let curve = r#"<svg class="graph"><path class="edge" d="M 0 0 C 0 50, 100 50, 100 100" data-from="0" data-to="1"></path>
        <rect data-node="0" x="-5" y="-10" width="10" height="10"></rect>
        <rect data-node="1" x="95" y="100" width="10" height="10"></rect>
        <rect data-node="2" x="40" y="40" width="20" height="20"></rect></svg>"#;
    let faults = stage_graph_faults(curve);
    assert!(
        faults.iter().any(|f| f.contains("through box 2")),
        "{faults:?}"
    );
}
