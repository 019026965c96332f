//! How the dispatcher is configured: each tool's settings (timeout, concurrency, approval TTL,
//! an approval gate), the defaults, the retry policy, and who asks for a call.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::quota::{QuotaConfig, QuotaSettings};
use super::who::Principal;
use crate::contract::registry::compile_schema;
use crate::contract::retry::RetryPolicy;

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
    /// The tool's own quota, for each principal calling it (`max_held` is never a tool's).
    pub quotas: QuotaConfig,
    /// The scopes a token must carry (each, or a broader one of its hierarchy) to call the
    /// tool; an API key is not asked for any.
    pub required_scopes: Vec<String>,
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
    pub(super) fn reason(tool: &str) -> String {
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
            quotas: QuotaConfig::default(),
            required_scopes: Vec::new(),
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
    /// Every principal's quotas (`[quotas]`, and each key's own).
    pub quotas: QuotaSettings,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            defaults: ToolSettings::default(),
            tools: HashMap::new(),
            retry: RetryPolicy::default(),
            max_running_calls: 1024,
            quotas: QuotaSettings::default(),
        }
    }
}

/// Who asks for a call, and the idempotency key they sent, if any.
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// Who calls: its name is recorded as the call's caller (`None` when auth is off).
    pub principal: Principal,
    /// The client's `Idempotency-Key` header, scoped to the tool and the caller.
    pub idempotency_key: Option<String>,
}

impl Default for CallOptions {
    /// An anonymous call without a key.
    fn default() -> Self {
        CallOptions {
            principal: Principal::anonymous(),
            idempotency_key: None,
        }
    }
}
