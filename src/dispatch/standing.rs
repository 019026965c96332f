//! Standing approvals: an approver's "this tool, for this caller, for the next N seconds or K
//! calls", granted with an approval and spent by the calls the tool's policy would suspend.
//!
//! The rule, written once for every door:
//! - a policy offers them with both `standing_max_s` and `standing_max_calls` (the longest and
//!   the most an approver may grant; a standing approval is always bounded both ways);
//! - never where the policy needs several approvers (`approvals > 1`: one person's standing
//!   approval would stand for all of them), nor on a call without a named caller (auth off),
//!   nor on the approver's own call;
//! - a grant asks for both `for_s` and `calls`, each 1 to the policy's bound; more, or where
//!   none is offered, is refused before anything is decided;
//! - a later call of the tool by that caller that the policy would suspend takes one of its
//!   calls and runs at once, recorded with the standing approval's id and its approver (a
//!   `standing_approved` event); the store takes it in the transaction that records the call,
//!   so a limit holds across replicas (`crate::store::StandingStore`).
//!
//! The call path pays nothing for it on a tool whose policy offers none: one branch on the
//! policy, no read of the store.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::admit::{NewRun, Recorded};
use super::attempt::Start;
use super::live::ToolPolicy;
use super::who::Principal;
use super::{DispatchError, Dispatcher};
use crate::ids;
use crate::store::{
    Actor, Approval, Inserted, NewCall, NewStanding, Outcome, Resolution, Resolved,
    StandingApproval, StoreError, Timestamp,
};

/// The longest `standing_max_s`: a year.
const MAX_STANDING_S: u64 = 365 * 24 * 3600;
/// The largest `standing_max_calls`.
const MAX_STANDING_CALLS: u32 = 1_000_000;

/// The standing approvals a policy offers: at most `max_for` long, releasing at most
/// `max_calls` calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandingLimits {
    /// The longest an approver may grant one for (`standing_max_s`).
    pub max_for: Duration,
    /// The most calls one may release (`standing_max_calls`).
    pub max_calls: u32,
}

impl StandingLimits {
    /// The limits a policy's keys set, when it sets both (checked when the file was read).
    pub(super) fn of(max_s: Option<u64>, max_calls: Option<u32>) -> Option<StandingLimits> {
        match (max_s, max_calls) {
            (Some(s), Some(calls)) if s > 0 && calls > 0 => Some(StandingLimits {
                max_for: Duration::from_secs(s.min(MAX_STANDING_S)),
                max_calls: calls.min(MAX_STANDING_CALLS),
            }),
            _ => None,
        }
    }

    /// What is wrong with a policy's standing keys, as (the key, why).
    pub(super) fn check(
        max_s: Option<u64>,
        max_calls: Option<u32>,
    ) -> Result<(), (&'static str, String)> {
        match (max_s, max_calls) {
            (None, None) => Ok(()),
            (Some(_), None) => Err((
                "standing_max_s",
                "needs standing_max_calls beside it: a standing approval is bounded both in \
                 time and in calls"
                    .into(),
            )),
            (None, Some(_)) => Err((
                "standing_max_calls",
                "needs standing_max_s beside it: a standing approval is bounded both in time \
                 and in calls"
                    .into(),
            )),
            (Some(s), _) if !(1..=MAX_STANDING_S).contains(&s) => Err((
                "standing_max_s",
                format!("must be 1 to {MAX_STANDING_S} seconds, not {s}"),
            )),
            (_, Some(calls)) if !(1..=MAX_STANDING_CALLS).contains(&calls) => Err((
                "standing_max_calls",
                format!("must be 1 to {MAX_STANDING_CALLS} calls, not {calls}"),
            )),
            _ => Ok(()),
        }
    }
}

/// What an approver grants with an approval: the next `for_s` seconds or `calls` calls of the
/// tool by the call's caller, whichever ends first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StandingAsk {
    /// For how many seconds, 1 to the policy's `standing_max_s`.
    #[serde(deserialize_with = "whole")]
    pub for_s: u64,
    /// For how many calls, 1 to the policy's `standing_max_calls`.
    #[serde(deserialize_with = "whole")]
    pub calls: u32,
}

/// The largest whole number every `f64` below it holds exactly (2^53).
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

/// A whole number as JSON may write it: `3600`, or `3600.0`, which JSON Schema's `integer` (the
/// type the API document gives) takes too; a fraction, a negative number or one out of range is
/// refused.
fn whole<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64>,
{
    let number = serde_json::Number::deserialize(deserializer)?;
    number
        .as_u64()
        .or_else(|| {
            number
                .as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..=MAX_EXACT).contains(f))
                .map(|f| f as u64)
        })
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| {
            serde::de::Error::custom(format!("`{number}` is not a whole number in range"))
        })
}

impl Dispatcher {
    /// The standing approvals `tool`'s policy offers `approver` on a call made by `caller`, or
    /// why it offers none (a sentence).
    pub fn standing_offer(
        &self,
        tool: &str,
        caller: Option<&str>,
        approver: Option<&str>,
    ) -> Result<StandingLimits, String> {
        let current = self.live.current();
        let gate = current
            .policy(tool)
            .and_then(|policy| policy.settings.approval.as_ref());
        let Some(limits) = gate.and_then(|gate| gate.standing) else {
            return Err(format!(
                "The approval policy of {tool} offers no standing approvals."
            ));
        };
        if gate.is_some_and(|gate| gate.approvals > 1) {
            return Err(format!(
                "Calls of {tool} need several approvers, so no standing approval stands for \
                 them."
            ));
        }
        match caller {
            None => Err("The call has no named caller to grant a standing approval for.".into()),
            Some(caller) if approver == Some(caller) => Err(
                "The call is your own: nobody grants a standing approval for their own calls."
                    .into(),
            ),
            Some(_) => Ok(limits),
        }
    }

    /// The standing approval `ask` grants with the approval of `approval` by `actor`, checked
    /// against the tool's policy; refused before anything is decided.
    pub(super) fn new_standing(
        &self,
        approval: &Approval,
        actor: &Actor,
        ask: &StandingAsk,
    ) -> Result<NewStanding, DispatchError> {
        let limits = self
            .standing_offer(
                &approval.tool,
                approval.caller.as_deref(),
                actor.name.as_deref(),
            )
            .map_err(DispatchError::StandingNotAllowed)?;
        let max_s = limits.max_for.as_secs();
        if !(1..=max_s).contains(&ask.for_s) {
            return Err(DispatchError::StandingOutOfBounds {
                field: "for_s",
                max: max_s,
            });
        }
        if !(1..=limits.max_calls).contains(&ask.calls) {
            return Err(DispatchError::StandingOutOfBounds {
                field: "calls",
                max: u64::from(limits.max_calls),
            });
        }
        let for_ms = i64::try_from(ask.for_s.saturating_mul(1000)).unwrap_or(i64::MAX);
        Ok(NewStanding {
            id: ids::new_standing_id(),
            calls: ask.calls,
            expires_at: Timestamp(Timestamp::now().0.saturating_add(for_ms)),
        })
    }

    /// Resolves `token` as `resolution` says, granting `standing` with it when given (in the
    /// same transaction).
    pub(super) async fn resolve_granting(
        &self,
        token: &str,
        resolution: Resolution,
        actor: &Actor,
        standing: Option<NewStanding>,
    ) -> Result<Resolved, StoreError> {
        match standing {
            Some(standing) => {
                self.store
                    .approve_standing(token, resolution, actor, standing)
                    .await
            }
            None => self.store.resolve_by(token, resolution, actor).await,
        }
    }

    /// The standing approvals that hold now, as `principal` may see them: those of the tools
    /// it decides (an admin's `decides` too), newest first.
    pub async fn standing_approvals(
        &self,
        principal: &Principal,
    ) -> Result<Vec<StandingApproval>, DispatchError> {
        let all = self.store.standing_approvals(Timestamp::now()).await?;
        Ok(all
            .into_iter()
            .filter(|standing| principal.may_decide(&standing.tool))
            .collect())
    }

    /// Revokes the standing approval `id` for `principal`: from now on it releases no call.
    /// One of a tool outside its `decides` is `UnknownStandingApproval` to it, as one that
    /// does not exist.
    pub async fn revoke_standing(
        &self,
        id: &str,
        principal: &Principal,
    ) -> Result<StandingApproval, DispatchError> {
        let unknown = || DispatchError::UnknownStandingApproval(id.to_owned());
        let found = self
            .store
            .standing_approval(id)
            .await?
            .ok_or_else(unknown)?;
        if !principal.may_decide(&found.tool) {
            return Err(unknown());
        }
        self.store
            .revoke_standing(id, principal.name.as_deref(), Timestamp::now())
            .await?
            .ok_or_else(unknown)
    }
}

/// Whether the tool's policy offers standing approvals, one of which may release a call it
/// would suspend: one branch on the call path, and no read of the store when it offers none.
pub(super) fn offered(policy: &ToolPolicy) -> bool {
    policy
        .settings
        .approval
        .as_ref()
        .is_some_and(|gate| gate.standing.is_some())
}

impl NewRun<'_> {
    /// A call its policy would suspend, of a tool whose policy offers standing approvals:
    /// recorded suspended, unless a standing approval of its tool and caller holds, which the
    /// store takes one call of as it records the call `running`; the tool then runs at once.
    pub(super) async fn standing(
        &self,
        call: NewCall,
        input: Value,
    ) -> Result<Recorded, DispatchError> {
        // A released call runs at once: with its backend known to be down it would spend a
        // call of the standing approval and fail, so it waits for a person as any other.
        if self.registered.tool.ready().is_err() {
            return self.gated(call, input).await;
        }
        let key = call.idempotency_key.clone();
        let asked = self.run(key.as_deref(), input.clone(), false).await;
        let intent = NewCall {
            input: input.clone(),
            attempts: 1,
            ..call
        };
        let store = &self.dispatcher.store;
        // A standing approval granted before the tool's definition was last accepted is of
        // another definition: it releases nothing (the call waits for a person).
        let since = self
            .registered
            .tool
            .pinned()
            .map_or(i64::MIN, |pin| pin.since_ms);
        let granted_since = crate::store::Timestamp(since);
        let (inserted, used) = match store
            .insert_standing_call(intent, asked.recorded(), granted_since)
            .await
        {
            Ok(answered) => answered,
            // As for an intent (`intent_first`): the call may have been committed `running`
            // though the answer was lost; the tool will not run, so once the store answers the
            // call is released as interrupted (one recorded suspended is left as it is).
            Err(err @ StoreError::Unavailable(_)) => {
                let released = Outcome::Interrupted {
                    reason: super::unsettled::STORE_UNREACHED.into(),
                };
                (self.dispatcher).record_later(self.call_id.to_owned(), Some(1), 1, released);
                return Err(err.into());
            }
            Err(err) => return Err(err.into()),
        };
        if let Inserted::Existing(existing) = inserted {
            return self.repeat(*existing, &input).await;
        }
        let Some(used) = used else {
            return Ok(Recorded::Ran(asked));
        };
        tracing::debug!(standing = %used.id, "a standing approval released the call");
        crate::metrics::standing_released(self.registered.tool.name());
        let ran = self
            .dispatcher
            .attempts(
                self.registered,
                self.policy,
                self.call_id,
                key.as_deref(),
                Start::Run,
                1,
                input,
                false,
                Dispatcher::attest_standing(self.attesting.clone(), &used),
                self.caller,
            )
            .await;
        self.dispatcher
            .record(self.call_id, Some(ran.first), ran.attempts, &ran.recorded())
            .await?;
        Ok(Recorded::Ran(ran))
    }
}

#[cfg(test)]
mod tests {
    use super::StandingAsk;

    #[test]
    fn a_standing_ask_takes_whole_numbers_as_json_writes_them() {
        let ask = |text: &str| serde_json::from_str::<StandingAsk>(text);
        let whole = StandingAsk {
            for_s: 3600,
            calls: 20,
        };
        assert_eq!(ask(r#"{"for_s": 3600, "calls": 20}"#).unwrap(), whole);
        assert_eq!(ask(r#"{"for_s": 3600.0, "calls": 20.0}"#).unwrap(), whole);
        for refused in [
            r#"{"for_s": 1.5, "calls": 20}"#,
            r#"{"for_s": -1, "calls": 20}"#,
            r#"{"for_s": 60, "calls": 4294967296}"#,
            r#"{"for_s": 60, "calls": "20"}"#,
        ] {
            assert!(ask(refused).is_err(), "{refused}");
        }
    }
}
