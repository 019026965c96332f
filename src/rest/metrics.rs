//! `GET /metrics` (admin): the process's metrics in the Prometheus text format, with the store's
//! figures read at the scrape. (What counts each request is `crate::http::requests`.)

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::RestState;
use super::error_responses::StoreFailed;
use crate::http::auth::Access;
use crate::http::error::ApiError;
use crate::http::gate::Gates;

/// `GET /metrics`: admins only.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new().route(
        "/metrics",
        get(serve).route_layer(gates.route(Access::Admin)),
    )
}

/// The process's metrics, and the store's as they are now.
#[utoipa::path(
    get, path = "/metrics", tag = "metrics", operation_id = "metrics",
    responses(
        (status = 200, description = "The Prometheus text format, version 0.0.4 (`text/plain; version=0.0.4`): `toolgate_calls_total{tool,status}`, `toolgate_call_duration_seconds{tool}`, `toolgate_approvals_pending`, `toolgate_approval_decision_seconds`, `toolgate_http_requests_total{route,status}`, `toolgate_store_batch_size`, `toolgate_store_commit_seconds`, `toolgate_webhook_deliveries_total{result}`, `toolgate_waiters`, and on PostgreSQL `toolgate_replicas_live`.", content_type = "text/plain", body = String),
        StoreFailed,
    )
)]
pub(super) async fn serve(State(app): State<RestState>) -> Result<Response, ApiError> {
    let counts = app.dispatcher.store().counts().await?;
    let text =
        crate::metrics::render(counts.pending_approvals, counts.live_replicas).map_err(|err| {
            tracing::error!(error = %err, "cannot render the metrics");
            ApiError::Internal
        })?;
    Ok(([(CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}
