//! Configuration of the `toolgate` binary, read once at start-up.
//!
//! Every key has a default, so a file sets only what it changes (`config/default.toml` lists
//! every key with its default). Layers, each overriding the one before: the defaults, the file
//! given with `--config`, `TOOLGATE_*` environment variables, then command-line flags. An
//! environment variable names a key in upper case, with `__` between a table and its key:
//! `TOOLGATE_BIND`, `TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS`. An unknown key or a value of the
//! wrong type stops the start with an error naming the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "TOOLGATE_";

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
    /// The example tools.
    pub examples: ExamplesConfig,
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
            examples: ExamplesConfig::default(),
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
            let path: Vec<String> = key.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().any(String::is_empty) {
                return Err(ConfigError::BadEnv { name });
            }
            set_path(&mut table, &path, env_value(&raw))
                .map_err(|()| ConfigError::BadEnv { name: name.clone() })?;
        }
        let mut config = Config::from_table(table)?;
        if let Some(bind) = overrides.bind {
            config.bind = bind;
        }
        if let Some(data_dir) = overrides.data_dir {
            config.data_dir = data_dir;
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
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|err| {
            ConfigError::Invalid {
                key: err.path().to_string(),
                message: err.inner().to_string(),
            }
        })
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
                ("PATH", "/usr/bin"),
            ]),
            Overrides {
                bind: Some("127.0.0.1:1".parse().unwrap()),
                data_dir: Some("/tmp/x".into()),
            },
        )
        .unwrap();
        assert_eq!(config.bind, "127.0.0.1:1".parse().unwrap());
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(config.log, "debug,hyper=warn");
        assert_eq!(config.examples.send_email_delay_ms, 3000);
        assert!(!config.examples.enabled);
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
    }
}
