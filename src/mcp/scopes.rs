//! `required_scopes` on `/mcp`: a `tools/call` whose token lacks a scope the tool requires is
//! answered with HTTP `403` and the `insufficient_scope` challenge (RFC 6750 3.1), as MCP's
//! authorization asks, so a client can step up its grant; a JSON-RPC error inside a `200`
//! would tell it nothing it could act on.
//!
//! The SDK answers every request inside the protocol, so this reads the request first: only on
//! a server whose tools require scopes, and only for a principal with a token (an API key's
//! rights are its configuration). The body was read in full, within its limits, before the
//! route (`crate::http::body`): peeking at it here copies nothing, and it goes on as it came.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::dispatch::{DispatchError, Dispatcher};
use crate::http::auth::Principal;
use crate::http::error::ApiError;

/// What is read of a request: its method, and the tool a `tools/call` names.
#[derive(Deserialize)]
struct Peek {
    method: Option<String>,
    params: Option<PeekParams>,
}

#[derive(Deserialize)]
struct PeekParams {
    name: Option<String>,
}

/// Answers a `tools/call` the principal lacks scopes for with the `403` challenge (the gate
/// adds `resource_metadata`); passes everything else on unchanged.
pub(super) async fn check(
    State((dispatcher, max_body_bytes)): State<(Dispatcher, usize)>,
    request: Request,
    next: Next,
) -> Response {
    let scoped = request
        .extensions()
        .get::<Principal>()
        .is_some_and(|principal| principal.scopes.is_some());
    if !scoped {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, max_body_bytes).await else {
        return ApiError::PayloadTooLarge(format!(
            "The request body is larger than {max_body_bytes} bytes."
        ))
        .into_response();
    };
    let tool = serde_json::from_slice::<Peek>(&bytes)
        .ok()
        .filter(|peek| peek.method.as_deref() == Some("tools/call"))
        .and_then(|peek| peek.params?.name);
    if let (Some(tool), Some(principal)) = (tool, parts.extensions.get::<Principal>())
        && let Err(err @ DispatchError::InsufficientScope { .. }) =
            dispatcher.may_call(principal, &tool)
    {
        return ApiError::from(err).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
