//! `/standing-approvals`: the standing approvals that hold now, and revoking one (approvers,
//! for the tools they decide; admins). Granted with an approval (`standing` on
//! `POST /approvals/{token}/approve`); the rule is the lifecycle's (`crate::dispatch`).
//!
//! A caller is refused (`403`), as on `/approvals`: what approvers granted, and who, is theirs
//! to see; a caller learns of a standing approval by its calls running at once, each record
//! naming it (`standing_approval`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use serde::Serialize;

use super::RestState;
use super::error_responses::{PathMalformed, StoreFailed, UnknownStandingApproval};
use crate::http::auth::{Access, Principal};
use crate::http::error::ApiError;
use crate::http::extract::PathParam;
use crate::http::gate::Gates;
use crate::store::StandingApproval;

/// `/standing-approvals*`: approvers.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    let gate = || gates.route(Access::Approvals);
    Router::new()
        .route("/standing-approvals", get(list).route_layer(gate()))
        .route(
            "/standing-approvals/{id}",
            delete(revoke).route_layer(gate()),
        )
}

/// The standing approvals that hold now.
#[derive(Serialize, utoipa::ToSchema)]
pub struct StandingList {
    /// Newest first: not revoked, not expired, with calls left.
    pub standing_approvals: Vec<StandingApproval>,
}

/// Lists the standing approvals that hold now, of the tools the principal decides.
#[utoipa::path(
    get, path = "/standing-approvals", tag = "approvals", operation_id = "listStandingApprovals",
    responses(
        (status = 200, description = "The standing approvals that hold now (not revoked, not expired, calls left), newest first: the tool, the caller, the approver, the calls left and when it expires.", body = StandingList),
        StoreFailed,
    )
)]
pub(super) async fn list(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<StandingList>, ApiError> {
    let standing_approvals = app.dispatcher.standing_approvals(&principal).await?;
    Ok(Json(StandingList { standing_approvals }))
}

/// Revokes a standing approval: from now on it releases no call (a call it released stays as
/// it is). Revoking one already revoked changes nothing.
#[utoipa::path(
    delete, path = "/standing-approvals/{id}", tag = "approvals", operation_id = "revokeStandingApproval",
    params(("id" = String, Path, description = "The standing approval's id.")),
    responses(
        (status = 204, description = "Revoked."),
        PathMalformed,
        UnknownStandingApproval,
        StoreFailed,
    )
)]
pub(super) async fn revoke(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    PathParam(id): PathParam,
) -> Result<StatusCode, ApiError> {
    app.dispatcher.revoke_standing(&id, &principal).await?;
    Ok(StatusCode::NO_CONTENT)
}
