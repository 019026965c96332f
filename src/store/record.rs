//! Calls and outcomes (and webhook deliveries) as the rows a SQL backend writes.
//!
//! Nothing here is particular to one database. The JSON is serialized and the events encoded
//! here, on the caller's task, so that a backend's statements bind only text and numbers; and
//! every SQL backend shares one encoding of a call's `events`, so that a record reads the same
//! whichever backend stored it. How a row is bound to a statement stays with each backend;
//! reading rows back, and decoding them, is `rows.rs`.

use serde_json::{Value, json};

use super::{
    Actor, ApprovalVote, CallError, CallStatus, NewCall, Outcome, RejectOption, Settlement,
    StoreError, Timestamp,
};

/// A new call with its JSON already serialized: that work is done by the caller's task, not by
/// the store's writer (in SQLite, the one writer thread everyone waits for).
pub(crate) struct PreparedCall {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    pub(crate) effect: &'static str,
    pub(crate) caller: Option<String>,
    pub(crate) input: String,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) attempts: u32,
    pub(crate) created_at: i64,
    pub(crate) trace: Option<String>,
}

impl PreparedCall {
    /// `call`, serialized.
    pub(crate) fn new(call: NewCall) -> Self {
        PreparedCall {
            input: json_text(&call.input),
            call_id: call.call_id,
            tool: call.tool,
            effect: call.effect.as_str(),
            caller: call.caller,
            idempotency_key: call.idempotency_key,
            attempts: call.attempts,
            created_at: call.created_at.0,
            trace: call.trace,
        }
    }
}

/// An outcome as the rows it becomes, serialized by the caller.
pub(crate) struct Prepared {
    /// When the outcome came about (Unix ms): the time of its event.
    pub(crate) at: i64,
    pub(crate) status: CallStatus,
    pub(crate) output: Option<String>,
    pub(crate) error: Option<String>,
    /// token, reason, input schema, expiry
    pub(crate) suspension: Option<(String, String, String, Option<i64>)>,
    /// The outcome's event, as stored in the call's `events` array; `None` for `completed`,
    /// which is written only when needed (see [`Prepared::event`]).
    event: Option<String>,
    /// How many times the tool has run in all, as the outcome's event records it.
    pub(crate) attempts: u32,
}

impl Prepared {
    /// `outcome`, after `attempts` runs of the tool in all, serialized.
    pub(crate) fn new(outcome: &Outcome, attempts: u32) -> Result<Self, StoreError> {
        let now = Timestamp::now().0;
        Ok(match outcome {
            Outcome::Completed { output } => Prepared {
                at: now,
                status: CallStatus::Completed,
                output: Some(json_text(output)),
                error: None,
                suspension: None,
                event: None,
                attempts,
            },
            Outcome::Failed { error } => Prepared::failed(CallStatus::Failed, error, attempts)?,
            Outcome::NeedsReconciliation { error } => {
                Prepared::failed(CallStatus::NeedsReconciliation, error, attempts)?
            }
            Outcome::Interrupted { reason } => Prepared {
                at: now,
                status: CallStatus::Interrupted,
                output: None,
                error: None,
                suspension: None,
                event: Some(event_json(
                    now,
                    CallStatus::Interrupted.as_str(),
                    None,
                    Some(&json!({ "reason": reason })),
                )),
                attempts,
            },
            Outcome::Suspended {
                token,
                reason,
                input_schema,
                expires_at,
            } => Prepared {
                at: now,
                status: CallStatus::Suspended,
                output: None,
                error: None,
                event: Some(event_json(
                    now,
                    "suspended",
                    None,
                    Some(&json!({ "reason": reason })),
                )),
                attempts,
                suspension: Some((
                    token.clone(),
                    reason.clone(),
                    json_text(input_schema),
                    expires_at.map(|t| t.0),
                )),
            },
        })
    }

    fn failed(status: CallStatus, error: &CallError, attempts: u32) -> Result<Self, StoreError> {
        let details = json!({ "error": error, "attempts": attempts });
        let now = Timestamp::now().0;
        Ok(Prepared {
            at: now,
            status,
            output: None,
            error: Some(to_json(error)?),
            suspension: None,
            event: Some(event_json(now, status.as_str(), None, Some(&details))),
            attempts,
        })
    }

    /// The `late_outcome` event of this outcome when it came from a run that no longer owned
    /// its call (of `replica`, on a shared database): what the run ended with, kept as evidence
    /// for whoever settles the call.
    pub(crate) fn late_event(
        &self,
        replica: Option<&str>,
        run: Option<u32>,
        now: i64,
    ) -> Result<String, StoreError> {
        let mut details = json!({
            "status": self.status.as_str(),
            "attempts": self.attempts,
        });
        if let Some(replica) = replica {
            details["replica"] = json!(replica);
        }
        if let Some(run) = run {
            details["run"] = json!(run);
        }
        if let Some(output) = &self.output {
            details["output"] = parse_json::<Value>(output)?;
        }
        if let Some(error) = &self.error {
            details["error"] = parse_json::<Value>(error)?;
        }
        if let Some((_, reason, _, _)) = &self.suspension {
            details["reason"] = json!(reason);
        }
        Ok(event_json(now, "late_outcome", None, Some(&details)))
    }

    /// The details of the outcome's event (JSON text), if it has any.
    pub(crate) fn event_details(&self) -> Option<String> {
        let event: Value = serde_json::from_str(self.event.as_deref()?).ok()?;
        event.get("details").map(Value::to_string)
    }

    /// The outcome's event, as stored in the call's `events` array. A call inserted already
    /// completed does not store it (see [`DERIVED_EVENTS`]), so it is written only here.
    pub(crate) fn event(&self) -> std::borrow::Cow<'_, str> {
        match &self.event {
            Some(event) => event.into(),
            None => event_json(
                self.at,
                "completed",
                None,
                Some(&Attempts {
                    attempts: self.attempts,
                }),
            )
            .into(),
        }
    }
}

/// A new call's `events` array: `created`, and its outcome's event when it has one. A call
/// inserted already completed stores [`DERIVED_EVENTS`] instead.
pub(crate) fn events_json(call: &PreparedCall, outcome: Option<&Prepared>) -> String {
    let created = || event_json::<Value>(call.created_at, "created", call.caller.as_deref(), None);
    match outcome {
        Some(outcome) if outcome.status == CallStatus::Completed => DERIVED_EVENTS.to_owned(),
        Some(outcome) => format!("[{},{}]", created(), outcome.event()),
        None => format!("[{}]", created()),
    }
}

/// The `events` of a call inserted already completed (most of them: every read): its two
/// events, `created` and `completed`, say nothing its columns do not (`created_at` and
/// `caller`; `updated_at` and `attempts`), so they are not written, which keeps the most
/// common row at about half its size. [`RawCall::decode`](super::rows::RawCall::decode) derives
/// them. A completed call never gains another event.
pub(crate) const DERIVED_EVENTS: &str = "";

/// One event as stored in a call's `events` array.
pub(crate) fn event_json<D>(at: i64, kind: &str, actor: Option<&str>, details: Option<&D>) -> String
where
    D: serde::Serialize + ?Sized,
{
    event_json_by(at, kind, actor, None, details)
}

/// One event caused by `actor`, as stored: its name, and the name shown for it.
pub(crate) fn actor_event_json<D>(at: i64, kind: &str, actor: &Actor, details: Option<&D>) -> String
where
    D: serde::Serialize + ?Sized,
{
    event_json_by(
        at,
        kind,
        actor.name.as_deref(),
        actor.display.as_deref(),
        details,
    )
}

fn event_json_by<D>(
    at: i64,
    kind: &str,
    actor: Option<&str>,
    actor_name: Option<&str>,
    details: Option<&D>,
) -> String
where
    D: serde::Serialize + ?Sized,
{
    use std::io::Write;
    // Written straight out: one allocation, no JSON tree built only to be printed.
    let mut event = Vec::with_capacity(96);
    let written = write!(event, "{{\"at\":{at},\"kind\":")
        .map_err(serde_json::Error::io)
        .and_then(|()| serde_json::to_writer(&mut event, kind));
    let written = written.and_then(|()| match actor {
        Some(actor) => {
            event.extend_from_slice(b",\"actor\":");
            serde_json::to_writer(&mut event, actor)
        }
        None => Ok(()),
    });
    let written = written.and_then(|()| match actor_name {
        Some(name) => {
            event.extend_from_slice(b",\"actor_name\":");
            serde_json::to_writer(&mut event, name)
        }
        None => Ok(()),
    });
    let written = written.and_then(|()| match details {
        Some(details) => {
            event.extend_from_slice(b",\"details\":");
            serde_json::to_writer(&mut event, details)
        }
        None => Ok(()),
    });
    written.expect("an event's fields are plain data, written to memory");
    event.push(b'}');
    String::from_utf8(event).expect("serde_json writes UTF-8")
}

/// The `details` of a `completed` event.
#[derive(serde::Serialize)]
struct Attempts {
    attempts: u32,
}

/// The status, output and error a call settled by `settlement` gets.
pub(crate) fn settled_columns(
    settlement: &Settlement,
) -> Result<(CallStatus, Option<String>, Option<String>), StoreError> {
    Ok(match settlement {
        Settlement::Output(output) => (CallStatus::Completed, Some(json_text(output)), None),
        Settlement::Error(message) => (
            CallStatus::Failed,
            None,
            Some(to_json(&CallError::new(
                "reconciled_as_failed",
                message.clone(),
            ))?),
        ),
    })
}

/// The error of a call a person rejected, with their reason if they gave one, and the option
/// they chose (named in the message, for a model that reads only that, and in `details`).
pub(crate) fn rejected_error(reason: Option<&str>, option: Option<&RejectOption>) -> CallError {
    let Some(option) = option else {
        return CallError::new("rejected", reason.unwrap_or("Rejected without a reason."));
    };
    let chosen = format!("Rejected: {} ({}).", option.name, option.description);
    let message = match reason {
        Some(reason) => format!("{chosen} {reason}"),
        None => chosen,
    };
    CallError {
        details: Some(serde_json::json!({
            "option": option.name,
            "description": option.description,
        })),
        ..CallError::new("rejected", message)
    }
}

/// The details of an `approved` event: the approver's answer (its note, say), so that the
/// call's history can say what was approved with, beside who approved.
pub(crate) fn approved_details(resume_input: &Value) -> Value {
    serde_json::json!({ "answer": resume_input })
}

/// The details of a `rejected` event: the reason and the option chosen, when there are.
pub(crate) fn rejected_details(
    reason: Option<&str>,
    option: Option<&RejectOption>,
) -> Option<Value> {
    let mut details = serde_json::Map::new();
    if let Some(reason) = reason {
        details.insert("reason".into(), reason.into());
    }
    if let Some(option) = option {
        details.insert("option".into(), option.name.clone().into());
    }
    (!details.is_empty()).then_some(Value::Object(details))
}

/// The error of a call whose suspension expired.
pub(crate) fn expired_error() -> CallError {
    CallError::new(
        "suspension_expired",
        "The suspension expired before anyone approved or rejected it.",
    )
}

/// A JSON value as text. Written by serde_json's own writer: `Value`'s `Display` goes through
/// the formatting machinery, piece by piece, at about twice the cost.
pub(crate) fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value has string keys and always serializes")
}

/// A serializable value as JSON text.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// What a `call.approval_recorded` feed entry keeps of its approval: the approvals so far,
/// `votes` (the one it records last), of the `quorum` the policy needs.
pub(crate) fn approvals_so_far(votes: &[ApprovalVote], quorum: u32) -> Result<String, StoreError> {
    to_json(&super::ApprovalsSoFar {
        approvals: votes.to_vec(),
        approvals_required: quorum,
    })
}

/// A value read back from stored JSON text.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The feed entry type of a change into `status`.
pub(crate) fn feed_type(status: CallStatus) -> &'static str {
    match status {
        CallStatus::Suspended => "call.suspended",
        CallStatus::Completed => "call.completed",
        CallStatus::Failed => "call.failed",
        CallStatus::Rejected => "call.rejected",
        CallStatus::Expired => "call.expired",
        CallStatus::Interrupted => "call.interrupted",
        CallStatus::NeedsReconciliation => "call.needs_reconciliation",
        // No entry is made for a change into `running`.
        CallStatus::Running => "call.running",
    }
}

/// The feed entry type of an approval recorded short of its quorum: the call stays suspended.
pub(crate) const APPROVAL_RECORDED: &str = "call.approval_recorded";

/// The feed entry type of a suspension escalated, undecided past its policy's
/// `escalate_after_s`: the call stays suspended.
pub(crate) const ESCALATED: &str = "call.escalated";

/// The status a feed entry of type `kind` leaves its call in.
pub(crate) fn feed_status(kind: &str) -> Option<CallStatus> {
    match kind {
        APPROVAL_RECORDED | ESCALATED => Some(CallStatus::Suspended),
        _ => kind.strip_prefix("call.").and_then(CallStatus::parse),
    }
}

/// What one approval of a suspension that needs `quorum` distinct approvers comes to, given
/// the approvals stored before it.
pub(crate) enum Vote {
    /// Its approver approved before: nothing changes (the approvals so far).
    Again(Vec<ApprovalVote>),
    /// Recorded, short of the quorum: the approvals to store, this one last.
    Short(Vec<ApprovalVote>),
    /// The quorum is reached: the approvals to store, this one last; the call runs.
    Quorum(Vec<ApprovalVote>),
}

impl Vote {
    /// `by`'s approval at `now`, after the approvals `stored` (as the column keeps them). Two
    /// approvals are by the same approver when their names are equal (with auth off, every
    /// approval is by the one anonymous approver).
    pub(crate) fn cast(
        stored: Option<&str>,
        by: &Actor,
        quorum: u32,
        now: i64,
    ) -> Result<Vote, StoreError> {
        let mut votes = ApprovalVote::parse_all(stored)?;
        if votes.iter().any(|vote| vote.approver == by.name) {
            return Ok(Vote::Again(votes));
        }
        votes.push(ApprovalVote {
            approver: by.name.clone(),
            display_name: by.display.clone(),
            at: Timestamp(now),
        });
        Ok(if votes.len() as u64 >= u64::from(quorum) {
            Vote::Quorum(votes)
        } else {
            Vote::Short(votes)
        })
    }
}

/// What a channel kept of its answer when `result` delivered it (see `Delivery::receipt`).
pub(crate) fn delivery_receipt(result: &super::DeliveryResult) -> Option<&str> {
    match result {
        super::DeliveryResult::Delivered { receipt, .. } => receipt.as_deref(),
        _ => None,
    }
}

/// The columns settling a delivery with `result` writes: its status, `last_status`,
/// `last_error` and `next_attempt_at` (its claim is released whatever the result).
pub(crate) fn settled_delivery(
    result: &super::DeliveryResult,
) -> (&'static str, Option<i64>, Option<&str>, Option<i64>) {
    use super::{DeliveryResult, DeliveryStatus};
    match result {
        DeliveryResult::Delivered { status, .. } => (
            DeliveryStatus::Delivered.as_str(),
            Some(i64::from(*status)),
            None,
            None,
        ),
        DeliveryResult::Retry { at, status, error } => (
            DeliveryStatus::Pending.as_str(),
            status.map(i64::from),
            Some(error.as_str()),
            Some(at.0),
        ),
        DeliveryResult::Failed { status, error } => (
            DeliveryStatus::Failed.as_str(),
            status.map(i64::from),
            Some(error.as_str()),
            None,
        ),
    }
}
