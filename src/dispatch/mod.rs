//! The call lifecycle, in one place: every way a tool runs goes through here.
//!
//! A call: find the tool, check the input against its schema (the handler never sees input that
//! does not fit), take a slot of the tool's concurrency limit, derive the idempotency key (the
//! tool's own, else the client's), record the intent (a conditional insert: an existing call
//! with the same key is answered instead of running again), run attempts under the tool's
//! timeout and retry policy, check the output against the tool's output schema, and record the
//! outcome before anyone is told of it.
//!
//! An approval checks the approver's input against the suspension's schema, resolves the
//! suspension (conditionally, so one approval wins), then runs the same attempt path with
//! `ctx.resume()` set. A rejection or an external completion resolves the suspension without
//! running anything; so does settling a call that needs reconciliation.
//!
//! A tool whose configuration says `require_approval` suspends before its first attempt, for a
//! person to approve the call as asked (see [`ApprovalGate`]); approving runs it with the
//! approver's input in `ctx.resume()`, like any approval.
//!
//! HTTP is not known here: the server translates requests into these calls and the results back.
//! The tools it runs are the current generation of a live set ([`live`]): upstream MCP servers
//! add and remove theirs while the server runs. The run of attempts, and what each attempt
//! amounts to, is `attempt`; the answers and refusals are `outcome`.

mod attempt;
pub mod config;
pub mod live;
mod outcome;

pub use attempt::MAX_REASON_CHARS;
pub use outcome::{CallOutcome, CallResult, DispatchError, Failure, FailureKind};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;
use tracing::Instrument;

use crate::contract::erased::DynTool;
use crate::contract::meta::Effect;
use crate::contract::registry::{Registered, RegistryError, ToolSet, compile_schema, violations};
use crate::contract::retry::RetryPolicy;
use crate::ids;
use crate::slots::{Slot, Slots};
use crate::store::{
    ApprovalState, CallRecord, CallStatus, Inserted, NewCall, Outcome, Reconciled, Resolution,
    Resolved, Settlement, Store, StoreError, Timestamp,
};
use live::{Entry, Generation, Live, ToolPolicy};

/// How the server runs one tool. Set per tool; unset tools get the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSettings {
    /// The longest one attempt may run. A `write` that times out needs reconciliation.
    pub timeout: Duration,
    /// The most calls of the tool running at once; more are refused with `503 overloaded`.
    pub max_concurrency: usize,
    /// How long a suspension of the tool waits for a person before it expires; `None`: forever.
    pub approval_ttl: Option<Duration>,
    /// Set: every call of the tool waits for a person's approval before it runs at all.
    pub approval: Option<ApprovalGate>,
}

/// A tool that needs a person's approval for each call, by configuration: the call suspends
/// before the tool runs ("Calls of <tool> need approval."), and approving runs it with the
/// input it was called with.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalGate {
    /// The JSON Schema of what the approver answers with.
    pub input_schema: Value,
}

impl Default for ApprovalGate {
    /// The approver may add a note: `{"note"?: string}`.
    fn default() -> Self {
        ApprovalGate {
            input_schema: json!({
                "type": "object",
                "properties": { "note": { "type": "string", "maxLength": 2000 } },
                "additionalProperties": false,
            }),
        }
    }
}

impl ApprovalGate {
    /// An approval asked with `input_schema`, once it is known to compile.
    pub fn with_schema(input_schema: Value) -> Result<ApprovalGate, String> {
        compile_schema(&input_schema)?;
        Ok(ApprovalGate { input_schema })
    }

    /// What the approver of a call of `tool` is asked.
    fn reason(tool: &str) -> String {
        format!("Calls of {tool} need approval.")
    }
}

impl Default for ToolSettings {
    /// 30 s timeout, 256 concurrent calls, suspensions that never expire.
    fn default() -> Self {
        ToolSettings {
            timeout: Duration::from_secs(30),
            max_concurrency: 256,
            approval_ttl: None,
            approval: None,
        }
    }
}

/// Everything the dispatcher is configured with.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Settings of tools not named in `tools`.
    pub defaults: ToolSettings,
    /// Settings by tool name.
    pub tools: HashMap<String, ToolSettings>,
    /// Retries of live failures, before the effect-based adjustment (writes never retry).
    pub retry: RetryPolicy,
    /// The most calls running at once across all tools, counting calls whose client has gone
    /// (they run to their outcome).
    pub max_running_calls: usize,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            defaults: ToolSettings::default(),
            tools: HashMap::new(),
            retry: RetryPolicy::default(),
            max_running_calls: 1024,
        }
    }
}

/// Who asks for a call, and the idempotency key they sent, if any.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The API key name of the caller; `None` when auth is off.
    pub caller: Option<String>,
    /// The client's `Idempotency-Key` header, scoped to the tool and the caller.
    pub idempotency_key: Option<String>,
}

/// Runs calls and resolves suspensions against one tool set and one store. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    live: Arc<Live>,
    store: Arc<dyn Store>,
    running: Running,
    slots: Arc<Slots>,
}

/// Counts the calls running in detached tasks, so a shutdown can wait for them to be recorded
/// instead of cutting a tool off half-way.
#[derive(Clone, Default)]
pub struct Running {
    inner: Arc<RunningInner>,
}

struct RunningInner {
    count: AtomicUsize,
    idle: Notify,
    /// Set at a graceful shutdown: requests held waiting for a change are answered now.
    released: tokio::sync::watch::Sender<bool>,
}

impl Default for RunningInner {
    fn default() -> Self {
        RunningInner {
            count: AtomicUsize::new(0),
            idle: Notify::new(),
            released: tokio::sync::watch::Sender::new(false),
        }
    }
}

/// Held by each running call; the last one out wakes whoever waits for idleness.
struct RunningGuard(Arc<RunningInner>);

impl Running {
    fn enter(&self) -> RunningGuard {
        self.inner.count.fetch_add(1, Ordering::SeqCst);
        RunningGuard(self.inner.clone())
    }

    /// Answers every request held waiting for a change (`?wait=`) at once, with the state as it
    /// is, and any held from now on: a graceful shutdown calls it as it starts, so that held
    /// requests do not keep the server up.
    pub fn release_held(&self) {
        self.inner.released.send_replace(true);
    }

    /// Changes to `true` when held requests must be answered now.
    pub fn released(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.released.subscribe()
    }

    /// How many calls are running now.
    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::SeqCst)
    }

    /// Resolves once no call is running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up between the two is not lost.
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The end of a run of attempts: what is answered, what is recorded, and how many attempts the
/// call has had in all.
struct Ran {
    outcome: CallOutcome,
    /// The attempt the run began at: the store records the outcome only if this run still owns
    /// the call.
    first: u32,
    attempts: u32,
    /// The input, when the caller asked for it back.
    input: Option<Value>,
    /// How long the run took, from its first attempt to its outcome.
    took: Duration,
}

impl Ran {
    /// The outcome as the store records it.
    fn recorded(&self) -> Outcome {
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
        }
    }
}

impl Dispatcher {
    /// A dispatcher over `tools`, recording in `store`, with default settings.
    pub fn new(tools: Arc<ToolSet>, store: Arc<dyn Store>) -> Self {
        Dispatcher::with_config(tools, store, &DispatchConfig::default())
    }

    /// A dispatcher over `tools`, recording in `store`, configured by `config`.
    pub fn with_config(
        tools: Arc<ToolSet>,
        store: Arc<dyn Store>,
        config: &DispatchConfig,
    ) -> Self {
        Dispatcher {
            live: Arc::new(Live::new(Arc::unwrap_or_clone(tools), config)),
            store,
            running: Running::default(),
            slots: Slots::new(config.max_running_calls),
        }
    }

    /// The calls running now; a graceful shutdown waits for [`Running::idle`].
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// The tools dispatched to now (a snapshot: upstream servers may change the set later).
    pub fn tools(&self) -> Arc<Generation> {
        self.live.current()
    }

    /// Replaces the tools proxied from the upstream `source` with `tools`; each that cannot be
    /// registered (a bad name or schema, a name taken) is left out, and its error returned.
    pub fn replace_upstream_tools(
        &self,
        source: &str,
        tools: Vec<Arc<dyn DynTool>>,
    ) -> Vec<RegistryError> {
        self.live.replace_source(source, tools)
    }

    /// The store recorded in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The tool `name` as it stands now, or `UnknownTool`.
    fn entry(&self, name: &str) -> Result<Entry, DispatchError> {
        self.live
            .current()
            .entry(name)
            .ok_or_else(|| DispatchError::UnknownTool(name.to_owned()))
    }

    /// Calls the tool `tool` with `input`.
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
        // Input that does not fit never reaches the tool, nor the store; a `null` that stands
        // for a property left out is taken out first, and what is left is the call's input.
        let entry = self.entry(tool)?;
        let declared = entry.registered.admit(&mut input).map_err(|violations| {
            DispatchError::InvalidInput {
                tool: tool.to_owned(),
                violations,
            }
        })?;
        // The tool's own key names the effect and wins; a client's key is scoped to its caller.
        let key = declared.or_else(|| {
            options
                .idempotency_key
                .as_deref()
                .map(|key| client_key_scope(options.caller.as_deref(), key))
        });
        // A read without an idempotency key has no effect to protect and no intent record that
        // could be left running: it may run inline, and be dropped with its request. Anything
        // else runs detached, to its recorded outcome.
        let inline = key.is_none() && entry.registered.tool.effect() == Effect::Read;
        let caller = options.caller;
        if inline {
            return self.run_call(&entry, input, caller, key).await;
        }
        let this = self.clone();
        detached(&self.running, async move {
            this.run_call(&entry, input, caller, key).await
        })
        .await
    }

    /// Approves the suspension `token` with the approver's `resume_input` and runs the call's
    /// tool again with it. Its result is the call's new outcome. Like [`Dispatcher::call`], it
    /// runs to the end even if the caller stops waiting.
    pub async fn approve(
        &self,
        token: &str,
        resume_input: Value,
        actor: Option<&str>,
    ) -> Result<CallResult, DispatchError> {
        let this = self.clone();
        let token = token.to_owned();
        let actor = actor.map(str::to_owned);
        detached(&self.running, async move {
            this.run_approval(&token, resume_input, actor.as_deref())
                .await
        })
        .await
    }

    /// Rejects the suspension `token`: the call becomes `rejected` and its tool does not run.
    pub async fn reject(
        &self,
        token: &str,
        reason: String,
        actor: Option<&str>,
    ) -> Result<CallRecord, DispatchError> {
        let asked = Timestamp::now();
        let resolved = self
            .store
            .resolve(token, Resolution::Reject { reason }, actor)
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
        actor: Option<&str>,
    ) -> Result<CallResult, DispatchError> {
        let approval = self.pending(token).await?;
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
            .resolve(
                token,
                Resolution::Complete {
                    output: output.clone(),
                },
                actor,
            )
            .await?;
        self.count_resolution(&resolved, asked);
        match resolved {
            Resolved::Completed(call) => Ok(CallResult {
                call_id: call.call_id,
                tool: call.tool,
                outcome: CallOutcome::Completed(output),
                replayed: false,
            }),
            other => Err(unexpected_resolution(other)),
        }
    }

    /// Settles a call that needs reconciliation: its effect happened (`output`, checked against
    /// the tool's output schema when it declares one) or it did not (`error`).
    pub async fn reconcile(
        &self,
        call_id: &str,
        settlement: Settlement,
        actor: Option<&str>,
    ) -> Result<CallRecord, DispatchError> {
        if let Settlement::Output(output) = &settlement {
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
        match self.store.reconcile(call_id, settlement, actor).await? {
            Reconciled::Settled(call) => {
                self.counted(&call.tool, call.status);
                Ok(call)
            }
            Reconciled::NotNeeded(call) => Err(DispatchError::NotReconcilable(Box::new(call))),
            Reconciled::UnknownCall => Err(DispatchError::UnknownCall(call_id.to_owned())),
        }
    }

    /// The first attempt of a new call, whose input [`Dispatcher::call`] admitted, under the
    /// idempotency `key` it derived.
    async fn run_call(
        &self,
        entry: &Entry,
        input: Value,
        caller: Option<String>,
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
        if policy.settings.approval.is_none() && key.is_none() {
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
            idempotency_key: key.clone(),
            attempts: 1,
            created_at,
        };

        // A gated call runs nothing now: it is recorded suspended in one write, so no crash can
        // leave it `running` (and a write needing reconciliation that never happened).
        if policy.settings.approval.is_some() {
            let ran = self
                .attempts(
                    registered,
                    policy,
                    &call_id,
                    key.as_deref(),
                    None,
                    1,
                    input.clone(),
                    false,
                )
                .await;
            let call = NewCall {
                input: input.clone(),
                attempts: ran.attempts,
                ..call
            };
            if let Inserted::Existing(existing) =
                self.store.insert_call(call, Some(ran.recorded())).await?
            {
                return self.repeat(*existing, &input, registered, policy).await;
            }
            policy.metrics.ran(ran.outcome.status(), ran.took);
            return Ok(CallResult {
                call_id,
                tool: dyn_tool.name().to_owned(),
                outcome: ran.outcome,
                replayed: false,
            });
        }

        // A tool with effects, or a keyed call, has its intent committed before it runs: a crash
        // mid-run leaves a `running` record behind instead of an effect nobody knows about, and
        // a second request with the same key finds the first. A read without a key has nothing
        // to lose: its call is recorded once, with its outcome, and the input it keeps.
        let unrecorded = if dyn_tool.effect() != Effect::Read || key.is_some() {
            let call = NewCall {
                input: input.clone(),
                ..call
            };
            match self.store.insert_call(call, None).await {
                Ok(Inserted::New) => None,
                Ok(Inserted::Existing(existing)) => {
                    return self.repeat(*existing, &input, registered, policy).await;
                }
                // The intent may have been committed though its answer was lost. The tool will
                // not run, so once the store answers the call (if it exists) is released as
                // interrupted: no key stays held by a run that never happened.
                Err(err @ StoreError::Unavailable(_)) => {
                    let released = Outcome::Interrupted {
                        reason: "the store could not be reached before the tool ran".into(),
                    };
                    self.record_later(call_id, Some(1), 1, released);
                    return Err(err.into());
                }
                Err(err) => return Err(err.into()),
            }
        } else {
            Some(call)
        };
        let keep = unrecorded.is_some();
        let mut ran = self
            .attempts(
                registered,
                policy,
                &call_id,
                key.as_deref(),
                None,
                1,
                input,
                keep,
            )
            .await;
        match unrecorded {
            None => {
                self.record(&call_id, Some(ran.first), ran.attempts, &ran.recorded())
                    .await?
            }
            Some(call) => {
                let call = NewCall {
                    attempts: ran.attempts,
                    input: ran.input.take().expect("attempts hand back the input kept"),
                    ..call
                };
                // A read has no effect to lose: its record may be committed behind the answer,
                // unless it is a suspension, which a person will look for.
                match &mut ran.outcome {
                    CallOutcome::Suspended { .. } => {
                        self.store.insert_call(call, Some(ran.recorded())).await?;
                    }
                    // The output is lent to the store, which serializes it at once, and taken
                    // back for the answer: no copy of it only to be recorded.
                    CallOutcome::Completed(output) => {
                        let recorded = Outcome::Completed {
                            output: std::mem::take(output),
                        };
                        let stored = self.store.insert_behind(call, &recorded).await;
                        if let Outcome::Completed { output: lent } = recorded {
                            *output = lent;
                        }
                        stored?;
                    }
                    CallOutcome::Failed { .. } => {
                        self.store.insert_behind(call, &ran.recorded()).await?;
                    }
                }
            }
        }
        policy.metrics.ran(ran.outcome.status(), ran.took);
        Ok(CallResult {
            call_id,
            tool: dyn_tool.name().to_owned(),
            outcome: ran.outcome,
            replayed: false,
        })
    }

    /// Answers a request whose idempotency key already has a call.
    async fn repeat(
        &self,
        existing: CallRecord,
        input: &Value,
        registered: &Registered,
        policy: &ToolPolicy,
    ) -> Result<CallResult, DispatchError> {
        tracing::Span::current().record("call_id", existing.call_id.as_str());
        if existing.input != *input {
            return Err(DispatchError::IdempotencyKeyReused {
                call_id: existing.call_id,
            });
        }
        match existing.status {
            CallStatus::Running => Err(DispatchError::CallInProgress {
                call_id: existing.call_id,
            }),
            CallStatus::NeedsReconciliation => {
                Err(DispatchError::NeedsReconciliation(Box::new(existing)))
            }
            CallStatus::Interrupted => {
                // Claim it; of two requests racing to re-run it, one wins and the other is told
                // it is in progress.
                let Some(rerun) = self.store.rerun_interrupted(&existing.call_id).await? else {
                    return Err(DispatchError::CallInProgress {
                        call_id: existing.call_id,
                    });
                };
                // An interrupted re-dispatch of an approval resumes with the approver's input:
                // the person is not asked twice.
                self.run_recorded(registered, policy, rerun.call, rerun.resume_input)
                    .await
            }
            _ => match CallOutcome::from_record(&existing) {
                Some(outcome) => Ok(CallResult {
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

    /// The pending suspension `token`, or why it is not pending.
    async fn pending(&self, token: &str) -> Result<crate::store::Approval, DispatchError> {
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

    async fn run_approval(
        &self,
        token: &str,
        resume_input: Value,
        actor: Option<&str>,
    ) -> Result<CallResult, DispatchError> {
        let approval = match self.pending(token).await {
            // Approved before, and its run released before it reached the tool (its backend
            // was down): approving again runs it, with the input approved the first time.
            Err(DispatchError::AlreadyResolved(call)) if call.status == CallStatus::Interrupted => {
                return self.rerun_approved(*call).await;
            }
            other => other?,
        };
        // The schema compiled when the tool suspended (see `attempts`), so failing now means
        // the stored copy is damaged.
        let validator = compile_schema(&approval.input_schema)
            .map_err(|e| StoreError::Corrupt(format!("stored resume schema: {e}")))?;
        violations(&validator, &resume_input).map_err(DispatchError::InvalidResumeInput)?;
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
        };
        let asked = Timestamp::now();
        let resolved = self.store.resolve(token, resolution, actor).await?;
        self.count_resolution(&resolved, asked);
        let call = match resolved {
            Resolved::Approved(call) => call,
            other => return Err(unexpected_resolution(other)),
        };
        self.run_recorded(registered, policy, call, Some(resume_input))
            .await
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
        let Some(rerun) = self.store.rerun_interrupted(&call.call_id).await? else {
            return Err(DispatchError::CallInProgress {
                call_id: call.call_id,
            });
        };
        tracing::Span::current().record("call_id", rerun.call.call_id.as_str());
        self.run_recorded(registered, policy, rerun.call, rerun.resume_input)
            .await
    }

    /// Runs the recorded call `call` again (approved, or interrupted and claimed), with the
    /// approver's input when it has one, and records what it comes to.
    async fn run_recorded(
        &self,
        registered: &Registered,
        policy: &ToolPolicy,
        call: CallRecord,
        resume: Option<Value>,
    ) -> Result<CallResult, DispatchError> {
        let ran = self
            .attempts(
                registered,
                policy,
                &call.call_id,
                call.idempotency_key.as_deref(),
                resume,
                call.attempts,
                call.input,
                false,
            )
            .await;
        self.record(
            &call.call_id,
            Some(ran.first),
            ran.attempts,
            &ran.recorded(),
        )
        .await?;
        policy.metrics.ran(ran.outcome.status(), ran.took);
        Ok(CallResult {
            call_id: call.call_id,
            tool: call.tool,
            outcome: ran.outcome,
            replayed: false,
        })
    }
}

/// The idempotency key a client's `Idempotency-Key` header stands for: scoped to the caller (the
/// tool scope comes from the store's unique index on (tool, key)), and hashed so that no choice
/// of caller name and key collides with another and the handler, which may hand it to a
/// provider, never sees the key name.
pub fn client_key_scope(caller: Option<&str>, key: &str) -> String {
    use sha2::{Digest, Sha256};
    let caller = caller.unwrap_or("");
    let mut hash = Sha256::new();
    hash.update((caller.len() as u64).to_be_bytes());
    hash.update(caller.as_bytes());
    hash.update(key.as_bytes());
    format!("client:{}", hex::encode(hash.finalize()))
}

impl Dispatcher {
    /// Records the outcome of the run of `call_id` that began at attempt `run`. An outcome the
    /// store cannot take now (the database is unreachable) is retried in the background until
    /// it is recorded, or refused because the run no longer owns the call; the caller is told
    /// the store is unavailable meanwhile.
    async fn record(
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

    /// Retries recording `outcome` until the store takes or refuses it, with a growing wait. A
    /// shutdown waits for it like for a running call; a process that dies first leaves the
    /// call running, and its lease expiring settles it.
    fn record_later(&self, call_id: String, run: Option<u32>, attempts: u32, outcome: Outcome) {
        let store = self.store.clone();
        let guard = self.running.enter();
        tokio::spawn(async move {
            let _guard = guard;
            let mut wait = Duration::from_millis(200);
            loop {
                tokio::time::sleep(wait).await;
                match store.finish_call(&call_id, run, attempts, &outcome).await {
                    Ok(()) => {
                        tracing::info!(call_id, "recorded an outcome once the store was back");
                        return;
                    }
                    Err(StoreError::Unavailable(_)) => {
                        wait = (wait * 2).min(Duration::from_secs(5));
                    }
                    // The intent was never committed, or the call was settled meanwhile.
                    Err(StoreError::NotRunning { .. }) => return,
                    Err(err) => {
                        tracing::warn!(call_id, error = %err, "an outcome retried once the store was back was refused");
                        return;
                    }
                }
            }
        });
    }

    /// Counts a call of `tool` recorded in `status` without a run of its tool.
    fn counted(&self, tool: &str, status: CallStatus) {
        match self.live.current().policy(tool) {
            Some(policy) => policy.metrics.outcome(status),
            // A tool no longer served, whose suspended calls are still resolved.
            None => crate::metrics::call_outcome(tool, status),
        }
    }

    /// Counts what resolving a suspension, asked for at `asked`, recorded: a person's decision,
    /// and how long the suspension waited for it; or its expiry. An approval's outcome is
    /// counted once the tool has run again.
    fn count_resolution(&self, resolved: &Resolved, asked: Timestamp) {
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
            Resolved::Expired(_) | Resolved::AlreadyResolved(_) | Resolved::UnknownToken => {}
        }
    }

    /// A slot of the global and of the tool's concurrency limit, held until the call's run
    /// ends; `Overloaded` when either is full: refusing at once beats an unbounded queue.
    fn take_slot(&self, policy: &ToolPolicy, tool: &str) -> Result<(Slot, Slot), DispatchError> {
        let overloaded = || DispatchError::Overloaded(tool.to_owned());
        let global = self.slots.try_take().ok_or_else(overloaded)?;
        let local = policy.slots.try_take().ok_or_else(overloaded)?;
        Ok((global, local))
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

/// The error for a resolution that did not go the expected way.
fn unexpected_resolution(resolved: Resolved) -> DispatchError {
    match resolved {
        Resolved::AlreadyResolved(call) => DispatchError::AlreadyResolved(Box::new(call)),
        Resolved::Expired(call) => DispatchError::SuspensionExpired(Box::new(call)),
        Resolved::UnknownToken => DispatchError::UnknownToken,
        Resolved::Approved(_) | Resolved::Rejected(_) | Resolved::Completed(_) => {
            DispatchError::Store(StoreError::Corrupt(
                "the store resolved a suspension differently than asked".into(),
            ))
        }
    }
}

/// Runs `work` as its own task, in the current span, so it finishes even if the future awaiting
/// it is dropped; `running` counts it until it does.
async fn detached<F>(running: &Running, work: F) -> Result<CallResult, DispatchError>
where
    F: Future<Output = Result<CallResult, DispatchError>> + Send + 'static,
{
    let guard = running.enter();
    let work = async move {
        let result = work.await;
        drop(guard);
        result
    };
    // Boxed: the call's state machine is large, and a box moves as a pointer into the task.
    tokio::spawn(Box::pin(work.instrument(tracing::Span::current())))
        .await
        .map_err(|err| DispatchError::Internal(err.to_string()))?
}
