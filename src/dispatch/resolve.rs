//! A person's decisions, and what they may say: approving a suspension (which runs the call's
//! tool again, with the approver's input), rejecting it, completing it with work done outside
//! the server, and settling a call that needs reconciliation.
//!
//! The rules on what a person writes are the lifecycle's, so every door records the same text
//! alike: a rejection's reason and a settlement's error are trimmed; a reason empty or blank is
//! recorded as none, an error must say something; both are at most [`MAX_REASON_CHARS`]
//! (counted once trimmed). A door only words a refusal ([`ReasonRefused`]).

use serde_json::Value;
use tracing::Instrument as _;

use super::attempt::Start;
use super::standing::StandingAsk;
use super::who::Principal;
use super::{CallOutcome, CallResult, DispatchError, Dispatcher};
use crate::contract::registry::{compile_schema, violations};
use crate::store::{
    Actor, Approval, ApprovalState, CallRecord, CallStatus, Reconciled, RejectOption, Resolution,
    Resolved, Settlement, StoreError, Timestamp,
};
use crate::telemetry::spans;

/// The longest text a person or a tool writes on a call, in characters: a rejection's reason,
/// a settlement's error, and a suspension's own reason (cut there, see `attempt`).
pub const MAX_REASON_CHARS: usize = 4096;

/// What a person wrote that the lifecycle refuses to record; its message says, for an API
/// client, what the text must be (a door with a form words it its own way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReasonRefused {
    /// A rejection's `reason` longer than [`MAX_REASON_CHARS`].
    #[error("`reason` is longer than {MAX_REASON_CHARS} characters.")]
    ReasonTooLong,
    /// A settlement's `error` that says nothing, or is longer than [`MAX_REASON_CHARS`].
    #[error(
        "`error` must say why the effect did not happen, in 1 to {MAX_REASON_CHARS} characters."
    )]
    ErrorOutOfBounds,
}

/// `text` without the white space around it, reusing its allocation when there is none.
fn trimmed(text: String) -> String {
    let trimmed = text.trim();
    if trimmed.len() == text.len() {
        text
    } else {
        trimmed.to_owned()
    }
}

/// A rejection's reason as recorded: trimmed; `None` when it is missing, empty or blank;
/// refused past [`MAX_REASON_CHARS`].
pub fn rejection_reason(reason: Option<String>) -> Result<Option<String>, ReasonRefused> {
    let Some(reason) = reason.map(trimmed).filter(|reason| !reason.is_empty()) else {
        return Ok(None);
    };
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(ReasonRefused::ReasonTooLong);
    }
    Ok(Some(reason))
}

/// A settlement's error as recorded: trimmed; refused when it says nothing (empty or blank)
/// or is longer than [`MAX_REASON_CHARS`].
pub fn settlement_error(error: String) -> Result<String, ReasonRefused> {
    let error = trimmed(error);
    if error.is_empty() || error.chars().count() > MAX_REASON_CHARS {
        return Err(ReasonRefused::ErrorOutOfBounds);
    }
    Ok(error)
}

/// Whether one click may approve a suspension whose approver's answer must satisfy
/// `input_schema`, on a call of a tool with `effect`: the empty answer (`{}`) fits the schema
/// (optional fields, such as the default approval's `note`, may be left out), and the call is
/// no `write`, which the inbox asks a person to confirm. Every door that offers one click (a
/// Slack button, a message's Approve) asks this, so they all agree.
pub fn one_click(input_schema: &Value, effect: crate::Effect) -> bool {
    effect != crate::Effect::Write
        && resume_violations(input_schema, &Value::Object(serde_json::Map::new())).is_ok()
}

/// Refuses `resume_input` that does not satisfy `input_schema`, the suspension's.
fn resume_violations(input_schema: &Value, resume_input: &Value) -> Result<(), DispatchError> {
    // The schema compiled when the tool suspended (see `attempts`), so failing now means the
    // stored copy is damaged.
    let validator = compile_schema(input_schema)
        .map_err(|e| StoreError::Corrupt(format!("stored resume schema: {e}")))?;
    violations(&validator, resume_input).map_err(DispatchError::InvalidResumeInput)
}

impl Dispatcher {
    /// Checks `resume_input` as [`Dispatcher::approve`] would against a suspension's
    /// `input_schema`, deciding nothing: for a door that asks a person to confirm an answer
    /// before it approves, so that a refusal comes before the confirmation, not after.
    pub fn check_resume_input(
        &self,
        input_schema: &Value,
        resume_input: &Value,
    ) -> Result<(), DispatchError> {
        self.check_depth(resume_input)?;
        resume_violations(input_schema, resume_input)
    }

    /// Approves the suspension `token` with the approver's `resume_input` and runs the call's
    /// tool again with it. Its result is the call's new outcome. Like [`Dispatcher::call`], it
    /// runs to the end even if the caller stops waiting.
    ///
    /// Every decision is `principal`'s, recorded under its name; a suspension of a tool outside
    /// its `decides` is `UnknownToken` to it.
    ///
    /// When the tool's policy needs several approvers (`approvals = N`), an approval short of
    /// them is recorded and answered as [`Approved::Recorded`]; the one that completes them runs
    /// the tool, with its own input as `ctx.resume()`.
    pub async fn approve(
        &self,
        token: &str,
        resume_input: Value,
        principal: &Principal,
    ) -> Result<Approved, DispatchError> {
        self.approve_with(
            token,
            resume_input,
            super::ApproveExtras::default(),
            principal,
        )
        .await
    }

    /// Rejects the suspension `token`: the call becomes `rejected` and its tool does not run.
    /// The reason is optional (see [`rejection_reason`]); so is `option`, the name of one of
    /// the rejection options of the tool's approval policy, which the caller is told.
    pub async fn reject(
        &self,
        token: &str,
        reason: Option<String>,
        option: Option<String>,
        principal: &Principal,
    ) -> Result<CallRecord, DispatchError> {
        let reason = rejection_reason(reason)?;
        self.check_decider(principal, token).await?;
        let option = match option {
            Some(name) => Some(self.reject_option(token, &name).await?),
            None => None,
        };
        let asked = Timestamp::now();
        let actor = principal.actor();
        let resolved = self
            .store
            .resolve_by(token, Resolution::Reject { reason, option }, &actor)
            .await?;
        self.count_resolution(&resolved, asked);
        match resolved {
            Resolved::Rejected(call) => {
                tracing::Span::current().record("call_id", call.call_id.as_str());
                Ok(call)
            }
            other => Err(unexpected_resolution(other)),
        }
    }

    /// Completes the suspension `token` with work done outside the server: the call becomes
    /// `completed` with `output`, which must match the tool's output schema (the receipt), and
    /// the tool does not run. Only tools that declare an output schema can be completed so.
    pub async fn complete(
        &self,
        token: &str,
        output: Value,
        principal: &Principal,
    ) -> Result<CallResult, DispatchError> {
        self.check_depth(&output)?;
        self.check_decider(principal, token).await?;
        let actor = principal.actor();
        let approval = self.pending(token).await?;
        let rule = self.approval_rule(&approval.tool);
        rule.check_separate(&approval, &actor)?;
        if rule.required > 1 {
            return Err(DispatchError::NeedsApprovals {
                tool: approval.tool,
                required: rule.required,
            });
        }
        let entry = self.entry(&approval.tool)?;
        let registered = &entry.registered;
        if !registered.has_output_schema() {
            return Err(DispatchError::CompletionNotAllowed(approval.tool));
        }
        registered
            .check_output(&output)
            .map_err(DispatchError::OutputSchemaViolation)?;
        let asked = Timestamp::now();
        let resolved = self
            .store
            .resolve_by(
                token,
                Resolution::Complete {
                    output: output.clone(),
                },
                &actor,
            )
            .await?;
        self.count_resolution(&resolved, asked);
        match resolved {
            Resolved::Completed(call) => Ok(CallResult {
                call_id: call.call_id,
                tool: call.tool,
                outcome: CallOutcome::Completed(output),
                replayed: false,
                edited: None,
            }),
            other => Err(unexpected_resolution(other)),
        }
    }

    /// Settles a call that needs reconciliation: its effect happened (`output`, checked against
    /// the tool's output schema when it declares one) or it did not (`error`).
    ///
    /// A call of a tool outside `principal`'s `decides` is `UnknownCall` to it.
    pub async fn reconcile(
        &self,
        call_id: &str,
        settlement: Settlement,
        principal: &Principal,
    ) -> Result<CallRecord, DispatchError> {
        self.check_settler(principal, call_id).await?;
        let actor = principal.actor();
        let settlement = match settlement {
            Settlement::Error(error) => Settlement::Error(settlement_error(error)?),
            output @ Settlement::Output(_) => output,
        };
        if let Settlement::Output(output) = &settlement {
            self.check_depth(output)?;
            let call = self
                .store
                .call(call_id)
                .await?
                .ok_or_else(|| DispatchError::UnknownCall(call_id.to_owned()))?;
            if let Some(registered) = self.live.current().lookup(&call.tool) {
                registered
                    .check_output(output)
                    .map_err(DispatchError::OutputSchemaViolation)?;
            }
        }
        match self.store.reconcile_by(call_id, settlement, &actor).await? {
            Reconciled::Settled(call) => {
                self.counted(&call.tool, call.status);
                Ok(call)
            }
            Reconciled::NotNeeded(call) => Err(DispatchError::NotReconcilable(Box::new(call))),
            Reconciled::UnknownCall => Err(DispatchError::UnknownCall(call_id.to_owned())),
        }
    }

    /// The rejection option `name` of the pending suspension `token`'s tool; `BadRequest` when
    /// its approval policy has no such option.
    async fn reject_option(&self, token: &str, name: &str) -> Result<RejectOption, DispatchError> {
        let approval = self.pending(token).await?;
        let options = self.reject_options(&approval.tool);
        if let Some(option) = options.iter().find(|option| option.name == name) {
            return Ok(option.clone());
        }
        let known: Vec<String> = options
            .iter()
            .map(|option| format!("`{}`", option.name))
            .collect();
        Err(DispatchError::BadRequest(if known.is_empty() {
            format!(
                "`option`: the approval policy of {} has no rejection options.",
                approval.tool
            )
        } else {
            format!(
                "`option` must be one of {} (the approval policy of {}).",
                known.join(", "),
                approval.tool
            )
        }))
    }

    /// The rejection options of `tool`'s approval policy, as configured now.
    pub fn reject_options(&self, tool: &str) -> Vec<RejectOption> {
        self.live
            .current()
            .policy(tool)
            .and_then(|policy| policy.settings.approval.as_ref())
            .map(|gate| gate.reject_options.clone())
            .unwrap_or_default()
    }

    /// The pending suspension `token`, or why it is not pending.
    async fn pending(&self, token: &str) -> Result<Approval, DispatchError> {
        match self
            .store
            .approval(token)
            .await?
            .ok_or(DispatchError::UnknownToken)?
        {
            ApprovalState::Pending(approval) => {
                tracing::Span::current().record("call_id", approval.call_id.as_str());
                Ok(approval)
            }
            ApprovalState::Resolved(call) => Err(DispatchError::AlreadyResolved(Box::new(call))),
            // Write the expiry down (a no-op if it already is), and report it.
            ApprovalState::Expired(_) => {
                let asked = Timestamp::now();
                let resolved = self.store.resolve(token, Resolution::Expire, None).await?;
                self.count_resolution(&resolved, asked);
                Err(unexpected_resolution(resolved))
            }
        }
    }

    /// How many approvers `tool`'s policy needs, and whether its callers may be among them.
    pub fn approval_rule(&self, tool: &str) -> ApprovalRule {
        self.live
            .current()
            .policy(tool)
            .and_then(|policy| policy.settings.approval.as_ref())
            .map_or(ApprovalRule::ONE, |gate| ApprovalRule {
                required: gate.approvals,
                separate_from_caller: gate.separate_from_caller,
            })
    }

    /// Approves `token` as `actor`, with the approver's edit of the call's input if any (see
    /// `edit`), and runs the call once its approvers are all there.
    pub(super) async fn run_approval(
        &self,
        token: &str,
        resume_input: Value,
        edit: Option<Value>,
        actor: &Actor,
        standing: Option<StandingAsk>,
    ) -> Result<Approved, DispatchError> {
        let approval = match self.pending(token).await {
            Err(DispatchError::AlreadyResolved(call)) => {
                self.unsettled.check(&call.call_id)?;
                // Approved before, and its run released before it reached the tool (its
                // backend or the store was down): approving again runs it, with the input
                // approved the first time.
                if call.status == CallStatus::Interrupted {
                    let rule = self.approval_rule(&call.tool);
                    if rule.refuses(call.caller.as_deref(), actor.name.as_deref()) {
                        return Err(DispatchError::DecidesOwnCall(call.call_id));
                    }
                    return self.rerun_approved(*call).await.map(Approved::Ran);
                }
                return Err(DispatchError::AlreadyResolved(call));
            }
            other => other?,
        };
        let rule = self.approval_rule(&approval.tool);
        rule.check_separate(&approval, actor)?;
        resume_violations(&approval.input_schema, &resume_input)?;
        let edit = edit
            .map(|edit| self.check_edit(&approval.tool, edit))
            .transpose()?;
        let standing = standing
            .map(|ask| self.new_standing(&approval, actor, &ask))
            .transpose()?;
        let entry = self.entry(&approval.tool)?;
        let (registered, policy) = (entry.registered.as_ref(), entry.policy.as_ref());
        let _slot = self.take_slot(policy, &approval.tool)?;
        // An upstream that cannot be reached now would take the approval and fail: the
        // suspension stays pending instead, for when it is back.
        entry
            .registered
            .tool
            .ready()
            .map_err(|unready| DispatchError::Unavailable {
                tool: approval.tool.clone(),
                retry_after: unready.retry_after,
            })?;

        let resolution = Resolution::Approve {
            resume_input: resume_input.clone(),
            quorum: rule.required,
            edit,
        };
        if let Some(why) =
            super::pinned::changed_since(registered.tool.as_ref(), approval.created_at)
        {
            return self.end_changed(&approval, resolution, actor, why).await;
        }
        let asked = Timestamp::now();
        let claiming = self.unsettled.begin(&approval.call_id).await?;
        let resolving = self.resolve_granting(token, resolution, actor, standing);
        let resolved = match resolving.await {
            Ok(resolved) => resolved,
            Err(err) => return Err(self.claim_failed(claiming, err)),
        };
        drop(claiming);
        self.count_resolution(&resolved, asked);
        let call = match resolved {
            Resolved::Approved(call) => call,
            Resolved::Recorded { approvals, call } => {
                spans::link_to_call(call.traceparent.as_deref());
                return Ok(Approved::Recorded(Box::new(Approval {
                    approvals,
                    approvals_required: rule.required,
                    reject_options: self.reject_options(&approval.tool),
                    ..approval
                })));
            }
            Resolved::AlreadyApproved { approvals, .. } => {
                return Err(DispatchError::AlreadyApproved {
                    approvals,
                    required: rule.required,
                });
            }
            other => return Err(unexpected_resolution(other)),
        };
        spans::link_to_call(call.traceparent.as_deref());
        let span = spans::rerun(
            &call.tool,
            call.effect.as_str(),
            &call.call_id,
            call.traceparent.as_deref(),
        );
        let result = self
            .run_recorded(registered, policy, call, Start::Resume(resume_input), None)
            .instrument(span.clone())
            .await;
        super::admit::traced(&span, &result);
        result.map(Approved::Ran)
    }

    /// Runs again the approved call `call`, whose run was released (interrupted) before its
    /// tool could run it. Only a call that repeating cannot harm is ever released so: a read
    /// or idempotent call, or one whose request provably never reached the backend.
    async fn rerun_approved(&self, call: CallRecord) -> Result<CallResult, DispatchError> {
        let entry = self.entry(&call.tool)?;
        let (registered, policy) = (entry.registered.as_ref(), entry.policy.as_ref());
        let _slot = self.take_slot(policy, &call.tool)?;
        registered
            .tool
            .ready()
            .map_err(|unready| DispatchError::Unavailable {
                tool: call.tool.clone(),
                retry_after: unready.retry_after,
            })?;
        let claiming = self.unsettled.begin(&call.call_id).await?;
        let claimed = match self.store.rerun_interrupted(&call.call_id).await {
            Ok(claimed) => claimed,
            Err(err) => return Err(self.claim_failed(claiming, err)),
        };
        drop(claiming);
        let Some(rerun) = claimed else {
            return Err(DispatchError::CallInProgress {
                call_id: call.call_id,
            });
        };
        tracing::Span::current().record("call_id", rerun.call.call_id.as_str());
        let start = Start::of(rerun.resume_input, None);
        self.run_recorded(registered, policy, rerun.call, start, None)
            .await
    }
}

/// What an approval came to.
#[derive(Debug)]
pub enum Approved {
    /// It released the call: the tool ran again, and this is the call's new outcome.
    Ran(CallResult),
    /// Recorded, short of the approvers the tool's policy needs: the suspension, still
    /// pending, with the approvals so far.
    Recorded(Box<Approval>),
}

/// Who must approve a tool's calls: how many distinct approvers, and whether its callers may be
/// among them (the tool's approval policy, `approvals` and `separate_from_caller`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalRule {
    /// Distinct approvers needed, at least one.
    pub required: u32,
    /// The principal that made a call may not approve it, whatever its role.
    pub separate_from_caller: bool,
}

impl ApprovalRule {
    /// One approver, anyone who may decide.
    const ONE: ApprovalRule = ApprovalRule {
        required: 1,
        separate_from_caller: false,
    };

    /// Refuses `actor` releasing `approval` when it made the call and the rule keeps callers
    /// apart (`DecidesOwnCall`). With auth off nobody has a name, so nobody is refused.
    pub fn check_separate(&self, approval: &Approval, actor: &Actor) -> Result<(), DispatchError> {
        if self.refuses(approval.caller.as_deref(), actor.name.as_deref()) {
            return Err(DispatchError::DecidesOwnCall(approval.call_id.clone()));
        }
        Ok(())
    }

    /// Whether the rule keeps the principal `name` from approving a call made by `caller`.
    pub fn refuses(&self, caller: Option<&str>, name: Option<&str>) -> bool {
        self.separate_from_caller && name.is_some() && caller == name
    }
}

/// Where the approvals of a waiting call stand, for one principal: who approved it since it was
/// last suspended (its history holds them, written with the suspension's own record), how many
/// its policy needs, and why this principal may not approve it, if it may not.
#[derive(Debug)]
pub struct ApprovalProgress<'a> {
    /// The `approval_recorded` events of the input as it stands (since the call was last
    /// suspended, and since its input was last edited: an edit restarts the count), oldest
    /// first.
    pub approvals: Vec<&'a crate::store::CallEvent>,
    /// Distinct approvers the call needs.
    pub required: u32,
    /// Why the principal asking may not approve, if it may not.
    pub withheld: Option<Withheld>,
}

/// Why a principal may not approve a call that waits for several approvers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// It made the call, and the policy keeps callers apart.
    OwnCall,
    /// It approved the call already.
    ApprovedAlready,
}

impl Dispatcher {
    /// Where `call`'s approvals stand for `principal`, when its tool's policy needs several or
    /// keeps callers apart; `None` when one approval by anyone who may decide releases it.
    pub fn approval_progress<'a>(
        &self,
        call: &'a CallRecord,
        principal: &Principal,
    ) -> Option<ApprovalProgress<'a>> {
        let rule = self.approval_rule(&call.tool);
        let name = principal.name.as_deref();
        let own = rule.refuses(call.caller.as_deref(), name);
        if rule.required <= 1 && !own {
            return None;
        }
        // An edit restarts the count: only the approvals of the input as it stands count.
        let approvals: Vec<_> = super::edit::since_edit(call.events_since_suspended())
            .iter()
            .filter(|event| event.kind == "approval_recorded")
            .collect();
        let withheld = if own {
            Some(Withheld::OwnCall)
        } else if approvals.iter().any(|event| event.actor.as_deref() == name) {
            Some(Withheld::ApprovedAlready)
        } else {
            None
        };
        Some(ApprovalProgress {
            approvals,
            required: rule.required,
            withheld,
        })
    }
}

/// The error for a resolution that did not go the expected way.
pub(super) fn unexpected_resolution(resolved: Resolved) -> DispatchError {
    match resolved {
        Resolved::AlreadyResolved(call) => DispatchError::AlreadyResolved(Box::new(call)),
        Resolved::Expired(call) => DispatchError::SuspensionExpired(Box::new(call)),
        Resolved::UnknownToken => DispatchError::UnknownToken,
        Resolved::Approved(_)
        | Resolved::Rejected(_)
        | Resolved::Completed(_)
        | Resolved::Recorded { .. }
        | Resolved::AlreadyApproved { .. } => DispatchError::Store(StoreError::Corrupt(
            "the store resolved a suspension differently than asked".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::one_click;
    use crate::Effect;

    #[test]
    fn one_click_where_the_empty_answer_fits_and_no_write_is_confirmed() {
        let note = json!({"type": "object", "properties": {"note": {"type": "string"}},
                          "additionalProperties": false});
        let answer = json!({"type": "object", "required": ["answer"],
                            "properties": {"answer": {"type": "string"}}});
        assert!(
            one_click(&note, Effect::Read),
            "an optional note may be left out"
        );
        assert!(one_click(&json!({"type": "object"}), Effect::Idempotent));
        assert!(!one_click(&answer, Effect::Read), "an answer to give");
        assert!(!one_click(&note, Effect::Write), "a write to confirm");
    }
}
