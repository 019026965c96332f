//! Who may do what: API keys with roles, checked on every request but the health probes.
//!
//! Keys are configured by the SHA-256 of their token, never the token itself; a request carries
//! `Authorization: Bearer <token>`, whose hash is compared with every key's in constant time.
//! Roles, by route:
//! - `caller`: the tools (`GET /tools*`, `POST /tools/{name}/call`) and its own calls
//!   (`GET /calls/{call_id}`); it can never approve, reject, complete or settle anything;
//! - `approver`: `/approvals*`, `GET /calls*`, `POST /calls/{call_id}/resolve`;
//! - `admin`: everything, and alone `GET /metrics`.
//!
//! Every role may read `/openapi.json`. With no keys configured, auth is off and every request
//! acts as an anonymous admin; the binary allows that only on a loopback address. The check is a
//! layer on each route ([`GateLayer`]), not a match on paths, so it holds however the router is
//! nested or merged.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::header::AUTHORIZATION;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::{ApiError, ScopeChallenge};
use super::hosts::AllowedHosts;
use super::layer::{PolicyLayer, Refusal, RoutePolicy};
pub use crate::base::token_sha256;
pub use crate::dispatch::who::{Principal, Reach, Role};
use crate::identity::{Issuers, Verdict};

/// One API key: a name (recorded as the actor of what it does), a role, and its token's hash.
#[derive(Clone)]
pub struct ApiKey {
    /// Recorded on calls and their events.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// SHA-256 of the token.
    pub token_sha256: [u8; 32],
    /// The tools it may list and call (`tools`; default every one).
    pub tools: Reach,
    /// The tools whose approvals it may see and decide (`decides`; default every one).
    pub decides: Reach,
}

impl ApiKey {
    /// A key named `name` with `role`, whose token hashes to `token_sha256`, reaching every
    /// tool.
    pub fn new(name: impl Into<String>, role: Role, token_sha256: [u8; 32]) -> Self {
        ApiKey {
            name: name.into(),
            role,
            token_sha256,
            tools: Reach::all(),
            decides: Reach::all(),
        }
    }

    /// The principal this key is.
    pub fn principal(&self) -> Principal {
        Principal {
            tools: self.tools.clone(),
            decides: self.decides.clone(),
            ..Principal::new(Some(self.name.clone()), self.role)
        }
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The hash is not the token, but there is no reason to print it either.
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("tools", &self.tools)
            .field("decides", &self.decides)
            .finish_non_exhaustive()
    }
}

/// The configured credentials: API keys, and the identity providers whose tokens are
/// principals too; none of either means auth is off.
#[derive(Debug, Default)]
pub struct Keys {
    keys: Vec<ApiKey>,
    issuers: Arc<Issuers>,
}

impl Keys {
    /// A key set; empty turns auth off.
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Keys {
            keys,
            issuers: Arc::default(),
        }
    }

    /// The key set with the tokens of `issuers` accepted beside the keys.
    pub fn with_issuers(mut self, issuers: Arc<Issuers>) -> Self {
        self.issuers = issuers;
        self
    }

    /// Whether auth is on.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty() || self.issuers.enabled()
    }

    /// The key whose token is `token`. Every key is compared, in constant time, whether or not
    /// an earlier one matched, so timing tells nothing about which key, if any, is close.
    pub(crate) fn find(&self, token: &str) -> Option<&ApiKey> {
        self.find_by_hash(&token_sha256(token))
    }

    /// The key whose token hashes to `hash`, compared as [`Keys::find`] does.
    pub(crate) fn find_by_hash(&self, hash: &[u8; 32]) -> Option<&ApiKey> {
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.token_sha256.ct_eq(hash)) {
                found = Some(key);
            }
        }
        found
    }

    /// Every configured key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &ApiKey> {
        self.keys.iter()
    }
}

/// Routes anyone may reach, even without a key: liveness and readiness probes, the public keys
/// that verify attestations, and the doors a platform calls with a signature of its own instead
/// of a key ([`Access::Signed`]). (Used to document the API.)
pub(crate) fn is_open(route: &str) -> bool {
    matches!(
        route,
        "/healthz" | "/readyz" | "/.well-known/jwks.json" | "/integrations/slack/interactions"
    )
}

/// What a route gives access to, which decides the roles that may use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// `GET /tools*`, `POST /tools/{name}/call`: callers.
    Tools,
    /// `GET /calls/{call_id}`: callers (their own calls) and approvers.
    OwnCalls,
    /// `/approvals*`, `GET /calls`, `POST /calls/{call_id}/resolve`: approvers.
    Approvals,
    /// `/openapi.json`: every key.
    Document,
    /// `/metrics`, `/webhooks/*`: admins only.
    Admin,
    /// `/inbox*`: anyone reaches the route; the inbox checks its session cookie itself (an
    /// approver or an admin signed in, or auth off).
    Inbox,
    /// `/.well-known/oauth-protected-resource*`: anyone, without credentials (a client reads
    /// it to learn where to get them).
    Discovery,
    /// `/integrations/slack/interactions`: anyone reaches the route; its handler checks the
    /// platform's signature over the body itself (Slack sends no key).
    Signed,
}

/// Whether `role` may use a route giving `access`.
fn permits(role: Role, access: Access) -> bool {
    match (role, access) {
        (Role::Admin, _)
        | (_, Access::Document)
        | (_, Access::OwnCalls)
        | (_, Access::Inbox)
        | (_, Access::Discovery)
        | (_, Access::Signed) => true,
        (Role::Caller, Access::Tools) | (Role::Approver, Access::Approvals) => true,
        (Role::Caller, Access::Approvals) | (Role::Approver, Access::Tools) => false,
        (_, Access::Admin) => false,
    }
}

/// What a gated route checks: the `Host` and `Origin`, the keys, and the route's access.
pub(crate) struct Gate {
    pub(crate) hosts: Arc<AllowedHosts>,
    pub(crate) keys: Arc<Keys>,
    pub(crate) access: Access,
}

/// What the gate decided without waiting.
enum Checked {
    /// The request goes on (a principal in its extensions).
    Admitted,
    /// A token whose issuer's key set must be fetched before it is decided.
    Fetch(String),
}

impl Gate {
    /// The DNS-rebinding check (on every door, the inbox included: see [`super::hosts`]),
    /// authentication of the bearer token (an API key, checked first, or an identity
    /// provider's token), and the role check: admitted, the request carries a [`Principal`]
    /// for the handler. Nothing is read but the head, and nothing is held: a request refused
    /// here never takes a slot of `max_in_flight` (see [`super::shed`]).
    fn admit(&self, request: &mut Request) -> Result<Checked, ApiError> {
        self.hosts.check(request.uri(), request.headers())?;
        if matches!(
            self.access,
            Access::Inbox | Access::Discovery | Access::Signed
        ) {
            return Ok(Checked::Admitted);
        }
        let principal = if self.keys.enabled() {
            let token = request
                .headers()
                .get(AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| {
                    let (scheme, token) = value.split_once(' ')?;
                    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
                })
                .filter(|token| !token.is_empty())
                .ok_or(ApiError::Unauthorized)?;
            match self.keys.find(token) {
                Some(key) => key.principal(),
                None if self.keys.issuers.enabled() => match self.keys.issuers.check(token) {
                    Verdict::Accepted(principal) => principal,
                    Verdict::Refused(refused) => return Err(token_refusal(refused)),
                    Verdict::Fetch => return Ok(Checked::Fetch(token.to_owned())),
                },
                None => return Err(ApiError::Unauthorized),
            }
        } else {
            Principal::anonymous()
        };
        self.permit(&principal)?;
        crate::telemetry::spans::principal(principal.name.as_deref());
        request.extensions_mut().insert(principal);
        Ok(Checked::Admitted)
    }

    /// The answer to a refused request: a `401` points at this resource's metadata when
    /// identity providers are configured for it (RFC 9728), so a client finds where to sign in.
    fn refusal(&self, refused: ApiError) -> Response {
        let challenge = self
            .keys
            .issuers
            .resource()
            .and_then(|resource| match refused {
                ApiError::Unauthorized => Some(resource.challenge.clone()),
                ApiError::InvalidToken(_) => Some(resource.invalid.clone()),
                _ => None,
            });
        let mut response = refused.into_response();
        if let Some(challenge) = challenge {
            response
                .headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, challenge);
        }
        response
    }

    fn permit(&self, principal: &Principal) -> Result<(), ApiError> {
        if permits(principal.role, self.access) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

/// The answer to a refused token of an identity provider.
fn token_refusal(refused: crate::identity::Refused) -> ApiError {
    if refused.forbidden {
        ApiError::TokenForbidden(refused.message)
    } else {
        ApiError::InvalidToken(refused.message)
    }
}

/// The gate on every route but the health probes, attached to the route itself (so it holds
/// wherever the router is nested): a [`RoutePolicy`], so it costs no boxing and no clone of the
/// route per request.
pub(crate) type GateLayer = PolicyLayer<Gate>;

impl RoutePolicy for Gate {
    /// With identity providers for a resource: the gate, to complete an `insufficient_scope`
    /// challenge with the resource's metadata; else nothing (no cost on the call path).
    type Kept = Option<Arc<Gate>>;

    fn before(self: &Arc<Self>, request: &mut Request) -> Result<Self::Kept, Refusal<Self::Kept>> {
        let kept = || self.keys.issuers.resource().map(|_| self.clone());
        match self.admit(request) {
            Ok(Checked::Admitted) => Ok(kept()),
            Err(refused) => Err(Refusal::Now(self.refusal(refused))),
            Ok(Checked::Fetch(token)) => {
                let gate = self.clone();
                let client = request
                    .extensions()
                    .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                    .map(|info| info.0.ip());
                Err(Refusal::Later(Box::pin(async move {
                    let principal = gate
                        .keys
                        .issuers
                        .check_fetching(&token, client)
                        .await
                        .map_err(|refused| gate.refusal(token_refusal(refused)))?;
                    gate.permit(&principal)
                        .map_err(|refused| gate.refusal(refused))?;
                    crate::telemetry::spans::principal(principal.name.as_deref());
                    let mut found = axum::http::Extensions::new();
                    found.insert(principal);
                    let kept = gate.keys.issuers.resource().map(|_| gate.clone());
                    Ok((kept, found))
                })))
            }
        }
    }

    fn after(kept: Self::Kept, answer: &mut Response) {
        let Some(gate) = kept else { return };
        let (Some(resource), Some(ScopeChallenge(scopes))) = (
            gate.keys.issuers.resource(),
            answer.extensions_mut().remove::<ScopeChallenge>(),
        ) else {
            return;
        };
        if let Some(challenge) = resource.insufficient(&scopes) {
            answer
                .headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, challenge);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_token_only() {
        let keys = Keys::new(vec![
            ApiKey::new("agent", Role::Caller, token_sha256("caller-token")),
            ApiKey::new("ops", Role::Approver, token_sha256("approver-token")),
        ]);
        assert_eq!(
            keys.find("caller-token").map(|k| k.name.as_str()),
            Some("agent")
        );
        assert_eq!(
            keys.find("approver-token").map(|k| k.role),
            Some(Role::Approver)
        );
        assert!(keys.find("caller-token ").is_none());
        assert!(keys.find("").is_none());
        assert!(!Keys::default().enabled());
    }

    #[test]
    fn a_caller_can_never_reach_an_approval_route() {
        assert!(!permits(Role::Caller, Access::Approvals));
        assert!(permits(Role::Approver, Access::Approvals));
        assert!(!permits(Role::Approver, Access::Tools));
        assert!(!permits(Role::Caller, Access::Admin));
        assert!(!permits(Role::Approver, Access::Admin));
        for access in [
            Access::Tools,
            Access::OwnCalls,
            Access::Approvals,
            Access::Document,
            Access::Admin,
            Access::Inbox,
        ] {
            assert!(permits(Role::Admin, access));
        }
    }
}
