//! Configuration of the `toolgate` binary, read once at start-up.
//!
//! Every key has a default, so a file sets only what it changes (`config/default.toml` lists
//! every key with its default). Layers, each overriding the one before: the defaults, the file
//! given with `--config`, `TOOLGATE_*` environment variables, then command-line flags. An
//! environment variable names a key in upper case, with `__` between a table and its key:
//! `TOOLGATE_BIND`, `TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS`. An unknown key or a value of the
//! wrong type stops the start with an error naming the key.
//!
//! This module is the loader and the top-level keys. Each subsystem declares its own section
//! beside its code, with the translation into its runtime options, and they are re-exported
//! here: `[tool_defaults]`, `[tools]` and `[retry]` in `dispatch/config.rs`, `[store]` in
//! `store/config.rs`, `[[webhooks]]` and `[webhook_delivery]` in `feed/webhooks/config.rs`,
//! `[mcp]`, `[inbox]`, `[examples]`, `[telemetry]`, `[signing]` and `[[upstreams]]` in their
//! modules' `config.rs`. The
//! sections of the HTTP server as a whole (`[auth]`, `[feed]`) are in `server.rs` here; the
//! checks across sections, run once the file is read, in `checks.rs`; opening the store it
//! names and wording a refused start in its keys, in `start.rs`.

mod checks;
mod server;
mod start;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::dispatch::DispatchConfig;
use crate::http::auth::ApiKey;
use crate::upstream::config::UpstreamConfig;

pub use crate::audit::AuditConfig;
pub use crate::dispatch::config::{RetryConfig, ToolConfig, ToolOverride};
use crate::dispatch::quota::DEFAULT_MAX_HELD;
pub use crate::dispatch::quota::QuotaConfig;
pub use crate::examples::config::ExamplesConfig;
pub use crate::feed::webhooks::config::{WebhookConfig, WebhookDeliveryConfig};
pub use crate::http::config::ServerConfig;
pub use crate::inbox::config::InboxConfig;
pub use crate::mcp::config::McpConfig;
use crate::notify::PersonConfig;
pub use crate::notify::config::NotifyConfig;
pub use crate::signing::SigningConfig;
pub use crate::store::config::StoreConfig;
pub use crate::telemetry::config::{LogFormat, TelemetryConfig};
pub use server::{AuthConfig, FeedConfig, KeyConfig};
pub use start::OpenStoreError;

/// The prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "TOOLGATE_";

/// Keys whose values are strings, taken from the environment verbatim.
const STRING_KEYS: &[&str] = &[
    "bind",
    "data_dir",
    "log",
    "store.database_url",
    "webhook_delivery.proxy",
    "telemetry.otlp_endpoint",
    "telemetry.service_name",
    "signing.key_file",
    "audit.export.otlp_endpoint",
    "audit.export.syslog_url",
];

/// Everything the binary is configured with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The address the HTTP server listens on.
    pub bind: SocketAddr,
    /// The directory holding the database (`toolgate.db`) and the example outbox.
    pub data_dir: PathBuf,
    /// The log filter (tracing's `EnvFilter` syntax); `RUST_LOG` wins when set. Either way the
    /// binary keeps the MCP SDK (`rmcp`) to warnings unless the filter names it.
    pub log: String,
    /// How log lines are written: `text` (the default) or `json`, one object per line.
    pub log_format: LogFormat,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// The deepest JSON nesting accepted in inputs and outputs.
    pub max_json_depth: usize,
    /// The most requests handled at once; more get `503 overloaded`.
    pub max_in_flight: usize,
    /// `[server]`: deadlines of request heads, bodies and idle connections, and the most
    /// connections open at once.
    pub server: ServerConfig,
    /// Retries of live failures of read and idempotent tools (writes never retry).
    pub retry: RetryConfig,
    /// Settings of every tool not named under `[tools]`.
    pub tool_defaults: ToolConfig,
    /// Settings by tool name; unset keys fall back to `tool_defaults`.
    pub tools: BTreeMap<String, ToolOverride>,
    /// Every principal's quotas, unless its key sets its own (`[[auth.keys]] quotas`).
    pub quotas: QuotaConfig,
    /// API keys.
    pub auth: AuthConfig,
    /// The example tools.
    pub examples: ExamplesConfig,
    /// Where calls are stored: the embedded SQLite file, or a PostgreSQL shared by replicas.
    pub store: StoreConfig,
    /// The change feed.
    pub feed: FeedConfig,
    /// `[[webhooks]]`: where changes of calls are posted.
    pub webhooks: Vec<WebhookConfig>,
    /// How webhooks are delivered.
    pub webhook_delivery: WebhookDeliveryConfig,
    /// `/mcp`.
    pub mcp: McpConfig,
    /// `/inbox`, the approvers' web page.
    pub inbox: InboxConfig,
    /// `[[upstreams]]`: MCP servers whose tools are served as toolgate's.
    pub upstreams: Vec<UpstreamConfig>,
    /// `[telemetry]`: traces, sent over OTLP/HTTP to a collector.
    pub telemetry: TelemetryConfig,
    /// `[[people]]`: who a principal is, for the channels that reach approvers.
    pub people: Vec<PersonConfig>,
    /// `[[notify]]`: the channels (email, Slack) that ask approvers where they work.
    pub notify: Vec<NotifyConfig>,
    /// `[signing]`: the key that signs the attestations of upstream calls.
    pub signing: SigningConfig,
    /// `[audit]`: how often the audit chain's head is signed.
    pub audit: AuditConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("toolgate-data"),
            log: "info".into(),
            log_format: LogFormat::default(),
            max_body_bytes: crate::http::DEFAULT_MAX_BODY_BYTES,
            max_json_depth: crate::dispatch::DEFAULT_MAX_JSON_DEPTH,
            max_in_flight: crate::http::DEFAULT_MAX_IN_FLIGHT,
            server: ServerConfig::default(),
            retry: RetryConfig::default(),
            tool_defaults: ToolConfig::default(),
            tools: BTreeMap::new(),
            quotas: QuotaConfig {
                max_held: Some(DEFAULT_MAX_HELD),
                ..QuotaConfig::default()
            },
            auth: AuthConfig::default(),
            examples: ExamplesConfig::default(),
            store: StoreConfig::default(),
            feed: FeedConfig::default(),
            webhooks: Vec::new(),
            webhook_delivery: WebhookDeliveryConfig::default(),
            mcp: McpConfig::default(),
            inbox: InboxConfig::default(),
            people: Vec::new(),
            notify: Vec::new(),
            upstreams: Vec::new(),
            telemetry: TelemetryConfig::default(),
            signing: SigningConfig::default(),
            audit: AuditConfig::default(),
        }
    }
}

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message, with the position.
        message: String,
    },
    /// An environment variable does not name a key.
    #[error("environment variable {name} does not name a config key")]
    BadEnv {
        /// The variable.
        name: String,
    },
    /// A key is unknown or its value has the wrong type.
    #[error("config key `{key}`: {message}")]
    Invalid {
        /// The key's dotted path (empty for the top level).
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl From<crate::base::Invalid> for ConfigError {
    fn from(wrong: crate::base::Invalid) -> Self {
        ConfigError::Invalid {
            key: wrong.key,
            message: wrong.message,
        }
    }
}

/// Overrides given on the command line.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--bind`.
    pub bind: Option<SocketAddr>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--database-url`.
    pub database_url: Option<String>,
}

impl Config {
    /// Reads the configuration: defaults, then `file`, then `env` (`TOOLGATE_*` pairs), then
    /// `overrides`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: Overrides,
    ) -> Result<Config, ConfigError> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                text.parse::<toml::Table>()
                    .map_err(|err| ConfigError::Syntax {
                        path: path.to_owned(),
                        message: err.to_string(),
                    })?
            }
            None => toml::Table::new(),
        };
        for (name, raw) in env {
            let Some(key) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            // `TOOLGATE_TEST_*` belongs to the test suite (its PostgreSQL), not to the server.
            if key.starts_with("TEST_") {
                continue;
            }
            let path: Vec<String> = key.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().any(String::is_empty) {
                return Err(ConfigError::BadEnv { name });
            }
            // A string key keeps the text as it is (`TOOLGATE_DATA_DIR=2024` is a directory);
            // any other value is read as TOML (`3000`, `true`).
            let value = if STRING_KEYS.contains(&path.join(".").as_str()) {
                toml::Value::String(raw)
            } else {
                env_value(&raw)
            };
            set_path(&mut table, &path, value)
                .map_err(|()| ConfigError::BadEnv { name: name.clone() })?;
        }
        let mut config = Config::from_table(table)?;
        if let Some(bind) = overrides.bind {
            config.bind = bind;
        }
        if let Some(data_dir) = overrides.data_dir {
            config.data_dir = data_dir;
        }
        if let Some(url) = overrides.database_url {
            config.store.database_url = url;
        }
        Ok(config)
    }

    /// Reads a configuration from TOML text alone.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let table = text
            .parse::<toml::Table>()
            .map_err(|err| ConfigError::Syntax {
                path: PathBuf::from("<text>"),
                message: err.to_string(),
            })?;
        Config::from_table(table)
    }

    fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
        let config: Config =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|err| {
                ConfigError::Invalid {
                    key: err.path().to_string(),
                    message: err.inner().to_string(),
                }
            })?;
        config.api_keys()?;
        config.auth.check_issuers()?;
        config.check_inbox()?;
        config
            .telemetry
            .check()
            .map_err(|message| ConfigError::Invalid {
                key: "telemetry".into(),
                message,
            })?;
        config.check_numbers()?;
        config.check_approvals()?;
        config.check_quotas()?;
        config.check_upstreams()?;
        // The file's channels, and the people they reach, are checked now; their secrets are read when they start.
        config.notify_with(|_| None, true)?;
        // The file's webhooks are checked now; their `secret_env` is read when they start.
        config.webhooks_with(|_| None, true)?;
        Ok(config)
    }

    /// Whether `name` is a tool some `[[upstreams]]` entry may serve (its prefix is one).
    pub fn is_upstream_tool(&self, name: &str) -> bool {
        self.upstreams.iter().any(|upstream| {
            name.strip_prefix(upstream.name.as_str())
                .and_then(|rest| rest.strip_prefix(crate::upstream::config::SEPARATOR))
                .is_some_and(|tool| !tool.is_empty())
        })
    }

    /// The key of the approval table that governs the served tool `served`, for an error about
    /// it: `upstreams[i].policies.<tool>.approval` for an upstream tool with a policy, else
    /// `tools.<served>.approval`.
    pub fn approval_table_key(&self, served: &str) -> String {
        for (i, upstream) in self.upstreams.iter().enumerate() {
            let tool = served
                .strip_prefix(upstream.name.as_str())
                .and_then(|rest| rest.strip_prefix(crate::upstream::config::SEPARATOR));
            if let Some(tool) = tool
                && upstream.policies.contains_key(tool)
            {
                return format!("upstreams[{i}].policies.{tool}.approval");
            }
        }
        format!("tools.{served}.approval")
    }

    /// The upstreams, each with the `${NAME}`s of its headers and environment read from the
    /// process environment; one that is not set stops the start, naming it.
    pub fn upstreams(&self) -> Result<Vec<crate::upstream::config::Upstream>, ConfigError> {
        self.upstreams
            .iter()
            .enumerate()
            .map(|(i, upstream)| {
                let mut resolved = upstream
                    .resolve(|name| std::env::var(name).ok())
                    .map_err(checks::in_upstream(i))?;
                // The exchange's issuer, by name: its URL finds its token endpoint.
                if let Some(auth) = &mut resolved.auth {
                    auth.issuer_url = self
                        .auth
                        .issuers
                        .iter()
                        .find(|issuer| issuer.name == auth.issuer)
                        .map(|issuer| issuer.issuer.clone());
                }
                Ok(resolved)
            })
            .collect()
    }

    /// The API keys, with their hashes decoded. Fails on a hash that is not 64 hex digits or a
    /// name used twice.
    pub fn api_keys(&self) -> Result<Vec<ApiKey>, ConfigError> {
        self.auth.api_keys()
    }

    /// `[[people]]`: each person's rights are the API key of the same name's, else their own
    /// `decides`; with no key and no identity provider (auth off) everyone is the anonymous
    /// admin.
    pub fn people(&self) -> Result<crate::notify::People, ConfigError> {
        let keys = self.api_keys()?;
        let auth_off = keys.is_empty() && self.auth.issuers.is_empty();
        let key_principal = |name: &str| {
            keys.iter()
                .find(|key| key.name == name)
                .map(ApiKey::principal)
        };
        crate::notify::People::new(&self.people, key_principal, auth_off).map_err(|err| {
            ConfigError::Invalid {
                key: "people".into(),
                message: err.0,
            }
        })
    }

    /// The notification channels (`[[notify]]`) and the people they reach (`[[people]]`), each
    /// channel's secrets read from the environment.
    pub fn notify(&self) -> Result<crate::notify::Notify, ConfigError> {
        self.notify_with(|name| std::env::var(name).ok(), false)
    }

    /// The channels, their secrets read by `env` (a variable's value by its name); `checking`
    /// only the file (a variable not set yet is let through).
    pub fn notify_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
        checking: bool,
    ) -> Result<crate::notify::Notify, ConfigError> {
        let channels =
            crate::notify::config::channels(&self.notify, env, checking).map_err(|err| {
                ConfigError::Invalid {
                    key: format!("notify.{}", err.key),
                    message: err.why,
                }
            })?;
        Ok(crate::notify::Notify::new(channels, self.people()?))
    }

    /// The identity providers (see [`AuthConfig::issuers`]), the scopes the tools require
    /// offered in the resource's metadata.
    pub fn issuers(&self) -> Result<crate::identity::Issuers, ConfigError> {
        let mut required: Vec<String> = self
            .dispatch_config()
            .tools
            .values()
            .flat_map(|tool| tool.required_scopes.iter().cloned())
            .collect();
        required.sort();
        required.dedup();
        self.auth.issuers(&required)
    }

    /// `[audit.export]`, its URLs checked now.
    pub fn audit_export(&self) -> Result<crate::audit::export::ExportConfig, ConfigError> {
        self.audit
            .export
            .check()
            .map_err(|message| ConfigError::Invalid {
                key: "audit.export".into(),
                message,
            })?;
        Ok(self.audit.export.clone())
    }

    /// How attestations are signed: `[signing]`, its key file read and checked now. An error
    /// names the key.
    pub fn signing(&self) -> Result<crate::signing::Signing, ConfigError> {
        crate::signing::Signing::from_config(&self.signing).map_err(|message| {
            ConfigError::Invalid {
                key: "signing.key_file".into(),
                message,
            }
        })
    }

    /// The webhooks, checked: each URL, each secret (from the file or the environment), each
    /// event type. An error names the key.
    pub fn webhooks(&self) -> Result<crate::feed::webhooks::Webhooks, ConfigError> {
        self.webhooks_with(|name| std::env::var(name).ok(), false)
    }

    /// The webhooks, with secrets named by `secret_env` read by `env`; `checking` only the
    /// file, a variable that is not set is let through.
    fn webhooks_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
        checking: bool,
    ) -> Result<crate::feed::webhooks::Webhooks, ConfigError> {
        crate::feed::webhooks::config::webhooks(
            &self.webhooks,
            &self.webhook_delivery,
            env,
            checking,
        )
        .map_err(ConfigError::from)
    }

    /// The `Host` values every route accepts: the bound address (and `localhost` on a loopback
    /// one), `[server] allowed_hosts` and `[mcp] allowed_hosts`.
    pub fn allowed_hosts(&self) -> Vec<String> {
        let listed: Vec<String> = self
            .server
            .allowed_hosts
            .iter()
            .chain(&self.mcp.allowed_hosts)
            .cloned()
            .collect();
        crate::http::hosts::allowed_for(self.bind.ip(), &listed)
    }

    /// Timeouts, concurrency limits, approval TTLs, retries and quotas, as the dispatcher takes
    /// them.
    pub fn dispatch_config(&self) -> DispatchConfig {
        let tools = self
            .tools
            .iter()
            .map(|(name, tool)| (name.clone(), tool.clone()));
        let upstream_tools = self
            .upstreams
            .iter()
            .flat_map(UpstreamConfig::tool_overrides);
        crate::dispatch::config::dispatch_config(
            &self.tool_defaults,
            tools.chain(upstream_tools),
            &self.retry,
            self.max_in_flight,
            // A `[quotas]` table that leaves `max_held` out keeps its default.
            self.auth.quotas(QuotaConfig {
                max_held: self.quotas.max_held.or(Some(DEFAULT_MAX_HELD)),
                ..self.quotas
            }),
        )
    }
}

/// An environment value as TOML when it parses as a TOML value (`3000`, `true`), else a string.
fn env_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

/// Sets `path` in `table`, creating tables on the way; fails if a non-table is in the way.
fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), ()> {
    match path {
        [] => Err(()),
        [key] => {
            table.insert(key.clone(), value);
            Ok(())
        }
        [head, rest @ ..] => {
            let next = table
                .entry(head.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match next {
                toml::Value::Table(inner) => set_path(inner, rest, value),
                _ => Err(()),
            }
        }
    }
}
