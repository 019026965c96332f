//! `[server]`: the HTTP server's own limits, on connections (see [`super::connections`]) and on
//! request bodies (see `super::body`).

use std::time::Duration;

use serde::Deserialize;

use super::connections::ConnectionLimits;

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// How long a request head may take to arrive, in milliseconds.
    pub header_timeout_ms: u64,
    /// How long a request body may take to arrive, in milliseconds.
    pub body_timeout_ms: u64,
    /// How long a keep-alive connection may sit with no request, in milliseconds.
    pub idle_timeout_ms: u64,
    /// The most connections open at once.
    pub max_connections: usize,
    /// `Host` names every route accepts besides the bound address (and `localhost` on a
    /// loopback one), against DNS rebinding; `[mcp] allowed_hosts` is added to it.
    pub allowed_hosts: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let limits = ConnectionLimits::default();
        ServerConfig {
            header_timeout_ms: millis(limits.header_timeout),
            body_timeout_ms: millis(super::body::DEFAULT_BODY_TIMEOUT),
            idle_timeout_ms: millis(limits.idle_timeout),
            max_connections: limits.max_connections,
            allowed_hosts: Vec::new(),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl ServerConfig {
    /// The limits on connections.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_connections: self.max_connections,
        }
    }

    /// How long a request body may take to arrive.
    pub fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }
}
