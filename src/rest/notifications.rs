//! `/notifications/deliveries`: what the notification channels (`[[notify]]`: email, Slack)
//! sent, are sending and gave up on (admin), as `/webhooks/deliveries` lists the webhooks'.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

use super::RestState;
use super::approvals::page;
use super::error_responses::StoreFailed;
use super::webhooks::DeliveriesQuery;
use crate::http::auth::Access;
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::extract::QueryParams;
use crate::http::gate::Gates;
use crate::store::Delivery;

/// `/notifications/deliveries`: admins only.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new().route(
        "/notifications/deliveries",
        get(list).route_layer(gates.route(Access::Admin)),
    )
}

/// One page of notifications, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct NotificationList {
    /// The notifications: each names its `channel` and `recipient` (and, once posted to
    /// Slack, its `receipt`: the message's channel and `ts`), where a webhook's delivery names
    /// its `webhook`.
    pub deliveries: Vec<Delivery>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// Lists the notification channels' deliveries, newest first.
#[utoipa::path(
    get, path = "/notifications/deliveries", tag = "notifications", operation_id = "listNotifications",
    params(DeliveriesQuery),
    responses(
        (status = 200, description = "A page of notifications: the channel, the recipient, the type, the call, the attempts, the last status and error, the next attempt.", body = NotificationList),
        (status = 400, description = "`bad_request`: a bad status, `limit` or `cursor`.", body = ErrorEnvelope),
        StoreFailed,
    )
)]
pub(super) async fn list(
    State(app): State<RestState>,
    QueryParams(query): QueryParams<DeliveriesQuery>,
) -> Result<Json<NotificationList>, ApiError> {
    let (limit, after) = page(query.limit, query.cursor.as_deref())?;
    let page = app
        .dispatcher
        .store()
        .list_notifications(query.status, after, limit)
        .await?;
    Ok(Json(NotificationList {
        deliveries: page.deliveries,
        next_cursor: page.next_cursor.map(|id| id.to_string()),
    }))
}
