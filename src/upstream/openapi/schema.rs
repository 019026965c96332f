//! An operation's schemas as JSON Schema: every `$ref` resolved in place, within bounds, and
//! OpenAPI 3.0's dialect (`nullable`, boolean `exclusiveMinimum`, `example`) written as JSON
//! Schema says it.
//!
//! A reference is followed only inside the document (`#/components/...`); one that leads back
//! to itself (a recursive type) is refused, naming it, and so is a chain of references deeper
//! than [`MAX_DEPTH`], an enum of more than [`MAX_ENUM`] values, and a schema that grows past
//! [`MAX_NODES`] once its references are resolved (a few types used many times each, nested).
//! Properties marked `readOnly` are left out of what is sent, and `writeOnly` ones out of what
//! is answered, as OpenAPI says.

use serde_json::{Map, Value};

use crate::schema::walk::{LISTS, MAPS, SINGLE};

/// The deepest chain of references followed.
const MAX_DEPTH: usize = 32;
/// The most values an enum may list.
pub(super) const MAX_ENUM: usize = 1000;
/// The most JSON values one operation's schemas may hold once resolved.
pub(super) const MAX_NODES: usize = 200_000;
/// The deepest a schema may nest once resolved (each target may nest on its own, so chains of
/// references could otherwise nest thousands deep, past what every later pass can walk).
const MAX_NESTING: usize = 64;

/// OpenAPI's own keywords in a schema, which are not JSON Schema's.
const OPENAPI_ONLY: [&str; 3] = ["xml", "externalDocs", "discriminator"];
/// Keywords beside a `$ref` that only annotate the place it is used.
const ANNOTATIONS: [&str; 7] = [
    "description",
    "title",
    "summary",
    "example",
    "examples",
    "default",
    "deprecated",
];

/// Which way a schema's values travel: `readOnly` properties are never sent, `writeOnly` ones
/// never answered.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    Request,
    Response,
}

/// Resolves references inside one document, with one budget per operation.
pub(super) struct Resolver<'a> {
    root: &'a Value,
    is_31: bool,
    nodes: usize,
    /// How deep the schema being resolved nests here.
    nesting: usize,
    stack: Vec<String>,
}

impl<'a> Resolver<'a> {
    pub(super) fn new(root: &'a Value, is_31: bool) -> Self {
        Resolver {
            root,
            is_31,
            nodes: 0,
            nesting: 0,
            stack: Vec::new(),
        }
    }

    /// `value`, an OpenAPI object (a parameter, a request body, a response), with a `$ref` in
    /// place of it followed (to the end of its chain).
    pub(super) fn object(&mut self, mut value: &'a Value) -> Result<&'a Value, String> {
        let mut seen = Vec::new();
        while let Some(reference) = value.get("$ref").and_then(Value::as_str) {
            if seen.contains(&reference) {
                return Err(format!("the reference `{reference}` leads back to itself"));
            }
            if seen.len() >= MAX_DEPTH {
                return Err(format!(
                    "a chain of references is deeper than {MAX_DEPTH} (at `{reference}`)"
                ));
            }
            seen.push(reference);
            value = self.target(reference)?;
        }
        Ok(value)
    }

    fn target(&self, reference: &str) -> Result<&'a Value, String> {
        let pointer = crate::base::json_ref::pointer_of(reference).ok_or_else(|| {
            format!("the reference `{reference}` is outside the document (not followed)")
        })?;
        self.root
            .pointer(&pointer)
            .ok_or_else(|| format!("the reference `{reference}` names nothing in the document"))
    }

    /// `schema` as JSON Schema, travelling `way`.
    pub(super) fn schema(&mut self, schema: &Value, way: Way) -> Result<Value, String> {
        if self.nesting >= MAX_NESTING {
            return Err(format!(
                "its schemas nest deeper than {MAX_NESTING} levels once their references are \
                 resolved"
            ));
        }
        self.nesting += 1;
        let resolved = self.nested(schema, way);
        self.nesting -= 1;
        resolved
    }

    /// The values the operation's schemas hold so far, once resolved.
    pub(super) fn values(&self) -> usize {
        self.nodes
    }

    fn nested(&mut self, schema: &Value, way: Way) -> Result<Value, String> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(format!(
                "its schemas hold more than {MAX_NODES} values once their references are \
                 resolved"
            ));
        }
        let Value::Object(node) = schema else {
            // `true`, `false` (3.1), or something that is not a schema: kept as it is.
            return Ok(schema.clone());
        };
        if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
            return self.referred(reference, node, way);
        }
        let mut out = Map::new();
        for (key, value) in node {
            if OPENAPI_ONLY.contains(&key.as_str()) || key.starts_with("x-") {
                continue;
            }
            let converted = if SINGLE.contains(&key.as_str()) && !value.is_array() {
                self.schema(value, way)?
            } else if LISTS.contains(&key.as_str()) && value.is_array() {
                let items = value.as_array().into_iter().flatten();
                Value::Array(
                    items
                        .map(|item| self.schema(item, way))
                        .collect::<Result<_, _>>()?,
                )
            } else if MAPS.contains(&key.as_str()) && value.is_object() {
                let entries = value.as_object().into_iter().flatten();
                let mut map = Map::new();
                for (name, item) in entries {
                    map.insert(name.clone(), self.schema(item, way)?);
                }
                Value::Object(map)
            } else {
                if key == "enum"
                    && let Some(values) = value.as_array()
                    && values.len() > MAX_ENUM
                {
                    return Err(format!(
                        "an enum lists {} values (at most {MAX_ENUM})",
                        values.len()
                    ));
                }
                self.count(value)?;
                value.clone()
            };
            out.insert(key.clone(), converted);
        }
        leave_out(&mut out, way);
        if !self.is_31 {
            from_30(&mut out);
        }
        Ok(Value::Object(out))
    }

    /// The schema a `$ref` names, with the annotations beside it kept (and, in 3.1, any other
    /// keyword beside it, joined by `allOf`).
    fn referred(
        &mut self,
        reference: &str,
        node: &Map<String, Value>,
        way: Way,
    ) -> Result<Value, String> {
        if self.stack.iter().any(|seen| seen == reference) {
            return Err(format!(
                "the schema `{reference}` is recursive (it contains itself), which toolgate \
                 does not serve"
            ));
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(format!(
                "a chain of references is deeper than {MAX_DEPTH} (at `{reference}`)"
            ));
        }
        let target = self.target(reference)?;
        self.stack.push(reference.to_owned());
        let resolved = self.schema(target, way);
        self.stack.pop();
        let mut resolved = resolved?;
        let mut rest = Map::new();
        for (key, value) in node {
            if key == "$ref" {
                continue;
            }
            if ANNOTATIONS.contains(&key.as_str()) {
                if let Value::Object(out) = &mut resolved {
                    out.insert(key.clone(), value.clone());
                }
            } else if self.is_31 {
                rest.insert(key.clone(), value.clone());
            }
        }
        if rest.is_empty() {
            if !self.is_31
                && let Value::Object(out) = &mut resolved
            {
                from_30(out);
            }
            return Ok(resolved);
        }
        let rest = self.schema(&Value::Object(rest), way)?;
        Ok(serde_json::json!({ "allOf": [resolved, rest] }))
    }

    /// Counts a value copied as it is against the budget.
    fn count(&mut self, value: &Value) -> Result<(), String> {
        let mut stack = vec![value];
        while let Some(value) = stack.pop() {
            self.nodes += 1;
            match value {
                Value::Array(items) => stack.extend(items),
                Value::Object(map) => stack.extend(map.values()),
                _ => {}
            }
        }
        if self.nodes > MAX_NODES {
            return Err(format!(
                "its schemas hold more than {MAX_NODES} values once their references are \
                 resolved"
            ));
        }
        Ok(())
    }
}

/// OpenAPI 3.0's dialect as JSON Schema: `nullable: true` admits `null`; a boolean
/// `exclusiveMinimum`/`exclusiveMaximum` moves its bound; `example` is one of `examples`.
fn from_30(node: &mut Map<String, Value>) {
    let nullable = node.remove("nullable") == Some(Value::Bool(true));
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(Value::Bool(flag)) = node.get(exclusive).cloned() {
            node.remove(exclusive);
            if flag && let Some(limit) = node.remove(bound) {
                node.insert(exclusive.into(), limit);
            }
        }
    }
    if let Some(example) = node.remove("example")
        && !node.contains_key("examples")
    {
        node.insert("examples".into(), Value::Array(vec![example]));
    }
    if !nullable {
        return;
    }
    if let Some(Value::Array(values)) = node.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    match node.get_mut("type") {
        Some(Value::String(kind)) => {
            let kind = std::mem::take(kind);
            node.insert("type".into(), serde_json::json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) => {
            if !kinds.iter().any(|k| k == "null") {
                kinds.push("null".into());
            }
        }
        Some(_) => {}
        // No `type` (an `allOf`, say): `null`, or what the schema says.
        None => {
            let schema = std::mem::take(node);
            node.insert(
                "anyOf".into(),
                serde_json::json!([Value::Object(schema), {"type": "null"}]),
            );
        }
    }
}

/// Leaves out the properties that do not travel `way`.
fn leave_out(node: &mut Map<String, Value>, way: Way) {
    let marker = match way {
        Way::Request => "readOnly",
        Way::Response => "writeOnly",
    };
    let Some(Value::Object(properties)) = node.get_mut("properties") else {
        return;
    };
    let gone: Vec<String> = properties
        .iter()
        .filter(|(_, schema)| schema.get(marker) == Some(&Value::Bool(true)))
        .map(|(name, _)| name.clone())
        .collect();
    for name in &gone {
        properties.remove(name);
    }
    if let Some(Value::Array(required)) = node.get_mut("required") {
        required.retain(|name| !gone.iter().any(|g| name == g));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_resolve_and_30_reads_as_json_schema() {
        let root = json!({"components": {"schemas": {
            "Pet": {"type": "object", "required": ["id", "name"], "properties": {
                "id": {"type": "integer", "readOnly": true},
                "name": {"type": "string", "nullable": true, "example": "Rex"},
                "age": {"type": "integer", "minimum": 0, "exclusiveMinimum": true},
                "tag": {"$ref": "#/components/schemas/Tag", "description": "Its tag."},
            }, "xml": {"name": "pet"}},
            "Tag": {"type": "string", "x-internal": true},
        }}});
        let mut resolver = Resolver::new(&root, false);
        let sent = resolver
            .schema(&json!({"$ref": "#/components/schemas/Pet"}), Way::Request)
            .unwrap();
        assert_eq!(
            sent,
            json!({"type": "object", "required": ["name"], "properties": {
                "name": {"type": ["string", "null"], "examples": ["Rex"]},
                "age": {"type": "integer", "exclusiveMinimum": 0},
                "tag": {"type": "string", "description": "Its tag."},
            }})
        );
        let answered = Resolver::new(&root, false)
            .schema(&json!({"$ref": "#/components/schemas/Pet"}), Way::Response)
            .unwrap();
        assert_eq!(answered["required"], json!(["id", "name"]));
    }

    #[test]
    fn a_30_nullable_without_a_type_admits_null() {
        let root = json!({});
        let schema = json!({"nullable": true, "allOf": [{"type": "string"}], "example": "x"});
        let resolved = Resolver::new(&root, false)
            .schema(&schema, Way::Request)
            .unwrap();
        assert_eq!(
            resolved,
            json!({"anyOf": [{"allOf": [{"type": "string"}], "examples": ["x"]}, {"type": "null"}]})
        );
    }

    #[test]
    fn nesting_past_the_bound_is_refused() {
        let mut deep = json!({"type": "string"});
        for _ in 0..70 {
            deep = json!({"type": "array", "items": deep});
        }
        let root = json!({});
        let err = Resolver::new(&root, true)
            .schema(&deep, Way::Request)
            .unwrap_err();
        assert!(err.contains("nest deeper than 64"), "{err}");
    }

    #[test]
    fn recursion_depth_size_and_outside_references_are_refused() {
        let root = json!({"components": {"schemas": {
            "Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}},
            "Big": {"enum": (0..2000).collect::<Vec<_>>()},
        }}});
        let schema = |reference: &str| {
            Resolver::new(&root, true).schema(&json!({ "$ref": reference }), Way::Request)
        };
        let err = schema("#/components/schemas/Node").unwrap_err();
        assert!(
            err.contains("`#/components/schemas/Node` is recursive"),
            "{err}"
        );
        let err = schema("#/components/schemas/Big").unwrap_err();
        assert!(err.contains("2000 values"), "{err}");
        let err = schema("other.yaml#/Pet").unwrap_err();
        assert!(err.contains("outside the document"), "{err}");
        let err = schema("#/components/schemas/Missing").unwrap_err();
        assert!(err.contains("names nothing"), "{err}");

        // A chain of 40 references, each to the next.
        let mut schemas = Map::new();
        for i in 0..40 {
            schemas.insert(
                format!("S{i}"),
                json!({ "$ref": format!("#/components/schemas/S{}", i + 1) }),
            );
        }
        schemas.insert("S40".into(), json!({"type": "string"}));
        let root = json!({"components": {"schemas": schemas}});
        let err = Resolver::new(&root, true)
            .schema(&json!({"$ref": "#/components/schemas/S0"}), Way::Request)
            .unwrap_err();
        assert!(err.contains("deeper than 32"), "{err}");

        // Each type holds the next one twice: 2^30 values once resolved.
        let mut schemas = Map::new();
        for i in 0..30 {
            let next = json!({ "$ref": format!("#/components/schemas/T{}", i + 1) });
            schemas.insert(
                format!("T{i}"),
                json!({"type": "object", "properties": {"a": next, "b": next}}),
            );
        }
        schemas.insert("T30".into(), json!({"type": "string"}));
        let root = json!({"components": {"schemas": schemas}});
        let err = Resolver::new(&root, true)
            .schema(&json!({"$ref": "#/components/schemas/T0"}), Way::Request)
            .unwrap_err();
        assert!(err.contains("more than 200000 values"), "{err}");
    }
}
