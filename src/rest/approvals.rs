//! `/approvals`: the queue of pending suspensions, and a person's approve, reject or complete.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing;
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RestState;
use super::error_responses::{
    DecisionRefused, HoldRefused, PathMalformed, StoreFailed, SuspensionExpired, ToolRunFailed,
    UnknownToken,
};
use super::responses::{CallCompleted, SuspensionTicket, call_response};
use crate::dispatch::Approved;
use crate::http::auth::{Access, Principal};
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::extract::{JsonBody, PathParam, QueryParams};
use crate::http::gate::Gates;
use crate::http::hold::{Held, Wait};
use crate::store::{Approval, ApprovalState, ApprovalVote, CallRecord};

/// `/approvals*`: approvers.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    let gate = || gates.route(Access::Approvals);
    Router::new()
        .route("/approvals", routing::get(list).route_layer(gate()))
        .route("/approvals/{token}", routing::get(get).route_layer(gate()))
        .route(
            "/approvals/{token}/approve",
            routing::post(approve).route_layer(gate()),
        )
        .route(
            "/approvals/{token}/reject",
            routing::post(reject).route_layer(gate()),
        )
        .route(
            "/approvals/{token}/complete",
            routing::post(complete).route_layer(gate()),
        )
}

/// The default page size of `GET /approvals`.
const DEFAULT_LIMIT: u32 = 50;
/// The largest page size of `GET /approvals`.
pub(super) const MAX_LIMIT: u32 = 500;

/// Paging of `GET /approvals`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// How many to return, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// When no approval is pending after the cursor, hold the request until one arrives, at
    /// most this many seconds (0 to 55).
    #[param(minimum = 0, maximum = 55)]
    #[allow(
        dead_code,
        reason = "read by the `Wait` extractor; declared so it is documented and accepted"
    )]
    pub wait: Option<u32>,
}

/// One page of pending suspensions, oldest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ApprovalList {
    /// The pending suspensions.
    pub approvals: Vec<Approval>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// The body of an approval.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {
    /// The approver's answer; must match the suspension's `input_schema`.
    pub input: Value,
    /// The call's input as the approver edited it, where the tool's approval policy allows
    /// edits (`edit_input`; elsewhere `422 edit_not_allowed`): checked against the tool's input
    /// schema (`422 invalid_input` with `details.errors`), and the tool runs with it. Equal to
    /// the input as it stands, it is no edit. With several approvers, an edit clears the
    /// approvals so far and counts as the first of the edited input.
    #[serde(default)]
    pub edited_input: Option<Value>,
    /// Also approve this tool's later calls by the same caller, for the next `for_s` seconds
    /// or `calls` calls (whichever ends first), where the tool's approval policy offers it
    /// (`standing_max_s`, `standing_max_calls`).
    #[serde(default)]
    pub standing: Option<crate::dispatch::StandingAsk>,
}

/// The body of a rejection.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectRequest {
    /// Why the call is rejected (at most 4096 characters), recorded on the call; optional, and
    /// an empty or blank one is recorded as none.
    #[serde(default)]
    pub reason: Option<String>,
    /// The name of one of the approval's `reject_options` (its tool's approval policy): the
    /// call's error then carries it and its description (`details.option`,
    /// `details.description`), and its message names them.
    #[serde(default)]
    pub option: Option<String>,
}

/// The body of an external completion.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The work's result: must match the tool's output schema (the receipt).
    pub output: Value,
}

/// Reads a page `limit` and an opaque `cursor` as handed out in `next_cursor`.
pub(super) fn page(
    limit: Option<u32>,
    cursor: Option<&str>,
) -> Result<(u32, Option<i64>), ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "`limit` must be between 1 and {MAX_LIMIT}."
        )));
    }
    let after = match cursor {
        None => None,
        Some(cursor) => Some(
            cursor
                .parse::<i64>()
                .ok()
                .filter(|seq| *seq > 0)
                .ok_or_else(|| {
                    ApiError::BadRequest(
                        "`cursor` is not one this server handed out as `next_cursor`.".into(),
                    )
                })?,
        ),
    };
    Ok((limit, after))
}

/// Lists pending suspensions, oldest first.
#[utoipa::path(
    get, path = "/approvals", tag = "approvals", operation_id = "listApprovals",
    params(ApprovalsQuery),
    responses(
        (status = 200, description = "A page of pending, unexpired suspensions.", body = ApprovalList),
        (status = 400, description = "`bad_request`: a bad `limit` or `cursor`, or an unknown parameter.", body = ErrorEnvelope),
        HoldRefused,
        StoreFailed,
    )
)]
pub(super) async fn list(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    QueryParams(query): QueryParams<ApprovalsQuery>,
    Wait(mut held): Wait,
) -> Result<Json<ApprovalList>, ApiError> {
    let (limit, after) = page(query.limit, query.cursor.as_deref())?;
    let hold = Held::hold(&mut held);
    let page = app
        .dispatcher
        .pending_approvals(&principal, None, after, limit, hold)
        .await?;
    Ok(Json(ApprovalList {
        approvals: page.approvals,
        next_cursor: page.next_cursor.map(|seq| seq.to_string()),
    }))
}

/// One pending suspension, with its call's input.
#[utoipa::path(
    get, path = "/approvals/{token}", tag = "approvals", operation_id = "getApproval",
    params(("token" = String, Path, description = "The suspension's token.")),
    responses(
        (status = 200, description = "The pending suspension, with `input`.", body = Approval),
        PathMalformed,
        UnknownToken,
        (status = 409, description = "`already_resolved`: it was approved, rejected or completed; `details` is the call's record.", body = ErrorEnvelope),
        SuspensionExpired,
        StoreFailed,
    )
)]
pub(super) async fn get(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(token): PathParam,
) -> Result<Json<Approval>, ApiError> {
    match app
        .dispatcher
        .decidable_approval(&principal, &token)
        .await?
    {
        Some(ApprovalState::Pending(approval)) => Ok(Json(approval)),
        Some(ApprovalState::Resolved(call)) => Err(ApiError::AlreadyResolved(Box::new(call))),
        Some(ApprovalState::Expired(call)) => Err(ApiError::SuspensionExpired(Box::new(call))),
        None => Err(ApiError::UnknownToken),
    }
}

/// An approval recorded short of the approvers the tool's policy needs (`approvals = N`): the
/// call is still suspended, under the same token, for the others.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ApprovalRecorded {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// Always `suspended`.
    #[schema(inline, value_type = String, pattern = "^suspended$")]
    pub status: &'static str,
    /// The suspension, still pending.
    pub suspension: SuspensionTicket,
    /// The approvals so far, this one last.
    pub approvals: Vec<ApprovalVote>,
    /// How many distinct approvers the call needs.
    pub approvals_required: u32,
}

impl ApprovalRecorded {
    fn of(approval: Approval) -> Self {
        ApprovalRecorded {
            call_id: approval.call_id,
            tool: approval.tool,
            status: "suspended",
            suspension: SuspensionTicket {
                token: approval.token,
                reason: approval.reason,
                input_schema: approval.input_schema,
            },
            approvals: approval.approvals,
            approvals_required: approval.approvals_required,
        }
    }
}

/// Approves a suspension: the tool runs again with the call's input and this `input` as its
/// resume value; its result is the call's new outcome. When the tool's policy needs several
/// distinct approvers, an approval short of them is recorded (`202`, the approvals so far) and
/// the last one runs the tool.
#[utoipa::path(
    post, path = "/approvals/{token}/approve", tag = "approvals", operation_id = "approve",
    params(("token" = String, Path, description = "The suspension's token.")),
    request_body = ApproveRequest,
    responses(
        (status = 200, description = "The tool ran again and completed.", body = CallCompleted),
        (status = 202, description = "The tool ran again and suspended anew, with a new token (`CallSuspended`); or the approval was recorded, short of the approvers the tool's policy needs, and the call waits for the others under the same token (`ApprovalRecorded`).", body = ApprovalRecorded),
        (status = 400, description = "`bad_request`: malformed JSON, a missing `input`, an unknown field, or JSON nested too deep.", body = ErrorEnvelope),
        (status = 409, description = "`already_approved`: this principal approved it before and the policy needs others too; `details.approvals` are the approvals so far, `details.approvals_required` how many it needs. `already_resolved`: it was resolved before; `details` is the call's record. `lease_lost`: this replica lost its lease while the tool re-ran and the call was settled meanwhile; the outcome was refused and kept as `late_outcome` (`details` is the call).", body = ErrorEnvelope),
        DecisionRefused,
        (status = 422, description = "`invalid_resume_input`: `input` does not fit the suspension's `input_schema` (`details.errors`); `invalid_input`: `edited_input` does not fit the tool's input schema (`details.errors`); `edit_not_allowed`: the tool's approval policy allows no edits (`edit_input`); `standing_not_allowed`: a `standing` approval where the tool's policy offers none, needs several approvers, or the call is the approver's own (or has no named caller); `standing_out_of_bounds`: `standing.for_s` or `standing.calls` beyond the policy's `standing_max_s` or `standing_max_calls` (`details.field`, `details.max`). Nothing was decided; it stays pending.", body = ErrorEnvelope),
        ToolRunFailed,
    )
)]
pub(super) async fn approve(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(token): PathParam,
    JsonBody(request): JsonBody<ApproveRequest>,
) -> Result<Response, ApiError> {
    let approved = app
        .dispatcher
        .approve_with(
            &token,
            request.input,
            crate::dispatch::ApproveExtras {
                edited_input: request.edited_input,
                standing: request.standing,
            },
            &principal,
        )
        .await?;
    Ok(match approved {
        Approved::Ran(result) => call_response(result),
        Approved::Recorded(approval) => {
            (StatusCode::ACCEPTED, Json(ApprovalRecorded::of(*approval))).into_response()
        }
    })
}

/// Rejects a suspension: the call becomes `rejected` and the tool does not run.
#[utoipa::path(
    post, path = "/approvals/{token}/reject", tag = "approvals", operation_id = "reject",
    params(("token" = String, Path, description = "The suspension's token.")),
    request_body = RejectRequest,
    responses(
        (status = 200, description = "Rejected; the call's record.", body = CallRecord),
        (status = 400, description = "`bad_request`: malformed JSON, a `reason` longer than 4096 characters, an `option` that is not one of the approval's `reject_options`, or an unknown field.", body = ErrorEnvelope),
        (status = 409, description = "`already_resolved`: it was resolved before; `details` is the call's record.", body = ErrorEnvelope),
        DecisionRefused,
        StoreFailed,
    )
)]
pub(super) async fn reject(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(token): PathParam,
    JsonBody(request): JsonBody<RejectRequest>,
) -> Result<Json<CallRecord>, ApiError> {
    let call = app
        .dispatcher
        .reject(&token, request.reason, request.option, &principal)
        .await?;
    Ok(Json(call))
}

/// Completes a suspension with work done outside the server: the call becomes `completed` with
/// `output`, which must match the tool's output schema (its receipt); the tool does not run.
#[utoipa::path(
    post, path = "/approvals/{token}/complete", tag = "approvals", operation_id = "complete",
    params(("token" = String, Path, description = "The suspension's token.")),
    request_body = CompleteRequest,
    responses(
        (status = 200, description = "Completed with this output.", body = CallCompleted),
        (status = 400, description = "`bad_request`: malformed JSON, a missing `output`, an unknown field, or JSON nested too deep.", body = ErrorEnvelope),
        (status = 409, description = "`completion_not_allowed`: the tool declares no output schema, or its policy needs several approvers; or `already_resolved`.", body = ErrorEnvelope),
        DecisionRefused,
        (status = 422, description = "`output_schema_violation`: `output` does not match the tool's output schema (`details.errors`); it stays pending.", body = ErrorEnvelope),
        StoreFailed,
    )
)]
pub(super) async fn complete(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(token): PathParam,
    JsonBody(request): JsonBody<CompleteRequest>,
) -> Result<Response, ApiError> {
    let result = app
        .dispatcher
        .complete(&token, request.output, &principal)
        .await?;
    Ok(call_response(result))
}
