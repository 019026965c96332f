//! `/calls`: reading calls, and settling those that need reconciliation.

use axum::extract::{RawQuery, State};
use axum::routing;
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RestState;
use super::approvals::page;
use super::error_responses::{BodyRefused, HoldRefused, PathMalformed, StoreFailed};
use crate::http::auth::{Access, Principal};
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::extract::{JsonBody, PathParam, QueryParams};
use crate::http::gate::Gates;
use crate::http::hold::{Held, Wait, parse_wait};
use crate::store::{CallFilter, CallRecord, CallStatus, CallSummary, Settlement};

/// `GET /calls`, `POST /calls/{call_id}/resolve`: approvers; `GET /calls/{call_id}`: callers
/// too (their own).
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new()
        .route(
            "/calls",
            routing::get(list).route_layer(gates.route(Access::Approvals)),
        )
        .route(
            "/calls/{call_id}",
            routing::get(get).route_layer(gates.route(Access::OwnCalls)),
        )
        .route(
            "/calls/{call_id}/resolve",
            routing::post(resolve).route_layer(gates.route(Access::Approvals)),
        )
}

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
        StoreFailed,
    )
)]
pub(super) async fn list(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    QueryParams(query): QueryParams<CallsQuery>,
) -> Result<Json<CallList>, ApiError> {
    let (limit, after) = page(query.limit, query.cursor.as_deref())?;
    let filter = CallFilter {
        status: query.status,
        tool: query.tool,
    };
    let page = app
        .dispatcher
        .visible_calls(&principal, filter, after, limit)
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
        PathMalformed,
        (status = 404, description = "`unknown_call`: no call has this id (or it is another caller's).", body = ErrorEnvelope),
        HoldRefused,
        StoreFailed,
    )
)]
pub(super) async fn get(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(call_id): PathParam,
    RawQuery(query): RawQuery,
    Wait(mut held): Wait,
) -> Result<Json<CallRecord>, ApiError> {
    tracing::Span::current().record("call_id", call_id.as_str());
    // `wait` is the only parameter.
    parse_wait(query.as_deref(), true)?;
    let hold = Held::hold(&mut held);
    let call = app
        .dispatcher
        .watch_call(&principal, &call_id, hold)
        .await?;
    Ok(Json(call))
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
        BodyRefused,
        (status = 422, description = "`output_schema_violation`: `output` does not match the tool's output schema.", body = ErrorEnvelope),
        StoreFailed,
    )
)]
pub(super) async fn resolve(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(call_id): PathParam,
    JsonBody(request): JsonBody<ResolveRequest>,
) -> Result<Json<CallRecord>, ApiError> {
    tracing::Span::current().record("call_id", call_id.as_str());
    let settlement = match (request.output, request.error) {
        (Some(output), None) => Settlement::Output(output),
        (None, Some(error)) => Settlement::Error(error),
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
        .reconcile(&call_id, settlement, &principal)
        .await?;
    Ok(Json(call))
}
