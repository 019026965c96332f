//! What a call or an approval answers: the attempt's outcome, in one shape for both.
//!
//! `200` completed, `202` suspended (with the token an approver uses), or the failure's status
//! with `"status": "failed"` and the error envelope.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use super::error::ErrorObject;
use crate::dispatch::{CallOutcome, CallResult, Failure};

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
    /// What the approver must decide, and how to answer.
    pub suspension: SuspensionTicket,
}

/// The suspension a `202` hands out.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SuspensionTicket {
    /// Single-use token for `POST /approvals/{token}/approve` or `/reject`.
    pub token: String,
    /// What the approver is asked.
    pub reason: String,
    /// The JSON Schema the approver's input must satisfy.
    #[schema(value_type = Object)]
    pub input_schema: Value,
}

/// A call whose tool failed. The body is also a valid error envelope.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CallFailed {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// Always `failed`.
    #[schema(inline, value_type = String, pattern = "^failed$")]
    pub status: &'static str,
    /// Why it failed; `details` repeats `call_id`, `tool` and `status`.
    pub error: ErrorObject,
}

/// Turns an attempt's result into its HTTP answer.
pub fn call_response(result: CallResult) -> Response {
    let CallResult {
        call_id,
        tool,
        outcome,
    } = result;
    match outcome {
        CallOutcome::Completed(output) => (
            StatusCode::OK,
            Json(CallCompleted {
                call_id,
                tool,
                status: "completed",
                output,
            }),
        )
            .into_response(),
        CallOutcome::Suspended {
            token,
            reason,
            input_schema,
        } => (
            StatusCode::ACCEPTED,
            Json(CallSuspended {
                call_id,
                tool,
                status: "suspended",
                suspension: SuspensionTicket {
                    token,
                    reason,
                    input_schema,
                },
            }),
        )
            .into_response(),
        CallOutcome::Failed(failure) => {
            let status = match failure {
                Failure::InputRejected(_) => StatusCode::UNPROCESSABLE_ENTITY,
                Failure::ToolFailed(_)
                | Failure::OutputUnserializable(_)
                | Failure::InvalidSuspension(_)
                | Failure::Panicked(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let recorded = failure.to_call_error();
            let mut details = match recorded.details {
                Some(Value::Object(map)) => map,
                _ => serde_json::Map::new(),
            };
            details.insert("call_id".into(), call_id.clone().into());
            details.insert("tool".into(), tool.clone().into());
            details.insert("status".into(), "failed".into());
            let error = ErrorObject {
                code: recorded.code,
                message: recorded.message,
                details: Some(Value::Object(details)),
            };
            (
                status,
                Json(CallFailed {
                    call_id,
                    tool,
                    status: "failed",
                    error,
                }),
            )
                .into_response()
        }
    }
}
