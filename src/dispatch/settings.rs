//! How the dispatcher is configured: each tool's settings (timeout, concurrency, approval TTL,
//! an approval gate), the defaults, the retry policy, and who asks for a call.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::condition::{Expression, Scope};
use super::quota::{QuotaConfig, QuotaSettings};
use super::who::Principal;
use crate::contract::outcome::Suspension;
use crate::contract::registry::compile_schema;
use crate::contract::retry::RetryPolicy;
use crate::store::RejectOption;

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

/// A tool whose calls need a person's approval, by configuration: a call suspends before the
/// tool runs, and approving runs it with the input it was called with. Every call, or those
/// its `when` condition holds for (see [`condition`](super::condition)).
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalGate {
    /// The JSON Schema of what the approver answers with.
    pub input_schema: Value,
    /// Which calls need approval: those for which this CEL expression is true, or whose
    /// evaluation fails (a policy fails closed); `None`: every call.
    pub when: Option<Expression>,
    /// What the approver reads: this CEL string expression; `None`: "Calls of <tool> need
    /// approval."
    pub reason: Option<Expression>,
    /// The named ways a person may reject a call of the tool (any suspension of it, whether
    /// the policy asked or the tool did), told to the caller with the rejection.
    pub reject_options: Vec<RejectOption>,
    /// How many distinct approvers must approve a call before it runs (`approvals`, at least
    /// one).
    pub approvals: u32,
    /// Whether the principal that made a call may not approve (or complete) it, whatever its
    /// role (`separate_from_caller`).
    pub separate_from_caller: bool,
    /// How long a suspension may wait undecided before it is escalated (`escalate_after_s`);
    /// `None`: never.
    pub escalate_after: Option<std::time::Duration>,
    /// Who else may decide an escalated approval (`escalate_to`): see
    /// [`Principal::reached_by_escalation`](super::who::Principal::reached_by_escalation).
    pub escalate_to: Vec<String>,
    /// Whether an approver may change the call's input as they approve it (`edit_input`):
    /// the tool then runs with the edited input (see `Dispatcher::approve_with`).
    pub edit_input: bool,
    /// The standing approvals an approver may grant with an approval (`standing_max_s`,
    /// `standing_max_calls`); `None`: never offered.
    pub standing: Option<super::standing::StandingLimits>,
}

impl Default for ApprovalGate {
    /// Every call; the approver may add a note: `{"note"?: string}`.
    fn default() -> Self {
        ApprovalGate {
            input_schema: json!({
                "type": "object",
                "properties": { "note": { "type": "string", "maxLength": 2000 } },
                "additionalProperties": false,
            }),
            when: None,
            reason: None,
            reject_options: Vec::new(),
            approvals: 1,
            separate_from_caller: false,
            escalate_after: None,
            escalate_to: Vec::new(),
            edit_input: false,
            standing: None,
        }
    }
}

/// The longest part of an evaluation's error quoted in a reason, in characters.
const MAX_QUOTED_ERROR_CHARS: usize = 300;

impl ApprovalGate {
    /// An approval asked with `input_schema`, once it is known to compile.
    pub fn with_schema(input_schema: Value) -> Result<ApprovalGate, String> {
        compile_schema(&input_schema)?;
        Ok(ApprovalGate {
            input_schema,
            ..ApprovalGate::default()
        })
    }

    /// Asks only for calls for which the CEL expression `when` holds (see
    /// [`Expression::compile`] for what it may name).
    pub fn when(self, when: &str) -> Result<ApprovalGate, String> {
        Ok(ApprovalGate {
            when: Some(Expression::compile(when)?),
            ..self
        })
    }

    /// Tells the approver what the CEL string expression `reason` gives.
    pub fn reason(self, reason: &str) -> Result<ApprovalGate, String> {
        Ok(ApprovalGate {
            reason: Some(Expression::compile(reason)?),
            ..self
        })
    }

    /// Refuses an expression that names a field of `input` the tool's `input_schema` cannot
    /// have, with the key it is under (`when` or `reason`).
    pub fn check_input_fields(&self, input_schema: &Value) -> Result<(), (&'static str, String)> {
        for (key, expression) in [("when", &self.when), ("reason", &self.reason)] {
            if let Some(expression) = expression {
                expression
                    .check_input_fields(input_schema)
                    .map_err(|message| (key, message))?;
            }
        }
        Ok(())
    }

    /// What the approver of a call of `tool` is asked when the policy gives no reason.
    fn default_reason(tool: &str) -> String {
        format!("Calls of {tool} need approval.")
    }

    /// Whether the call of `scope` waits for a person, and with what question. A condition
    /// that cannot be evaluated asks (a policy fails closed), and says so.
    pub(super) fn asks(&self, scope: &Scope<'_>) -> Option<Box<Suspension>> {
        let reason = match &self.when {
            None => self.reason_for(scope),
            Some(when) => match when.evaluate(scope) {
                Ok(cel::Value::Bool(false)) => return None,
                Ok(cel::Value::Bool(true)) => self.reason_for(scope),
                Ok(other) => {
                    self.unevaluated(scope, &format!("it gave a {}, not a bool", other.type_of()))
                }
                Err(error) => self.unevaluated(scope, &error),
            },
        };
        Some(Box::new(Suspension::new(reason, self.input_schema.clone())))
    }

    /// The reason of an approval asked for `scope`.
    fn reason_for(&self, scope: &Scope<'_>) -> String {
        let Some(reason) = &self.reason else {
            return Self::default_reason(scope.tool);
        };
        match reason.evaluate(scope) {
            Ok(cel::Value::String(text)) if !text.trim().is_empty() => text.as_ref().clone(),
            Ok(other) => format!(
                "{} (The policy's reason gave a {}, not a text.)",
                Self::default_reason(scope.tool),
                other.type_of()
            ),
            Err(error) => format!(
                "{} (The policy's reason could not be evaluated: {}.)",
                Self::default_reason(scope.tool),
                quoted(&error)
            ),
        }
    }

    /// The reason of an approval asked because the condition could not be evaluated.
    fn unevaluated(&self, scope: &Scope<'_>, error: &str) -> String {
        tracing::warn!(
            tool = scope.tool,
            "an approval condition could not be evaluated; the call waits for a person"
        );
        format!(
            "Calls of {} need approval when `{}`, and the condition could not be evaluated for \
             this call: {}.",
            scope.tool,
            self.when
                .as_ref()
                .map(Expression::source)
                .unwrap_or_default(),
            quoted(error)
        )
    }
}

/// An evaluation's error as a reason quotes it: cut at [`MAX_QUOTED_ERROR_CHARS`].
fn quoted(error: &str) -> String {
    match error.char_indices().nth(MAX_QUOTED_ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &error[..cut]),
        None => error.to_owned(),
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
