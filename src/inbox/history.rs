//! A call's history in sentences, as a person reads it ("Created by orchestrator.", "Approved
//! by finance-ops: Checked with the customer.", "Ran again with the approval and completed.")
//! instead of its events' JSON.
//!
//! The events are the store's (`created`, `suspended`, `approved`, `redispatched`, …); a run
//! again and the outcome that ends it are told as one sentence, so "ran again" never reads like
//! a second effect of its own.

use serde_json::Value;

use super::views::{Moment, ago};
use crate::store::{CallEvent, Timestamp};

/// One sentence of a call's history.
pub(crate) struct HistoryRow {
    /// When it happened.
    pub(crate) at: Moment,
    /// How long ago.
    pub(crate) ago: String,
    /// What happened.
    pub(crate) sentence: String,
}

/// The sentences of `events`, oldest first, as shown at `now`.
pub(crate) fn history(events: &[CallEvent], now: Timestamp) -> Vec<HistoryRow> {
    let mut rows = Vec::with_capacity(events.len());
    let mut events = events.iter().peekable();
    while let Some(event) = events.next() {
        let sentence = if event.kind == "redispatched" {
            let after = match detail(event, "after") {
                Some("interrupted") => "Ran again after the interruption",
                _ => "Ran again with the approval",
            };
            // The outcome of that run, when it is the next event: one sentence.
            match events.peek().and_then(|next| ending(next)) {
                Some(ending) => {
                    events.next();
                    format!("{after} and {ending}")
                }
                None => format!("{after}."),
            }
        } else {
            sentence(event)
        };
        rows.push(HistoryRow {
            at: Moment::of(event.at, now),
            ago: ago(event.at, now),
            sentence,
        });
    }
    rows
}

/// How a run ended, to finish "Ran again with the approval and …".
fn ending(event: &CallEvent) -> Option<String> {
    Some(match event.kind.as_str() {
        "completed" => "completed.".into(),
        "failed" => with_error("failed", event),
        "suspended" => match detail(event, "reason") {
            Some(reason) => format!("asked again: {reason}"),
            None => "asked again.".into(),
        },
        "needs_reconciliation" => {
            "stopped before its effect was known: it needs reconciliation.".into()
        }
        _ => return None,
    })
}

fn sentence(event: &CallEvent) -> String {
    let by = |verb: &str| match (&event.actor_name, &event.actor) {
        (Some(name), Some(actor)) => format!("{verb} by {name} ({actor})"),
        (None, Some(actor)) => format!("{verb} by {actor}"),
        (_, None) => format!("{verb} (auth off)"),
    };
    match event.kind.as_str() {
        "created" => format!("{}.", by("Created")),
        "suspended" => match detail(event, "reason") {
            Some(reason) => format!("Suspended: {reason}"),
            None => "Suspended, waiting for a person.".into(),
        },
        "approved" => match answer_text(event) {
            Some(text) => format!("{}: {text}", by("Approved")),
            None => format!("{}.", by("Approved")),
        },
        "edited" => format!(
            "{}: the call runs with the edited input, and the approvals counted are of it.",
            by("Input edited")
        ),
        "escalated" => "Escalated: nobody decided within the policy's time.".into(),
        "standing_granted" => match event.details.as_ref().and_then(|d| d["calls"].as_u64()) {
            Some(calls) => format!(
                "{}: the caller's next {calls} calls of this tool run at once while it holds.",
                by("Standing approval granted")
            ),
            None => format!("{}.", by("Standing approval granted")),
        },
        "standing_approved" => format!(
            "{}: it ran at once, without asking.",
            by("Released by a standing approval granted")
        ),
        "approval_recorded" => match answer_text(event) {
            Some(text) => format!("{}: {text}", by("Approval recorded")),
            None => format!("{}, waiting for more approvers.", by("Approval recorded")),
        },
        "rejected" => match detail(event, "reason") {
            Some(reason) => format!("{}: {reason}", by("Rejected")),
            None => format!("{} without a reason.", by("Rejected")),
        },
        "completed_externally" => format!(
            "{}: the receipt is the call's output; the tool did not run.",
            by("Completed externally")
        ),
        "completed" => "Completed.".into(),
        "failed" => with_error("Failed", event),
        "interrupted" => match detail(event, "reason") {
            Some(reason) => format!("Interrupted: {reason}"),
            None => "Interrupted.".into(),
        },
        "needs_reconciliation" => match error_message(event) {
            Some(message) => format!("Needs reconciliation: {message}"),
            None => "Needs reconciliation: whether its effect happened is not known.".into(),
        },
        "reconciled" => match detail(event, "status") {
            Some("completed") => format!("{} as done.", by("Settled")),
            Some("failed") => format!("{} as not done.", by("Settled")),
            _ => format!("{}.", by("Settled")),
        },
        "expired" => "Expired before anyone decided.".into(),
        "late_outcome" => match detail(event, "status") {
            Some(status) => format!(
                "A run that no longer owned the call ended {} later; its outcome was not \
                 recorded.",
                status.replace('_', " ")
            ),
            None => "A late outcome was refused.".into(),
        },
        other => format!("{}.", other.replace('_', " ")),
    }
}

/// `what` happened, and the error's message when the event has one: "Failed: …", "Failed.".
fn with_error(what: &str, event: &CallEvent) -> String {
    match error_message(event) {
        Some(message) => format!("{what}: {message}"),
        None => format!("{what}."),
    }
}

/// What the approver wrote, from an `approved` event's answer: its text fields (a note, say),
/// joined; none when the answer holds no text.
fn answer_text(event: &CallEvent) -> Option<String> {
    let answer = event.details.as_ref()?.get("answer")?;
    let texts: Vec<&str> = match answer {
        Value::String(text) => vec![text.as_str()],
        Value::Object(fields) => fields.values().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let texts: Vec<&str> = texts
        .into_iter()
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .collect();
    (!texts.is_empty()).then(|| texts.join("; "))
}

/// The text at `key` in the event's details.
fn detail<'e>(event: &'e CallEvent, key: &str) -> Option<&'e str> {
    event.details.as_ref()?.get(key)?.as_str()
}

/// The message of the error in the event's details.
fn error_message(event: &CallEvent) -> Option<&str> {
    event
        .details
        .as_ref()?
        .get("error")?
        .get("message")
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, actor: Option<&str>, details: Option<Value>) -> CallEvent {
        CallEvent {
            at: Timestamp(1_000_000_000_000),
            kind: kind.into(),
            actor: actor.map(str::to_owned),
            actor_name: None,
            details,
        }
    }

    fn sentences(events: &[CallEvent]) -> Vec<String> {
        history(events, Timestamp(1_000_000_000_000))
            .into_iter()
            .map(|row| row.sentence)
            .collect()
    }

    #[test]
    fn an_approved_refund_reads_as_sentences() {
        let reason =
            "A refund of $250.00 for order o-1 (late) is above the $100.00 approval threshold.";
        let events = [
            event("created", Some("orchestrator"), None),
            event("suspended", None, Some(json!({"reason": reason}))),
            event(
                "approved",
                Some("finance-ops"),
                Some(json!({"answer": {"note": "Checked with the customer."}})),
            ),
            event("redispatched", None, None),
            event("completed", None, Some(json!({"attempts": 2}))),
            // An answer without text, and an approval recorded before answers were.
            event(
                "approved",
                Some("on-call"),
                Some(json!({"answer": {"boxes": []}})),
            ),
            event("approved", Some("on-call"), None),
            CallEvent {
                actor_name: Some("Dana Reyes".into()),
                ..event("approved", Some("corp:dana"), None)
            },
        ];
        assert_eq!(
            sentences(&events),
            [
                "Created by orchestrator.".to_owned(),
                format!("Suspended: {reason}"),
                "Approved by finance-ops: Checked with the customer.".to_owned(),
                "Ran again with the approval and completed.".to_owned(),
                "Approved by on-call.".to_owned(),
                "Approved by on-call.".to_owned(),
                "Approved by Dana Reyes (corp:dana).".to_owned(),
            ]
        );
    }

    #[test]
    fn rejections_failures_and_settlements_say_why() {
        let failed = json!({"error": {"code": "tool_failed", "message": "The bank is down."}});
        let events = [
            event(
                "rejected",
                Some("finance-ops"),
                Some(json!({"reason": "Not today."})),
            ),
            event("rejected", None, None),
            event("redispatched", None, None),
            event("failed", None, Some(failed)),
            event(
                "reconciled",
                Some("on-call"),
                Some(json!({"status": "failed"})),
            ),
            event("redispatched", None, Some(json!({"after": "interrupted"}))),
        ];
        assert_eq!(
            sentences(&events),
            [
                "Rejected by finance-ops: Not today.",
                "Rejected (auth off) without a reason.",
                "Ran again with the approval and failed: The bank is down.",
                "Settled by on-call as not done.",
                "Ran again after the interruption.",
            ]
        );
    }
}
