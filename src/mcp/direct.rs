//! The direct way of a stateless JSON `tools/call` to the door: one request, one answer, on the
//! request's own task.
//!
//! The SDK's stateless transport serves every request through a service of its own: a task per
//! request, another for the handler, channels between them and a cancellation token for each,
//! which cost an MCP `tools/call` more than the call itself (BENCHMARKS.md, MCP). A `tools/call`
//! answered with JSON needs none of that, so this layer in front of the transport answers the
//! common shapes itself: it reads the request with the SDK's types for its id, `_meta` and
//! arguments into the SDK's `CallToolRequestParams` (more strictly than the SDK, never less), asks
//! the door's [`Door::call`] (the same function the SDK's [`rmcp::ServerHandler::call_tool`]
//! reaches), shapes the result for the request's era with the SDK's own functions, as its
//! handler does, and writes the SDK's message type back.
//!
//! It takes only requests that every check of the transport would pass as they are, and hands
//! everything else on to the transport unchanged, to be answered (or refused) by the SDK:
//! any other method, a notification, a version header that is unknown or disagrees with
//! `_meta`, incomplete 2026-07-28 metadata, `Mcp-Method` or `Mcp-Name` headers that are
//! missing, repeated, encoded or different from the body, a tool whose input schema promotes
//! parameters to `Mcp-Param-*` headers, an `Accept` with parameters, a `Content-Type` that is
//! not JSON. `tests/mcp.rs` sends the same requests both ways and holds the answers equal.
//!
//! The gate in front of the route has already checked `Host` and `Origin` by the same rules as
//! the transport's own check (`rebinding`'s tests hold them equal), and read the body within
//! its limits (`crate::http::body`).

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::fmt;
use std::marker::PhantomData;

use rmcp::model::{
    CallToolRequestParams, ErrorCode, InputResponses, JsonObject, JsonRpcVersion2_0,
    ProtocolVersion, RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_MCP_METHOD, HEADER_MCP_NAME, HEADER_MCP_PROTOCOL_VERSION,
    JSON_MIME_TYPE,
};
use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{Asked, Door};
use crate::http::error::ApiError;

/// A JSON-RPC request as the direct way reads it, with the SDK's types for its id and params
/// (the SDK reads every message as one of four kinds, trying each: the costliest step of a
/// `tools/call` on its way). Stricter than the SDK, never looser: an object only, and no field
/// it does not know (a stray `result` or `error`, whose presence the SDK refuses, or any other,
/// whose value the SDK parses whole but this would skip unread): such a request goes to the SDK.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallMessage {
    #[serde(rename = "jsonrpc")]
    _version: JsonRpcVersion2_0,
    id: RequestId,
    method: String,
    params: Object<CallParams>,
}

/// `tools/call`'s params, the fields of the SDK's [`CallToolRequestParams`] and no other.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CallParams {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(default)]
    input_responses: Option<InputResponses>,
    #[serde(default)]
    request_state: Option<String>,
}

impl CallParams {
    /// The SDK's params, and the request's `_meta`.
    fn into_sdk(self) -> (CallToolRequestParams, RequestMetaObject) {
        let mut params = CallToolRequestParams::new(self.name);
        params.arguments = self.arguments;
        params.input_responses = self.input_responses;
        params.request_state = self.request_state;
        (params, self.meta.unwrap_or_default())
    }
}

/// A value read only from a JSON object (serde would read a struct from an array too, by
/// position; the SDK's flattened types never do).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Fields(PhantomData))
            .map(Object)
    }
}

/// The prefix by which SEP-2243 marks a header value as Base64.
const ENCODED_HEADER: &str = "=?base64?";

/// Answers a stateless JSON `tools/call` of a common shape through [`Door::call`]; passes any
/// other request on to the SDK's transport as it came.
pub(super) async fn answer(State(door): State<Door>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST
        || !accepts_both(request.headers())
        || !sends_json(request.headers())
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // Read in full before the route, within its limit: this takes what is already there.
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return ApiError::BadRequest("The request body could not be read.".into()).into_response();
    };
    let Some(Object(CallMessage { id, params, .. })) =
        serde_json::from_slice::<Object<CallMessage>>(&bytes)
            .ok()
            .filter(|message| message.0.method == "tools/call")
    else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let (params, meta) = params.0.into_sdk();
    let Some(shape) = plain_shape(&parts.headers, &params, &meta, &door) else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let asked = Asked {
        parts: &parts,
        meta: &meta,
        tasks: shape.tasks,
        id: &id,
    };
    let mut status = StatusCode::OK;
    let message = match door.call(params, &asked).await {
        Ok(response) => {
            // Shaped for the era as the SDK's handler shapes every result.
            let mut result = ServerResult::from(response);
            if shape.modern {
                result.fill_missing_cache_hints();
            } else {
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
            }
            ServerJsonRpcMessage::response(result, id)
        }
        Err(mut error) => {
            // As the SDK's handler names an error for the era, and its transport answers one of
            // a request that carried its version in `_meta` (complete, or it would not be here).
            if shape.modern && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            if shape.negotiated {
                status = match error.code {
                    ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
                    | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                    | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
                    ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
                    _ => StatusCode::OK,
                };
            }
            ServerJsonRpcMessage::error(error, Some(id))
        }
    };
    match serde_json::to_vec(&message) {
        Ok(body) => (
            status,
            [(CONTENT_TYPE, HeaderValue::from_static(JSON_MIME_TYPE))],
            body,
        )
            .into_response(),
        Err(err) => {
            tracing::error!(error = %err, "an MCP answer could not be written");
            ApiError::Internal.into_response()
        }
    }
}

/// Whether `Accept` names both JSON and the event stream, as the transport requires, with no
/// parameters or quotes (a weight of zero would refuse one, a quote may hide a comma: the
/// transport decides those).
fn accepts_both(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for range in value.split(',') {
            let range = range.trim();
            // Parameters and quoted strings are the transport's to read.
            if range.contains([';', '"']) {
                return false;
            }
            json |= range.eq_ignore_ascii_case(JSON_MIME_TYPE);
            events |= range.eq_ignore_ascii_case(EVENT_STREAM_MIME_TYPE);
        }
    }
    json && events
}

/// Whether the body is sent as JSON.
fn sends_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case(JSON_MIME_TYPE)
        })
}

/// What the door's answer depends on, of a request the transport would pass as it is.
struct Shape {
    /// Whether the request speaks 2026-07-28 or later.
    modern: bool,
    /// Whether it carries its version in `_meta` (the SDK's per-request negotiation).
    negotiated: bool,
    /// Whether its client declared the tasks extension.
    tasks: bool,
}

/// The shape of a `tools/call` every check of the transport passes as it is; `None` hands it
/// to the transport.
fn plain_shape(
    headers: &HeaderMap,
    call: &CallToolRequestParams,
    meta: &RequestMetaObject,
    door: &Door,
) -> Option<Shape> {
    let header = match only(headers, HEADER_MCP_PROTOCOL_VERSION) {
        Only::None => None,
        Only::One(version) => Some(version),
        Only::Many => return None,
    };
    let known = |version: &str| {
        ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .any(|known| known.as_str() == version)
    };
    let version = meta.protocol_version();
    let negotiated = version.is_some();
    let modern = match version {
        // The `initialize` era: a known version (or none, 2025-03-26), no 2026-07-28 headers.
        None => {
            if !header.is_none_or(|version| known(version) && !is_modern(version)) {
                return None;
            }
            false
        }
        // Per-request metadata: complete, a version the server speaks, the header saying the
        // same, and from 2026-07-28 the standard headers agreeing with the body.
        Some(version) => {
            if header != Some(version.as_str())
                || !known(version.as_str())
                || !meta
                    .missing_required_keys(&ProtocolVersion::V_2026_07_28)
                    .is_empty()
            {
                return None;
            }
            if is_modern(version.as_str())
                && (only(headers, HEADER_MCP_METHOD) != Only::One("tools/call")
                    || only(headers, HEADER_MCP_NAME) != Only::One(&call.name)
                    || call.name.starts_with(ENCODED_HEADER)
                    || door.promotes_headers(&call.name))
            {
                return None;
            }
            is_modern(version.as_str())
        }
    };
    Some(Shape {
        modern,
        negotiated,
        tasks: declares_tasks(meta),
    })
}

/// Whether a version is 2026-07-28 or later (dates compare as strings).
fn is_modern(version: &str) -> bool {
    version >= ProtocolVersion::V_2026_07_28.as_str()
}

/// Whether the request's `_meta` declares the tasks extension (a stateless request has no
/// other way to).
fn declares_tasks(meta: &RequestMetaObject) -> bool {
    meta.client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// How many values a header has.
#[derive(PartialEq, Eq)]
enum Only<'a> {
    None,
    One(&'a str),
    Many,
}

fn only<'a>(headers: &'a HeaderMap, name: &str) -> Only<'a> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Only::None,
        (Some(value), None) => value.to_str().map_or(Only::Many, Only::One),
        _ => Only::Many,
    }
}
