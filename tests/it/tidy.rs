//! Tidy: the source tree keeps the shape ARCHITECTURE.md describes. It reads
//! `src/` as text and fails with the file and the rule it breaks:
//!
//! - layers import one way: `format` at the bottom (importing nothing of
//!   ours), `metrics` beside it; `recording` and `store` above them, neither
//!   importing the other; `analysis` above `store`; `columnar` (the
//!   derived columnar history) above `analysis`; `serving` above all of
//!   them; `server` and `fuzzing` on top, `bench_support` (the benches' and
//!   tests' door) above all; the binary only through the library's public paths;
//! - `crate::` imports between files form no cycle;
//! - every file starts with a module doc, and every layer folder's
//!   `mod.rs` states its rule;
//! - no file is over 900 lines, its `#[cfg(test)] mod tests` excluded;
//! - no function outside tests is over 100 lines (an orchestrator reads
//!   as steps).
//!
//! `super::` paths are resolved from the module they are in, as the
//! compiler does: `super::locate::X` in `store/read.rs` is an import of
//! `store::locate`, a sibling. Only a path that names an ancestor itself
//! (`super::StoreError`, `use super::*`) is exempt: a child using its
//! parent is one module's code split across files, not an import between
//! modules. Test modules may import anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 900;

/// The longest a function outside tests may be, in lines.
const MAX_FN_LINES: usize = 100;

/// The layers a top-level module may import from, itself included.
fn may_import(from: &str, to: &str) -> bool {
    // `files` (safe file writes) sits below every layer but `format` and
    // `metrics`, which import nothing.
    if to == "files" && !matches!(from, "format" | "metrics") {
        return true;
    }
    let allowed: &[&str] = match from {
        "files" => &["files"],
        "format" => &["format"],
        "metrics" => &["metrics"],
        "recording" => &["format", "metrics", "recording"],
        "store" => &["format", "metrics", "store"],
        "analysis" => &["format", "metrics", "store", "analysis"],
        "columnar" => &[
            "format",
            "metrics",
            "recording",
            "store",
            "analysis",
            "columnar",
        ],
        "serving" => &[
            "format",
            "metrics",
            "recording",
            "store",
            "analysis",
            "columnar",
            "serving",
        ],
        "traces" => &["format", "metrics", "recording", "store", "traces"],
        "server" => &[
            "format",
            "metrics",
            "recording",
            "store",
            "analysis",
            "columnar",
            "serving",
            "traces",
            "server",
        ],
        "fuzzing" => &[
            "format", "metrics", "store", "analysis", "serving", "fuzzing",
        ],
        // The crate root and the benches' door re-export from every layer.
        "lib" | "bench_support" => return true,
        other => panic!("src/{other}: a top-level module the layer rule does not know; add it"),
    };
    allowed.contains(&to)
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `store/scan.rs` is `store::scan`; `store/mod.rs` is `store`.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The file's text before its test module.
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// Drops `//` comments (doc comments included) so a path named in prose is
/// not taken for an import.
fn code_only(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `crate::` reference names, with `{a, b::c}` groups
/// expanded: `crate::x::{y, z::w}` gives `x::y` and `x::z::w`.
fn crate_paths(code: &str) -> Vec<String> {
    paths_after(code, "crate::")
}

/// Every path after `prefix` (not part of a longer name), groups
/// expanded, without the prefix.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    fn expand(prefix: &str, rest: &str, out: &mut Vec<String>) -> usize {
        // Reads one path from `rest`; returns the bytes consumed.
        let mut path = prefix.to_string();
        let bytes = rest.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i] as char;
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                path.push(c);
                i += 1;
            } else if c == '{' {
                i += 1;
                loop {
                    while i < bytes.len() && (bytes[i] as char).is_whitespace() {
                        i += 1;
                    }
                    if i >= bytes.len() || bytes[i] == b'}' {
                        return i + 1;
                    }
                    i += expand(&path, &rest[i..], out);
                    while i < bytes.len() && matches!(bytes[i], b',' | b' ' | b'\n') {
                        i += 1;
                    }
                }
            } else {
                break;
            }
        }
        out.push(path);
        i.max(1)
    }
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(prefix) {
        let start = from + at + prefix.len();
        let before = code[..from + at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            from = start;
            continue;
        }
        let used = expand("", &code[start..], &mut out);
        from = start + used.min(code.len() - start);
    }
    out
}

/// The deepest module of `modules` a path names (`store::query::ListQuery`
/// is in `store::query`).
fn target(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m))
}

struct Tree {
    /// Module path to its file's text.
    files: BTreeMap<String, String>,
}

impl Tree {
    fn read() -> Self {
        let root = src();
        let mut paths = Vec::new();
        rust_files(&root, &mut paths);
        let files = paths
            .into_iter()
            .filter(|p| !p.starts_with(root.join("bin")))
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                (module_of(p.strip_prefix(&root).unwrap()), text)
            })
            .collect();
        Self { files }
    }

    fn modules(&self) -> BTreeSet<String> {
        self.files.keys().cloned().collect()
    }

    /// Each module's imports of other modules by `crate::` and `super::`
    /// paths, outside its tests.
    fn imports(&self) -> BTreeMap<String, BTreeSet<String>> {
        let modules = self.modules();
        self.files
            .iter()
            .map(|(module, text)| {
                let code = code_only(without_tests(text));
                (module.clone(), imports_of(module, &code, &modules))
            })
            .collect()
    }
}

/// The modules `module` (whose code is `code`) imports: its `crate::`
/// paths, and its `super::` paths resolved from it, less those that name
/// one of its ancestors itself.
fn imports_of(module: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut targets: BTreeSet<String> = crate_paths(code)
        .iter()
        .filter_map(|p| target(p, modules))
        .filter(|t| t != module)
        .collect();
    let ancestors: Vec<String> = {
        let parts: Vec<&str> = module.split("::").collect();
        (0..parts.len()).map(|n| parts[..n].join("::")).collect()
    };
    for path in super_paths(code) {
        let Some(resolved) = resolve_super(module, &path) else {
            continue;
        };
        if let Some(t) = target(&resolved, modules)
            && t != module
            && !ancestors.contains(&t)
        {
            targets.insert(t);
        }
    }
    targets
}

/// Every path that starts with `super::` (groups expanded, as
/// [`crate_paths`] does), its leading `super::`s kept.
fn super_paths(code: &str) -> Vec<String> {
    paths_after(code, "super::")
        .into_iter()
        .map(|p| format!("super::{p}"))
        .collect()
}

/// `super::...` in `module`, as a path from the crate root; `None` when it
/// climbs above the root. A `mod.rs` file is its folder's module, so its
/// `super` is the folder's parent.
fn resolve_super(module: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = module.split("::").collect();
    if module == "lib" {
        parts.clear();
    }
    let mut rest = path;
    while let Some(after) = rest.strip_prefix("super::") {
        parts.pop()?;
        rest = after;
    }
    parts.extend(rest.split("::").filter(|s| !s.is_empty()));
    Some(parts.join("::"))
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap()
}

/// Upward or sideways imports between layers, as messages.
fn layer_violations(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (from, targets) in imports {
        for to in targets {
            if !may_import(top(from), top(to)) {
                bad.push(format!(
                    "{from} imports {to}: the `{}` layer may not import `{}` (ARCHITECTURE.md, Layers)",
                    top(from),
                    top(to)
                ));
            }
        }
    }
    bad
}

/// One cycle of the import graph, if there is one.
fn find_cycle(imports: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        imports: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in imports.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == next).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, imports, state, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in imports.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0
            && let Some(cycle) = visit(node, imports, &mut state, &mut Vec::new())
        {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn layers_import_one_way() {
    let tree = Tree::read();
    let bad = layer_violations(&tree.imports());
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

#[test]
fn modules_import_each_other_in_no_cycle() {
    let tree = Tree::read();
    if let Some(cycle) = find_cycle(&tree.imports()) {
        panic!("an import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn every_file_has_a_module_doc_and_every_layer_its_rule() {
    let tree = Tree::read();
    let mut bad = Vec::new();
    for (module, text) in &tree.files {
        if module == "lib" {
            assert!(text.starts_with("#![doc = include_str!(\"../README.md\")]"));
            continue;
        }
        if !text.starts_with("//!") {
            bad.push(format!("src/{module}: starts without a `//!` module doc"));
        }
    }
    for layer in [
        "format",
        "recording",
        "store",
        "analysis",
        "columnar",
        "serving",
        "traces",
    ] {
        let doc: String = tree.files[layer]
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect();
        if !doc.contains("import") {
            bad.push(format!(
                "src/{layer}/mod.rs: its module doc does not say what the layer may import"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn no_file_is_over_the_size_limit() {
    let tree = Tree::read();
    let bad: Vec<String> = tree
        .files
        .iter()
        .map(|(module, text)| (module, without_tests(text).lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(module, lines)| {
            format!("src/{module}: {lines} lines outside tests, over {MAX_LINES}; split it")
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The functions of `text` (tests excluded) longer than `max` lines, as
/// (name, first line, lines). A function is counted from its `fn` line to
/// the brace that closes its body; braces in strings and comments are not
/// counted.
fn long_functions(text: &str, max: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<String> = code_only(without_tests(text))
        .lines()
        .map(strip_strings)
        .collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let (mut depth, mut opened) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            for c in l.chars() {
                match c {
                    '{' => (depth, opened) = (depth + 1, true),
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if !opened && l.trim_end().ends_with(';') {
                break; // a declaration without a body
            }
            if opened && depth <= 0 {
                if j - i + 1 > max {
                    out.push((name.to_string(), i + 1, j - i + 1));
                }
                break;
            }
        }
    }
    out
}

/// The name a line declares a function of, if it does.
fn fn_name(line: &str) -> Option<&str> {
    let at = line.find("fn ")?;
    let before = line[..at].trim();
    let qualifiers = [
        "pub",
        "pub(crate)",
        "pub(super)",
        "async",
        "const",
        "unsafe",
    ];
    if !before.split_whitespace().all(|w| qualifiers.contains(&w)) {
        return None;
    }
    let rest = &line[at + 3..];
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    (end > 0).then(|| &rest[..end])
}

/// `line` with the contents of its string and character literals blanked.
fn strip_strings(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        match (in_str, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => {
                in_str = false;
                out.push('"');
            }
            (true, _) => {}
            (false, '"') => {
                in_str = true;
                out.push('"');
            }
            (false, '\'') if chars.clone().nth(1) == Some('\'') => {
                chars.next();
                chars.next();
            }
            (false, c) => out.push(c),
        }
    }
    out
}

#[test]
fn no_function_is_over_the_length_limit() {
    let tree = Tree::read();
    let mut bad = Vec::new();
    for (module, text) in &tree.files {
        for (name, line, lines) in long_functions(text, MAX_FN_LINES) {
            bad.push(format!(
                "src/{module}: fn {name} (line {line}) is {lines} lines, over {MAX_FN_LINES}; \
                 split it into steps"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_length_check_counts_a_function_to_its_closing_brace() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let text = format!(
        "pub(crate) async fn long() {{\n{}}}\n\nfn short() {{\n    let s = \"}}\";\n}}\n\
         fn declared();\n",
        body(101)
    );
    let found = long_functions(&text, MAX_FN_LINES);
    assert_eq!(found, [("long".to_string(), 1, 103)]);
    assert!(long_functions(&format!("fn ok() {{\n{}}}\n", body(98)), MAX_FN_LINES).is_empty());
}

/// The checks themselves catch what they are for: an upward import and a
/// cycle in a made-up tree, and grouped paths expanded.
#[test]
fn the_checks_catch_an_upward_import_and_a_cycle() {
    let paths = crate_paths(
        "use crate::serving::{error::ApiError, router};\nlet x = crate::format::now_millis();",
    );
    assert_eq!(
        paths,
        [
            "serving::error::ApiError",
            "serving::router",
            "format::now_millis"
        ]
    );
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    let upward = graph(&[
        ("store::scan", "serving::router"),
        ("serving::source", "store"),
    ]);
    assert_eq!(layer_violations(&upward).len(), 1);
    let sideways = graph(&[("recording::writer", "store::read")]);
    assert_eq!(layer_violations(&sideways).len(), 1);
    let cyclic = graph(&[("a", "b"), ("b", "c"), ("c", "a")]);
    assert!(find_cycle(&cyclic).is_some());
    // Siblings that import each other through `super::`: a cycle; a child
    // that uses its parent (`super::Thing`, `use super::*`): no edge.
    let modules: BTreeSet<String> = ["store", "store::read", "store::locate", "store::scan"]
        .iter()
        .map(|m| m.to_string())
        .collect();
    let siblings: BTreeMap<String, BTreeSet<String>> = [
        (
            "store::read",
            "use super::{locate::Range, StoreError};\nuse super::*;",
        ),
        ("store::locate", "fn f() { super::read::summary(); }"),
        ("store::scan", "use super::StoreError;"),
        ("store", "use crate::format::LogName;"),
    ]
    .iter()
    .map(|(m, code)| (m.to_string(), imports_of(m, code, &modules)))
    .collect();
    assert_eq!(
        siblings["store::read"],
        BTreeSet::from(["store::locate".to_string()])
    );
    assert_eq!(
        siblings["store::locate"],
        BTreeSet::from(["store::read".to_string()])
    );
    assert!(siblings["store::scan"].is_empty());
    assert!(find_cycle(&siblings).is_some(), "{siblings:?}");
    assert_eq!(
        resolve_super("store", "super::format::X").as_deref(),
        Some("format::X")
    );
    assert_eq!(
        resolve_super("store::read", "super::super::files").as_deref(),
        Some("files")
    );
    assert_eq!(resolve_super("format", "super::super::x"), None);
    let acyclic = graph(&[("a", "b"), ("b", "c"), ("a", "c")]);
    assert!(find_cycle(&acyclic).is_none());
}
