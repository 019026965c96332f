//! The layer that counts each request by route and status, for `toolgate_http_requests_total`.
//!
//! It is on every gated route of every door (see `crate::app`), outside the gate, so that the
//! gate's refusals (`401`, `403`, `503 overloaded`) are counted too. A route is named by its
//! template (axum's `MatchedPath`, such as `/approvals/{token}/approve`), never by its path:
//! paths carry suspension tokens, which are secrets.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use tower::{Layer, Service};

use crate::metrics::RouteRequests;

/// Counts the requests of one route by template and status; each route has its own (so its
/// counters are resolved once, at its first requests).
#[derive(Clone, Default)]
pub(crate) struct RequestsLayer(Arc<RouteRequests>);

impl<S> Layer<S> for RequestsLayer {
    type Service = Requests<S>;

    fn layer(&self, inner: S) -> Requests<S> {
        Requests {
            inner,
            counts: self.0.clone(),
        }
    }
}

/// See [`RequestsLayer`].
#[derive(Clone)]
pub(crate) struct Requests<S> {
    inner: S,
    counts: Arc<RouteRequests>,
}

impl<S> Service<Request> for Requests<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Counted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // Always there on a matched route; the router puts it in before calling the route.
        let route = request.extensions().get::<MatchedPath>().cloned();
        Counted {
            future: self.inner.call(request),
            route: route.map(|route| (route, self.counts.clone())),
        }
    }
}

pin_project_lite::pin_project! {
    /// The route's answer, counted when it is ready.
    pub(crate) struct Counted<F> {
        #[pin]
        future: F,
        route: Option<(MatchedPath, Arc<RouteRequests>)>,
    }
}

impl<F> Future for Counted<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = std::task::ready!(this.future.poll(cx));
        if let (Some((route, counts)), Ok(response)) = (this.route.take(), &answer) {
            counts.count(route.as_str(), response.status().as_u16());
        }
        Poll::Ready(answer)
    }
}
