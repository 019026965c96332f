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
pub use super::key::KeyTemplate;
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
    /// Streamable HTTP or OpenAPI: each call acts as its caller upstream (`[upstreams.auth]`).
    #[serde(default)]
    pub auth: Option<UpstreamAuthConfig>,
    /// OpenAPI: the document (an `http(s)://` URL or a file's path, JSON or YAML) whose
    /// operations are served as tools.
    #[serde(default)]
    pub openapi: Option<String>,
    /// OpenAPI: where requests go; unset, the document's first server.
    #[serde(default)]
    pub base_url: Option<String>,
    /// OpenAPI: the operations to serve (by id glob, `tag:<glob>` or a `/path` glob); empty,
    /// every operation.
    #[serde(default)]
    pub include: Vec<String>,
    /// OpenAPI: operations left out (as `include`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// OpenAPI: a secret per security scheme of the document, by the scheme's name; `${NAME}`
    /// in a value is read from the environment. Never logged.
    #[serde(default)]
    pub credentials: BTreeMap<String, String>,
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
            .field("openapi", &self.openapi)
            .field("base_url", &self.base_url)
            .field("include", &self.include)
            .field("exclude", &self.exclude)
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
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
    /// A REST API described by an OpenAPI document.
    OpenApi(super::openapi::Source),
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio { program, args, .. } => {
                write!(f, "stdio `{program}` {args:?}")
            }
            Transport::Http { url, .. } => write!(f, "{}", super::link::shown_url(url)),
            Transport::OpenApi(source) => write!(f, "OpenAPI {source:?}"),
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
        let ways = [
            self.command.is_some(),
            self.url.is_some(),
            self.openapi.is_some(),
        ];
        match ways.iter().filter(|set| **set).count() {
            0 => {
                return Err(invalid(
                    "command",
                    "set `command` (stdio), `url` (Streamable HTTP) or `openapi` (a REST API)",
                ));
            }
            1 => {}
            _ => {
                return Err(invalid(
                    if self.url.is_some() { "url" } else { "openapi" },
                    "set one of `command` (stdio), `url` (Streamable HTTP) and `openapi` (a \
                     REST API), not more",
                ));
            }
        }
        if let Some(command) = &self.command {
            if command.first().is_none_or(|program| program.is_empty()) {
                return Err(invalid("command", "must name a program"));
            }
            if !self.headers.is_empty() {
                return Err(invalid(
                    "headers",
                    "only an upstream with a `url` or an `openapi` document sends headers",
                ));
            }
        } else if !self.env.is_empty() {
            return Err(invalid(
                "env",
                "only an upstream with a `command` has an environment",
            ));
        }
        if let Some(url) = &self.url {
            check_http_url("url", url)?;
        }
        super::openapi::check(self)?;
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
            auth.check(self.command.is_none())?;
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
            (None, None) => Transport::OpenApi(super::openapi::Source::resolve(
                self,
                expand_all(&self.headers, "headers")?,
                expand_all(&self.credentials, "credentials")?,
            )?),
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

/// Checks an `http(s)://` URL of an entry: parsed, and without credentials (a URL is logged;
/// a secret goes in a header, from the environment).
pub(super) fn check_http_url(field: &str, url: &str) -> Result<url::Url, Invalid> {
    let parsed =
        url::Url::parse(url).map_err(|err| invalid(field, format!("is not a URL: {err}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(field, "must be http:// or https://"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(
            field,
            "must not carry credentials (they would be logged): send them in `headers`, e.g. \
             Authorization = \"Bearer ${TOKEN}\"",
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

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
