//! Interim: the MCP form of the tools, until the schema-cleaning module lands.

use serde_json::{Value, json};

use crate::contract::erased::ToolDescriptor;
use crate::contract::meta::Effect;

/// Each tool as MCP's `tools/list` shows it.
pub fn mcp_tools(tools: &[ToolDescriptor]) -> Vec<Value> {
    tools
        .iter()
        .map(|tool| {
            let mut input = tool.input_schema.clone();
            if let Some(map) = input.as_object_mut() {
                map.remove("$schema");
                map.remove("title");
            }
            let annotations = match tool.effect {
                Effect::Read => json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true}),
                Effect::Idempotent => json!({"readOnlyHint": false, "idempotentHint": true}),
                Effect::Write => json!({"readOnlyHint": false, "idempotentHint": false}),
            };
            let mut out = json!({
                "name": tool.name,
                "description": tool.description,
                "inputSchema": input,
                "annotations": annotations,
                "_meta": {"dev.toolgate/effect": tool.effect},
            });
            if let Some(output) = &tool.output_schema {
                let mut output = output.clone();
                if let Some(map) = output.as_object_mut() {
                    map.remove("$schema");
                    map.remove("title");
                }
                let defs = output.as_object_mut().and_then(|map| map.remove("$defs"));
                let pending = json!({"type": "object", "properties": {"status": {"const": "pending_approval"}, "call_id": {"type": "string"}, "reason": {"type": "string"}}, "required": ["status", "call_id", "reason"], "additionalProperties": false});
                out["outputSchema"] = json!({"type": "object", "anyOf": [output, pending]});
                if let Some(defs) = defs {
                    out["outputSchema"]["$defs"] = defs;
                }
            }
            out
        })
        .collect()
}
