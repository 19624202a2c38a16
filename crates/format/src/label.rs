//! A query's label: what a job without a name is called wherever a name is
//! shown, made from its logical plan as the scheduler printed it (the same
//! text the query hash is made from, so one query has one label). It names
//! the tables the plan reads, in the order they first appear, then the
//! plan's outermost operators from the inside out, e.g.
//! `lineitem, orders · join · aggregate · sort · limit 10`.
//!
//! The outermost operators are the chain of single-input nodes from the
//! plan's root down to its first node of several inputs (a join or a
//! union, named as such) or its first scan. Nodes that only shape rows
//! (projections, filters, aliases, repartitions) are left out. The label is
//! plain text made of names from the plan: whoever shows it escapes it.
//!
//! DataFusion's indented plan display is one node per line, each child two
//! spaces deeper than its parent; a line this reader does not know is
//! skipped, so a plan of a newer DataFusion still gets a label, perhaps a
//! shorter one.

/// Tables named before the rest are counted (`a, b, c +2`).
const MAX_TABLES: usize = 3;
/// The longest table name kept (in characters), then `…`.
const MAX_TABLE_CHARS: usize = 40;
/// The longest label (in characters).
pub const MAX_LABEL_CHARS: usize = 160;
/// Operators named at most (a label is cut at [`MAX_LABEL_CHARS`] anyway).
const MAX_WORDS: usize = 32;
/// Plan lines looked at: a label is for people, and a plan of a million
/// lines (a hostile log) costs no more than this many.
const MAX_LINES: usize = 10_000;

/// The label of a logical plan's text; `None` when it names no table and
/// no operator this reader knows (an empty plan, a bare `EmptyRelation`).
pub fn query_label(logical_plan: &str) -> Option<String> {
    let lines: Vec<(usize, &str)> = logical_plan
        .lines()
        .take(MAX_LINES)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let text = l.trim_start();
            (l.len() - text.len(), text.trim_end())
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let tables: Vec<&str> = lines
        .iter()
        .filter_map(|(_, text)| text.strip_prefix("TableScan: "))
        .map(|rest| rest.split(' ').next().unwrap_or(""))
        .filter(|name| !name.is_empty() && seen.insert(*name))
        .collect();
    let mut ops = outermost(&lines);
    ops.reverse();
    let mut parts = Vec::new();
    if !tables.is_empty() {
        let shown: Vec<String> = tables.iter().take(MAX_TABLES).map(|t| cut(t)).collect();
        let more = tables.len().saturating_sub(MAX_TABLES);
        let mut text = shown.join(", ");
        if more > 0 {
            text.push_str(&format!(" +{more}"));
        }
        parts.push(text);
    }
    parts.extend(ops);
    if parts.is_empty() {
        return None;
    }
    let label = parts.join(" · ");
    Some(match label.char_indices().nth(MAX_LABEL_CHARS) {
        Some((at, _)) => format!("{}…", &label[..at]),
        None => label,
    })
}

/// The words of the chain of single-input nodes from the root, outermost
/// first, ending with the first node of several inputs.
fn outermost(lines: &[(usize, &str)]) -> Vec<String> {
    let mut words = Vec::new();
    let mut at = 0;
    while let Some(&(indent, text)) = lines.get(at)
        && words.len() < MAX_WORDS
    {
        let children: Vec<usize> = (at + 1..lines.len())
            .take_while(|&i| lines[i].0 > indent)
            .filter(|&i| lines[i].0 == indent + 2)
            .collect();
        words.extend(words_of(text, children.len() > 1));
        match children.as_slice() {
            [only] => at = *only,
            _ => break,
        }
    }
    words
}

/// What one plan line contributes to the label.
fn words_of(text: &str, branches: bool) -> Vec<String> {
    let op = text.split(':').next().unwrap_or("").trim();
    let fetch = || {
        text.split(|c: char| c == ',' || c.is_whitespace())
            .find_map(|w| w.strip_prefix("fetch="))
            .and_then(|n| n.parse::<u64>().ok())
    };
    match op {
        "Limit" => vec![fetch().map_or_else(|| "limit".to_string(), |n| format!("limit {n}"))],
        // Outermost first, as the chain is walked: a sort's fetch is
        // applied after it.
        "Sort" => fetch()
            .map(|n| format!("limit {n}"))
            .into_iter()
            .chain(["sort".to_string()])
            .collect(),
        "Aggregate" => vec!["aggregate".into()],
        "Window" | "WindowAggr" => vec!["window".into()],
        "Distinct" | "DistinctOn" => vec!["distinct".into()],
        "Union" => vec!["union".into()],
        "Values" => vec!["values".into()],
        "CopyTo" => vec!["copy".into()],
        "Dml" => vec!["write".into()],
        "Explain" | "Analyze" => vec!["explain".into()],
        _ if op.ends_with("Join") => vec!["join".into()],
        _ if branches => vec![op.to_lowercase()],
        _ => Vec::new(),
    }
}

/// `name` cut to [`MAX_TABLE_CHARS`].
fn cut(name: &str) -> String {
    match name.char_indices().nth(MAX_TABLE_CHARS) {
        Some((at, _)) => format!("{}…", &name[..at]),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TPC-H's third query as DataFusion prints it (abridged), worked by
    /// hand: three tables in the order scanned; the chain from the root is
    /// Sort (fetch=10), Projection, Aggregate, Projection, then a join.
    #[test]
    fn tables_then_the_outer_operators_inside_out() {
        let plan = "Sort: revenue DESC NULLS FIRST, orders.o_orderdate ASC NULLS LAST, fetch=10
  Projection: lineitem.l_orderkey, sum(x) AS revenue
    Aggregate: groupBy=[[lineitem.l_orderkey]], aggr=[[sum(x)]]
      Projection: lineitem.l_orderkey
        Inner Join: orders.o_orderkey = lineitem.l_orderkey
          Projection: orders.o_orderkey
            Inner Join: customer.c_custkey = orders.o_custkey
              Filter: customer.c_mktsegment = Utf8(\"BUILDING\")
                TableScan: customer projection=[c_custkey, c_mktsegment]
              TableScan: orders projection=[o_orderkey]
          TableScan: lineitem projection=[l_orderkey]";
        assert_eq!(
            query_label(plan).as_deref(),
            Some("customer, orders, lineitem · join · aggregate · sort · limit 10")
        );
    }

    /// The upstream-written fixture's plan: a join below an aggregate, one
    /// table read three times (named once), a `Limit` below the join (not
    /// on the chain, so not named).
    #[test]
    fn an_upstream_plan() {
        let plan = "Projection: count(Int64(1)) AS count(*)\n  Aggregate: groupBy=[[]], aggr=[[count(Int64(1))]]\n    Projection:\n      Inner Join:  Filter: c.v > b.v\n        Projection: b.v\n          Inner Join:  Filter: b.v > a.v\n            SubqueryAlias: a\n              TableScan: t projection=[v]\n            SubqueryAlias: b\n              TableScan: t projection=[v]\n        SubqueryAlias: c\n          Limit: skip=0, fetch=300\n            TableScan: t projection=[v]";
        assert_eq!(query_label(plan).as_deref(), Some("t · join · aggregate"));
    }

    #[test]
    fn limits_unions_and_plans_without_tables() {
        let plan = "Limit: skip=0, fetch=5\n  Union\n    TableScan: a\n    TableScan: b";
        assert_eq!(query_label(plan).as_deref(), Some("a, b · union · limit 5"));
        assert_eq!(
            query_label("Projection: Int64(1)\n  EmptyRelation").as_deref(),
            None
        );
        assert_eq!(query_label("").as_deref(), None);
        let values = "Aggregate: groupBy=[[]], aggr=[[count(Int64(1))]]\n  Values: (Int64(1))";
        assert_eq!(query_label(values).as_deref(), Some("values · aggregate"));
    }

    /// Many tables are counted, long names and long labels cut on a
    /// character boundary, and a plan of many lines costs a bounded walk.
    #[test]
    fn long_and_hostile_plans_stay_short() {
        let plan = "Union\n".to_string()
            + &(0..6)
                .map(|i| format!("  TableScan: t{i}\n"))
                .collect::<String>();
        assert_eq!(query_label(&plan).as_deref(), Some("t0, t1, t2 +3 · union"));
        let long = format!("TableScan: {}", "é".repeat(500));
        let label = query_label(&long).unwrap();
        assert_eq!(label.chars().count(), MAX_TABLE_CHARS + 1);
        let deep: String = (0..200_000)
            .map(|i| format!("{}Sort: x, fetch={i}\n", " ".repeat(2 * (i % 50))))
            .collect();
        let label = query_label(&deep).unwrap();
        assert!(label.chars().count() <= MAX_LABEL_CHARS + 1, "{label}");
        assert!(label.ends_with('…'), "{label}");
    }
}
