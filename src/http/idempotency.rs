//! The REST door's `Idempotency-Key` header. What a key may be is the lifecycle's rule
//! ([`crate::dispatch::check_idempotency_key`]), the same for MCP's `_meta`; here it is only read.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;
use crate::dispatch::check_idempotency_key;

/// The client's `Idempotency-Key` header, if sent: 1 to 255 visible ASCII characters. Read
/// from the request's headers without copying the rest of them.
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(IdempotencyKey(None));
        };
        let value = value.to_str().unwrap_or("\u{0}");
        check_idempotency_key(value)
            .map(|key| IdempotencyKey(Some(key)))
            .map_err(|message| ApiError::BadRequest(format!("`Idempotency-Key` {message}")))
    }
}
