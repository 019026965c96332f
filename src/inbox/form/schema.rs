//! What a JSON Schema is, as far as a form goes: its `$ref`s followed, its shape told.

use serde_json::{Map, Value};

/// How deep objects and arrays are rendered as controls; deeper, a JSON text area.
const MAX_DEPTH: usize = 6;

/// What a schema is, as far as the form goes.
pub(super) enum Shape<'s> {
    Object {
        properties: &'s Map<String, Value>,
        required: Vec<&'s str>,
    },
    Array {
        items: &'s Value,
        min_items: u64,
    },
    Text,
    Number {
        integer: bool,
    },
    Boolean,
    Enum(Vec<&'s Value>),
    /// Anything else: typed as JSON.
    Json,
}

/// A schema and the document its `$ref`s point into.
#[derive(Clone, Copy)]
pub(super) struct Schema<'s> {
    pub(super) root: &'s Value,
}

impl<'s> Schema<'s> {
    /// `schema` with its `$ref`s followed (local ones only, a bounded number of hops), and the
    /// single non-null member of an `anyOf`/`oneOf`/`allOf` taken for the schema.
    pub(super) fn resolve(self, mut schema: &'s Value) -> &'s Value {
        for _ in 0..16 {
            if let Some(target) = schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix('#'))
                .and_then(|pointer| self.root.pointer(pointer))
            {
                schema = target;
                continue;
            }
            let single = ["anyOf", "oneOf", "allOf"].iter().find_map(|key| {
                let members: Vec<&Value> = schema
                    .get(*key)?
                    .as_array()?
                    .iter()
                    .filter(|m| m.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                (members.len() == 1).then(|| members[0])
            });
            match single {
                Some(member) => schema = member,
                None => break,
            }
        }
        schema
    }

    pub(super) fn shape(self, schema: &'s Value, depth: usize) -> Shape<'s> {
        let schema = self.resolve(schema);
        let has = |key: &str| schema.get(key).is_some();
        // A choice of constants (how schemars writes an enum whose variants have docs).
        let constants = ["oneOf", "anyOf"].iter().find_map(|key| {
            let members = schema.get(*key)?.as_array()?;
            members
                .iter()
                .map(|member| {
                    member
                        .get("const")
                        .filter(|c| !c.is_object() && !c.is_array())
                })
                .collect::<Option<Vec<&Value>>>()
        });
        if let Some(values) = constants.filter(|values| !values.is_empty()) {
            return Shape::Enum(values);
        }
        if let Some(constant) = schema
            .get("const")
            .filter(|c| !c.is_object() && !c.is_array())
        {
            return Shape::Enum(vec![constant]);
        }
        if [
            "anyOf",
            "oneOf",
            "allOf",
            "not",
            "if",
            "const",
            "patternProperties",
        ]
        .iter()
        .any(|key| has(key))
        {
            return Shape::Json;
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let values: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
            if !values.is_empty() && values.iter().all(|v| !v.is_object() && !v.is_array()) {
                return Shape::Enum(values);
            }
            return Shape::Json;
        }
        // `["string", "null"]` is a string that may be left out.
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ if has("properties") => vec!["object"],
            _ => Vec::new(),
        };
        match types.as_slice() {
            ["object"] if depth < MAX_DEPTH => match schema.get("properties") {
                Some(Value::Object(properties)) if !properties.is_empty() => Shape::Object {
                    properties,
                    required: schema
                        .get("required")
                        .and_then(Value::as_array)
                        .map(|r| r.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default(),
                },
                _ => Shape::Json,
            },
            ["array"] if depth < MAX_DEPTH && !has("prefixItems") => match schema.get("items") {
                Some(items @ Value::Object(_)) => Shape::Array {
                    items,
                    min_items: schema.get("minItems").and_then(Value::as_u64).unwrap_or(0),
                },
                _ => Shape::Json,
            },
            ["string"] => Shape::Text,
            ["integer"] => Shape::Number { integer: true },
            ["number"] => Shape::Number { integer: false },
            ["boolean"] => Shape::Boolean,
            _ => Shape::Json,
        }
    }
}
