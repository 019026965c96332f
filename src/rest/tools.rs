//! `/tools`: the tool list, one tool's descriptor, and calling a tool.

use axum::extract::State;
use axum::response::Response;
use axum::routing;
use axum::{Extension, Router};
use serde::Deserialize;
use serde_json::Value;

use super::RestState;
use super::catalog::json_response;
use super::error_responses::{BodyRefused, PathMalformed, ToolRunFailed};
use super::responses::{CallCompleted, CallSuspended, call_response};
use crate::contract::erased::ToolDescriptor;
use crate::dispatch::{CallOptions, CallOutcome};
use crate::http::auth::{Access, Principal};
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::extract::{JsonBody, PathParam, QueryParams, Reaching};
use crate::http::gate::Gates;
use crate::http::hold::Wait;
use crate::http::idempotency::IdempotencyKey;
use crate::schema::Format;

/// `/tools`, `/tools/{name}`, `/tools/{name}/call`: callers.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new()
        .route(
            "/tools",
            routing::get(list).route_layer(gates.route(Access::Tools)),
        )
        .route(
            "/tools/{name}",
            routing::get(get).route_layer(gates.route(Access::Tools)),
        )
        .route(
            "/tools/{name}/call",
            routing::post(call).route_layer(gates.route(Access::Tools)),
        )
}

/// `GET /tools`: every tool, in name order.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ToolList {
    /// The tools' descriptors.
    pub tools: Vec<ToolDescriptor>,
}

/// `GET /tools?format=…`: every tool, in name order, in one provider's format.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ProviderToolList {
    /// Exactly the value of the provider's request field `tools`.
    #[schema(value_type = Vec<Object>)]
    pub tools: Value,
}

/// The schema of [`ProviderToolList`]'s `tools`, as the document gives it. Written by hand
/// since utoipa has no `not`: a list of arbitrary objects would also match a list of
/// descriptors, and `ToolListAnswer`'s `oneOf` must match every answer exactly once. So a
/// provider's list holds objects that are not descriptors, and at least one: an empty list is
/// the same answer in every format, and is the descriptors' branch.
pub(super) fn provider_tools_schema() -> Value {
    serde_json::json!({
        "description": "Exactly the value of the provider's request field `tools`.",
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "not": {"$ref": "#/components/schemas/ToolDescriptor"},
        },
    })
}

/// The answer of `GET /tools`: descriptors, or a provider's format.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(
    dead_code,
    reason = "documents the route; the router serves pre-built bytes"
)]
enum ToolListAnswer {
    Descriptors(ToolList),
    Provider(ProviderToolList),
}

/// The query of `GET /tools`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ToolsQuery {
    /// A provider's format: `openai` (Chat Completions), `openai-responses`, `anthropic`,
    /// `gemini` or `mcp`. `tools` is then exactly the value of that provider's request field
    /// `tools`. Without it, toolgate's own descriptors.
    #[param(value_type = Option<Format>)]
    pub format: Option<String>,
}

/// The body of `POST /tools/{name}/call`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// The tool's input; must match its `input_schema`.
    pub input: Value,
}

/// Lists every tool with its input and output schemas, as toolgate's own descriptors or in an
/// LLM provider's format.
///
/// A provider's copy of a schema may leave out a constraint the provider cannot express; every
/// call is still checked against the tool's own schema. OpenAI's strict mode (`strict: true`)
/// makes optional properties nullable, so input admission reads a `null` for a property the
/// tool's schema makes optional but not nullable as the property left out.
#[utoipa::path(
    get, path = "/tools", tag = "tools", operation_id = "listTools",
    params(ToolsQuery),
    responses(
        (status = 200, description = "Every tool, in name order: `{\"tools\": [descriptor, …]}`, or with `format`, `{\"tools\": X}` where X is the value for that provider's request field `tools`.", body = ToolListAnswer),
        (status = 400, description = "`bad_request`: an unknown `format`.", body = ErrorEnvelope),
    )
)]
pub(super) async fn list(
    State(app): State<RestState>,
    Reaching(reach): Reaching,
    QueryParams(query): QueryParams<ToolsQuery>,
) -> Result<Response, ApiError> {
    let catalog = app.catalog(&reach);
    let Some(name) = query.format else {
        return Ok(json_response(&catalog.1.tools_json));
    };
    let format = Format::from_name(&name).ok_or_else(|| {
        let known: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
        ApiError::BadRequest(format!(
            "Unknown format `{name}`: expected one of {}.",
            known.join(", ")
        ))
    })?;
    Ok(json_response(catalog.1.provider_tools(format)))
}

/// One tool's descriptor.
#[utoipa::path(
    get, path = "/tools/{name}", tag = "tools", operation_id = "getTool",
    params(("name" = String, Path, description = "The tool's name.")),
    responses(
        (status = 200, description = "The tool.", body = ToolDescriptor),
        (status = 404, description = "`unknown_tool`: no tool has this name, or none the principal's `tools` reach.", body = ErrorEnvelope),
        PathMalformed,
    )
)]
pub(super) async fn get(
    State(app): State<RestState>,
    Reaching(reach): Reaching,
    PathParam(name): PathParam,
) -> Result<Response, ApiError> {
    app.catalog(&reach)
        .1
        .descriptor_json
        .get(&name)
        .map(json_response)
        .ok_or(ApiError::UnknownTool(name))
}

/// Calls a tool by name. Each tool also has its own operation, `/tools/<name>/call`, whose
/// request body carries that tool's input schema.
#[utoipa::path(
    post, path = "/tools/{name}/call", tag = "tools", operation_id = "callTool",
    params(
        ("name" = String, Path, description = "The tool's name."),
        ("wait" = Option<u32>, Query, minimum = 0, maximum = 55, description = "If the call suspends, hold the answer up to this many seconds for a person's decision and answer what it produced (`200` with the output, or the error); when the time is up, the usual `202`."),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$", description = "1 to 255 visible ASCII characters. Makes retries safe: a second request with the same key (for this tool and caller) is answered with the first call's result instead of running again. A tool that declares its own key uses that instead."),
    ),
    request_body = CallRequest,
    responses(
        (status = 200, description = "The call completed. With `Idempotent-Replayed: true`, this is the answer of an earlier request with the same idempotency key.", body = CallCompleted,
            headers(("Idempotent-Replayed" = String, description = "`true` when the answer is a replay."))),
        (status = 202, description = "The call waits for a person; approve or reject it with the suspension's token.", body = CallSuspended,
            headers(("Idempotent-Replayed" = String, description = "`true` when the answer is a replay."))),
        (status = 400, description = "`bad_request`: malformed JSON, a missing `input`, an unknown field, JSON nested too deep, or a bad `Idempotency-Key`.", body = ErrorEnvelope),
        (status = 404, description = "`unknown_tool`: no tool has this name, or none the principal's `tools` reach.", body = ErrorEnvelope),
        (status = 409, description = "`call_in_progress` (with `Retry-After`): the call with this idempotency key still runs. `needs_reconciliation`: it may have had its effect and waits for a person (`details` is the call). `rejected`: a replayed call that a person rejected. `lease_lost`: this replica lost its lease while the tool ran and the call was settled meanwhile; the outcome was refused and kept in the call's history as `late_outcome` (`details` is the call).", body = ErrorEnvelope,
            headers(("Retry-After" = String, description = "Seconds to wait, with `call_in_progress`."))),
        (status = 410, description = "`suspension_expired`: a replayed call whose suspension expired.", body = ErrorEnvelope),
        BodyRefused,
        (status = 422, description = "`invalid_input`: the input does not fit the tool's input schema (`details.errors`); the tool did not run. `idempotency_key_reused`: the key belongs to a call with another input.", body = ErrorEnvelope),
        (status = 429, description = "`rate_limited`: a quota of the caller's refuses the call (`details.quota`: `calls_per_minute`, `max_running`, or `max_held` for a `?wait=` request; `details.tool` for a tool's own quota); nothing ran.", body = ErrorEnvelope,
            headers(("Retry-After" = String, description = "Seconds to wait, rounded up."), ("RateLimit-Policy" = String, description = "The quota: `\"calls\";q=<burst>;w=<seconds>` for a rate, `\"running\";q=<n>;qu=\"concurrent-requests\"` for a count (`.<tool>` after the name for a tool's own)."), ("RateLimit" = String, description = "What is left of it: `\"calls\";r=0;t=<seconds>`."))),
        ToolRunFailed,
        (status = 503, description = "`overloaded` (with `Retry-After`): the tool is at its concurrency limit; nothing ran.", body = ErrorEnvelope,
            headers(("Retry-After" = String, description = "Seconds to wait."))),
    )
)]
pub(super) async fn call(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(name): PathParam,
    IdempotencyKey(idempotency_key): IdempotencyKey,
    Wait(held): Wait,
    JsonBody(request): JsonBody<CallRequest>,
) -> Result<Response, ApiError> {
    // Kept only for a request that may wait: what it is shown then is the lifecycle's rule too.
    let asker = held.as_ref().map(|_| principal.clone());
    let options = CallOptions {
        principal,
        idempotency_key,
    };
    // The lifecycle's future is large (every step of a call, every kind of tool): boxed, it is
    // moved once, not once by each layer the route's future passes through.
    let result = Box::pin(app.dispatcher.call(&name, request.input, options)).await?;
    match (held, asker, &result.outcome) {
        // `?wait=`: held until a person's decision has an outcome, answered as the call's own
        // answer would be; when the time is up, the usual `202`.
        (Some(mut held), Some(asker), CallOutcome::Suspended { token, .. }) => {
            let token = token.clone();
            let decided =
                Box::pin(
                    app.dispatcher
                        .await_decision(&asker, result, Some(&token), &mut held),
                )
                .await?;
            Ok(call_response(decided))
        }
        (Some(mut held), Some(asker), CallOutcome::Withheld) => {
            let decided = Box::pin(
                app.dispatcher
                    .await_decision(&asker, result, None, &mut held),
            )
            .await?;
            Ok(call_response(decided))
        }
        _ => Ok(call_response(result)),
    }
}
