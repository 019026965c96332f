//! Calls as the store keeps them: a call's status, its record and history, what a new call and
//! an attempt's outcome bring, lists of calls, and settling a call that needs reconciliation.
//!
//! These are the types of [`CallStore`](super::CallStore); a call's suspension, as an approver
//! sees it, is in `suspensions.rs`.

use serde::Serialize;
use serde_json::Value;

use super::{SuspensionView, Timestamp};
use crate::contract::meta::Effect;

/// Where a call is in its lifecycle.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The tool is running (or was, when the server stopped).
    Running,
    /// Waiting for a person to approve or reject.
    Suspended,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// A person rejected it; the tool did not run again.
    Rejected,
    /// A `read` or `idempotent` call was running when the server stopped; the same request
    /// (same idempotency key) runs it again.
    Interrupted,
    /// A `write` call was running when the server stopped, or timed out: its effect may or may
    /// not have happened. Never re-run by itself; an approver settles it.
    NeedsReconciliation,
    /// Its suspension expired before anyone approved or rejected it.
    Expired,
}

impl CallStatus {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Running => "running",
            CallStatus::Suspended => "suspended",
            CallStatus::Completed => "completed",
            CallStatus::Failed => "failed",
            CallStatus::Rejected => "rejected",
            CallStatus::Interrupted => "interrupted",
            CallStatus::NeedsReconciliation => "needs_reconciliation",
            CallStatus::Expired => "expired",
        }
    }

    /// The status named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => CallStatus::Running,
            "suspended" => CallStatus::Suspended,
            "completed" => CallStatus::Completed,
            "failed" => CallStatus::Failed,
            "rejected" => CallStatus::Rejected,
            "interrupted" => CallStatus::Interrupted,
            "needs_reconciliation" => CallStatus::NeedsReconciliation,
            "expired" => CallStatus::Expired,
            _ => return None,
        })
    }
}

/// Why a call failed or was rejected, as recorded and shown.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct CallError {
    /// A stable token, such as `tool_failed` or `rejected`.
    pub code: String,
    /// A sentence for people.
    pub message: String,
    /// Structured evidence, when there is some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

impl CallError {
    /// An error without details.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CallError {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }
}

/// Who did something to a call: the name recorded as an event's `actor`, and for a person
/// signed in with an identity provider, the name shown for them (`actor_name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actor {
    /// The principal's name (`None`: auth off).
    pub name: Option<String>,
    /// The person's display name, when known.
    pub display: Option<String>,
}

impl Actor {
    /// The actor `name`, without a display name.
    pub fn named(name: Option<&str>) -> Actor {
        Actor {
            name: name.map(str::to_owned),
            display: None,
        }
    }
}

/// One entry of a call's append-only history.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CallEvent {
    /// When it happened.
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// What happened: `created`, `suspended`, `edited`, `approved`, `rejected`,
    /// `completed_externally`, `redispatched`, `completed`, `failed`, `interrupted`,
    /// `needs_reconciliation`, `reconciled`, `expired`. A finished run's event carries its `attempts` (retries
    /// included) and, when it failed, the error (`tool_timeout` for a timeout); `approved`
    /// carries the approver's `answer`, `rejected` the `reason` when there is one, `edited`
    /// the `input` as the approver edited it; `standing_approved` (a standing approval released
    /// the call: its approver as the actor, `standing_approval_id`); `standing_granted` (the
    /// approval of this call granted one: `standing_approval_id`, `calls`, `expires_at`).
    pub kind: String,
    /// The principal name (a key's, or `<issuer>:<subject>`) of whoever caused it, when a
    /// client or a person did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The name shown for that person, when they signed in with an identity provider (its
    /// `name` or `email` then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_name: Option<String>,
    /// Evidence, such as an error or the number of attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// Everything recorded about one call.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CallRecord {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// What the tool does to the world.
    pub effect: Effect,
    /// Where the call is in its lifecycle.
    pub status: CallStatus,
    /// The API key name that made the call; `null` when auth is off.
    pub caller: Option<String>,
    /// The idempotency key the call ran under, if any.
    pub idempotency_key: Option<String>,
    /// The input it was called with; the input it ran with, when an approver edited it (its
    /// tool's policy allowing edits, `edit_input`).
    pub input: Value,
    /// The input it was called with, when an approver edited it; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_input: Option<Value>,
    /// Who edited its input, and when; left out when nobody did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited: Option<super::EditMark>,
    /// The output, once completed.
    pub output: Option<Value>,
    /// Why it failed or was rejected.
    pub error: Option<CallError>,
    /// The pending suspension, while suspended.
    pub suspension: Option<SuspensionView>,
    /// When the call was made.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When its record last changed.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// How many times its tool has run (an approval or a retry runs it again).
    pub attempts: u32,
    /// The standing approval that released the call, when one did (its `standing_approved`
    /// event); left out otherwise, and of lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standing_approval: Option<super::StandingUse>,
    /// What happened to the call, oldest first. Left out of lists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<CallEvent>,
    /// The trace the call was made in, when traces were exported (32 hex digits): find the
    /// call, the decision that released it and its re-run in a trace viewer. Kept as the
    /// call's span context (its W3C `traceparent`), to link what follows to it; only the trace
    /// id is shown.
    #[serde(
        rename = "trace_id",
        serialize_with = "trace_id_of",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub traceparent: Option<String>,
}

/// The trace id of a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), serialized.
fn trace_id_of<S: serde::Serializer>(
    traceparent: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let id = traceparent.as_deref().and_then(|traceparent| {
        let id = traceparent.get(3..35)?;
        (traceparent.get(2..3) == Some("-") && id.bytes().all(|b| b.is_ascii_hexdigit()))
            .then_some(id)
    });
    match id {
        Some(id) => serializer.serialize_str(id),
        None => serializer.serialize_none(),
    }
}

impl CallRecord {
    /// Its events since it was last suspended (all of them, if it never was): what happened to
    /// the suspension it waits on, when it waits.
    pub fn events_since_suspended(&self) -> &[CallEvent] {
        let since = self
            .events
            .iter()
            .rposition(|event| event.kind == "suspended")
            .map_or(0, |i| i + 1);
        &self.events[since..]
    }
}

/// A call about to be recorded.
#[derive(Debug, Clone)]
pub struct NewCall {
    /// A fresh call id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// What the tool does to the world.
    pub effect: Effect,
    /// The API key name making the call, when auth is on.
    pub caller: Option<String>,
    /// The input, already validated.
    pub input: Value,
    /// The idempotency key: the tool's own, or one derived from the client's header. At most
    /// one call exists per (tool, key).
    pub idempotency_key: Option<String>,
    /// How many times the tool has run: 1 for an intent recorded before the first run.
    pub attempts: u32,
    /// When the call was made.
    pub created_at: Timestamp,
    /// The W3C `traceparent` of the call's span, when traces are exported.
    pub trace: Option<String>,
}

/// What inserting a call did.
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    /// The call is new.
    New,
    /// A call with the same (tool, idempotency key) exists; nothing was written.
    Existing(Box<CallRecord>),
}

/// How an attempt ended, as recorded.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The call completed with this output.
    Completed {
        /// The tool's output.
        output: Value,
    },
    /// The call failed.
    Failed {
        /// Why.
        error: CallError,
    },
    /// The call waits for a person; the suspension is created with it.
    Suspended {
        /// A fresh single-use token.
        token: String,
        /// What the approver is asked.
        reason: String,
        /// The JSON Schema the approver's input must satisfy.
        input_schema: Value,
        /// When the suspension expires, if it does.
        expires_at: Option<Timestamp>,
    },
    /// The effect of a `write` call may or may not have happened (it timed out): a person must
    /// settle it.
    NeedsReconciliation {
        /// Why.
        error: CallError,
    },
    /// The run ended before its tool ran (its store could not be reached): the same request
    /// runs it again.
    Interrupted {
        /// Why.
        reason: String,
    },
}

/// An interrupted call claimed for another run.
#[derive(Debug, Clone, PartialEq)]
pub struct Rerun {
    /// The call, now `running`.
    pub call: CallRecord,
    /// The approver's input, when the interrupted run was the re-dispatch of an approval: the
    /// new run resumes with it rather than asking again.
    pub resume_input: Option<Value>,
}

/// How a call needing reconciliation is settled.
#[derive(Debug, Clone)]
pub enum Settlement {
    /// The effect happened, with this output (already checked against the output schema).
    Output(Value),
    /// The effect did not happen, for this reason.
    Error(String),
}

/// What settling a call did.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// Settled; the call as it is now.
    Settled(CallRecord),
    /// The call does not need reconciliation; the call as it is now.
    NotNeeded(CallRecord),
    /// No call has this id.
    UnknownCall,
}

/// Which calls to list.
#[derive(Debug, Clone, Default)]
pub struct CallFilter {
    /// Only calls in this status.
    pub status: Option<CallStatus>,
    /// Only calls of this tool.
    pub tool: Option<String>,
}

/// A call as a list shows it: its state, without its input, output and history (which can be
/// large; read the call for them).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CallSummary {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// What the tool does to the world.
    pub effect: Effect,
    /// Where the call is in its lifecycle.
    pub status: CallStatus,
    /// The API key name that made the call.
    pub caller: Option<String>,
    /// The idempotency key the call ran under, if any.
    pub idempotency_key: Option<String>,
    /// When the call was made.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When its record last changed.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// How many times its tool has run.
    pub attempts: u32,
    /// Whether an approval of the call was ever escalated (undecided past its policy's
    /// `escalate_after_s`): the principals the escalation reached may see the call from then
    /// on. Not shown: it is what the rule of who sees a call reads.
    #[serde(skip)]
    pub escalated: bool,
}

/// One page of calls, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPage {
    /// The calls.
    pub calls: Vec<CallSummary>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::CallStatus;

    /// The metrics count an outcome by the name a status is stored under: every status but
    /// `running` is one.
    #[test]
    fn every_status_but_running_is_counted_as_an_outcome() {
        for status in [
            CallStatus::Running,
            CallStatus::Suspended,
            CallStatus::Completed,
            CallStatus::Failed,
            CallStatus::Rejected,
            CallStatus::Interrupted,
            CallStatus::NeedsReconciliation,
            CallStatus::Expired,
        ] {
            assert_eq!(CallStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                crate::metrics::outcome_slot(status.as_str()).is_some(),
                status != CallStatus::Running,
                "{status:?}"
            );
        }
    }
}
