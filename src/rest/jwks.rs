//! `GET /.well-known/jwks.json`: the public keys that verify what toolgate signs (the
//! attestations each upstream call carries), for anyone, without credentials: an upstream
//! fetches it to check a call came through the gate.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::RestState;
use crate::http::auth::Access;
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::gate::Gates;

/// How long a verifier may keep the key set (seconds): a key is published from when it first
/// signs, so a verifier that meets an unknown `kid` fetches the set again (PyJWT's
/// `PyJWKClient` does), and short enough that a cache rarely needs to.
const MAX_AGE_S: u32 = 300;

/// The key set's route: public (its own gate checks only the `Host`).
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new().route(
        "/.well-known/jwks.json",
        get(jwks).route_layer(gates.route(Access::Discovery)),
    )
}

/// The JSON Web Key Set (RFC 7517) that verifies toolgate's signatures: the key signing now
/// first, then each earlier key until every token it signed has expired.
#[utoipa::path(
    get, path = "/.well-known/jwks.json", tag = "attestations", operation_id = "jwks",
    responses(
        (status = 200, description = "The public keys (`{\"keys\": [...]}`), each with its `kid`, `alg` (`EdDSA` or `ES256`) and `use` `sig`.", body = Object),
        (status = 503, description = "`not_ready`: the store does not answer, so the keys cannot be read.", body = ErrorEnvelope),
    )
)]
pub(super) async fn jwks(State(app): State<RestState>) -> Result<Response, ApiError> {
    let Some(signer) = app.dispatcher.signer() else {
        return Err(ApiError::RouteNotFound);
    };
    match signer.jwks().await {
        Ok(set) => Ok((
            [
                (
                    header::CACHE_CONTROL,
                    format!("public, max-age={MAX_AGE_S}"),
                ),
                (header::CONTENT_TYPE, "application/json".to_owned()),
            ],
            set.to_string(),
        )
            .into_response()),
        Err(err) => {
            tracing::warn!(error = %err, "cannot read the signing keys");
            Err(ApiError::NotReady)
        }
    }
}
