//! The checks run once the file is read, before anything starts: numbers that must be at least
//! 1 (or longer than another), approval schemas, quotas, and what one section says about another (a
//! tool's settings given both under `[tools]` and in its upstream's policies).
//!
//! They run in one fixed order, so of several mistakes the same one is named first every time.

use super::{Config, ConfigError};
use crate::base::Invalid;
use crate::dispatch::config::check_required_scopes;

impl Config {
    /// Each count, size and duration is at least 1, and a lease outlasts its heartbeat.
    pub(super) fn check_numbers(&self) -> Result<(), ConfigError> {
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
            ("server.max_connections", self.server.max_connections),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        for (key, value) in [
            ("server.header_timeout_ms", self.server.header_timeout_ms),
            ("server.body_timeout_ms", self.server.body_timeout_ms),
            ("server.idle_timeout_ms", self.server.idle_timeout_ms),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// `[inbox]`'s sign-in: some way left to sign in, and `[inbox.oidc]` naming an issuer.
    pub(super) fn check_inbox(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            message,
        };
        self.inbox.check().map_err(|err| invalid("inbox", err.0))?;
        if let Some(oidc) = &self.inbox.oidc
            && !self
                .auth
                .issuers
                .iter()
                .any(|issuer| issuer.name == oidc.issuer)
        {
            return Err(invalid(
                "inbox.oidc.issuer",
                format!(
                    "`{}` is not the name of an [[auth.issuers]] entry",
                    oidc.issuer
                ),
            ));
        }
        Ok(())
    }

    /// Each `approval_schema` compiles, and is only set where approval is required; each
    /// `required_scopes` lists scopes.
    pub(super) fn check_approvals(&self) -> Result<(), ConfigError> {
        for (name, tool) in &self.tools {
            if let Some(scopes) = &tool.required_scopes {
                check_required_scopes(scopes).map_err(|message| ConfigError::Invalid {
                    key: format!("tools.{name}.required_scopes"),
                    message,
                })?;
            }
            tool.check_approval()
                .map_err(|(key, message)| ConfigError::Invalid {
                    key: format!("tools.{name}.{key}"),
                    message,
                })?;
        }
        Ok(())
    }

    /// Each quota table's values: at least 1, a `burst` only beside its rate, no `max_held` on a
    /// tool. (An upstream tool's policy is checked with its upstream.)
    pub(super) fn check_quotas(&self) -> Result<(), ConfigError> {
        let keys = self.auth.keys.iter().enumerate().filter_map(|(i, key)| {
            key.quotas
                .map(|quotas| (format!("auth.keys[{i}].quotas"), quotas, false))
        });
        let tools = self.tools.iter().filter_map(|(name, tool)| {
            tool.quotas
                .map(|quotas| (format!("tools.{name}.quotas"), quotas, true))
        });
        let tables = [("quotas".to_owned(), self.quotas, false)];
        for (table, quotas, of_tool) in tables.into_iter().chain(keys).chain(tools) {
            quotas
                .check(of_tool)
                .map_err(|(key, message)| ConfigError::Invalid {
                    key: format!("{table}.{key}"),
                    message,
                })?;
        }
        Ok(())
    }

    /// Each `[[upstreams]]` entry is whole, names are unique, and no tool's settings are given
    /// both under `[tools]` and in its upstream's policies.
    pub(super) fn check_upstreams(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, upstream) in self.upstreams.iter().enumerate() {
            upstream.check().map_err(in_upstream(i))?;
            if let Some(auth) = &upstream.auth
                && !self
                    .auth
                    .issuers
                    .iter()
                    .any(|issuer| issuer.name == auth.issuer)
            {
                return Err(ConfigError::Invalid {
                    key: format!("upstreams[{i}].auth.issuer"),
                    message: format!(
                        "`{}` is not the name of an [[auth.issuers]] entry: the callers' tokens \
                         it exchanges come from one",
                        auth.issuer
                    ),
                });
            }
            if !names.insert(upstream.name.as_str()) {
                return Err(ConfigError::Invalid {
                    key: format!("upstreams[{i}].name"),
                    message: format!("another upstream is named `{}`", upstream.name),
                });
            }
            for tool in upstream.policies.keys() {
                let served = upstream.served_name(tool);
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
}

/// An `[[upstreams]]` entry's error as the configuration's, its key under `upstreams[i]`.
pub(super) fn in_upstream(i: usize) -> impl FnOnce(Invalid) -> ConfigError {
    move |invalid| ConfigError::Invalid {
        key: format!("upstreams[{i}].{}", invalid.key),
        message: invalid.message,
    }
}
