//! Tidy: the workspace keeps the shape ARCHITECTURE.md describes, in what
//! cargo cannot check itself. Cargo refuses an import of a crate that is
//! not a dependency, so the layers are the dependency graph: this test
//! holds each crate's dependencies on the workspace's own crates to the
//! layer table below (an upward or sideways dependency fails here, naming
//! the manifest), reading them from `cargo metadata`. Dev-dependencies may
//! reach anywhere (a lower crate's tests may write through a higher one as
//! an oracle). Then, over every source file of every crate and example:
//!
//! - every file starts with a module doc, and every crate's `lib.rs` says
//!   what it may import;
//! - no file is over 900 lines, its `#[cfg(test)] mod tests` excluded;
//! - no function outside tests is over 100 lines (an orchestrator reads
//!   as steps).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 900;

/// The longest a function outside tests may be, in lines.
const MAX_FN_LINES: usize = 100;

/// The layer table: each crate of the workspace and the workspace crates it
/// may depend on. `files`, `format` and `metrics` are the floor; `sql`
/// runs its queries in a process of its own; `serving` is HTTP; the root
/// package (the plugin and the binary) sits on top.
const LAYERS: &[(&str, &[&str])] = &[
    ("bjh-files", &[]),
    ("bjh-format", &[]),
    ("bjh-metrics", &[]),
    ("bjh-recording", &["bjh-format", "bjh-files", "bjh-metrics"]),
    ("bjh-store", &["bjh-format", "bjh-files", "bjh-metrics"]),
    ("bjh-analysis", &["bjh-format", "bjh-store"]),
    ("bjh-pictures", &["bjh-format", "bjh-store"]),
    ("bjh-traces", &["bjh-format", "bjh-metrics", "bjh-store"]),
    (
        "bjh-columnar",
        &[
            "bjh-format",
            "bjh-files",
            "bjh-metrics",
            "bjh-store",
            "bjh-analysis",
        ],
    ),
    (
        "bjh-sql",
        &[
            "bjh-format",
            "bjh-files",
            "bjh-metrics",
            "bjh-store",
            "bjh-columnar",
        ],
    ),
    (
        "bjh-serving",
        &[
            "bjh-format",
            "bjh-files",
            "bjh-metrics",
            "bjh-store",
            "bjh-recording",
            "bjh-analysis",
            "bjh-columnar",
            "bjh-sql",
            "bjh-pictures",
        ],
    ),
];

/// The root package: the plugin and the binary, over every layer.
const ROOT: &str = "ballista-job-history";

/// Each workspace package and its normal dependencies on workspace crates.
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: BTreeSet<String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|d| members.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// Dependencies the layer table does not allow, as messages.
fn layer_violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let table: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut bad = Vec::new();
    for (package, deps) in graph {
        if package == ROOT {
            continue;
        }
        let Some(allowed) = table.get(package.as_str()) else {
            bad.push(format!(
                "{package}: a crate the layer table does not know; add it"
            ));
            continue;
        };
        for dep in deps.iter().filter(|d| !allowed.contains(&d.as_str())) {
            bad.push(format!(
                "{package} depends on {dep}: not below it in the layer table"
            ));
        }
    }
    bad
}

/// Every Rust source file of the workspace's crates, the root package and
/// its examples, by its path from the workspace root.
fn sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.join("src"), root.join("examples")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        dirs.push(entry.unwrap().path().join("src"));
    }
    let mut files = Vec::new();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        rust_files(dir, &mut files);
    }
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
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

#[test]
fn crates_depend_on_the_layers_below_them_only() {
    let graph = workspace_graph();
    for (package, _) in LAYERS {
        assert!(
            graph.contains_key(*package),
            "{package}: in the table, not in the workspace"
        );
    }
    let bad = layer_violations(&graph);
    assert!(bad.is_empty(), "upward dependencies:\n{}", bad.join("\n"));
}

/// The check catches what it is for: an upward and a sideways dependency,
/// and a crate the table does not know.
#[test]
fn the_layer_check_catches_an_upward_dependency() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert!(layer_violations(&graph(&[("bjh-serving", "bjh-store")])).is_empty());
    assert_eq!(
        layer_violations(&graph(&[("bjh-store", "bjh-serving")])).len(),
        1
    );
    assert_eq!(
        layer_violations(&graph(&[("bjh-recording", "bjh-store")])).len(),
        1
    );
    assert_eq!(
        layer_violations(&graph(&[("bjh-new", "bjh-format")])).len(),
        1
    );
}

#[test]
fn every_file_has_a_module_doc_and_every_crate_its_rule() {
    let mut bad = Vec::new();
    for (path, text) in sources() {
        if path == "src/lib.rs" {
            assert!(text.starts_with("#![doc = include_str!(\"../README.md\")]"));
            continue;
        }
        if !text.starts_with("//!") {
            bad.push(format!("{path}: starts without a `//!` module doc"));
        }
        if path.starts_with("crates/") && path.ends_with("/src/lib.rs") {
            let doc: String = text.lines().take_while(|l| l.starts_with("//!")).collect();
            if !doc.contains("import") {
                bad.push(format!(
                    "{path}: its crate doc does not say what it may import"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn no_file_is_over_the_size_limit() {
    let bad: Vec<String> = sources()
        .iter()
        .map(|(path, text)| (path, without_tests(text).lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(path, lines)| {
            format!("{path}: {lines} lines outside tests, over {MAX_LINES}; split it")
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
    let mut bad = Vec::new();
    for (path, text) in sources() {
        for (name, line, lines) in long_functions(&text, MAX_FN_LINES) {
            bad.push(format!(
                "{path}: fn {name} (line {line}) is {lines} lines, over {MAX_FN_LINES}; \
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

#[test]
fn the_foreign_calls_stay_in_their_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = sources();
    for dir in ["tests", "benches"] {
        let mut more = Vec::new();
        rust_files(&root.join(dir), &mut more);
        for path in more {
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            files.insert(rel, std::fs::read_to_string(&path).unwrap());
        }
    }
    let allowed = "crates/store/src/heap.rs";
    let mut found = BTreeMap::new();
    for (path, text) in &files {
        let code: String = code_only(text)
            .lines()
            .map(strip_strings)
            .collect::<Vec<_>>()
            .join("\n");
        let n = code.matches("unsafe").count();
        if n > 0 {
            found.insert(path.clone(), n);
        }
    }
    // Two `#[allow(unsafe_code)]`, two `unsafe { .. }` blocks.
    assert_eq!(
        found,
        BTreeMap::from([(allowed.to_string(), 4)]),
        "`unsafe` outside {allowed}, or more of it there"
    );
}
