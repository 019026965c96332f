//! The REST door: one file per resource, each with its own `router()` beside its handlers
//! (tools, calls, approvals, standing approvals, events, webhooks, notifications, health,
//! metrics, openapi, upstreams' pinned tools, the signing keys' set: jwks), and Slack's
//! interactions (`slack`), the one route signed by a platform
//! rather than gated by a key. Handlers are thin: they translate HTTP into the call lifecycle
//! (`crate::dispatch`) and its results back, and
//! every error answer goes through the one envelope (`crate::http::error`). What changes only
//! with the tool list (the list in toolgate's own format and each provider's, each descriptor,
//! the OpenAPI document) is serialized once per generation of the list ([`catalog`]).

mod approvals;
mod audit;
mod calls;
mod catalog;
mod error_responses;
mod events;
mod health;
mod jwks;
mod metrics;
mod notifications;
pub mod openapi;
mod responses;
mod slack;
mod standing;
mod tools;
pub(crate) mod upstreams;
mod webhooks;

use std::sync::Arc;

use axum::Router;

use crate::dispatch::Dispatcher;
use crate::dispatch::live::Derived;
use crate::http::auth::Reach;
use crate::http::gate::Gates;
use catalog::Catalog;

pub use slack::SlackInteractions;

/// What every REST handler shares: one `Arc`, so each request clones one pointer.
#[derive(Clone)]
pub(crate) struct RestState(Arc<Shared>);

pub(crate) struct Shared {
    dispatcher: Dispatcher,
    /// Wakes the webhook sender (an admin's retry).
    webhooks: crate::feed::webhooks::Nudge,
    catalog: Derived<Catalog>,
}

impl Shared {
    /// The serialized answers of the tool list as it stands, as a principal reaching `reach`
    /// sees them: only the tools it may call.
    fn catalog(&self, reach: &Reach) -> Arc<(u64, Catalog)> {
        self.catalog.view(&self.dispatcher.tools(), reach)
    }
}

/// What a `?wait=` request is counted against (see [`crate::http::hold::Wait`]).
impl axum::extract::FromRef<RestState> for crate::dispatch::quota::Quotas {
    fn from_ref(state: &RestState) -> Self {
        state.dispatcher.quotas().clone()
    }
}

impl std::ops::Deref for RestState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Every REST route, each behind its gate; `auth` says whether keys are configured (the
/// OpenAPI document then declares the bearer scheme); `slack`: the Slack apps whose
/// interactions decide approvals.
pub(crate) fn router(
    dispatcher: Dispatcher,
    webhooks: crate::feed::webhooks::Nudge,
    gates: &Gates,
    auth: bool,
    slack: SlackInteractions,
) -> Router {
    let catalog = Derived::new(&dispatcher.tools(), move |tools| Catalog::new(tools, auth));
    let slack = slack::router(slack, dispatcher.clone(), gates);
    let state = RestState(Arc::new(Shared {
        dispatcher,
        webhooks,
        catalog,
    }));
    Router::new()
        .merge(tools::router(gates))
        .merge(calls::router(gates))
        .merge(approvals::router(gates))
        .merge(standing::router(gates))
        .merge(webhooks::router(gates))
        .merge(notifications::router(gates))
        .merge(events::router(gates))
        .merge(openapi::router(gates))
        .merge(metrics::router(gates))
        .merge(health::router())
        .merge(jwks::router(gates))
        .merge(audit::router(gates))
        .merge(slack)
        .with_state(state)
}
