//! The change feed's types: a position in it (opaque to clients, each backend writes its own),
//! an entry (one change of a call), and a page of entries, as [`FeedStore`](super::FeedStore)
//! answers them.

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

/// One change of a call, as the change feed keeps it: every change of a call's status other
/// than into `running`, in commit order. A plain read without an idempotency key that finishes
/// within its request has none.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEntry {
    /// Its position: reading after it returns the entries that follow.
    pub cursor: FeedCursor,
    /// `call.<status>`: `call.suspended`, `call.completed`, `call.failed`, `call.rejected`,
    /// `call.expired`, `call.interrupted`, `call.needs_reconciliation`; or
    /// `call.approval_recorded` or `call.escalated` (the call still suspended).
    pub kind: String,
    /// When the change happened.
    pub at: Timestamp,
    /// The call as the change left it (its status, attempts and `updated_at` as of the entry).
    pub call: CallSummary,
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
