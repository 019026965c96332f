//! What a call's attestation says of it: the facts the lifecycle knows at each way into a run
//! (a first run, a standing approval's release, an approved or re-run call from its record),
//! handed to the attempt's context with the server's signer. Built only when the server signs
//! (`Dispatcher::with_signer`), and signed only when the tool asks (an upstream's always does).

use std::sync::Arc;

use crate::contract::attest::{Approver, Attesting, CallFacts, Decision};
use crate::contract::erased::DynTool;
use crate::signing::Signer;
use crate::store::{CallRecord, NewCall, STANDING_APPROVED, StandingUse, Timestamp};

use super::Dispatcher;
use super::settings::ToolSettings;

/// The policy that decides calls of `tool` configured as `settings`: its approval policy, or
/// none (a person then approves only when the tool itself asks).
fn policy_of(tool: &str, settings: &ToolSettings, approved: bool) -> String {
    match (&settings.approval, approved) {
        (Some(_), _) => format!("tools.{tool}.approval"),
        (None, true) => "tool".to_owned(),
        (None, false) => "none".to_owned(),
    }
}

impl Dispatcher {
    /// Signs attestations from now on with `signer`.
    pub fn with_signer(mut self, signer: Arc<Signer>) -> Self {
        self.signer = Some(signer);
        self
    }

    /// The signer of attestations and of the key set, when the server signs.
    pub fn signer(&self) -> Option<&Arc<Signer>> {
        self.signer.as_ref()
    }

    /// The attesting of a call of `tool` described by `facts`: made only when the server signs
    /// and the tool reads its attestation (`DynTool::attested`), so another tool's call
    /// gathers nothing.
    fn attesting(
        &self,
        tool: &dyn DynTool,
        facts: impl FnOnce() -> CallFacts,
    ) -> Option<Attesting> {
        let signer = self.signer.as_ref().filter(|_| tool.attested())?;
        Some(Attesting::new(signer.clone(), facts()))
    }

    /// A new call's first run, which nobody had to approve.
    pub(super) fn attest_first(
        &self,
        registered: &dyn DynTool,
        call: &NewCall,
        settings: &ToolSettings,
    ) -> Option<Attesting> {
        let tool = call.tool.as_str();
        self.attesting(registered, || CallFacts {
            call_id: call.call_id.clone(),
            tool: tool.to_owned(),
            caller: call.caller.clone(),
            approvals: Vec::new(),
            decision: Decision::NotRequired,
            policy: policy_of(tool, settings, false),
        })
    }

    /// A call a standing approval released (`base`: the call's first-run facts).
    pub(super) fn attest_standing(
        base: Option<Attesting>,
        used: &StandingUse,
    ) -> Option<Attesting> {
        let base = base?;
        let mut facts = base.facts().clone();
        facts.approvals = vec![Approver {
            who: used.approver.clone(),
            at_ms: Timestamp::now().0,
        }];
        facts.decision = Decision::Standing(used.id.clone());
        Some(base.with_facts(facts))
    }

    /// A recorded call run again: approved (its approvals since it last suspended), or
    /// claimed after an interruption (a call a standing approval released is attested as
    /// released by it, as on its first run).
    pub(super) fn attest_recorded(
        &self,
        registered: &dyn DynTool,
        call: &CallRecord,
        settings: &ToolSettings,
    ) -> Option<Attesting> {
        self.attesting(registered, || {
            let mut approvals: Vec<Approver> = Vec::new();
            for event in call.events_since_suspended() {
                if !matches!(event.kind.as_str(), "approved" | "approval_recorded") {
                    continue;
                }
                if approvals.iter().any(|a| a.who == event.actor) {
                    continue;
                }
                approvals.push(Approver {
                    who: event.actor.clone(),
                    at_ms: event.at.0,
                });
            }
            let mut decision = Decision::Approved;
            if approvals.is_empty() {
                decision = Decision::NotRequired;
                if let Some(used) = &call.standing_approval {
                    // Released by a standing approval (and run again since): as its first run.
                    let at = call
                        .events
                        .iter()
                        .rev()
                        .find(|e| e.kind == STANDING_APPROVED);
                    approvals.push(Approver {
                        who: used.approver.clone(),
                        at_ms: at.map_or(call.created_at.0, |event| event.at.0),
                    });
                    decision = Decision::Standing(used.id.clone());
                }
            }
            let approved = !approvals.is_empty();
            CallFacts {
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                caller: call.caller.clone(),
                decision,
                policy: policy_of(&call.tool, settings, approved),
                approvals,
            }
        })
    }
}
