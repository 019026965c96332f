//! Pinned tools, as the lifecycle holds them: a tool whose definition changed where it comes
//! from since a person trusted it (an upstream tool whose pin no longer matches, see
//! `crate::upstream`) is refused on every door before anything is recorded, and an approval of a
//! call made against another definition than the one pinned now fails closed.
//!
//! What a call was made against is its pin as it stood when the call was recorded: the pin's
//! time (`Pinned::since_ms`) is at or before the call's, unless the pin was replaced since (an
//! admin accepted a change). A held tool is the other case: its server lists a definition that
//! is not the pinned one. Either way the decision is `409 tool_changed`, and the call ends with
//! that error without its tool running.

use super::{DispatchError, Dispatcher};
use crate::contract::erased::DynTool;
use crate::contract::registry::Registered;
use crate::store::{Approval, CallError, Outcome, Resolution, Resolved, Timestamp};

/// The refusal of a call of `tool` under `pin`: what it was trusted as, what it lists now.
fn tool_changed(tool: &dyn DynTool, pin: &crate::contract::erased::Pinned) -> DispatchError {
    DispatchError::ToolChanged {
        tool: tool.name().to_owned(),
        pinned: pin.hash.clone(),
        current: pin.changed_to.clone(),
        call_id: None,
    }
}

/// Refuses a call of `registered` when it is held: a field read for any tool that is not.
pub(super) fn refuse_held(registered: &Registered) -> Result<(), DispatchError> {
    if !registered.held() {
        return Ok(());
    }
    let tool = registered.tool.as_ref();
    match tool.pinned() {
        Some(pin) => Err(tool_changed(tool, pin)),
        None => Ok(()),
    }
}

/// Why an approval of a call of `tool` made at `made_at` must fail closed, if it must: the tool
/// is held, or its pin was replaced after the call was made.
pub(super) fn changed_since(tool: &dyn DynTool, made_at: Timestamp) -> Option<DispatchError> {
    let pin = tool.pinned()?;
    if pin.changed_to.is_none() && pin.since_ms <= made_at.0 {
        return None;
    }
    Some(tool_changed(tool, pin))
}

/// The message a call that ended so records: what changed, and what to do.
fn ended_message(tool: &str) -> String {
    format!(
        "The definition of tool `{tool}` changed upstream since this call was made, so its \
         approval failed closed and nothing was sent. An admin reviews the change \
         (GET /upstreams/{{name}}/changes); make the call again once it is accepted."
    )
}

impl Dispatcher {
    /// Ends the suspended call of `approval`, whose tool changed since it was made (`why`), as
    /// the approval `resolution` of `actor` decides it: the suspension is resolved (so no
    /// later decision runs it either) and the call is recorded failed with `tool_changed`,
    /// its tool never run. Answers `why`, naming the call.
    pub(super) async fn end_changed(
        &self,
        approval: &Approval,
        resolution: Resolution,
        actor: &crate::store::Actor,
        why: DispatchError,
    ) -> Result<super::Approved, DispatchError> {
        let resolution = match resolution {
            // Whatever its quorum: the call ends now.
            Resolution::Approve {
                resume_input, edit, ..
            } => Resolution::Approve {
                resume_input,
                quorum: 1,
                edit,
            },
            other => other,
        };
        let claiming = self.unsettled.begin(&approval.call_id).await?;
        let resolved = match self
            .store
            .resolve_by(&approval.token, resolution, actor)
            .await
        {
            Ok(resolved) => resolved,
            Err(err) => return Err(self.claim_failed(claiming, err)),
        };
        drop(claiming);
        let call = match resolved {
            Resolved::Approved(call) => call,
            other => return Err(super::resolve::unexpected_resolution(other)),
        };
        Err(self.record_changed(&call, why).await)
    }

    /// Records `call`, whose tool changed since it was made (`why`), failed with
    /// `tool_changed`, its tool never run: `why`, naming the call (or the store's failure).
    pub(super) async fn record_changed(
        &self,
        call: &crate::store::CallRecord,
        mut why: DispatchError,
    ) -> DispatchError {
        let outcome = Outcome::Failed {
            error: CallError::new("tool_changed", ended_message(&call.tool)),
        };
        if let Err(err) = self
            .record(&call.call_id, Some(call.attempts), call.attempts, &outcome)
            .await
        {
            return err;
        }
        self.counted(&call.tool, crate::store::CallStatus::Failed);
        if let DispatchError::ToolChanged { call_id, .. } = &mut why {
            *call_id = Some(call.call_id.clone());
        }
        why
    }
}
