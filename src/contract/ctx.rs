//! The per-attempt context the server builds and hands to a handler.
//!
//! Fields are private behind accessors so the context can grow (deadlines, the caller's
//! identity) without breaking tools that construct one in their own tests.

use std::sync::Arc;

use serde_json::Value;

use super::attest::{AttestError, Attesting};
use crate::base::CallerToken;

/// What a handler knows about the attempt it is running.
#[derive(Debug, Clone)]
pub struct ToolCtx {
    call_id: Arc<str>,
    attempt: u32,
    idempotency_key: Option<Arc<str>>,
    resume: Option<Arc<Value>>,
    attesting: Option<Attesting>,
    /// The caller's access token, for an upstream that acts as the caller: the crate's alone
    /// (a tool author's handler never reads it; its `Debug` is redacted).
    caller: Option<CallerToken>,
}

impl Default for ToolCtx {
    /// A context for a first attempt with an empty call id: what a tool's unit test needs.
    fn default() -> Self {
        ToolCtx::new("")
    }
}

impl ToolCtx {
    /// A context for the first attempt of the call `call_id`.
    pub fn new(call_id: impl Into<Arc<str>>) -> Self {
        ToolCtx {
            call_id: call_id.into(),
            attempt: 1,
            idempotency_key: None,
            resume: None,
            attesting: None,
            caller: None,
        }
    }

    /// Sets the attempt number (1 for the first run of a call).
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Sets the idempotency key the attempt runs under.
    pub fn with_idempotency_key(mut self, key: Option<impl Into<Arc<str>>>) -> Self {
        self.idempotency_key = key.map(Into::into);
        self
    }

    /// Sets the approver's input, as when the call is re-dispatched after an approval.
    pub fn with_resume(mut self, resume: Value) -> Self {
        self.resume = Some(Arc::new(resume));
        self
    }

    /// Lets the attempt sign its call's attestation (the server sets it when it has signing
    /// keys).
    pub fn with_attesting(mut self, attesting: Option<Attesting>) -> Self {
        self.attesting = attesting;
        self
    }

    /// The call's attestation for `audience` (the service the tool calls next, which checks
    /// it is the audience named), over `arguments` (what the tool sends it, hashed into
    /// `args_sha256`): a compact JWS signed by toolgate's key, short-lived, naming the call,
    /// the tool, the caller and who approved it (see `docs/attestations.md`). Signed when asked,
    /// not before: a tool that never asks costs nothing. `Ok(None)` when the server signs
    /// nothing (a context built by hand, in a tool's own tests).
    pub async fn attestation(
        &self,
        audience: &str,
        arguments: &Value,
    ) -> Result<Option<String>, AttestError> {
        match &self.attesting {
            Some(attesting) => attesting.sign(audience, arguments).await.map(Some),
            None => Ok(None),
        }
    }

    /// What the call's attestation says of it (all but its audience and arguments), when the
    /// server signs attestations.
    pub fn attested(&self) -> Option<&super::attest::CallFacts> {
        self.attesting.as_ref().map(Attesting::facts)
    }

    /// The id of the call this attempt belongs to.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// Which attempt of the call this is, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The idempotency key of the effect, to pass on to a provider that accepts one.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The approver's input, already checked against the suspension's schema, when this attempt
    /// follows an approval; `None` on a first attempt.
    pub fn resume(&self) -> Option<&Value> {
        self.resume.as_deref()
    }

    /// Sets the caller's access token (kept by the lifecycle for an upstream that acts as the
    /// caller).
    pub(crate) fn with_caller(mut self, caller: Option<CallerToken>) -> Self {
        self.caller = caller;
        self
    }

    /// The caller's access token, when the caller was admitted with one and this attempt runs
    /// on its request (not on an approver's).
    pub(crate) fn caller(&self) -> Option<&CallerToken> {
        self.caller.as_ref()
    }
}
