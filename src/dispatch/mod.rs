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
//! A tool whose configuration asks for approval (`require_approval`, or an approval policy
//! whose `when` condition holds for the call, see [`condition`]) suspends before its first
//! attempt, for a person to approve the call as asked (see [`ApprovalGate`]); approving runs it
//! with the approver's input in `ctx.resume()`, like any approval.
//!
//! The tools it runs are the current generation of a live set ([`live`]): upstream MCP servers
//! add and remove theirs while the server runs.
//!
//! HTTP is not known here, and neither is any door: each translates its protocol into these
//! calls, passing who asks ([`who::Principal`]), and the answers back. The rules every door
//! shares are kept here, once: who sees which call (`who`, applied by `visible` to every read:
//! one call, a listing, a wait, the event stream of `events`), how deep JSON may nest and what an
//! idempotency key may be (`admit`), what a person may write (`resolve`), and how a request is
//! held until a call changes (`wait`).
//!
//! A new call is admitted by its principal's quotas first (`quota`: calls a minute, calls
//! running, requests held), whichever door it came through.
//!
//! By step: `admit` (a new call, its recording plan chosen up front), `attempt` (the run of
//! attempts, and what each amounts to), `record` (outcomes written, and counted), `resolve` (a
//! person's decisions), `edit` (an approver's edit of a call's input), `unsettled` (a claim whose commit went unanswered), `wait`, `running`
//! (the graceful stop's accounting), `settings`, `outcome` (the answers and refusals), and
//! `escalate` (approvals left undecided past their policy's time), `standing` (standing
//! approvals: granted with an approval, spent by the calls a policy would suspend), and
//! `pinned` (a tool held because its definition changed upstream: refused, and its approvals
//! failing closed).

mod admit;
mod attempt;
mod attest;
pub mod condition;
pub mod config;
mod edit;
mod escalate;
mod events;
mod keys;
pub mod live;
mod outcome;
mod pinned;
pub mod quota;
mod record;
mod resolve;
mod running;
mod settings;
mod standing;
mod unsettled;
mod visible;
pub mod wait;
pub mod who;

pub use condition::Expression;
pub use edit::ApproveExtras;
pub(crate) use escalate::escalated;
pub use events::{EventFilter, Resume};
pub use keys::{check_idempotency_key, client_key_scope};
pub use outcome::{CallOutcome, CallResult, DispatchError, ErrorKind, Failure, FailureKind};
pub use resolve::{
    ApprovalProgress, ApprovalRule, Approved, MAX_REASON_CHARS, ReasonRefused, Withheld, one_click,
    rejection_reason, settlement_error,
};
pub use running::Running;
pub use settings::{ApprovalGate, CallOptions, DispatchConfig, ToolSettings};
pub use standing::{StandingAsk, StandingLimits};
pub use visible::SeenCall;

use std::sync::Arc;

use tracing::Instrument;

use crate::contract::erased::DynTool;
use crate::contract::registry::{RegistryError, ToolSet};
use crate::feed::Feed;
use crate::slots::{Slot, Slots};
use crate::store::Store;
use live::{Entry, Generation, Live, ToolPolicy};

/// The default deepest JSON nesting accepted in inputs, outputs and approvers' answers.
pub const DEFAULT_MAX_JSON_DEPTH: usize = 64;

/// Runs calls and resolves suspensions against one tool set and one store. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    live: Arc<Live>,
    store: Arc<dyn Store>,
    running: Running,
    slots: Arc<Slots>,
    /// Follows the store's change feed for the requests held until a call changes.
    feed: Feed,
    /// Every principal's quotas, and what each uses now.
    quotas: quota::Quotas,
    /// The calls whose claim (an approval, a re-run) may have committed unanswered.
    unsettled: unsettled::Unsettled,
    max_json_depth: usize,
    /// Signs the calls' attestations, when the server has signing keys.
    signer: Option<Arc<crate::signing::Signer>>,
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
        let running = Running::default();
        // On a store shared by replicas, the buckets are the store's, so that together the
        // replicas admit what one bucket allows.
        let shared = store.shares_quotas().then(|| store.clone());
        Dispatcher {
            quotas: quota::Quotas::new(config.quotas.clone(), shared),
            live: Arc::new(Live::new(Arc::unwrap_or_clone(tools), config)),
            feed: Feed::new(store.clone(), running.released()),
            store,
            running,
            slots: Slots::new(config.max_running_calls),
            unsettled: unsettled::Unsettled::default(),
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
            signer: None,
        }
    }

    /// The deepest JSON nesting accepted from now on (default [`DEFAULT_MAX_JSON_DEPTH`]);
    /// deeper is refused with [`DispatchError::TooDeep`].
    pub fn with_max_json_depth(mut self, depth: usize) -> Self {
        self.max_json_depth = depth;
        self
    }

    /// The deepest JSON nesting accepted.
    pub fn max_json_depth(&self) -> usize {
        self.max_json_depth
    }

    /// What follows the store's change feed in this process: requests held until a call
    /// changes or a suspension arrives.
    pub fn feed(&self) -> &Feed {
        &self.feed
    }

    /// Every principal's quotas: a door takes a [`quota::HeldPermit`] from it before it holds
    /// a request.
    pub fn quotas(&self) -> &quota::Quotas {
        &self.quotas
    }

    /// The calls running now; a graceful shutdown waits for [`Running::idle`].
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// The tools dispatched to now (a snapshot: upstream servers may change the set later).
    pub fn tools(&self) -> Arc<Generation> {
        self.live.current()
    }

    /// Whether any tool is configured with `required_scopes` (known at start: they are
    /// configuration, an upstream tool's in its policy).
    pub fn requires_scopes(&self) -> bool {
        self.live.requires_scopes()
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

    /// A slot of the global and of the tool's concurrency limit, held until the call's run
    /// ends; `Overloaded` when either is full: refusing at once beats an unbounded queue.
    fn take_slot(&self, policy: &ToolPolicy, tool: &str) -> Result<(Slot, Slot), DispatchError> {
        let overloaded = || DispatchError::Overloaded(tool.to_owned());
        let global = self.slots.try_take().ok_or_else(overloaded)?;
        let local = policy.slots.try_take().ok_or_else(overloaded)?;
        Ok((global, local))
    }
}

/// Runs `work` as its own task, in the current span, so it finishes even if the future awaiting
/// it is dropped; `running` counts it until it does.
async fn detached<F, T>(running: &Running, work: F) -> Result<T, DispatchError>
where
    F: Future<Output = Result<T, DispatchError>> + Send + 'static,
    T: Send + 'static,
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
