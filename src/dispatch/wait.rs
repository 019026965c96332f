//! Holding a request until what it asks about changes: the one long-poll of every door (REST's
//! `?wait=` on a call, on a tool call and on the approvals queue; MCP's `toolgate_await_call`).
//!
//! Each wait registers with the feed's watcher (`crate::feed`) before it reads, so a change in
//! between is not missed, and reads again after every change of the call. A held request ends
//! when the answer is ready, when its time is up (answered with the state as it is then), or at
//! a graceful stop: then it is answered from what was last read, since every change since would
//! have woken it, and thousands released together do not all read the store at once.

use std::time::Duration;

use super::who::Principal;
use super::{CallOutcome, CallResult, DispatchError, Dispatcher};
use crate::feed::Woken;
use crate::store::{ApprovalPage, CallRecord, CallStatus};

/// A request a door may hold: how long at most, and what to do once it starts to wait (an
/// HTTP door gives back its slot of the server's request limit, so that waiters do not shed
/// the requests of everyone else).
pub trait Hold: Send {
    /// The longest the request may be held.
    fn limit(&self) -> Duration;
    /// The request starts to wait now.
    fn waiting(&mut self);
}

/// How a held request ended.
enum Waited<T> {
    /// `ready` had an answer.
    Ready(T),
    /// The time was up without one: answer with the state as it is now.
    TimedOut,
    /// The server is stopping: answer at once, from what was last read.
    Released,
}

impl Dispatcher {
    /// The call `call_id` as `principal` may see it; with `hold`, a call `running` or
    /// `suspended` is held until its status changes (or the time is up), then read as it is.
    pub async fn watch_call(
        &self,
        principal: &Principal,
        call_id: &str,
        hold: Option<&mut dyn Hold>,
    ) -> Result<CallRecord, DispatchError> {
        let call = self.visible_call(principal, call_id).await?;
        let Some(hold) = hold else {
            return Ok(call);
        };
        if !matches!(call.status, CallStatus::Running | CallStatus::Suspended) {
            return Ok(call);
        }
        let first = call.status;
        let changed = self
            .hold_until(hold, call_id, || async {
                let now = self.visible_call(principal, call_id).await?;
                Ok((now.status != first).then_some(now))
            })
            .await?;
        match changed {
            Waited::Ready(now) => Ok(now),
            Waited::TimedOut => self.visible_call(principal, call_id).await,
            // Its status is the one first read: a change since would have woken it.
            Waited::Released => Ok(call),
        }
    }

    /// A call that just suspended (`suspended`, with the suspension `token`), held until a
    /// person's decision has an outcome (the approved re-run's output or error, a rejection,
    /// an expiry, a new suspension), answered as the call's own answer would be to `principal`
    /// (a call that now needs reconciliation, or a new suspension, shows what it holds only to
    /// whoever may see it: a tool's own key can answer one caller with another's call); or,
    /// when the time is up, `suspended` as it was. Without a `token` (another caller's call,
    /// [`CallOutcome::Withheld`]), it is held while the call waits for any person's decision.
    pub async fn await_decision(
        &self,
        principal: &Principal,
        suspended: CallResult,
        token: Option<&str>,
        hold: &mut dyn Hold,
    ) -> Result<CallResult, DispatchError> {
        let call_id = suspended.call_id.clone();
        let decided = self
            .hold_until(hold, &call_id, || async {
                let Some(call) = self.store.call(&call_id).await? else {
                    return Ok(None);
                };
                let pending = call
                    .suspension
                    .as_ref()
                    .is_some_and(|suspension| token.is_none_or(|token| suspension.token == token));
                Ok(match call.status {
                    CallStatus::Suspended if pending => None,
                    CallStatus::Running | CallStatus::Interrupted => None,
                    CallStatus::NeedsReconciliation => {
                        Some(Err(DispatchError::NeedsReconciliation {
                            call_id: call.call_id.clone(),
                            call: self.may_see(principal, &call).then(|| Box::new(call)),
                        }))
                    }
                    _ => CallOutcome::from_record(&call).map(|outcome| {
                        let outcome = match outcome {
                            CallOutcome::Suspended { .. } if !self.may_see(principal, &call) => {
                                CallOutcome::Withheld
                            }
                            outcome => outcome,
                        };
                        Ok(CallResult {
                            edited: super::edit::edit_of(&call),
                            call_id: call.call_id,
                            tool: call.tool,
                            outcome,
                            replayed: false,
                        })
                    }),
                })
            })
            .await?;
        match decided {
            Waited::Ready(answer) => answer,
            Waited::TimedOut | Waited::Released => Ok(suspended),
        }
    }

    /// A page of the pending approvals `principal` may decide after `after` (of `tool`, or
    /// all); with `hold`, an empty page is held until a suspension arrives (or the time is up),
    /// then read again.
    pub async fn pending_approvals(
        &self,
        principal: &Principal,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
        hold: Option<&mut dyn Hold>,
    ) -> Result<ApprovalPage, DispatchError> {
        let read = || self.decidable_approvals(principal, tool, after, limit);
        let mut page = read().await?;
        // A page left empty by the principal's `decides`, with more to read, is answered at
        // once: the client moves its cursor on rather than wait on what it may not see.
        let Some(hold) = hold.filter(|_| page.approvals.is_empty() && page.next_cursor.is_none())
        else {
            return Ok(page);
        };
        // Registered first, then read again, so that one arriving in between is not missed.
        hold.waiting();
        let deadline = tokio::time::Instant::now() + hold.limit();
        let mut arrivals = self.feed.watch_suspensions().await;
        loop {
            page = read().await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !page.approvals.is_empty() || page.next_cursor.is_some() || left.is_zero() {
                return Ok(page);
            }
            if arrivals.wait(left).await != Woken::Changed {
                return read().await;
            }
        }
    }

    /// Holds a request about the call `call_id` until `ready` has an answer, the time is up,
    /// or the server stops: `ready` is asked once the request is registered (so a change in
    /// between is not missed), then after every change of the call.
    async fn hold_until<T, F, Fut>(
        &self,
        hold: &mut dyn Hold,
        call_id: &str,
        mut ready: F,
    ) -> Result<Waited<T>, DispatchError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>, DispatchError>>,
    {
        hold.waiting();
        let deadline = tokio::time::Instant::now() + hold.limit();
        loop {
            let waiter = self.feed.watch_call(call_id).await;
            if let Some(answer) = ready().await? {
                return Ok(Waited::Ready(answer));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(Waited::TimedOut);
            }
            match waiter.wait(left).await {
                Woken::Changed => {}
                Woken::TimedOut => return Ok(Waited::TimedOut),
                Woken::Released => return Ok(Waited::Released),
            }
        }
    }
}
