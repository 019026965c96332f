//! `/webhooks/deliveries`: what the webhooks sent, are sending and gave up on (admin).

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::RestState;
use super::approvals::page;
use super::error_responses::StoreFailed;
use crate::http::auth::Access;
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::extract::{PathParam, QueryParams};
use crate::http::gate::Gates;

/// `/webhooks/deliveries*`: admins only.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new()
        .route(
            "/webhooks/deliveries",
            get(list).route_layer(gates.route(Access::Admin)),
        )
        .route(
            "/webhooks/deliveries/{id}/retry",
            post(retry).route_layer(gates.route(Access::Admin)),
        )
}
use crate::store::{Delivery, DeliveryStatus};

/// Filters and paging of `GET /webhooks/deliveries`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// Only deliveries in this status.
    pub status: Option<DeliveryStatus>,
    /// How many to return, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One page of deliveries, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct DeliveryList {
    /// The deliveries.
    pub deliveries: Vec<Delivery>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// Lists webhook deliveries, newest first.
#[utoipa::path(
    get, path = "/webhooks/deliveries", tag = "webhooks", operation_id = "listDeliveries",
    params(DeliveriesQuery),
    responses(
        (status = 200, description = "A page of deliveries: the webhook's URL, the type, the call, the attempts, the last status and error, the next attempt.", body = DeliveryList),
        (status = 400, description = "`bad_request`: a bad status, `limit` or `cursor`.", body = ErrorEnvelope),
        StoreFailed,
    )
)]
pub(super) async fn list(
    State(app): State<RestState>,
    QueryParams(query): QueryParams<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let (limit, after) = page(query.limit, query.cursor.as_deref())?;
    let page = app
        .dispatcher
        .store()
        .list_deliveries(query.status, after, limit)
        .await?;
    Ok(Json(DeliveryList {
        deliveries: page.deliveries,
        next_cursor: page.next_cursor.map(|id| id.to_string()),
    }))
}

/// Sends a failed delivery again (at once), with the same message id.
#[utoipa::path(
    post, path = "/webhooks/deliveries/{id}/retry", tag = "webhooks", operation_id = "retryDelivery",
    params(("id" = i64, Path, description = "The delivery's id.")),
    responses(
        (status = 200, description = "It is pending again, due now.", body = Delivery),
        (status = 400, description = "`bad_request`: the id is not a number.", body = ErrorEnvelope),
        (status = 404, description = "`not_found`: no delivery has this id.", body = ErrorEnvelope),
        (status = 409, description = "`not_retryable`: the delivery is not failed (`details` is the delivery).", body = ErrorEnvelope),
        StoreFailed,
    )
)]
pub(super) async fn retry(
    State(app): State<RestState>,
    PathParam(id): PathParam,
) -> Result<Json<Delivery>, ApiError> {
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::BadRequest("A delivery id is a number.".into()))?;
    let was = app
        .dispatcher
        .store()
        .retry_delivery(id)
        .await?
        .ok_or(ApiError::UnknownDelivery(id))?;
    match was.status {
        DeliveryStatus::Pending => {
            app.webhooks.wake();
            Ok(Json(was))
        }
        _ => Err(ApiError::NotRetryable(Box::new(was))),
    }
}
