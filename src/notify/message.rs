//! What every message says, whatever its channel: [`MessageFacts`] (who asks, which tool, why,
//! the input as a person reads it, whether one click may decide, where to decide) and, once the
//! call's approval is decided on any door, [`Decided`] (who, how, when).
//!
//! (The SLACK helper's stand-in for the NOTIFY helper's module of the same name, with the same
//! types and fields: NOTIFY's, which also makes the facts of a call, replaces it at the merge.)

use serde::{Deserialize, Serialize};

use crate::store::Timestamp;

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
    /// Whether one click may decide: false when the approval asks for an answer (fields in its
    /// schema) or the call is a `write`, which the inbox asks to confirm.
    pub one_click: bool,
    /// The call's page in the inbox (`{public_url}/inbox/calls/{call_id}`).
    pub inbox_url: String,
    /// The link to decide, for the person the message goes to.
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
