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
use super::standing::StandingLimits;
use super::{ApprovalGate, DispatchConfig, Expression, ToolSettings};
use crate::contract::retry::RetryPolicy;
use crate::store::RejectOption;

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
            approval: tool.approval_gate(),
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
    /// `[tools.<name>.approval]`: the tool's approval policy (`require_approval = true` is its
    /// short form, with no condition).
    pub approval: Option<ApprovalConfig>,
}

impl ToolOverride {
    /// The approval gate this table sets, if any. Its keys were checked when the file was read
    /// ([`ToolOverride::check_approval`]); one that is not valid here (a server built in code)
    /// asks about every call rather than none.
    fn approval_gate(&self) -> Option<ApprovalGate> {
        let asking_with = |schema: &Option<Value>| {
            schema
                .clone()
                .and_then(|schema| ApprovalGate::with_schema(schema).ok())
                .unwrap_or_default()
        };
        let compiled = |source: &Option<String>| {
            source
                .as_deref()
                .and_then(|source| Expression::compile(source).ok())
        };
        match &self.approval {
            Some(policy) => Some(ApprovalGate {
                when: compiled(&policy.when),
                reason: compiled(&policy.reason),
                reject_options: policy.reject_options.clone().unwrap_or_default(),
                approvals: policy.approvals.unwrap_or(1).clamp(1, MAX_APPROVALS),
                separate_from_caller: policy
                    .separate_from_caller
                    .unwrap_or(policy.approvals.is_some_and(|n| n > 1)),
                escalate_after: policy
                    .escalate_after_s
                    .map(|s| Duration::from_secs(s.clamp(1, MAX_ESCALATE_AFTER_S))),
                escalate_to: policy.escalate_to.clone().unwrap_or_default(),
                edit_input: policy.edit_input.unwrap_or(false),
                standing: StandingLimits::of(policy.standing_max_s, policy.standing_max_calls),
                ..asking_with(&policy.approval_schema)
            }),
            None => {
                (self.require_approval == Some(true)).then(|| asking_with(&self.approval_schema))
            }
        }
    }

    /// What is wrong with the table's approval keys, if anything, as (the key under the
    /// table, what is wrong): an approval schema that does not compile, or is set where no
    /// approval is asked; a condition or reason that is not CEL; the long and short forms
    /// together.
    pub fn check_approval(&self) -> Result<(), (String, String)> {
        if let Some(schema) = &self.approval_schema {
            check_approval_schema(schema, self.require_approval)
                .map_err(|message| ("approval_schema".to_owned(), message))?;
        }
        let Some(policy) = &self.approval else {
            return Ok(());
        };
        if self.require_approval.is_some() {
            return Err((
                "require_approval".into(),
                "is the short form of the [approval] table beside it: set one of them".into(),
            ));
        }
        if let Some(schema) = &policy.approval_schema {
            ApprovalGate::with_schema(schema.clone()).map_err(|message| {
                (
                    "approval.approval_schema".to_owned(),
                    format!("is not a JSON Schema: {message}"),
                )
            })?;
        }
        for (key, source) in [("when", &policy.when), ("reason", &policy.reason)] {
            if let Some(source) = source {
                Expression::compile(source)
                    .map_err(|message| (format!("approval.{key}"), message))?;
            }
        }
        if let Some(options) = &policy.reject_options {
            check_reject_options(options)
                .map_err(|message| ("approval.reject_options".to_owned(), message))?;
        }
        if let Some(approvals) = policy.approvals
            && !(1..=MAX_APPROVALS).contains(&approvals)
        {
            return Err((
                "approval.approvals".into(),
                format!("must be 1 to {MAX_APPROVALS} (distinct approvers), not {approvals}"),
            ));
        }
        if let Some(after) = policy.escalate_after_s
            && !(1..=MAX_ESCALATE_AFTER_S).contains(&after)
        {
            return Err((
                "approval.escalate_after_s".into(),
                format!("must be 1 to {MAX_ESCALATE_AFTER_S} seconds, not {after}"),
            ));
        }
        if let Some(names) = &policy.escalate_to {
            let why = if policy.escalate_after_s.is_none() {
                Some("needs escalate_after_s beside it: when to escalate".to_owned())
            } else if names.is_empty() || names.len() > 32 {
                Some("must name 1 to 32 grants or groups (leave it out for none)".to_owned())
            } else {
                names
                    .iter()
                    .find(|name| {
                        name.trim().is_empty()
                            || name.chars().count() > 128
                            || name.chars().any(char::is_control)
                    })
                    .map(|name| format!("`{name}` is not a name: 1 to 128 printable characters"))
            };
            if let Some(why) = why {
                return Err(("approval.escalate_to".into(), why));
            }
        }
        StandingLimits::check(policy.standing_max_s, policy.standing_max_calls)
            .map_err(|(key, why)| (format!("approval.{key}"), why))?;
        Ok(())
    }
}

/// `[tools.<name>.approval]`: which calls of a tool wait for a person, and what they are told.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// A CEL expression over `input`, `tool` and `principal`: the calls for which it is true
    /// (or fails to evaluate) wait for a person. Unset: every call.
    pub when: Option<String>,
    /// A CEL string expression: the suspension's reason, what the approver reads. Unset:
    /// "Calls of <tool> need approval."
    pub reason: Option<String>,
    /// The JSON Schema of the approver's answer (default `{"note"?: string}`).
    pub approval_schema: Option<Value>,
    /// The named ways a person may reject a call (`{ name, description }`); a rejection that
    /// names one tells the caller which.
    pub reject_options: Option<Vec<RejectOption>>,
    /// How many distinct approvers must approve a call before it runs (default 1, at most
    /// 16); any one rejection rejects it.
    pub approvals: Option<u32>,
    /// The principal that made a call may not approve it, whatever its role (default: true
    /// when `approvals` is above 1).
    pub separate_from_caller: Option<bool>,
    /// Seconds a suspension may wait undecided before it is escalated, once: a
    /// `call.escalated` feed entry, `escalated_at` on the approval, and `escalate_to` may
    /// decide it from then on.
    pub escalate_after_s: Option<u64>,
    /// Who else may decide an escalated approval: names matched against a principal's
    /// `decides` globs, or its token's `groups` claim.
    pub escalate_to: Option<Vec<String>>,
    /// Whether an approver may change the call's input as they approve it (default false):
    /// the edit is checked against the tool's input schema, the tool runs with it, and the
    /// call keeps both inputs and who edited.
    pub edit_input: Option<bool>,
    /// The longest standing approval an approver may grant, in seconds: "this tool, for this
    /// caller, for the next N seconds or K calls". Set with `standing_max_calls`; unset: none.
    pub standing_max_s: Option<u64>,
    /// The most calls a standing approval may release. Set with `standing_max_s`.
    pub standing_max_calls: Option<u32>,
}

/// The most distinct approvers a policy may ask for.
const MAX_APPROVALS: u32 = 16;
/// The longest `escalate_after_s`: a year.
const MAX_ESCALATE_AFTER_S: u64 = 365 * 24 * 3600;

/// The most rejection options one tool may have.
const MAX_REJECT_OPTIONS: usize = 32;
/// The longest rejection option's description, in characters.
const MAX_OPTION_DESCRIPTION_CHARS: usize = 1000;

/// What is wrong with a list of rejection options, if anything: 1 to 32 of them, each named
/// with 1 to 64 ASCII letters, digits, `_` and `-`, no name twice, each description 1 to 1000
/// characters that say something.
pub fn check_reject_options(options: &[RejectOption]) -> Result<(), String> {
    if options.is_empty() || options.len() > MAX_REJECT_OPTIONS {
        return Err(format!(
            "must list 1 to {MAX_REJECT_OPTIONS} options (leave it out for none)"
        ));
    }
    for (i, option) in options.iter().enumerate() {
        let name = &option.name;
        let named = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !named {
            return Err(format!(
                "`{name}` is not an option name: 1 to 64 ASCII letters, digits, `_` or `-`"
            ));
        }
        if options[..i].iter().any(|other| other.name == *name) {
            return Err(format!("names `{name}` twice"));
        }
        let description = &option.description;
        if description.trim().is_empty()
            || description.chars().count() > MAX_OPTION_DESCRIPTION_CHARS
            || description.chars().any(char::is_control)
        {
            return Err(format!(
                "`{name}`'s description must say something, in 1 to \
                 {MAX_OPTION_DESCRIPTION_CHARS} characters on one line"
            ));
        }
    }
    Ok(())
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
