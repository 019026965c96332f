//! One run of attempts: a tool's handler called under its timeout and retry policy, its panics
//! caught, and what each finished attempt amounts to (an output checked against the output
//! schema, a suspension with a resume schema that compiles, or a failure with its code).
//!
//! A call its approval policy gates suspends here before the first attempt ([`Start::Ask`]):
//! nothing runs before a person decides.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::live::ToolPolicy;
use super::record::Ran;
use super::{CallOutcome, Dispatcher, Failure, FailureKind, MAX_REASON_CHARS};
use crate::base::CallerToken;
use crate::contract::ctx::ToolCtx;
use crate::contract::erased::DynTool;
use crate::contract::error::{CredentialProblem, ToolError};
use crate::contract::meta::Effect;
use crate::contract::outcome::{Suspension, ToolOutcome};
use crate::contract::registry::{Registered, compile_schema};
use crate::ids;
use crate::store::{CallStatus, Timestamp};
use crate::telemetry::spans;

/// How a run of attempts begins.
pub(super) enum Start {
    /// The tool runs.
    Run,
    /// The tool runs with an approver's input in `ctx.resume()`.
    Resume(Value),
    /// Nothing runs: the call's approval policy asks a person first (the approval comes back
    /// as [`Start::Resume`]). Boxed, as wherever a call's future carries it: the future is
    /// moved whole when it is spawned, and the suspension inline cost every write 1.8 % more
    /// instructions (memcpy) though it is `None` for nearly all of them.
    Ask(Box<Suspension>),
}

impl Start {
    /// A recorded call's run: with the input it was approved with, if any, else as `asked` (the
    /// policy's question for this request, if it has one).
    pub(super) fn of(resume: Option<Value>, asked: Option<Box<Suspension>>) -> Start {
        match (resume, asked) {
            (Some(resume), _) => Start::Resume(resume),
            (None, Some(asked)) => Start::Ask(asked),
            (None, None) => Start::Run,
        }
    }
}

impl Dispatcher {
    /// Runs attempts, starting with attempt number `first`, until one succeeds, suspends, fails
    /// for good, or the retry policy says stop. Each attempt has the tool's timeout. With `keep`,
    /// the input is handed back in [`Ran::input`]. `attesting`: what each attempt's context
    /// signs its call's attestation with, when the server signs.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempts(
        &self,
        registered: &Registered,
        policy: &ToolPolicy,
        call_id: &str,
        key: Option<&str>,
        start: Start,
        first: u32,
        mut input: Value,
        keep: bool,
        attesting: Option<crate::contract::attest::Attesting>,
        caller: Option<&CallerToken>,
    ) -> Ran {
        let tool = registered.tool.as_ref();
        let started = Instant::now();
        let mut attempt = first;
        let (resume, mut asked) = match start {
            Start::Run => (None, None),
            Start::Resume(resume) => (Some(resume), None),
            Start::Ask(asked) => (None, Some(asked)),
        };
        let mut resent = 0;
        let outcome = loop {
            if let Some(asked) = asked.take() {
                // The tool takes what it needs of the caller before the wait (see
                // `DynTool::before_approval`); what it cannot take ends the call now.
                let ctx = ToolCtx::new(call_id).with_caller(caller.cloned());
                let held = tool.before_approval(&ctx).await;
                let result = held.map(|()| ToolOutcome::Suspend(*asked));
                break self.settle(registered, policy, call_id, result);
            }
            let made = attempt - first + 1;
            let mut ctx = ToolCtx::new(call_id)
                .with_attempt(attempt)
                .with_idempotency_key(key)
                .with_attesting(attesting.clone())
                .with_caller(caller.cloned());
            if let Some(resume) = &resume {
                ctx = ctx.with_resume(resume.clone());
            }
            // Keep the input only while another attempt, or the caller, may need it: a retry,
            // or the same attempt sent again when its backend was not reached at all.
            let again =
                policy.retry.allows_another(made) || policy.resend.allows_another(resent + 1);
            let argument = if keep || again {
                input.clone()
            } else {
                std::mem::take(&mut input)
            };
            // A panicking handler fails its call; it does not take the call's record with it.
            let run = AssertUnwindSafe(tool.call_json(&ctx, argument)).catch_unwind();
            let timed = tokio::time::timeout(policy.settings.timeout, run);
            // In a recorded trace, the attempt has its span (boxed: the attempt's future stays
            // as small as without traces).
            let (result, span) = if spans::recording() {
                let span = spans::attempt(attempt);
                (Box::pin(timed.instrument(span.clone())).await, span)
            } else {
                (timed.await, tracing::Span::none())
            };
            match result {
                Ok(Ok(Err(ToolError::Handler { source, .. })))
                    if !source.is_permanent() && policy.retry.allows_another(made) =>
                {
                    let wait = policy.retry.backoff(made);
                    spans::retried(&span, "tool_failed", wait);
                    tracing::warn!(
                        tool = tool.name(),
                        call_id,
                        attempt,
                        error = %source,
                        wait_ms = wait.as_millis() as u64,
                        "attempt failed; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                // A read or idempotent attempt that timed out may run again; a write never does
                // (its policy allows no second attempt).
                Err(_elapsed) if policy.retry.allows_another(made) => {
                    let wait = policy.retry.backoff(made);
                    spans::retried(&span, "tool_timeout", wait);
                    tracing::warn!(
                        tool = tool.name(),
                        call_id,
                        attempt,
                        "attempt timed out; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(_elapsed) => {
                    let failure = Failure::new(
                        FailureKind::TimedOut,
                        format!(
                            "The tool did not finish within {} ms.",
                            policy.settings.timeout.as_millis()
                        ),
                    );
                    // A write that timed out may have had its effect: only a person can tell.
                    let status = if tool.effect() == Effect::Write {
                        CallStatus::NeedsReconciliation
                    } else {
                        CallStatus::Failed
                    };
                    break CallOutcome::Failed { status, failure };
                }
                Ok(Err(panic)) => {
                    // The payload may say anything about the tool's insides: logged, not answered.
                    tracing::error!(
                        tool = tool.name(),
                        call_id,
                        panic = %panic_message(panic.as_ref()),
                        "tool panicked"
                    );
                    break failed(Failure::new(FailureKind::Panicked, "The tool panicked."));
                }
                // The tool's backend could not be reached. A request that never left may be
                // sent again whatever the tool's effect; one that may have arrived only when
                // the effect allows a retry.
                Ok(Ok(Err(ToolError::Unavailable {
                    unavailable,
                    may_have_run,
                    ..
                }))) => {
                    let retry = if may_have_run {
                        policy.retry
                    } else {
                        policy.resend
                    };
                    resent += u32::from(!may_have_run);
                    let made = if may_have_run { made } else { resent };
                    if retry.allows_another(made) {
                        let wait = retry.backoff(made).max(Duration::from_millis(50));
                        tracing::warn!(
                            tool = tool.name(),
                            call_id,
                            attempt,
                            error = %unavailable.message,
                            may_have_run,
                            "the tool's backend cannot be reached; trying again"
                        );
                        tokio::time::sleep(wait).await;
                        if may_have_run {
                            attempt += 1;
                        }
                        continue;
                    }
                    break unavailable_outcome(tool, unavailable, may_have_run);
                }
                Ok(Ok(result)) => break self.settle(registered, policy, call_id, result),
            }
        };
        if let CallOutcome::Failed { failure, .. } = &outcome {
            tracing::warn!(
                tool = tool.name(),
                call_id,
                code = failure.kind.code(),
                "call failed"
            );
        }
        Ran {
            outcome,
            first,
            attempts: attempt,
            input: keep.then_some(input),
            took: started.elapsed(),
        }
    }

    /// What one finished attempt amounts to.
    fn settle(
        &self,
        registered: &Registered,
        policy: &ToolPolicy,
        call_id: &str,
        result: Result<ToolOutcome<Value>, ToolError>,
    ) -> CallOutcome {
        match result {
            Ok(ToolOutcome::Output(output)) => match registered.check_output(&output) {
                Ok(()) => CallOutcome::Completed(output),
                Err(violations) => failed(Failure::with_violations(
                    FailureKind::OutputSchemaViolation,
                    "The tool's output does not match its output schema.",
                    &violations,
                )),
            },
            // The resume schema is checked now, while the tool is at fault, rather than when a
            // person tries to approve.
            Ok(ToolOutcome::Suspend(suspension)) => {
                match compile_schema(&suspension.input_schema) {
                    Ok(_) => CallOutcome::Suspended {
                        token: ids::new_suspension_token(),
                        reason: bounded_reason(suspension.reason),
                        input_schema: suspension.input_schema,
                        expires_at: policy.settings.approval_ttl.map(|ttl| {
                            let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
                            Timestamp(Timestamp::now().0.saturating_add(ttl_ms))
                        }),
                    },
                    Err(message) => {
                        tracing::error!(
                            tool = registered.tool.name(),
                            call_id,
                            error = %message,
                            "the tool suspended with an invalid resume schema"
                        );
                        failed(Failure::new(
                            FailureKind::InvalidSuspension,
                            "The tool suspended with a resume schema that is not a valid JSON \
                             Schema.",
                        ))
                    }
                }
            }
            Err(ToolError::InvalidInput { violations, .. }) => failed(Failure::with_violations(
                FailureKind::InputRejected,
                "The input does not fit the tool's input type.",
                &violations,
            )),
            Err(ToolError::Handler { source, .. }) => {
                failed(Failure::new(FailureKind::ToolFailed, source.to_string()))
            }
            Err(ToolError::Unavailable {
                unavailable,
                may_have_run,
                ..
            }) => unavailable_outcome(registered.tool.as_ref(), unavailable, may_have_run),
            Err(ToolError::Credentials {
                problem, message, ..
            }) => {
                let kind = match problem {
                    CredentialProblem::Refused => FailureKind::ExchangeRefused,
                    CredentialProblem::Expired => FailureKind::CredentialsExpired,
                    CredentialProblem::Missing => FailureKind::CredentialsMissing,
                };
                failed(Failure::new(kind, message))
            }
            Err(ToolError::OutputSerialization { source, .. }) => {
                tracing::error!(
                    tool = registered.tool.name(),
                    call_id,
                    error = %source,
                    "unserializable output"
                );
                failed(Failure::new(
                    FailureKind::OutputUnserializable,
                    "The tool's output could not be serialized to JSON.",
                ))
            }
        }
    }
}

/// What a call ends as when its tool's backend could not be reached. A write that may have
/// reached it needs a person; any other call is released as interrupted (nothing happened, or
/// nothing that repeating it can harm), so the same request may run it again.
fn unavailable_outcome(
    tool: &dyn DynTool,
    unavailable: crate::contract::error::Unavailable,
    may_have_run: bool,
) -> CallOutcome {
    let (status, message) = if may_have_run && tool.effect() == Effect::Write {
        (
            CallStatus::NeedsReconciliation,
            format!(
                "{} The request may have reached it: whether the write happened must be settled \
                 by a person.",
                unavailable.message
            ),
        )
    } else {
        (CallStatus::Interrupted, unavailable.message)
    };
    let mut failure = Failure::new(FailureKind::Unavailable, message);
    failure.error.details =
        Some(json!({ "retry_after_s": unavailable.retry_after.as_secs().max(1) }));
    CallOutcome::Failed { status, failure }
}

/// A suspension's reason, cut at [`MAX_REASON_CHARS`]: a tool may quote a caller's input in it,
/// and every page of the approvals queue carries it.
fn bounded_reason(reason: String) -> String {
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &reason[..cut]),
        None => reason,
    }
}

fn failed(failure: Failure) -> CallOutcome {
    CallOutcome::Failed {
        status: CallStatus::Failed,
        failure,
    }
}

/// The message a panic was raised with, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
