//! Who may do what: API keys with roles, checked on every request but the health probes.
//!
//! Keys are configured by the SHA-256 of their token, never the token itself; a request carries
//! `Authorization: Bearer <token>`, whose hash is compared with every key's in constant time.
//! Roles, by route:
//! - `caller`: the tools (`GET /tools*`, `POST /tools/{name}/call`) and its own calls
//!   (`GET /calls/{call_id}`); it can never approve, reject, complete or settle anything;
//! - `approver`: `/approvals*`, `GET /calls*`, `POST /calls/{call_id}/resolve`;
//! - `admin`: everything.
//!
//! Every role may read `/openapi.json`. With no keys configured, auth is off and every request
//! acts as an anonymous admin; the binary allows that only on a loopback address.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Calls tools and reads its own calls.
    Caller,
    /// Approves, rejects and completes suspensions; reads and settles calls.
    Approver,
    /// Everything.
    Admin,
}

/// One API key: a name (recorded as the actor of what it does), a role, and its token's hash.
#[derive(Clone)]
pub struct ApiKey {
    /// Recorded on calls and their events.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// SHA-256 of the token.
    pub token_sha256: [u8; 32],
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The hash is not the token, but there is no reason to print it either.
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// The SHA-256 of `token`, as configured in `token_sha256` (what `toolgate hash-token` prints).
pub fn token_sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Who is asking: inserted into every authorized request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's name; `None` when auth is off.
    pub name: Option<String>,
    /// What it may do.
    pub role: Role,
}

impl Principal {
    /// Whether this principal may see every call, not only its own.
    pub fn sees_all_calls(&self) -> bool {
        self.role != Role::Caller
    }
}

/// The configured keys; empty means auth is off.
#[derive(Debug, Default)]
pub struct Keys {
    keys: Vec<ApiKey>,
}

impl Keys {
    /// A key set; empty turns auth off.
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Keys { keys }
    }

    /// Whether auth is on.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The key whose token is `token`. Every key is compared, in constant time, whether or not
    /// an earlier one matched, so timing tells nothing about which key, if any, is close.
    fn find(&self, token: &str) -> Option<&ApiKey> {
        let hash = token_sha256(token);
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.token_sha256.ct_eq(&hash)) {
                found = Some(key);
            }
        }
        found
    }
}

/// Routes anyone may reach, even without a key: liveness and readiness probes.
pub(crate) fn is_open(route: &str) -> bool {
    matches!(route, "/healthz" | "/readyz")
}

/// Whether `role` may use the route `route` (a route template, as axum matched it).
fn allowed(role: Role, route: Option<&str>) -> bool {
    let Some(route) = route else {
        // No route matched: the answer is a 404 whoever asks.
        return true;
    };
    match role {
        Role::Admin => true,
        Role::Caller => matches!(
            route,
            "/tools"
                | "/tools/{name}"
                | "/tools/{name}/call"
                | "/calls/{call_id}"
                | "/openapi.json"
        ),
        Role::Approver => {
            route.starts_with("/approvals")
                || route.starts_with("/calls")
                || route == "/openapi.json"
        }
    }
}

/// The auth middleware: authenticates the bearer token, checks the role against the route, and
/// hands the handlers a [`Principal`].
pub(super) async fn authorize(
    State(keys): State<Arc<Keys>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    if route.as_deref().is_some_and(is_open) {
        return Ok(next.run(request).await);
    }
    let principal = if keys.enabled() {
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
        let key = keys.find(token).ok_or(ApiError::Unauthorized)?;
        Principal {
            name: Some(key.name.clone()),
            role: key.role,
        }
    } else {
        Principal {
            name: None,
            role: Role::Admin,
        }
    };
    if !allowed(principal.role, route.as_deref()) {
        return Err(ApiError::Forbidden);
    }
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_token_only() {
        let keys = Keys::new(vec![
            ApiKey {
                name: "agent".into(),
                role: Role::Caller,
                token_sha256: token_sha256("caller-token"),
            },
            ApiKey {
                name: "ops".into(),
                role: Role::Approver,
                token_sha256: token_sha256("approver-token"),
            },
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
        for route in [
            "/approvals",
            "/approvals/{token}",
            "/approvals/{token}/approve",
            "/approvals/{token}/reject",
            "/approvals/{token}/complete",
            "/calls",
            "/calls/{call_id}/resolve",
        ] {
            assert!(!allowed(Role::Caller, Some(route)), "{route}");
            assert!(allowed(Role::Approver, Some(route)), "{route}");
        }
        assert!(!allowed(Role::Approver, Some("/tools/{name}/call")));
        assert!(allowed(Role::Admin, Some("/tools/{name}/call")));
    }
}
