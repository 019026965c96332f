//! How the call lifecycle's answers look over MCP: tool results, pending results, tasks, and
//! the two kinds of MCP error.
//!
//! A failure the model can act on (input that does not fit, a tool that failed, a rejection,
//! an expiry, a key reused) is a tool result with `isError: true`, whose text says what
//! happened; a request the protocol cannot route (an unknown tool, malformed params) is a
//! JSON-RPC `-32602`; a failure of the server or its store is `-32603` with nothing internal in
//! it. No answer built here carries a suspension's token: pending results and tasks say who
//! waits for whom, never how to approve.

use rmcp::ErrorData as McpError;
use rmcp::model::TaskStatus;
use rmcp::model::{CallToolResult, DetailedTask, JsonObject, MetaObject, Task, TaskPayload};
use serde_json::{Value, json};

use super::catalog::AWAIT_TOOL;
use super::text;
use crate::contract::error::InputViolation;
use crate::dispatch::quota::QuotaExceeded;
use crate::dispatch::{CallOutcome, CallResult, DispatchError, ErrorKind};
use crate::http::error::ApiError;
use crate::store::{CallError, CallRecord, CallStatus, EditMark};

/// The status a pending result's `structuredContent` carries.
pub const PENDING_STATUS: &str = "pending_approval";

/// The answer of a call that ran (or was replayed).
pub(super) fn from_result(result: &CallResult) -> CallToolResult {
    let answer = outcome_answer(&result.call_id, &result.tool, &result.outcome);
    let answer = match &result.edited {
        Some(edit) => with_edit(answer, &edit.mark, &edit.input, &edit.original_input),
        None => answer,
    };
    with_meta(
        answer,
        &result.call_id,
        result.outcome.status(),
        result.replayed,
    )
}

/// The answer a call's record gives now (`toolgate_await_call`, a finished task).
pub(super) fn from_record(call: &CallRecord) -> CallToolResult {
    let answer = match CallOutcome::from_record(call) {
        Some(outcome) => outcome_answer(&call.call_id, &call.tool, &outcome),
        None => match call.status {
            CallStatus::Running => running(call),
            CallStatus::Interrupted => CallToolResult::error(vec![text(format!(
                "Call {} of `{}` was interrupted (the server stopped while it ran) and did not \
                 finish. It is safe to call the tool again.",
                call.call_id, call.tool
            ))]),
            _ => CallToolResult::error(vec![text(format!(
                "Call {} of `{}` may or may not have had its effect: it waits for a person to \
                 reconcile it. Do not call the tool again for this.",
                call.call_id, call.tool
            ))]),
        },
    };
    let answer = match (&call.edited, &call.original_input) {
        (Some(mark), Some(original)) => with_edit(answer, mark, &call.input, original),
        _ => answer,
    };
    with_meta(answer, &call.call_id, call.status, false)
}

/// `answer`, with a sentence after it saying that an approver edited the call's input before
/// it ran, and what it ran with instead, so that the model learns what was acceptable; and the
/// same in `_meta` (`dev.toolgate/edited`: `by`, `at`, `input`, `original_input`).
fn with_edit(
    mut answer: CallToolResult,
    mark: &EditMark,
    input: &Value,
    original: &Value,
) -> CallToolResult {
    let who = match (&mark.display_name, &mark.by) {
        (Some(name), _) | (None, Some(name)) => format!("An approver ({name})"),
        (None, None) => "An approver".to_owned(),
    };
    answer.content.push(text(format!(
        "{who} edited this call's input before it ran: it ran with {input}, not with \
         {original} as it was called."
    )));
    let mut meta = answer.meta.take().map(|meta| meta.0).unwrap_or_default();
    meta.insert(
        "dev.toolgate/edited".into(),
        json!({"by": mark.by, "at": mark.at, "input": input, "original_input": original}),
    );
    answer.meta = Some(MetaObject(meta));
    answer
}

fn outcome_answer(call_id: &str, tool: &str, outcome: &CallOutcome) -> CallToolResult {
    match outcome {
        // The output itself, and one text block holding it as JSON.
        CallOutcome::Completed(output) => CallToolResult::structured(output.clone()),
        CallOutcome::Suspended { reason, .. } => pending(call_id, tool, reason),
        CallOutcome::Withheld => CallToolResult::success(vec![text(format!(
            "A call of `{tool}` with the same effect, made by another caller, awaits a person's \
             decision. Do not call `{tool}` again for this."
        ))]),
        CallOutcome::Failed { failure, .. } => call_error(&failure.error),
    }
}

/// A call that waits for a person: what the model must know, and nothing an approver holds.
/// The reason is said once, as the tool (or a gate, "Calls of <tool> need approval.") gave it,
/// after a frame that does not say it again.
fn pending(call_id: &str, tool: &str, reason: &str) -> CallToolResult {
    let mut answer = CallToolResult::success(vec![text(format!(
        "Call {call_id} of `{tool}` awaits a person's decision: {}\nDo not call `{tool}` again \
         for this; call `{AWAIT_TOOL}` with {{\"call_id\": \"{call_id}\"}} to wait for its \
         outcome.",
        sentence(reason)
    ))]);
    answer.structured_content = Some(json!({
        "status": PENDING_STATUS,
        "call_id": call_id,
        "reason": reason,
    }));
    answer
}

/// `reason` as a sentence of its own: ended by a full stop when it ends in no punctuation.
fn sentence(reason: &str) -> String {
    let reason = reason.trim_end();
    if reason.ends_with(['.', '?', '!']) {
        reason.to_owned()
    } else {
        format!("{reason}.")
    }
}

fn running(call: &CallRecord) -> CallToolResult {
    let mut answer = CallToolResult::success(vec![text(format!(
        "Call {} of `{}` is still running. Call `{AWAIT_TOOL}` again to wait for its outcome.",
        call.call_id, call.tool
    ))]);
    answer.structured_content = Some(json!({"status": "running", "call_id": call.call_id}));
    answer
}

/// A call's recorded error, as a tool error the model reads.
fn call_error(error: &CallError) -> CallToolResult {
    let mut message = format!("{} ({})", error.message, error.code);
    if let Some(errors) = error
        .details
        .as_ref()
        .and_then(|details| details.get("errors"))
        .and_then(Value::as_array)
    {
        for e in errors {
            let path = e.get("path").and_then(Value::as_str).unwrap_or_default();
            let why = e.get("message").and_then(Value::as_str).unwrap_or_default();
            message.push_str(&format!(
                "\n- {}: {why}",
                if path.is_empty() { "/" } else { path }
            ));
        }
    }
    CallToolResult::error(vec![text(message)])
}

fn with_meta(
    mut answer: CallToolResult,
    call_id: &str,
    status: CallStatus,
    replayed: bool,
) -> CallToolResult {
    let mut meta = answer.meta.take().map(|meta| meta.0).unwrap_or_default();
    meta.insert("dev.toolgate/callId".into(), call_id.into());
    meta.insert("dev.toolgate/status".into(), status.as_str().into());
    if replayed {
        meta.insert("dev.toolgate/replayed".into(), true.into());
    }
    answer.meta = Some(MetaObject(meta));
    answer
}

/// Input of `toolgate_await_call` that does not fit.
pub(super) fn invalid_await_input(violations: &[InputViolation]) -> CallToolResult {
    violations_error(
        &format!("The input does not fit the input schema of tool `{AWAIT_TOOL}`."),
        violations,
    )
}

fn violations_error(message: &str, violations: &[InputViolation]) -> CallToolResult {
    let mut text_ = message.to_owned();
    for v in violations {
        let path = if v.path.is_empty() { "/" } else { &v.path };
        text_.push_str(&format!("\n- {path}: {}", v.message));
    }
    text_.push_str("\nThe tool did not run.");
    CallToolResult::error(vec![text(text_)])
}

/// A refusal of the lifecycle, by its kind: the server's own failures (`Internal`) are
/// `-32603` (logged where the error was made, answered without their cause); an unknown tool is
/// `-32602`, as the protocol routes it; every other is a tool error the model can act on, with
/// the REST door's sentence and code and never its details (they may hold a call's record, and
/// so a token).
pub(super) fn dispatch_error(err: DispatchError) -> Result<CallToolResult, McpError> {
    if err.kind() == ErrorKind::Internal {
        // Converted for what it logs; the answer says nothing of it.
        drop(ApiError::from(err));
        return Err(server_failure());
    }
    match err {
        DispatchError::UnknownTool(name) => Err(McpError::invalid_params(
            format!("No tool is named `{name}`."),
            None,
        )),
        DispatchError::InvalidInput { tool, violations } => Ok(violations_error(
            &format!("The input does not fit the input schema of tool `{tool}`."),
            &violations,
        )),
        DispatchError::RateLimited(refused) => Ok(rate_limited(&refused)),
        other => {
            let object = ApiError::from(other).to_object();
            Ok(CallToolResult::error(vec![text(format!(
                "{} ({})",
                object.message, object.code
            ))]))
        }
    }
}

/// A request a quota refused, as a tool error the model can wait out: the sentence says how
/// long, and `_meta` says it for a client (`dev.toolgate/status` = `rate_limited`,
/// `dev.toolgate/retryAfterMs` = the wait, never shorter than the bucket asks).
pub(super) fn rate_limited(refused: &QuotaExceeded) -> CallToolResult {
    let mut answer =
        CallToolResult::error(vec![text(format!("{} (rate_limited)", refused.message()))]);
    let wait_ms = refused.retry_after_s().saturating_mul(1000);
    let mut meta = JsonObject::new();
    meta.insert("dev.toolgate/status".into(), "rate_limited".into());
    meta.insert("dev.toolgate/retryAfterMs".into(), wait_ms.into());
    meta.insert("dev.toolgate/quota".into(), refused.kind.key().into());
    answer.meta = Some(MetaObject(meta));
    answer
}

/// A refusal where no tool result can carry it (`tasks/*`), by its kind as above.
pub(super) fn protocol_error(err: DispatchError) -> McpError {
    let internal = err.kind() == ErrorKind::Internal;
    let err = ApiError::from(err);
    if internal {
        server_failure()
    } else {
        McpError::invalid_params(err.to_object().message, None)
    }
}

fn server_failure() -> McpError {
    McpError::internal_error(
        "The server failed to handle this request; retry later.",
        None,
    )
}

/// A call as a task: working while it runs or waits for a person, completed (with the result a
/// call answers, `isError` ones included) once it is over.
pub(super) fn task_of(call: &CallRecord, poll_interval_ms: u64) -> DetailedTask {
    let task = Task::new(
        call.call_id.clone(),
        TaskStatus::Working,
        call.created_at.to_string(),
        call.updated_at.to_string(),
    )
    .with_poll_interval_ms(poll_interval_ms);
    let working = |message: String| {
        DetailedTask::new(
            task.clone().with_status_message(message),
            TaskPayload::Working,
        )
    };
    match (&call.status, &call.suspension) {
        (CallStatus::Suspended, Some(suspension)) => working(format!(
            "awaiting a person's decision: {}",
            suspension.reason
        )),
        (CallStatus::Running | CallStatus::Suspended, _) => working("running".into()),
        (CallStatus::NeedsReconciliation, _) => {
            working("awaiting reconciliation by a person".into())
        }
        _ => {
            let result = serde_json::to_value(from_record(call))
                .ok()
                .and_then(|value| match value {
                    Value::Object(map) => Some(map),
                    _ => None,
                })
                .unwrap_or_default();
            DetailedTask::new(task, TaskPayload::Completed { result })
        }
    }
}
