//! `GET /events`: the change feed as Server-Sent Events.
//!
//! One SSE event per feed entry the key may see (the lifecycle's rule, `Dispatcher::events`: a
//! caller, its own calls; an approver or an admin, those of the tools it decides, and a call an
//! escalation reached it for): `event:` the type, `id:` the entry's cursor, `data:` `{"type",
//! "at", "call", "suspension"?, "error"?}`, and for `call.approval_recorded` the `"approvals"` so
//! far (its approver last) and `"approvals_required"`. A reconnection with `Last-Event-ID` (or
//! `?after=`) resumes exactly after that entry; without either, the stream starts with the next
//! new entry. Each stream reads the store itself, woken by the store's feed changes, so it holds
//! no connection between reads and needs no buffer of its own; it gives back its
//! `max_in_flight` slot, and ends at a graceful shutdown (the client reconnects with
//! `Last-Event-ID`).

use std::collections::HashSet;
use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::routing::get;
use axum::{Extension, Router};
use futures_util::Stream;
use serde::Deserialize;

use super::RestState;
use crate::dispatch::{EventFilter, Resume};
use crate::http::auth::{Access, Principal};
use crate::http::error::ApiError;
use crate::http::extract::QueryParams;
use crate::http::gate::Gates;
use crate::http::hold::HeldSlot;
use crate::http::sse::{resume_point, sse};
use crate::store::{feed_types, is_feed_type};

/// `GET /events`: every key, each seeing what it may; a stream, so it gives back its slot.
pub(super) fn router(gates: &Gates) -> Router<RestState> {
    Router::new().route(
        "/events",
        get(events).route_layer(gates.holding(Access::OwnCalls)),
    )
}

/// Filters and the resume point of `GET /events`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only these types, comma-separated (`call.suspended,call.completed`).
    pub types: Option<String>,
    /// Only calls of this tool (and, for an admin, changes of this upstream tool, by the name
    /// it is served as).
    pub tool: Option<String>,
    /// Resume after this entry (an event's `id`); the `Last-Event-ID` header wins.
    pub after: Option<String>,
}

/// Streams the change feed.
#[utoipa::path(
    get, path = "/events", tag = "calls", operation_id = "events",
    params(
        EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this entry (the `id` of the last event received)."),
    ),
    responses(
        (status = 200, description = "`text/event-stream`: one event per change of a call the key may see; `event:` its type, `id:` its cursor, `data:` `{type, at, call, suspension?, error?}`; a `call.approval_recorded` event adds `approvals` (the approvals so far, this one last: `{approver, display_name?, at}`) and `approvals_required`. An admin also receives `upstream.tool_changed` and `upstream.change_accepted`: `{type, at, change}`, the change naming `upstream`, `tool`, `served_as`, `hash` and `pinned_hash` (`kind` and `differs` when changed, `accepted_by` when accepted).", content_type = "text/event-stream", body = String),
        (status = 400, description = "`bad_request`: an unknown type, an unknown parameter, or a cursor this server did not hand out.", body = crate::http::error::ErrorEnvelope),
        (status = 410, description = "`cursor_expired`: the cursor is older than the feed's retention; reconnect without one (and re-read what you need).", body = crate::http::error::ErrorEnvelope),
        (status = 429, description = "`rate_limited` (with `Retry-After`, `RateLimit-Policy` and `RateLimit`): the key holds as many requests (`?wait=` and streams) as its `max_held` allows; `details.quota` is `max_held`.", body = crate::http::error::ErrorEnvelope,
            headers(("Retry-After" = String, description = "Seconds to wait."), ("RateLimit-Policy" = String, description = "The quota, e.g. `\"held\";q=64;qu=\"concurrent-requests\"`."), ("RateLimit" = String, description = "What is left of it: `\"held\";r=0`."))),
    )
)]
pub(super) async fn events(
    State(app): State<RestState>,
    Extension(principal): Extension<Principal>,
    held: Option<Extension<HeldSlot>>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // Counted before any work: past the key's `max_held`, refused at once.
    let counted = app.dispatcher.quotas().hold(&principal)?;
    let types = match &query.types {
        None => None,
        Some(list) => {
            let mut wanted = HashSet::new();
            for kind in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                if !is_feed_type(kind) {
                    return Err(ApiError::BadRequest(format!(
                        "Unknown event type `{kind}`; the types are {}.",
                        feed_types()
                    )));
                }
                wanted.insert(kind.to_owned());
            }
            Some(wanted)
        }
    };
    let resume = resume_point(&headers, query.after).map_or(Resume::Now, Resume::After);
    let filter = EventFilter {
        types,
        tool: query.tool,
        tokens: true,
    };
    let events = app.dispatcher.events(&principal, resume, filter).await?;
    if let Some(Extension(held)) = held {
        held.release();
    }
    Ok(sse(events, counted))
}
