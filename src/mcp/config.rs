//! `[mcp]`: the MCP door's config section, and its translation into
//! [`McpOptions`](super::McpOptions) for the address the server is bound to.

use serde::Deserialize;

use super::McpOptions;

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
    // Served, as the door is by default; no extra hosts, since the bound address and
    // `localhost` are accepted without being listed (see `McpOptions::hosts_for`).
    fn default() -> Self {
        McpConfig {
            enabled: McpOptions::default().enabled,
            allowed_hosts: Vec::new(),
        }
    }
}

impl McpConfig {
    /// The door's options for a server bound to `bind`.
    pub fn options(&self, bind: std::net::IpAddr) -> McpOptions {
        McpOptions {
            enabled: self.enabled,
            allowed_hosts: McpOptions::hosts_for(bind, &self.allowed_hosts),
        }
    }
}
