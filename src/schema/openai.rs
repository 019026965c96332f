//! OpenAI's function tools, for Chat Completions (`{"type": "function", "function": {...}}`)
//! and for the Responses API (the same fields, flat), each with `strict`.
//!
//! Strict mode makes the model's arguments always match the schema, but takes a subset of JSON
//! Schema: every object closed (`additionalProperties: false`) with every property required, so
//! an optional property is made nullable instead (the model sends `null` for it, and input
//! admission reads that `null` as absent: `crate::contract::nulls`); only some keywords and
//! string formats; no `$ref` with siblings; and limits on size. A schema that fits once the
//! keywords strict mode lacks are dropped goes out with `strict: true`. One that strict mode
//! cannot express without refusing what the tool accepts (a map, a value of any type, a tuple)
//! goes out as its clean form with `strict: false`, which the non-strict mode takes as it is.

use serde_json::{Map, Value, json};

use super::walk;
use crate::contract::erased::ToolDescriptor;

/// The keywords strict mode supports; others are dropped from the strict copy.
const STRICT_KEYWORDS: [&str; 21] = [
    "type",
    "description",
    "title",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "pattern",
    "format",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "maxItems",
];

/// The string formats strict mode supports.
const STRICT_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Strict mode's limits: properties in all, object nesting, enum values in all, the total
/// length of property names, definition names, enum and const values, and the total length of
/// one enum's values once it has more than [`LARGE_ENUM`] of them.
const MAX_PROPERTIES: usize = 5000;
const MAX_DEPTH: usize = 10;
const MAX_ENUM_VALUES: usize = 1000;
const MAX_TOTAL_STRING_LEN: usize = 120_000;
const LARGE_ENUM: usize = 250;
const MAX_LARGE_ENUM_STRING_LEN: usize = 15_000;

/// A tool for Chat Completions' `tools`:
/// `{"type": "function", "function": {name, description, parameters, strict}}`.
pub fn chat_tool(tool: &ToolDescriptor) -> Value {
    let (parameters, strict) = parameters(&tool.input_schema);
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": parameters,
            "strict": strict,
        },
    })
}

/// A tool for the Responses API's `tools`:
/// `{"type": "function", name, description, parameters, strict}`.
pub fn responses_tool(tool: &ToolDescriptor) -> Value {
    let (parameters, strict) = parameters(&tool.input_schema);
    json!({
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": parameters,
        "strict": strict,
    })
}

/// The `parameters` for a tool's input schema, and whether they are strict.
fn parameters(input_schema: &Value) -> (Value, bool) {
    let clean = super::clean_input_schema(input_schema);
    match strict_schema(&clean) {
        Some(strict) => (strict, true),
        None => (clean, false),
    }
}

/// The strict-mode form of a clean input schema ([`super::clean_input_schema`]), or `None` when
/// strict mode cannot express it.
pub fn strict_schema(clean: &Value) -> Option<Value> {
    let strict = strict_node(clean)?;
    within_limits(&strict).then_some(strict)
}

fn strict_node(schema: &Value) -> Option<Value> {
    // `true`, `{}`: a value of any type, which strict mode has no way to say.
    let Value::Object(obj) = schema else {
        return None;
    };
    let mut node: Map<String, Value> = obj
        .iter()
        .filter(|(key, _)| STRICT_KEYWORDS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if node
        .get("format")
        .is_some_and(|format| !STRICT_FORMATS.iter().any(|f| format == f))
    {
        node.remove("format");
    }
    if node.contains_key("$ref") {
        return lone_ref(node);
    }
    if !["type", "anyOf", "enum", "const"]
        .iter()
        .any(|key| node.contains_key(*key))
    {
        return None;
    }
    if let Some(Value::Object(defs)) = node.get_mut("$defs") {
        for def in defs.values_mut() {
            *def = strict_node(def)?;
        }
    }
    if let Some(Value::Array(options)) = node.get_mut("anyOf") {
        for option in options.iter_mut() {
            *option = strict_node(option)?;
        }
    }
    if walk::is_object_type(&node) {
        close_object(&mut node)?;
    }
    if walk::has_type(&node, "array") {
        let items = node.get("items").unwrap_or(&Value::Bool(true));
        let items = strict_node(items)?;
        node.insert("items".into(), items);
    }
    Some(Value::Object(node))
}

/// A `$ref` alone, as strict mode wants it: annotations beside it move onto an `anyOf` of the
/// one reference; a validation keyword beside it cannot be kept.
fn lone_ref(mut node: Map<String, Value>) -> Option<Value> {
    let reference = node.remove("$ref")?;
    if node
        .keys()
        .any(|key| key != "description" && key != "title")
    {
        return None;
    }
    if node.is_empty() {
        return Some(json!({ "$ref": reference }));
    }
    node.insert("anyOf".into(), json!([{ "$ref": reference }]));
    Some(Value::Object(node))
}

/// Closes an object: `additionalProperties: false`, every property required, the optional ones
/// made nullable. `None` for an object that takes properties it does not name (a map).
fn close_object(node: &mut Map<String, Value>) -> Option<()> {
    match node.get("additionalProperties") {
        None | Some(Value::Bool(false)) => {}
        Some(_) => return None,
    }
    node.insert("additionalProperties".into(), false.into());
    let required: Vec<Value> = match node.get("required") {
        Some(Value::Array(names)) => names.clone(),
        _ => Vec::new(),
    };
    let Some(Value::Object(properties)) = node.get_mut("properties") else {
        node.insert("properties".into(), json!({}));
        node.insert("required".into(), json!([]));
        return Some(());
    };
    for (name, property) in properties.iter_mut() {
        let strict = strict_node(property)?;
        *property = if required.iter().any(|r| r == name) {
            strict
        } else {
            nullable(strict)
        };
    }
    let names: Vec<Value> = properties.keys().cloned().map(Value::from).collect();
    node.insert("required".into(), Value::Array(names));
    Some(())
}

/// `schema`, also accepting `null`.
fn nullable(schema: Value) -> Value {
    if plainly_nullable(&schema) {
        return schema;
    }
    let Value::Object(mut node) = schema else {
        return schema;
    };
    let typed = match node.get_mut("type") {
        Some(Value::String(kind)) => {
            let kind = std::mem::take(kind);
            node.insert("type".into(), json!([kind, "null"]));
            true
        }
        Some(Value::Array(kinds)) => {
            if !kinds.iter().any(|k| k == "null") {
                kinds.push("null".into());
            }
            true
        }
        _ => false,
    };
    if let Some(value) = node.remove("const") {
        node.insert("enum".into(), json!([value]));
    }
    if let Some(Value::Array(values)) = node.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
        return Value::Object(node);
    }
    if let Some(Value::Array(options)) = node.get_mut("anyOf") {
        options.push(json!({"type": "null"}));
        return Value::Object(node);
    }
    if typed {
        return Value::Object(node);
    }
    // A lone `$ref`: a union of it and null.
    json!({ "anyOf": [Value::Object(node), {"type": "null"}] })
}

/// Whether a strict node plainly accepts `null` already (a `$ref` is not looked into: adding
/// `null` to what already takes it changes nothing).
fn plainly_nullable(schema: &Value) -> bool {
    let Value::Object(node) = schema else {
        return true;
    };
    if node.contains_key("$ref") {
        return false;
    }
    let says_something = ["type", "enum", "const", "anyOf"]
        .iter()
        .any(|key| node.contains_key(*key));
    let type_takes_null = match node.get("type") {
        Some(Value::String(kind)) => kind == "null",
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "null"),
        _ => true,
    };
    let enum_takes_null = match node.get("enum") {
        Some(Value::Array(values)) => values.contains(&Value::Null),
        _ => true,
    };
    let any_of_takes_null = match node.get("anyOf") {
        Some(Value::Array(options)) => options.iter().any(plainly_nullable),
        _ => true,
    };
    says_something
        && type_takes_null
        && enum_takes_null
        && node.get("const").is_none_or(Value::is_null)
        && any_of_takes_null
}

/// Whether a strict schema is within strict mode's limits.
fn within_limits(schema: &Value) -> bool {
    #[derive(Default)]
    struct Tally {
        properties: usize,
        enum_values: usize,
        string_len: usize,
        large_enum_too_long: bool,
    }
    fn tally(schema: &Value, t: &mut Tally) {
        let Value::Object(obj) = schema else {
            return;
        };
        if let Some(Value::Object(properties)) = obj.get("properties") {
            t.properties += properties.len();
            t.string_len += properties.keys().map(String::len).sum::<usize>();
        }
        if let Some(Value::Object(defs)) = obj.get("$defs") {
            t.string_len += defs.keys().map(String::len).sum::<usize>();
        }
        if let Some(Value::Array(values)) = obj.get("enum") {
            t.enum_values += values.len();
            let len: usize = values.iter().filter_map(Value::as_str).map(str::len).sum();
            t.string_len += len;
            t.large_enum_too_long |= values.len() > LARGE_ENUM && len > MAX_LARGE_ENUM_STRING_LEN;
        }
        if let Some(Value::String(value)) = obj.get("const") {
            t.string_len += value.len();
        }
        walk::children(obj, &mut |_, child| tally(child, t));
    }
    /// Objects nested in objects, the outermost counting 1; a `$ref` counts as a leaf (each
    /// definition is measured on its own).
    fn depth(schema: &Value) -> usize {
        let Value::Object(obj) = schema else {
            return 0;
        };
        let mut deepest = 0;
        walk::children(obj, &mut |key, child| {
            if key != "$defs" {
                deepest = deepest.max(depth(child));
            }
        });
        deepest + usize::from(obj.contains_key("properties"))
    }
    let mut t = Tally::default();
    tally(schema, &mut t);
    let defs_depth = schema
        .get("$defs")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|defs| defs.values())
        .map(depth)
        .max()
        .unwrap_or(0);
    t.properties <= MAX_PROPERTIES
        && t.enum_values <= MAX_ENUM_VALUES
        && t.string_len <= MAX_TOTAL_STRING_LEN
        && !t.large_enum_too_long
        && depth(schema).max(defs_depth) <= MAX_DEPTH
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::clean_input_schema;

    fn strict(schema: Value) -> Option<Value> {
        strict_schema(&clean_input_schema(&schema))
    }

    #[test]
    fn objects_close_and_optional_properties_become_required_and_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": "integer", "default": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "kind": {"type": "string", "enum": ["a", "b"]},
                "exact": {"const": "x"},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "maybe": {"type": ["string", "null"]},
            },
            "required": ["name"],
        });
        assert_eq!(
            strict(schema),
            Some(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "count": {"type": ["integer", "null"]},
                    "tags": {"type": ["array", "null"], "items": {"type": "string"}},
                    "kind": {"type": ["string", "null"], "enum": ["a", "b", null]},
                    "exact": {"enum": ["x", null]},
                    "either": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
                    "maybe": {"type": ["string", "null"]},
                },
                "required": ["count", "either", "exact", "kind", "maybe", "name", "tags"],
                "additionalProperties": false,
            }))
        );
    }

    #[test]
    fn unsupported_keywords_and_formats_are_dropped() {
        let schema = json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "minLength": 1, "format": "uuid", "examples": ["x"]},
                "site": {"type": "string", "format": "uri", "pattern": "^https://"},
                "n": {"type": "integer", "format": "uint64", "minimum": 0, "maximum": 9},
                "list": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true, "minItems": 1},
            },
            "required": ["id", "site", "n", "list"],
            "additionalProperties": false,
        });
        assert_eq!(
            strict(schema).unwrap()["properties"],
            json!({
                "id": {"type": "string", "format": "uuid"},
                "site": {"type": "string", "pattern": "^https://"},
                "n": {"type": "integer", "minimum": 0, "maximum": 9},
                "list": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
            })
        );
    }

    #[test]
    fn a_reference_stands_alone_and_an_optional_one_is_a_union_with_null() {
        let schema = json!({
            "type": "object",
            "properties": {
                "root": {"$ref": "#/$defs/Tree", "description": "the tree"},
                "spare": {"$ref": "#/$defs/Tree"},
            },
            "required": ["root"],
            "$defs": {"Tree": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}},
                "required": ["children"],
            }},
        });
        let strict = strict(schema).unwrap();
        assert_eq!(
            strict["properties"]["root"],
            json!({"description": "the tree", "anyOf": [{"$ref": "#/$defs/Tree"}]})
        );
        assert_eq!(
            strict["properties"]["spare"],
            json!({"anyOf": [{"$ref": "#/$defs/Tree"}, {"type": "null"}]})
        );
        assert_eq!(strict["$defs"]["Tree"]["additionalProperties"], false);
    }

    #[test]
    fn what_strict_mode_cannot_say_is_not_strict() {
        let map = json!({
            "type": "object",
            "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}},
        });
        assert_eq!(strict(map), None);
        let any = json!({"type": "object", "properties": {"v": true}});
        assert_eq!(strict(any), None);
        let tuple = json!({
            "type": "object",
            "properties": {"t": {"type": "array", "prefixItems": [{"type": "string"}], "items": false}},
        });
        assert_eq!(strict(tuple), None);
        let open = json!({"type": "object", "properties": {}, "additionalProperties": true});
        assert_eq!(strict(open), None);
        let no_arguments = json!({"type": "object", "properties": {}});
        assert_eq!(
            strict(no_arguments),
            Some(
                json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false})
            )
        );
    }

    #[test]
    fn the_limits_are_strict_modes() {
        let wide: Map<String, Value> = (0..5001)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        assert_eq!(strict(json!({"type": "object", "properties": wide})), None);

        let mut deep = json!({"type": "string"});
        for _ in 0..10 {
            deep = json!({"type": "object", "properties": {"x": deep}, "required": ["x"]});
        }
        assert!(strict(deep.clone()).is_some(), "10 levels fit");
        let deeper = json!({"type": "object", "properties": {"x": deep}, "required": ["x"]});
        assert_eq!(strict(deeper), None, "11 do not");

        let values: Vec<String> = (0..1001).map(|i| format!("v{i}")).collect();
        let many =
            json!({"type": "object", "properties": {"e": {"type": "string", "enum": values}}});
        assert_eq!(strict(many), None);

        let long: Vec<String> = (0..300).map(|i| format!("{i:0>60}")).collect();
        let long = json!({"type": "object", "properties": {"e": {"type": "string", "enum": long}}});
        assert_eq!(
            strict(long),
            None,
            "300 values of 60 characters pass 15,000"
        );
    }

    #[test]
    fn both_tool_shapes_carry_the_same_parameters() {
        let tool = ToolDescriptor {
            name: "echo".into(),
            description: "Echoes.".into(),
            effect: crate::Effect::Read,
            input_schema: json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "EchoText",
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            }),
            output_schema: None,
        };
        let parameters = json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": false,
        });
        assert_eq!(
            chat_tool(&tool),
            json!({"type": "function", "function": {
                "name": "echo", "description": "Echoes.", "parameters": parameters, "strict": true,
            }})
        );
        assert_eq!(
            responses_tool(&tool),
            json!({
                "type": "function", "name": "echo", "description": "Echoes.",
                "parameters": parameters, "strict": true,
            })
        );
    }
}
