//! Load shedding on a route: `max_in_flight` slots, one per request being handled, and a request
//! past the limit refused at once with `503 overloaded` instead of queued.
//!
//! The slot is taken last on a route's stack, once the request is known to be allowed (the gate
//! in [`super::auth`]) and its body has arrived ([`super::body`]): a client with no key, or one
//! that trickles its body a byte at a time, must not hold a slot the callers need. A request
//! that may be held (a stream, a `?wait=`) shares its slot with the handler, which gives it back
//! when it starts waiting ([`HeldSlot`]).

use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::hold::HeldSlot;
use super::layer::{PolicyLayer, Refusal, RoutePolicy};
use crate::slots::{Slot, Slots};

/// The shedding of one route.
pub(crate) struct Shed {
    /// The server's request limit; `None` on routes that take their slot themselves, once they
    /// know who asks (the inbox, after its session check).
    pub(crate) in_flight: Option<Arc<Slots>>,
    /// Whether the route's requests are held (a stream): they share their slot with the
    /// handler, which gives it back, as a `?wait=` request does.
    pub(crate) holds: bool,
}

/// Sheds load on a route ([`Shed`]).
pub(crate) type ShedLayer = PolicyLayer<Shed>;

/// What an admitted request holds of the server's request limit until it is answered.
pub(crate) enum Admitted {
    /// Nothing: the route takes its slot itself.
    Nothing,
    /// Its own slot, given back with the answer.
    Slot(Slot),
    /// A slot shared with the handler (a request that may be held), which gives it back when it
    /// starts waiting; released with the answer if it never did.
    Held(HeldSlot),
}

impl RoutePolicy for Shed {
    type Kept = Admitted;

    fn before(self: &Arc<Self>, request: &mut Request) -> Result<Admitted, Refusal<Admitted>> {
        let Some(in_flight) = &self.in_flight else {
            return Ok(Admitted::Nothing);
        };
        let slot = in_flight
            .try_take()
            .ok_or_else(|| ApiError::Overloaded("The server".into()).into_response())?;
        if self.holds || super::hold::asks_to_wait(request.uri().query()) {
            let held = HeldSlot::new(slot);
            request.extensions_mut().insert(held.clone());
            Ok(Admitted::Held(held))
        } else {
            Ok(Admitted::Slot(slot))
        }
    }

    fn after(kept: Admitted, _: &mut Response) {
        match kept {
            Admitted::Nothing => {}
            Admitted::Slot(slot) => drop(slot),
            Admitted::Held(held) => held.release(),
        }
    }
}
