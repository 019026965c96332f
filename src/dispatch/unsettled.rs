//! Claims whose commit is ambiguous. Approving a suspension and re-running an interrupted call
//! each claim the call before its tool runs: one conditional write makes it `running`, owned by
//! this process. When the store drops while that write commits, its answer is lost: the claim
//! may or may not have happened, and the tool will not run either way. Left alone, a claim that
//! did commit would hold its call `running` until this replica died and its lease ran out.
//!
//! So such a claim is settled as an unanswered intent is (`admit`): once the store answers, the
//! call is read, and if it is `running` the claim is released as `interrupted` under the run it
//! began (conditional, so only this process's run can be released). A person approving again
//! then runs it, with the input approved the first time, and a keyed request re-runs it. A
//! claim that never committed left the call as it was, and nothing is written.
//!
//! Until then this process refuses to claim that call again (`503 store_unavailable`): a second
//! claim here would begin the same run, and releasing it would cut a tool off mid-run. For the
//! same reason two claims of one call never overlap in this process: while one waits for the
//! store's answer, another waits for it to be answered (and then usually finds the call
//! claimed), so a release can only ever meet the run of the claim it settles. Another replica's claim is refused by the release's
//! owner condition (its refusal is kept in the call's history as a late outcome, as every
//! refused outcome is).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::record::Tried;
use super::{DispatchError, Dispatcher};
use crate::store::{CallStatus, Outcome, Store, StoreError};

/// Why a run is released before its tool ran: the store could not be reached.
pub(super) const STORE_UNREACHED: &str = "the store could not be reached before the tool ran";

#[derive(Debug, Clone)]
enum State {
    /// A claim waits for the store's answer; the next claim waits for this.
    Claiming(Arc<Notify>),
    /// A claim went unanswered; it is being settled.
    Unsettled,
}

/// The calls of this process with a claim under way or not settled yet.
#[derive(Clone, Default)]
pub(super) struct Unsettled(Arc<Mutex<HashMap<String, State>>>);

/// A claim of a call under way in this process, until the store answers it.
pub(super) struct Claiming {
    calls: Unsettled,
    call_id: String,
    /// Left in place (unsettled) when dropped.
    kept: bool,
}

impl Drop for Claiming {
    fn drop(&mut self) {
        if !self.kept
            && let Some(State::Claiming(answered)) = self.calls.set().remove(&self.call_id)
        {
            answered.notify_waiters();
        }
    }
}

impl Unsettled {
    fn set(&self) -> std::sync::MutexGuard<'_, HashMap<String, State>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn unsettled(call_id: &str) -> DispatchError {
        DispatchError::Store(StoreError::Unavailable(format!(
            "an earlier claim of call {call_id} is not settled yet: the store could not confirm \
             it"
        )))
    }

    /// Refuses to go on with `call_id` while a claim of it is unsettled.
    pub(super) fn check(&self, call_id: &str) -> Result<(), DispatchError> {
        match self.set().get(call_id) {
            Some(State::Unsettled) => Err(Unsettled::unsettled(call_id)),
            _ => Ok(()),
        }
    }

    /// Begins a claim of `call_id` once no other claim of it is under way here; refused while
    /// one is unsettled.
    pub(super) async fn begin(&self, call_id: &str) -> Result<Claiming, DispatchError> {
        loop {
            let answered = {
                let mut set = self.set();
                match set.get(call_id) {
                    Some(State::Unsettled) => return Err(Unsettled::unsettled(call_id)),
                    Some(State::Claiming(answered)) => answered.clone(),
                    None => {
                        set.insert(call_id.to_owned(), State::Claiming(Arc::new(Notify::new())));
                        return Ok(Claiming {
                            calls: self.clone(),
                            call_id: call_id.to_owned(),
                            kept: false,
                        });
                    }
                }
            };
            let notified = answered.notified();
            tokio::pin!(notified);
            // Registered, then checked again: an answer between the two is not missed.
            notified.as_mut().enable();
            if matches!(self.set().get(call_id), Some(State::Claiming(a)) if Arc::ptr_eq(a, &answered))
            {
                notified.await;
            }
        }
    }
}

impl Dispatcher {
    /// Answers a claim that failed with `err`: when the store could not be reached, the claim
    /// is settled in the background (see the module). Always `err`, for the caller to answer.
    pub(super) fn claim_failed(&self, mut claiming: Claiming, err: StoreError) -> DispatchError {
        if matches!(err, StoreError::Unavailable(_)) {
            claiming.kept = true;
            let previous = self
                .unsettled
                .set()
                .insert(claiming.call_id.clone(), State::Unsettled);
            // Whoever waits for this claim's answer learns it is unsettled.
            if let Some(State::Claiming(answered)) = previous {
                answered.notify_waiters();
            }
            self.settle_claim(claiming.call_id.clone());
        }
        err.into()
    }

    /// Reads `call_id` once the store answers, and releases it if a claim left it running.
    fn settle_claim(&self, call_id: String) {
        let store = self.store.clone();
        let unsettled = self.unsettled.clone();
        let call_id = Arc::new(call_id);
        self.retry_until_store_answers(move || {
            let (store, unsettled, call_id) = (store.clone(), unsettled.clone(), call_id.clone());
            async move {
                let tried = release_claim(store.as_ref(), &call_id).await;
                if let Tried::Settled = tried {
                    unsettled.set().remove(call_id.as_str());
                }
                tried
            }
        });
    }
}

/// Reads `call_id` and releases it if it is `running` (a claim that did commit), under the run
/// the claim began.
async fn release_claim(store: &dyn Store, call_id: &str) -> Tried {
    let call = match store.call(call_id).await {
        Ok(Some(call)) if call.status == CallStatus::Running => call,
        // The claim never committed (or the call was settled meanwhile).
        Ok(_) => return Tried::Settled,
        Err(StoreError::Unavailable(_)) => return Tried::Unreachable,
        Err(err) => {
            tracing::warn!(call_id, error = %err, "a claim left unsettled could not be read");
            return Tried::Settled;
        }
    };
    let released = Outcome::Interrupted {
        reason: STORE_UNREACHED.into(),
    };
    let run = call.attempts;
    match store.finish_call(call_id, Some(run), run, &released).await {
        Ok(()) => {
            tracing::info!(
                call_id,
                "released a claim the store committed while it could not be reached"
            );
        }
        Err(StoreError::Unavailable(_)) => return Tried::Unreachable,
        // Another replica's run, or settled meanwhile.
        Err(StoreError::NotRunning { .. } | StoreError::LeaseLost(_)) => {}
        Err(err) => {
            tracing::warn!(call_id, error = %err, "a claim left unsettled could not be released");
        }
    }
    Tried::Settled
}
