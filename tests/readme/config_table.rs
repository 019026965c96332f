//! The configuration key table (docs/operating.md, "Every configuration key") against
//! `config/default.toml`: every key the file documents is in the table, and the table names no
//! key the file lacks, so the two cannot drift apart.
//!
//! The file documents a key either set (`bind = "127.0.0.1:8080"`, under its table's header) or,
//! for a key with no value by default, as a commented example (`#   otlp_endpoint = "…"`, under a
//! commented header such as `#   [[upstreams]]` or under the table's own). A commented key
//! belongs to the header above it, commented or not; a key that is set belongs to the last
//! header that is. An example table's name stands for every name: `[tools.send_email]` is
//! `tools.<name>`, `[upstreams.policies.write_file]` is `upstreams.policies.<tool>`, and a header
//! of `[telemetry.headers]` is `<header>`.
//!
//! The table: in docs/operating.md's section "Every configuration key", each `###` heading names
//! a table (`` ### `[server]` ``, `` ### `[[upstreams]]` ``, or "The top level"), and each row's
//! first cell is one key in backticks.

use std::collections::BTreeSet;

/// A key, as `table.key` (`bind` at the top level).
type Key = String;

fn qualified(table: &str, key: &str) -> Key {
    if table.is_empty() {
        key.to_owned()
    } else {
        format!("{table}.{key}")
    }
}

/// An example table's name made general: `tools.send_email` is `tools.<name>`.
fn general(table: &str) -> String {
    let mut parts: Vec<&str> = table.split('.').collect();
    if parts.len() >= 2 && parts[0] == "tools" {
        parts[1] = "<name>";
    }
    if parts.len() >= 3 && parts[0] == "upstreams" && parts[1] == "policies" {
        parts[2] = "<tool>";
    }
    parts.join(".")
}

/// `[name]` or `[[name]]`, alone on its line but for a comment (the table's `<name>` included).
fn header(text: &str) -> Option<String> {
    let inner = text
        .strip_prefix("[[")
        .and_then(|rest| rest.split_once("]]"))
        .or_else(|| text.strip_prefix('[').and_then(|rest| rest.split_once(']')))?;
    let (name, after) = inner;
    let after = after.trim();
    let is_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '<' | '>'));
    (is_name && (after.is_empty() || after.starts_with('#'))).then(|| name.to_owned())
}

/// `name = value`: the name.
fn key(text: &str) -> Option<&str> {
    let (name, _) = text.split_once(" = ")?;
    let is_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    is_name.then_some(name)
}

/// Every key `config/default.toml` documents, set or commented.
pub fn documented_keys(file: &str) -> BTreeSet<Key> {
    let mut keys = BTreeSet::new();
    let (mut set_table, mut any_table) = (String::new(), String::new());
    for line in file.lines() {
        let line = line.trim();
        let (commented, text) = match line.strip_prefix('#') {
            Some(rest) => (true, rest.trim()),
            None => (false, line),
        };
        if let Some(name) = header(text) {
            any_table = general(&name);
            if !commented {
                set_table = any_table.clone();
            }
        } else if let Some(name) = key(text) {
            let table = if commented { &any_table } else { &set_table };
            let name = if table == "telemetry.headers" {
                "<header>"
            } else {
                name
            };
            keys.insert(qualified(table, name));
        }
    }
    keys
}

/// Every key the table of `page` names, with the line it is named on.
pub fn tabled_keys(page: &str) -> Result<Vec<(Key, usize)>, String> {
    const SECTION: &str = "## Every configuration key";
    let mut keys = Vec::new();
    let mut inside = false;
    let mut table: Option<String> = None;
    for (index, line) in page.lines().enumerate() {
        let number = index + 1;
        if line.starts_with("## ") {
            inside = line.trim() == SECTION;
            continue;
        }
        if !inside {
            continue;
        }
        if let Some(title) = line.strip_prefix("### ") {
            table = if title.trim() == "The top level" {
                Some(String::new())
            } else {
                let name = title
                    .trim()
                    .strip_prefix('`')
                    .and_then(|t| t.strip_suffix('`'))
                    .and_then(header)
                    .ok_or(format!(
                        "docs/operating.md:{number}: a heading of the key table names a table in backticks, `[name]` or `[[name]]`, or is \"The top level\""
                    ))?;
                Some(name)
            };
            continue;
        }
        let Some(cell) = line.strip_prefix("| `") else {
            continue;
        };
        let name = cell.split('`').next().unwrap_or("");
        let table = table.as_deref().ok_or(format!(
            "docs/operating.md:{number}: a key before the first table's heading"
        ))?;
        keys.push((qualified(table, name), number));
    }
    if keys.is_empty() {
        return Err(format!(
            "docs/operating.md has no section {SECTION:?} with keys"
        ));
    }
    Ok(keys)
}

#[test]
fn the_key_table_names_every_key_of_the_default_config_and_no_other() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(root.join("config/default.toml")).unwrap();
    let page = std::fs::read_to_string(root.join("docs/operating.md")).unwrap();
    let documented = documented_keys(&file);
    let tabled = tabled_keys(&page).unwrap_or_else(|e| panic!("{e}"));
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (key, line) in &tabled {
        if !documented.contains(key) {
            problems.push(format!(
                "docs/operating.md:{line}: `{key}` is not in config/default.toml"
            ));
        }
        if !seen.insert(key.clone()) {
            problems.push(format!("docs/operating.md:{line}: `{key}` twice"));
        }
    }
    for key in &documented {
        if !seen.contains(key) {
            problems.push(format!(
                "config/default.toml documents `{key}`, which the key table of docs/operating.md lacks"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn keys_are_read_as_the_file_writes_them() {
    let file = "bind = \"x\"\n# The store.\n[store]\npool_size = 16\n#   [tools.send_email]\n#   timeout_ms = 5000   # one attempt\n[telemetry]\n#   otlp_endpoint = \"u\"\n#   [telemetry.headers]\n#   x-team = \"k\"\nsample_ratio = 1.0\n# [[auth.keys]] entry sets its own: quotas = { a = 1 }\n#   [upstreams.policies.write_file]\n#   effect = \"write\"\n";
    let keys: Vec<String> = documented_keys(file).into_iter().collect();
    assert_eq!(
        keys,
        [
            "bind",
            "store.pool_size",
            "telemetry.headers.<header>",
            "telemetry.otlp_endpoint",
            "telemetry.sample_ratio",
            "tools.<name>.timeout_ms",
            "upstreams.policies.<tool>.effect",
        ]
    );
    let page = "## Every configuration key\n### The top level\n| key | default |\n| `bind` | x |\n### `[[upstreams]]`\n| `name` | x |\n## Next\n| `other` | x |\n";
    let tabled: Vec<String> = tabled_keys(page)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(tabled, ["bind", "upstreams.name"]);
}
