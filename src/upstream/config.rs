//! `[[upstreams]]`: one MCP server per entry, how to reach it, which of its tools to serve, and
//! the policy of each (effect, approval, timeout, idempotency key).
//!
//! Checked when the file is read, so a bad entry stops the start naming its key: a name that
//! cannot prefix a tool name, neither or both of `command` and `url`, a key template that names
//! no field, an approval schema that does not compile. `${NAME}` in a header or environment
//! value is expanded when the upstream starts ([`UpstreamConfig::resolve`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

pub use super::auth::{AuthMode, ClientAuth, ExchangeSettings, UpstreamAuthConfig};
pub use super::pins::{OnNewTool, PinMode};
pub use crate::base::Invalid;
use crate::base::{expand, invalid};
use crate::contract::meta::Effect;
use crate::dispatch::config::{ApprovalConfig, ToolOverride, check_required_scopes};
use crate::dispatch::quota::QuotaConfig;

/// The separator between an upstream's name and its tool's: `files__write_file`.
pub const SEPARATOR: &str = "__";

/// The longest `refresh_s`: a day.
const MAX_REFRESH_S: u64 = 86_400;

/// `[[upstreams]]`: one MCP server whose tools toolgate serves as its own.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The prefix of its tools' names (`files` serves `files__<tool>`).
    pub name: String,
    /// Stdio: the program and its arguments, spawned and supervised by toolgate.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Stdio: environment variables for the program (on top of toolgate's own); `${NAME}` in a
    /// value is read from toolgate's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Streamable HTTP: the server's MCP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request; `${NAME}` in a value is read from the
    /// environment. Never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Globs (`*`, `?`) of the upstream's tool names to serve; `["*"]` by default.
    #[serde(default = "every_tool")]
    pub tools: Vec<String>,
    /// Re-read the tool list every this many seconds, besides on `list_changed`; unset: only
    /// on `list_changed` and reconnects.
    #[serde(default)]
    pub refresh_s: Option<u64>,
    /// Per upstream tool (by its upstream name): its policy.
    #[serde(default)]
    pub policies: BTreeMap<String, UpstreamPolicy>,
    /// Whether the tools' definitions are pinned (`on`, the default): a tool whose definition
    /// changes upstream is held until an admin accepts the change. `off`: changes pass through.
    #[serde(default)]
    pub pins: PinMode,
    /// What a tool seen for the first time is: `pin` (served, pinned as listed) or `hold`
    /// (listed as a change for an admin, not served); unset: `pin` at the upstream's first
    /// connection, `hold` afterwards.
    #[serde(default)]
    pub on_new_tool: Option<OnNewTool>,
    /// Streamable HTTP: each call acts as its caller upstream (`[upstreams.auth]`).
    #[serde(default)]
    pub auth: Option<UpstreamAuthConfig>,
}

fn every_tool() -> Vec<String> {
    vec!["*".to_owned()]
}

impl fmt::Debug for UpstreamConfig {
    /// Header and environment values may carry secrets: only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("tools", &self.tools)
            .field("refresh_s", &self.refresh_s)
            .field("policies", &self.policies)
            .field("pins", &self.pins)
            .field("on_new_tool", &self.on_new_tool)
            .field("auth", &self.auth)
            .finish()
    }
}

/// `[upstreams.policies.<tool>]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamPolicy {
    /// What the tool does to the world; unset: from the upstream's annotations, else `write`.
    pub effect: Option<Effect>,
    /// Every call waits for a person's approval before anything is sent upstream.
    pub require_approval: Option<bool>,
    /// The longest one attempt may run, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// The most calls of the tool running at once.
    pub max_concurrency: Option<usize>,
    /// How long a suspension of the tool waits for a person, in seconds; unset: forever.
    pub approval_ttl_s: Option<u64>,
    /// The idempotency key, as a template over top-level input fields: `write:{path}`.
    pub idempotency_key: Option<String>,
    /// The JSON Schema of the approver's answer (default `{"note"?: string}`).
    pub approval_schema: Option<Value>,
    /// The tool's approval policy (as `[tools.<name>.approval]`).
    pub approval: Option<ApprovalConfig>,
    /// The tool's own quota, for each principal calling it (as `[tools.<name>] quotas`).
    pub quotas: Option<QuotaConfig>,
    /// The scopes a token must carry to call the tool (as `[tools.<name>] required_scopes`).
    pub required_scopes: Option<Vec<String>>,
}

impl UpstreamPolicy {
    /// The policy as the dispatcher's settings of the tool.
    fn tool_override(&self) -> ToolOverride {
        ToolOverride {
            timeout_ms: self.timeout_ms,
            max_concurrency: self.max_concurrency,
            approval_ttl_s: self.approval_ttl_s,
            require_approval: self.require_approval,
            approval_schema: self.approval_schema.clone(),
            quotas: self.quotas,
            required_scopes: self.required_scopes.clone(),
            approval: self.approval.clone(),
        }
    }
}

/// How an upstream is reached, with every `${NAME}` expanded.
#[derive(Clone)]
pub enum Transport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment.
        env: Vec<(String, String)>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint.
        url: String,
        /// Headers for every request (secrets, maybe).
        headers: Vec<(String, String)>,
    },
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio { program, args, .. } => {
                write!(f, "stdio `{program}` {args:?}")
            }
            Transport::Http { url, .. } => write!(f, "{}", super::link::shown_url(url)),
        }
    }
}

/// An upstream ready to start: its config, checked, with its secrets read.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Its name, the prefix of its tools.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Globs of tool names to serve.
    pub tools: Vec<String>,
    /// How often to re-read its tool list, besides on `list_changed`.
    pub refresh: Option<Duration>,
    /// Policies by upstream tool name.
    pub policies: BTreeMap<String, UpstreamPolicy>,
    /// What a tool without a pin is; `None` when pins are off.
    pub pins: Option<crate::store::NewTools>,
    /// Each call acts as its caller: the exchange's settings.
    pub auth: Option<ExchangeSettings>,
}

impl UpstreamConfig {
    /// Checks what the file alone can tell.
    pub fn check(&self) -> Result<(), Invalid> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok || self.name.len() > 32 {
            return Err(invalid(
                "name",
                "must be 1 to 32 of A-Z, a-z, 0-9, `_`, `-` (it prefixes the tools' names)",
            ));
        }
        // `<name>__<tool>` must say which upstream a tool is from: with `__` inside a name, or
        // `_` at its end, two upstreams could serve one name (`a` + `b__c`, `a__b` + `c`).
        if self.name.contains(SEPARATOR) || self.name.starts_with('_') || self.name.ends_with('_') {
            return Err(invalid(
                "name",
                "must not contain `__`, nor begin or end with `_` (`__` separates it from the \
                 tool's name)",
            ));
        }
        match (&self.command, &self.url) {
            (Some(command), None) => {
                if command.first().is_none_or(|program| program.is_empty()) {
                    return Err(invalid("command", "must name a program"));
                }
                if !self.headers.is_empty() {
                    return Err(invalid(
                        "headers",
                        "only an upstream with a `url` sends headers",
                    ));
                }
            }
            (None, Some(url)) => {
                let parsed = url::Url::parse(url)
                    .map_err(|err| invalid("url", format!("is not a URL: {err}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(invalid("url", "must be http:// or https://"));
                }
                // A URL is logged; a secret goes in a header, from the environment.
                if !parsed.username().is_empty() || parsed.password().is_some() {
                    return Err(invalid(
                        "url",
                        "must not carry credentials (they would be logged): send them in \
                         `headers`, e.g. Authorization = \"Bearer ${TOKEN}\"",
                    ));
                }
                if !self.env.is_empty() {
                    return Err(invalid(
                        "env",
                        "only an upstream with a `command` has an environment",
                    ));
                }
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "url",
                    "set `command` (stdio) or `url` (HTTP), not both",
                ));
            }
            (None, None) => {
                return Err(invalid("command", "set `command` (stdio) or `url` (HTTP)"));
            }
        }
        for (table, entries) in [("headers", &self.headers), ("env", &self.env)] {
            for (key, value) in entries {
                expand(value, |_| Some(String::new()))
                    .map_err(|message| invalid(format!("{table}.{key}"), message))?;
            }
        }
        for (key, value) in &self.headers {
            axum::http::HeaderName::from_bytes(key.as_bytes())
                .map_err(|_| invalid(format!("headers.{key}"), "is not a header name"))?;
            if value.contains(['\r', '\n']) {
                return Err(invalid(format!("headers.{key}"), "must be one line"));
            }
        }
        if let Some(auth) = &self.auth {
            auth.check(self.url.is_some())?;
        }
        if self.tools.is_empty() {
            return Err(invalid(
                "tools",
                "must list at least one glob (`*` serves every tool)",
            ));
        }
        if let Some(refresh) = self.refresh_s
            && !(1..=MAX_REFRESH_S).contains(&refresh)
        {
            return Err(invalid(
                "refresh_s",
                format!("must be 1 to {MAX_REFRESH_S} (a day)"),
            ));
        }
        if self.pins == PinMode::Off && self.on_new_tool.is_some() {
            return Err(invalid(
                "on_new_tool",
                "has no effect with `pins = \"off\"`",
            ));
        }
        for (tool, policy) in &self.policies {
            let key = |field: &str| format!("policies.{tool}.{field}");
            if policy.timeout_ms == Some(0) {
                return Err(invalid(key("timeout_ms"), "must be at least 1"));
            }
            if policy.max_concurrency == Some(0) {
                return Err(invalid(key("max_concurrency"), "must be at least 1"));
            }
            if let Some(template) = &policy.idempotency_key {
                KeyTemplate::parse(template)
                    .map_err(|message| invalid(key("idempotency_key"), message))?;
            }
            policy
                .tool_override()
                .check_approval()
                .map_err(|(field, message)| invalid(key(&field), message))?;
            if let Some(scopes) = &policy.required_scopes {
                check_required_scopes(scopes)
                    .map_err(|message| invalid(key("required_scopes"), message))?;
            }
            if let Some(quotas) = &policy.quotas {
                quotas.check(true).map_err(|(field, message)| {
                    invalid(key(&format!("quotas.{field}")), message)
                })?;
            }
        }
        Ok(())
    }

    /// The name toolgate serves the upstream's `tool` as: `files__write_file`.
    pub fn served_name(&self, tool: &str) -> String {
        super::tool::prefixed(&self.name, tool)
    }

    /// Each tool's policy as the dispatcher's settings of it, by its served name: an upstream
    /// tool's policy is its `[tools.<upstream>__<tool>]`.
    pub fn tool_overrides(&self) -> impl Iterator<Item = (String, ToolOverride)> + '_ {
        self.policies
            .iter()
            .map(|(tool, policy)| (self.served_name(tool), policy.tool_override()))
    }

    /// The upstream with every `${NAME}` expanded by `env`; a variable `env` does not know is
    /// an error naming it.
    pub fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Result<Upstream, Invalid> {
        let expand_all = |table: &BTreeMap<String, String>, field: &str| {
            table
                .iter()
                .map(|(key, value)| {
                    expand(value, &env)
                        .map(|value| (key.clone(), value))
                        .map_err(|message| invalid(format!("{field}.{key}"), message))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let transport = match (&self.command, &self.url) {
            (Some(command), _) => Transport::Stdio {
                program: command[0].clone(),
                args: command[1..].to_vec(),
                env: expand_all(&self.env, "env")?,
            },
            (None, Some(url)) => Transport::Http {
                url: url.clone(),
                headers: expand_all(&self.headers, "headers")?,
            },
            (None, None) => return Err(invalid("command", "set `command` or `url`")),
        };
        Ok(Upstream {
            name: self.name.clone(),
            transport,
            tools: self.tools.clone(),
            refresh: self.refresh_s.map(Duration::from_secs),
            policies: self.policies.clone(),
            pins: match (self.pins, self.on_new_tool) {
                (PinMode::Off, _) => None,
                (PinMode::On, None) => Some(crate::store::NewTools::PinFirst),
                (PinMode::On, Some(OnNewTool::Pin)) => Some(crate::store::NewTools::Pin),
                (PinMode::On, Some(OnNewTool::Hold)) => Some(crate::store::NewTools::Hold),
            },
            auth: self
                .auth
                .as_ref()
                .map(|auth| auth.resolve(&env))
                .transpose()?,
        })
    }
}

/// An idempotency key template: literal text and `{field}`s, each a top-level input field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(String),
}

impl KeyTemplate {
    /// Parses `write:{path}`; `{{` and `}}` are literal braces.
    pub fn parse(template: &str) -> Result<KeyTemplate, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '{' => {
                    let mut field = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        field.push(c);
                    }
                    if !closed || field.is_empty() || field.contains('{') {
                        return Err("has a `{` that does not close around a field name".into());
                    }
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Field(field));
                }
                '}' => return Err("has a `}` that opens nothing (write `}}` for a brace)".into()),
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        if !parts.iter().any(|part| matches!(part, Part::Field(_))) {
            return Err(
                "names no input field: a key the same for every input would make every call \
                 after the first a replay of it"
                    .into(),
            );
        }
        Ok(KeyTemplate { parts })
    }

    /// The fields the template reads.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Field(field) => Some(field.as_str()),
            Part::Text(_) => None,
        })
    }

    /// The key of `input`; `None` when a field is missing or not a string, number or boolean
    /// (the call then runs without a key of its own).
    pub fn render(&self, input: &Value) -> Option<String> {
        let mut key = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => key.push_str(text),
                Part::Field(field) => match input.get(field)? {
                    Value::String(s) => key.push_str(s),
                    Value::Number(n) => key.push_str(&n.to_string()),
                    Value::Bool(b) => key.push_str(if *b { "true" } else { "false" }),
                    _ => return None,
                },
            }
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_as_shells_do() {
        assert!(crate::contract::registry::glob_matches("*", "write_file"));
        assert!(crate::contract::registry::glob_matches(
            "write_*",
            "write_file"
        ));
        assert!(crate::contract::registry::glob_matches(
            "*_file",
            "write_file"
        ));
        assert!(crate::contract::registry::glob_matches(
            "w?ite*e",
            "write_file"
        ));
        assert!(crate::contract::registry::glob_matches(
            "*i*e*",
            "write_file"
        ));
        assert!(!crate::contract::registry::glob_matches(
            "read_*",
            "write_file"
        ));
        assert!(!crate::contract::registry::glob_matches(
            "write_file?",
            "write_file"
        ));
        assert!(crate::contract::registry::glob_matches(
            "write_file",
            "write_file"
        ));
        assert!(!crate::contract::registry::glob_matches("", "x"));
        assert!(crate::contract::registry::glob_matches("a*b*c", "aXXbYYc"));
        assert!(!crate::contract::registry::glob_matches("a*b*c", "aXXbYY"));
    }

    #[test]
    fn key_templates_render_top_level_fields() {
        let template = KeyTemplate::parse("write:{path}:{n}{{x}}").unwrap();
        assert_eq!(template.fields().collect::<Vec<_>>(), ["path", "n"]);
        assert_eq!(
            template
                .render(&json!({"path": "a.txt", "n": 3}))
                .as_deref(),
            Some("write:a.txt:3{x}")
        );
        assert_eq!(template.render(&json!({"path": "a.txt"})), None);
        assert_eq!(template.render(&json!({"path": {"x": 1}, "n": 1})), None);
        assert!(KeyTemplate::parse("constant").is_err());
        assert!(KeyTemplate::parse("a:{path").is_err());
        assert!(KeyTemplate::parse("a:}").is_err());
        assert!(KeyTemplate::parse("a:{}").is_err());
    }

    #[test]
    fn an_entry_needs_one_way_to_reach_it_and_a_usable_name() {
        let entry = |text: &str| -> UpstreamConfig { toml::from_str(text).unwrap() };
        assert!(
            entry("name = \"files\"\ncommand = [\"python3\", \"s.py\"]")
                .check()
                .is_ok()
        );
        assert!(
            entry("name = \"files\"\nurl = \"http://127.0.0.1:9/mcp\"")
                .check()
                .is_ok()
        );
        let err = entry("name = \"f\"\nurl = \"http://me:pw@127.0.0.1:9/mcp\"")
            .check()
            .unwrap_err();
        assert_eq!(err.key, "url");
        let err = entry("name = \"files\"").check().unwrap_err();
        assert_eq!(err.key, "command");
        let err = entry("name = \"fi les\"\ncommand = [\"x\"]")
            .check()
            .unwrap_err();
        assert_eq!(err.key, "name");
        for name in ["a__b", "a_", "_a"] {
            let err = entry(&format!("name = \"{name}\"\ncommand = [\"x\"]"))
                .check()
                .unwrap_err();
            assert_eq!(err.key, "name", "{name}");
        }
        assert!(entry("name = \"a_b-c\"\ncommand = [\"x\"]").check().is_ok());
        let err = entry("name = \"f\"\ncommand = [\"x\"]\nenv = { A = \"${\" }")
            .check()
            .unwrap_err();
        assert_eq!(err.key, "env.A");
        let err = entry("name = \"f\"\ncommand = [\"x\"]\nurl = \"http://h/\"")
            .check()
            .unwrap_err();
        assert_eq!(err.key, "url");
        let err =
            entry("name = \"f\"\ncommand = [\"x\"]\n[policies.w]\nidempotency_key = \"same\"")
                .check()
                .unwrap_err();
        assert_eq!(err.key, "policies.w.idempotency_key");
        let err = entry(
            "name = \"f\"\ncommand = [\"x\"]\n[policies.w]\nrequire_approval = true\n\
             approval_schema = { type = 12 }",
        )
        .check()
        .unwrap_err();
        assert_eq!(err.key, "policies.w.approval_schema");
        let err =
            entry("name = \"f\"\ncommand = [\"x\"]\n[policies.w.approval]\nwhen = \"input.a ==\"")
                .check()
                .unwrap_err();
        assert_eq!(err.key, "policies.w.approval.when");
        // A policy table with a condition that compiles is an approval gate with it.
        let upstream = entry(
            "name = \"f\"\ncommand = [\"x\"]\n[policies.w.approval]\nwhen = \"input.a == 1\"\n\
             edit_input = true",
        );
        upstream.check().unwrap();
        let (served, policy) = upstream.tool_overrides().next().unwrap();
        assert_eq!(served, "f__w");
        let gate = crate::dispatch::config::ToolConfig::default()
            .settings(&policy)
            .approval
            .unwrap();
        assert!(gate.edit_input, "approvers may edit its calls' input");
        assert_eq!(gate.when.unwrap().source(), "input.a == 1");
    }
}
