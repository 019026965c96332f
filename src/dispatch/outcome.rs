//! What the lifecycle answers: where a call stands ([`CallResult`], [`CallOutcome`]), why it
//! ended without an output ([`Failure`], each [`FailureKind`] with a stable code), and why a
//! request was refused ([`DispatchError`]).

use std::time::Duration;

use serde_json::{Value, json};

use crate::contract::error::InputViolation;
use crate::store::{CallError, CallRecord, CallStatus, StoreError, Timestamp};

/// How a call stands after a request, as reported to whoever asked.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The call.
    pub call_id: String,
    /// Its tool.
    pub tool: String,
    /// Where it stands.
    pub outcome: CallOutcome,
    /// Whether this is the answer of an earlier request with the same idempotency key (the
    /// tool did not run for this one).
    pub replayed: bool,
    /// When an approver edited the call's input before it ran (its policy allowing edits):
    /// who, and the input before and after; so that the caller (an agent, often) can learn.
    pub edited: Option<Box<crate::store::CallEdit>>,
}

/// Where a call stands.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// Finished with this output.
    Completed(Value),
    /// Waiting for a person.
    Suspended {
        /// The single-use token to resolve it with.
        token: String,
        /// What the approver is asked.
        reason: String,
        /// What the approver must answer with.
        input_schema: Value,
        /// When the suspension expires, if it does.
        expires_at: Option<Timestamp>,
    },
    /// Waiting for a person, on a call another caller made (a replay under a tool's own
    /// idempotency key, which every caller shares on purpose): its status alone is shown, never
    /// its token, what the approver is asked, its input or its history.
    Withheld,
    /// Ended without an output: `failed`, `rejected`, `expired`, or `needs_reconciliation` (a
    /// write that timed out).
    Failed {
        /// The call's status.
        status: CallStatus,
        /// Why.
        failure: Failure,
    },
}

impl CallOutcome {
    /// The status it leaves the call in.
    pub fn status(&self) -> CallStatus {
        match self {
            CallOutcome::Completed(_) => CallStatus::Completed,
            CallOutcome::Suspended { .. } | CallOutcome::Withheld => CallStatus::Suspended,
            CallOutcome::Failed { status, .. } => *status,
        }
    }

    /// The answer a call's record gives to a repeated request, if it has one (a call still
    /// running, interrupted or waiting for reconciliation has none).
    pub fn from_record(call: &CallRecord) -> Option<CallOutcome> {
        let failed = |status| {
            let error = call
                .error
                .clone()
                .unwrap_or_else(|| CallError::new("tool_failed", "The call failed."));
            Some(CallOutcome::Failed {
                status,
                failure: Failure::from_record(error),
            })
        };
        match call.status {
            CallStatus::Completed => Some(CallOutcome::Completed(
                call.output.clone().unwrap_or(Value::Null),
            )),
            CallStatus::Suspended => call.suspension.as_ref().map(|s| CallOutcome::Suspended {
                token: s.token.clone(),
                reason: s.reason.clone(),
                input_schema: s.input_schema.clone(),
                expires_at: s.expires_at,
            }),
            CallStatus::Failed | CallStatus::Rejected | CallStatus::Expired => failed(call.status),
            CallStatus::Running | CallStatus::Interrupted | CallStatus::NeedsReconciliation => None,
        }
    }
}

/// The kinds of failure, each with a stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The handler returned an error.
    ToolFailed,
    /// The input passed the tool's schema but not its input type: the schema and the type
    /// disagree. The handler did not run.
    InputRejected,
    /// The handler's output could not be turned into JSON.
    OutputUnserializable,
    /// The output does not match the tool's declared output schema.
    OutputSchemaViolation,
    /// The handler suspended with a resume schema that is not a valid JSON Schema.
    InvalidSuspension,
    /// The handler panicked.
    Panicked,
    /// The attempt ran past the tool's timeout.
    TimedOut,
    /// A person rejected the call.
    Rejected,
    /// The call's suspension expired.
    Expired,
    /// A person settled the call as failed.
    ReconciledAsFailed,
    /// The tool's backend (an upstream MCP server) could not be reached.
    Unavailable,
    /// The tool's definition changed upstream since the call was made: its approval failed
    /// closed, and nothing was sent.
    ToolChanged,
    /// The tool acts as its caller upstream, and the caller has no token to act with.
    CredentialsMissing,
    /// The tool acts as its caller upstream, and the issuer refused to exchange its token.
    ExchangeRefused,
    /// The tool acts as its caller upstream, and the caller's credentials expired before it
    /// ran (an approval later than they last).
    CredentialsExpired,
}

impl FailureKind {
    const ALL: [FailureKind; 15] = [
        FailureKind::ToolFailed,
        FailureKind::InputRejected,
        FailureKind::OutputUnserializable,
        FailureKind::OutputSchemaViolation,
        FailureKind::InvalidSuspension,
        FailureKind::Panicked,
        FailureKind::TimedOut,
        FailureKind::Rejected,
        FailureKind::Expired,
        FailureKind::ReconciledAsFailed,
        FailureKind::Unavailable,
        FailureKind::ToolChanged,
        FailureKind::CredentialsMissing,
        FailureKind::ExchangeRefused,
        FailureKind::CredentialsExpired,
    ];

    /// The stable code recorded and answered.
    pub fn code(self) -> &'static str {
        match self {
            FailureKind::ToolFailed => "tool_failed",
            FailureKind::InputRejected => "invalid_input",
            FailureKind::OutputUnserializable => "output_serialization_failed",
            FailureKind::OutputSchemaViolation => "output_schema_violation",
            FailureKind::InvalidSuspension => "invalid_suspension",
            FailureKind::Panicked => "tool_panicked",
            FailureKind::TimedOut => "tool_timeout",
            FailureKind::Rejected => "rejected",
            FailureKind::Expired => "suspension_expired",
            FailureKind::ReconciledAsFailed => "reconciled_as_failed",
            FailureKind::Unavailable => "upstream_unavailable",
            FailureKind::ToolChanged => "tool_changed",
            FailureKind::CredentialsMissing => "upstream_credentials_missing",
            FailureKind::ExchangeRefused => "upstream_exchange_refused",
            FailureKind::CredentialsExpired => "upstream_credentials_expired",
        }
    }

    /// The kind a recorded code stands for (`ToolFailed` for a code this build does not know).
    pub(super) fn from_code(code: &str) -> FailureKind {
        FailureKind::ALL
            .into_iter()
            .find(|kind| kind.code() == code)
            .unwrap_or(FailureKind::ToolFailed)
    }
}

/// Why a call ended without an output: its kind, and the error as recorded on the call.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The error as recorded (`code` is `kind.code()`).
    pub error: CallError,
}

impl Failure {
    pub(super) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            error: CallError::new(kind.code(), message),
        }
    }

    pub(super) fn with_violations(
        kind: FailureKind,
        message: &str,
        violations: &[InputViolation],
    ) -> Self {
        let mut failure = Failure::new(kind, message);
        failure.error.details = Some(json!({ "errors": violations }));
        failure
    }

    pub(super) fn from_record(error: CallError) -> Self {
        Failure {
            kind: FailureKind::from_code(&error.code),
            error,
        }
    }
}

/// Why a request to the lifecycle was refused; unless said otherwise, nothing ran or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// No tool has this name (or none the principal may call).
    #[error("no tool is named `{0}`")]
    UnknownTool(String),
    /// An approver deciding a call made under its own name: whoever calls a tool never decides
    /// on it, however each signed in (an agent's token and its person's inbox session, say).
    #[error("call `{0}` was made under the decider's own name")]
    DecidesOwnCall(String),
    /// The principal's token lacks a scope the tool requires (`required_scopes`): every scope
    /// the call needs, for the challenge.
    #[error("the token lacks a scope tool `{tool}` requires")]
    InsufficientScope {
        /// The tool.
        tool: String,
        /// Every scope a call of it needs.
        scopes: Vec<String>,
    },
    /// The input does not fit the tool's input schema.
    #[error("the input does not fit tool `{tool}`")]
    InvalidInput {
        /// The tool.
        tool: String,
        /// Where and why.
        violations: Vec<InputViolation>,
    },
    /// A quota of the caller's refuses the request (see [`crate::dispatch::quota`]); nothing
    /// ran or was recorded.
    #[error("rate limited by {}", .0.kind.key())]
    RateLimited(Box<super::quota::QuotaExceeded>),
    /// The tool already runs as many calls as it may.
    #[error("tool `{0}` is at its concurrency limit")]
    Overloaded(String),
    /// The idempotency key belongs to a call with a different input.
    #[error("the idempotency key was used for another call with a different input")]
    IdempotencyKeyReused {
        /// The call that owns the key; `None` when another caller made it (a tool's own key),
        /// whose call is not named to this one.
        call_id: Option<String>,
    },
    /// The call with this idempotency key is still running.
    #[error("call {call_id} with this idempotency key is still running")]
    CallInProgress {
        /// The running call.
        call_id: String,
    },
    /// The call with this idempotency key may or may not have had its effect; a person must
    /// settle it first.
    #[error("call {call_id} with this idempotency key needs reconciliation")]
    NeedsReconciliation {
        /// The call.
        call_id: String,
        /// Its record, when the asker may see it (a caller sees only its own calls).
        call: Option<Box<CallRecord>>,
    },
    /// No suspension ever had this token.
    #[error("no suspension has this token")]
    UnknownToken,
    /// The suspension was already approved, rejected or completed.
    #[error("the suspension was already resolved")]
    AlreadyResolved(Box<CallRecord>),
    /// The approver approved this suspension before; it needs approvals from others too.
    #[error("the approver approved this suspension before")]
    AlreadyApproved {
        /// The approvals so far.
        approvals: Vec<crate::store::ApprovalVote>,
        /// How many distinct approvers it needs.
        required: u32,
    },
    /// An external completion of a suspension whose policy needs several approvers: one
    /// person's completion would stand for all of them.
    #[error("calls of tool `{tool}` need {required} approvals, so they cannot be completed")]
    NeedsApprovals {
        /// The tool.
        tool: String,
        /// How many distinct approvers it needs.
        required: u32,
    },
    /// The suspension expired (now recorded on the call).
    #[error("the suspension expired")]
    SuspensionExpired(Box<CallRecord>),
    /// The approver's input does not fit the suspension's schema; it stays pending.
    #[error("the resume input does not fit the suspension's schema")]
    InvalidResumeInput(Vec<InputViolation>),
    /// An external completion for a tool that declares no output schema.
    #[error("tool `{0}` declares no output schema, so it cannot be completed externally")]
    CompletionNotAllowed(String),
    /// An approval with an edited input, of a tool whose approval policy does not allow edits
    /// (`edit_input`); nothing was decided.
    #[error("the approval policy of tool `{0}` does not allow edits of a call's input")]
    EditNotAllowed(String),
    /// An output given by a person does not fit the tool's output schema.
    #[error("the output does not fit the tool's output schema")]
    OutputSchemaViolation(Vec<InputViolation>),
    /// No call has this id.
    #[error("no call has the id `{0}`")]
    UnknownCall(String),
    /// The call does not need reconciliation.
    #[error("the call does not need reconciliation")]
    NotReconcilable(Box<CallRecord>),
    /// The tool's backend (an upstream MCP server) cannot be reached now; nothing was recorded
    /// or resolved.
    #[error("tool `{tool}` cannot be reached now")]
    Unavailable {
        /// The tool.
        tool: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// The tool is held: its definition changed upstream since it was pinned, and waits for an
    /// admin (see `crate::upstream`); or, deciding a call, the definition it was made against
    /// is no longer the one pinned, and the call ended with this error. Nothing was sent.
    #[error("the definition of tool `{tool}` changed since it was trusted")]
    ToolChanged {
        /// The tool.
        tool: String,
        /// The hash of the definition pinned (trusted).
        pinned: String,
        /// The hash of the definition its server lists now, when it is held.
        current: Option<String>,
        /// The call that ended with this error, when a decision ended one.
        call_id: Option<String>,
    },
    /// JSON nested deeper than the dispatcher accepts (its `max_json_depth`).
    #[error("the JSON is nested deeper than {0} levels")]
    TooDeep(usize),
    /// A rejection's reason or a settlement's error the lifecycle does not record (see
    /// `resolve`): too long, or (an error) saying nothing.
    #[error(transparent)]
    ReasonRefused(#[from] super::resolve::ReasonRefused),
    /// What a person asked does not fit the lifecycle's rules (a rejection option the policy
    /// does not offer); the message says what it must be.
    #[error("{0}")]
    BadRequest(String),
    /// A standing approval asked where it is never offered (see `standing`): the sentence
    /// says why; nothing was decided.
    #[error("{0}")]
    StandingNotAllowed(String),
    /// A standing approval asked for more than the tool's policy allows (or for nothing):
    /// `standing.<field>` must be 1 to `max`; nothing was decided.
    #[error("`standing.{field}` must be 1 to {max}")]
    StandingOutOfBounds {
        /// `for_s` or `calls`.
        field: &'static str,
        /// The policy's bound.
        max: u64,
    },
    /// No standing approval has this id (or none of a tool the principal decides).
    #[error("no standing approval has the id `{0}`")]
    UnknownStandingApproval(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The lifecycle task itself failed (a bug, not a tool's failure).
    #[error("the call's task failed: {0}")]
    Internal(String),
}

/// What kind of refusal an error is, which is what a door decides its answer by (an HTTP
/// status, an MCP tool error or protocol error), never the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request cannot be done as asked (it names nothing, does not fit, conflicts with the
    /// call's state): whoever asked can act on it.
    InvalidRequest,
    /// The tool or its backend is busy or unreachable now; nothing ran: retry later.
    Unavailable,
    /// The server itself failed (its store, a bug); logged where it happened, answered without
    /// its cause.
    Internal,
}

impl DispatchError {
    /// What kind of refusal this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DispatchError::Overloaded(_) | DispatchError::Unavailable { .. } => {
                ErrorKind::Unavailable
            }
            // A lost lease is the call's state (settled meanwhile), not the server failing.
            DispatchError::Store(StoreError::LeaseLost(_)) => ErrorKind::InvalidRequest,
            DispatchError::Store(_) | DispatchError::Internal(_) => ErrorKind::Internal,
            _ => ErrorKind::InvalidRequest,
        }
    }
}
