//! What every message says, whatever its channel: [`MessageFacts`] (who asks, which tool, why,
//! the input as a person reads it, whether one click may decide, where to decide) and, once the
//! call's approval is decided on any door, [`Decided`] (who, how, when), which updates what was
//! sent.
//!
//! Facts are made once, when the outbox reads the feed entry, and stored in the delivery's body,
//! so every attempt (on any replica, after any restart) sends the same message. Text from
//! callers, models and upstreams is never trusted: each channel escapes it for its own format
//! (HTML, Slack mrkdwn); here it is only bounded in length, so a message stays readable and no
//! header or block grows without end.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::{CallRecord, Timestamp};

/// The most lines of input a message lists.
const MAX_LINES: usize = 40;
/// The longest value or label shown, in characters.
const MAX_TEXT: usize = 300;
/// The longest reason shown, in characters.
const MAX_REASON: usize = 2000;
/// How deep nested input is listed; deeper, its JSON is shown on one line.
const MAX_DEPTH: usize = 4;

/// What a message asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Asked {
    /// A call waits for an approval (`call.suspended`).
    Suspended,
    /// An approval waited past its policy's `escalate_after_s` (`call.escalated`).
    Escalated,
}

/// One line of the input as a message lists it (as the inbox's page does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputLine {
    /// How far it is indented: 0 for a field of the input itself.
    pub depth: usize,
    /// The field, by its schema's `title`, else its name made readable.
    pub label: String,
    /// The value as a person reads it; `None` for an object or array, whose lines follow.
    pub value: Option<String>,
}

/// What every message about one approval says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageFacts {
    /// Suspended, or escalated.
    pub asked: Asked,
    /// The tool called.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// The approval's token (what Slack's buttons carry as their `value`).
    pub token: String,
    /// Who made the call (a principal's name), if auth is on.
    pub caller: Option<String>,
    /// The caller's display name, when its history records one.
    pub caller_display: Option<String>,
    /// What the approver is asked (the tool's reason), bounded.
    pub reason: String,
    /// The call's input, as the inbox lists it, bounded.
    pub input: Vec<InputLine>,
    /// Whether lines were left out of `input`.
    pub input_truncated: bool,
    /// Whether one click may decide: false when the approval asks for an answer (a field its
    /// schema requires) or the call is a `write`, which the inbox asks to confirm.
    pub one_click: bool,
    /// The call's page in the inbox (`{public_url}/inbox/calls/{call_id}`).
    pub inbox_url: String,
    /// The link to decide, for the person the message goes to (the inbox's page until a
    /// signed link is made for them when it is sent).
    pub link: String,
    /// When the approval expires, if it does.
    pub expires_at: Option<Timestamp>,
}

/// How an approval was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum How {
    /// Approved (the tool ran, or runs).
    Approved,
    /// Rejected, with the option the approver chose, if any.
    Rejected {
        /// The reject option's name.
        option: Option<String>,
    },
    /// Completed externally: the tool did not run.
    Completed,
    /// Nobody decided in time.
    Expired,
    /// The call ended otherwise (`failed`, `interrupted`, ...): its status.
    Ended {
        /// The call's status.
        status: String,
    },
}

/// Who decided an approval, how, and when: what updates the messages sent about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decided {
    /// Who decided (a principal's name); `None` with auth off or when nobody did (expired).
    pub by: Option<String>,
    /// Their display name, when recorded.
    pub by_display: Option<String>,
    /// How.
    pub how: How,
    /// When.
    pub at: Timestamp,
}

impl MessageFacts {
    /// The facts of `call`, which waits on an approval (`asked`), with its input listed by
    /// `input_schema` (the tool's), and its page under `inbox_base` (`http://host:port`).
    pub fn of(
        asked: Asked,
        call: &CallRecord,
        input_schema: &Value,
        inbox_base: &str,
    ) -> Option<MessageFacts> {
        let suspension = call.suspension.as_ref()?;
        let caller_display = call
            .events
            .iter()
            .find(|event| event.actor.is_some() && event.actor == call.caller)
            .and_then(|event| event.actor_name.clone())
            .map(|name| bounded(&name, MAX_TEXT));
        let mut input = Vec::new();
        let mut truncated = false;
        lines(
            input_schema,
            &call.input,
            0,
            None,
            &mut input,
            &mut truncated,
        );
        let inbox_url = format!(
            "{}/inbox/calls/{}",
            inbox_base.trim_end_matches('/'),
            call.call_id
        );
        Some(MessageFacts {
            asked,
            tool: call.tool.clone(),
            call_id: call.call_id.clone(),
            token: suspension.token.clone(),
            caller: call.caller.clone(),
            caller_display,
            reason: bounded(&suspension.reason, MAX_REASON),
            input,
            input_truncated: truncated,
            one_click: crate::dispatch::one_click(&suspension.input_schema, call.effect),
            link: inbox_url.clone(),
            inbox_url,
            expires_at: suspension.expires_at,
        })
    }

    /// Who asks, as a message names them: "Alice (corp:alice)", the name alone, or "someone"
    /// with auth off.
    pub fn asker(&self) -> String {
        match (&self.caller_display, &self.caller) {
            (Some(display), Some(name)) if display != name => format!("{display} ({name})"),
            (_, Some(name)) => name.clone(),
            (Some(display), None) => display.clone(),
            (None, None) => "someone (auth is off)".into(),
        }
    }
}

impl Decided {
    /// How `call` was decided, as its history last records it (`kind` the feed entry's type).
    pub fn of(kind: &str, call: &CallRecord, at: Timestamp) -> Decided {
        let decision = call.events.iter().rev().find(|event| {
            matches!(
                event.kind.as_str(),
                "approved" | "rejected" | "completed_externally" | "expired"
            )
        });
        let how = match (kind, decision.map(|e| e.kind.as_str())) {
            ("call.rejected", _) | (_, Some("rejected")) => How::Rejected {
                option: decision
                    .and_then(|e| e.details.as_ref())
                    .and_then(|d| d.get("option"))
                    .and_then(Value::as_str)
                    .map(|o| bounded(o, MAX_TEXT)),
            },
            ("call.expired", _) | (_, Some("expired")) => How::Expired,
            (_, Some("completed_externally")) => How::Completed,
            (_, Some("approved")) => How::Approved,
            _ => How::Ended {
                status: call.status.as_str().to_owned(),
            },
        };
        let by = decision.and_then(|e| e.actor.clone());
        let by_display = decision.and_then(|e| e.actor_name.clone());
        Decided {
            by,
            by_display: by_display.map(|name| bounded(&name, MAX_TEXT)),
            how,
            at: decision.map_or(at, |e| e.at),
        }
    }
}

/// `text` cut to `max` characters (an ellipsis saying so), with its control characters (line
/// breaks included) turned into spaces.
pub fn bounded(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// A field's name made readable: `refund_amount` is "Refund amount".
fn readable(name: &str) -> String {
    let spaced = name.replace(['_', '-'], " ");
    let mut chars = spaced.trim().chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => name.to_owned(),
    }
}

/// The lines of `value` at `depth`, labelled from `schema`.
fn lines(
    schema: &Value,
    value: &Value,
    depth: usize,
    label: Option<String>,
    out: &mut Vec<InputLine>,
    truncated: &mut bool,
) {
    if out.len() >= MAX_LINES {
        *truncated = true;
        return;
    }
    let nested = matches!(value, Value::Object(_) | Value::Array(_));
    match (label, value) {
        (None, Value::Object(fields)) => fields_of(schema, fields, depth, out, truncated),
        (None, other) => lines(schema, other, depth, Some("Value".into()), out, truncated),
        (Some(label), value) if nested && depth < MAX_DEPTH => {
            out.push(InputLine {
                depth,
                label: bounded(&label, MAX_TEXT),
                value: None,
            });
            match value {
                Value::Object(fields) => fields_of(schema, fields, depth + 1, out, truncated),
                Value::Array(items) => {
                    let item_schema = schema.get("items").unwrap_or(&Value::Bool(true));
                    for (n, item) in items.iter().enumerate() {
                        let label = Some(format!("{}", n + 1));
                        lines(item_schema, item, depth + 1, label, out, truncated);
                    }
                }
                _ => {}
            }
        }
        (Some(label), value) => out.push(InputLine {
            depth,
            label: bounded(&label, MAX_TEXT),
            value: Some(bounded(&scalar(value), MAX_TEXT)),
        }),
    }
}

fn fields_of(
    schema: &Value,
    fields: &Map<String, Value>,
    depth: usize,
    out: &mut Vec<InputLine>,
    truncated: &mut bool,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, value) in fields {
        let field = properties
            .and_then(|p| p.get(name))
            .unwrap_or(&Value::Bool(true));
        let label = field
            .get("title")
            .and_then(Value::as_str)
            .map_or_else(|| readable(name), str::to_owned);
        lines(field, value, depth, Some(label), out, truncated);
    }
}

/// A scalar as a person reads it: a string as itself, anything else as its JSON.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "(none)".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_is_listed_labelled_and_bounded() {
        let schema = json!({"properties": {"amount_cents": {"title": "Amount (cents)"}}});
        let mut out = Vec::new();
        let mut cut = false;
        let input = json!({"amount_cents": 1200, "customer": {"id": "c_1"}, "note": "a\nb"});
        lines(&schema, &input, 0, None, &mut out, &mut cut);
        let shown: Vec<(usize, &str, Option<&str>)> = out
            .iter()
            .map(|l| (l.depth, l.label.as_str(), l.value.as_deref()))
            .collect();
        assert_eq!(
            shown,
            [
                (0, "Amount (cents)", Some("1200")),
                (0, "Customer", None),
                (1, "Id", Some("c_1")),
                (0, "Note", Some("a b")),
            ]
        );
        assert!(!cut);
        let many = Value::Array((0..100).map(|n| json!(n)).collect());
        let mut out = Vec::new();
        lines(
            &json!(true),
            &json!({ "n": many }),
            0,
            None,
            &mut out,
            &mut cut,
        );
        assert_eq!(out.len(), MAX_LINES);
        assert!(cut);
        assert_eq!(bounded(&"x".repeat(10), 4), "xxxx…");
    }
}
