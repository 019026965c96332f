//! What `tools/list` answers, built once per generation of the tool list: every tool in the clean MCP form of
//! `crate::schema`, and the door's own `toolgate_await_call`.

use std::collections::HashMap;

use rmcp::model::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use super::MAX_AWAIT_S;
use crate::contract::error::InputViolation;
use crate::contract::registry::ToolSet;

/// The name of the door's built-in tool; no user tool may take it.
pub const AWAIT_TOOL: &str = crate::contract::registry::AWAIT_CALL_TOOL;

/// How long `toolgate_await_call` holds without `wait_seconds`: short enough for every MCP
/// client's request timeout.
const DEFAULT_AWAIT_S: u64 = 25;

/// The tools as each era lists them.
pub(crate) struct McpCatalog {
    /// For 2026-07-28 and later, in name order, `toolgate_await_call` among them.
    pub(super) tools: Vec<Tool>,
    /// For the `initialize` era, whose `outputSchema` must describe an object: a tool whose
    /// output is not one is listed without it (the SDK leaves out its `structuredContent` too).
    pub(super) legacy_tools: Vec<Tool>,
    by_name: HashMap<String, usize>,
    /// Per listed tool, whether its input schema promotes a parameter to an `Mcp-Param-*`
    /// header (SEP-2243's `x-mcp-header`), which only the SDK's transport checks.
    promotes_headers: Vec<bool>,
}

impl McpCatalog {
    /// The catalog of `tools`.
    pub(crate) fn new(tools: &ToolSet) -> Self {
        let mut listed: Vec<Tool> = crate::schema::mcp::tools(&tools.descriptors())
            .into_iter()
            .chain(std::iter::once(await_tool()))
            .filter_map(|tool| match serde_json::from_value::<Tool>(tool) {
                Ok(tool) => Some(tool),
                // Only a tool from an upstream server could be so malformed; it is not listed.
                Err(err) => {
                    tracing::warn!(error = %err, "a tool's MCP form is not an MCP tool; not listed");
                    None
                }
            })
            .collect();
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        let legacy_tools = listed
            .iter()
            .map(|tool| {
                let mut tool = tool.clone();
                let describes_object = tool
                    .output_schema
                    .as_ref()
                    .is_some_and(|schema| schema.get("type") == Some(&json!("object")));
                if !describes_object {
                    tool.output_schema = None;
                }
                tool
            })
            .collect();
        let by_name = listed
            .iter()
            .enumerate()
            .map(|(i, tool)| (tool.name.to_string(), i))
            .collect();
        let promotes_headers = listed
            .iter()
            .map(|tool| names_key(&tool.input_schema, PARAM_HEADER_KEY))
            .collect();
        McpCatalog {
            tools: listed,
            legacy_tools,
            by_name,
            promotes_headers,
        }
    }

    /// The tool of this name, as listed.
    pub(super) fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// Whether the tool of this name promotes parameters to `Mcp-Param-*` headers.
    pub(super) fn promotes_headers(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|&i| self.promotes_headers[i])
    }
}

/// The schema keyword by which SEP-2243 promotes a parameter to a header.
const PARAM_HEADER_KEY: &str = "x-mcp-header";

/// Whether `key` is a key anywhere in `object`.
fn names_key(object: &serde_json::Map<String, Value>, key: &str) -> bool {
    object.iter().any(|(name, value)| {
        name == key
            || match value {
                Value::Object(inner) => names_key(inner, key),
                Value::Array(items) => items
                    .iter()
                    .any(|item| item.as_object().is_some_and(|inner| names_key(inner, key))),
                _ => false,
            }
    })
}

/// `toolgate_await_call` as `tools/list` shows it.
fn await_tool() -> Value {
    json!({
        "name": AWAIT_TOOL,
        "title": "Await a call",
        "description": format!(
            "Waits for the outcome of a call that is pending a person's approval (or still \
             running), then answers it as the call itself would have: its output, or its \
             error. Give the call_id from the pending answer. Waits up to wait_seconds \
             (default {DEFAULT_AWAIT_S}, at most {MAX_AWAIT_S}); if it is still pending then, \
             call this again."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "call_id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 128,
                    "description": "The call_id of the pending call."
                },
                "wait_seconds": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_AWAIT_S,
                    "description": "How long to wait for the outcome, in seconds; 0 answers at once."
                }
            },
            "required": ["call_id"],
            "additionalProperties": false
        },
        "annotations": {
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": false
        },
        "_meta": {
            "dev.toolgate/effect": "read",
            "dev.toolgate/builtin": true
        }
    })
}

/// What `toolgate_await_call` was asked.
pub(super) struct AwaitInput {
    pub(super) call_id: String,
    pub(super) wait_seconds: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAwaitInput {
    call_id: String,
    wait_seconds: Option<u64>,
}

impl AwaitInput {
    /// Checks the arguments against the tool's schema (the same rules, said as violations).
    pub(super) fn parse(arguments: Value) -> Result<AwaitInput, Vec<InputViolation>> {
        let violation = |path: &str, message: String| {
            vec![InputViolation {
                path: path.into(),
                message,
            }]
        };
        let raw: RawAwaitInput = serde_json::from_value(arguments).map_err(|e| {
            violation(
                "",
                format!("{e}: expected {{\"call_id\": string, \"wait_seconds\"?: integer}}"),
            )
        })?;
        if raw.call_id.is_empty() || raw.call_id.len() > 128 {
            return Err(violation("/call_id", "must be 1 to 128 characters".into()));
        }
        let wait_seconds = raw.wait_seconds.unwrap_or(DEFAULT_AWAIT_S);
        if wait_seconds > MAX_AWAIT_S {
            return Err(violation(
                "/wait_seconds",
                format!("must be at most {MAX_AWAIT_S}"),
            ));
        }
        Ok(AwaitInput {
            call_id: raw.call_id,
            wait_seconds,
        })
    }
}
