//! Configuration of the `toolgate` binary, read once at start-up.
//!
//! Every key has a default, so a file sets only what it changes (`config/default.toml` lists
//! every key with its default). Layers, each overriding the one before: the defaults, the file
//! given with `--config`, `TOOLGATE_*` environment variables, then command-line flags. An
//! environment variable names a key in upper case, with `__` between a table and its key:
//! `TOOLGATE_BIND`, `TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS`. An unknown key or a value of the
//! wrong type stops the start with an error naming the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::contract::retry::RetryPolicy;
use crate::dispatch::{DispatchConfig, ToolSettings};
use crate::server::auth::{ApiKey, Role};

/// The prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "TOOLGATE_";

/// Keys whose values are strings, taken from the environment verbatim.
const STRING_KEYS: &[&str] = &["bind", "data_dir", "log", "store.database_url"];

/// Everything the binary is configured with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The address the HTTP server listens on.
    pub bind: SocketAddr,
    /// The directory holding the database (`toolgate.db`) and the example outbox.
    pub data_dir: PathBuf,
    /// The log filter (tracing's `EnvFilter` syntax); `RUST_LOG` wins when set.
    pub log: String,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// The deepest JSON nesting accepted in inputs and outputs.
    pub max_json_depth: usize,
    /// The most requests handled at once; more get `503 overloaded`.
    pub max_in_flight: usize,
    /// Retries of live failures of read and idempotent tools (writes never retry).
    pub retry: RetryConfig,
    /// Settings of every tool not named under `[tools]`.
    pub tool_defaults: ToolConfig,
    /// Settings by tool name; unset keys fall back to `tool_defaults`.
    pub tools: BTreeMap<String, ToolOverride>,
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
    pub upstreams: Vec<crate::upstream::config::UpstreamConfig>,
}

/// `[inbox]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InboxConfig {
    /// Whether `/inbox` is served.
    pub enabled: bool,
    /// How long a sign-in lasts, in seconds.
    pub session_ttl_s: u64,
    /// Whether the inbox's cookies are always `Secure` (HTTPS only).
    pub secure_cookies: bool,
}

impl Default for InboxConfig {
    fn default() -> Self {
        let options = crate::inbox::InboxOptions::default();
        InboxConfig {
            enabled: options.enabled,
            session_ttl_s: options.session_ttl.as_secs(),
            secure_cookies: options.secure_cookies,
        }
    }
}

impl InboxConfig {
    /// The inbox's options.
    pub fn options(&self) -> crate::inbox::InboxOptions {
        crate::inbox::InboxOptions {
            enabled: self.enabled,
            session_ttl: Duration::from_secs(self.session_ttl_s),
            secure_cookies: self.secure_cookies,
        }
    }
}

/// `[mcp]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Whether `/mcp` is served.
    pub enabled: bool,
    /// `Host` names accepted besides the bound address (and `localhost` on a loopback one).
    pub allowed_hosts: Vec<String>,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            enabled: true,
            allowed_hosts: Vec::new(),
        }
    }
}

impl McpConfig {
    /// The door's options for a server bound to `bind`.
    pub fn options(&self, bind: std::net::IpAddr) -> crate::mcp::McpOptions {
        crate::mcp::McpOptions {
            enabled: self.enabled,
            allowed_hosts: crate::mcp::McpOptions::hosts_for(bind, &self.allowed_hosts),
        }
    }
}

pub use crate::feed::webhooks::config::{WebhookConfig, WebhookDeliveryConfig};

/// `[feed]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeedConfig {
    /// How long feed entries are kept, in seconds; a cursor older than that is expired.
    pub retention_s: u64,
}

impl Default for FeedConfig {
    fn default() -> Self {
        FeedConfig {
            retention_s: 86_400,
        }
    }
}

/// `[store]`.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// A PostgreSQL URL (`postgres://user:password@host:port/db`); empty: the embedded SQLite
    /// file in `data_dir`.
    pub database_url: String,
    /// The most pooled connections to PostgreSQL for reads.
    pub pool_size: usize,
    /// How long a replica's lease lasts without a heartbeat, in milliseconds.
    pub lease_ttl_ms: u64,
    /// How often a replica renews its lease and sweeps the calls of dead ones, in milliseconds.
    pub heartbeat_ms: u64,
}

impl std::fmt::Debug for StoreConfig {
    // The URL may carry a password: shown redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field(
                "database_url",
                &crate::store::redact_url(&self.database_url),
            )
            .field("pool_size", &self.pool_size)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .finish()
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        let options = crate::store::PostgresOptions::default();
        StoreConfig {
            database_url: String::new(),
            pool_size: options.pool_size,
            lease_ttl_ms: options.lease_ttl.as_millis() as u64,
            heartbeat_ms: options.heartbeat.as_millis() as u64,
        }
    }
}

impl StoreConfig {
    /// The PostgreSQL URL, when one is set.
    pub fn postgres_url(&self) -> Option<&str> {
        Some(self.database_url.trim()).filter(|url| !url.is_empty())
    }

    /// The PostgreSQL store's options.
    pub fn postgres_options(&self) -> crate::store::PostgresOptions {
        crate::store::PostgresOptions {
            pool_size: self.pool_size,
            lease_ttl: Duration::from_millis(self.lease_ttl_ms),
            heartbeat: Duration::from_millis(self.heartbeat_ms),
        }
    }
}

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
    pub approval_schema: Option<serde_json::Value>,
}

/// `[auth]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `[[auth.keys]]`; none turns auth off (allowed only on a loopback address).
    pub keys: Vec<KeyConfig>,
}

/// One `[[auth.keys]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// The key's name, recorded as the actor of what it does.
    pub name: String,
    /// `caller`, `approver` or `admin`.
    pub role: Role,
    /// The SHA-256 of the token, in hex (`toolgate hash-token` prints it).
    pub token_sha256: String,
}

/// Settings of the example tools.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExamplesConfig {
    /// Whether the example tools are served.
    pub enabled: bool,
    /// `issue_refund` suspends for approval above this amount, in cents.
    pub approval_threshold_cents: u64,
    /// How long `send_email` takes before it appends to the outbox, in milliseconds.
    pub send_email_delay_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("toolgate-data"),
            log: "info".into(),
            max_body_bytes: crate::server::DEFAULT_MAX_BODY_BYTES,
            max_json_depth: crate::server::DEFAULT_MAX_JSON_DEPTH,
            max_in_flight: crate::server::DEFAULT_MAX_IN_FLIGHT,
            retry: RetryConfig::default(),
            tool_defaults: ToolConfig::default(),
            tools: BTreeMap::new(),
            auth: AuthConfig::default(),
            examples: ExamplesConfig::default(),
            store: StoreConfig::default(),
            feed: FeedConfig::default(),
            webhooks: Vec::new(),
            webhook_delivery: WebhookDeliveryConfig::default(),
            mcp: McpConfig::default(),
            inbox: InboxConfig::default(),
            upstreams: Vec::new(),
        }
    }
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

impl Default for ExamplesConfig {
    fn default() -> Self {
        ExamplesConfig {
            enabled: true,
            approval_threshold_cents: 10_000,
            send_email_delay_ms: 0,
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
        config.check_numbers()?;
        config.check_approvals()?;
        config.check_upstreams()?;
        // The file's webhooks are checked now; their `secret_env` is read when they start.
        config.webhooks_with(|_| None, true)?;
        Ok(config)
    }

    fn check_numbers(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: key.to_owned(),
            message: message.to_owned(),
        };
        if self.retry.max_attempts == 0 {
            return Err(invalid("retry.max_attempts", "must be at least 1"));
        }
        let mut concurrency = vec![(
            "tool_defaults.max_concurrency".to_owned(),
            Some(self.tool_defaults.max_concurrency),
        )];
        let mut timeouts = vec![(
            "tool_defaults.timeout_ms".to_owned(),
            Some(self.tool_defaults.timeout_ms),
        )];
        for (name, tool) in &self.tools {
            concurrency.push((
                format!("tools.{name}.max_concurrency"),
                tool.max_concurrency,
            ));
            timeouts.push((format!("tools.{name}.timeout_ms"), tool.timeout_ms));
        }
        for (key, value) in concurrency {
            if value == Some(0) {
                return Err(invalid(&key, "must be at least 1"));
            }
        }
        for (key, value) in timeouts {
            if value == Some(0) {
                return Err(invalid(&key, "must be at least 1"));
            }
        }
        if self.store.heartbeat_ms == 0 {
            return Err(invalid("store.heartbeat_ms", "must be at least 1"));
        }
        if self.store.lease_ttl_ms <= self.store.heartbeat_ms {
            return Err(invalid(
                "store.lease_ttl_ms",
                "must be longer than store.heartbeat_ms, or a live replica's lease would lapse \
                 between two heartbeats",
            ));
        }
        if self.feed.retention_s == 0 {
            return Err(invalid("feed.retention_s", "must be at least 1"));
        }
        if self.inbox.session_ttl_s == 0 {
            return Err(invalid("inbox.session_ttl_s", "must be at least 1"));
        }
        for (key, value) in [
            ("store.pool_size", self.store.pool_size),
            ("max_in_flight", self.max_in_flight),
            ("max_json_depth", self.max_json_depth),
            ("max_body_bytes", self.max_body_bytes),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// Each `approval_schema` compiles, and is only set where approval is required.
    fn check_approvals(&self) -> Result<(), ConfigError> {
        for (name, tool) in &self.tools {
            if let Some(schema) = &tool.approval_schema {
                let key = format!("tools.{name}.approval_schema");
                crate::dispatch::ApprovalGate::with_schema(schema.clone()).map_err(|message| {
                    ConfigError::Invalid {
                        key: key.clone(),
                        message: format!("is not a JSON Schema: {message}"),
                    }
                })?;
                if tool.require_approval != Some(true) {
                    return Err(ConfigError::Invalid {
                        key,
                        message: "is only asked with require_approval = true".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Each `[[upstreams]]` entry is whole, names are unique, and no tool's settings are given
    /// both under `[tools]` and in its upstream's policies.
    fn check_upstreams(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, upstream) in self.upstreams.iter().enumerate() {
            upstream.check().map_err(|invalid| ConfigError::Invalid {
                key: format!("upstreams[{i}].{}", invalid.key),
                message: invalid.message,
            })?;
            if !names.insert(upstream.name.as_str()) {
                return Err(ConfigError::Invalid {
                    key: format!("upstreams[{i}].name"),
                    message: format!("another upstream is named `{}`", upstream.name),
                });
            }
            for tool in upstream.policies.keys() {
                let served = format!(
                    "{}{}{tool}",
                    upstream.name,
                    crate::upstream::config::SEPARATOR
                );
                if self.tools.contains_key(&served) {
                    return Err(ConfigError::Invalid {
                        key: format!("tools.{served}"),
                        message: format!(
                            "set in upstreams[{i}].policies.{tool} too: give its settings in \
                             one place"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether `name` is a tool some `[[upstreams]]` entry may serve (its prefix is one).
    pub fn is_upstream_tool(&self, name: &str) -> bool {
        self.upstreams.iter().any(|upstream| {
            name.strip_prefix(upstream.name.as_str())
                .and_then(|rest| rest.strip_prefix(crate::upstream::config::SEPARATOR))
                .is_some_and(|tool| !tool.is_empty())
        })
    }

    /// The upstreams, each with the `${NAME}`s of its headers and environment read from the
    /// process environment; one that is not set stops the start, naming it.
    pub fn upstreams(&self) -> Result<Vec<crate::upstream::config::Upstream>, ConfigError> {
        self.upstreams
            .iter()
            .enumerate()
            .map(|(i, upstream)| {
                upstream
                    .resolve(|name| std::env::var(name).ok())
                    .map_err(|invalid| ConfigError::Invalid {
                        key: format!("upstreams[{i}].{}", invalid.key),
                        message: invalid.message,
                    })
            })
            .collect()
    }

    /// The API keys, with their hashes decoded. Fails on a hash that is not 64 hex digits or a
    /// name used twice.
    pub fn api_keys(&self) -> Result<Vec<ApiKey>, ConfigError> {
        let mut keys: Vec<ApiKey> = Vec::with_capacity(self.auth.keys.len());
        for (index, key) in self.auth.keys.iter().enumerate() {
            let mut hash = [0u8; 32];
            hex::decode_to_slice(key.token_sha256.trim(), &mut hash).map_err(|_| {
                ConfigError::Invalid {
                    key: format!("auth.keys[{index}].token_sha256"),
                    message: "must be a SHA-256 in hex (64 digits); see `toolgate hash-token`"
                        .into(),
                }
            })?;
            if key.name.trim().is_empty() || keys.iter().any(|k| k.name == key.name) {
                return Err(ConfigError::Invalid {
                    key: format!("auth.keys[{index}].name"),
                    message: format!("`{}` is empty or used by another key", key.name),
                });
            }
            keys.push(ApiKey {
                name: key.name.clone(),
                role: key.role,
                token_sha256: hash,
            });
        }
        Ok(keys)
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
    }

    /// Timeouts, concurrency limits, approval TTLs and retries, as the dispatcher takes them.
    pub fn dispatch_config(&self) -> DispatchConfig {
        let defaults = &self.tool_defaults;
        let settings = |tool: &ToolOverride| ToolSettings {
            timeout: Duration::from_millis(tool.timeout_ms.unwrap_or(defaults.timeout_ms)),
            max_concurrency: tool.max_concurrency.unwrap_or(defaults.max_concurrency),
            approval_ttl: tool
                .approval_ttl_s
                .or(defaults.approval_ttl_s)
                .map(Duration::from_secs),
            approval: (tool.require_approval == Some(true)).then(|| {
                tool.approval_schema
                    .clone()
                    .and_then(|schema| crate::dispatch::ApprovalGate::with_schema(schema).ok())
                    .unwrap_or_default()
            }),
        };
        // An upstream tool's policy is its `[tools.<upstream>__<tool>]`.
        let upstream_tools = self.upstreams.iter().flat_map(|upstream| {
            upstream.policies.iter().map(|(tool, policy)| {
                let name = format!(
                    "{}{}{tool}",
                    upstream.name,
                    crate::upstream::config::SEPARATOR
                );
                let settings = ToolOverride {
                    timeout_ms: policy.timeout_ms,
                    max_concurrency: policy.max_concurrency,
                    approval_ttl_s: policy.approval_ttl_s,
                    require_approval: policy.require_approval,
                    approval_schema: policy.approval_schema.clone(),
                };
                (name, settings)
            })
        });
        DispatchConfig {
            defaults: settings(&ToolOverride::default()),
            tools: self
                .tools
                .iter()
                .map(|(name, tool)| (name.clone(), settings(tool)))
                .chain(upstream_tools.map(|(name, tool)| {
                    let settings = settings(&tool);
                    (name, settings)
                }))
                .collect(),
            retry: RetryPolicy {
                max_attempts: self.retry.max_attempts,
                initial_backoff: Duration::from_millis(self.retry.initial_backoff_ms),
                max_backoff: Duration::from_millis(self.retry.max_backoff_ms),
            },
            max_running_calls: self.max_in_flight,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        let text = include_str!("../config/default.toml");
        assert_eq!(Config::from_toml(text).unwrap(), Config::default());
    }

    #[test]
    fn env_and_flags_override_in_order() {
        let config = Config::load(
            None,
            env(&[
                ("TOOLGATE_BIND", "0.0.0.0:9000"),
                ("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "3000"),
                ("TOOLGATE_EXAMPLES__ENABLED", "false"),
                ("TOOLGATE_LOG", "debug,hyper=warn"),
                ("TOOLGATE_DATA_DIR", "2024"),
                // The test suite's, not a config key: ignored, not refused.
                (
                    "TOOLGATE_TEST_DATABASE_URL",
                    "postgres://postgres@127.0.0.1/postgres",
                ),
                ("PATH", "/usr/bin"),
            ]),
            Overrides {
                bind: Some("127.0.0.1:1".parse().unwrap()),
                data_dir: Some("/tmp/x".into()),
                database_url: None,
            },
        )
        .unwrap();
        assert_eq!(config.bind, "127.0.0.1:1".parse().unwrap());
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"), "the flag wins");
        assert_eq!(config.log, "debug,hyper=warn");
        assert_eq!(config.examples.send_email_delay_ms, 3000);
        assert!(!config.examples.enabled);
    }

    #[test]
    fn string_keys_from_the_environment_stay_strings() {
        let config = Config::load(
            None,
            env(&[("TOOLGATE_DATA_DIR", "2024"), ("TOOLGATE_LOG", "true")]),
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(config.data_dir, PathBuf::from("2024"));
        assert_eq!(config.log, "true");
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key() {
        let err = Config::from_toml("[examples]\napproval_threshold = 5\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("examples") && text.contains("approval_threshold"),
            "{text}"
        );

        let err = Config::from_toml("[examples]\nsend_email_delay_ms = \"soon\"\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("examples.send_email_delay_ms"), "{text}");

        let err =
            Config::load(None, env(&[("TOOLGATE_BOGUS", "1")]), Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");

        let err = Config::from_toml("bind = \"not an address\"").unwrap_err();
        assert!(err.to_string().contains("`bind`"), "{err}");

        let err = Config::from_toml(
            "[[auth.keys]]\nname = \"a\"\nrole = \"caller\"\ntoken_sha256 = \"abc\"\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("auth.keys[0].token_sha256"),
            "{err}"
        );
        let err = Config::from_toml(
            "[[auth.keys]]\nname = \"a\"\nrole = \"root\"\ntoken_sha256 = \"abc\"\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("auth.keys[0].role"), "{err}");
        let err = Config::from_toml("[tools.echo]\ntimeout_ms = 0\n").unwrap_err();
        assert!(err.to_string().contains("tools.echo.timeout_ms"), "{err}");
    }

    #[test]
    fn the_database_url_comes_from_file_env_or_flag_and_is_never_shown() {
        let file =
            Config::from_toml("[store]\ndatabase_url = \"postgres://a:pw@h/d\"\npool_size = 4\n")
                .unwrap();
        assert_eq!(file.store.postgres_url(), Some("postgres://a:pw@h/d"));
        assert_eq!(file.store.postgres_options().pool_size, 4);
        assert!(!format!("{file:?}").contains("pw"), "{file:?}");

        let env_set = Config::load(
            None,
            env(&[("TOOLGATE_STORE__DATABASE_URL", "postgres://e@h/d")]),
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(env_set.store.postgres_url(), Some("postgres://e@h/d"));
        let flag = Config::load(
            None,
            env(&[("TOOLGATE_STORE__DATABASE_URL", "postgres://e@h/d")]),
            Overrides {
                database_url: Some("postgres://f@h/d".into()),
                ..Overrides::default()
            },
        )
        .unwrap();
        assert_eq!(flag.store.postgres_url(), Some("postgres://f@h/d"));
        assert_eq!(
            Config::default().store.postgres_url(),
            None,
            "SQLite by default"
        );

        let err =
            Config::from_toml("[store]\nlease_ttl_ms = 1000\nheartbeat_ms = 1000\n").unwrap_err();
        assert!(err.to_string().contains("store.lease_ttl_ms"), "{err}");
    }

    #[test]
    fn tool_settings_fall_back_to_the_defaults() {
        let config = Config::from_toml(
            "[tool_defaults]\ntimeout_ms = 1000\napproval_ttl_s = 60\n\
             [tools.send_email]\ntimeout_ms = 50\nmax_concurrency = 2\n",
        )
        .unwrap();
        let dispatch = config.dispatch_config();
        assert_eq!(dispatch.defaults.timeout, Duration::from_secs(1));
        let email = &dispatch.tools["send_email"];
        assert_eq!(email.timeout, Duration::from_millis(50));
        assert_eq!(email.max_concurrency, 2);
        assert_eq!(email.approval_ttl, Some(Duration::from_secs(60)));
    }

    #[test]
    fn upstream_policies_and_approval_gates_become_tool_settings() {
        let config = Config::from_toml(
            "[tools.echo]\nrequire_approval = true\n\
             [[upstreams]]\nname = \"files\"\ncommand = [\"server\"]\n\
             [upstreams.policies.write_file]\nrequire_approval = true\ntimeout_ms = 70\n\
             max_concurrency = 3\napproval_ttl_s = 9\n\
             approval_schema = { type = \"object\", required = [\"ticket\"] }\n",
        )
        .unwrap();
        let dispatch = config.dispatch_config();
        let echo = dispatch.tools["echo"].approval.as_ref().unwrap();
        assert_eq!(echo, &crate::dispatch::ApprovalGate::default());
        let write = &dispatch.tools["files__write_file"];
        assert_eq!(write.timeout, Duration::from_millis(70));
        assert_eq!(write.max_concurrency, 3);
        assert_eq!(write.approval_ttl, Some(Duration::from_secs(9)));
        let gate = write.approval.as_ref().unwrap();
        assert_eq!(gate.input_schema["required"], serde_json::json!(["ticket"]));
        assert!(config.is_upstream_tool("files__anything"));
        assert!(!config.is_upstream_tool("files__"));
        assert!(!config.is_upstream_tool("other__x"));

        let refused = |text: &str| match Config::from_toml(text) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        // A schema without the gate it is for, or one that does not compile.
        assert_eq!(
            refused("[tools.echo]\napproval_schema = { type = \"object\" }\n"),
            "tools.echo.approval_schema"
        );
        assert_eq!(
            refused("[tools.echo]\nrequire_approval = true\napproval_schema = { type = 5 }\n"),
            "tools.echo.approval_schema"
        );
        // One tool's settings in two places; two upstreams of one name.
        let twice = "[tools.files__w]\ntimeout_ms = 5\n[[upstreams]]\nname = \"files\"\n\
                     command = [\"s\"]\n[upstreams.policies.w]\ntimeout_ms = 6\n";
        assert_eq!(refused(twice), "tools.files__w");
        let same = "[[upstreams]]\nname = \"a\"\ncommand = [\"s\"]\n\
                    [[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        assert_eq!(refused(same), "upstreams[1].name");
    }
}
