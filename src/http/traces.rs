//! Every HTTP request's `SERVER` span, when traces are exported: named by its method and route
//! template (`POST /tools/{name}/call`, never a path with a token in it), a child of the
//! caller's context from `traceparent`, its status recorded once answered.
//!
//! A tower layer of its own rather than `axum::middleware::from_fn`, which clones the route and
//! boxes its future for every request: a request whose trace is left unsampled pays for the
//! sampling decision and nothing more.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use pin_project_lite::pin_project;
use tower::{Layer, Service};
use tracing::Span;

use crate::telemetry::spans;

/// The layer; `app.rs` puts it over every route only when traces are exported.
#[derive(Clone, Copy, Debug)]
pub struct Traced;

impl<S> Layer<S> for Traced {
    type Service = TracedService<S>;

    fn layer(&self, inner: S) -> TracedService<S> {
        TracedService { inner }
    }
}

#[derive(Clone, Debug)]
pub struct TracedService<S> {
    inner: S,
}

impl<S> Service<Request> for TracedService<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = TracedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let span = {
            let route = request
                .extensions()
                .get::<MatchedPath>()
                .map_or("unmatched", MatchedPath::as_str);
            spans::server(request.method().as_str(), route, request.headers())
        };
        let inner = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        TracedFuture { inner, span }
    }
}

pin_project! {
    /// The route's answer, polled inside the request's span (none when unsampled).
    pub struct TracedFuture<F> {
        #[pin]
        inner: F,
        span: Span,
    }
}

impl<F, E> Future for TracedFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let answer = {
            let _entered = this.span.enter();
            ready!(this.inner.poll(cx))
        };
        if let Ok(response) = &answer {
            spans::answered(this.span, response.status().as_u16());
        }
        Poll::Ready(answer)
    }
}
