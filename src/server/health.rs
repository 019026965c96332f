//! `/healthz` (the process answers) and `/readyz` (the store answers too).

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::AppState;
use super::error::{ApiError, ErrorEnvelope};

/// A health answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok` or `ready`.
    pub status: &'static str,
}

/// Liveness: the server is up.
#[utoipa::path(
    get, path = "/healthz", tag = "health", operation_id = "healthz",
    responses((status = 200, description = "The server is up.", body = Health))
)]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the server and its store can serve requests.
#[utoipa::path(
    get, path = "/readyz", tag = "health", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready to serve.", body = Health),
        (status = 503, description = "`not_ready`: the store does not answer.", body = ErrorEnvelope),
    )
)]
pub(super) async fn readyz(State(app): State<AppState>) -> Result<Json<Health>, ApiError> {
    match app.dispatcher.store().ping().await {
        Ok(()) => Ok(Json(Health { status: "ready" })),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            Err(ApiError::NotReady)
        }
    }
}
