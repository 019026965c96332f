//! Identity: the tokens of identity providers, turned into principals. `[[auth.issuers]]` names
//! each provider, an OAuth 2.1 / OIDC issuer whose access tokens are principals beside the API
//! keys. This wing verifies a token (below: the key sets in `keys`, introspection in
//! `introspect`), maps its claims to a role and a reach ([`grants`]), serves
//! the resource's own metadata so a client finds the provider (RFC 9728, `resource`), and signs
//! a person in to the inbox with the provider ([`SignIn`]: the authorization code flow).
//!
//! It stands below the HTTP kit: `crate::http`'s auth asks it about a bearer token that is no
//! API key, and the inbox asks it to sign a person in; it knows no route and no door.
//!
//! # Verification
//!
//! A token is checked against the issuer its unverified `iss` names (one of those configured, or
//! it is refused), then verified with that issuer's key set: the signature with a key of the
//! header's `kid` (and of the family its `alg` needs: an RSA key for `RS*`/`PS*`, a P-256 key
//! for `ES256`, an Ed25519 key for `EdDSA`), `alg` among the issuer's `algorithms` (never
//! `none`, never an HMAC: a public key is no shared secret), `typ` `JWT` or `at+jwt`, `iss`, an
//! `aud` naming one of the issuer's `audiences`, `exp` and `nbf` within `leeway_s`. The principal
//! is named `<issuer name>:<name claim>`, and its role comes from the issuer's grants
//! ([`grants`]).
//!
//! Most tokens are decided at once, from the cached key set (`keys`); a token whose `kid` the
//! cache does not know waits for one fetch of the set (at most one per issuer every 30 s,
//! whatever the load), after which an unknown key fails closed. A token that is no JWT is
//! asked about at the introspection endpoint of each issuer that has one (`introspect`),
//! whose answer is held to the same `iss`, `aud`, `exp`, `nbf` and grants.
//!
//! A token is never logged, and never passed on as it is: the principal keeps it as a secret
//! (`crate::base::CallerToken`) only for an upstream that acts as its caller
//! (`[upstreams.auth]`), which exchanges it at its issuer for a token of its own; of its claims
//! only the principal's name appears anywhere.

mod config;
pub mod grants;
mod introspect;
mod keys;
mod resource;
mod signin;
mod verify;

use std::sync::Arc;

pub use config::{IssuerConfig, IssuerError};
pub use signin::{SignIn, SignInError};
pub(crate) use verify::{Refused, Verdict};

use crate::dispatch::who::Principal;

/// The HTTP client every request to a provider goes through: bounded in time, and following
/// no redirect (one could lead off https; the configured or discovered URL is the one).
fn provider_client(timeout: std::time::Duration) -> Result<reqwest::Client, IssuerError> {
    crate::base::bounded_client(timeout).map_err(IssuerError)
}

/// The time now, in whole seconds since the Unix epoch, as tokens write it.
fn unix_now() -> u64 {
    u64::try_from(crate::store::Timestamp::now().0 / 1000).unwrap_or(0)
}

/// One configured issuer, ready to verify its tokens.
pub struct Issuer {
    settings: config::Settings,
    keys: keys::KeySet,
    introspector: Option<introspect::Introspector>,
    accepted: prometheus_client::metrics::counter::Counter,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("name", &self.settings.name)
            .field("issuer", &self.settings.issuer)
            .finish_non_exhaustive()
    }
}

impl Issuer {
    /// The name its principals are prefixed with.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// Its URL, as its tokens' `iss` must say.
    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }
}

/// Every configured issuer, and the resource their tokens are for.
#[derive(Debug, Default)]
pub struct Issuers {
    issuers: Vec<Arc<Issuer>>,
    resource: Option<resource::Resource>,
}

impl Issuers {
    /// The issuers of `configs`, checked, each introspection secret read from the process
    /// environment.
    pub fn new(configs: &[IssuerConfig]) -> Result<Self, IssuerError> {
        Issuers::with_env(configs, |name| std::env::var(name).ok())
    }

    /// Checks `configs` as [`Issuers::new`] does, reading no secret.
    pub fn validate(configs: &[IssuerConfig]) -> Result<(), IssuerError> {
        let mut seen: Vec<config::Settings> = Vec::with_capacity(configs.len());
        for config in configs {
            let settings = config.check()?;
            if seen.iter().any(|other| other.name == settings.name) {
                return Err(IssuerError(format!(
                    "two [[auth.issuers]] are named `{}`",
                    settings.name
                )));
            }
            if seen.iter().any(|other| other.issuer == settings.issuer) {
                return Err(IssuerError(format!(
                    "two [[auth.issuers]] have the issuer {}",
                    settings.issuer
                )));
            }
            seen.push(settings);
        }
        // An opaque token says nothing of its issuer: with two that introspect, each would be
        // shown the other's tokens.
        if seen.iter().filter(|s| s.introspection.is_some()).count() > 1 {
            return Err(IssuerError(
                "only one [[auth.issuers]] may set introspection_url: an opaque token names no \
                 issuer, and would be sent to each"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The issuers of `configs`, each introspection secret read by `env` (a variable's value
    /// by its name).
    pub fn with_env(
        configs: &[IssuerConfig],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, IssuerError> {
        Issuers::validate(configs)?;
        let mut issuers: Vec<Arc<Issuer>> = Vec::with_capacity(configs.len());
        for config in configs {
            let settings = config.check()?;
            let keys = keys::KeySet::new(&settings)?;
            let introspector = match &settings.introspection {
                Some(introspection) => {
                    let secret = env(&introspection.secret_env)
                        .filter(|secret| !secret.is_empty())
                        .ok_or_else(|| {
                            IssuerError(format!(
                                "[[auth.issuers]] `{}`: the environment variable {} \
                                 (introspection_secret_env) is not set",
                                settings.name, introspection.secret_env
                            ))
                        })?;
                    Some(introspect::Introspector::new(introspection, secret)?)
                }
                None => None,
            };
            let accepted = crate::metrics::token_verifications(&settings.name, "accepted");
            issuers.push(Arc::new(Issuer {
                settings,
                keys,
                introspector,
                accepted,
            }));
        }
        Ok(Issuers {
            issuers,
            resource: None,
        })
    }

    /// The same issuers, for the resource at `url` (`[auth] resource_url`: the canonical URL of
    /// this server's `/mcp`) whose tools require `required_scopes` (each tool's
    /// `required_scopes`, offered in the metadata beside the grants' scopes): its Protected
    /// Resource Metadata is served, and every `401` points at it.
    pub fn for_resource(
        mut self,
        url: &str,
        required_scopes: &[String],
    ) -> Result<Self, IssuerError> {
        if self.issuers.is_empty() {
            return Err(IssuerError(
                "a resource needs an issuer: without one, no client may be sent to sign in".into(),
            ));
        }
        let servers = self.iter().map(|i| i.issuer().to_owned()).collect();
        let grants = || self.iter().flat_map(|issuer| issuer.settings.grants.iter());
        let scopes = grants()
            .filter_map(|grant| grant.scope().map(str::to_owned))
            .chain(required_scopes.iter().cloned())
            .collect();
        // What a client asks for after a 401 is what calling tools takes: never an approver's
        // or an admin's scope, which would make its token decide on its own calls.
        let asked = grants()
            .filter(|grant| grant.role() == crate::dispatch::who::Role::Caller)
            .filter_map(|grant| grant.scope().map(str::to_owned))
            .collect();
        self.resource = Some(resource::Resource::new(url, servers, scopes, asked)?);
        Ok(self)
    }

    /// The resource, once [`Issuers::for_resource`] named it.
    pub(crate) fn resource(&self) -> Option<&resource::Resource> {
        self.resource.as_ref()
    }

    /// Whether any issuer is configured.
    pub fn enabled(&self) -> bool {
        !self.issuers.is_empty()
    }

    /// Every configured issuer.
    pub fn iter(&self) -> impl Iterator<Item = &Issuer> {
        self.issuers.iter().map(AsRef::as_ref)
    }

    /// Decides `token` from what is cached now: accepted, refused, or waiting for its issuer's
    /// key set ([`Issuers::check_fetching`]).
    pub(crate) fn check(&self, token: &str) -> Verdict {
        verify::check(&self.issuers, token, false)
    }

    /// Decides `token`, fetching its issuer's key set first when the cache does not know its key
    /// (at most once per issuer every 30 s).
    /// `client` is the request's peer address: each may have only so many tokens introspected
    /// that the cache does not know (see `introspect`).
    pub(crate) async fn check_fetching(
        &self,
        token: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<Principal, verify::Refused> {
        verify::check_fetching(&self.issuers, token, client).await
    }
}

#[cfg(test)]
mod tests {}
