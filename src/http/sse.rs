//! The change feed over Server-Sent Events, for every door that streams it (`GET /events`, the
//! inbox's live queue): where a reconnecting client resumes, and the events as SSE. Which events
//! a principal sees is the lifecycle's to say (`Dispatcher::events`).

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};

use crate::dispatch::quota::HeldPermit;
use crate::feed::stream::FeedEvent;

/// How often an idle stream sends a comment, so that proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The entry a reconnecting client resumes after: `Last-Event-ID`, else `?after=`.
pub fn resume_point(headers: &HeaderMap, after: Option<String>) -> Option<String> {
    headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .filter(|id| !id.is_empty())
        .or(after)
}

/// The events as Server-Sent Events: `event:` the type, `id:` the cursor, `data:` the entry.
/// The stream counts against its principal's `max_held` (`held`) for as long as it is open.
pub fn sse(
    events: impl Stream<Item = FeedEvent> + Send + 'static,
    held: HeldPermit,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + Send + 'static> {
    let events = events.map(move |event| {
        let _counted = &held;
        Ok(Event::default()
            .event(event.kind)
            .id(event.id)
            .data(event.data))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}
