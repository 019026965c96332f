//! `/healthz` (the process answers) and `/readyz` (the store answers too).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::RestState;
use crate::http::error::{ApiError, ErrorEnvelope};

/// `/healthz` and `/readyz`: open to anyone, with no gate (a probe carries no key).
pub(super) fn router() -> Router<RestState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// A health answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok` or `ready`.
    pub status: &'static str,
    /// With `ready`: the store's backend, `sqlite` or `postgres`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<&'static str>,
    /// With `ready` on a shared database: this process's replica id, fresh at every start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
}

/// Liveness: the server is up.
#[utoipa::path(
    get, path = "/healthz", tag = "health", operation_id = "healthz",
    responses((status = 200, description = "The server is up.", body = Health))
)]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        store: None,
        replica: None,
    })
}

/// Readiness: the server and its store can serve requests.
#[utoipa::path(
    get, path = "/readyz", tag = "health", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready to serve.", body = Health),
        (status = 503, description = "`not_ready`: the store does not answer (the database is down or unreachable).", body = ErrorEnvelope),
    )
)]
pub(super) async fn readyz(State(app): State<RestState>) -> Result<Json<Health>, ApiError> {
    let store = app.dispatcher.store();
    match store.ping().await {
        Ok(()) => Ok(Json(Health {
            status: "ready",
            store: Some(store.backend()),
            replica: store.replica().map(str::to_owned),
        })),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            Err(ApiError::NotReady)
        }
    }
}
