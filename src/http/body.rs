//! A request's body, read in full before its route runs, bounded in size and in time.
//!
//! On a route's stack after the gate (a request with no key never has its body read at all)
//! and before the shedding (no request holds a slot of `max_in_flight` while its body is still
//! arriving): a client trickling a body a byte at a time holds a connection, and nothing else,
//! until `body_timeout` answers it `408 request_timeout` and closes the connection. A body
//! larger than `max_body_bytes` is `413 payload_too_large`, from its `Content-Length` before a
//! byte of it is read, or once the limit is passed.
//!
//! Every body toolgate accepts is one JSON document or form, which its handler reads whole
//! anyway; reading it here first costs nothing more than that. A request without a body (every
//! `GET`) goes straight on.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::header::CONTENT_LENGTH;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use http_body_util::combinators::Collect;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::time::Timeout;
use tower::{Layer, Service};

use super::error::ApiError;

/// The default time a request body may take to arrive: 30 seconds.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How large a body may be, and how long it may take to arrive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    pub(crate) max_bytes: usize,
    pub(crate) timeout: Duration,
}

/// Reads each request's body before the route ([`ReadBody`]).
#[derive(Clone)]
pub(crate) struct ReadBodyLayer(Arc<BodyLimits>);

impl ReadBodyLayer {
    pub(crate) fn new(limits: BodyLimits) -> Self {
        ReadBodyLayer(Arc::new(limits))
    }
}

impl<S> Layer<S> for ReadBodyLayer {
    type Service = ReadBody<S>;

    fn layer(&self, inner: S) -> ReadBody<S> {
        ReadBody {
            inner,
            limits: self.0.clone(),
        }
    }
}

/// See [`ReadBodyLayer`].
#[derive(Clone)]
pub(crate) struct ReadBody<S> {
    inner: S,
    limits: Arc<BodyLimits>,
}

impl<S> Service<Request> for ReadBody<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ReadBodyFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if HttpBody::size_hint(request.body()).exact() == Some(0) {
            return ReadBodyFuture::Running {
                future: self.inner.call(request),
            };
        }
        let limits = *self.limits;
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > limits.max_bytes as u64) {
            return ReadBodyFuture::Refused {
                response: Some(too_large().into_response()),
            };
        }
        // The service made ready is the one called once the body is in, as tower asks; a clone
        // takes its place here.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let (parts, body) = request.into_parts();
        ReadBodyFuture::Reading {
            read: tokio::time::timeout(
                limits.timeout,
                Limited::new(body, limits.max_bytes).collect(),
            ),
            parts: Some(parts),
            inner: Some(inner),
        }
    }
}

fn too_large() -> ApiError {
    ApiError::PayloadTooLarge("The request body is larger than this server accepts.".into())
}

pin_project_lite::pin_project! {
    /// The body being read, then the route's answer; or the answer to a body that failed.
    #[project = ReadBodyProjection]
    pub(crate) enum ReadBodyFuture<S>
    where
        S: Service<Request, Response = Response, Error = Infallible>,
    {
        Reading {
            #[pin] read: Timeout<Collect<Limited<Body>>>,
            parts: Option<Parts>,
            inner: Option<S>,
        },
        Running { #[pin] future: S::Future },
        Refused { response: Option<Response> },
    }
}

impl<S> Future for ReadBodyFuture<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                ReadBodyProjection::Reading { read, parts, inner } => {
                    let body = match std::task::ready!(read.poll(cx)) {
                        Ok(Ok(collected)) => collected.to_bytes(),
                        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
                            return Poll::Ready(Ok(too_large().into_response()));
                        }
                        Ok(Err(_)) => {
                            return Poll::Ready(Ok(ApiError::BadRequest(
                                "The request body could not be read.".into(),
                            )
                            .into_response()));
                        }
                        Err(_elapsed) => {
                            return Poll::Ready(Ok(ApiError::RequestTimeout.into_response()));
                        }
                    };
                    let parts = parts.take().expect("a body is read once");
                    let mut inner = inner.take().expect("a body is read once");
                    let future = inner.call(Request::from_parts(parts, Body::from(body)));
                    self.set(ReadBodyFuture::Running { future });
                }
                ReadBodyProjection::Running { future } => return future.poll(cx),
                ReadBodyProjection::Refused { response } => {
                    return Poll::Ready(Ok(response.take().expect("answered once")));
                }
            }
        }
    }
}
