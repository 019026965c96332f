//! Recording what a run came to: the outcome written before anyone is told of it, retried in
//! the background while the store cannot be reached; and what is counted for the metrics.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::attempt::Start;
use super::live::ToolPolicy;
use super::{CallOutcome, CallResult, DispatchError, Dispatcher};
use crate::contract::registry::Registered;
use crate::store::{CallRecord, CallStatus, Outcome, Resolved, StoreError, Timestamp};

/// How long a background retry waits before its first try.
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// The longest a background retry waits between two tries.
const LONGEST_RETRY: Duration = Duration::from_secs(5);

/// What one try of a background retry came to (`Dispatcher::retry_until_store_answers`).
pub(super) enum Tried {
    /// Done with: the store took it, refused it for good, or it needs nothing more.
    Settled,
    /// The store could not be reached: try again later.
    Unreachable,
}

/// The end of a run of attempts: what is answered, what is recorded, and how many attempts the
/// call has had in all.
pub(super) struct Ran {
    pub(super) outcome: CallOutcome,
    /// The attempt the run began at: the store records the outcome only if this run still owns
    /// the call.
    pub(super) first: u32,
    pub(super) attempts: u32,
    /// The input, when the caller asked for it back.
    pub(super) input: Option<Value>,
    /// How long the run took, from its first attempt to its outcome.
    pub(super) took: Duration,
}

impl Ran {
    /// The outcome as the store records it.
    pub(super) fn recorded(&self) -> Outcome {
        match &self.outcome {
            CallOutcome::Completed(output) => Outcome::Completed {
                output: output.clone(),
            },
            CallOutcome::Suspended {
                token,
                reason,
                input_schema,
                expires_at,
            } => Outcome::Suspended {
                token: token.clone(),
                reason: reason.clone(),
                input_schema: input_schema.clone(),
                expires_at: *expires_at,
            },
            CallOutcome::Failed {
                status: CallStatus::NeedsReconciliation,
                failure,
            } => Outcome::NeedsReconciliation {
                error: failure.error.clone(),
            },
            CallOutcome::Failed {
                status: CallStatus::Interrupted,
                failure,
            } => Outcome::Interrupted {
                reason: failure.error.message.clone(),
            },
            CallOutcome::Failed { failure, .. } => Outcome::Failed {
                error: failure.error.clone(),
            },
            // Only a replay's answer is withheld (`Dispatcher::call`), never a run's outcome.
            CallOutcome::Withheld => unreachable!("a run's own outcome is never withheld"),
        }
    }
}

impl Dispatcher {
    /// Records the outcome of the run of `call_id` that began at attempt `run`. An outcome the
    /// store cannot take now (the database is unreachable) is retried in the background until
    /// it is recorded, or refused because the run no longer owns the call; the caller is told
    /// the store is unavailable meanwhile.
    pub(super) async fn record(
        &self,
        call_id: &str,
        run: Option<u32>,
        attempts: u32,
        outcome: &Outcome,
    ) -> Result<(), DispatchError> {
        match self
            .store
            .finish_call(call_id, run, attempts, outcome)
            .await
        {
            Err(err @ StoreError::Unavailable(_)) => {
                self.record_later(call_id.to_owned(), run, attempts, outcome.clone());
                Err(err.into())
            }
            other => other.map_err(DispatchError::from),
        }
    }

    /// Retries recording `outcome` until the store takes or refuses it. A process that dies
    /// first leaves the call running, and its lease expiring settles it.
    pub(super) fn record_later(
        &self,
        call_id: String,
        run: Option<u32>,
        attempts: u32,
        outcome: Outcome,
    ) {
        let store = self.store.clone();
        let (call_id, outcome) = (Arc::new(call_id), Arc::new(outcome));
        self.retry_until_store_answers(move || {
            let (store, call_id, outcome) = (store.clone(), call_id.clone(), outcome.clone());
            async move {
                match store.finish_call(&call_id, run, attempts, &outcome).await {
                    Ok(()) => {
                        tracing::info!(%call_id, "recorded an outcome once the store was back");
                    }
                    Err(StoreError::Unavailable(_)) => return Tried::Unreachable,
                    // The intent was never committed, or the call was settled meanwhile.
                    Err(StoreError::NotRunning { .. }) => {}
                    Err(err) => {
                        tracing::warn!(%call_id, error = %err, "an outcome retried once the store was back was refused");
                    }
                }
                Tried::Settled
            }
        });
    }

    /// Tries `once` in the background until it settles: the lifecycle's "try again when the
    /// store is back". The first try comes after [`FIRST_RETRY`], each next one after twice the
    /// wait before it, at most [`LONGEST_RETRY`]. A shutdown waits for it like for a running
    /// call.
    pub(super) fn retry_until_store_answers<F, Fut>(&self, mut once: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Tried> + Send,
    {
        let guard = self.running.enter();
        tokio::spawn(async move {
            let _guard = guard;
            let mut wait = FIRST_RETRY;
            loop {
                tokio::time::sleep(wait).await;
                if let Tried::Settled = once().await {
                    return;
                }
                wait = (wait * 2).min(LONGEST_RETRY);
            }
        });
    }

    /// Runs the recorded call `call` again (approved, or interrupted and claimed), as `start`
    /// says, and records what it comes to; `caller` is the caller's token when its own request
    /// runs it (an approval runs it without: what the tool kept before the wait stands in).
    pub(super) async fn run_recorded(
        &self,
        registered: &Registered,
        policy: &ToolPolicy,
        call: CallRecord,
        start: Start,
        caller: Option<&crate::base::CallerToken>,
    ) -> Result<CallResult, DispatchError> {
        // Every recorded run (an approval's, a re-run of an interrupted call) is of the
        // definition the call was made against, or fails closed without running.
        if let Some(why) = super::pinned::changed_since(registered.tool.as_ref(), call.created_at) {
            return Err(self.record_changed(&call, why).await);
        }
        let edited = super::edit::edit_of(&call);
        let attesting = self.attest_recorded(registered.tool.as_ref(), &call, &policy.settings);
        let ran = self
            .attempts(
                registered,
                policy,
                &call.call_id,
                call.idempotency_key.as_deref(),
                start,
                call.attempts,
                call.input,
                false,
                attesting,
                caller,
            )
            .await;
        self.record(
            &call.call_id,
            Some(ran.first),
            ran.attempts,
            &ran.recorded(),
        )
        .await?;
        policy.metrics.ran(ran.outcome.status().as_str(), ran.took);
        Ok(CallResult {
            call_id: call.call_id,
            tool: call.tool,
            outcome: ran.outcome,
            replayed: false,
            edited,
        })
    }

    /// Counts a call of `tool` recorded in `status` without a run of its tool.
    pub(super) fn counted(&self, tool: &str, status: CallStatus) {
        match self.live.current().policy(tool) {
            Some(policy) => policy.metrics.outcome(status.as_str()),
            // A tool no longer served, whose suspended calls are still resolved.
            None => crate::metrics::call_outcome(tool, status.as_str()),
        }
    }

    /// Counts what resolving a suspension, asked for at `asked`, recorded: a person's decision,
    /// and how long the suspension waited for it; or its expiry. An approval's outcome is
    /// counted once the tool has run again.
    pub(super) fn count_resolution(&self, resolved: &Resolved, asked: Timestamp) {
        match resolved {
            Resolved::Approved(call) => decided(call),
            Resolved::Rejected(call) | Resolved::Completed(call) => {
                decided(call);
                self.counted(&call.tool, call.status);
            }
            // Written down now, or found already written (by an earlier request, whose record
            // is older than this one): counted once.
            Resolved::Expired(call) if call.updated_at >= asked => {
                self.counted(&call.tool, CallStatus::Expired);
            }
            Resolved::Expired(_)
            | Resolved::AlreadyResolved(_)
            | Resolved::Recorded { .. }
            | Resolved::AlreadyApproved { .. }
            | Resolved::UnknownToken => {}
        }
    }
}

/// Observes how long the suspension a person just resolved waited for them, by the call's
/// history: from its last `suspended` event to the decision that follows it.
fn decided(call: &CallRecord) {
    let mut events = call.events.iter().rev();
    let decision = events.find(|event| {
        matches!(
            event.kind.as_str(),
            "approved" | "rejected" | "completed_externally"
        )
    });
    let suspended = events.find(|event| event.kind == "suspended");
    if let (Some(decision), Some(suspended)) = (decision, suspended) {
        let waited = u64::try_from(decision.at.0.saturating_sub(suspended.at.0)).unwrap_or(0);
        crate::metrics::approval_decided(Duration::from_millis(waited));
    }
}
