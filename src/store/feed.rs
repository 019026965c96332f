//! The change feed's types: a position in it (opaque to clients, each backend writes its own),
//! an entry (one change of a call, or of an upstream's tool), and a page of entries, as
//! [`FeedStore`](super::FeedStore) answers them.

use serde::Serialize;

use super::{ApprovalVote, CallSummary, SuspensionView, Timestamp};

/// A position in the change feed, as text: opaque to clients, which hand it back to read on
/// from it (an SSE `id:`, `?after=`). Each backend writes and parses its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FeedCursor(pub String);

impl std::fmt::Display for FeedCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One change, as the change feed keeps it, in commit order: every change of a call's status
/// other than into `running` (a plain read without an idempotency key that finishes within its
/// request has none), and each change of an upstream's tool definition an admin is asked about
/// or accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEntry {
    /// Its position: reading after it returns the entries that follow.
    pub cursor: FeedCursor,
    /// `call.<status>`: `call.suspended`, `call.completed`, `call.failed`, `call.rejected`,
    /// `call.expired`, `call.interrupted`, `call.needs_reconciliation`; or
    /// `call.approval_recorded` or `call.escalated` (the call still suspended); or
    /// `upstream.tool_changed` or `upstream.change_accepted`.
    pub kind: String,
    /// When the change happened.
    pub at: Timestamp,
    /// What changed: a call, or an upstream's tool.
    pub subject: FeedSubject,
    /// For `call.suspended`: the suspension it made; for `call.approval_recorded` and
    /// `call.escalated`, the one approved or escalated.
    pub suspension: Option<SuspensionView>,
    /// For `call.rejected`, `call.failed` and `call.expired`: the call's error (a rejection's
    /// reason and option, say).
    pub error: Option<super::CallError>,
    /// For `call.approval_recorded`: who approved, and how far the call is from its quorum, as
    /// the approval was recorded.
    pub progress: Option<ApprovalsSoFar>,
    /// When the call ran with an input an approver edited (at or before the entry): who
    /// edited it, and its input before and after.
    pub edited: Option<Box<super::CallEdit>>,
}

/// What a feed entry is about.
#[derive(Debug, Clone, PartialEq)]
pub enum FeedSubject {
    /// A call, as the change left it (its status, attempts and `updated_at` as of the entry).
    Call(CallSummary),
    /// An upstream's tool: which upstream, and the change as the upstream module described it
    /// (a JSON object naming the tool, the hashes and who accepted it), kept as written.
    Upstream {
        /// The upstream's name (`[[upstreams]] name`).
        upstream: String,
        /// The change.
        change: serde_json::Value,
    },
}

impl FeedEntry {
    /// The call the entry is about; `None` for an entry of an upstream's tool.
    pub fn call(&self) -> Option<&CallSummary> {
        match &self.subject {
            FeedSubject::Call(call) => Some(call),
            FeedSubject::Upstream { .. } => None,
        }
    }

    /// The tool the entry is about, by the name it is served as: the call's, or the upstream
    /// tool's (its change's `served_as`).
    pub fn tool(&self) -> Option<&str> {
        match &self.subject {
            FeedSubject::Call(call) => Some(&call.tool),
            FeedSubject::Upstream { change, .. } => change["served_as"].as_str(),
        }
    }
}

/// The approvals of a suspension whose policy needs several approvers, as one of them was
/// recorded (a `call.approval_recorded` entry): named as `GET /approvals/{token}` and an
/// approval's `202` name them, so that "1 of 2, by alice" reads alike everywhere.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ApprovalsSoFar {
    /// The approvals so far, oldest first: the one this entry records last.
    pub approvals: Vec<ApprovalVote>,
    /// How many distinct approvers the call needs.
    pub approvals_required: u32,
}

/// The types of feed entries, as `FeedEntry::kind` names them: a change of status;
/// `call.approval_recorded` (an approval short of the quorum the tool's policy asks for) or
/// `call.escalated` (a suspension undecided past its policy's `escalate_after_s`), where the
/// call stays suspended.
pub const FEED_TYPES: [&str; 9] = [
    "call.suspended",
    "call.approval_recorded",
    "call.escalated",
    "call.completed",
    "call.failed",
    "call.rejected",
    "call.expired",
    "call.interrupted",
    "call.needs_reconciliation",
];

/// The types of feed entries about an upstream's tool (admins only): `upstream.tool_changed`
/// (a definition that is not the one pinned, held for an admin; told once per definition) and
/// `upstream.change_accepted` (an admin pinned it).
pub const UPSTREAM_FEED_TYPES: [&str; 2] = [TOOL_CHANGED, CHANGE_ACCEPTED];

/// The type of a feed entry telling of a changed upstream tool, held for an admin.
pub const TOOL_CHANGED: &str = "upstream.tool_changed";

/// The type of a feed entry telling that an admin accepted an upstream tool's definition.
pub const CHANGE_ACCEPTED: &str = "upstream.change_accepted";

/// Whether `kind` names a type of feed entry, of a call or of an upstream's tool.
pub fn is_feed_type(kind: &str) -> bool {
    FEED_TYPES.contains(&kind) || UPSTREAM_FEED_TYPES.contains(&kind)
}

/// Every type of feed entry, for a message naming them.
pub fn feed_types() -> String {
    FEED_TYPES
        .iter()
        .chain(&UPSTREAM_FEED_TYPES)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// A page of the change feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedPage {
    /// The entries after the cursor asked for, oldest first.
    pub entries: Vec<FeedEntry>,
    /// Where to read on from: the last entry's cursor, or the one asked for if none.
    pub cursor: FeedCursor,
    /// Entries after these exist but are not final yet (on a shared database, a transaction
    /// older than theirs is still in flight): read again shortly rather than wait for a wake-up.
    pub settling: bool,
}
