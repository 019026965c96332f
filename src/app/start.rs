//! The checks a server passes before it serves ([`ServerBuilder::start`]): what the binary
//! refuses at start-up, refused the same for an app that embeds the builder.
//!
//! Each check is about what the builder was given, taken together: the credentials against the
//! address it listens on, the per-tool settings against the tools served, the approval
//! conditions against the tools' input schemas, the webhooks against the addresses they resolve
//! to. A refusal is a [`StartError`] variant, so its caller words it in its own terms (the
//! binary names the config key to change).

use std::net::SocketAddr;

use super::{ServerBuilder, Serving};
use crate::feed::webhooks::WebhookError;
use crate::store::StoreError;

/// Why [`ServerBuilder::start`] refused to serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Neither an API key nor an identity provider, on an address other hosts reach (see
    /// [`ServerBuilder::listen_address`]), without [`ServerBuilder::insecure_no_auth`]: anyone
    /// who can reach the server could call tools and approve calls.
    #[error(
        "refusing to listen on {addr} without API keys: anyone who can reach it could call \
         tools and approve calls"
    )]
    NoCredentials {
        /// The address the server was to listen on.
        addr: SocketAddr,
    },
    /// Settings ([`DispatchConfig`](crate::dispatch::DispatchConfig)'s `tools`) for a tool that
    /// is not served, nor in the namespace of an upstream MCP server: a misspelt name would
    /// leave the tool it meant without its approval or limits.
    #[error("there are settings for `{tool}`, and no tool is named `{tool}`")]
    UnknownTool {
        /// The name the settings are under.
        tool: String,
    },
    /// An approval condition or reason names a field of `input` that its tool's input schema
    /// cannot have. An upstream tool is checked against the schema it listed at start.
    #[error("the approval `{key}` of `{tool}` {message}")]
    ApprovalField {
        /// The served tool.
        tool: String,
        /// `when` or `reason`.
        key: &'static str,
        /// What is wrong with the field it names.
        message: String,
    },
    /// A webhook whose host resolves to a private address it may not reach.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// The webhooks' outbox could not be started in the store.
    #[error("cannot start the webhooks' outbox: {0}")]
    Outbox(StoreError),
}

impl ServerBuilder {
    /// The address the server listens on, for [`start`](Self::start)'s checks: with neither API
    /// keys nor identity providers it serves a loopback address only (unless
    /// [`insecure_no_auth`](Self::insecure_no_auth)), and it warns when it listens on every
    /// interface with no `Host` name allowed. Unset, neither is checked: the app that serves
    /// the router decides where.
    pub fn listen_address(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// Whether [`start`](Self::start) may serve without credentials on an address other hosts
    /// reach (the binary's `--insecure-no-auth`); every request then acts as admin.
    pub fn insecure_no_auth(mut self, allowed: bool) -> Self {
        self.insecure_no_auth = allowed;
        self
    }

    /// The server, once it passes the checks the binary makes at start-up: credentials on a
    /// non-loopback [`listen_address`](Self::listen_address), settings that name a served
    /// tool, approval conditions over fields the inputs can have, webhooks whose targets may
    /// be reached (and their outbox started in the store). Then as [`serve`](Self::serve),
    /// inside the current tokio runtime.
    pub async fn start(mut self) -> Result<Serving, StartError> {
        // Upstream tools are served as their pins say from the first request on.
        self.upstreams.pin(&self.store).await;
        self.check_credentials()?;
        self.check_tool_settings()?;
        self.check_approval_fields()?;
        self.webhooks.check_targets().await?;
        let channels = self.notify.is_some();
        self.webhooks
            .initialize(self.store.as_ref(), channels)
            .await
            .map_err(StartError::Outbox)?;
        Ok(self.serve())
    }

    fn check_credentials(&self) -> Result<(), StartError> {
        let Some(addr) = self.listen else {
            return Ok(());
        };
        if self.keys.is_empty() && !self.issuers.enabled() {
            if !addr.ip().is_loopback() && !self.insecure_no_auth {
                return Err(StartError::NoCredentials { addr });
            }
            tracing::warn!(
                bind = %addr,
                "auth is off: no [[auth.keys]] configured, every request acts as admin"
            );
        }
        let own = addr.ip().to_string();
        if addr.ip().is_unspecified() && self.allowed_hosts.iter().all(|host| *host == own) {
            tracing::warn!(
                bind = %addr,
                "no Host name is accepted yet (against DNS rebinding): list the names clients \
                 reach this server by in [server] allowed_hosts"
            );
        }
        Ok(())
    }

    fn check_tool_settings(&self) -> Result<(), StartError> {
        let mut named: Vec<&String> = self.dispatch.tools.keys().collect();
        // The first in order, so a refusal names the same one each time.
        named.sort();
        match named
            .into_iter()
            .find(|name| self.tools.get(name).is_none() && !self.upstreams.covers(name))
        {
            Some(tool) => Err(StartError::UnknownTool { tool: tool.clone() }),
            None => Ok(()),
        }
    }

    fn check_approval_fields(&self) -> Result<(), StartError> {
        for tool in self.tools.iter().chain(self.upstreams.tools()) {
            let Some(gate) = self
                .dispatch
                .tools
                .get(tool.name())
                .and_then(|settings| settings.approval.as_ref())
            else {
                continue;
            };
            gate.check_input_fields(tool.input_schema())
                .map_err(|(key, message)| StartError::ApprovalField {
                    tool: tool.name().to_owned(),
                    key,
                    message,
                })?;
        }
        Ok(())
    }
}
