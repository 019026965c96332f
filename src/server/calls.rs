//! `/calls`: reading calls, and settling those that need reconciliation.

use axum::extract::{RawQuery, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::approvals::page;
use super::auth::Principal;
use super::error::{ApiError, ErrorEnvelope};
use super::extract::{JsonBody, PathParam, QueryParams, check_depth};
use super::wait::{Wait, Waited, hold_until, parse_wait};
use crate::store::{CallFilter, CallRecord, CallStatus, CallSummary, Settlement};

/// Filters and paging of `GET /calls`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CallsQuery {
    /// Only calls in this status.
    pub status: Option<CallStatus>,
    /// Only calls of this tool.
    pub tool: Option<String>,
    /// How many to return, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One page of calls, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CallList {
    /// The calls, without input, output and events (read a call for those).
    pub calls: Vec<CallSummary>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// How a call that needs reconciliation is settled: exactly one of `output` (the effect
/// happened; checked against the tool's output schema when it declares one) and `error` (it did
/// not).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// The effect happened, with this output.
    pub output: Option<Value>,
    /// The effect did not happen, for this reason.
    pub error: Option<String>,
}

/// Lists calls, newest first, filtered by status and tool.
#[utoipa::path(
    get, path = "/calls", tag = "calls", operation_id = "listCalls",
    params(CallsQuery),
    responses(
        (status = 200, description = "A page of calls.", body = CallList),
        (status = 400, description = "`bad_request`: a bad filter, `limit` or `cursor`, or an unknown parameter.", body = ErrorEnvelope),
        (status = 500, description = "`internal`: the store failed.", body = ErrorEnvelope),
    )
)]
pub(super) async fn list(
    State(app): State<AppState>,
    QueryParams(query): QueryParams<CallsQuery>,
) -> Result<Json<CallList>, ApiError> {
    let (limit, after) = page(query.limit, query.cursor.as_deref())?;
    let filter = CallFilter {
        status: query.status,
        tool: query.tool,
    };
    let page = app
        .dispatcher
        .store()
        .list_calls(filter, after, limit)
        .await?;
    Ok(Json(CallList {
        calls: page.calls,
        next_cursor: page.next_cursor.map(|rowid| rowid.to_string()),
    }))
}

/// A call's record: status, input, output or error, pending suspension, and its history. A
/// caller sees only its own calls.
#[utoipa::path(
    get, path = "/calls/{call_id}", tag = "calls", operation_id = "getCall",
    params(
        ("call_id" = String, Path, description = "The call's id."),
        ("wait" = Option<u32>, Query, minimum = 0, maximum = 55, description = "If the call is `running` or `suspended`, hold the answer until its status changes, at most this many seconds (0 to 55; 0 answers at once). Answered `200` with the call as it is then, either way."),
    ),
    responses(
        (status = 200, description = "The call, with its events.", body = CallRecord),
        (status = 400, description = "`bad_request`: the path is malformed.", body = ErrorEnvelope),
        (status = 404, description = "`unknown_call`: no call has this id (or it is another caller's).", body = ErrorEnvelope),
        (status = 500, description = "`internal`: the store failed.", body = ErrorEnvelope),
    )
)]
pub(super) async fn get(
    State(app): State<AppState>,
    Extension(principal): Extension<Principal>,
    PathParam(call_id): PathParam,
    RawQuery(query): RawQuery,
    Wait(held): Wait,
) -> Result<Json<CallRecord>, ApiError> {
    tracing::Span::current().record("call_id", call_id.as_str());
    // `wait` is the only parameter.
    parse_wait(query.as_deref(), true)?;
    let read = || async {
        app.dispatcher
            .store()
            .call(&call_id)
            .await?
            // Another caller's call is answered as if it did not exist: its id tells nothing.
            .filter(|call| principal.sees_all_calls() || call.caller == principal.name)
            .ok_or_else(|| ApiError::UnknownCall(call_id.clone()))
    };
    let call = read().await?;
    let Some(held) = held else {
        return Ok(Json(call));
    };
    // Held while it runs or waits for a person, until its status changes.
    let waiting = |now: &CallRecord| {
        matches!(now.status, CallStatus::Running | CallStatus::Suspended)
            && now.status == call.status
    };
    if !waiting(&call) {
        return Ok(Json(call));
    }
    let now = hold_until(&app.feed, held, &call_id, || async {
        let now = read().await?;
        Ok((!waiting(&now)).then_some(now))
    })
    .await?;
    match now {
        Waited::Ready(now) => Ok(Json(now)),
        Waited::TimedOut => Ok(Json(read().await?)),
        // Its status is the one first read: a change since would have woken it.
        Waited::Released => Ok(Json(call)),
    }
}

/// Settles a call that needs reconciliation, recording who did it.
#[utoipa::path(
    post, path = "/calls/{call_id}/resolve", tag = "calls", operation_id = "resolveCall",
    params(("call_id" = String, Path, description = "The call's id.")),
    request_body = ResolveRequest,
    responses(
        (status = 200, description = "Settled: the call is `completed` or `failed`.", body = CallRecord),
        (status = 400, description = "`bad_request`: not exactly one of `output` and `error`, malformed JSON, or an unknown field.", body = ErrorEnvelope),
        (status = 404, description = "`unknown_call`: no call has this id.", body = ErrorEnvelope),
        (status = 409, description = "`not_reconcilable`: the call does not need reconciliation; `details` is its record.", body = ErrorEnvelope),
        (status = 413, description = "`payload_too_large`: the body exceeds the server's limit.", body = ErrorEnvelope),
        (status = 415, description = "`unsupported_media_type`: the body is not sent as `application/json`.", body = ErrorEnvelope),
        (status = 422, description = "`output_schema_violation`: `output` does not match the tool's output schema.", body = ErrorEnvelope),
        (status = 500, description = "`internal`: the store failed.", body = ErrorEnvelope),
    )
)]
pub(super) async fn resolve(
    State(app): State<AppState>,
    Extension(principal): Extension<Principal>,
    PathParam(call_id): PathParam,
    JsonBody(request): JsonBody<ResolveRequest>,
) -> Result<Json<CallRecord>, ApiError> {
    tracing::Span::current().record("call_id", call_id.as_str());
    let settlement = match (request.output, request.error) {
        (Some(output), None) => {
            check_depth(&output, app.max_json_depth)?;
            Settlement::Output(output)
        }
        (None, Some(error)) if error.chars().count() <= super::approvals::MAX_REASON_CHARS => {
            Settlement::Error(error)
        }
        _ => {
            return Err(ApiError::BadRequest(
                "Send exactly one of `output` (the effect happened) and `error` (it did not, \
                 at most 4096 characters)."
                    .into(),
            ));
        }
    };
    let call = app
        .dispatcher
        .reconcile(&call_id, settlement, principal.name.as_deref())
        .await?;
    Ok(Json(call))
}
