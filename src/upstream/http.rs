//! The HTTP client of an upstream reached over Streamable HTTP: reqwest, through rmcp's
//! transport, and three things more. A `tools/call`'s trace context, which the call's CLIENT span
//! puts in its `_meta`, also goes in the request's `traceparent` and `tracestate` headers, for a
//! server (or a proxy in front of it) that reads the context from HTTP; and the call's
//! attestation, which its `_meta` carries as `dev.toolgate/attestation`, also goes in the
//! `Toolgate-Attestation` header, for a server (or a gateway in front of it) that checks it
//! before it reads the body.
//!
//! And for an upstream that acts as each caller (`[upstreams.auth]`), a `tools/call` carries its
//! caller's bearer in its `Authorization` header instead of the static one. The bearer never
//! rides in the JSON: the call puts a random pass in `_meta` ([`PASS_FIELD`]), which this client
//! takes out of the message and looks up in the upstream's [`Passes`], while the call holds it.
//! A `tools/call` without a pass is not sent at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::{HeaderName, HeaderValue};
use futures_util::stream::BoxStream;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// How many redirects one request follows.
const MAX_REDIRECTS: usize = 10;

type Failure = StreamableHttpError<reqwest::Error>;

/// Where a call's pass goes in its `_meta`: taken out before the request is sent.
pub(super) const PASS_FIELD: &str = "dev.toolgate/pass";

/// The bearers of the calls in flight on one upstream, by pass.
#[derive(Default)]
pub(super) struct Passes(Mutex<HashMap<String, String>>);

impl Passes {
    /// A pass for `bearer`, good while the returned [`Pass`] lives.
    pub(super) fn issue(self: &Arc<Self>, bearer: String) -> Pass {
        let nonce = crate::ids::new_suspension_token();
        self.lock().insert(nonce.clone(), bearer);
        Pass {
            passes: self.clone(),
            nonce,
        }
    }

    fn bearer(&self, nonce: &str) -> Option<String> {
        self.lock().get(nonce).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One call's pass: its bearer is forgotten when it is dropped.
pub(super) struct Pass {
    passes: Arc<Passes>,
    nonce: String,
}

impl Pass {
    /// What the call's `_meta` carries.
    pub(super) fn nonce(&self) -> &str {
        &self.nonce
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.passes.lock().remove(&self.nonce);
    }
}

#[derive(Clone)]
pub(super) struct Client {
    http: reqwest::Client,
    /// Set for an upstream that acts as each caller.
    passes: Option<Arc<Passes>>,
}

impl Client {
    pub(super) fn new(passes: Option<Arc<Passes>>) -> Result<Self, String> {
        // A redirect is followed only where the request goes on whole: to the same origin (the
        // configured headers carry the upstream's credentials) and with its body (307 and 308).
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if !keeps_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        reqwest::Client::builder()
            // No idle connection is kept, as in rmcp's own client: one reused after a response
            // that was not read to its end can wait out the peer's delayed ACK.
            .pool_max_idle_per_host(0)
            .redirect(redirects)
            .build()
            .map(|http| Client { http, passes })
            .map_err(|err| format!("cannot build an HTTP client: {err}"))
    }

    /// `message` as sent, with its headers and bearer: the trace context in headers too, and
    /// for an upstream that acts as each caller, a `tools/call`'s pass taken out of it and its
    /// caller's bearer in place of the static `Authorization`.
    #[allow(clippy::type_complexity)]
    fn prepare(
        &self,
        mut message: ClientJsonRpcMessage,
        headers: HashMap<HeaderName, HeaderValue>,
        auth: Option<String>,
    ) -> Result<
        (
            ClientJsonRpcMessage,
            HashMap<HeaderName, HeaderValue>,
            Option<String>,
        ),
        Failure,
    > {
        let mut headers = with_trace(&message, headers);
        let Some(passes) = &self.passes else {
            return Ok((message, headers, auth));
        };
        let JsonRpcMessage::Request(request) = &mut message else {
            return Ok((message, headers, auth));
        };
        let ClientRequest::CallToolRequest(call) = &mut request.request else {
            return Ok((message, headers, auth));
        };
        let nonce = call.params.meta.as_mut().and_then(|meta| {
            let taken = meta.0.0.remove(PASS_FIELD);
            taken.and_then(|value| value.as_str().map(str::to_owned))
        });
        if call
            .params
            .meta
            .as_ref()
            .is_some_and(|meta| meta.0.0.is_empty())
        {
            call.params.meta = None;
        }
        let Some(bearer) = nonce.and_then(|nonce| passes.bearer(&nonce)) else {
            return Err(StreamableHttpError::UnexpectedServerResponse(
                "a call to an upstream that acts as its caller has no caller's credentials: not \
                 sent"
                    .into(),
            ));
        };
        headers.remove(&axum::http::header::AUTHORIZATION);
        Ok((message, headers, Some(bearer)))
    }
}

/// `headers` with the `traceparent`, `tracestate` and attestation of `message`'s `_meta`, if it
/// is a `tools/call` that has them.
fn with_trace(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    let JsonRpcMessage::Request(request) = message else {
        return headers;
    };
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return headers;
    };
    let Some(meta) = &call.params.meta else {
        return headers;
    };
    let attestation = (meta.0.0)
        .get(super::tool::ATTESTATION_META)
        .and_then(|value| value.as_str());
    let fields = [
        ("traceparent", meta.0.get_traceparent()),
        ("tracestate", meta.0.get_tracestate()),
        ("toolgate-attestation", attestation),
    ];
    for (name, value) in fields {
        if let Some(value) = value.and_then(|value| HeaderValue::from_str(value).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

impl StreamableHttpClient for Client {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let (message, headers, auth_header) = self.prepare(message, custom_headers, auth_header)?;
        self.http
            .post_message(uri, message, session_id, auth_header, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let (message, headers, auth_header) = self.prepare(message, custom_headers, auth_header)?;
        self.http
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let (message, headers, auth_header) = self.prepare(message, custom_headers, auth_header)?;
        self.http
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failure> {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        self.http
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        self.http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
