//! `/tools`: the tool list, one tool's descriptor, and calling a tool.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::AppState;
use super::error::{ApiError, ErrorEnvelope};
use super::extract::{JsonBody, PathParam};
use super::responses::{CallCompleted, CallSuspended, call_response};
use crate::contract::erased::ToolDescriptor;

/// `GET /tools`: every tool, in name order.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ToolList {
    /// The tools' descriptors.
    pub tools: Vec<ToolDescriptor>,
}

/// The body of `POST /tools/{name}/call`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// The tool's input; must match its `input_schema`.
    pub input: Value,
}

/// Answers with JSON serialized once at start-up.
pub(super) fn json_bytes(bytes: &axum::body::Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes.clone()).into_response()
}

/// Lists every tool with its input and output schemas.
#[utoipa::path(
    get, path = "/tools", tag = "tools", operation_id = "listTools",
    responses((status = 200, description = "Every tool, in name order.", body = ToolList))
)]
pub(super) async fn list(State(app): State<AppState>) -> Response {
    json_bytes(&app.catalog.tools_json)
}

/// One tool's descriptor.
#[utoipa::path(
    get, path = "/tools/{name}", tag = "tools", operation_id = "getTool",
    params(("name" = String, Path, description = "The tool's name.")),
    responses(
        (status = 200, description = "The tool.", body = ToolDescriptor),
        (status = 404, description = "`unknown_tool`: no tool has this name.", body = ErrorEnvelope),
        (status = 400, description = "`bad_request`: the path is malformed.", body = ErrorEnvelope),
    )
)]
pub(super) async fn get(
    State(app): State<AppState>,
    PathParam(name): PathParam,
) -> Result<Response, ApiError> {
    app.catalog
        .descriptor_json
        .get(&name)
        .map(json_bytes)
        .ok_or(ApiError::UnknownTool(name))
}

/// Calls a tool by name. Each tool also has its own operation, `/tools/<name>/call`, whose
/// request body carries that tool's input schema.
#[utoipa::path(
    post, path = "/tools/{name}/call", tag = "tools", operation_id = "callTool",
    params(("name" = String, Path, description = "The tool's name.")),
    request_body = CallRequest,
    responses(
        (status = 200, description = "The call completed.", body = CallCompleted),
        (status = 202, description = "The call waits for a person; approve or reject it with the suspension's token.", body = CallSuspended),
        (status = 400, description = "`bad_request`: malformed JSON, a missing `input`, or an unknown field.", body = ErrorEnvelope),
        (status = 404, description = "`unknown_tool`: no tool has this name.", body = ErrorEnvelope),
        (status = 413, description = "`payload_too_large`: the body exceeds the server's limit.", body = ErrorEnvelope),
        (status = 415, description = "`unsupported_media_type`: the body is not sent as `application/json`.", body = ErrorEnvelope),
        (status = 422, description = "`invalid_input`: the input does not fit the tool's input schema (`details.errors`); the tool did not run.", body = ErrorEnvelope),
        (status = 500, description = "`tool_failed` (the tool returned an error) or `tool_panicked`; the body also carries `call_id`, `tool` and `\"status\": \"failed\"` (see `CallFailed`). Or `internal`: the server failed.", body = ErrorEnvelope),
    )
)]
pub(super) async fn call(
    State(app): State<AppState>,
    PathParam(name): PathParam,
    JsonBody(request): JsonBody<CallRequest>,
) -> Result<Response, ApiError> {
    let result = app.dispatcher.call(&name, request.input).await?;
    Ok(call_response(result))
}
