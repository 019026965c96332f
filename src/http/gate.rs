//! Each gated route's stack, built in one place for every door: the count of its requests by
//! status (outside, so refusals count too), the body limit, and the gate (load shedding, the
//! bearer key, the role check; see [`super::auth`]).
//!
//! One stack per route, boxed once: a layer on the whole router would wrap (and box, and clone
//! per request) every route once more.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use tower::ServiceBuilder;
use tower::layer::util::{Identity, Stack};

use super::auth::{Access, Gate, GateLayer, Keys};
use super::requests::RequestsLayer;
use crate::slots::Slots;

/// The layers of one gated route.
pub(crate) type RouteGate =
    ServiceBuilder<Stack<GateLayer, Stack<DefaultBodyLimit, Stack<RequestsLayer, Identity>>>>;

/// What every gated route shares: the keys, the server's request limit, the body limit.
#[derive(Clone)]
pub(crate) struct Gates {
    keys: Arc<Keys>,
    in_flight: Arc<Slots>,
    max_body_bytes: usize,
}

impl Gates {
    pub(crate) fn new(keys: Arc<Keys>, max_in_flight: usize, max_body_bytes: usize) -> Self {
        Gates {
            keys,
            in_flight: Slots::new(max_in_flight),
            max_body_bytes,
        }
    }

    /// The keys the gates check (the inbox signs people in with them too).
    pub(crate) fn keys(&self) -> &Arc<Keys> {
        &self.keys
    }

    /// The stack of a route giving `access`.
    pub(crate) fn route(&self, access: Access) -> RouteGate {
        self.stack(access, false)
    }

    /// The stack of a route whose requests are held (a stream, a long wait): they share their
    /// slot of the request limit with the handler, which gives it back when it starts waiting.
    pub(crate) fn holding(&self, access: Access) -> RouteGate {
        self.stack(access, true)
    }

    fn stack(&self, access: Access, holds: bool) -> RouteGate {
        ServiceBuilder::new()
            .layer(RequestsLayer::default())
            .layer(DefaultBodyLimit::max(self.max_body_bytes))
            .layer(GateLayer::new(Gate {
                keys: self.keys.clone(),
                in_flight: self.in_flight.clone(),
                access,
                holds,
            }))
    }
}
