//! A local `$ref` of a JSON Schema (`#/$defs/Name`, `#`), found inside its own document: what
//! the contract reads a tool's schema with at registration, and what the provider copies are
//! inlined by.

use serde_json::Value;

/// The schema a local `$ref` names inside `root`, if it resolves to one.
pub(crate) fn resolve_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(&pointer_of(reference)?)
        .filter(|target| target.is_object() || target.is_boolean())
}

/// The JSON Pointer a local `$ref` names (`#/$defs/A%20B` is `/$defs/A B`), or `None` for a
/// reference that is not local.
pub(crate) fn pointer_of(reference: &str) -> Option<String> {
    let fragment = reference.strip_prefix('#')?;
    percent_decode(fragment)
}

/// Decodes `%XX` escapes; `None` when they do not make UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_escapes_in_a_reference_are_decoded() {
        assert_eq!(pointer_of("#/$defs/A%20B").as_deref(), Some("/$defs/A B"));
        assert_eq!(pointer_of("#").as_deref(), Some(""));
        assert_eq!(pointer_of("other.json#/a"), None);
        assert_eq!(pointer_of("#/a%2"), None);
    }
}
