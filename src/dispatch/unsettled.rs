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
//! claim here would begin the same run, and releasing it would cut a tool off mid-run. Another
//! replica's claim is refused by the release's owner condition (its refusal is kept in the
//! call's history as a late outcome, as every refused outcome is).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{DispatchError, Dispatcher};
use crate::store::{CallStatus, Outcome, StoreError};

/// Why a run is released before its tool ran: the store could not be reached.
pub(super) const STORE_UNREACHED: &str = "the store could not be reached before the tool ran";

/// The calls of this process whose claim is not settled yet.
#[derive(Clone, Default)]
pub(super) struct Unsettled(Arc<Mutex<HashSet<String>>>);

impl Unsettled {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses to claim `call_id` while an earlier claim of it is not settled.
    pub(super) fn check(&self, call_id: &str) -> Result<(), DispatchError> {
        if self.set().contains(call_id) {
            return Err(DispatchError::Store(StoreError::Unavailable(format!(
                "an earlier claim of call {call_id} is not settled yet: the store could not \
                 confirm it"
            ))));
        }
        Ok(())
    }
}

impl Dispatcher {
    /// Answers a claim of `call_id` that failed with `err`: when the store could not be
    /// reached, the claim is settled in the background (see the module). Always `err`, for
    /// the caller to answer.
    pub(super) fn claim_failed(&self, call_id: &str, err: StoreError) -> DispatchError {
        if matches!(err, StoreError::Unavailable(_)) && self.unsettled.set().insert(call_id.into())
        {
            self.settle_claim(call_id.to_owned());
        }
        err.into()
    }

    /// Reads `call_id` once the store answers, and releases it if a claim left it running. A
    /// shutdown waits for it like for a running call.
    fn settle_claim(&self, call_id: String) {
        let store = self.store.clone();
        let unsettled = self.unsettled.clone();
        let guard = self.running.enter();
        tokio::spawn(async move {
            let _guard = guard;
            let mut wait = Duration::from_millis(200);
            loop {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
                let call = match store.call(&call_id).await {
                    Ok(Some(call)) if call.status == CallStatus::Running => call,
                    // The claim never committed (or the call was settled meanwhile).
                    Ok(_) => break,
                    Err(StoreError::Unavailable(_)) => continue,
                    Err(err) => {
                        tracing::warn!(call_id, error = %err, "a claim left unsettled could not be read");
                        break;
                    }
                };
                let released = Outcome::Interrupted {
                    reason: STORE_UNREACHED.into(),
                };
                let run = call.attempts;
                match store.finish_call(&call_id, Some(run), run, &released).await {
                    Ok(()) => {
                        tracing::info!(
                            call_id,
                            "released a claim the store committed while it could not be reached"
                        );
                        break;
                    }
                    Err(StoreError::Unavailable(_)) => continue,
                    // Another replica's run, or settled meanwhile.
                    Err(StoreError::NotRunning { .. } | StoreError::LeaseLost(_)) => break,
                    Err(err) => {
                        tracing::warn!(call_id, error = %err, "a claim left unsettled could not be released");
                        break;
                    }
                }
            }
            unsettled.set().remove(&call_id);
        });
    }
}
