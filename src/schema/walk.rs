//! Where a JSON Schema holds other schemas: the one list of subschema keywords every pass walks,
//! so that a property *named* `format` or `$ref` is never mistaken for the keyword.

use serde_json::{Map, Value};

/// Keywords whose value is one schema.
pub(crate) const SINGLE: [&str; 12] = [
    "additionalProperties",
    "items",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "additionalItems",
];

/// Keywords whose value is an array of schemas (`items` too, in draft 7's tuple form).
pub(crate) const LISTS: [&str; 5] = ["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value is an object of schemas, keyed by name.
pub(crate) const MAPS: [&str; 6] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Calls `f` on each direct subschema of `schema` (an object's; a boolean schema has none),
/// with the keyword it sits under.
pub(crate) fn children_mut(schema: &mut Map<String, Value>, f: &mut impl FnMut(&str, &mut Value)) {
    for (key, value) in schema.iter_mut() {
        let key = key.as_str();
        match value {
            Value::Object(_) | Value::Bool(_) if SINGLE.contains(&key) => f(key, value),
            Value::Array(items) if LISTS.contains(&key) => {
                items.iter_mut().for_each(|item| f(key, item));
            }
            Value::Object(entries) if MAPS.contains(&key) => {
                // `dependencies` (draft 7) also holds arrays of names; those are not schemas.
                entries
                    .values_mut()
                    .filter(|entry| entry.is_object() || entry.is_boolean())
                    .for_each(|entry| f(key, entry));
            }
            _ => {}
        }
    }
}

/// Calls `f` on each direct subschema of `schema`, read-only.
pub(crate) fn children<'a>(schema: &'a Map<String, Value>, f: &mut impl FnMut(&str, &'a Value)) {
    for (key, value) in schema {
        let key = key.as_str();
        match value {
            Value::Object(_) | Value::Bool(_) if SINGLE.contains(&key) => f(key, value),
            Value::Array(items) if LISTS.contains(&key) => {
                items.iter().for_each(|item| f(key, item));
            }
            Value::Object(entries) if MAPS.contains(&key) => entries
                .values()
                .filter(|entry| entry.is_object() || entry.is_boolean())
                .for_each(|entry| f(key, entry)),
            _ => {}
        }
    }
}

/// Calls `f` on `schema` and then on every schema inside it, depth first, parents before
/// children. `f` sees only object schemas.
pub(crate) fn each_mut(schema: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    if let Value::Object(obj) = schema {
        f(obj);
        children_mut(obj, &mut |_, child| each_mut(child, f));
    }
}

/// Whether `schema` describes objects: its `type` is or includes `"object"`.
pub(crate) fn is_object_type(schema: &Map<String, Value>) -> bool {
    match schema.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
        _ => false,
    }
}

/// Whether `schema`'s `type` is or includes `kind`.
pub(crate) fn has_type(schema: &Map<String, Value>, kind: &str) -> bool {
    match schema.get("type") {
        Some(Value::String(one)) => one == kind,
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == kind),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_property_named_like_a_keyword_is_a_name_not_a_keyword() {
        let mut schema = json!({
            "type": "object",
            "properties": {"format": {"type": "string"}, "items": {"type": "integer"}},
            "anyOf": [{"required": ["format"]}],
            "dependencies": {"format": ["items"]},
        });
        let mut seen = Vec::new();
        each_mut(&mut schema, &mut |obj| {
            seen.push(Value::Object(obj.clone()));
        });
        // The root, the two property schemas, the anyOf entry; not the dependency's name list.
        assert_eq!(seen.len(), 4);
        assert!(seen.contains(&json!({"type": "string"})));
        assert!(seen.contains(&json!({"required": ["format"]})));
    }
}
