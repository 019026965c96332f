//! What a principal may read and decide, asked of the store through the rules of
//! [`super::who`]: one call, a page of calls, a pending approval, a page of them. Every door
//! reads through here, so an approval a principal may not decide is absent on all of them
//! alike (REST, the inbox, the change feed's readers).
//!
//! Who may see a call is one rule, [`Dispatcher::may_see`], which every read applies: one call,
//! a listing, a wait, the event stream ([`Dispatcher::events`](super::Dispatcher::events)) and
//! the inbox. It reads only what a call carries ([`SeenCall`]) and the tool's policy, held in
//! memory, so a listing or a stream pays no store read per item for it.
//!
//! A page for a principal whose `decides` leaves tools out is read in rounds, each asking the
//! store for as many as are still missing and keeping those the principal may see, at most
//! [`MAX_ROUNDS`] of them: such a page may hold fewer than its limit (even none) while
//! `next_cursor` says more follow. A principal that reaches every tool pays one read, as before.

use std::future::Future;

use super::escalate::{escalated, escalation_reaches};
use super::live::Live;
use super::who::{Principal, Role};
use super::{DispatchError, Dispatcher};
use crate::store::{
    Approval, ApprovalPage, ApprovalState, CallFilter, CallPage, CallRecord, CallSummary,
    StoreError,
};

/// What the rule of who may see a call reads of it: who made it, its tool, and whether an
/// approval of it was ever escalated. A call's record and a listed call (a feed entry's too)
/// both carry it.
pub trait SeenCall {
    /// The name of the principal that made the call (`None` with auth off).
    fn caller(&self) -> Option<&str>;
    /// The tool called.
    fn tool(&self) -> &str;
    /// Whether an approval of the call was ever escalated.
    fn ever_escalated(&self) -> bool;
}

impl SeenCall for CallRecord {
    fn caller(&self) -> Option<&str> {
        self.caller.as_deref()
    }

    fn tool(&self) -> &str {
        &self.tool
    }

    fn ever_escalated(&self) -> bool {
        self.events.iter().any(|event| event.kind == "escalated")
    }
}

impl SeenCall for CallSummary {
    fn caller(&self) -> Option<&str> {
        self.caller.as_deref()
    }

    fn tool(&self) -> &str {
        &self.tool
    }

    fn ever_escalated(&self) -> bool {
        self.escalated
    }
}

/// The rule, against the tool policies `live` serves now: `principal` sees its own calls; an
/// approver or an admin, those of the tools it decides; and anyone an escalation of a call
/// reached (its policy's `escalate_to`), that call, from its escalation on, decided or not, so
/// that whoever decided it reads what came of it. The policies are looked at only for an
/// escalated call the narrower rule leaves out.
pub(super) fn sees(live: &Live, principal: &Principal, call: &impl SeenCall) -> bool {
    principal.sees_by_reach(call.caller(), call.tool())
        || (call.ever_escalated() && escalation_reaches(&live.current(), principal, call.tool()))
}

/// The most store reads one page of a filtered listing takes.
const MAX_ROUNDS: usize = 8;

/// Up to `limit` items after `after` that `keep` keeps, read by `read` (items and the next
/// cursor) in rounds; the cursor after the last item read.
async fn kept_page<T, F, Fut>(
    after: Option<i64>,
    limit: u32,
    mut read: F,
    keep: impl Fn(&T) -> bool,
) -> Result<(Vec<T>, Option<i64>), StoreError>
where
    F: FnMut(Option<i64>, u32) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<i64>), StoreError>>,
{
    let mut kept = Vec::new();
    let mut cursor = after;
    for _ in 0..MAX_ROUNDS {
        // Never more than are missing: what is kept never overflows the page, so the store's
        // cursor stays exact.
        let missing = limit.saturating_sub(kept.len() as u32);
        let (items, next) = read(cursor, missing).await?;
        kept.extend(items.into_iter().filter(&keep));
        cursor = next;
        if cursor.is_none() || kept.len() as u32 >= limit {
            break;
        }
    }
    Ok((kept, cursor))
}

impl Dispatcher {
    /// Whether `principal` may see `call`: its own; an approver's or an admin's, one of a tool
    /// it decides; or one an escalation reached it for (see [`sees`]). The one rule of every
    /// read.
    pub fn may_see(&self, principal: &Principal, call: &impl SeenCall) -> bool {
        sees(&self.live, principal, call)
    }

    /// The call `call_id` as `principal` may see it (see [`Dispatcher::may_see`]): any other
    /// is `UnknownCall`, as if it did not exist.
    pub async fn visible_call(
        &self,
        principal: &Principal,
        call_id: &str,
    ) -> Result<CallRecord, DispatchError> {
        self.store
            .call(call_id)
            .await?
            .filter(|call| self.may_see(principal, call))
            .ok_or_else(|| DispatchError::UnknownCall(call_id.to_owned()))
    }

    /// A page of calls, newest first, matching `filter`, of those `principal` may see (see
    /// [`Dispatcher::may_see`]).
    pub async fn visible_calls(
        &self,
        principal: &Principal,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<CallPage, DispatchError> {
        if principal.decides.is_all() && principal.sees_all_calls() {
            return Ok(self.store.list_calls(filter, after, limit).await?);
        }
        let (calls, next_cursor) = kept_page(
            after,
            limit,
            |cursor, limit| {
                let filter = filter.clone();
                async move {
                    let page = self.store.list_calls(filter, cursor, limit).await?;
                    Ok((page.calls, page.next_cursor))
                }
            },
            |call| sees(&self.live, principal, call),
        )
        .await?;
        Ok(CallPage { calls, next_cursor })
    }

    /// A page of pending approvals (of `tool`, or all), oldest first, of those `principal` may
    /// decide.
    pub(crate) async fn decidable_approvals(
        &self,
        principal: &Principal,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, DispatchError> {
        if principal.decides.is_all() && principal.sees_all_calls() {
            let mut page = self.store.pending_approvals_of(tool, after, limit).await?;
            self.add_policy(&mut page.approvals);
            return Ok(page);
        }
        let reaches = |approval: &Approval| {
            principal.may_decide(&approval.tool)
                || (approval.escalated_at.is_some()
                    && self.escalation_reaches(principal, &approval.tool))
        };
        let out_of_reach =
            |tool: &str| !principal.may_decide(tool) && !self.escalation_reaches(principal, tool);
        if !principal.sees_all_calls() || tool.is_some_and(out_of_reach) {
            return Ok(ApprovalPage {
                approvals: Vec::new(),
                next_cursor: None,
            });
        }
        let (mut approvals, next_cursor) = kept_page(
            after,
            limit,
            |cursor, limit| async move {
                let page = self.store.pending_approvals_of(tool, cursor, limit).await?;
                Ok((page.approvals, page.next_cursor))
            },
            reaches,
        )
        .await?;
        self.add_policy(&mut approvals);
        Ok(ApprovalPage {
            approvals,
            next_cursor,
        })
    }

    /// Each approval with what its tool's policy says now: the rejection options it offers,
    /// and how many approvers it needs.
    fn add_policy(&self, approvals: &mut [Approval]) {
        for approval in approvals {
            self.add_policy_to(approval);
        }
    }

    fn add_policy_to(&self, approval: &mut Approval) {
        approval.reject_options = self.reject_options(&approval.tool);
        approval.approvals_required = self.approval_rule(&approval.tool).required;
    }

    /// What the suspension `token` stands for, if `principal` may decide it: one of a tool
    /// outside its `decides` is `None`, as a token that never was.
    pub async fn decidable_approval(
        &self,
        principal: &Principal,
        token: &str,
    ) -> Result<Option<ApprovalState>, DispatchError> {
        let mut state = self.store.approval(token).await?;
        if let Some(ApprovalState::Pending(approval)) = &mut state {
            self.add_policy_to(approval);
        }
        Ok(state.filter(|state| self.reaches(principal, state)))
    }

    /// Whether `principal` may decide the approval in `state` (or, decided, be told so): one of
    /// a tool its `decides` allows, or one escalated to it (see `escalate`).
    fn reaches(&self, principal: &Principal, state: &ApprovalState) -> bool {
        let (tool, escalated) = match state {
            ApprovalState::Pending(approval) => (&approval.tool, approval.escalated_at.is_some()),
            ApprovalState::Resolved(call) | ApprovalState::Expired(call) => {
                (&call.tool, escalated(call))
            }
        };
        self.approval_reaches_either(principal, tool, escalated)
    }

    /// Whether `principal` decides approvals of `tool`, or this one's escalation (`escalated`)
    /// reaches it.
    fn approval_reaches_either(&self, principal: &Principal, tool: &str, escalated: bool) -> bool {
        principal.may_decide(tool) || (escalated && self.escalation_reaches(principal, tool))
    }

    /// Whether `principal` may decide the approval `call` waits on, as every decision door
    /// checks it: its `decides` reaches the tool, or the approval was escalated to it; and it
    /// did not make the call as an approver. For a door that decides without a token of the
    /// person's own (a decision link).
    pub fn may_decide_call(&self, principal: &Principal, call: &CallRecord) -> bool {
        self.approval_reaches_either(principal, &call.tool, escalated(call))
            && own_call_refused(principal, &call.call_id, &call.caller).is_ok()
    }

    /// Whether an approval of `tool` reaches `principal`, before or after an escalation
    /// (`escalated`): the people a channel tells of it.
    pub fn approval_reaches(&self, principal: &Principal, tool: &str, escalated: bool) -> bool {
        if escalated {
            self.escalation_reaches(principal, tool)
        } else {
            principal.may_decide(tool)
        }
    }

    /// Refuses a decision on `token` by a principal that may not take it: one whose `decides`
    /// leaves its tool out, or a caller (`UnknownToken`, as if it did not exist); an approver
    /// deciding a call made under its own name (`DecidesOwnCall`). An admin deciding every
    /// tool pays nothing; a token that never was is left to the decision to say so.
    pub(super) async fn check_decider(
        &self,
        principal: &Principal,
        token: &str,
    ) -> Result<(), DispatchError> {
        if principal.decides_everything() {
            return Ok(());
        }
        let Some(state) = self.store.approval(token).await? else {
            return Ok(());
        };
        let (call_id, caller) = match &state {
            ApprovalState::Pending(approval) => (&approval.call_id, &approval.caller),
            ApprovalState::Resolved(call) | ApprovalState::Expired(call) => {
                (&call.call_id, &call.caller)
            }
        };
        if !self.reaches(principal, &state) {
            return Err(DispatchError::UnknownToken);
        }
        own_call_refused(principal, call_id, caller)
    }

    /// Refuses settling the call `call_id` to a principal that may not see it (`UnknownCall`),
    /// or to an approver that made it.
    pub(super) async fn check_settler(
        &self,
        principal: &Principal,
        call_id: &str,
    ) -> Result<(), DispatchError> {
        if principal.decides_everything() {
            return Ok(());
        }
        let call = self.visible_call(principal, call_id).await?;
        if !principal.may_decide(&call.tool) {
            return Err(DispatchError::UnknownCall(call_id.to_owned()));
        }
        own_call_refused(principal, call_id, &call.caller)
    }
}

/// An approver never decides a call made under its own name (an admin decides everything).
fn own_call_refused(
    principal: &Principal,
    call_id: &str,
    caller: &Option<String>,
) -> Result<(), DispatchError> {
    if principal.role == Role::Approver && principal.name.is_some() && *caller == principal.name {
        return Err(DispatchError::DecidesOwnCall(call_id.to_owned()));
    }
    Ok(())
}
