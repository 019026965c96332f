//! What an operation is called and what its media are: the tool name made from an
//! `operationId`, and the media types toolgate reads as JSON.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::upstream::config::SEPARATOR;

/// The tool name of operation `id`: its characters outside `A-Z a-z 0-9 _ -` written `_`, and
/// a name too long once prefixed cut, with a short hash of the id to keep it unique.
pub(super) fn tool_name(upstream: &str, id: &str) -> String {
    let mut name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let room = 64usize.saturating_sub(upstream.len() + SEPARATOR.len());
    if name.len() > room {
        let hash = hex::encode(&Sha256::digest(id.as_bytes())[..4]);
        name.truncate(room.saturating_sub(hash.len() + 1));
        name.push('_');
        name.push_str(&hash);
    }
    name
}

/// A media type's essence: `application/json; charset=utf-8` is `application/json`.
pub(super) fn essence(media: &str) -> String {
    media
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether `media` is JSON (`application/json`, `application/problem+json`, `*/*`...).
pub(super) fn is_json(media: &str) -> bool {
    let media = essence(media);
    media == "application/json" || media.ends_with("+json") || media == "*/*"
}

/// The examples of a parameter or a media type entry: `example`, and `examples`' values.
pub(super) fn examples_of(entry: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(example) = entry.get("example") {
        out.push(example.clone());
    }
    if let Some(Value::Object(examples)) = entry.get("examples") {
        out.extend(
            examples
                .values()
                .filter_map(|example| example.get("value"))
                .take(5)
                .cloned(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_made_valid_and_short_enough() {
        assert_eq!(tool_name("gh", "issues/create"), "issues_create");
        let long = "x".repeat(80);
        let name = tool_name("github", &long);
        assert_eq!(format!("github__{name}").len(), 64);
        assert_ne!(name, tool_name("github", &"x".repeat(81)));
    }
}
