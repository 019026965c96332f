//! The layer that counts each request by route and status, for `toolgate_http_requests_total`.
//!
//! It is on every gated route of every door (see `crate::app`), outside the gate, so that the
//! gate's refusals (`401`, `403`, `503 overloaded`) are counted too. A route is named by its
//! template (axum's `MatchedPath`, such as `/approvals/{token}/approve`), never by its path:
//! paths carry suspension tokens, which are secrets.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;

use super::layer::{PolicyLayer, Refusal, RoutePolicy};
use crate::metrics::RouteRequests;

/// Counts the requests of one route by template and status; each route has its own (so its
/// counters are resolved once, at its first requests).
pub(crate) type RequestsLayer = PolicyLayer<RouteRequests>;

impl RoutePolicy for RouteRequests {
    /// The route's template and counters; `None` where no route matched.
    type Kept = Option<(MatchedPath, Arc<RouteRequests>)>;

    fn before(self: &Arc<Self>, request: &mut Request) -> Result<Self::Kept, Refusal<Self::Kept>> {
        // Always there on a matched route; the router puts it in before calling the route.
        let route = request.extensions().get::<MatchedPath>().cloned();
        Ok(route.map(|route| (route, self.clone())))
    }

    fn after(kept: Self::Kept, answer: &mut Response) {
        if let Some((route, counts)) = kept {
            counts.count(route.as_str(), answer.status().as_u16());
        }
    }
}
