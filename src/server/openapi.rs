//! `GET /openapi.json`: an OpenAPI 3.1 description of this API, built once at start-up.
//!
//! The fixed routes are described with utoipa next to their handlers. Each registered tool then
//! gets its own operation, `POST /tools/<name>/call`, whose request body carries the tool's real
//! input schema (and whose `200` carries its output schema, when it declares one), so a client
//! generated from the document can call each tool directly. A tool's schema is standalone JSON
//! Schema whose `$ref`s point into its own `$defs`; those are moved into `components/schemas`
//! under the tool's name and the references rewritten, so they resolve inside this document.

use serde_json::{Map, Value, json};
use utoipa::OpenApi;

use super::error::{ErrorEnvelope, ErrorObject};
use super::responses::{CallCompleted, CallFailed, CallSuspended, SuspensionTicket};
use super::{approvals, calls, health, tools};
use crate::contract::erased::ToolDescriptor;
use crate::contract::meta::Effect;
use crate::contract::registry::ToolSet;
use crate::store::{Approval, CallError, CallRecord, CallStatus, SuspensionView};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "toolgate",
        description = "Tool schemas and tool calls over REST, with durable human approvals. \
                       Every error answers with one envelope: \
                       `{\"error\": {\"code\", \"message\", \"details\"}}`."
    ),
    paths(
        tools::list, tools::get, tools::call,
        calls::get,
        approvals::list, approvals::get, approvals::approve, approvals::reject,
        health::healthz, health::readyz,
        openapi_json,
    ),
    components(schemas(
        ErrorEnvelope, ErrorObject, ToolDescriptor, Effect, CallCompleted, CallSuspended,
        CallFailed, SuspensionTicket, CallRecord, CallStatus, CallError, SuspensionView, Approval,
    )),
    tags(
        (name = "tools", description = "Tool schemas, and calling tools."),
        (name = "calls", description = "Records of calls."),
        (name = "approvals", description = "Suspended calls waiting for a person."),
        (name = "health", description = "Liveness and readiness."),
        (name = "openapi", description = "This document."),
    )
)]
struct ApiDoc;

/// This document.
#[utoipa::path(
    get, path = "/openapi.json", tag = "openapi", operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document of this server.", content_type = "application/json", body = Object))
)]
#[allow(dead_code)] // Only documents the route; the router serves pre-built bytes.
fn openapi_json() {}

/// The full document for a server serving `tools`.
pub fn document(tools: &ToolSet) -> Value {
    let mut doc =
        serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serializes to JSON");
    let template = doc["paths"]["/tools/{name}/call"]["post"].clone();
    let mut components = Map::new();
    let mut paths = Map::new();
    for tool in tools {
        let name = tool.name();
        let input_ref = hoist(
            tool.input_schema(),
            &format!("tool.{name}.input"),
            &mut components,
        );
        let mut op = template.clone();
        let obj = op.as_object_mut().expect("an operation is an object");
        obj.remove("parameters");
        obj.insert("operationId".into(), format!("call_{name}").into());
        let summary = tool.description().lines().next().unwrap_or(name).to_owned();
        obj.insert("summary".into(), summary.into());
        obj.insert(
            "description".into(),
            format!(
                "{}\n\nEffect: `{}`. Calls tool `{name}`; the same as `POST /tools/{{name}}/call`.",
                tool.description(),
                tool.effect()
            )
            .into(),
        );
        obj.insert(
            "requestBody".into(),
            json!({
                "required": true,
                "content": {"application/json": {"schema": {
                    "type": "object",
                    "required": ["input"],
                    "additionalProperties": false,
                    "properties": {"input": input_ref},
                }}},
            }),
        );
        if let Some(responses) = obj.get_mut("responses").and_then(Value::as_object_mut) {
            // The tool exists, so this operation never answers `unknown_tool`.
            responses.remove("404");
            if let Some(output) = tool.output_schema() {
                let output_ref = hoist(output, &format!("tool.{name}.output"), &mut components);
                responses["200"]["content"]["application/json"]["schema"] = json!({
                    "type": "object",
                    "required": ["call_id", "tool", "status", "output"],
                    "properties": {
                        "call_id": {"type": "string"},
                        "tool": {"type": "string", "const": name},
                        "status": {"type": "string", "const": "completed"},
                        "output": output_ref,
                    },
                });
            }
        }
        paths.insert(format!("/tools/{name}/call"), json!({ "post": op }));
    }
    if let Some(existing) = doc["paths"].as_object_mut() {
        existing.extend(paths);
    }
    if let Some(schemas) = doc["components"]["schemas"].as_object_mut() {
        schemas.extend(components);
    }
    doc
}

/// Registers `schema` as the component `prefix` (its `$defs` as `prefix.<def>`), rewriting its
/// references to match, and returns a `$ref` to it.
fn hoist(schema: &Value, prefix: &str, components: &mut Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(obj) = &mut schema {
        obj.remove("$schema");
        if let Some(Value::Object(defs)) = obj.remove("$defs") {
            for (def, mut body) in defs {
                rewrite_refs(&mut body, prefix);
                components.insert(format!("{prefix}.{}", sanitize(&def)), body);
            }
        }
    }
    rewrite_refs(&mut schema, prefix);
    components.insert(prefix.to_owned(), schema);
    json!({ "$ref": format!("#/components/schemas/{prefix}") })
}

/// Points `#` and `#/$defs/<def>` references at the hoisted components.
fn rewrite_refs(value: &mut Value, prefix: &str) {
    match value {
        Value::Object(obj) => {
            for (key, child) in obj.iter_mut() {
                match (key.as_str(), &*child) {
                    ("$ref", Value::String(target)) => {
                        let rewritten = if target == "#" {
                            Some(format!("#/components/schemas/{prefix}"))
                        } else {
                            target.strip_prefix("#/$defs/").map(|def| {
                                format!("#/components/schemas/{prefix}.{}", sanitize(def))
                            })
                        };
                        if let Some(rewritten) = rewritten {
                            *child = Value::String(rewritten);
                        }
                    }
                    _ => rewrite_refs(child, prefix),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rewrite_refs(item, prefix)),
        _ => {}
    }
}

/// Component names may hold only `[a-zA-Z0-9._-]`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}
