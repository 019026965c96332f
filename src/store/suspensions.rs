//! Suspensions: a call parked until a person decides, as a call record, the approvals queue and
//! a token show it, and the decision that resolves it.
//!
//! Split from `calls.rs` because they are what the approvers' doors (the approvals API, the
//! inbox) read and write; [`CallStore`](super::CallStore) keeps both.

use serde::Serialize;
use serde_json::Value;

use super::{CallRecord, Timestamp};

/// A suspension as a call record shows it while it is pending.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SuspensionView {
    /// The single-use token an approver resolves it with.
    pub token: String,
    /// What the approver is asked.
    pub reason: String,
    /// The JSON Schema the approver's input must satisfy.
    pub input_schema: Value,
    /// When the call was suspended.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When the suspension expires, if it does.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
}

/// One of the ways an approval policy lets a person reject a call (`reject_options`): named, so
/// that the caller (an agent, often) can tell which and change course instead of retrying blind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectOption {
    /// A short name, the one a rejection gives as `option`: `too_large`.
    pub name: String,
    /// What it tells the caller: "The amount is above what an agent may refund."
    pub description: String,
}

/// A pending suspension, as the approvals queue shows it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Approval {
    /// The token to approve or reject it with.
    pub token: String,
    /// The suspended call.
    pub call_id: String,
    /// The tool the call is for.
    pub tool: String,
    /// The API key name that made the call; `null` when auth is off.
    pub caller: Option<String>,
    /// What the approver is asked.
    pub reason: String,
    /// The JSON Schema the approver's input must satisfy.
    pub input_schema: Value,
    /// When the call was suspended.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When it expires, if it does.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    /// The call's input as it stands (edited by an approver, when its policy allows edits
    /// and one did); present when one approval is read by its token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The input the call was made with, when an approver's edit stands instead (`input`);
    /// the approvals listed are all of the edited input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_input: Option<Value>,
    /// Who edited the input as it stands, and when; left out when nobody did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited: Option<super::EditMark>,
    /// The options a rejection may name, from the tool's approval policy; left out when it
    /// has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reject_options: Vec<RejectOption>,
    /// How many distinct approvers must approve before the call runs, from the tool's approval
    /// policy (`approvals`); left out when it is one.
    #[serde(skip_serializing_if = "is_one")]
    #[schema(default = 1)]
    pub approvals_required: u32,
    /// The approvals recorded so far, oldest first, when the policy asks for more than one;
    /// left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalVote>,
    /// When it was escalated, undecided past its policy's `escalate_after_s`; left out until it
    /// is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub escalated_at: Option<Timestamp>,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// One approval of a suspension that needs several (`approvals = N`), short of the quorum or
/// the last of it: who gave it, and when. (What they answered is in the call's history, as the
/// `approval_recorded` event.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ApprovalVote {
    /// The approver's name (an API key's, or an issuer's `issuer:subject`); `null` when auth
    /// is off.
    pub approver: Option<String>,
    /// The name a person signed in with an identity provider is shown by, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// When it was recorded.
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
}

impl ApprovalVote {
    /// The votes as stored (a JSON array; `None`: none yet).
    pub(crate) fn parse_all(stored: Option<&str>) -> Result<Vec<ApprovalVote>, super::StoreError> {
        match stored {
            None => Ok(Vec::new()),
            Some(text) => serde_json::from_str(text)
                .map_err(|e| super::StoreError::Corrupt(format!("stored approvals: {e}"))),
        }
    }
}

/// One page of the approvals queue.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalPage {
    /// Oldest first.
    pub approvals: Vec<Approval>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<i64>,
}

/// What a token currently stands for.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalState {
    /// Still waiting, with the call's input.
    Pending(Approval),
    /// Already approved, rejected or completed; the call as it is now.
    Resolved(CallRecord),
    /// It expired before anyone resolved it; the call as it is now.
    Expired(CallRecord),
}

/// A person's decision on a suspension.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// Run the tool again with this (validated) input as `ctx.resume()`, once `quorum`
    /// distinct approvers have approved (this one included); short of it, the approval is
    /// recorded and the suspension stays pending.
    Approve {
        /// The approver's input.
        resume_input: Value,
        /// How many distinct approvers the call needs (1: this approval releases it).
        quorum: u32,
        /// The approver's edit of the call's input, if the tool's policy allows edits and
        /// the approver made one (checked against the tool's input schema): when it differs
        /// from the input as it stands, the approvals so far are cleared and this one counts
        /// first, of the edited input.
        edit: Option<Value>,
    },
    /// Finish the call as rejected; the tool does not run.
    Reject {
        /// The approver's reason, if they gave one (`None` for an empty or blank one).
        reason: Option<String>,
        /// The rejection option of the tool's approval policy the approver chose, if any.
        option: Option<RejectOption>,
    },
    /// Finish the call as completed with work done outside the server; the tool does not run.
    Complete {
        /// The output, already checked against the tool's output schema.
        output: Value,
    },
    /// Record that a suspension found expired has expired (the call becomes `expired`).
    Expire,
}

/// What resolving a token did.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// Approved: the call is `running` again, its attempts counted; it must be re-dispatched.
    Approved(CallRecord),
    /// Rejected: the call is `rejected`.
    Rejected(CallRecord),
    /// Completed externally: the call is `completed`.
    Completed(CallRecord),
    /// An approval short of the quorum: recorded, and the call still suspended.
    Recorded {
        /// The call as it is now.
        call: CallRecord,
        /// Every approval so far, this one last.
        approvals: Vec<ApprovalVote>,
    },
    /// This approver had approved before: nothing changed.
    AlreadyApproved {
        /// The call as it is now.
        call: CallRecord,
        /// The approvals so far.
        approvals: Vec<ApprovalVote>,
    },
    /// Someone resolved it first; the call as it is now.
    AlreadyResolved(CallRecord),
    /// It had expired: now recorded as such; the call as it is now.
    Expired(CallRecord),
    /// No suspension ever had this token.
    UnknownToken,
}
