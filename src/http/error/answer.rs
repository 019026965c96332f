//! An [`ApiError`] as an HTTP answer: its status, the envelope, and the headers some errors
//! carry (`WWW-Authenticate`, `Retry-After`, the RateLimit fields, `Connection: close`).

use axum::Json;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::{ApiError, ErrorEnvelope};
use crate::dispatch::quota::QuotaExceeded;

/// On a `403 insufficient_scope` answer: every scope the refused call needs, for the gate to
/// complete the challenge with the resource's metadata.
#[derive(Debug, Clone)]
pub(crate) struct ScopeChallenge(pub(crate) Vec<String>);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorEnvelope {
            error: self.to_object(),
        };
        let mut response = (self.status(), Json(body)).into_response();
        let headers = response.headers_mut();
        match self {
            // RFC 6750: no `error` when no credentials were sent.
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::InvalidToken(_) => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
            }
            // The gate adds `resource_metadata` (it knows the resource), see
            // `crate::http::auth`; a scope is a header-safe token (checked at start).
            ApiError::InsufficientScope { scopes, .. } => {
                let challenge = format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{}\"",
                    scopes.join(" ")
                );
                if let Ok(value) = HeaderValue::try_from(challenge) {
                    headers.insert(header::WWW_AUTHENTICATE, value);
                }
                response.extensions_mut().insert(ScopeChallenge(scopes));
            }
            ApiError::Overloaded(_) | ApiError::CallInProgress(_) | ApiError::StoreUnavailable => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::UpstreamUnavailable { retry_after, .. } => {
                headers.insert(header::RETRY_AFTER, retry_after_value(retry_after));
            }
            // The rest of the body may still be on its way: the connection cannot be read on.
            ApiError::RequestTimeout => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::RateLimited(refused) => rate_limit_fields(&refused, headers),
            _ => {}
        }
        response
    }
}

/// `Retry-After`, and the quota as the IETF RateLimit fields say it
/// (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy` the quota (a rate as `q` calls in
/// the `w` seconds a full burst takes to come back; a count as `q` at once, with
/// `qu="concurrent-requests"`), `RateLimit` what is left of it now (`r=0`) and, for a rate, the
/// seconds `t` until it admits one more, as `Retry-After` says.
fn rate_limit_fields(refused: &QuotaExceeded, headers: &mut axum::http::HeaderMap) {
    let wait = refused.retry_after_s();
    let name = refused.policy_name();
    let (policy, state) = match refused.rate {
        Some(rate) => (
            format!("\"{name}\";q={};w={}", rate.burst, rate.window_s()),
            format!("\"{name}\";r=0;t={wait}"),
        ),
        None => (
            format!("\"{name}\";q={};qu=\"concurrent-requests\"", refused.limit),
            format!("\"{name}\";r=0"),
        ),
    };
    headers.insert(header::RETRY_AFTER, HeaderValue::from(wait));
    // A tool's name is [A-Za-z0-9_-], so these are always valid header values.
    for (field, value) in [("ratelimit-policy", policy), ("ratelimit", state)] {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(field, value);
        }
    }
}

/// A `Retry-After` value in whole seconds, at least 1.
pub(crate) fn retry_after_value(after: std::time::Duration) -> HeaderValue {
    HeaderValue::from(after.as_secs().max(1))
}
