//! `[tool_defaults]`, `[tools.<name>]` and `[retry]`: the dispatcher's config sections, and
//! their translation into a [`DispatchConfig`].
//!
//! A tool's settings are layered: what its `[tools.<name>]` table sets, the rest from
//! `[tool_defaults]`, whose own defaults are [`ToolSettings::default`]'s, so a server built in
//! code and one built from a file behave alike. An upstream tool's policies
//! (`[upstreams.policies.<tool>]`) become the same [`ToolOverride`] under its served name.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::quota::{QuotaConfig, QuotaSettings};
use super::{ApprovalGate, DispatchConfig, ToolSettings};
use crate::contract::retry::RetryPolicy;

/// `[retry]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// The most attempts in all, the first included.
    pub max_attempts: u32,
    /// The wait before the first retry, in milliseconds; it doubles for each later one.
    pub initial_backoff_ms: u64,
    /// The longest wait between attempts, in milliseconds.
    pub max_backoff_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        let policy = RetryPolicy::default();
        RetryConfig {
            max_attempts: policy.max_attempts,
            initial_backoff_ms: policy.initial_backoff.as_millis() as u64,
            max_backoff_ms: policy.max_backoff.as_millis() as u64,
        }
    }
}

impl RetryConfig {
    /// The retry policy.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial_backoff: Duration::from_millis(self.initial_backoff_ms),
            max_backoff: Duration::from_millis(self.max_backoff_ms),
        }
    }
}

/// `[tool_defaults]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolConfig {
    /// The longest one attempt may run, in milliseconds.
    pub timeout_ms: u64,
    /// The most calls of one tool running at once.
    pub max_concurrency: usize,
    /// How long a suspension waits for a person before it expires, in seconds; unset: forever.
    pub approval_ttl_s: Option<u64>,
}

impl Default for ToolConfig {
    fn default() -> Self {
        let settings = ToolSettings::default();
        ToolConfig {
            timeout_ms: settings.timeout.as_millis() as u64,
            max_concurrency: settings.max_concurrency,
            approval_ttl_s: settings.approval_ttl.map(|ttl| ttl.as_secs()),
        }
    }
}

impl ToolConfig {
    /// The settings of a tool: what `tool` sets, the rest from these defaults. An approval
    /// schema that does not compile was refused when the file was read (see
    /// [`check_approval_schema`]).
    pub fn settings(&self, tool: &ToolOverride) -> ToolSettings {
        ToolSettings {
            timeout: Duration::from_millis(tool.timeout_ms.unwrap_or(self.timeout_ms)),
            max_concurrency: tool.max_concurrency.unwrap_or(self.max_concurrency),
            approval_ttl: tool
                .approval_ttl_s
                .or(self.approval_ttl_s)
                .map(Duration::from_secs),
            approval: (tool.require_approval == Some(true)).then(|| {
                tool.approval_schema
                    .clone()
                    .and_then(|schema| ApprovalGate::with_schema(schema).ok())
                    .unwrap_or_default()
            }),
            quotas: tool.quotas.unwrap_or_default(),
            required_scopes: tool.required_scopes.clone().unwrap_or_default(),
        }
    }
}

/// `[tools.<name>]`: any of the `[tool_defaults]` keys, for one tool.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// See [`ToolConfig::timeout_ms`].
    pub timeout_ms: Option<u64>,
    /// See [`ToolConfig::max_concurrency`].
    pub max_concurrency: Option<usize>,
    /// See [`ToolConfig::approval_ttl_s`].
    pub approval_ttl_s: Option<u64>,
    /// Every call of the tool waits for a person's approval before it runs.
    pub require_approval: Option<bool>,
    /// With `require_approval`: the JSON Schema of the approver's answer (default
    /// `{"note"?: string}`).
    pub approval_schema: Option<Value>,
    /// The tool's own quota, for each principal calling it: `calls_per_minute`, `burst`,
    /// `max_running`.
    pub quotas: Option<QuotaConfig>,
    /// The scopes a token must carry to call the tool (a broader scope of the same hierarchy
    /// will do: `refunds` for `refunds:write`); API keys are not asked for any.
    pub required_scopes: Option<Vec<String>>,
}

/// What is wrong with a `required_scopes` key, if anything: each is a scope token of RFC 6749
/// (printable ASCII but space, `"` and `\\`), and the list is not empty.
pub fn check_required_scopes(scopes: &[String]) -> Result<(), String> {
    if scopes.is_empty() {
        return Err("lists no scope: leave it out instead".into());
    }
    for scope in scopes {
        let token_char =
            |b: u8| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b);
        if scope.is_empty() || scope.len() > 256 || !scope.bytes().all(token_char) {
            return Err(format!("`{scope}` is not a scope (RFC 6749 3.3)"));
        }
    }
    Ok(())
}

/// What is wrong with an `approval_schema` key, if anything: it must compile, and is only set
/// where approval is required (`require_approval`). The same rule for `[tools.<name>]` and
/// `[upstreams.policies.<tool>]`.
pub fn check_approval_schema(schema: &Value, require_approval: Option<bool>) -> Result<(), String> {
    ApprovalGate::with_schema(schema.clone())
        .map_err(|message| format!("is not a JSON Schema: {message}"))?;
    if require_approval != Some(true) {
        return Err("is only asked with require_approval = true".into());
    }
    Ok(())
}

/// The dispatcher's configuration: each of `tools` (by name) over `defaults`, the `retry`
/// policy, at most `max_running_calls` calls running at once, and every principal's `quotas`.
pub fn dispatch_config(
    defaults: &ToolConfig,
    tools: impl IntoIterator<Item = (String, ToolOverride)>,
    retry: &RetryConfig,
    max_running_calls: usize,
    quotas: QuotaSettings,
) -> DispatchConfig {
    DispatchConfig {
        defaults: defaults.settings(&ToolOverride::default()),
        tools: tools
            .into_iter()
            .map(|(name, tool)| {
                let settings = defaults.settings(&tool);
                (name, settings)
            })
            .collect(),
        retry: retry.policy(),
        max_running_calls,
        quotas,
    }
}
