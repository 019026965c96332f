//! Escalation: a suspension whose tool's approval policy sets `escalate_after_s`, left
//! undecided that long, is escalated once. The store marks it (`escalated_at`, an `escalated`
//! event, a `call.escalated` feed entry, so that a webhook can page someone) under a condition
//! that only one process meets however many sweep at once; from then on the principals its
//! `escalate_to` names may decide it too.
//!
//! Every process sweeps (see `crate::app`): on a shared database each replica asks the store to
//! escalate what is due, and each suspension is escalated by whichever gets there first. A sweep
//! after a restart catches up with what fell due while the server was down.

use std::time::Duration;

use super::Dispatcher;
use super::live::Generation;
use super::who::Principal;
use crate::store::{CallRecord, StoreError, Timestamp};

/// The longest pause between two sweeps.
const MAX_TICK: Duration = Duration::from_secs(5);
/// The shortest pause between two sweeps.
const MIN_TICK: Duration = Duration::from_millis(200);

impl Dispatcher {
    /// Escalates the suspensions of every tool whose policy sets `escalate_after_s` that have
    /// waited that long: how many.
    pub async fn escalate_due(&self) -> Result<usize, StoreError> {
        let due: Vec<(String, Duration)> = {
            let generation = self.live.current();
            generation
                .policies()
                .filter_map(|(tool, policy)| {
                    let after = policy.settings.approval.as_ref()?.escalate_after?;
                    Some((tool.to_owned(), after))
                })
                .collect()
        };
        let mut escalated = 0;
        for (tool, after) in due {
            let waited_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
            let created_by = Timestamp(Timestamp::now().0.saturating_sub(waited_ms));
            for call_id in self.store.escalate(&tool, created_by).await? {
                tracing::info!(%call_id, %tool, "approval escalated: undecided past escalate_after_s");
                escalated += 1;
            }
        }
        Ok(escalated)
    }

    /// How long to wait before the next sweep: a quarter of the shortest `escalate_after_s`,
    /// within 200 ms and 5 s (5 s when no policy escalates: one may appear with an upstream).
    pub fn escalation_tick(&self) -> Duration {
        let generation = self.live.current();
        generation
            .policies()
            .filter_map(|(_, policy)| policy.settings.approval.as_ref()?.escalate_after)
            .min()
            .map_or(MAX_TICK, |after| (after / 4).clamp(MIN_TICK, MAX_TICK))
    }

    /// Whether an escalated approval of `tool` reaches `principal` through its policy's
    /// `escalate_to`.
    pub(super) fn escalation_reaches(&self, principal: &Principal, tool: &str) -> bool {
        escalation_reaches(&self.live.current(), principal, tool)
    }
}

/// Whether an escalated approval of `tool` reaches `principal` through the `escalate_to` of its
/// policy in `generation`.
pub(super) fn escalation_reaches(
    generation: &Generation,
    principal: &Principal,
    tool: &str,
) -> bool {
    generation
        .policy(tool)
        .and_then(|policy| policy.settings.approval.as_ref())
        .is_some_and(|gate| principal.reached_by_escalation(&gate.escalate_to))
}

/// Whether `call` waits on a suspension that was escalated: an `escalated` event since it was
/// last suspended.
pub(crate) fn escalated(call: &CallRecord) -> bool {
    call.events_since_suspended()
        .iter()
        .any(|event| event.kind == "escalated")
}
