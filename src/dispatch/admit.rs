//! A new call, from its request to its first run: the input checked against the tool's schema
//! (the handler never sees input that does not fit), the idempotency key derived, the call's
//! recording plan chosen once, and a repeated key answered from the call it names.
//!
//! What a client sends is bounded here for every door: JSON nested at most `max_json_depth`
//! deep ([`Dispatcher::check_depth`]), and an idempotency key of 1 to 255 visible ASCII
//! characters ([`check_idempotency_key`](super::check_idempotency_key)), whether it came as REST's `Idempotency-Key` header or
//! MCP's `_meta`.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
use tracing::Instrument as _;

use super::attempt::Start;
use super::condition::Scope;
use super::keys::client_key_scope;
use super::live::{Entry, ToolPolicy};
use super::record::Ran;
use super::who::Principal;
use super::{CallOptions, CallOutcome, CallResult, DispatchError, Dispatcher, detached};
use crate::base::CallerToken;
use crate::contract::meta::Effect;
use crate::contract::outcome::Suspension;
use crate::contract::registry::Registered;
use crate::ids;
use crate::store::{CallRecord, CallStatus, Inserted, NewCall, Outcome, StoreError, Timestamp};
use crate::telemetry::spans;

/// How a new call is recorded: chosen once, up front, from its tool's settings, its effect
/// and whether it has an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// The tool needs a person's approval for every call: recorded suspended, nothing runs.
    Gated,
    /// A tool with effects, or a keyed call: the intent first, then the run, then the outcome.
    IntentFirst,
    /// A read without a key: the run first, then one record with its outcome.
    Behind,
}

impl Plan {
    fn of(asked: bool, effect: Effect, keyed: bool) -> Plan {
        if asked {
            Plan::Gated
        } else if effect != Effect::Read || keyed {
            Plan::IntentFirst
        } else {
            Plan::Behind
        }
    }
}

/// What a plan came to: a run, or the answer of the call its key already had.
pub(super) enum Recorded {
    Ran(Ran),
    Repeated(CallResult),
}

/// Whether a call's answer came from the record its idempotency key already had (a replay, or a
/// refusal because of that call's state): no new call, so no quota spent.
fn answered_from_record(result: &Result<CallResult, DispatchError>) -> bool {
    match result {
        Ok(result) => result.replayed,
        Err(err) => matches!(
            err,
            DispatchError::IdempotencyKeyReused { .. }
                | DispatchError::CallInProgress { .. }
                | DispatchError::NeedsReconciliation { .. }
        ),
    }
}

/// How deep `value` nests: arrays and objects count one level each.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

impl Dispatcher {
    /// Refuses JSON nested deeper than the dispatcher's `max_json_depth`: bounded work for the
    /// validators and the store, whatever a client sends. (serde_json already refuses more than
    /// 128 levels while parsing, so the walk is bounded too.)
    pub fn check_depth(&self, value: &Value) -> Result<(), DispatchError> {
        if depth(value) > self.max_json_depth {
            return Err(DispatchError::TooDeep(self.max_json_depth));
        }
        Ok(())
    }
    /// Whether `principal` may call `tool`, as a door asks before it reads a call's input: a
    /// tool outside the principal's `tools` does not exist for it (`UnknownTool`), a held one
    /// is `ToolChanged`, one whose `required_scopes` its token lacks `InsufficientScope`.
    pub fn may_call(&self, principal: &Principal, tool: &str) -> Result<(), DispatchError> {
        self.entry_for(principal, tool).map(drop)
    }

    /// The tool `tool` as `principal` may call it (see [`Dispatcher::may_call`]).
    fn entry_for(&self, principal: &Principal, tool: &str) -> Result<Entry, DispatchError> {
        if !principal.tools.allows(tool) {
            return Err(DispatchError::UnknownTool(tool.to_owned()));
        }
        let entry = self.entry(tool)?;
        super::pinned::refuse_held(&entry.registered)?;
        let required = &entry.policy.settings.required_scopes;
        if !required.is_empty() && !principal.missing_scopes(required).is_empty() {
            return Err(DispatchError::InsufficientScope {
                tool: tool.to_owned(),
                scopes: required.clone(),
            });
        }
        Ok(entry)
    }

    /// Calls the tool `tool` with `input`, for `options.principal`.
    ///
    /// A call with effects (or an idempotency key) runs to its recorded outcome even if the
    /// caller stops waiting (an HTTP client that disconnects, say): a tool is never abandoned
    /// half-way with its intent recorded and its outcome lost.
    pub async fn call(
        &self,
        tool: &str,
        mut input: Value,
        options: CallOptions,
    ) -> Result<CallResult, DispatchError> {
        self.check_depth(&input)?;
        let entry = self.entry_for(&options.principal, tool)?;
        // Input that does not fit never reaches the tool, nor the store; a `null` that stands
        // for a property left out is taken out first, and what is left is the call's input.
        let declared = entry.registered.admit(&mut input).map_err(|violations| {
            DispatchError::InvalidInput {
                tool: tool.to_owned(),
                violations,
            }
        })?;
        let principal = options.principal;
        let declared_key = declared.is_some();
        // The tool's own key names the effect and wins; a client's key is scoped to its caller.
        let key = declared.or_else(|| {
            options
                .idempotency_key
                .as_deref()
                .map(|key| client_key_scope(principal.name.as_deref(), key))
        });
        let effect = entry.registered.tool.effect();
        // The tool's approval policy, if it has one, decides now whether a person is asked,
        // over the input as admitted.
        let asked = entry.policy.settings.approval.as_ref().and_then(|gate| {
            gate.asks(&Scope {
                input: &input,
                tool,
                effect,
                principal: &principal,
            })
        });
        let plan = Plan::of(asked.is_some(), effect, key.is_some());
        // Input that does not fit, or a tool that does not exist, spends no quota. With no
        // quota configured for the principal or the tool, this is the one branch a call pays.
        let tool_quota = &entry.policy.settings.quotas;
        let permit = self
            .quota_permit(&principal, tool, tool_quota, key.as_deref())
            .await?;
        // A read without an idempotency key has no effect to protect and no intent record that
        // could be left running: it may run inline, and be dropped with its request. Anything
        // else runs detached, to its recorded outcome.
        if key.is_none() && effect == Effect::Read {
            let caller = (principal.name, principal.token);
            let run = self.run_call(&entry, plan, asked, input, caller, key);
            let result = if spans::recording() {
                under_call_span(tool, effect, run).await
            } else {
                run.await
            };
            drop(permit);
            return result;
        }
        // A keyed call may meet another caller's call (the tool's own key): kept to tell.
        // Told as to a caller to whoever may not decide this tool (a caller; an admin whose
        // `decides` leaves it out): another's call then shows only where it stands.
        let asker = (!principal.may_decide(tool)).then(|| principal.name.clone());
        let shared_key = declared_key;
        let this = self.clone();
        let result = detached(&self.running, async move {
            let caller = (principal.name, principal.token);
            let run = this.run_call(&entry, plan, asked, input, caller, key);
            let result = if spans::recording() {
                under_call_span(entry.registered.tool.name(), effect, run).await
            } else {
                run.await
            };
            // Counted as running until here, and not at all if its key's record answered.
            if let Some(permit) = permit {
                permit.settle(answered_from_record(&result)).await;
            }
            result
        })
        .await;
        match (result, asker) {
            // Another caller's call waits for a person: say so, not what it holds.
            (Err(DispatchError::NeedsReconciliation { call_id, call }), Some(own))
                if call.as_ref().is_some_and(|call| call.caller != own) =>
            {
                Err(DispatchError::NeedsReconciliation {
                    call_id,
                    call: None,
                })
            }
            (result, Some(own)) if shared_key => self.as_seen_by(result, own.as_deref()).await,
            (result, _) => result,
        }
    }

    /// A keyed call's answer as the caller `own` may see it, when the key is the tool's own
    /// (shared by every caller on purpose) and may belong to another caller's call: a replay of
    /// that call shows where it stands (its status and, completed, its output), never its
    /// suspension token or what the approver is asked; a key reused with another input names
    /// no call. The call's record is read only for those two answers.
    async fn as_seen_by(
        &self,
        result: Result<CallResult, DispatchError>,
        own: Option<&str>,
    ) -> Result<CallResult, DispatchError> {
        let call_id = match &result {
            Ok(answer) if answer.replayed => answer.call_id.as_str(),
            Err(DispatchError::IdempotencyKeyReused {
                call_id: Some(call_id),
            }) => call_id.as_str(),
            _ => return result,
        };
        let made_by = self.store.call(call_id).await?.and_then(|call| call.caller);
        if made_by.as_deref() == own {
            return result;
        }
        match result {
            Ok(mut answer) => {
                if let CallOutcome::Suspended { .. } = answer.outcome {
                    answer.outcome = CallOutcome::Withheld;
                }
                Ok(answer)
            }
            Err(DispatchError::IdempotencyKeyReused { .. }) => {
                Err(DispatchError::IdempotencyKeyReused { call_id: None })
            }
            other => other,
        }
    }

    /// The first run of a new call, whose input [`Dispatcher::call`] admitted, under the
    /// idempotency `key` it derived, recorded as `plan` says; `asked` is its approval policy's
    /// question, when the policy asks one; `caller` is who calls: its name (recorded) and its token
    /// (kept for a tool that acts as the caller).
    async fn run_call(
        &self,
        entry: &Entry,
        plan: Plan,
        asked: Option<Box<Suspension>>,
        input: Value,
        (caller, token): (Option<String>, Option<CallerToken>),
        key: Option<String>,
    ) -> Result<CallResult, DispatchError> {
        let registered = entry.registered.as_ref();
        let dyn_tool = registered.tool.as_ref();
        let policy = entry.policy.as_ref();
        let _slot = self.take_slot(policy, dyn_tool.name())?;
        // A backend known to be down is answered before anything is recorded; a gated call
        // sends nothing now, so it may wait for its approval meanwhile; and a keyed call is
        // answered from its record when it has one (its run, if any, then finds the backend
        // down and releases the call).
        if plan != Plan::Gated && key.is_none() {
            dyn_tool
                .ready()
                .map_err(|unready| DispatchError::Unavailable {
                    tool: dyn_tool.name().to_owned(),
                    retry_after: unready.retry_after,
                })?;
        }

        let created_at = Timestamp::now();
        let call_id = ids::new_call_id(created_at.0);
        tracing::Span::current().record("call_id", call_id.as_str());
        let call = NewCall {
            call_id: call_id.clone(),
            tool: dyn_tool.name().to_owned(),
            effect: dyn_tool.effect(),
            caller,
            // Filled in where the call is recorded: before the run for a call with effects,
            // after it (with the input the attempts hand back) for a plain read.
            input: Value::Null,
            idempotency_key: key,
            attempts: 1,
            created_at,
            trace: spans::traceparent(),
        };
        let run = NewRun {
            dispatcher: self,
            registered,
            policy,
            call_id: &call_id,
            asked: asked.as_deref(),
            attesting: self.attest_first(registered.tool.as_ref(), &call, &policy.settings),
            caller: token.as_ref(),
        };
        let ran = match plan {
            // Only a policy that offers standing approvals looks for one (see `standing`),
            // boxed so that every other call's future stays the size it was.
            Plan::Gated if super::standing::offered(policy) => {
                Box::pin(run.standing(call, input)).await?
            }
            Plan::Gated => run.gated(call, input).await?,
            Plan::IntentFirst => run.intent_first(call, input).await?,
            Plan::Behind => run.behind(call, input).await?,
        };
        let ran = match ran {
            Recorded::Ran(ran) => ran,
            Recorded::Repeated(answer) => return Ok(answer),
        };
        policy.metrics.ran(ran.outcome.status().as_str(), ran.took);
        Ok(CallResult {
            call_id,
            tool: dyn_tool.name().to_owned(),
            outcome: ran.outcome,
            replayed: false,
            edited: None,
        })
    }

    /// Answers a request whose idempotency key already has a call. An interrupted call runs
    /// again, asking first what this request's approval policy asks (`asked`), unless it was
    /// approved before.
    async fn repeat(
        &self,
        existing: CallRecord,
        input: &Value,
        registered: &Registered,
        policy: &ToolPolicy,
        asked: Option<&Suspension>,
        caller: Option<&CallerToken>,
    ) -> Result<CallResult, DispatchError> {
        tracing::Span::current().record("call_id", existing.call_id.as_str());
        // The key's request is the one its caller made: an approver's edit (see `edit`) does
        // not change what a repeated request must match.
        let asked_with = existing.original_input.as_ref().unwrap_or(&existing.input);
        if asked_with != input {
            return Err(DispatchError::IdempotencyKeyReused {
                call_id: Some(existing.call_id),
            });
        }
        match existing.status {
            CallStatus::Running => Err(DispatchError::CallInProgress {
                call_id: existing.call_id,
            }),
            CallStatus::NeedsReconciliation => Err(DispatchError::NeedsReconciliation {
                call_id: existing.call_id.clone(),
                call: Some(Box::new(existing)),
            }),
            CallStatus::Interrupted => {
                // Claim it; of two requests racing to re-run it, one wins and the other is told
                // it is in progress.
                let claiming = self.unsettled.begin(&existing.call_id).await?;
                let claimed = match self.store.rerun_interrupted(&existing.call_id).await {
                    Ok(claimed) => claimed,
                    Err(err) => return Err(self.claim_failed(claiming, err)),
                };
                drop(claiming);
                let Some(rerun) = claimed else {
                    return Err(DispatchError::CallInProgress {
                        call_id: existing.call_id,
                    });
                };
                // This request's run of the call is linked to the run that was interrupted.
                spans::link_to_call(existing.traceparent.as_deref());
                // An interrupted re-dispatch of an approval resumes with the approver's input:
                // the person is not asked twice.
                let start = Start::of(rerun.resume_input, asked.cloned().map(Box::new));
                // Only the call's own caller's token acts for it upstream: another caller whose
                // key names the same call re-runs it on what the call kept, or not at all.
                let caller =
                    caller.filter(|token| rerun.call.caller.as_deref() == Some(token.subject()));
                self.run_recorded(registered, policy, rerun.call, start, caller)
                    .await
            }
            _ => match CallOutcome::from_record(&existing) {
                Some(outcome) => Ok(CallResult {
                    edited: super::edit::edit_of(&existing),
                    call_id: existing.call_id,
                    tool: existing.tool,
                    outcome,
                    replayed: true,
                }),
                None => Err(DispatchError::CallInProgress {
                    call_id: existing.call_id,
                }),
            },
        }
    }
}

/// What recording a new call as its [`Plan`] says needs to know besides the call itself.
pub(super) struct NewRun<'a> {
    pub(super) dispatcher: &'a Dispatcher,
    pub(super) registered: &'a Registered,
    pub(super) policy: &'a ToolPolicy,
    pub(super) call_id: &'a str,
    /// What the approval policy asks of this call, if anything.
    asked: Option<&'a Suspension>,
    pub(super) attesting: Option<crate::contract::attest::Attesting>,
    /// The caller's access token, for a tool that acts as the caller.
    pub(super) caller: Option<&'a CallerToken>,
}

impl NewRun<'_> {
    /// [`Plan::Gated`]: nothing runs now; the call is recorded suspended in one write, so no
    /// crash can leave it `running` (and a write needing reconciliation that never happened).
    pub(super) async fn gated(
        &self,
        call: NewCall,
        input: Value,
    ) -> Result<Recorded, DispatchError> {
        let ran = self
            .run(call.idempotency_key.as_deref(), input.clone(), false)
            .await;
        let call = NewCall {
            input: input.clone(),
            attempts: ran.attempts,
            ..call
        };
        let store = &self.dispatcher.store;
        match store.insert_call(call, Some(ran.recorded())).await? {
            Inserted::New => Ok(Recorded::Ran(ran)),
            Inserted::Existing(existing) => self.repeat(*existing, &input).await,
        }
    }

    /// [`Plan::IntentFirst`]: the intent is committed before the tool runs, so a crash mid-run
    /// leaves a `running` record behind instead of an effect nobody knows about, and a second
    /// request with the same key finds the first; the outcome is recorded before the answer.
    async fn intent_first(&self, call: NewCall, input: Value) -> Result<Recorded, DispatchError> {
        let dispatcher = self.dispatcher;
        let key = call.idempotency_key.clone();
        let intent = NewCall {
            input: input.clone(),
            ..call
        };
        match dispatcher.store.insert_call(intent, None).await {
            Ok(Inserted::New) => {}
            Ok(Inserted::Existing(existing)) => return self.repeat(*existing, &input).await,
            // The intent may have been committed though its answer was lost. The tool will
            // not run, so once the store answers the call (if it exists) is released as
            // interrupted: no key stays held by a run that never happened.
            Err(err @ StoreError::Unavailable(_)) => {
                let released = Outcome::Interrupted {
                    reason: super::unsettled::STORE_UNREACHED.into(),
                };
                dispatcher.record_later(self.call_id.to_owned(), Some(1), 1, released);
                return Err(err.into());
            }
            Err(err) => return Err(err.into()),
        }
        let ran = self.run(key.as_deref(), input, false).await;
        let outcome = ran.recorded();
        dispatcher
            .record(self.call_id, Some(ran.first), ran.attempts, &outcome)
            .await?;
        Ok(Recorded::Ran(ran))
    }

    /// [`Plan::Behind`]: a read without a key has nothing to lose; its call is recorded once,
    /// with its outcome and the input the attempts hand back, and may be committed behind the
    /// answer (unless it suspended: a person will look for that).
    async fn behind(&self, call: NewCall, input: Value) -> Result<Recorded, DispatchError> {
        let mut ran = self.run(None, input, true).await;
        let store = &self.dispatcher.store;
        let call = NewCall {
            attempts: ran.attempts,
            input: ran.input.take().expect("attempts hand back the input kept"),
            ..call
        };
        match &mut ran.outcome {
            CallOutcome::Suspended { .. } | CallOutcome::Withheld => {
                store.insert_call(call, Some(ran.recorded())).await?;
            }
            // The output is lent to the store, which serializes it at once, and taken back for
            // the answer: no copy of it only to be recorded.
            CallOutcome::Completed(output) => {
                let recorded = Outcome::Completed {
                    output: std::mem::take(output),
                };
                let stored = store.insert_behind(call, &recorded).await;
                if let Outcome::Completed { output: lent } = recorded {
                    *output = lent;
                }
                stored?;
            }
            CallOutcome::Failed { .. } => {
                store.insert_behind(call, &ran.recorded()).await?;
            }
        }
        Ok(Recorded::Ran(ran))
    }

    /// The call's first run of attempts under `key`, with `input` (handed back when `keep`):
    /// none at all when the approval policy asks a person first.
    pub(super) async fn run(&self, key: Option<&str>, input: Value, keep: bool) -> Ran {
        let (registered, policy) = (self.registered, self.policy);
        let start = Start::of(None, self.asked.cloned().map(Box::new));
        let (id, at) = (self.call_id, self.attesting.clone());
        self.dispatcher
            .attempts(
                registered,
                policy,
                id,
                key,
                start,
                1,
                input,
                keep,
                at,
                self.caller,
            )
            .await
    }

    /// The answer of the call the key already had.
    pub(super) async fn repeat(
        &self,
        existing: CallRecord,
        input: &Value,
    ) -> Result<Recorded, DispatchError> {
        let (registered, policy) = (self.registered, self.policy);
        self.dispatcher
            .repeat(existing, input, registered, policy, self.asked, self.caller)
            .await
            .map(Recorded::Repeated)
    }
}

/// `run` under an `execute_tool` span, with what came of it recorded there. Boxed, and only for
/// a request whose trace is recorded: with traces off, or a trace left unsampled, a call's
/// future is no larger than without traces, and nothing copies it into a box (moving a future
/// copies it whole: about 12,000 instructions of an echo call).
fn under_call_span<'a>(
    tool: &str,
    effect: Effect,
    run: impl Future<Output = Result<CallResult, DispatchError>> + Send + 'a,
) -> Pin<Box<dyn Future<Output = Result<CallResult, DispatchError>> + Send + 'a>> {
    let span = spans::call(tool, effect.as_str());
    Box::pin(async move {
        let result = run.instrument(span.clone()).await;
        let call_id = match &result {
            Ok(answer) => Some(&answer.call_id),
            Err(
                DispatchError::CallInProgress { call_id }
                | DispatchError::NeedsReconciliation { call_id, .. }
                | DispatchError::IdempotencyKeyReused {
                    call_id: Some(call_id),
                },
            ) => Some(call_id),
            Err(_) => None,
        };
        if let Some(call_id) = call_id {
            spans::call_id(&span, call_id);
        }
        traced(&span, &result);
        result
    })
}

/// Records what came of a call on its `execute_tool` span (nothing when traces are off).
pub(super) fn traced(span: &tracing::Span, result: &Result<CallResult, DispatchError>) {
    if span.is_none() {
        return;
    }
    match result {
        Ok(answer) => match &answer.outcome {
            CallOutcome::Failed { status, failure } => {
                spans::outcome(span, status.as_str(), Some(failure.kind.code()));
            }
            outcome => spans::outcome(span, outcome.status().as_str(), None),
        },
        Err(err) => {
            let kind = match err.kind() {
                super::ErrorKind::InvalidRequest => "refused",
                super::ErrorKind::Unavailable => "unavailable",
                super::ErrorKind::Internal => "internal",
            };
            spans::outcome(span, "not_run", Some(kind));
        }
    }
}
