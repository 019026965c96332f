//! `[inbox]`: the approvers' page's config section, and its translation into
//! [`InboxOptions`](super::InboxOptions).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{InboxOidc, InboxOptions};
use crate::identity::{IssuerError, Issuers};

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
    /// Whether a person may sign in by pasting an approver's or admin's API key.
    pub key_sign_in: bool,
    /// Single sign-on with one of `[[auth.issuers]]`.
    pub oidc: Option<InboxOidcConfig>,
}

/// `[inbox.oidc]`: "Sign in with <issuer>".
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxOidcConfig {
    /// The `name` of the `[[auth.issuers]]` entry people sign in with.
    pub issuer: String,
    /// This server's client id at that issuer.
    pub client_id: String,
    /// The environment variable holding the client's secret.
    pub client_secret_env: String,
    /// The scopes asked for (default `["openid", "profile", "email"]`).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The callback's absolute URL, as registered with the issuer
    /// (`https://tools.example.com/inbox/oidc/callback`). Configured, never taken from a
    /// request's `Host`: a forged one could send the code elsewhere.
    pub redirect_url: String,
}

fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email"].map(str::to_owned).to_vec()
}

impl Default for InboxConfig {
    // The inbox's own defaults, so that a server built without a file serves it alike.
    fn default() -> Self {
        let options = InboxOptions::default();
        InboxConfig {
            enabled: options.enabled,
            session_ttl_s: options.session_ttl.as_secs(),
            secure_cookies: options.secure_cookies,
            key_sign_in: options.key_sign_in,
            oidc: None,
        }
    }
}

impl InboxConfig {
    /// The inbox's options, without single sign-on (see [`InboxConfig::options_with`]).
    pub fn options(&self) -> InboxOptions {
        InboxOptions {
            enabled: self.enabled,
            session_ttl: Duration::from_secs(self.session_ttl_s),
            secure_cookies: self.secure_cookies,
            key_sign_in: self.key_sign_in,
            oidc: None,
        }
    }

    /// The inbox's options, its single sign-on with one of `issuers`, its client secret read
    /// by `env` (a variable's value by its name).
    pub fn options_with(
        &self,
        issuers: &Issuers,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<InboxOptions, IssuerError> {
        let mut options = self.options();
        self.check()?;
        if let Some(oidc) = &self.oidc {
            let secret = env(&oidc.client_secret_env).ok_or_else(|| {
                IssuerError(format!(
                    "[inbox.oidc] client_secret_env: `{}` is not set",
                    oidc.client_secret_env
                ))
            })?;
            let sign_in = issuers.sign_in(&oidc.issuer, &oidc.client_id, secret, &oidc.scopes)?;
            options.oidc = Some(InboxOidc {
                sign_in: Arc::new(sign_in),
                redirect_url: oidc.redirect_url.clone(),
            });
        }
        Ok(options)
    }

    /// What needs no secret: a way to sign in is left, and the callback URL is one.
    pub fn check(&self) -> Result<(), IssuerError> {
        if !self.key_sign_in && self.oidc.is_none() {
            return Err(IssuerError(
                "[inbox] key_sign_in = false needs [inbox.oidc]: nobody could sign in".into(),
            ));
        }
        if let Some(oidc) = &self.oidc {
            let url = &oidc.redirect_url;
            let parsed = url::Url::parse(url)
                .map_err(|err| IssuerError(format!("[inbox.oidc] redirect_url `{url}`: {err}")))?;
            let loopback = parsed.host().is_some_and(|host| match host {
                url::Host::Ipv4(ip) => ip.is_loopback(),
                url::Host::Ipv6(ip) => ip.is_loopback(),
                url::Host::Domain(name) => name == "localhost",
            });
            let secure = parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback);
            if !secure || parsed.fragment().is_some() || !parsed.path().ends_with("/oidc/callback")
            {
                return Err(IssuerError(format!(
                    "[inbox.oidc] redirect_url `{url}` must be the https URL (http only on \
                     loopback) of the inbox's /oidc/callback, without a fragment"
                )));
            }
        }
        Ok(())
    }
}
