//! The sections of the HTTP server as a whole: `[auth]` (the API keys, and their translation
//! into [`ApiKey`]s) and `[feed]` (how long the change feed is kept). They stay here until the
//! server's shared HTTP layer has a module of its own to hold them.

use serde::Deserialize;

use super::ConfigError;
use crate::dispatch::quota::{QuotaConfig, QuotaSettings};
use crate::http::auth::{ApiKey, Reach, Role};
use crate::identity::{IssuerConfig, Issuers};

/// `[auth]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `[[auth.keys]]`; none (and no issuer) turns auth off (allowed only on a loopback
    /// address).
    pub keys: Vec<KeyConfig>,
    /// `[[auth.issuers]]`: identity providers whose tokens are principals beside the keys.
    pub issuers: Vec<IssuerConfig>,
    /// The canonical URL of this server's `/mcp`, as its tokens' `aud` names it: required once
    /// an issuer is configured.
    pub resource_url: Option<String>,
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
    /// The key's own quotas, each key set here over `[quotas]`.
    #[serde(default)]
    pub quotas: Option<QuotaConfig>,
    /// Globs of the tools it may list and call (default `["*"]`).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Globs of the tools whose approvals it may see and decide (default `["*"]`).
    #[serde(default)]
    pub decides: Option<Vec<String>>,
}

impl AuthConfig {
    /// Every principal's quotas: `defaults` (`[quotas]`), and each key's own over them.
    pub fn quotas(&self, defaults: QuotaConfig) -> QuotaSettings {
        let own = self
            .keys
            .iter()
            .filter_map(|key| key.quotas.map(|quotas| (key.name.clone(), quotas)));
        QuotaSettings::new(defaults, own)
    }

    /// The identity providers, checked, their introspection secrets read from the
    /// environment; the tools' `required_scopes` are offered in the resource's metadata.
    pub fn issuers(&self, required_scopes: &[String]) -> Result<Issuers, ConfigError> {
        self.check_issuers()?;
        let issuers = Issuers::new(&self.issuers).map_err(|err| ConfigError::Invalid {
            key: "auth.issuers".into(),
            message: err.0,
        })?;
        match &self.resource_url {
            Some(url) => {
                issuers
                    .for_resource(url, required_scopes)
                    .map_err(|err| ConfigError::Invalid {
                        key: "auth.resource_url".into(),
                        message: err.0,
                    })
            }
            None => Ok(issuers),
        }
    }

    /// Checks the identity providers without reading any secret. A key's name may not look
    /// like one of their principals' (`<issuer>:…`): names decide whose calls a caller sees.
    pub fn check_issuers(&self) -> Result<(), ConfigError> {
        Issuers::validate(&self.issuers).map_err(|err| ConfigError::Invalid {
            key: "auth.issuers".into(),
            message: err.0,
        })?;
        if self.issuers.is_empty() && self.resource_url.is_some() {
            return Err(ConfigError::Invalid {
                key: "auth.resource_url".into(),
                message: "only with [[auth.issuers]]: without one, no client may be sent to \
                          sign in anywhere"
                    .into(),
            });
        }
        if !self.issuers.is_empty() && self.resource_url.is_none() {
            return Err(ConfigError::Invalid {
                key: "auth.resource_url".into(),
                message: "required once [[auth.issuers]] is configured: the canonical URL of \
                          this server's /mcp (https://<host>/mcp), as the tokens' `aud` names it"
                    .into(),
            });
        }
        for (index, key) in self.keys.iter().enumerate() {
            if let Some(issuer) = self
                .issuers
                .iter()
                .find(|issuer| key.name.starts_with(&format!("{}:", issuer.name.trim())))
            {
                return Err(ConfigError::Invalid {
                    key: format!("auth.keys[{index}].name"),
                    message: format!(
                        "`{}` would be taken for a principal of the issuer `{}`",
                        key.name, issuer.name
                    ),
                });
            }
        }
        Ok(())
    }

    /// The API keys, with their hashes decoded. Fails on a hash that is not 64 hex digits or a
    /// name used twice.
    pub fn api_keys(&self) -> Result<Vec<ApiKey>, ConfigError> {
        let mut keys: Vec<ApiKey> = Vec::with_capacity(self.keys.len());
        for (index, key) in self.keys.iter().enumerate() {
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
            // The four-eyes rule and a quorum count principals by name: two keys of one
            // person's name, written differently, would count as two approvers.
            let lower = key.name.to_lowercase();
            if let Some(other) = keys.iter().find(|k| k.name.to_lowercase() == lower) {
                return Err(ConfigError::Invalid {
                    key: format!("auth.keys[{index}].name"),
                    message: format!(
                        "`{}` differs from another key's name `{}` only by case; approvals \
                         count principals by name, so they would be two people",
                        key.name, other.name
                    ),
                });
            }
            let invalid = |field: &str, message: String| ConfigError::Invalid {
                key: format!("auth.keys[{index}].{field}"),
                message,
            };
            if let Some((field, why)) = key
                .role
                .idle_reach(key.tools.is_some(), key.decides.is_some())
            {
                return Err(invalid(field, why.into()));
            }
            let reach = |globs: &Option<Vec<String>>, field: &str| match globs {
                None => Ok(Reach::all()),
                Some(globs) => Reach::of(globs).map_err(|message| invalid(field, message)),
            };
            keys.push(ApiKey {
                tools: reach(&key.tools, "tools")?,
                decides: reach(&key.decides, "decides")?,
                ..ApiKey::new(key.name.clone(), key.role, hash)
            });
        }
        Ok(keys)
    }
}

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
