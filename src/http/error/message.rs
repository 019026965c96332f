//! What each [`ApiError`] says: the message a person reads and the `details` a program reads,
//! as the envelope carries them.

use serde_json::json;

use super::{ApiError, ErrorObject};

impl ApiError {
    /// The error as the envelope shows it.
    pub fn to_object(&self) -> ErrorObject {
        let (message, details) = match self {
            ApiError::BadRequest(m)
            | ApiError::UnsupportedMediaType(m)
            | ApiError::PayloadTooLarge(m)
            | ApiError::BadSignature(m) => (m.clone(), None),
            ApiError::RequestTimeout => (
                "The request body did not arrive in time; the connection is closed.".into(),
                None,
            ),
            ApiError::RouteNotFound => ("No route matches this path.".into(), None),
            ApiError::MethodNotAllowed => ("This route does not accept this method.".into(), None),
            ApiError::UnknownTool(name) => (
                format!("No tool is named `{name}`."),
                Some(json!({ "tool": name })),
            ),
            ApiError::UnknownCall(id) => (
                format!("No call has the id `{id}`."),
                Some(json!({ "call_id": id })),
            ),
            ApiError::UnknownToken => ("No suspension has this token.".into(), None),
            ApiError::InvalidInput { tool, violations } => (
                format!("The input does not fit the input schema of tool `{tool}`."),
                Some(json!({ "tool": tool, "errors": violations })),
            ),
            ApiError::InvalidResumeInput(violations) => (
                "The resume input does not fit the suspension's input schema; it is still pending."
                    .into(),
                Some(json!({ "errors": violations })),
            ),
            ApiError::AlreadyResolved(call) => (
                format!(
                    "This suspension was already resolved; call `{}` is {}.",
                    call.call_id,
                    call.status.as_str()
                ),
                serde_json::to_value(call).ok(),
            ),
            ApiError::AlreadyApproved {
                approvals,
                required,
            } => (
                format!(
                    "You approved this already: {} of {required} approvals so far, and the \
                     rest must come from other approvers.",
                    approvals.len()
                ),
                Some(json!({ "approvals": approvals, "approvals_required": required })),
            ),
            ApiError::NeedsApprovals { tool, required } => (
                format!(
                    "Calls of `{tool}` need {required} distinct approvers, so no one person \
                     may complete them: approve it instead."
                ),
                Some(json!({ "tool": tool, "approvals_required": required })),
            ),
            ApiError::Unauthorized => (
                "A valid API key is required: send `Authorization: Bearer <token>`.".into(),
                None,
            ),
            ApiError::InvalidToken(why) => (format!("The bearer token was refused: {why}."), None),
            ApiError::Forbidden => ("This API key's role may not use this route.".into(), None),
            ApiError::TokenForbidden(why) => {
                (format!("The bearer token gives no access: {why}."), None)
            }
            ApiError::DecidesOwnCall(call_id) => (
                format!(
                    "Call `{call_id}` was made under your own name: whoever calls a tool never \
                     decides on it. Another approver must."
                ),
                Some(json!({ "call_id": call_id })),
            ),
            ApiError::InsufficientScope { tool, scopes } => (
                format!(
                    "Calling tool `{tool}` takes a token with the scopes {}: ask the \
                     authorization server for them.",
                    scopes.join(" ")
                ),
                Some(json!({ "tool": tool, "scopes": scopes })),
            ),
            ApiError::HostNotAllowed(host) => (
                format!(
                    "Host `{host}` is not allowed (a defence against DNS rebinding): if clients \
                     reach this server by that name, list it in [server] allowed_hosts."
                ),
                Some(json!({ "host": host })),
            ),
            ApiError::OriginNotAllowed(origin) => (
                format!(
                    "Origin `{origin}` is not allowed (a defence against DNS rebinding): a \
                     browser page may use this server only from an http or https origin whose \
                     host is listed in [server] allowed_hosts."
                ),
                Some(json!({ "origin": origin })),
            ),
            ApiError::Overloaded(what) => (
                format!("{what} is at its concurrency limit; retry later."),
                None,
            ),
            ApiError::RateLimited(refused) => (refused.message(), Some(refused.details())),
            ApiError::IdempotencyKeyReused(Some(call_id)) => (
                format!(
                    "This idempotency key belongs to call `{call_id}`, made with a different input."
                ),
                Some(json!({ "call_id": call_id })),
            ),
            ApiError::IdempotencyKeyReused(None) => (
                "This idempotency key belongs to another caller's call, made with a different \
                 input."
                    .into(),
                None,
            ),
            ApiError::CallInProgress(call_id) => (
                format!(
                    "Call `{call_id}` with this idempotency key is still running; retry later."
                ),
                Some(json!({ "call_id": call_id })),
            ),
            ApiError::NeedsReconciliation { call_id, call } => (
                format!(
                    "Call `{call_id}` with this idempotency key may or may not have had its \
                     effect; an approver must settle it with POST /calls/{{call_id}}/resolve."
                ),
                match call {
                    Some(call) => serde_json::to_value(call).ok(),
                    None => Some(json!({ "call_id": call_id, "status": "needs_reconciliation" })),
                },
            ),
            ApiError::SuspensionExpired(call) => (
                format!("The suspension of call `{}` has expired.", call.call_id),
                serde_json::to_value(call).ok(),
            ),
            ApiError::EditNotAllowed(tool) => (
                format!(
                    "The approval policy of `{tool}` does not allow approvers to edit a call's \
                     input: approve it without `edited_input`, or reject it. Nothing was decided."
                ),
                Some(json!({ "tool": tool })),
            ),
            ApiError::CompletionNotAllowed(tool) => (
                format!(
                    "Tool `{tool}` declares no output schema, so a completion would carry no \
                     receipt; approve or reject it instead."
                ),
                Some(json!({ "tool": tool })),
            ),
            ApiError::OutputSchemaViolation(violations) => (
                "The output does not match the tool's output schema.".into(),
                Some(json!({ "errors": violations })),
            ),
            ApiError::NotReconcilable(call) => (
                format!(
                    "Call `{}` is {}; only a call that needs reconciliation can be settled.",
                    call.call_id,
                    call.status.as_str()
                ),
                serde_json::to_value(call).ok(),
            ),
            ApiError::NotReady => ("The store is not available.".into(), None),
            ApiError::StoreUnavailable => (
                "The database cannot be reached, or cannot write (its disk is full or failing); \
                 retry later. Nothing acknowledged is lost."
                    .into(),
                None,
            ),
            ApiError::UnknownDelivery(id) => (
                format!("No webhook delivery has the id {id}."),
                Some(json!({ "id": id })),
            ),
            ApiError::NotRetryable(delivery) => (
                format!(
                    "Delivery {} was delivered; only a failed one is sent again.",
                    delivery.id
                ),
                serde_json::to_value(delivery).ok(),
            ),
            ApiError::CursorExpired => (
                "The cursor is older than the feed's retention: entries after it were dropped. \
                 Reconnect without a cursor, and read the calls you need."
                    .into(),
                None,
            ),
            ApiError::LeaseLost(call) => (
                format!(
                    "The replica that ran call `{}` lost its lease and the call was settled \
                     meanwhile ({}); this outcome was refused and kept in the call's history.",
                    call.call_id,
                    call.status.as_str()
                ),
                serde_json::to_value(call).ok(),
            ),
            ApiError::UpstreamUnavailable { tool, retry_after } => (
                format!(
                    "The server behind tool `{tool}` cannot be reached now; nothing was sent to \
                     it. Retry later."
                ),
                Some(json!({ "tool": tool, "retry_after_s": retry_after.as_secs().max(1) })),
            ),
            ApiError::ToolChanged {
                tool,
                pinned,
                current,
                call_id,
            } => (
                match call_id {
                    Some(call_id) => format!(
                        "The definition of tool `{tool}` changed upstream since call \
                         `{call_id}` was made: the approval failed closed, the call ended with \
                         this error, and nothing was sent."
                    ),
                    None => format!(
                        "The definition of tool `{tool}` changed upstream since it was pinned: \
                         the tool is held until an admin accepts the change, and nothing was \
                         sent."
                    ),
                },
                Some(json!({
                    "tool": tool,
                    "pinned_hash": pinned,
                    "current_hash": current,
                    "call_id": call_id,
                })),
            ),
            ApiError::UnknownUpstream(name) => (
                format!("No upstream with pinned tools is named `{name}`."),
                Some(json!({ "upstream": name })),
            ),
            ApiError::NoChange(upstream, tool) => (
                format!(
                    "Upstream `{upstream}` lists no change of tool `{tool}` now: its definition \
                     is the one pinned, or it is not listed."
                ),
                Some(json!({ "upstream": upstream, "tool": tool })),
            ),
            ApiError::StandingNotAllowed(why) => (
                format!("{why} Nothing was decided."),
                Some(json!({ "field": "standing" })),
            ),
            ApiError::StandingOutOfBounds { field, max } => (
                format!(
                    "`standing.{field}` must be 1 to {max}, as the tool's approval policy \
                     allows. Nothing was decided."
                ),
                Some(json!({ "field": format!("standing.{field}"), "max": max })),
            ),
            ApiError::UnknownStandingApproval(id) => (
                format!("No standing approval has the id `{id}`."),
                Some(json!({ "id": id })),
            ),
            ApiError::Internal => ("The server failed to handle this request.".into(), None),
        };
        ErrorObject {
            code: self.code().into(),
            message,
            details,
        }
    }
}
