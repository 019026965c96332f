//! What a call or an approval answers: the attempt's outcome, in one shape for both.
//!
//! `200` completed, `202` suspended (with the token an approver uses), or the failure's status
//! with `"status": "failed"` and the error envelope.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use crate::dispatch::{CallOutcome, CallResult, FailureKind};
use crate::http::error::ErrorObject;
use crate::store::{CallEdit, CallStatus, EditMark};

/// A call that completed.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CallCompleted {
    /// The call's id, for `GET /calls/{call_id}`.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// Always `completed`.
    #[schema(inline, value_type = String, pattern = "^completed$")]
    pub status: &'static str,
    /// The tool's output.
    pub output: Value,
    /// When an approver edited the call's input before it ran: who, and both inputs.
    #[serde(flatten)]
    pub edit: EditedAnswer,
}

/// What a call's answer says when an approver edited its input before it ran (its tool's
/// approval policy allowing edits, `edit_input`): so that the caller, an agent often, learns
/// what was acceptable. Each field is left out when nobody edited it.
#[derive(Serialize, Default, utoipa::ToSchema)]
pub struct EditedAnswer {
    /// Who edited it, and when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited: Option<EditMark>,
    /// The input the call ran with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The input the call was made with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_input: Option<Value>,
}

impl EditedAnswer {
    fn of(edit: Option<Box<CallEdit>>) -> Self {
        match edit.map(|edit| *edit) {
            Some(CallEdit {
                mark,
                original_input,
                input,
            }) => EditedAnswer {
                edited: Some(mark),
                input: Some(input),
                original_input: Some(original_input),
            },
            None => EditedAnswer::default(),
        }
    }
}

/// A call waiting for a person.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CallSuspended {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// Always `suspended`.
    #[schema(inline, value_type = String, pattern = "^suspended$")]
    pub status: &'static str,
    /// What the approver must decide, and how to answer; absent on a replay for a caller
    /// other than the one who made the call (a tool's own idempotency key), which is shown
    /// only where the call stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspension: Option<SuspensionTicket>,
}

/// The suspension a `202` hands out.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SuspensionTicket {
    /// Single-use token for `POST /approvals/{token}/approve` or `/reject`.
    pub token: String,
    /// What the approver is asked.
    pub reason: String,
    /// The JSON Schema the approver's input must satisfy.
    pub input_schema: Value,
}

/// A call whose tool failed. The body is also a valid error envelope.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CallFailed {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// `failed`, `rejected`, `expired` or `needs_reconciliation`.
    pub status: CallStatus,
    /// Why it failed; `details` repeats `call_id`, `tool` and `status`.
    pub error: ErrorObject,
    /// When an approver edited the call's input before it ran: who, and both inputs.
    #[serde(flatten)]
    pub edit: EditedAnswer,
}

/// The header that marks the answer of an earlier request with the same idempotency key.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The HTTP status of a call that ended without an output.
fn failure_status(kind: FailureKind) -> StatusCode {
    match kind {
        FailureKind::InputRejected => StatusCode::UNPROCESSABLE_ENTITY,
        FailureKind::TimedOut => StatusCode::GATEWAY_TIMEOUT,
        FailureKind::Rejected | FailureKind::ToolChanged => StatusCode::CONFLICT,
        FailureKind::Expired => StatusCode::GONE,
        FailureKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        FailureKind::CredentialsMissing
        | FailureKind::ExchangeRefused
        | FailureKind::CredentialsExpired => StatusCode::FORBIDDEN,
        FailureKind::ToolFailed
        | FailureKind::OutputUnserializable
        | FailureKind::OutputSchemaViolation
        | FailureKind::InvalidSuspension
        | FailureKind::Panicked
        | FailureKind::ReconciledAsFailed => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Turns where a call stands into its HTTP answer. A replayed answer carries
/// `Idempotent-Replayed: true`.
pub fn call_response(result: CallResult) -> Response {
    let replayed = result.replayed;
    let mut response = outcome_response(result);
    if replayed {
        response.headers_mut().insert(
            REPLAYED_HEADER,
            axum::http::HeaderValue::from_static("true"),
        );
    }
    response
}

fn outcome_response(result: CallResult) -> Response {
    let CallResult {
        call_id,
        tool,
        outcome,
        replayed: _,
        edited,
    } = result;
    let edit = EditedAnswer::of(edited);
    match outcome {
        CallOutcome::Completed(output) => (
            StatusCode::OK,
            Json(CallCompleted {
                call_id,
                tool,
                status: "completed",
                output,
                edit,
            }),
        )
            .into_response(),
        CallOutcome::Suspended {
            token,
            reason,
            input_schema,
            expires_at: _,
        } => (
            StatusCode::ACCEPTED,
            Json(CallSuspended {
                call_id,
                tool,
                status: "suspended",
                suspension: Some(SuspensionTicket {
                    token,
                    reason,
                    input_schema,
                }),
            }),
        )
            .into_response(),
        CallOutcome::Withheld => (
            StatusCode::ACCEPTED,
            Json(CallSuspended {
                call_id,
                tool,
                status: "suspended",
                suspension: None,
            }),
        )
            .into_response(),
        CallOutcome::Failed { status, failure } => {
            // A write that may have reached a backend that then failed: not a 503, which
            // invites a retry; a person settles it.
            let http_status = match (failure.kind, status) {
                (FailureKind::Unavailable, CallStatus::NeedsReconciliation) => {
                    StatusCode::BAD_GATEWAY
                }
                (kind, _) => failure_status(kind),
            };
            // A call released because its upstream was down may be sent again: say when.
            let retry_after = (failure.kind == FailureKind::Unavailable
                && status == CallStatus::Interrupted)
                .then(|| {
                    let seconds = failure
                        .error
                        .details
                        .as_ref()
                        .and_then(|d| d.get("retry_after_s"))
                        .and_then(Value::as_u64)
                        .unwrap_or(1);
                    crate::http::error::retry_after_value(std::time::Duration::from_secs(seconds))
                });
            let recorded = failure.error;
            let mut details = match recorded.details {
                Some(Value::Object(map)) => map,
                _ => serde_json::Map::new(),
            };
            details.insert("call_id".into(), call_id.clone().into());
            details.insert("tool".into(), tool.clone().into());
            details.insert("status".into(), status.as_str().into());
            let error = ErrorObject {
                code: recorded.code,
                message: recorded.message,
                details: Some(Value::Object(details)),
            };
            let mut response = (
                http_status,
                Json(CallFailed {
                    call_id,
                    tool,
                    status,
                    error,
                    edit,
                }),
            )
                .into_response();
            if let Some(retry_after) = retry_after {
                response
                    .headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, retry_after);
            }
            response
        }
    }
}
