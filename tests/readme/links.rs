//! Every link of README.md and of the guide's pages leads somewhere: a relative link's file
//! exists, and its `#anchor`, on a markdown page, is one of that page's headings (as GitHub makes
//! anchors of them). A page moved or a heading renamed without its links fails here.

use std::path::{Path, PathBuf};

/// The anchor GitHub gives a heading: lower case, each space a `-`, and nothing but letters,
/// digits, `-` and `_` kept.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown page's headings (those outside its code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// The targets of a page's markdown links (`[text](target)`, `![alt](target)`), with their lines,
/// outside its code blocks.
fn links(text: &str) -> Vec<(String, usize)> {
    let mut fenced = false;
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            if let Some(end) = rest.find(')') {
                found.push((rest[..end].to_owned(), index + 1));
            }
        }
    }
    found
}

fn check(root: &Path, page: &Path, problems: &mut Vec<String>) {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page.strip_prefix(root).unwrap().display().to_string();
    for (target, line) in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target.as_str(), None),
        };
        let file: PathBuf = if path.is_empty() {
            page.to_path_buf()
        } else {
            page.parent().unwrap().join(path)
        };
        if !file.exists() {
            problems.push(format!("{name}:{line}: {target}: no such file"));
            continue;
        }
        if let Some(fragment) = fragment
            && file.extension().is_some_and(|e| e == "md")
        {
            let headings = anchors(&std::fs::read_to_string(&file).unwrap());
            if !headings.iter().any(|a| a == fragment) {
                problems.push(format!("{name}:{line}: {target}: no such heading"));
            }
        }
    }
}

#[test]
fn every_link_of_the_readme_and_the_guide_leads_somewhere() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut problems = Vec::new();
    for page in &pages {
        check(&root, page, &mut problems);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        anchor(" The approval inbox: `/inbox`"),
        "the-approval-inbox-inbox"
    );
    assert_eq!(anchor("Traces (OpenTelemetry)"), "traces-opentelemetry");
    assert_eq!(anchor("`[[auth.keys]]`"), "authkeys");
}
