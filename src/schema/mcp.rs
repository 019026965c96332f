//! MCP's tools, as `tools/list` returns them: `{name, description, inputSchema, outputSchema?,
//! annotations, _meta}`. The MCP door (`/mcp`) lists these (plus its own `toolgate_await_call`),
//! and `GET /tools?format=mcp` serves the same list without that one.
//!
//! `inputSchema` is the clean form: a root object, `$ref`s inlined (many MCP clients do not
//! follow them), a recursive type kept as a `$ref` into the root `$defs`. `outputSchema`, when
//! the tool declares one, is widened to also admit the pending shape
//! ([`pending_approval_schema`]): any call may suspend for a person, and clients check
//! `structuredContent` against `outputSchema`. Each is a plain `serde_json` value, so the door
//! turns it into its MCP library's `Tool` by serde.

use serde_json::{Map, Value, json};

use crate::contract::erased::ToolDescriptor;
use crate::contract::meta::Effect;

/// The prefix of toolgate's own keys in a tool's `_meta`.
pub const META_PREFIX: &str = "dev.toolgate/";

/// The `_meta` key holding the tool's effect (`read`, `idempotent`, `write`).
pub const META_EFFECT: &str = "dev.toolgate/effect";

/// One tool as MCP's `tools/list` returns it: `name`, `description`, `inputSchema`,
/// `outputSchema` (only when the tool declares one, widened by [`output_schema`]),
/// `annotations` ([`annotations`]) and `_meta` (`"dev.toolgate/effect"`).
pub fn tool(tool: &ToolDescriptor) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("name".into(), tool.name.clone().into());
    out.insert("description".into(), tool.description.clone().into());
    out.insert(
        "inputSchema".into(),
        super::clean_input_schema(&tool.input_schema),
    );
    if let Some(output) = &tool.output_schema {
        out.insert("outputSchema".into(), output_schema(output));
    }
    out.insert("annotations".into(), annotations(tool.effect));
    let mut meta = Map::new();
    meta.insert(META_EFFECT.into(), tool.effect.as_str().into());
    out.insert("_meta".into(), Value::Object(meta));
    out
}

/// Every tool of `tools` as [`tool`] gives it, in the order given.
pub fn tools(tools: &[ToolDescriptor]) -> Vec<Value> {
    tools.iter().map(|t| Value::Object(tool(t))).collect()
}

/// What a suspended call answers in place of the tool's output:
/// `{"status": "pending_approval", "call_id": …, "reason": …}`, all three required, nothing
/// else.
pub fn pending_approval_schema() -> Value {
    json!({
        "type": "object",
        "description": "The call waits for a person's approval; its outcome comes later.",
        "properties": {
            "status": {"type": "string", "const": "pending_approval"},
            "call_id": {"type": "string", "description": "The suspended call."},
            "reason": {"type": "string", "description": "What the person is asked."},
        },
        "required": ["status", "call_id", "reason"],
        "additionalProperties": false,
    })
}

/// A tool's output schema as MCP's `outputSchema`: the clean form of it, or the pending shape.
/// `{"type": "object", "properties": {}, "anyOf": [<clean output>, <pending>]}` when the output
/// is an object (older clients want a root `"type": "object"`), else the bare `anyOf`. A recursive output
/// type's `$defs` move to the root, where its references point.
pub fn output_schema(output: &Value) -> Value {
    let mut clean = super::clean_schema(output);
    let defs = clean.as_object_mut().and_then(|root| root.remove("$defs"));
    let mut widened = Map::new();
    if describes_objects(&clean) {
        widened.insert("type".into(), "object".into());
        widened.insert("properties".into(), json!({}));
    }
    widened.insert("anyOf".into(), json!([clean, pending_approval_schema()]));
    if let Some(defs) = defs {
        widened.insert("$defs".into(), defs);
    }
    Value::Object(widened)
}

/// Whether every value `schema` accepts is an object.
fn describes_objects(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(_) => false,
        None => match schema.get("anyOf") {
            Some(Value::Array(options)) => {
                !options.is_empty() && options.iter().all(describes_objects)
            }
            _ => false,
        },
    }
}

/// MCP's tool annotations for an effect. `read`: read-only, not destructive, idempotent.
/// `idempotent`: not read-only, idempotent. `write`: not read-only, not idempotent, and
/// destructive (`destructiveHint: true`, MCP's own default, said outright: a write may change
/// the world in a way nobody can take back, which is why toolgate never repeats one).
pub fn annotations(effect: Effect) -> Value {
    match effect {
        Effect::Read => json!({
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
        }),
        Effect::Idempotent => json!({
            "readOnlyHint": false,
            "idempotentHint": true,
        }),
        Effect::Write => json!({
            "readOnlyHint": false,
            "destructiveHint": true,
            "idempotentHint": false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(effect: Effect, output_schema: Option<Value>) -> ToolDescriptor {
        ToolDescriptor {
            name: "refund".into(),
            description: "Refunds.".into(),
            effect,
            input_schema: json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "Req",
                "type": "object",
                "properties": {"amount": {"type": "integer", "format": "uint64", "minimum": 1}},
                "required": ["amount"],
            }),
            output_schema,
        }
    }

    #[test]
    fn a_tool_has_the_clean_input_annotations_and_meta() {
        let tool = tool(&descriptor(Effect::Write, None));
        assert_eq!(
            Value::Object(tool),
            json!({
                "name": "refund",
                "description": "Refunds.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"amount": {"type": "integer", "minimum": 1}},
                    "required": ["amount"],
                },
                "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false},
                "_meta": {"dev.toolgate/effect": "write"},
            })
        );
    }

    #[test]
    fn annotations_follow_the_effect() {
        assert_eq!(annotations(Effect::Read)["readOnlyHint"], true);
        assert_eq!(annotations(Effect::Read)["destructiveHint"], false);
        assert_eq!(annotations(Effect::Read)["idempotentHint"], true);
        assert_eq!(
            annotations(Effect::Idempotent),
            json!({"readOnlyHint": false, "idempotentHint": true})
        );
        assert_eq!(annotations(Effect::Write)["idempotentHint"], false);
    }

    #[test]
    fn an_object_output_is_widened_by_the_pending_shape_and_stays_an_object() {
        let output = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Receipt",
            "type": "object",
            "properties": {"id": {"type": "string"}, "next": {"$ref": "#/$defs/Link"}},
            "required": ["id"],
            "$defs": {"Link": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Link"}}}},
        });
        let tool = tool(&descriptor(Effect::Read, Some(output)));
        let widened = &tool["outputSchema"];
        assert_eq!(widened["type"], "object");
        assert_eq!(widened["anyOf"][1], pending_approval_schema());
        assert_eq!(
            widened["anyOf"][0],
            json!({
                "type": "object",
                "properties": {"id": {"type": "string"}, "next": {"$ref": "#/$defs/Link"}},
                "required": ["id"],
            })
        );
        assert_eq!(
            widened["$defs"]["Link"]["properties"]["next"],
            json!({"$ref": "#/$defs/Link"})
        );
    }

    #[test]
    fn a_non_object_output_is_a_bare_union() {
        let widened = output_schema(&json!({"type": "string"}));
        assert_eq!(
            widened,
            json!({"anyOf": [{"type": "string"}, pending_approval_schema()]})
        );
        let union = output_schema(&json!({"oneOf": [
            {"type": "object", "properties": {}},
            {"type": "object", "properties": {"a": {"type": "string"}}},
        ]}));
        assert_eq!(union["type"], "object");
    }

    #[test]
    fn the_pending_shape_takes_a_pending_answer_only() {
        let validator = jsonschema::validator_for(&pending_approval_schema()).unwrap();
        assert!(validator.is_valid(&json!({
            "status": "pending_approval", "call_id": "call_1", "reason": "Over the limit.",
        })));
        assert!(
            !validator.is_valid(&json!({"status": "completed", "call_id": "c", "reason": "r"}))
        );
        assert!(!validator.is_valid(&json!({"status": "pending_approval", "call_id": "c"})));
        assert!(!validator.is_valid(&json!({
            "status": "pending_approval", "call_id": "c", "reason": "r", "token": "t",
        })));
    }
}
