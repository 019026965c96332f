//! Approval with edits: an approver changes a call's input as they approve it, where the tool's
//! approval policy allows it (`edit_input = true`), and the tool runs with the edited input.
//!
//! The rules, once for every door (REST's `edited_input`, the inbox's input form): an edit
//! where the policy allows none is refused and decides nothing ([`DispatchError::EditNotAllowed`]);
//! an edit is checked as a call's input is at admission (nulls standing for a property left
//! out taken out, the tool's input schema, the tool's own checks), and one that does not fit is
//! [`DispatchError::InvalidInput`], deciding nothing. Past these, the approval goes through the
//! one lifecycle (`resolve`): the store holds the edit on the suspension until every approver
//! the policy needs approved that input (an edit restarts the count), then makes it the call's
//! input, keeping the original and who edited, and the tool runs with it.
//!
//! A call's idempotency key stays the one it was recorded with: a repeated request with that
//! key is answered the call's outcome, edited.

use serde_json::Value;
use tracing::Instrument as _;

use super::who::Principal;
use super::{Approved, DispatchError, Dispatcher, detached};
use crate::store::{CallEdit, CallEvent, CallRecord};

/// What an approver may add to an approval, where the tool's policy allows it.
#[derive(Debug, Default)]
pub struct ApproveExtras {
    /// The call's input as the approver edited it (`edit_input`).
    pub edited_input: Option<Value>,
    /// A standing approval of the tool's later calls by the same caller (`standing_max_s`,
    /// `standing_max_calls`).
    pub standing: Option<super::StandingAsk>,
}

impl Dispatcher {
    /// Approves the suspension `token` as [`Dispatcher::approve`] does, with what the approver
    /// adds to it (see [`ApproveExtras`]): an edit of the call's input, refused where the
    /// tool's policy allows no edits, checked against the tool's input schema (an edit equal
    /// to the input as it stands is no edit); a standing approval, recorded with the approval
    /// in its transaction, refused before anything is decided where the policy does not offer
    /// it or allows less (see `standing`).
    ///
    /// When the policy needs several approvers, an approval that edits the input clears the
    /// approvals so far and counts first, of the edited input; one without an edit counts
    /// toward the input as it stands (see `GET /approvals/{token}`).
    pub async fn approve_with(
        &self,
        token: &str,
        resume_input: Value,
        extras: ApproveExtras,
        principal: &Principal,
    ) -> Result<Approved, DispatchError> {
        self.check_depth(&resume_input)?;
        if let Some(edit) = &extras.edited_input {
            self.check_depth(edit)?;
        }
        self.check_decider(principal, token).await?;
        let this = self.clone();
        let token = token.to_owned();
        let actor = principal.actor();
        let ApproveExtras {
            edited_input,
            standing,
        } = extras;
        // The decision's request span goes with it, so its re-run is the request's child.
        detached(
            &self.running,
            async move {
                this.run_approval(&token, resume_input, edited_input, &actor, standing)
                    .await
            }
            .instrument(tracing::Span::current()),
        )
        .await
    }

    /// Whether `tool`'s approval policy lets approvers edit a call's input (`edit_input`).
    pub fn edits_allowed(&self, tool: &str) -> bool {
        self.live
            .current()
            .policy(tool)
            .and_then(|policy| policy.settings.approval.as_ref())
            .is_some_and(|gate| gate.edit_input)
    }

    /// `edit`, an approver's edit of a call of `tool`, as the tool would run with it; refused
    /// where the policy allows no edits, or where it does not fit the tool's input (the same
    /// check, and the same answer, as a call's input at admission). Decides nothing: a door
    /// may check an edit before it asks for a confirmation.
    pub fn check_edit(&self, tool: &str, mut edit: Value) -> Result<Value, DispatchError> {
        if !self.edits_allowed(tool) {
            return Err(DispatchError::EditNotAllowed(tool.to_owned()));
        }
        self.check_depth(&edit)?;
        let entry = self.entry(tool)?;
        entry
            .registered
            .admit(&mut edit)
            .map_err(|violations| DispatchError::InvalidInput {
                tool: tool.to_owned(),
                violations,
            })?;
        Ok(edit)
    }
}

/// How a call ran edited, as its answers say it: who edited, its input before and after;
/// `None` when it was not edited.
pub(super) fn edit_of(call: &CallRecord) -> Option<Box<CallEdit>> {
    let (mark, original_input) = (call.edited.clone()?, call.original_input.clone()?);
    Some(Box::new(CallEdit {
        mark,
        original_input,
        input: call.input.clone(),
    }))
}

/// `events` (a waiting call's, since it was suspended) from its last `edited` event on, that
/// one included: the approvals among them are of the input as it stands.
pub(super) fn since_edit(events: &[CallEvent]) -> &[CallEvent] {
    let from = events
        .iter()
        .rposition(|event| event.kind == "edited")
        .unwrap_or(0);
    &events[from..]
}
