//! The passes every provider copy goes through, whatever the provider: the clean form of a
//! tool's schema. Each provider's module starts from it and changes only what that provider
//! needs on top.
//!
//! The clean form has no `$schema`, `$id` or root `title`; none of schemars' number formats
//! (`uint64`, `int32`, `double`...: providers reject or misread them), while the bounds that
//! carry their meaning stay; `oneOf` written as `anyOf` (no provider enforces exclusivity, some
//! reject `oneOf`); a `type` on every schema with `properties`, `properties` on every object
//! and `items` on every array; and `$ref`s inlined, but for recursive types, which stay in the
//! root `$defs` ([`super::refs`]). An input schema's root is moreover one object: providers
//! take a tool's arguments as an object and refuse a root `anyOf`, so a root union of objects
//! is flattened into one object with all their properties.
//!
//! These are copies for a model to read. Each call is still checked against the tool's own
//! schema, so a constraint a copy loses is never lost from the check.

use serde_json::{Map, Value, json};

use super::{refs, walk};

/// The `format`s schemars gives Rust's number types: a fact about Rust, not about the value.
const NUMBER_FORMATS: [&str; 14] = [
    "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32",
    "uint64", "uint128", "float", "double",
];

/// Keywords about the schema document itself, not about the instance.
const DOCUMENT_KEYWORDS: [&str; 6] = [
    "$schema",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$dynamicRef",
    "$vocabulary",
];

/// The clean form of any schema (an output schema, say): see the module documentation.
pub fn clean_schema(schema: &Value) -> Value {
    let mut clean = refs::inline(schema);
    walk::each_mut(&mut clean, &mut clean_node);
    if let Value::Object(root) = &mut clean {
        root.remove("title");
    }
    clean
}

/// The clean form of a tool's input schema: [`clean_schema`], with a root that is one object
/// (`"type": "object"` with `properties`), as every provider wants a tool's arguments.
///
/// A root union (`anyOf`, `oneOf`, `allOf`) of objects becomes one object holding their
/// properties: under `anyOf`, required are those every variant requires; under `allOf`, those
/// any part requires. A root that is not an object at all (a tool taking a bare string) becomes
/// an empty object: no provider can send it anything else.
pub fn clean_input_schema(schema: &Value) -> Value {
    let Value::Object(root) = clean_schema(schema) else {
        // `true`: any input; the copy offers an open object.
        return json!({"type": "object", "properties": {}});
    };
    Value::Object(object_root(root))
}

/// One node's share of the clean form; its subschemas get theirs from the walk.
fn clean_node(node: &mut Map<String, Value>) {
    for keyword in DOCUMENT_KEYWORDS {
        node.remove(keyword);
    }
    if node
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|format| NUMBER_FORMATS.contains(&format))
    {
        node.remove("format");
    }
    if let Some(one_of) = node.remove("oneOf") {
        if node.contains_key("anyOf") {
            let mut all_of = match node.remove("allOf") {
                Some(Value::Array(all_of)) => all_of,
                _ => Vec::new(),
            };
            all_of.push(json!({ "anyOf": one_of }));
            node.insert("allOf".into(), Value::Array(all_of));
        } else {
            node.insert("anyOf".into(), one_of);
        }
    }
    if node.contains_key("properties") && !node.contains_key("type") {
        node.insert("type".into(), "object".into());
    }
    if walk::is_object_type(node) && !node.contains_key("properties") {
        node.insert("properties".into(), json!({}));
    }
    if walk::has_type(node, "array") && !node.contains_key("items") {
        node.insert("items".into(), json!({}));
    }
    // `true` is the schema `{}`; some providers' parsers take only objects.
    walk::children_mut(node, &mut |key, child| {
        if *child == Value::Bool(true) && key != "additionalProperties" {
            *child = json!({});
        }
    });
}

/// `root` as one object schema.
fn object_root(mut root: Map<String, Value>) -> Map<String, Value> {
    let defs = root.get("$defs").cloned().unwrap_or_default();
    let any_of = root.remove("anyOf");
    let all_of = root.remove("allOf");
    if any_of.is_some() || all_of.is_some() {
        let mut parts = vec![root.clone()];
        if let Some(Value::Array(entries)) = all_of {
            parts.extend(entries.iter().filter_map(|entry| object_part(entry, &defs)));
        }
        if let Some(Value::Array(variants)) = any_of {
            let variants: Vec<_> = variants
                .iter()
                .filter_map(|variant| object_part(variant, &defs))
                .collect();
            if !variants.is_empty() {
                parts.push(merge_variants(variants));
            }
        }
        let merged = merge_parts(parts);
        for key in ["properties", "required", "additionalProperties"] {
            match merged.get(key) {
                Some(value) => root.insert(key.into(), value.clone()),
                None => root.remove(key),
            };
        }
    }
    match root.get("type") {
        Some(kind) if *kind == "object" => {}
        Some(_) if walk::is_object_type(&root) => {
            root.insert("type".into(), "object".into());
        }
        Some(_) => {
            // Not an object: nothing of it applies to the object a provider sends.
            let mut object = Map::new();
            for key in ["description", "$defs"] {
                if let Some(value) = root.remove(key) {
                    object.insert(key.into(), value);
                }
            }
            root = object;
            root.insert("type".into(), "object".into());
        }
        None => {
            root.insert("type".into(), "object".into());
        }
    }
    root.entry("properties").or_insert_with(|| json!({}));
    root
}

/// A union member as an object schema (following a `$ref` into `defs`, flattening a nested
/// union), or `None` when it does not describe objects.
fn object_part(schema: &Value, defs: &Value) -> Option<Map<String, Value>> {
    let mut obj = schema.as_object()?.clone();
    if let Some(target) = obj
        .remove("$ref")
        .as_ref()
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name))
        .and_then(Value::as_object)
    {
        for (key, value) in target {
            obj.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    if obj.contains_key("anyOf") || obj.contains_key("allOf") {
        obj = object_root(obj);
    }
    (walk::is_object_type(&obj) && obj.contains_key("properties")).then_some(obj)
}

/// Alternatives as one object: every property any of them has (a property they give
/// different schemas becomes their `anyOf`), required where all require it, closed where all
/// are closed.
fn merge_variants(variants: Vec<Map<String, Value>>) -> Map<String, Value> {
    let properties = merged_properties(&variants, |existing, schema| {
        let mut options = match existing.get("anyOf") {
            Some(Value::Array(options)) if existing.as_object().is_some_and(|o| o.len() == 1) => {
                options.clone()
            }
            _ => vec![existing.clone()],
        };
        if !options.contains(schema) {
            options.push(schema.clone());
        }
        *existing = json!({ "anyOf": options });
    });
    let required = required(&variants[0])
        .into_iter()
        .filter(|name| variants.iter().all(|v| required(v).contains(name)))
        .collect();
    let closed = variants.iter().all(is_closed);
    let mut merged = Map::new();
    merged.insert("type".into(), "object".into());
    with_properties(merged, properties, required, closed)
}

/// Parts that all apply as one object: every property (one they give different schemas
/// becomes their `allOf`), required where any requires it, closed where any is closed.
fn merge_parts(parts: Vec<Map<String, Value>>) -> Map<String, Value> {
    let properties = merged_properties(&parts, |existing, schema| {
        *existing = json!({ "allOf": [existing.clone(), schema] });
    });
    let mut required_names: Vec<String> = Vec::new();
    for name in parts.iter().flat_map(required) {
        if !required_names.contains(&name) {
            required_names.push(name);
        }
    }
    let closed = parts.iter().any(is_closed);
    with_properties(Map::new(), properties, required_names, closed)
}

/// Every property of `objects`, under the first schema given for it; where a later one gives
/// another schema, `join` makes the two one.
fn merged_properties(
    objects: &[Map<String, Value>],
    join: impl Fn(&mut Value, &Value),
) -> Map<String, Value> {
    let mut properties: Map<String, Value> = Map::new();
    for object in objects {
        for (name, schema) in props(object) {
            match properties.get_mut(name) {
                None => {
                    properties.insert(name.clone(), schema.clone());
                }
                Some(existing) if existing == schema => {}
                Some(existing) => join(existing, schema),
            }
        }
    }
    properties
}

/// `object` with `properties`, `required` (when any names are) and, when `closed`,
/// `additionalProperties: false`.
fn with_properties(
    mut object: Map<String, Value>,
    properties: Map<String, Value>,
    required: Vec<String>,
    closed: bool,
) -> Map<String, Value> {
    object.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        object.insert(
            "required".into(),
            required.into_iter().map(Value::from).collect(),
        );
    }
    if closed {
        object.insert("additionalProperties".into(), false.into());
    }
    object
}

fn is_closed(schema: &Map<String, Value>) -> bool {
    schema.get("additionalProperties") == Some(&Value::Bool(false))
}

fn props(schema: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

fn required(schema: &Map<String, Value>) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_keywords_and_the_root_title_go_nested_titles_stay() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "urn:x",
            "title": "Input",
            "type": "object",
            "properties": {"a": {"title": "A", "type": "string", "$anchor": "a"}},
        });
        assert_eq!(
            clean_schema(&schema),
            json!({
                "type": "object",
                "properties": {"a": {"title": "A", "type": "string"}},
            })
        );
    }

    #[test]
    fn number_formats_go_their_bounds_stay_other_formats_stay() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint64", "minimum": 0},
                "f": {"type": ["number", "null"], "format": "double"},
                "when": {"type": "string", "format": "date-time"},
                "format": {"type": "string"},
            },
        });
        assert_eq!(
            clean_schema(&schema)["properties"],
            json!({
                "n": {"type": "integer", "minimum": 0},
                "f": {"type": ["number", "null"]},
                "when": {"type": "string", "format": "date-time"},
                "format": {"type": "string"},
            })
        );
    }

    #[test]
    fn one_of_becomes_any_of_and_joins_an_existing_any_of_through_all_of() {
        let schema = json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
        assert_eq!(
            clean_schema(&schema),
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})
        );
        let both = json!({"anyOf": [{"minimum": 1}], "oneOf": [{"maximum": 9}]});
        assert_eq!(
            clean_schema(&both),
            json!({"anyOf": [{"minimum": 1}], "allOf": [{"anyOf": [{"maximum": 9}]}]})
        );
    }

    #[test]
    fn objects_get_properties_and_arrays_get_items() {
        let schema = json!({
            "type": "object",
            "properties": {
                "map": {"type": "object", "additionalProperties": {"type": "integer"}},
                "list": {"type": "array"},
                "bare": {"properties": {"x": true}},
            },
        });
        assert_eq!(
            clean_schema(&schema)["properties"],
            json!({
                "map": {
                    "type": "object",
                    "properties": {},
                    "additionalProperties": {"type": "integer"},
                },
                "list": {"type": "array", "items": {}},
                "bare": {"type": "object", "properties": {"x": {}}},
            })
        );
    }

    #[test]
    fn an_input_root_is_one_object() {
        assert_eq!(
            clean_input_schema(&json!(true)),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            clean_input_schema(&json!({})),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            clean_input_schema(&json!({"type": "string", "description": "a bare string"})),
            json!({"type": "object", "properties": {}, "description": "a bare string"})
        );
        assert_eq!(
            clean_input_schema(&json!({"type": ["object", "null"], "properties": {}}))["type"],
            "object"
        );
    }

    #[test]
    fn a_root_union_of_objects_is_flattened() {
        // An internally tagged enum, as schemars writes it.
        let schema = json!({
            "description": "A command.",
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "kind": {"type": "string", "const": "move"},
                        "to": {"type": "string"},
                    },
                    "required": ["kind", "to"],
                    "additionalProperties": false,
                },
                {
                    "type": "object",
                    "properties": {"kind": {"type": "string", "const": "stop"}},
                    "required": ["kind"],
                    "additionalProperties": false,
                },
                {"type": "string", "enum": ["noop"]},
            ],
        });
        assert_eq!(
            clean_input_schema(&schema),
            json!({
                "description": "A command.",
                "type": "object",
                "properties": {
                    "kind": {"anyOf": [
                        {"type": "string", "const": "move"},
                        {"type": "string", "const": "stop"},
                    ]},
                    "to": {"type": "string"},
                },
                "required": ["kind"],
                "additionalProperties": false,
            })
        );
    }

    #[test]
    fn a_root_all_of_requires_what_any_part_requires() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "allOf": [
                {"$ref": "#/$defs/B"},
                {"properties": {"a": {"minLength": 1}}, "required": ["a"]},
            ],
            "$defs": {"B": {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}},
        });
        assert_eq!(
            clean_input_schema(&schema),
            json!({
                "type": "object",
                "properties": {
                    "a": {"allOf": [{"type": "string"}, {"minLength": 1}]},
                    "b": {"type": "integer"},
                },
                "required": ["b", "a"],
            })
        );
    }
}
