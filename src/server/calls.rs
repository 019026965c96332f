//! `/calls`: reading a call's record.

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::error::{ApiError, ErrorEnvelope};
use super::extract::PathParam;
use crate::store::CallRecord;

/// A call's record: its status, input, output or error, and pending suspension.
#[utoipa::path(
    get, path = "/calls/{call_id}", tag = "calls", operation_id = "getCall",
    params(("call_id" = String, Path, description = "The call's id.")),
    responses(
        (status = 200, description = "The call.", body = CallRecord),
        (status = 400, description = "`bad_request`: the path is malformed.", body = ErrorEnvelope),
        (status = 404, description = "`unknown_call`: no call has this id.", body = ErrorEnvelope),
        (status = 500, description = "`internal`: the store failed.", body = ErrorEnvelope),
    )
)]
pub(super) async fn get(
    State(app): State<AppState>,
    PathParam(call_id): PathParam,
) -> Result<Json<CallRecord>, ApiError> {
    tracing::Span::current().record("call_id", call_id.as_str());
    app.dispatcher
        .store()
        .call(&call_id)
        .await?
        .map(Json)
        .ok_or(ApiError::UnknownCall(call_id))
}
