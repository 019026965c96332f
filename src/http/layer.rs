//! The one tower layer under every per-request policy of a route (the gate in [`super::auth`],
//! the request count in `super::requests`): a policy says what it does before the route and
//! after its answer; this module wires that into tower once.
//!
//! Written by hand rather than with `axum::middleware::from_fn`: it is on every request's path,
//! and this way it costs no boxing, no allocation and no dynamic dispatch: the service and its
//! future are generic over the policy, and a clone of the service (axum clones the route per
//! request) is one `Arc` clone. A policy that must wait before it decides (a bearer token whose
//! issuer's key set must be fetched first) answers [`Refusal::Later`]: only then is a future
//! boxed, and the route's service cloned to be called once it is decided.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::Extensions;
use axum::response::Response;
use tower::{Layer, Service};

/// What a policy decides later: the request goes on with what to keep and the extensions to add
/// to it, or it is answered.
pub(crate) type Later<K> =
    Pin<Box<dyn Future<Output = Result<(K, Extensions), Response>> + Send + 'static>>;

/// Why a request does not go on now.
pub(crate) enum Refusal<K> {
    /// Answered here.
    Now(Response),
    /// Decided once this resolves.
    Later(Later<K>),
}

impl<K> From<Response> for Refusal<K> {
    fn from(response: Response) -> Self {
        Refusal::Now(response)
    }
}

/// What a route does with each request before the route runs, and with its answer after.
pub(crate) trait RoutePolicy: Send + Sync + 'static {
    /// What the policy keeps while the route runs (a slot, a route's counters).
    type Kept: Send + 'static;

    /// Before the route: the request goes on, with what to keep, or is answered here, or later.
    #[allow(
        clippy::result_large_err,
        reason = "the refusal is the request's answer as is; boxing it would allocate per refusal"
    )]
    fn before(self: &Arc<Self>, request: &mut Request) -> Result<Self::Kept, Refusal<Self::Kept>>;

    /// After the route: its answer (which it may amend), with what was kept. Not called when
    /// the request is dropped unanswered; what was kept is dropped then.
    fn after(kept: Self::Kept, answer: &mut Response);
}

/// Puts the policy `P` on a route.
pub(crate) struct PolicyLayer<P>(Arc<P>);

impl<P> PolicyLayer<P> {
    /// The layer of `policy`.
    pub(crate) fn new(policy: P) -> Self {
        PolicyLayer(Arc::new(policy))
    }
}

impl<P: Default> Default for PolicyLayer<P> {
    fn default() -> Self {
        PolicyLayer::new(P::default())
    }
}

impl<P> Clone for PolicyLayer<P> {
    fn clone(&self) -> Self {
        PolicyLayer(self.0.clone())
    }
}

impl<S, P> Layer<S> for PolicyLayer<P> {
    type Service = PolicyService<S, P>;

    fn layer(&self, inner: S) -> PolicyService<S, P> {
        PolicyService {
            inner,
            policy: self.0.clone(),
        }
    }
}

/// See [`PolicyLayer`].
pub(crate) struct PolicyService<S, P> {
    inner: S,
    policy: Arc<P>,
}

impl<S: Clone, P> Clone for PolicyService<S, P> {
    fn clone(&self) -> Self {
        PolicyService {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
        }
    }
}

impl<S, P> Service<Request> for PolicyService<S, P>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone,
    P: RoutePolicy,
{
    type Response = Response;
    type Error = Infallible;
    type Future = PolicyFuture<S, P>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match self.policy.before(&mut request) {
            Ok(kept) => PolicyFuture::Admitted {
                future: self.inner.call(request),
                kept: Some(kept),
            },
            Err(Refusal::Now(response)) => PolicyFuture::Refused {
                response: Some(response),
            },
            // The service made ready goes with the request; a clone stays for the next.
            Err(Refusal::Later(check)) => {
                let clone = self.inner.clone();
                PolicyFuture::Checking {
                    check,
                    pending: Some((std::mem::replace(&mut self.inner, clone), request)),
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The route's answer, seen by the policy when it is ready; or the policy's own answer; or
    /// the policy's check still under way.
    #[project = PolicyProjection]
    pub(crate) enum PolicyFuture<S, P>
    where
        S: Service<Request>,
        P: RoutePolicy,
    {
        Admitted {
            #[pin] future: S::Future,
            kept: Option<P::Kept>,
        },
        Refused { response: Option<Response> },
        Checking {
            check: Later<P::Kept>,
            pending: Option<(S, Request)>,
        },
    }
}

impl<S, P> Future for PolicyFuture<S, P>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    P: RoutePolicy,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                PolicyProjection::Admitted { future, kept } => {
                    let Ok(mut answer) = std::task::ready!(future.poll(cx));
                    if let Some(kept) = kept.take() {
                        P::after(kept, &mut answer);
                    }
                    return Poll::Ready(Ok(answer));
                }
                PolicyProjection::Refused { response } => {
                    return Poll::Ready(Ok(response
                        .take()
                        .expect("a refused request is answered once")));
                }
                PolicyProjection::Checking { check, pending } => {
                    let (kept, found) = match std::task::ready!(check.as_mut().poll(cx)) {
                        Ok(admitted) => admitted,
                        Err(response) => return Poll::Ready(Ok(response)),
                    };
                    let (mut inner, mut request) =
                        pending.take().expect("a checked request goes on once");
                    request.extensions_mut().extend(found);
                    let future = inner.call(request);
                    self.set(PolicyFuture::Admitted {
                        future,
                        kept: Some(kept),
                    });
                }
            }
        }
    }
}
