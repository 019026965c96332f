//! What a principal may read and decide, asked of the store through the rules of
//! [`super::who`]: one call, a page of calls, a pending approval, a page of them. Every door
//! reads through here, so an approval a principal may not decide is absent on all of them
//! alike (REST, the inbox, the change feed's readers).
//!
//! A page for a principal whose `decides` leaves tools out is read in rounds, each asking the
//! store for as many as are still missing and keeping those the principal may see, at most
//! [`MAX_ROUNDS`] of them: such a page may hold fewer than its limit (even none) while
//! `next_cursor` says more follow. A principal that reaches every tool pays one read, as before.

use std::future::Future;

use super::who::Principal;
use super::{DispatchError, Dispatcher};
use crate::store::{
    Approval, ApprovalPage, ApprovalState, CallFilter, CallPage, CallRecord, StoreError,
};

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
    /// The call `call_id` as `principal` may see it (a caller, only its own; an approver, only
    /// calls of the tools it decides): any other is `UnknownCall`, as if it did not exist.
    pub async fn visible_call(
        &self,
        principal: &Principal,
        call_id: &str,
    ) -> Result<CallRecord, DispatchError> {
        self.store
            .call(call_id)
            .await?
            .filter(|call| principal.may_see(&call.caller, &call.tool))
            .ok_or_else(|| DispatchError::UnknownCall(call_id.to_owned()))
    }

    /// A page of calls, newest first, matching `filter`, of those `principal` may see (an
    /// approver's or admin's listing: the calls of the tools it decides).
    pub async fn visible_calls(
        &self,
        principal: &Principal,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<CallPage, DispatchError> {
        if principal.decides.is_all() {
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
            |call| principal.may_see(&call.caller, &call.tool),
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
        if principal.decides.is_all() {
            return Ok(self.store.pending_approvals_of(tool, after, limit).await?);
        }
        if tool.is_some_and(|tool| !principal.may_decide(tool)) {
            return Ok(ApprovalPage {
                approvals: Vec::new(),
                next_cursor: None,
            });
        }
        let (approvals, next_cursor) = kept_page(
            after,
            limit,
            |cursor, limit| async move {
                let page = self.store.pending_approvals_of(tool, cursor, limit).await?;
                Ok((page.approvals, page.next_cursor))
            },
            |approval: &Approval| principal.may_decide(&approval.tool),
        )
        .await?;
        Ok(ApprovalPage {
            approvals,
            next_cursor,
        })
    }

    /// What the suspension `token` stands for, if `principal` may decide it: one of a tool
    /// outside its `decides` is `None`, as a token that never was.
    pub async fn decidable_approval(
        &self,
        principal: &Principal,
        token: &str,
    ) -> Result<Option<ApprovalState>, DispatchError> {
        let state = self.store.approval(token).await?;
        Ok(state.filter(|state| {
            let tool = match state {
                ApprovalState::Pending(approval) => &approval.tool,
                ApprovalState::Resolved(call) | ApprovalState::Expired(call) => &call.tool,
            };
            principal.may_decide(tool)
        }))
    }

    /// Refuses a decision on `token` by a principal whose `decides` leaves its tool out
    /// (`UnknownToken`); a principal that decides every tool pays nothing.
    pub(super) async fn check_decides(
        &self,
        principal: &Principal,
        token: &str,
    ) -> Result<(), DispatchError> {
        if principal.decides.is_all() {
            return Ok(());
        }
        match self.decidable_approval(principal, token).await? {
            Some(_) => Ok(()),
            None => Err(DispatchError::UnknownToken),
        }
    }
}
