//! Failures at the two layers of the contract, told apart by variant, never by message.
//!
//! A [`HandlerError`] is the tool's own failure. A [`ToolError`] is what the erased layer reports:
//! the input did not fit (the handler never ran), the handler failed, or its output could not be
//! turned into JSON.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// A failure reported by a tool's handler. Its `Display` is the message.
pub struct HandlerError {
    message: String,
    permanent: bool,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl HandlerError {
    /// A failure described by a message alone.
    pub fn message(message: impl Into<String>) -> Self {
        HandlerError {
            message: message.into(),
            permanent: false,
            source: None,
        }
    }

    /// A failure caused by `source`; the message is the source's `Display`.
    pub fn new<E>(source: E) -> Self
    where
        E: StdError + Send + Sync + 'static,
    {
        HandlerError {
            message: source.to_string(),
            permanent: false,
            source: Some(Box::new(source)),
        }
    }

    /// Marks the failure permanent: trying again cannot help (a declined card, a bad account
    /// number), so the server never retries it.
    pub fn permanent(mut self) -> Self {
        self.permanent = true;
        self
    }

    /// Whether the failure is permanent.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The message shown to the caller.
    pub fn as_str(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("HandlerError");
        d.field("message", &self.message);
        d.field("permanent", &self.permanent);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl StdError for HandlerError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

/// One way an input failed to fit a schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct InputViolation {
    /// JSON Pointer to the offending part of the input (`""` is the whole input).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// A failure of the erased dispatch layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The input did not fit the tool's input type; the handler did not run.
    #[error("input does not fit tool `{tool}`")]
    InvalidInput {
        /// The tool called.
        tool: String,
        /// Where and why the input did not fit.
        violations: Vec<InputViolation>,
    },
    /// The handler ran and failed.
    #[error("tool `{tool}` failed: {source}")]
    Handler {
        /// The tool called.
        tool: String,
        /// The handler's error.
        source: HandlerError,
    },
    /// The tool's backend (an upstream server) could not be reached.
    #[error("tool `{tool}` cannot reach its backend: {}", unavailable.message)]
    Unavailable {
        /// The tool called.
        tool: String,
        /// What could not be reached, and when to try again.
        unavailable: Unavailable,
        /// Whether the request may have reached the backend before the link failed (`false`:
        /// it provably never left, so nothing ran).
        may_have_run: bool,
    },
    /// The tool acts as its caller at its backend (an upstream with `[upstreams.auth]`) and
    /// cannot for this call: nothing was sent.
    #[error("tool `{tool}` cannot act as its caller: {message}")]
    Credentials {
        /// The tool called.
        tool: String,
        /// What is wrong with the caller's credentials.
        problem: CredentialProblem,
        /// Why, for the caller (never a token).
        message: String,
    },
    /// The handler's output could not be serialized to JSON.
    #[error("output of tool `{tool}` could not be serialized: {source}")]
    OutputSerialization {
        /// The tool called.
        tool: String,
        /// The serializer's error.
        source: serde_json::Error,
    },
}

/// Why a tool that acts as its caller could not, told apart by variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialProblem {
    /// The caller has no token to act with (an API key, a signed-in person, auth off), or one
    /// from another issuer than the backend's.
    Missing,
    /// The issuer refused to exchange the caller's token.
    Refused,
    /// The caller's credentials expired before the call could run (an approval later than
    /// they last), and nothing that lasts was kept.
    Expired,
}

/// Why a tool cannot run now: the server behind it does not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// What is down, for the caller (no secrets, no internal addresses).
    pub message: String,
    /// When it is worth trying again.
    pub retry_after: Duration,
}
