//! `GET /events`: the change feed as Server-Sent Events.
//!
//! One SSE event per feed entry the key may see (a caller: its own calls; an approver or an
//! admin: all): `event:` the type, `id:` the entry's cursor, `data:` `{"type", "at", "call",
//! "suspension"?}`. A reconnection with `Last-Event-ID` (or `?after=`) resumes exactly after that
//! entry; without either, the stream starts with the next new entry. Each stream reads the store
//! itself, woken by the store's feed changes, so it holds no connection between reads and needs
//! no buffer of its own; it gives back its `max_in_flight` slot, and ends at a graceful shutdown
//! (the client reconnects with `Last-Event-ID`).

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;

use super::AppState;
use super::auth::Principal;
use super::error::ApiError;
use super::extract::QueryParams;
use super::wait::HeldSlot;
use crate::store::{FEED_TYPES, FeedCursor, FeedEntry, Store, StoreError};

/// How often an idle stream sends a comment, so that proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How soon a stream reads again when newer entries are not final yet.
const SETTLING: Duration = Duration::from_millis(20);

/// The entries read per page.
const PAGE: u32 = 100;

/// Filters and the resume point of `GET /events`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only these types, comma-separated (`call.suspended,call.completed`).
    pub types: Option<String>,
    /// Only calls of this tool.
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
        (status = 200, description = "`text/event-stream`: one event per change of a call the key may see; `event:` its type, `id:` its cursor, `data:` `{type, at, call, suspension?}`.", content_type = "text/event-stream", body = String),
        (status = 400, description = "`bad_request`: an unknown type, an unknown parameter, or a cursor this server did not hand out.", body = super::error::ErrorEnvelope),
        (status = 410, description = "`cursor_expired`: the cursor is older than the feed's retention; reconnect without one (and re-read what you need).", body = super::error::ErrorEnvelope),
    )
)]
pub(super) async fn events(
    State(app): State<AppState>,
    Extension(principal): Extension<Principal>,
    held: Option<Extension<HeldSlot>>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let types = match &query.types {
        None => None,
        Some(list) => {
            let mut wanted = HashSet::new();
            for kind in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                if !FEED_TYPES.contains(&kind) {
                    return Err(ApiError::BadRequest(format!(
                        "Unknown event type `{kind}`; the types are {}.",
                        FEED_TYPES.join(", ")
                    )));
                }
                wanted.insert(kind.to_owned());
            }
            Some(wanted)
        }
    };
    let cursor = start_cursor(&app, resume_point(&headers, query.after)).await?;
    if let Some(Extension(held)) = held {
        held.release();
    }
    Ok(follow(&app, principal, cursor, types, query.tool, true))
}

/// The entry a reconnecting client resumes after: `Last-Event-ID`, else `?after=`.
pub(crate) fn resume_point(headers: &HeaderMap, after: Option<String>) -> Option<String> {
    headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .filter(|id| !id.is_empty())
        .or(after)
}

/// Where a stream starts: right after `resume` (an event `id` a client received; checked now,
/// so that a bad or expired cursor is an answer, not a stream that ends), or with the next new
/// entry.
pub(crate) async fn start_cursor(
    app: &AppState,
    resume: Option<String>,
) -> Result<FeedCursor, ApiError> {
    let store = app.dispatcher.store();
    match resume {
        Some(after) => {
            let cursor = FeedCursor(after);
            store.feed(Some(&cursor), 1).await.map_err(feed_error)?;
            Ok(cursor)
        }
        None => Ok(store.feed_head().await?),
    }
}

/// The feed from `cursor` on, as the Server-Sent Events `principal` may see, filtered by type
/// and tool; suspension tokens only when `tokens` is set and the principal is an approver. The
/// one event stream of every door (`GET /events`, the inbox's live updates).
pub(crate) fn follow(
    app: &AppState,
    principal: Principal,
    cursor: FeedCursor,
    types: Option<HashSet<String>>,
    tool: Option<String>,
    tokens: bool,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let follow = Follow {
        store: app.dispatcher.store().clone(),
        cursor,
        ready: VecDeque::new(),
        changes: app.dispatcher.store().feed_changes(),
        released: app.dispatcher.running().released(),
        tokens: tokens && principal.sees_all_calls(),
        principal,
        types,
        tool,
    };
    let stream = futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((Ok(event), follow))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

fn feed_error(err: StoreError) -> ApiError {
    match err {
        StoreError::CursorExpired => ApiError::CursorExpired,
        StoreError::BadCursor(_) => ApiError::BadRequest(
            "The cursor is not one this server handed out as an event `id`.".into(),
        ),
        other => other.into(),
    }
}

/// One stream's position in the feed.
struct Follow {
    store: std::sync::Arc<dyn Store>,
    cursor: FeedCursor,
    ready: VecDeque<Event>,
    changes: tokio::sync::watch::Receiver<u64>,
    released: tokio::sync::watch::Receiver<bool>,
    principal: Principal,
    /// Whether suspensions carry their token.
    tokens: bool,
    types: Option<HashSet<String>>,
    tool: Option<String>,
}

impl Follow {
    /// The next event, or `None` when the stream ends (a shutdown, or the store failing: the
    /// client reconnects with `Last-Event-ID`).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if *self.released.borrow() {
                return None;
            }
            self.changes.borrow_and_update();
            let page = self.store.feed(Some(&self.cursor), PAGE).await.ok()?;
            let full = page.entries.len() == PAGE as usize;
            let settling = page.settling;
            self.cursor = page.cursor;
            for entry in page.entries {
                if let Some(event) = self.event(&entry) {
                    self.ready.push_back(event);
                }
            }
            if full || !self.ready.is_empty() {
                continue;
            }
            let wait = if settling {
                SETTLING
            } else {
                Duration::from_secs(3600)
            };
            tokio::select! {
                changed = self.changes.changed() => changed.ok()?,
                () = tokio::time::sleep(wait) => {}
                _ = self.released.wait_for(|released| *released) => return None,
            }
        }
    }

    /// The entry as this stream shows it, if it may and wants to.
    fn event(&self, entry: &FeedEntry) -> Option<Event> {
        if !self.principal.sees_all_calls() && entry.call.caller != self.principal.name {
            return None;
        }
        if self
            .types
            .as_ref()
            .is_some_and(|t| !t.contains(&entry.kind))
        {
            return None;
        }
        if self.tool.as_ref().is_some_and(|t| *t != entry.call.tool) {
            return None;
        }
        let data = crate::feed::entry_data(entry, self.tokens);
        let data = serde_json::to_string(&data).ok()?;
        Some(
            Event::default()
                .event(&entry.kind)
                .id(entry.cursor.0.clone())
                .data(data),
        )
    }
}
