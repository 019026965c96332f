//! `[upstreams.auth]`: an HTTP upstream that acts as each caller, not as one service account.
//!
//! With `mode = "token_exchange"`, each call's caller's access token (from one of
//! `[[auth.issuers]]`) is exchanged at that issuer's token endpoint (RFC 8693) for a token meant
//! for the upstream (`audience`, `scope`), which the upstream request then carries as its bearer
//! ([`super::exchange`]). Checked when the file is read: only on an upstream with a `url`, an
//! issuer that is configured (`Config`'s cross-check), a token URL that is https (http only to
//! this machine), a client secret named by an environment variable.

use std::fmt;

use serde::Deserialize;

use crate::base::{Invalid, invalid};

/// `[upstreams.auth]`, as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamAuthConfig {
    /// How the upstream learns who calls: `token_exchange` (the only mode).
    pub mode: AuthMode,
    /// The `name` of the `[[auth.issuers]]` entry whose tokens are exchanged.
    pub issuer: String,
    /// Its token endpoint; unset: the `token_endpoint` of its discovery document.
    #[serde(default)]
    pub token_url: Option<String>,
    /// The `audience` asked for: what the upstream accepts in its tokens' `aud`.
    pub audience: String,
    /// The `scope` asked for, if any (space-separated).
    #[serde(default)]
    pub scope: Option<String>,
    /// toolgate's own client at the issuer.
    pub client_id: String,
    /// The environment variable holding that client's secret.
    pub client_secret_env: String,
    /// How the client authenticates: `client_secret_basic` (default) or `client_secret_post`.
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// How an upstream learns who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// The caller's token, exchanged at its issuer (RFC 8693).
    TokenExchange,
}

/// How toolgate's client authenticates at the token endpoint (RFC 6749 2.3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// HTTP Basic.
    #[default]
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the form.
    ClientSecretPost,
}

/// `[upstreams.auth]` checked, its secret read, its issuer's URL known.
#[derive(Clone)]
pub struct ExchangeSettings {
    /// The `[[auth.issuers]]` entry's name.
    pub issuer: String,
    /// Its URL (for discovery), once the configuration named it.
    pub issuer_url: Option<String>,
    /// The configured token endpoint, if any.
    pub token_url: Option<url::Url>,
    /// The audience asked for.
    pub audience: String,
    /// The scope asked for.
    pub scope: Option<String>,
    /// The client's id.
    pub client_id: String,
    /// The client's secret (never shown).
    pub(crate) client_secret: String,
    /// How the client authenticates.
    pub client_auth: ClientAuth,
}

impl fmt::Debug for ExchangeSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeSettings")
            .field("issuer", &self.issuer)
            .field("token_url", &self.token_url.as_ref().map(url::Url::as_str))
            .field("audience", &self.audience)
            .field("scope", &self.scope)
            .field("client_id", &self.client_id)
            .field("client_auth", &self.client_auth)
            .finish_non_exhaustive()
    }
}

/// The longest `audience`, `scope` or `client_id`, in bytes.
const MAX_FIELD_BYTES: usize = 1024;

impl UpstreamAuthConfig {
    /// Checks what the entry alone can tell; `http` says whether its upstream has a `url`. Keys
    /// are relative to `auth`.
    pub(super) fn check(&self, http: bool) -> Result<(), Invalid> {
        let key = |field: &str| format!("auth.{field}");
        if !http {
            return Err(invalid(
                key("mode"),
                "only an upstream with a `url` (Streamable HTTP) acts as its caller: a stdio \
                 server has no request to carry the caller's token",
            ));
        }
        for (field, value) in [
            ("issuer", &self.issuer),
            ("audience", &self.audience),
            ("client_id", &self.client_id),
            ("client_secret_env", &self.client_secret_env),
        ] {
            if value.trim().is_empty() {
                return Err(invalid(key(field), "must not be empty"));
            }
        }
        for (field, value) in [
            ("audience", Some(&self.audience)),
            ("scope", self.scope.as_ref()),
            ("client_id", Some(&self.client_id)),
        ] {
            if value.is_some_and(|v| v.len() > MAX_FIELD_BYTES || v.chars().any(char::is_control)) {
                return Err(invalid(
                    key(field),
                    format!("must be at most {MAX_FIELD_BYTES} bytes, without control characters"),
                ));
            }
        }
        if let Some(url) = &self.token_url {
            crate::base::secure_url(url).map_err(|why| invalid(key("token_url"), why))?;
        }
        Ok(())
    }

    /// The settings, the client's secret read by `env`; a variable `env` does not know (or an
    /// empty one) is an error naming it.
    pub(super) fn resolve(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ExchangeSettings, Invalid> {
        let client_secret = env(&self.client_secret_env)
            .filter(|secret| !secret.is_empty())
            .ok_or_else(|| {
                invalid(
                    "auth.client_secret_env",
                    format!(
                        "the environment variable {} is not set",
                        self.client_secret_env
                    ),
                )
            })?;
        let token_url = match &self.token_url {
            Some(url) => {
                Some(crate::base::secure_url(url).map_err(|why| invalid("auth.token_url", why))?)
            }
            None => None,
        };
        Ok(ExchangeSettings {
            issuer: self.issuer.clone(),
            issuer_url: None,
            token_url,
            audience: self.audience.clone(),
            scope: self.scope.clone(),
            client_id: self.client_id.clone(),
            client_secret,
            client_auth: self.client_auth,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(text: &str) -> UpstreamAuthConfig {
        toml::from_str(text).unwrap()
    }

    const GOOD: &str = "mode = \"token_exchange\"\nissuer = \"corp\"\naudience = \"https://files\"\n\
                        client_id = \"toolgate\"\nclient_secret_env = \"SECRET\"";

    #[test]
    fn only_an_http_upstream_acts_as_its_caller() {
        assert!(auth(GOOD).check(true).is_ok());
        assert_eq!(auth(GOOD).check(false).unwrap_err().key, "auth.mode");
        let plain = format!("{GOOD}\ntoken_url = \"http://idp.example.com/token\"");
        assert_eq!(auth(&plain).check(true).unwrap_err().key, "auth.token_url");
        let local = format!("{GOOD}\ntoken_url = \"http://127.0.0.1:9/token\"");
        assert!(auth(&local).check(true).is_ok());
        assert!(toml::from_str::<UpstreamAuthConfig>("mode = \"static\"").is_err());
    }

    #[test]
    fn the_secret_comes_from_the_environment_and_is_never_shown() {
        let err = auth(GOOD).resolve(|_| None).unwrap_err();
        assert_eq!(err.key, "auth.client_secret_env");
        let settings = auth(GOOD)
            .resolve(|name| (name == "SECRET").then(|| "s3cr3t".to_owned()))
            .unwrap();
        assert_eq!(settings.client_secret, "s3cr3t");
        assert!(!format!("{settings:?}").contains("s3cr3t"));
    }
}
