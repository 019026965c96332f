//! `?wait=N`: the HTTP side of a request held until what it asks about changes (long-polls).
//!
//! A held request gives back its slot of `max_in_flight` while it waits (see [`HeldSlot`]): a
//! thousand orchestrators waiting for their approvals must not shed the calls of everyone else.
//! The waiting itself is the lifecycle's (`crate::dispatch::wait`); [`Held`] is how an HTTP
//! request takes part in it. A held request counts against its principal's `max_held` from
//! the start (a [`HeldPermit`]): past it, it is refused `429` at once rather than held.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use axum::extract::FromRef;

use super::error::ApiError;
use crate::dispatch::quota::{HeldPermit, Quotas};
use crate::dispatch::wait::Hold;
use crate::dispatch::who::Principal;
use crate::slots::Slot;

/// The longest a request may be held, in seconds.
pub const MAX_WAIT_S: u32 = 55;

/// The request's `?wait=N`, when it has one and N is not 0.
pub struct Wait(pub Option<Held>);

impl Held {
    /// `held` as the lifecycle's waits take it (`None`: answer at once).
    pub fn hold(held: &mut Option<Held>) -> Option<&mut dyn Hold> {
        held.as_mut().map(|held| held as &mut dyn Hold)
    }
}

/// How long a request may be held, and its slot of `max_in_flight` to give back meanwhile.
pub struct Held {
    /// How long to wait at most.
    pub limit: Duration,
    slot: Option<HeldSlot>,
    /// Counts it in `toolgate_waiters` once it waits, until it is answered.
    waiting: Option<crate::metrics::Waiting>,
    /// Counts it against its principal's `max_held` until it is answered.
    _permit: HeldPermit,
}

impl Held {
    /// A request held up to `limit`, with its slot of `max_in_flight` (if the gate shares one)
    /// to give back when it starts to wait, counted by `permit` meanwhile.
    pub(crate) fn new(limit: Duration, slot: Option<HeldSlot>, permit: HeldPermit) -> Self {
        Held {
            limit,
            slot,
            waiting: None,
            _permit: permit,
        }
    }
}

impl Hold for Held {
    fn limit(&self) -> Duration {
        self.limit
    }

    /// Gives back the request's slot: from now on it waits, and counts as running nothing (but
    /// as a waiter, until it is dropped).
    fn waiting(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.release();
        }
        self.waiting
            .get_or_insert_with(crate::metrics::Waiting::start);
    }
}

/// Parses `wait` from a query string: whole seconds from 0 to [`MAX_WAIT_S`]. Other parameters
/// are the route's own to check; `strict` refuses any.
pub(crate) fn parse_wait(query: Option<&str>, strict: bool) -> Result<Option<u32>, ApiError> {
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

impl<S> FromRequestParts<S> for Wait
where
    S: Send + Sync,
    Quotas: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // Most requests have no query at all: nothing is parsed for them.
        let Some(seconds) = parse_wait(parts.uri.query(), false)? else {
            return Ok(Wait(None));
        };
        if seconds == 0 {
            return Ok(Wait(None));
        }
        // Every gated route's request carries its principal; a route without one is held as
        // the anonymous principal's.
        let permit = match parts.extensions.get::<Principal>() {
            Some(principal) => Quotas::from_ref(state).hold(principal)?,
            None => Quotas::from_ref(state).hold(&Principal::anonymous())?,
        };
        Ok(Wait(Some(Held::new(
            Duration::from_secs(u64::from(seconds)),
            parts.extensions.get::<HeldSlot>().cloned(),
            permit,
        ))))
    }
}

/// The `max_in_flight` slot of a request that may be held: shared by the gate (which gives it
/// back when the answer is ready, as for any request) and the handler (which gives it back
/// when it starts to wait), whichever comes first.
#[derive(Clone)]
pub(crate) struct HeldSlot(Arc<Mutex<Option<Slot>>>);

impl HeldSlot {
    pub(crate) fn new(slot: Slot) -> Self {
        HeldSlot(Arc::new(Mutex::new(Some(slot))))
    }

    pub(crate) fn release(&self) {
        let slot = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        drop(slot);
    }
}

/// Whether a query string asks to be held.
pub(crate) fn asks_to_wait(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.contains("wait="))
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
