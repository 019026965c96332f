//! The call lifecycle, in one place: every way a tool runs goes through here.
//!
//! A call: find the tool, check the input against its schema (the handler never sees input that
//! does not fit), derive the idempotency key, record the intent when the tool has effects, run
//! one attempt, and record the outcome before anyone is told of it. An approval: check the
//! approver's input against the suspension's schema, resolve the suspension (conditionally, so one
//! approval wins), then run the same attempt path with `ctx.resume()` set. A rejection resolves
//! the suspension without running anything.
//!
//! HTTP is not known here: the server translates requests into these calls and the results back.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use serde_json::Value;
use tracing::Instrument;

use crate::contract::ctx::ToolCtx;
use crate::contract::error::{InputViolation, ToolError};
use crate::contract::meta::Effect;
use crate::contract::outcome::ToolOutcome;
use crate::contract::registry::{Registered, ToolSet, compile_schema, violations};
use crate::ids;
use crate::store::{
    ApprovalState, CallError, CallRecord, NewCall, Outcome, Resolution, Resolved, Store,
    StoreError, Timestamp,
};

/// Runs calls and resolves suspensions against one tool set and one store. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    tools: Arc<ToolSet>,
    store: Arc<dyn Store>,
}

/// How one attempt of a call ended, as reported to whoever asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The call.
    pub call_id: String,
    /// Its tool.
    pub tool: String,
    /// What the attempt produced.
    pub outcome: CallOutcome,
}

/// What an attempt produced.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// Finished with this output.
    Completed(Value),
    /// Waiting for a person.
    Suspended {
        /// The single-use token to approve or reject with.
        token: String,
        /// What the approver is asked.
        reason: String,
        /// What the approver must answer with.
        input_schema: Value,
    },
    /// Finished with a failure, recorded on the call.
    Failed(Failure),
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The handler returned an error; its message.
    ToolFailed(String),
    /// The input passed the tool's schema but not its input type: the tool's schema and type
    /// disagree. The handler did not run.
    InputRejected(Vec<InputViolation>),
    /// The handler's output could not be turned into JSON.
    OutputUnserializable(String),
    /// The handler suspended with a resume schema that is not a valid JSON Schema.
    InvalidSuspension(String),
    /// The handler panicked; the panic's message.
    Panicked(String),
}

impl Failure {
    /// The stable code recorded and answered for this failure.
    pub fn code(&self) -> &'static str {
        match self {
            Failure::ToolFailed(_) => "tool_failed",
            Failure::InputRejected(_) => "invalid_input",
            Failure::OutputUnserializable(_) => "output_serialization_failed",
            Failure::InvalidSuspension(_) => "invalid_suspension",
            Failure::Panicked(_) => "tool_panicked",
        }
    }

    /// The failure as recorded on the call.
    pub fn to_call_error(&self) -> CallError {
        match self {
            Failure::ToolFailed(message) => CallError::new(self.code(), message.clone()),
            Failure::InputRejected(violations) => CallError {
                code: self.code().into(),
                message: "The input does not fit the tool's input type.".into(),
                details: Some(serde_json::json!({ "errors": violations })),
            },
            Failure::OutputUnserializable(message) => CallError::new(
                self.code(),
                format!("The tool's output could not be serialized: {message}"),
            ),
            Failure::InvalidSuspension(message) => CallError::new(
                self.code(),
                format!("The tool suspended with an invalid resume schema: {message}"),
            ),
            Failure::Panicked(message) => {
                CallError::new(self.code(), format!("The tool panicked: {message}"))
            }
        }
    }
}

/// Why a request to the lifecycle was refused before anything ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// No tool has this name.
    #[error("no tool is named `{0}`")]
    UnknownTool(String),
    /// The input does not fit the tool's input schema; nothing ran or was recorded.
    #[error("the input does not fit tool `{tool}`")]
    InvalidInput {
        /// The tool.
        tool: String,
        /// Where and why.
        violations: Vec<InputViolation>,
    },
    /// No suspension ever had this token.
    #[error("no suspension has this token")]
    UnknownToken,
    /// The suspension was already approved or rejected.
    #[error("the suspension was already resolved")]
    AlreadyResolved(Box<CallRecord>),
    /// The approver's input does not fit the suspension's schema; it stays pending.
    #[error("the resume input does not fit the suspension's schema")]
    InvalidResumeInput(Vec<InputViolation>),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The lifecycle task itself failed (a bug, not a tool's failure).
    #[error("the call's task failed: {0}")]
    Internal(String),
}

impl Dispatcher {
    /// A dispatcher over `tools`, recording in `store`.
    pub fn new(tools: Arc<ToolSet>, store: Arc<dyn Store>) -> Self {
        Dispatcher { tools, store }
    }

    /// The tools dispatched to.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// The store recorded in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Calls the tool `tool` with `input`: the first attempt of a new call.
    ///
    /// The call runs to its recorded outcome even if the caller stops waiting (an HTTP client
    /// that disconnects, say): a tool is never abandoned half-way with its intent recorded and
    /// its outcome lost.
    pub async fn call(&self, tool: &str, input: Value) -> Result<CallResult, DispatchError> {
        let this = self.clone();
        let tool = tool.to_owned();
        detached(async move { this.run_call(&tool, input).await }).await
    }

    /// Approves the suspension `token` with the approver's `resume_input` and runs the call's
    /// tool again with it. Its result is the call's new outcome. Like [`Dispatcher::call`], it
    /// runs to the end even if the caller stops waiting.
    pub async fn approve(
        &self,
        token: &str,
        resume_input: Value,
    ) -> Result<CallResult, DispatchError> {
        let this = self.clone();
        let token = token.to_owned();
        detached(async move { this.run_approval(&token, resume_input).await }).await
    }

    async fn run_call(&self, tool: &str, input: Value) -> Result<CallResult, DispatchError> {
        let registered = self
            .tools
            .lookup(tool)
            .ok_or_else(|| DispatchError::UnknownTool(tool.to_owned()))?;
        registered
            .check_input(&input)
            .map_err(|violations| DispatchError::InvalidInput {
                tool: tool.to_owned(),
                violations,
            })?;
        let dyn_tool = registered.tool.as_ref();
        let key = dyn_tool.idempotency_key(&input);
        let created_at = Timestamp::now();
        let call_id = ids::new_call_id(created_at.0);
        tracing::Span::current().record("call_id", call_id.as_str());
        let call = NewCall {
            call_id: call_id.clone(),
            tool: dyn_tool.name().to_owned(),
            input: input.clone(),
            idempotency_key: key.clone(),
            created_at,
        };

        // A tool with effects has its intent committed before it runs, so a crash mid-run
        // leaves a `running` record behind instead of an effect nobody knows about. A read
        // has nothing to lose: its call is recorded once, with its outcome.
        let unrecorded = if dyn_tool.effect() != Effect::Read || key.is_some() {
            self.store.insert_call(call, None).await?;
            None
        } else {
            Some(call)
        };
        let ctx = ToolCtx::new(call_id.as_str()).with_idempotency_key(key);
        let (outcome, recorded) = self.attempt(registered, &ctx, input).await;
        match unrecorded {
            None => self.store.finish_call(&call_id, recorded).await?,
            Some(call) => self.store.insert_call(call, Some(recorded)).await?,
        }
        Ok(CallResult {
            call_id,
            tool: dyn_tool.name().to_owned(),
            outcome,
        })
    }

    async fn run_approval(
        &self,
        token: &str,
        resume_input: Value,
    ) -> Result<CallResult, DispatchError> {
        let approval = match self
            .store
            .approval(token)
            .await?
            .ok_or(DispatchError::UnknownToken)?
        {
            ApprovalState::Pending(approval) => approval,
            ApprovalState::Resolved(call) => {
                return Err(DispatchError::AlreadyResolved(Box::new(call)));
            }
        };
        tracing::Span::current().record("call_id", approval.call_id.as_str());
        // The schema compiled when the tool suspended (see `attempt`), so failing now means the
        // stored copy is damaged.
        let validator = compile_schema(&approval.input_schema)
            .map_err(|e| StoreError::Corrupt(format!("stored resume schema: {e}")))?;
        violations(&validator, &resume_input).map_err(DispatchError::InvalidResumeInput)?;
        let registered = self
            .tools
            .lookup(&approval.tool)
            .ok_or_else(|| DispatchError::UnknownTool(approval.tool.clone()))?;

        let resolution = Resolution::Approve {
            resume_input: resume_input.clone(),
        };
        let call = match self.store.resolve(token, resolution).await? {
            Resolved::Approved(call) => call,
            Resolved::AlreadyResolved(call) => {
                return Err(DispatchError::AlreadyResolved(Box::new(call)));
            }
            Resolved::UnknownToken => return Err(DispatchError::UnknownToken),
            Resolved::Rejected(_) => {
                return Err(
                    StoreError::Corrupt("an approval was recorded as a rejection".into()).into(),
                );
            }
        };
        let key = registered.tool.idempotency_key(&call.input);
        let ctx = ToolCtx::new(call.call_id.as_str())
            .with_attempt(call.attempts)
            .with_idempotency_key(key)
            .with_resume(resume_input);
        let (outcome, recorded) = self.attempt(registered, &ctx, call.input).await;
        self.store.finish_call(&call.call_id, recorded).await?;
        Ok(CallResult {
            call_id: call.call_id,
            tool: call.tool,
            outcome,
        })
    }

    /// Rejects the suspension `token`: the call becomes `rejected` and its tool does not run.
    pub async fn reject(&self, token: &str, reason: String) -> Result<CallRecord, DispatchError> {
        match self
            .store
            .resolve(token, Resolution::Reject { reason })
            .await?
        {
            Resolved::Rejected(call) => {
                tracing::Span::current().record("call_id", call.call_id.as_str());
                Ok(call)
            }
            Resolved::AlreadyResolved(call) => Err(DispatchError::AlreadyResolved(Box::new(call))),
            Resolved::UnknownToken => Err(DispatchError::UnknownToken),
            Resolved::Approved(_) => {
                Err(StoreError::Corrupt("a rejection was recorded as an approval".into()).into())
            }
        }
    }

    /// Runs one attempt and turns its result into what is answered and what is recorded.
    async fn attempt(
        &self,
        registered: &Registered,
        ctx: &ToolCtx,
        input: Value,
    ) -> (CallOutcome, Outcome) {
        let tool = registered.tool.as_ref();
        // A panicking handler fails its call; it does not take the call's record down with it.
        let result = AssertUnwindSafe(tool.call_json(ctx, input))
            .catch_unwind()
            .await;
        let outcome = match result {
            Err(panic) => CallOutcome::Failed(Failure::Panicked(panic_message(panic.as_ref()))),
            Ok(Ok(ToolOutcome::Output(output))) => CallOutcome::Completed(output),
            // The resume schema is checked now, while the tool is at fault, rather than when a
            // person tries to approve.
            Ok(Ok(ToolOutcome::Suspend(suspension))) => {
                match compile_schema(&suspension.input_schema) {
                    Ok(_) => CallOutcome::Suspended {
                        token: ids::new_suspension_token(),
                        reason: suspension.reason,
                        input_schema: suspension.input_schema,
                    },
                    Err(message) => CallOutcome::Failed(Failure::InvalidSuspension(message)),
                }
            }
            Ok(Err(ToolError::InvalidInput { violations, .. })) => {
                CallOutcome::Failed(Failure::InputRejected(violations))
            }
            Ok(Err(ToolError::Handler { source, .. })) => {
                CallOutcome::Failed(Failure::ToolFailed(source.to_string()))
            }
            Ok(Err(ToolError::OutputSerialization { source, .. })) => {
                CallOutcome::Failed(Failure::OutputUnserializable(source.to_string()))
            }
        };
        if let CallOutcome::Failed(failure) = &outcome {
            tracing::warn!(
                tool = tool.name(),
                code = failure.code(),
                "tool call failed"
            );
        }
        let recorded = match &outcome {
            CallOutcome::Completed(output) => Outcome::Completed {
                output: output.clone(),
            },
            CallOutcome::Suspended {
                token,
                reason,
                input_schema,
            } => Outcome::Suspended {
                token: token.clone(),
                reason: reason.clone(),
                input_schema: input_schema.clone(),
            },
            CallOutcome::Failed(failure) => Outcome::Failed {
                error: failure.to_call_error(),
            },
        };
        (outcome, recorded)
    }
}

/// Runs `work` as its own task, in the current span, so it finishes even if the future awaiting
/// it is dropped.
async fn detached<F>(work: F) -> Result<CallResult, DispatchError>
where
    F: Future<Output = Result<CallResult, DispatchError>> + Send + 'static,
{
    tokio::spawn(work.instrument(tracing::Span::current()))
        .await
        .map_err(|err| DispatchError::Internal(err.to_string()))?
}

/// The message a panic was raised with, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
