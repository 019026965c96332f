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
    /// The base URL of the links in messages (`https://tools.example.com`); empty:
    /// `http://<listen address>`.
    pub public_url: String,
    /// How long a decision link in a message serves, in seconds.
    pub link_ttl_s: u64,
    /// What a message's link is: `signed` (a link for one person and one approval, without a
    /// sign-in) or `sign_in` (the call's page, behind the inbox's sign-in).
    pub links: LinkMode,
}

/// What the link in a message is (`[inbox] links`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkMode {
    /// Signed for one person and one approval; decides without a sign-in (the default).
    #[default]
    Signed,
    /// The call's page, behind the inbox's sign-in.
    SignIn,
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
            public_url: options.public_url,
            link_ttl_s: options.link_ttl.as_secs(),
            links: options.links,
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
            public_url: self.public_url.trim_end_matches('/').to_owned(),
            link_ttl: Duration::from_secs(self.link_ttl_s),
            links: self.links,
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

    /// What needs no secret: a way to sign in is left, the callback URL is one, and so is the
    /// public URL.
    pub fn check(&self) -> Result<(), IssuerError> {
        if !self.public_url.is_empty() {
            let url = &self.public_url;
            let parsed = url::Url::parse(url)
                .map_err(|err| IssuerError(format!("[inbox] public_url `{url}`: {err}")))?;
            if !matches!(parsed.scheme(), "http" | "https")
                || parsed.query().is_some()
                || parsed.fragment().is_some()
            {
                return Err(IssuerError(format!(
                    "[inbox] public_url `{url}` must be an http(s) URL without a query or fragment"
                )));
            }
        }
        if self.link_ttl_s == 0 {
            return Err(IssuerError(
                "[inbox] link_ttl_s must be at least 1 second".into(),
            ));
        }
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
