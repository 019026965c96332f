//! Gemini's tools: `[{"functionDeclarations": [{name, description, parametersJsonSchema}]}]`.
//!
//! `parametersJsonSchema` takes a subset of JSON Schema (google-genai's `JSONSchema` model
//! names every keyword it knows and refuses others). The copy keeps those keywords only: a
//! `const` becomes a one-value `enum`; an exclusive bound becomes the inclusive one (one step
//! in for an integer, the same number, a little looser, for a real); an `allOf` is merged into
//! its parent where they do not clash; nothing but a `description` stays beside a `$ref`; and
//! string formats other than `date-time`, `date` and `time` go.

use serde_json::{Map, Value, json};

use super::walk;
use crate::contract::erased::ToolDescriptor;

/// The keywords Gemini's schema subset has.
const KEYWORDS: [&str; 23] = [
    "type",
    "format",
    "title",
    "description",
    "default",
    "items",
    "minItems",
    "maxItems",
    "enum",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "additionalProperties",
    "anyOf",
    "uniqueItems",
    "$ref",
    "$defs",
];

/// The string formats Gemini supports.
const FORMATS: [&str; 3] = ["date-time", "date", "time"];

/// The `tools` value for a list of tools: one `Tool` declaring every function (no `Tool` at all
/// for no tools).
pub fn tools(tools: &[ToolDescriptor]) -> Value {
    if tools.is_empty() {
        return json!([]);
    }
    let declarations: Vec<Value> = tools.iter().map(function_declaration).collect();
    json!([{ "functionDeclarations": declarations }])
}

/// One function declaration: `{name, description, parametersJsonSchema}`.
pub fn function_declaration(tool: &ToolDescriptor) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "parametersJsonSchema": parameters_json_schema(&tool.input_schema),
    })
}

/// Gemini's copy of a tool's input schema.
pub fn parameters_json_schema(schema: &Value) -> Value {
    let mut schema = super::clean_input_schema(schema);
    walk::each_mut(&mut schema, &mut gemini_node);
    schema
}

fn gemini_node(node: &mut Map<String, Value>) {
    if let Some(Value::Array(parts)) = node.remove("allOf") {
        for part in parts {
            if let Value::Object(part) = part {
                for (key, value) in part {
                    node.entry(key).or_insert(value);
                }
            }
        }
    }
    if let Some(value) = node.remove("const") {
        let keep = match node.get("enum") {
            Some(Value::Array(values)) => values.contains(&value),
            _ => true,
        };
        let values = if keep { vec![value] } else { Vec::new() };
        node.insert("enum".into(), Value::Array(values));
    }
    let integer = walk::has_type(node, "integer") && !walk::has_type(node, "number");
    inclusive_bound(node, "exclusiveMinimum", "minimum", integer, 1.0);
    inclusive_bound(node, "exclusiveMaximum", "maximum", integer, -1.0);
    if node
        .get("format")
        .is_some_and(|format| !FORMATS.iter().any(|f| format == f))
    {
        node.remove("format");
    }
    if node.contains_key("$ref") {
        node.retain(|key, _| key == "$ref" || key == "description");
        return;
    }
    node.retain(|key, _| KEYWORDS.contains(&key.as_str()));
    if let Some(items) = node.get_mut("items")
        && !items.is_object()
    {
        *items = json!({});
    }
    if let Some(Value::Object(properties)) = node.get_mut("properties") {
        // A property that may not appear is as good as one not named, under a closed object.
        properties.retain(|_, schema| *schema != Value::Bool(false));
    }
}

/// Replaces `node[exclusive]` by an inclusive `node[inclusive]`, keeping whichever bound is the
/// tighter when both were there.
fn inclusive_bound(
    node: &mut Map<String, Value>,
    exclusive: &str,
    inclusive: &str,
    integer: bool,
    step: f64,
) {
    let Some(bound) = node.remove(exclusive).as_ref().and_then(Value::as_f64) else {
        return;
    };
    let bound = if integer {
        // The nearest integer strictly inside the bound.
        if step > 0.0 {
            bound.floor() + 1.0
        } else {
            bound.ceil() - 1.0
        }
    } else {
        bound
    };
    let tighter = match node.get(inclusive).and_then(Value::as_f64) {
        Some(existing) if step > 0.0 => bound > existing,
        Some(existing) => bound < existing,
        None => true,
    };
    if tighter {
        let value = if bound.fract() == 0.0 && bound.abs() < 9.0e15 {
            json!(bound as i64)
        } else {
            json!(bound)
        };
        node.insert(inclusive.into(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(properties: Value) -> Value {
        parameters_json_schema(&json!({"type": "object", "properties": properties}))["properties"]
            .clone()
    }

    #[test]
    fn const_is_a_one_value_enum() {
        assert_eq!(
            copy(json!({"k": {"type": "string", "const": "move"}})),
            json!({"k": {"type": "string", "enum": ["move"]}})
        );
    }

    #[test]
    fn only_a_description_stays_beside_a_reference() {
        let schema = json!({
            "type": "object",
            "properties": {"t": {"$ref": "#/$defs/T", "description": "t", "default": null}},
            "$defs": {"T": {"type": "object", "properties": {"t": {"$ref": "#/$defs/T"}}}},
        });
        let copy = parameters_json_schema(&schema);
        assert_eq!(
            copy["properties"]["t"],
            json!({"$ref": "#/$defs/T", "description": "t"})
        );
        assert_eq!(
            copy["$defs"]["T"]["properties"]["t"],
            json!({"$ref": "#/$defs/T"})
        );
    }

    #[test]
    fn string_formats_are_date_time_date_and_time_only() {
        assert_eq!(
            copy(json!({
                "a": {"type": "string", "format": "date-time"},
                "b": {"type": "string", "format": "date"},
                "c": {"type": "string", "format": "time"},
                "d": {"type": "string", "format": "email"},
            })),
            json!({
                "a": {"type": "string", "format": "date-time"},
                "b": {"type": "string", "format": "date"},
                "c": {"type": "string", "format": "time"},
                "d": {"type": "string"},
            })
        );
    }

    #[test]
    fn keywords_outside_the_subset_go_and_exclusive_bounds_become_inclusive() {
        assert_eq!(
            copy(json!({
                "i": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10, "multipleOf": 2},
                "x": {"type": "number", "exclusiveMinimum": 0.5, "minimum": 1},
                "s": {"type": "string", "examples": ["a"], "deprecated": true, "not": {"const": ""}},
                "t": {"type": "array", "prefixItems": [{"type": "string"}], "items": false},
            })),
            json!({
                "i": {"type": "integer", "minimum": 1, "maximum": 9},
                "x": {"type": "number", "minimum": 1},
                "s": {"type": "string"},
                "t": {"type": "array", "items": {}},
            })
        );
    }

    #[test]
    fn all_of_merges_into_its_parent() {
        assert_eq!(
            copy(
                json!({"a": {"allOf": [{"type": "string"}, {"minLength": 1, "type": "integer"}]}})
            ),
            json!({"a": {"type": "string", "minLength": 1}})
        );
    }

    #[test]
    fn the_tools_value_is_one_tool_declaring_every_function() {
        let tool = ToolDescriptor {
            name: "t".into(),
            description: "T.".into(),
            effect: crate::Effect::Read,
            input_schema: json!({"type": "object", "properties": {}}),
            output_schema: None,
        };
        assert_eq!(
            tools(&[tool]),
            json!([{"functionDeclarations": [{
                "name": "t",
                "description": "T.",
                "parametersJsonSchema": {"type": "object", "properties": {}},
            }]}])
        );
        assert_eq!(tools(&[]), json!([]));
    }
}
