//! `GET /openapi.json`: an OpenAPI 3.1 description of this API, built once at start-up.
//!
//! The fixed routes are described with utoipa next to their handlers. Each registered tool then
//! gets its own operation, `POST /tools/<name>/call`, whose request body carries the tool's real
//! input schema (and whose `200` carries its output schema, when it declares one), so a client
//! generated from the document can call each tool directly. A tool's schema is standalone JSON
//! Schema whose `$ref`s point into its own `$defs`; those are moved into `components/schemas`
//! under the tool's name and the references rewritten, so they resolve inside this document.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};
use utoipa::OpenApi;

use super::RestState;
use super::catalog::json_response;
use super::responses::{CallCompleted, CallFailed, CallSuspended, EditedAnswer, SuspensionTicket};
use super::{
    approvals, audit, calls, events, health, jwks, metrics, notifications, slack, standing, tools,
    upstreams, webhooks,
};
use crate::contract::erased::ToolDescriptor;
use crate::contract::meta::Effect;
use crate::contract::registry::ToolSet;
use crate::http::auth::Access;
use crate::http::error::{ErrorEnvelope, ErrorObject};
use crate::http::extract::Reaching;
use crate::http::gate::Gates;
use crate::store::{
    Approval, CallError, CallEvent, CallRecord, CallStatus, CallSummary, SuspensionView,
};

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
        calls::list, calls::get, calls::resolve,
        approvals::list, approvals::get, approvals::approve, approvals::reject, approvals::complete,
        standing::list, standing::revoke,
        events::events,
        webhooks::list, webhooks::retry,
        notifications::list,
        upstreams::changes, upstreams::accept,
        health::healthz, health::readyz,
        jwks::jwks,
        audit::entries, audit::exports, audit::receipt,
        metrics::serve,
        slack::interactions,
        openapi_json,
    ),
    components(schemas(
        ErrorEnvelope, ErrorObject, ToolDescriptor, Effect, CallCompleted, CallSuspended,
        CallFailed, SuspensionTicket, CallRecord, CallStatus, CallError, SuspensionView, Approval,
        CallEvent, CallSummary, crate::store::Delivery, crate::store::DeliveryStatus,
        webhooks::DeliveryList, notifications::NotificationList,
        crate::schema::Format, tools::ProviderToolList,
        crate::store::RejectOption, crate::store::ApprovalVote, approvals::ApprovalRecorded,
        crate::store::EditMark, EditedAnswer,
        crate::dispatch::StandingAsk, crate::store::StandingApproval, crate::store::StandingUse,
        standing::StandingList, audit::ExportList, crate::store::ExportState,
        upstreams::ChangeList, upstreams::AcceptRequest, upstreams::Accepted,
        crate::upstream::pins::ToolChange, crate::upstream::pins::ChangeKind,
        crate::upstream::pins::PinnedDefinition, crate::upstream::pins::ListedDefinition,
    )),
    tags(
        (name = "tools", description = "Tool schemas, and calling tools."),
        (name = "calls", description = "Records of calls."),
        (name = "approvals", description = "Suspended calls waiting for a person."),
        (name = "health", description = "Liveness and readiness."),
        (name = "metrics", description = "What the server does, for Prometheus (admins only)."),
        (name = "webhooks", description = "Deliveries of the change feed to webhooks (admin)."),
        (name = "integrations", description = "Platforms that decide approvals where people work (Slack's buttons), signed by the platform instead of a key."),
        (name = "notifications", description = "Messages of the notification channels, email and Slack (admin)."),
        (name = "upstreams", description = "Upstream MCP servers' tools held because their definition changed since it was pinned, and accepting a change (admin)."),
        (name = "attestations", description = "The public keys that verify the attestations toolgate signs on every upstream call."),
        (name = "audit", description = "The audit record: every call and decision on one hash chain, signed at checkpoints; a call's receipt (admin)."),
        (name = "openapi", description = "This document."),
    )
)]
struct ApiDoc;

/// This document.
#[utoipa::path(
    get, path = "/openapi.json", tag = "openapi", operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document of this server.", content_type = "application/json", body = Object))
)]
async fn openapi_json(State(app): State<RestState>, Reaching(reach): Reaching) -> Response {
    json_response(&app.catalog(&reach).1.openapi_json)
}

/// `/openapi.json`: every key.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new().route(
        "/openapi.json",
        get(openapi_json).route_layer(gates.route(Access::Document)),
    )
}

/// The full document for a server serving `tools`; `auth`: whether it has API keys (without,
/// it declares no security at all, since every request is accepted).
pub fn document(tools: &ToolSet, auth: bool) -> Value {
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
    doc["components"]["schemas"]["ProviderToolList"]["properties"]["tools"] =
        tools::provider_tools_schema();
    add_auth_and_shedding(&mut doc, auth);
    doc
}

/// With API keys, every operation but the health probes needs a bearer token (`401`) and may be
/// refused to the key's role (`403`); without, the document declares no security, as the server
/// asks for none. Every gated operation may be shed under load (`503`). Documented once here
/// rather than on each handler.
fn add_auth_and_shedding(doc: &mut Value, auth: bool) {
    if auth {
        doc["components"]["securitySchemes"] = json!({
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key's token.",
            }
        });
    }
    let envelope = |description: &str, header: bool| {
        let mut response = json!({
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
        });
        if header {
            response["headers"] = json!({"Retry-After": {
                "description": "Seconds to wait.",
                "schema": {"type": "string"},
            }});
        }
        response
    };
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let open = crate::http::auth::is_open(path);
        let Some(operations) = item.as_object_mut() else {
            continue;
        };
        for operation in operations.values_mut() {
            if open {
                continue;
            }
            if auth {
                operation["security"] = json!([{ "bearer": [] }]);
            }
            let Some(responses) = operation["responses"].as_object_mut() else {
                continue;
            };
            if auth {
                add_auth_responses(responses, &envelope);
            }
            let unavailable = "`store_unavailable` (with `Retry-After`): the database cannot be \
                 reached (a shared PostgreSQL that is down or restarting) or its disk is full or \
                 failing; nothing acknowledged is lost, retry later.";
            match responses.get_mut("503") {
                Some(existing) => {
                    let described = existing["description"].as_str().unwrap_or_default();
                    existing["description"] = json!(format!("{described} {unavailable}"));
                }
                None => {
                    responses.insert(
                        "503".to_owned(),
                        envelope(
                            &format!(
                                "`overloaded`: the server is at its limit of requests at once; \
                                 retry later. {unavailable}"
                            ),
                            true,
                        ),
                    );
                }
            }
        }
    }
}

/// `401` and `403`, on an operation of a server with API keys.
fn add_auth_responses(responses: &mut Map<String, Value>, envelope: &dyn Fn(&str, bool) -> Value) {
    responses.entry("401").or_insert_with(|| {
        let mut response = envelope("`unauthorized`: no valid bearer token.", false);
        response["headers"] = json!({"WWW-Authenticate": {
            "description": "`Bearer`.",
            "schema": {"type": "string"},
        }});
        response
    });
    responses.entry("403").or_insert_with(|| {
        let mut response = envelope(
            "`forbidden`: the key's role may not use this route, a provider's token matches no \
             grant, or (deciding) the call was made under the decider's own name \
             (`details.call_id`; an admin's too, approving or completing a call of a tool \
             whose approval policy keeps callers apart, `separate_from_caller`). \
             `insufficient_scope` (calling a tool): a provider's token lacks a scope the tool's \
             `required_scopes` names; nothing ran.",
            false,
        );
        response["headers"] = json!({"WWW-Authenticate": {
            "description": "With `insufficient_scope`: `Bearer error=\"insufficient_scope\", \
                            scope=\"<every scope the call needs>\", resource_metadata=\"<url>\"`.",
            "schema": {"type": "string"},
        }});
        response
    });
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
