//! `/upstreams/{name}/changes`: the tools of an upstream MCP server held because their
//! definition is not the one pinned, with the diff, and accepting a change (admin). See
//! `crate::upstream::pins`.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};

use super::error_responses::{BodyRefused, PathMalformed, StoreFailed};
use crate::dispatch::Dispatcher;
use crate::http::auth::{Access, Principal};
use crate::http::error::{ApiError, ErrorEnvelope};
use crate::http::extract::{JsonBody, PathParam};
use crate::http::gate::Gates;
use crate::store::Timestamp;
use crate::upstream::PinBook;
use crate::upstream::pins::{AcceptError, ToolChange};

/// What the routes share: the dispatcher and the pinned upstreams.
#[derive(Clone)]
pub(super) struct PinState {
    dispatcher: Dispatcher,
    pins: PinBook,
}

/// `/upstreams/{name}/changes*`: admins only.
pub(crate) fn router(dispatcher: Dispatcher, pins: PinBook, gates: &Gates) -> Router {
    Router::new()
        .route(
            "/upstreams/{name}/changes",
            get(changes).route_layer(gates.route(Access::Admin)),
        )
        .route(
            "/upstreams/{name}/changes/{tool}/accept",
            post(accept).route_layer(gates.route(Access::Admin)),
        )
        .with_state(PinState { dispatcher, pins })
}

/// The changes of an upstream waiting for an admin.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ChangeList {
    /// The upstream.
    pub upstream: String,
    /// Each tool whose definition listed now is not the one pinned (or that has no pin and is
    /// held), by name: both definitions, their hashes, and the members that differ.
    pub changes: Vec<ToolChange>,
}

/// Lists the tools of an upstream held because their definition changed (or is new).
#[utoipa::path(
    get, path = "/upstreams/{name}/changes", tag = "upstreams", operation_id = "listToolChanges",
    params(("name" = String, Path, description = "The upstream's name (`[[upstreams]] name`).")),
    responses(
        (status = 200, description = "The held tools: for each, `pinned` (the definition trusted, its hash, when and by whom) and `upstream` (the definition listed now and its hash, which an accept names), `kind` (`changed` or `new`) and `differs` (the members that differ: `description`, `inputSchema`, ...). Empty when nothing is held.", body = ChangeList),
        (status = 404, description = "`unknown_upstream`: no upstream with pinned tools has this name (or its pins are off, or it never answered).", body = ErrorEnvelope),
        PathMalformed,
    )
)]
pub(super) async fn changes(
    State(app): State<PinState>,
    PathParam(name): PathParam,
) -> Result<Json<ChangeList>, ApiError> {
    let changes = app
        .pins
        .changes(&name)
        .ok_or_else(|| ApiError::UnknownUpstream(name.clone()))?;
    Ok(Json(ChangeList {
        upstream: name,
        changes,
    }))
}

/// What an accept names: the hash of the definition the admin reviewed.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptRequest {
    /// The `upstream.hash` of the change accepted: a definition listed since (another change)
    /// has another hash, and is not accepted blind.
    pub hash: String,
}

/// The pin an accept made.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Accepted {
    /// The upstream.
    pub upstream: String,
    /// The tool's name upstream.
    pub tool: String,
    /// The hash pinned now.
    pub hash: String,
    /// When.
    #[schema(value_type = String, format = DateTime)]
    pub pinned_at: Timestamp,
    /// By whom; `null` when auth is off.
    pub pinned_by: Option<String>,
}

/// Accepts a tool's changed (or new) definition: it is pinned, and the tool is served with it.
#[utoipa::path(
    post, path = "/upstreams/{name}/changes/{tool}/accept", tag = "upstreams", operation_id = "acceptToolChange",
    params(
        ("name" = String, Path, description = "The upstream's name."),
        ("tool" = String, Path, description = "The tool's name upstream (without the prefix)."),
    ),
    request_body = AcceptRequest,
    responses(
        (status = 200, description = "Pinned: the tool is served with the definition accepted (at once by this replica; by the others at their next read of the upstream's tool list).", body = Accepted),
        (status = 400, description = "`bad_request`: malformed JSON, a missing `hash`, an unknown field, or a malformed path.", body = ErrorEnvelope),
        (status = 404, description = "`unknown_upstream`: no upstream with pinned tools has this name. `no_change`: the upstream lists no change of this tool now.", body = ErrorEnvelope),
        (status = 409, description = "`tool_changed`: `hash` is not the hash of the definition listed now (it changed again); `details.current_hash` is. Nothing was accepted.", body = ErrorEnvelope),
        BodyRefused,
        StoreFailed,
    )
)]
pub(super) async fn accept(
    State(app): State<PinState>,
    Extension(principal): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
    JsonBody(request): JsonBody<AcceptRequest>,
) -> Result<Json<Accepted>, ApiError> {
    let Path((name, tool)) =
        path.map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
    let accepted = app
        .pins
        .accept(
            &app.dispatcher,
            &name,
            &tool,
            &request.hash,
            principal.name.as_deref(),
        )
        .await;
    match accepted {
        Ok(pin) => Ok(Json(Accepted {
            upstream: pin.upstream,
            tool: pin.tool,
            hash: pin.hash,
            pinned_at: pin.pinned_at,
            pinned_by: pin.pinned_by,
        })),
        Err(AcceptError::UnknownUpstream(name)) => Err(ApiError::UnknownUpstream(name)),
        Err(AcceptError::NoChange { upstream, tool }) => Err(ApiError::NoChange(upstream, tool)),
        Err(AcceptError::HashMismatch { pinned, current }) => Err(ApiError::ToolChanged {
            tool: format!("{name}{}{tool}", crate::upstream::config::SEPARATOR),
            pinned,
            current: Some(current),
            call_id: None,
        }),
        Err(AcceptError::Store(err)) => Err(err.into()),
    }
}
