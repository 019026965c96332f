//! The one error envelope, produced here and nowhere else:
//! `{"error": {"code": "<stable_token>", "message": "<sentence>", "details": {...}}}`.
//!
//! Every failure an HTTP handler can meet is an [`ApiError`] variant with a stable `code` and a
//! status, so handlers just use `?`. Internal failures are logged here and answered without their
//! cause, so nothing internal leaks to a client.
//!
//! Split by job: here the variants, their status and code, and what lower layers' errors
//! become; `message` what each says; `answer` the HTTP answer with its headers.

mod answer;
mod message;

use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;

use crate::contract::error::InputViolation;
use crate::dispatch::DispatchError;
use crate::dispatch::quota::QuotaExceeded;
use crate::store::{CallRecord, StoreError};

pub(crate) use answer::{ScopeChallenge, retry_after_value};

/// The body of every error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorEnvelope {
    /// What went wrong.
    pub error: ErrorObject,
}

/// The error itself: a stable code to branch on, a sentence for people, and evidence.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorObject {
    /// A stable token such as `invalid_input` or `unknown_tool`.
    pub code: String,
    /// A sentence describing the error.
    pub message: String,
    /// Structured evidence (for example `errors`, a list of `{path, message}`), when there is
    /// some.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// Every failure the HTTP API answers with.
#[derive(Debug)]
pub enum ApiError {
    /// The request is malformed: bad JSON, a missing or unknown field, a bad query.
    BadRequest(String),
    /// The body is not declared as JSON.
    UnsupportedMediaType(String),
    /// The body is larger than the configured limit.
    PayloadTooLarge(String),
    /// The body did not arrive within `body_timeout_ms`; the connection is closed.
    RequestTimeout,
    /// No route has this path.
    RouteNotFound,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// No tool has this name.
    UnknownTool(String),
    /// No call has this id.
    UnknownCall(String),
    /// No suspension ever had this token.
    UnknownToken,
    /// The input does not fit the tool's input schema.
    InvalidInput {
        /// The tool.
        tool: String,
        /// Where and why.
        violations: Vec<InputViolation>,
    },
    /// The approver's input does not fit the suspension's schema.
    InvalidResumeInput(Vec<InputViolation>),
    /// The suspension was already approved or rejected.
    AlreadyResolved(Box<CallRecord>),
    /// The approver approved this suspension before; it needs others' approvals too.
    AlreadyApproved {
        /// The approvals so far.
        approvals: Vec<crate::store::ApprovalVote>,
        /// How many distinct approvers it needs.
        required: u32,
    },
    /// No valid bearer token.
    Unauthorized,
    /// A bearer token of an identity provider that was refused, and why.
    InvalidToken(String),
    /// A request signed by a platform (Slack's `X-Slack-Signature`) whose signature or
    /// timestamp does not verify, and why; nothing was decided.
    BadSignature(String),
    /// The key's role may not use this route.
    Forbidden,
    /// A valid token of an identity provider that gives no role here, and why.
    TokenForbidden(String),
    /// An approver deciding a call made under its own name (the call's id).
    DecidesOwnCall(String),
    /// A valid token that lacks a scope the tool requires: the tool, and every scope a call of
    /// it needs (`WWW-Authenticate: Bearer error="insufficient_scope"`, RFC 6750).
    InsufficientScope {
        /// The tool.
        tool: String,
        /// Every scope the call needs.
        scopes: Vec<String>,
    },
    /// The server does not accept this `Host` (the host name, as compared), against DNS
    /// rebinding.
    HostNotAllowed(String),
    /// The server does not accept this `Origin` (as sent), against DNS rebinding.
    OriginNotAllowed(String),
    /// The server or the tool is at its concurrency limit.
    Overloaded(String),
    /// A quota of the caller's refuses the request (calls a minute, calls running, requests
    /// held); answered with `Retry-After` and the RateLimit fields.
    RateLimited(Box<QuotaExceeded>),
    /// The idempotency key belongs to a call with another input.
    IdempotencyKeyReused(Option<String>),
    /// The call with this idempotency key is still running.
    CallInProgress(String),
    /// The call with this idempotency key needs reconciliation first; the call itself is shown
    /// only to whoever may read it.
    NeedsReconciliation {
        /// The call's id.
        call_id: String,
        /// The call, when the asker may read it.
        call: Option<Box<CallRecord>>,
    },
    /// The suspension expired.
    SuspensionExpired(Box<CallRecord>),
    /// The tool declares no output schema, so it cannot be completed externally.
    CompletionNotAllowed(String),
    /// An approval edits the call's input, and the tool's approval policy does not allow it
    /// (`edit_input`).
    EditNotAllowed(String),
    /// The tool's policy needs several approvers, so one person cannot complete its calls.
    NeedsApprovals {
        /// The tool.
        tool: String,
        /// How many distinct approvers it needs.
        required: u32,
    },
    /// A person's output does not fit the tool's output schema.
    OutputSchemaViolation(Vec<InputViolation>),
    /// The call does not need reconciliation.
    NotReconcilable(Box<CallRecord>),
    /// The store cannot serve requests.
    NotReady,
    /// The database cannot be reached now; nothing was lost, retry later.
    StoreUnavailable,
    /// A feed cursor older than the feed's retention.
    CursorExpired,
    /// No webhook delivery has this id.
    UnknownDelivery(i64),
    /// A webhook delivery that was delivered cannot be sent again.
    NotRetryable(Box<crate::store::Delivery>),
    /// The run that answered no longer owned its call (its replica lost its lease and the call
    /// was settled meanwhile): its outcome was refused and kept in the call's history.
    LeaseLost(Box<CallRecord>),
    /// The server behind a proxied tool (an upstream MCP server) cannot be reached now; the
    /// call was not run.
    UpstreamUnavailable {
        /// The tool.
        tool: String,
        /// When to try again.
        retry_after: std::time::Duration,
    },
    /// The tool is held: its definition changed upstream since it was pinned; or a decision on
    /// a call made against another definition, which ended the call with this error.
    ToolChanged {
        /// The tool.
        tool: String,
        /// The hash of the definition pinned.
        pinned: String,
        /// The hash of the definition its server lists now, when it is held.
        current: Option<String>,
        /// The call the decision ended, if one.
        call_id: Option<String>,
    },
    /// No upstream with pinned tools has this name.
    UnknownUpstream(String),
    /// The upstream lists no change of this tool now: (upstream, tool).
    NoChange(String, String),
    /// A standing approval asked where the tool's policy never offers one (why).
    StandingNotAllowed(String),
    /// A standing approval asked beyond the policy's bounds: the field, and its bound.
    StandingOutOfBounds {
        /// `for_s` or `calls`.
        field: &'static str,
        /// The most the policy allows.
        max: u64,
    },
    /// No standing approval has this id (or none the principal may see).
    UnknownStandingApproval(String),
    /// Something failed inside the server; already logged.
    Internal,
}

impl ApiError {
    /// The HTTP status answered.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::RouteNotFound
            | ApiError::UnknownTool(_)
            | ApiError::UnknownCall(_)
            | ApiError::UnknownToken
            | ApiError::UnknownDelivery(_)
            | ApiError::UnknownStandingApproval(_)
            | ApiError::UnknownUpstream(_)
            | ApiError::NoChange(..) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::InvalidInput { .. }
            | ApiError::InvalidResumeInput(_)
            | ApiError::StandingNotAllowed(_)
            | ApiError::StandingOutOfBounds { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::AlreadyResolved(_)
            | ApiError::AlreadyApproved { .. }
            | ApiError::NeedsApprovals { .. }
            | ApiError::CallInProgress(_)
            | ApiError::NeedsReconciliation { .. }
            | ApiError::CompletionNotAllowed(_)
            | ApiError::NotReconcilable(_)
            | ApiError::LeaseLost(_)
            | ApiError::ToolChanged { .. }
            | ApiError::NotRetryable(_) => StatusCode::CONFLICT,
            ApiError::Unauthorized | ApiError::InvalidToken(_) | ApiError::BadSignature(_) => {
                StatusCode::UNAUTHORIZED
            }
            ApiError::Forbidden
            | ApiError::TokenForbidden(_)
            | ApiError::InsufficientScope { .. }
            | ApiError::DecidesOwnCall(_)
            | ApiError::HostNotAllowed(_)
            | ApiError::OriginNotAllowed(_) => StatusCode::FORBIDDEN,
            ApiError::IdempotencyKeyReused(_)
            | ApiError::OutputSchemaViolation(_)
            | ApiError::EditNotAllowed(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::SuspensionExpired(_) | ApiError::CursorExpired => StatusCode::GONE,
            ApiError::Overloaded(_)
            | ApiError::NotReady
            | ApiError::StoreUnavailable
            | ApiError::UpstreamUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable code clients branch on.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::RequestTimeout => "request_timeout",
            ApiError::RouteNotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::UnknownTool(_) => "unknown_tool",
            ApiError::UnknownCall(_) => "unknown_call",
            ApiError::UnknownToken => "unknown_token",
            ApiError::InvalidInput { .. } => "invalid_input",
            ApiError::InvalidResumeInput(_) => "invalid_resume_input",
            ApiError::AlreadyResolved(_) => "already_resolved",
            ApiError::AlreadyApproved { .. } => "already_approved",
            ApiError::Unauthorized | ApiError::InvalidToken(_) => "unauthorized",
            ApiError::BadSignature(_) => "bad_signature",
            ApiError::Forbidden
            | ApiError::TokenForbidden(_)
            | ApiError::DecidesOwnCall(_)
            | ApiError::HostNotAllowed(_)
            | ApiError::OriginNotAllowed(_) => "forbidden",
            ApiError::InsufficientScope { .. } => "insufficient_scope",
            ApiError::Overloaded(_) => "overloaded",
            ApiError::RateLimited(_) => "rate_limited",
            ApiError::IdempotencyKeyReused(_) => "idempotency_key_reused",
            ApiError::CallInProgress(_) => "call_in_progress",
            ApiError::NeedsReconciliation { .. } => "needs_reconciliation",
            ApiError::SuspensionExpired(_) => "suspension_expired",
            ApiError::CompletionNotAllowed(_) | ApiError::NeedsApprovals { .. } => {
                "completion_not_allowed"
            }
            ApiError::OutputSchemaViolation(_) => "output_schema_violation",
            ApiError::EditNotAllowed(_) => "edit_not_allowed",
            ApiError::NotReconcilable(_) => "not_reconcilable",
            ApiError::NotReady => "not_ready",
            ApiError::StoreUnavailable => "store_unavailable",
            ApiError::CursorExpired => "cursor_expired",
            ApiError::UnknownDelivery(_) => "not_found",
            ApiError::NotRetryable(_) => "not_retryable",
            ApiError::LeaseLost(_) => "lease_lost",
            ApiError::UpstreamUnavailable { .. } => "upstream_unavailable",
            ApiError::ToolChanged { .. } => "tool_changed",
            ApiError::UnknownUpstream(_) => "unknown_upstream",
            ApiError::NoChange(..) => "no_change",
            ApiError::StandingNotAllowed(_) => "standing_not_allowed",
            ApiError::StandingOutOfBounds { .. } => "standing_out_of_bounds",
            ApiError::UnknownStandingApproval(_) => "unknown_standing_approval",
            ApiError::Internal => "internal",
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Unavailable(reason) => {
                tracing::warn!(error = %reason, "the store is unavailable");
                ApiError::StoreUnavailable
            }
            StoreError::LeaseLost(call) => ApiError::LeaseLost(call),
            // A client's resume point of the change feed (`Last-Event-ID`, `?after=`).
            StoreError::CursorExpired => ApiError::CursorExpired,
            StoreError::BadCursor(_) => ApiError::BadRequest(
                "The cursor is not one this server handed out as an event `id`.".into(),
            ),
            err => {
                tracing::error!(error = %err, "store failure");
                ApiError::Internal
            }
        }
    }
}

impl From<QuotaExceeded> for ApiError {
    fn from(refused: QuotaExceeded) -> Self {
        ApiError::RateLimited(Box::new(refused))
    }
}

impl From<DispatchError> for ApiError {
    fn from(err: DispatchError) -> Self {
        match err {
            DispatchError::UnknownTool(name) => ApiError::UnknownTool(name),
            DispatchError::DecidesOwnCall(call_id) => ApiError::DecidesOwnCall(call_id),
            DispatchError::InsufficientScope { tool, scopes } => {
                ApiError::InsufficientScope { tool, scopes }
            }
            DispatchError::InvalidInput { tool, violations } => {
                ApiError::InvalidInput { tool, violations }
            }
            DispatchError::UnknownToken => ApiError::UnknownToken,
            DispatchError::AlreadyResolved(call) => ApiError::AlreadyResolved(call),
            DispatchError::AlreadyApproved {
                approvals,
                required,
            } => ApiError::AlreadyApproved {
                approvals,
                required,
            },
            DispatchError::NeedsApprovals { tool, required } => {
                ApiError::NeedsApprovals { tool, required }
            }
            DispatchError::InvalidResumeInput(violations) => {
                ApiError::InvalidResumeInput(violations)
            }
            DispatchError::Overloaded(tool) => ApiError::Overloaded(format!("Tool `{tool}`")),
            DispatchError::RateLimited(refused) => ApiError::RateLimited(refused),
            DispatchError::IdempotencyKeyReused { call_id } => {
                ApiError::IdempotencyKeyReused(call_id)
            }
            DispatchError::CallInProgress { call_id } => ApiError::CallInProgress(call_id),
            DispatchError::NeedsReconciliation { call_id, call } => {
                ApiError::NeedsReconciliation { call_id, call }
            }
            DispatchError::TooDeep(max) => {
                ApiError::BadRequest(format!("The JSON is nested deeper than {max} levels."))
            }
            DispatchError::BadRequest(message) => ApiError::BadRequest(message),
            DispatchError::ReasonRefused(refused) => ApiError::BadRequest(refused.to_string()),
            DispatchError::SuspensionExpired(call) => ApiError::SuspensionExpired(call),
            DispatchError::CompletionNotAllowed(tool) => ApiError::CompletionNotAllowed(tool),
            DispatchError::EditNotAllowed(tool) => ApiError::EditNotAllowed(tool),
            DispatchError::OutputSchemaViolation(violations) => {
                ApiError::OutputSchemaViolation(violations)
            }
            DispatchError::UnknownCall(call_id) => ApiError::UnknownCall(call_id),
            DispatchError::NotReconcilable(call) => ApiError::NotReconcilable(call),
            DispatchError::Unavailable { tool, retry_after } => {
                ApiError::UpstreamUnavailable { tool, retry_after }
            }
            DispatchError::ToolChanged {
                tool,
                pinned,
                current,
                call_id,
            } => ApiError::ToolChanged {
                tool,
                pinned,
                current,
                call_id,
            },
            DispatchError::StandingNotAllowed(why) => ApiError::StandingNotAllowed(why),
            DispatchError::StandingOutOfBounds { field, max } => {
                ApiError::StandingOutOfBounds { field, max }
            }
            DispatchError::UnknownStandingApproval(id) => ApiError::UnknownStandingApproval(id),
            DispatchError::Store(err) => err.into(),
            DispatchError::Internal(message) => {
                tracing::error!(error = %message, "call lifecycle failed");
                ApiError::Internal
            }
        }
    }
}
