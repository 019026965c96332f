//! The house kept in order, checked on every test run: the top-level modules of `src/` import
//! one another in one direction only (no circle, so each stands on a floor below the ones that
//! use it), and no file grows past the length at which it is usually two jobs.
//!
//! The imports are read from the source text, not from the compiler: every `crate::<module>`
//! outside a comment (in a `use` line or a path in code, a `crate::{a, b}` group included), and
//! every `super::` chain that climbs out of its folder to the crate's root. A `#[cfg(test)]`
//! module counts like the rest: a test that reaches up is a circle too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a file of `src/` may be, in lines.
const SRC_MAX_LINES: usize = 600;
/// The longest a test file may be, in lines.
const TEST_MAX_LINES: usize = 800;
/// The longest the binary's `main.rs` may be: it parses, loads, builds, serves and stops.
const MAIN_MAX_LINES: usize = 250;

/// Which top-level module imports which, each arrow with the files that make it.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

#[test]
fn top_level_modules_import_one_another_in_one_direction() {
    let graph = module_graph(&root().join("src"));
    assert!(
        graph.contains_key("dispatch") && graph.contains_key("app"),
        "the source was not read: {:?}",
        graph.keys().collect::<Vec<_>>()
    );
    let circles = circles(&graph);
    assert!(
        circles.is_empty(),
        "the top-level modules of src/ import one another in a circle; move what the lower one \
         needs down (src/base/ is the ground floor):\n{}",
        circles.join("\n")
    );
}

#[test]
fn no_file_is_too_long() {
    let root = root();
    let mut offenders = Vec::new();
    for file in rust_files(&root.join("src")) {
        let most = if file == root.join("src/main.rs") {
            MAIN_MAX_LINES
        } else {
            SRC_MAX_LINES
        };
        offenders.extend(too_long(&root, &file, most));
    }
    for file in rust_files(&root.join("tests")) {
        offenders.extend(too_long(&root, &file, TEST_MAX_LINES));
    }
    assert!(
        offenders.is_empty(),
        "files past their length (split each by job):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn a_planted_circle_is_named() {
    let mut graph = Graph::new();
    let arrow = |graph: &mut Graph, from: &str, to: &str, file: &str| {
        graph
            .entry(from.to_owned())
            .or_default()
            .entry(to.to_owned())
            .or_default()
            .insert(file.to_owned());
    };
    arrow(&mut graph, "app", "dispatch", "app.rs");
    arrow(&mut graph, "dispatch", "store", "dispatch/record.rs");
    arrow(&mut graph, "store", "telemetry", "store/backend.rs");
    arrow(&mut graph, "telemetry", "base", "telemetry/mod.rs");
    assert_eq!(
        circles(&graph),
        Vec::<String>::new(),
        "a ladder is no circle"
    );

    arrow(&mut graph, "telemetry", "upstream", "telemetry/mod.rs");
    arrow(&mut graph, "upstream", "dispatch", "upstream/mod.rs");
    assert_eq!(
        circles(&graph),
        [
            "dispatch -> store (dispatch/record.rs) -> telemetry (store/backend.rs) -> upstream \
          (telemetry/mod.rs) -> dispatch (upstream/mod.rs)"
        ]
    );

    // Two circles apart are both named.
    arrow(&mut graph, "config", "feed", "config/mod.rs");
    arrow(&mut graph, "feed", "config", "feed/webhooks/config.rs");
    assert_eq!(circles(&graph).len(), 2, "{:?}", circles(&graph));
}

#[test]
fn imports_are_read_from_code_not_comments() {
    let text = "//! See [`crate::app`].\n\
                use crate::{store::Store, dispatch};\n\
                use super::super::feed::Waiters; // crate::inbox in a comment\n\
                fn f() { crate::metrics::count(); let url = \"http://x\"; }\n";
    let tops: Vec<String> = [
        "app", "dispatch", "feed", "http", "inbox", "metrics", "store",
    ]
    .map(str::to_owned)
    .to_vec();
    let found = references(text, &tops);
    let found: Vec<&str> = found.iter().map(String::as_str).collect();
    assert_eq!(found, ["dispatch", "feed", "metrics", "store"]);
    // One folder deep, `super::` is the folder's own module, not the crate's root.
    let found = references("use super::Waiters;\n", &["feed".to_owned()]);
    assert!(found.is_empty(), "{found:?}");
}

/// The workspace's root, where `src/` and `tests/` are.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `file` as a line of the report, when it has more than `most` lines.
fn too_long(root: &Path, file: &Path, most: usize) -> Option<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let lines = text.lines().count();
    let shown = file.strip_prefix(root).unwrap_or(file).display();
    (lines > most).then(|| format!("  {shown}: {lines} lines (at most {most})"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries =
            std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The top-level modules of `src` and their imports of one another. `lib.rs` (which declares
/// them all) and `main.rs` (the binary, over the library's public API) stand outside.
fn module_graph(src: &Path) -> Graph {
    let files = rust_files(src);
    let tops: Vec<String> = files
        .iter()
        .filter_map(|file| top_module(src, file))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut graph = Graph::new();
    for file in &files {
        let Some(top) = top_module(src, file) else {
            continue;
        };
        let relative = file.strip_prefix(src).expect("under src").to_owned();
        // How many `super::` reach the crate's root: `a.rs` and `a/mod.rs` are one module
        // deep, `a/b.rs` two.
        let depth = relative.components().count()
            - usize::from(relative.file_name().is_some_and(|name| name == "mod.rs"));
        let text = std::fs::read_to_string(file).expect("a source file");
        let arrows = graph.entry(top.clone()).or_default();
        for target in references_from(&text, &tops, depth) {
            if target != top {
                arrows
                    .entry(target)
                    .or_default()
                    .insert(relative.display().to_string());
            }
        }
    }
    graph
}

/// The top-level module `file` belongs to; `None` for the crate's roots.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let mut components = relative.components();
    let first = components.next()?.as_os_str().to_str()?;
    if components.next().is_some() {
        return Some(first.to_owned());
    }
    let stem = first.strip_suffix(".rs")?;
    (stem != "lib" && stem != "main").then(|| stem.to_owned())
}

/// The top-level modules (of `tops`) that `text`, a file one folder deep, names.
fn references(text: &str, tops: &[String]) -> BTreeSet<String> {
    references_from(text, tops, 2)
}

/// The top-level modules (of `tops`) that `text` names: `crate::<top>`, `crate::{<top>, ..}`,
/// and `super::` chains `depth` or more long, outside comments.
fn references_from(text: &str, tops: &[String], depth: usize) -> BTreeSet<String> {
    let supers = "super::".repeat(depth);
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = strip_comment(line);
        let mut prefixes: Vec<(usize, usize)> = code
            .match_indices("crate::")
            .filter(|(at, _)| !preceded_by_ident(code, *at))
            .map(|(at, p)| (at, p.len()))
            .collect();
        if depth > 0 {
            prefixes.extend(
                code.match_indices(&supers)
                    .filter(|(at, _)| !preceded_by_ident(code, *at) && !code[..*at].ends_with("::"))
                    .map(|(at, p)| (at, p.len())),
            );
        }
        for (at, len) in prefixes {
            let rest = &code[at + len..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                // `crate::{a::X, b}`: the names at the group's top level; a group spread over
                // several lines is read by its first.
                Some(group) => group
                    .split([',', '}'])
                    .map(|item| ident_at(item.trim_start()))
                    .collect(),
                None => vec![ident_at(rest)],
            };
            found.extend(
                names
                    .into_iter()
                    .filter(|name| tops.iter().any(|top| top == name))
                    .map(str::to_owned),
            );
        }
    }
    found
}

/// `line` up to its `//` comment, if any; a `//` inside a string literal (a URL) is not one.
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    let mut escaped = false;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// Whether the text before `at` ends in a name (`mycrate::` is not `crate::`).
fn preceded_by_ident(code: &str, at: usize) -> bool {
    code[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// The identifier `text` starts with.
fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// Each circle of `graph`, one line each: one per strongly connected set of modules, shown as
/// a path that leaves its first module and comes back, each arrow with a file that makes it.
fn circles(graph: &Graph) -> Vec<String> {
    let nodes: BTreeSet<&str> = graph
        .iter()
        .flat_map(|(from, to)| std::iter::once(from.as_str()).chain(to.keys().map(String::as_str)))
        .collect();
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for &start in &nodes {
        if seen.contains(start) {
            continue;
        }
        // The modules that reach `start` and that `start` reaches: its circle, if any.
        let ahead = reachable(graph, start, false);
        let behind = reachable(graph, start, true);
        let set: BTreeSet<&str> = ahead.intersection(&behind).copied().collect();
        seen.extend(set.iter().copied());
        if set.len() < 2 {
            continue;
        }
        found.push(describe(graph, start, &set));
    }
    found
}

/// The modules reachable from `start` (with it): forwards, or backwards along the arrows.
fn reachable<'g>(graph: &'g Graph, start: &'g str, backwards: bool) -> BTreeSet<&'g str> {
    let mut reached = BTreeSet::from([start]);
    let mut queue = vec![start];
    while let Some(node) = queue.pop() {
        let next: Vec<&str> = if backwards {
            graph
                .iter()
                .filter(|(_, to)| to.contains_key(node))
                .map(|(from, _)| from.as_str())
                .collect()
        } else {
            graph
                .get(node)
                .map(|to| to.keys().map(String::as_str).collect())
                .unwrap_or_default()
        };
        for node in next {
            if reached.insert(node) {
                queue.push(node);
            }
        }
    }
    reached
}

/// The shortest way from `start` back to itself within `set`, with a file for each arrow.
fn describe(graph: &Graph, start: &str, set: &BTreeSet<&str>) -> String {
    // Breadth first from `start`'s successors, so the path shown is the shortest.
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    'search: while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(|to| to.keys()) {
            let next = next.as_str();
            if !set.contains(next) {
                continue;
            }
            if next == start {
                came_from.insert("", node);
                break 'search;
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    let mut between = Vec::new();
    let mut node = came_from[""];
    while node != start {
        between.push(node);
        node = came_from[node];
    }
    between.reverse();
    let path: Vec<&str> = std::iter::once(start)
        .chain(between)
        .chain([start])
        .collect();
    let mut line = start.to_owned();
    for pair in path.windows(2) {
        let file = graph[pair[0]][pair[1]]
            .first()
            .expect("an arrow has a file");
        line.push_str(&format!(" -> {} ({file})", pair[1]));
    }
    line
}
