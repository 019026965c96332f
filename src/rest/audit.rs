//! The audit record (admin): `GET /audit` pages the hash chain as JSON lines, and
//! `GET /calls/{call_id}/receipt` proves one call without the rest: its entries and every entry
//! between them and the checkpoint that signs them. Both are checked offline by
//! `toolgate audit verify` against `/.well-known/jwks.json`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

use super::RestState;
use super::error_responses::{PathMalformed, StoreFailed};
use crate::audit::Checkpointer;
use crate::http::auth::Access;
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::extract::{PathParam, QueryParams};
use crate::http::gate::Gates;

/// The most entries of one page of `GET /audit`, and its default.
const MAX_PAGE: u32 = 10_000;
const PAGE: u32 = 1_000;

/// The most entries a receipt holds (a call's first entry to its checkpoint).
const MAX_PATH: u32 = 100_000;

/// The audit routes: admins only.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new()
        .route(
            "/audit",
            get(entries).route_layer(gates.route(Access::Admin)),
        )
        .route(
            "/audit/exports",
            get(exports).route_layer(gates.route(Access::Admin)),
        )
        .route(
            "/calls/{call_id}/receipt",
            get(receipt).route_layer(gates.route(Access::Admin)),
        )
}

/// Paging of `GET /audit`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Entries numbered above this one (default 0: from the first).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// How many, 1 to 10000 (default 1000).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

/// The audit chain, as JSON lines: one entry per line, `{"seq", "at", "event", "hash"}`, in
/// order. An empty body: no entry after `after` yet.
#[utoipa::path(
    get, path = "/audit", tag = "audit", operation_id = "auditEntries",
    params(AuditQuery),
    responses(
        (status = 200, description = "The entries after `after` (`application/x-ndjson`), each `{\"seq\", \"at\", \"event\", \"hash\"}`: `hash` is the hex SHA-256 of the previous entry's hash (32 bytes) followed by this entry's RFC 8785 canonical JSON without `hash`. Read on after the last `seq`.", body = String, content_type = "application/x-ndjson"),
        (status = 400, description = "`bad_request`: `after` below 0, `limit` outside 1 to 10000, or an unknown parameter.", body = ErrorEnvelope),
        StoreFailed,
    )
)]
pub(super) async fn entries(
    State(app): State<RestState>,
    QueryParams(query): QueryParams<AuditQuery>,
) -> Result<Response, ApiError> {
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(PAGE);
    if after < 0 || !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "`after` is an entry's number (0 or more) and `limit` 1 to {MAX_PAGE}"
        )));
    }
    let entries = app
        .dispatcher
        .store()
        .audit_entries(after, limit)
        .await
        .map_err(ApiError::from)?;
    let mut body = String::with_capacity(entries.len() * 300);
    for entry in &entries {
        body.push_str(&entry.line());
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// Where each export of the chain (`[audit.export]`) stands, and the chain's head.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ExportList {
    /// The number of the chain's last entry (0: none yet).
    pub head_seq: i64,
    /// Each export that has run: the last entry it delivered, how many in all, its failures.
    pub exports: Vec<crate::store::ExportState>,
}

/// Where each export of the audit chain stands: the last entry it delivered, how many in all,
/// and its failures (the last one's error); `head_seq - after_seq` is its backlog.
#[utoipa::path(
    get, path = "/audit/exports", tag = "audit", operation_id = "auditExports",
    responses(
        (status = 200, description = "`{\"head_seq\", \"exports\": [{\"sink\", \"after_seq\", \"delivered\", \"failures\", \"last_error\", \"last_at\"}]}`.", body = ExportList),
        StoreFailed,
    )
)]
pub(super) async fn exports(
    State(app): State<RestState>,
) -> Result<axum::Json<ExportList>, ApiError> {
    let store = app.dispatcher.store();
    let exports = store.audit_exports().await?;
    let head_seq = store.audit_head().await?.map_or(0, |head| head.seq);
    Ok(axum::Json(ExportList { head_seq, exports }))
}

/// A call's receipt: its entries of the audit chain, the checkpoint that signs them, and every
/// entry between, so that the call is proven with the public keys alone. A call whose last entry
/// no checkpoint covers yet is covered by one signed now.
#[utoipa::path(
    get, path = "/calls/{call_id}/receipt", tag = "audit", operation_id = "callReceipt",
    params(("call_id" = String, Path, description = "The call's id.")),
    responses(
        (status = 200, description = "`{\"call_id\", \"prev\", \"entries\", \"call_entries\", \"checkpoint\"}`: `entries` link from `prev` (the hash before the first) to the checkpoint, the last of them, whose `jws` signs the number and hash of an entry at or after the call's last (`call_entries`).", body = Object),
        PathMalformed,
        (status = 404, description = "`unknown_call`: no entry of the chain is of a call with this id; or the server signs nothing (no `[signing]`), so it has no receipts.", body = ErrorEnvelope),
        (status = 503, description = "`not_ready`: no checkpoint could be signed now.", body = ErrorEnvelope),
        StoreFailed,
    )
)]
pub(super) async fn receipt(
    State(app): State<RestState>,
    PathParam(call_id): PathParam,
) -> Result<Response, ApiError> {
    let Some(signer) = app.dispatcher.signer() else {
        return Err(ApiError::RouteNotFound);
    };
    let store = app.dispatcher.store();
    let mut path = store.audit_path(&call_id, MAX_PATH).await?;
    if path.as_ref().is_some_and(|path| !path.covered) {
        let checkpointer = Checkpointer::new(store.clone(), Arc::clone(signer));
        if let Err(err) = checkpointer.checkpoint().await {
            tracing::warn!(error = %err, "cannot sign a checkpoint for a receipt");
            return Err(ApiError::NotReady);
        }
        path = store.audit_path(&call_id, MAX_PATH).await?;
    }
    let Some(path) = path else {
        return Err(ApiError::UnknownCall(call_id));
    };
    if !path.covered {
        return Err(ApiError::NotReady);
    }
    let entries: Vec<Value> = path
        .entries
        .iter()
        .map(|entry| serde_json::from_str(&entry.line()).unwrap_or(Value::Null))
        .collect();
    let checkpoint = entries.last().cloned().unwrap_or(Value::Null);
    let receipt = json!({
        "call_id": call_id,
        "prev": path.prev,
        "entries": entries,
        "call_entries": path.call_entries,
        "checkpoint": checkpoint,
    });
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        receipt.to_string(),
    )
        .into_response())
}
