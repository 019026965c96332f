//! `[[auth.issuers]]`: one identity provider each, checked once at start.

use std::time::Duration;

use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use url::Url;

use super::grants::{Grant, GrantConfig};

/// A configuration of an issuer that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IssuerError(pub String);

/// One `[[auth.issuers]]` entry, as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// Recorded as the prefix of its principals' names (`<name>:<sub>`).
    pub name: String,
    /// Its URL, exactly as its tokens' `iss` says; `https` except on a loopback address.
    pub issuer: String,
    /// What a token's `aud` must name (one of them): never empty.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Its key set; by default, the `jwks_uri` of its discovery document.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The algorithms its tokens may be signed with.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// How far `exp` and `nbf` may be off, in seconds.
    #[serde(default = "default_leeway_s")]
    pub leeway_s: u64,
    /// The claim naming the principal.
    #[serde(default = "default_name_claim")]
    pub name_claim: String,
    /// What a token may do, by what it carries.
    #[serde(default)]
    pub grants: Vec<GrantConfig>,
    /// The provider's introspection endpoint (RFC 7662), for tokens that are not JWTs.
    #[serde(default)]
    pub introspection_url: Option<String>,
    /// The client toolgate authenticates as to the introspection endpoint.
    #[serde(default)]
    pub introspection_client_id: Option<String>,
    /// The environment variable holding that client's secret.
    #[serde(default)]
    pub introspection_secret_env: Option<String>,
    /// The longest an introspection answer is kept, in seconds (never past the token's `exp`).
    #[serde(default = "default_introspection_cache_s")]
    pub introspection_cache_s: u64,
}

fn default_introspection_cache_s() -> u64 {
    60
}

/// Where and how opaque tokens are introspected.
#[derive(Debug, Clone)]
pub(super) struct Introspection {
    pub(super) url: Url,
    pub(super) client_id: String,
    pub(super) secret_env: String,
    pub(super) cache: Duration,
}

fn default_algorithms() -> Vec<String> {
    ["RS256", "ES256", "EdDSA", "PS256"]
        .map(String::from)
        .to_vec()
}

fn default_leeway_s() -> u64 {
    60
}

fn default_name_claim() -> String {
    "sub".into()
}

/// The most leeway accepted: past it a token's times say little.
const MAX_LEEWAY_S: u64 = 600;

/// The longest an introspection answer may be kept: a revoked token stays usable that long.
const MAX_INTROSPECTION_CACHE_S: u64 = 3600;

/// An issuer's checked settings.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) name: String,
    pub(super) issuer: String,
    pub(super) audiences: Vec<String>,
    pub(super) jwks_url: Option<Url>,
    pub(super) leeway: Duration,
    pub(super) name_claim: String,
    pub(super) grants: Vec<Grant>,
    pub(super) introspection: Option<Introspection>,
    /// What a JWT signed with each of `algorithms` is checked for, made once.
    validations: Vec<(Algorithm, Validation)>,
}

impl Settings {
    /// The checks of a JWT signed with `alg`, if the issuer accepts it.
    pub(super) fn validation(&self, alg: Algorithm) -> Option<&Validation> {
        self.validations
            .iter()
            .find_map(|(a, validation)| (*a == alg).then_some(validation))
    }
}

impl IssuerConfig {
    /// The settings this entry stands for, or why it cannot work.
    pub(super) fn check(&self) -> Result<Settings, IssuerError> {
        let at = |what: &str| IssuerError(format!("[[auth.issuers]] `{}`: {what}", self.name));
        let name = self.name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(IssuerError(format!(
                "[[auth.issuers]] name `{}`: use letters, digits, `-`, `_` and `.` only (it \
                 prefixes every principal's name, before a `:`)",
                self.name
            )));
        }
        // The issuer must be https (or http to a loopback address): its documents are read there.
        secure_url(&self.issuer).map_err(|why| at(&format!("issuer {why}")))?;
        if self.audiences.is_empty() || self.audiences.iter().any(|a| a.trim().is_empty()) {
            return Err(at(
                "`audiences` is required and may not hold an empty entry: a token must be \
                 meant for this server (set it to this server's URL, as the provider puts it \
                 in `aud`)",
            ));
        }
        let jwks_url = match &self.jwks_url {
            Some(url) => Some(secure_url(url).map_err(|why| at(&format!("jwks_url {why}")))?),
            None => None,
        };
        if self.algorithms.is_empty() {
            return Err(at("`algorithms` may not be empty"));
        }
        let algorithms = self
            .algorithms
            .iter()
            .map(|alg| asymmetric(alg).ok_or_else(|| at(&format!("algorithm `{alg}`: use RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or EdDSA (none and the HMAC algorithms are never accepted against a key set)"))))
            .collect::<Result<Vec<_>, _>>()?;
        if self.leeway_s > MAX_LEEWAY_S {
            return Err(at(&format!("`leeway_s` is at most {MAX_LEEWAY_S}")));
        }
        if self.name_claim.trim().is_empty() {
            return Err(at("`name_claim` may not be empty"));
        }
        if self.grants.is_empty() {
            return Err(at(
                "no [[auth.issuers.grants]]: a token that matches no grant is refused, so this \
                 issuer would admit nobody",
            ));
        }
        let grants = self
            .grants
            .iter()
            .map(|grant| grant.check().map_err(|why| at(&why)))
            .collect::<Result<Vec<_>, _>>()?;
        let introspection = match (
            &self.introspection_url,
            &self.introspection_client_id,
            &self.introspection_secret_env,
        ) {
            (None, None, None) => None,
            (Some(url), Some(client_id), Some(secret_env))
                if !client_id.trim().is_empty() && !secret_env.trim().is_empty() =>
            {
                Some(Introspection {
                    url: secure_url(url).map_err(|why| at(&format!("introspection_url {why}")))?,
                    client_id: client_id.clone(),
                    secret_env: secret_env.clone(),
                    cache: Duration::from_secs(self.introspection_cache_s),
                })
            }
            _ => {
                return Err(at("`introspection_url`, `introspection_client_id` and \
                     `introspection_secret_env` go together"));
            }
        };
        if self.introspection_cache_s > MAX_INTROSPECTION_CACHE_S {
            return Err(at(&format!(
                "`introspection_cache_s` is at most {MAX_INTROSPECTION_CACHE_S}"
            )));
        }
        let validations = algorithms
            .iter()
            .map(|alg| {
                let mut validation = Validation::new(*alg);
                validation.leeway = self.leeway_s;
                validation.validate_nbf = true;
                validation.set_audience(&self.audiences);
                validation.set_issuer(&[&self.issuer]);
                validation.set_required_spec_claims(&["exp", "iss", "aud"]);
                (*alg, validation)
            })
            .collect();
        Ok(Settings {
            validations,
            name: name.to_owned(),
            issuer: self.issuer.clone(),
            audiences: self.audiences.clone(),
            jwks_url,
            leeway: Duration::from_secs(self.leeway_s),
            name_claim: self.name_claim.clone(),
            grants,
            introspection,
        })
    }
}

pub(super) use crate::base::secure_url;

/// The asymmetric signature algorithm named `name` (as in a JWS header).
pub(super) fn asymmetric(name: &str) -> Option<Algorithm> {
    Some(match name {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> IssuerConfig {
        toml::from_str(toml).unwrap()
    }

    const BASE: &str = "name = \"corp\"\nissuer = \"https://id.example.com\"\n\
                        audiences = [\"https://tools.example.com/mcp\"]\n\
                        [[grants]]\nwhen = { scope = \"tools:call\" }\nrole = \"caller\"\n";

    #[test]
    fn an_issuer_needs_an_audience_a_secure_url_and_asymmetric_algorithms() {
        let settings = config(BASE).check().unwrap();
        assert_eq!(settings.validations.len(), 4);
        assert_eq!(settings.leeway, Duration::from_secs(60));
        assert_eq!(settings.name_claim, "sub");

        let refused = |toml: String, says: &str| {
            let err = config(&toml).check().unwrap_err().0;
            assert!(err.contains(says), "{err}");
        };
        // (what is replaced in the good config, by what, and what the refusal then says)
        for (what, by, says) in [
            (
                "audiences = [\"https://tools.example.com/mcp\"]\n",
                "",
                "`audiences` is required",
            ),
            (
                "[\"https://tools.example.com/mcp\"]",
                "[\" \"]",
                "`audiences` is required",
            ),
            (
                "https://id.example.com",
                "http://id.example.com",
                "must be https",
            ),
            (
                "https://id.example.com",
                "https://u:p@id.example.com",
                "no credentials",
            ),
        ] {
            refused(BASE.replace(what, by), says);
        }
        for alg in ["none", "HS256", "HS512", "rs256"] {
            let toml = BASE.replace("audiences", &format!("algorithms = [\"{alg}\"]\naudiences"));
            refused(toml, "never accepted");
        }
        refused(BASE.replace("corp", "corp:x"), "letters, digits");
        refused(
            BASE.split("[[grants]]").next().unwrap().to_owned(),
            "would admit nobody",
        );
        for loopback in [
            "http://127.0.0.1:4000",
            "http://[::1]:4000",
            "http://localhost:4000",
        ] {
            let toml = BASE.replace("https://id.example.com", loopback);
            assert!(config(&toml).check().is_ok(), "{loopback}");
        }
    }
}
