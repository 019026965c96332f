//! Each gated route's stack, built in one place for every door, outermost first: the count of
//! its requests by status (outside, so refusals count too), the body limit the extractors see,
//! the gate (the `Host` and `Origin`, the bearer key and the role check; see [`super::auth`]), the body read in full
//! within its time ([`super::body`]), and last the load shedding ([`super::shed`]), so that a
//! slot of `max_in_flight` is held only by a request that is allowed and has arrived whole.
//!
//! One stack per route, boxed once: a layer on the whole router would wrap (and box, and clone
//! per request) every route once more.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use tower::ServiceBuilder;
use tower::layer::util::{Identity, Stack};

use super::auth::{Access, Gate, GateLayer, Keys};
use super::body::{BodyLimits, ReadBodyLayer};
use super::hosts::AllowedHosts;
use super::requests::RequestsLayer;
use super::shed::{Shed, ShedLayer};
use crate::slots::Slots;

/// The layers of one gated route.
pub(crate) type RouteGate = ServiceBuilder<
    Stack<
        ShedLayer,
        Stack<
            ReadBodyLayer,
            Stack<GateLayer, Stack<DefaultBodyLimit, Stack<RequestsLayer, Identity>>>,
        >,
    >,
>;

/// What every gated route shares: the keys, the server's request limit, the body's limits.
#[derive(Clone)]
pub(crate) struct Gates {
    hosts: Arc<AllowedHosts>,
    keys: Arc<Keys>,
    in_flight: Arc<Slots>,
    body: ReadBodyLayer,
    max_body_bytes: usize,
}

impl Gates {
    pub(crate) fn new(
        hosts: AllowedHosts,
        keys: Arc<Keys>,
        max_in_flight: usize,
        max_body_bytes: usize,
        body_timeout: Duration,
    ) -> Self {
        Gates {
            hosts: Arc::new(hosts),
            keys,
            in_flight: Slots::new(max_in_flight),
            body: ReadBodyLayer::new(BodyLimits {
                max_bytes: max_body_bytes,
                timeout: body_timeout,
            }),
            max_body_bytes,
        }
    }

    /// The keys the gates check (the inbox signs people in with them too).
    pub(crate) fn keys(&self) -> &Arc<Keys> {
        &self.keys
    }

    /// The server's request limit, for a route that takes its slot itself (the inbox, once it
    /// knows who asks).
    pub(crate) fn in_flight(&self) -> &Arc<Slots> {
        &self.in_flight
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
        // The inbox's requests carry a session cookie, not a bearer key: its handlers take
        // their slot once the session checks out.
        let in_flight = (access != Access::Inbox).then(|| self.in_flight.clone());
        ServiceBuilder::new()
            .layer(RequestsLayer::default())
            .layer(DefaultBodyLimit::max(self.max_body_bytes))
            .layer(GateLayer::new(Gate {
                hosts: self.hosts.clone(),
                keys: self.keys.clone(),
                access,
            }))
            .layer(self.body.clone())
            .layer(ShedLayer::new(Shed { in_flight, holds }))
    }
}
