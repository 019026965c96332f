//! Anthropic's tools: `{name, description, input_schema}`, the schema a root object with no
//! top-level union, in JSON Schema 2020-12.
//!
//! The clean form fits as it is, with two changes for the Anthropic SDK's own schema transform
//! (`transform_schema`, which strict tool use runs every schema through): a `type` list becomes
//! an `anyOf` of one type each, the keywords of each type with it (the transform handles one
//! type per schema); and a `$ref` with keywords beside it becomes an `anyOf` of the one
//! reference, those keywords beside the `anyOf` (the transform drops whatever stands beside a
//! `$ref`, descriptions included).

use serde_json::{Map, Value, json};

use super::walk;
use crate::contract::erased::ToolDescriptor;

/// Which keywords apply to which instance type, for splitting a `type` list.
const TYPE_KEYWORDS: [(&str, &[&str]); 5] = [
    (
        "string",
        &[
            "minLength",
            "maxLength",
            "pattern",
            "format",
            "contentEncoding",
            "contentMediaType",
            "contentSchema",
        ],
    ),
    (
        "number",
        &[
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
        ],
    ),
    (
        "integer",
        &[
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
        ],
    ),
    (
        "array",
        &[
            "items",
            "prefixItems",
            "minItems",
            "maxItems",
            "uniqueItems",
            "contains",
            "minContains",
            "maxContains",
            "unevaluatedItems",
        ],
    ),
    (
        "object",
        &[
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
            "propertyNames",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
            "dependencies",
            "unevaluatedProperties",
        ],
    ),
];

/// A tool for the Messages API's `tools`: `{name, description, input_schema}`.
pub fn tool(tool: &ToolDescriptor) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "input_schema": input_schema(&tool.input_schema),
    })
}

/// Anthropic's copy of a tool's input schema.
pub fn input_schema(schema: &Value) -> Value {
    let mut schema = super::clean_input_schema(schema);
    walk::each_mut(&mut schema, &mut |node| {
        wrap_ref(node);
        split_types(node);
    });
    schema
}

/// `{"$ref": r, k: v...}` as `{k: v..., "anyOf": [{"$ref": r}]}`.
fn wrap_ref(node: &mut Map<String, Value>) {
    if node.len() < 2 || !node.contains_key("$ref") {
        return;
    }
    let Some(reference) = node.remove("$ref") else {
        return;
    };
    let lone = json!({ "$ref": reference });
    add_union(node, vec![lone]);
}

/// `{"type": [a, b], ...}` as `{"anyOf": [{"type": a, ...a's}, {"type": b, ...b's}], ...rest}`.
/// With an `enum` or `const`, the values already say what the types do: the list goes.
fn split_types(node: &mut Map<String, Value>) {
    let Some(Value::Array(kinds)) = node.get("type") else {
        return;
    };
    if kinds.len() < 2 {
        if let Some(kind) = kinds.first().cloned() {
            node.insert("type".into(), kind);
        }
        return;
    }
    let kinds = kinds.clone();
    node.remove("type");
    if node.contains_key("enum") || node.contains_key("const") {
        return;
    }
    let mut branches = Vec::new();
    let mut moved = Vec::new();
    for kind in &kinds {
        let mut branch = Map::new();
        branch.insert("type".into(), kind.clone());
        let keywords = TYPE_KEYWORDS
            .iter()
            .find(|(name, _)| kind == name)
            .map_or(&[][..], |(_, keywords)| *keywords);
        for keyword in keywords {
            if let Some(value) = node.get(*keyword) {
                branch.insert((*keyword).into(), value.clone());
                moved.push(*keyword);
            }
        }
        branches.push(Value::Object(branch));
    }
    for keyword in moved {
        node.remove(keyword);
    }
    add_union(node, branches);
}

/// Adds `options` to `node` as its `anyOf`, or, when it has one already, as one more `allOf`
/// part.
fn add_union(node: &mut Map<String, Value>, options: Vec<Value>) {
    if !node.contains_key("anyOf") {
        node.insert("anyOf".into(), Value::Array(options));
        return;
    }
    let part = json!({ "anyOf": options });
    match node.get_mut("allOf") {
        Some(Value::Array(parts)) => parts.push(part),
        _ => {
            node.insert("allOf".into(), json!([part]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_list_becomes_a_union_each_type_with_its_keywords() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": ["integer", "null"], "format": "uint32", "minimum": 0, "description": "n"},
                "s": {"type": ["string", "array"], "minLength": 1, "items": {"type": "string"}},
                "e": {"type": ["string", "null"], "enum": ["a", null]},
                "one": {"type": ["string"]},
            },
        });
        assert_eq!(
            input_schema(&schema)["properties"],
            json!({
                "n": {"description": "n", "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
                "s": {"anyOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "items": {"type": "string"}},
                ]},
                "e": {"enum": ["a", null]},
                "one": {"type": "string"},
            })
        );
    }

    #[test]
    fn a_reference_with_siblings_keeps_them_beside_a_union_of_it() {
        let schema = json!({
            "type": "object",
            "properties": {
                "tree": {"$ref": "#/$defs/Tree", "description": "the tree"},
                "bare": {"$ref": "#/$defs/Tree"},
            },
            "$defs": {"Tree": {"type": "object", "properties": {"up": {"$ref": "#/$defs/Tree"}}}},
        });
        let copy = input_schema(&schema);
        assert_eq!(
            copy["properties"]["tree"],
            json!({"description": "the tree", "anyOf": [{"$ref": "#/$defs/Tree"}]})
        );
        assert_eq!(copy["properties"]["bare"], json!({"$ref": "#/$defs/Tree"}));
        assert_eq!(copy["type"], "object");
    }

    #[test]
    fn a_type_list_beside_a_union_joins_it_through_all_of() {
        let mut node =
            json!({"type": ["string", "null"], "anyOf": [{"minLength": 1}, {"type": "null"}]});
        split_types(node.as_object_mut().unwrap());
        assert_eq!(
            node,
            json!({
                "anyOf": [{"minLength": 1}, {"type": "null"}],
                "allOf": [{"anyOf": [{"type": "string"}, {"type": "null"}]}],
            })
        );
    }
}
