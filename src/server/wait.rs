//! `?wait=N`: requests held until what they ask about changes (long-polls).
//!
//! A held request gives back its slot of `max_in_flight` while it waits (see [`HeldSlot`]): a
//! thousand orchestrators waiting for their approvals must not shed the calls of everyone else.
//! The waiting itself is `crate::feed`'s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;
use crate::slots::Slot;

/// The longest a request may be held, in seconds.
pub const MAX_WAIT_S: u32 = 55;

/// The request's `?wait=N`, when it has one and N is not 0.
pub struct Wait(pub Option<Held>);

/// How long a request may be held, and its slot of `max_in_flight` to give back meanwhile.
pub struct Held {
    /// How long to wait at most.
    pub limit: Duration,
    slot: Option<HeldSlot>,
    /// Counts it in `toolgate_waiters` once it waits, until it is answered.
    waiting: Option<crate::metrics::Waiting>,
}

impl Held {
    /// A request held up to `limit`, with its slot of `max_in_flight` (if the gate shares one)
    /// to give back when it starts to wait.
    pub(crate) fn new(limit: Duration, slot: Option<HeldSlot>) -> Self {
        Held {
            limit,
            slot,
            waiting: None,
        }
    }

    /// Gives back the request's slot: from now on it waits, and counts as running nothing (but
    /// as a waiter, until it is dropped).
    pub fn release_slot(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.release();
        }
        self.waiting
            .get_or_insert_with(crate::metrics::Waiting::start);
    }
}

/// Parses `wait` from a query string: whole seconds from 0 to [`MAX_WAIT_S`]. Other parameters
/// are the route's own to check; `strict` refuses any.
pub(super) fn parse_wait(query: Option<&str>, strict: bool) -> Result<Option<u32>, ApiError> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(None);
    };
    let mut wait = None;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name == "wait" {
            let seconds = value
                .parse::<u32>()
                .ok()
                .filter(|s| *s <= MAX_WAIT_S && value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "`wait` must be a whole number of seconds from 0 to {MAX_WAIT_S}."
                    ))
                })?;
            wait = Some(seconds);
        } else if strict {
            return Err(ApiError::BadRequest(format!(
                "Unknown query parameter `{name}`."
            )));
        }
    }
    Ok(wait)
}

impl<S: Send + Sync> FromRequestParts<S> for Wait {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Most requests have no query at all: nothing is parsed for them.
        let Some(seconds) = parse_wait(parts.uri.query(), false)? else {
            return Ok(Wait(None));
        };
        if seconds == 0 {
            return Ok(Wait(None));
        }
        Ok(Wait(Some(Held::new(
            Duration::from_secs(u64::from(seconds)),
            parts.extensions.get::<HeldSlot>().cloned(),
        ))))
    }
}

/// The `max_in_flight` slot of a request that may be held: shared by the gate (which gives it
/// back when the answer is ready, as for any request) and the handler (which gives it back
/// when it starts to wait), whichever comes first.
#[derive(Clone)]
pub(crate) struct HeldSlot(Arc<Mutex<Option<Slot>>>);

impl HeldSlot {
    pub(super) fn new(slot: Slot) -> Self {
        HeldSlot(Arc::new(Mutex::new(Some(slot))))
    }

    pub(super) fn release(&self) {
        let slot = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        drop(slot);
    }
}

/// Whether a query string asks to be held.
pub(super) fn asks_to_wait(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.contains("wait="))
}

/// How a held request ended.
pub(crate) enum Waited<T> {
    /// `ready` had an answer.
    Ready(T),
    /// The time was up without one: answer with the state as it is now.
    TimedOut,
    /// The server is stopping: answer at once, from what was last read. Every change of the
    /// call since then would have woken the request, so that is the state as it is; and
    /// thousands of requests released together do not all read the store at once (on
    /// PostgreSQL, more than the pool can serve before its wait runs out).
    Released,
}

/// Holds a request about the call `call_id` until `ready` has an answer, the feed says nothing
/// more will come in time, or the server shuts down: `ready` is asked once the request is
/// registered (so a change in between is not missed), then after every change of the call.
pub(crate) async fn hold_until<T, F, Fut>(
    feed: &crate::feed::Feed,
    mut held: Held,
    call_id: &str,
    mut ready: F,
) -> Result<Waited<T>, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, ApiError>>,
{
    held.release_slot();
    let deadline = tokio::time::Instant::now() + held.limit;
    loop {
        let waiter = feed.watch_call(call_id).await;
        if let Some(answer) = ready().await? {
            return Ok(Waited::Ready(answer));
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(Waited::TimedOut);
        }
        match waiter.wait(left).await {
            crate::feed::Woken::Changed => {}
            crate::feed::Woken::TimedOut => return Ok(Waited::TimedOut),
            crate::feed::Woken::Released => return Ok(Waited::Released),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_whole_seconds_up_to_the_limit() {
        assert_eq!(parse_wait(None, true).unwrap(), None);
        assert_eq!(parse_wait(Some("wait=0"), true).unwrap(), Some(0));
        assert_eq!(parse_wait(Some("wait=55"), true).unwrap(), Some(55));
        for bad in [
            "wait=56", "wait=-1", "wait=1.5", "wait=", "wait=+3", "wait=x",
        ] {
            assert!(parse_wait(Some(bad), false).is_err(), "{bad}");
        }
        assert!(parse_wait(Some("wait=1&other=2"), true).is_err());
        assert_eq!(parse_wait(Some("limit=3&wait=2"), false).unwrap(), Some(2));
    }
}
