//! The spans toolgate makes, one function each, so their names and attributes are written in
//! one place. Each is made only when [`enabled`](super::enabled) (the caller asks first, or
//! gets [`Span::none`]), at INFO, under [`TARGET`](super::TARGET).

use opentelemetry::trace::TraceContextExt as _;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{TARGET, enabled, propagation};

/// A span about a call of the tool `$tool` by the GenAI semantic conventions: named
/// `<$name> <tool>`, of the kind `$kind`, with `gen_ai.operation.name` `execute_tool`,
/// `gen_ai.tool.name`, and `otel.status_code` and `error.type` to record a failure; then
/// `$fields`. At INFO, under [`TARGET`].
macro_rules! tool_span {
    ($name:literal, $kind:literal, $tool:expr, $($fields:tt)*) => {
        tracing::info_span!(
            target: TARGET,
            $name,
            otel.name = %format_args!("{} {}", $name, $tool),
            otel.kind = $kind,
            otel.status_code = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = $tool,
            error.type = Empty,
            $($fields)*
        )
    };
}

/// The W3C `traceparent` of the current span, when traces are exported and one is active.
pub fn traceparent() -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = Span::current().context();
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The span context a stored `traceparent` names.
fn stored(traceparent: &str) -> Option<opentelemetry::trace::SpanContext> {
    let mut meta = serde_json::Map::new();
    meta.insert(
        "traceparent".into(),
        serde_json::Value::String(traceparent.to_owned()),
    );
    propagation::from_meta(&meta).map(|cx| cx.span().span_context().clone())
}

/// Links the current span (a person's decision, say) to the call whose span `traceparent`
/// stored, made hours before, maybe in another process.
pub fn link_to_call(traceparent: Option<&str>) {
    if !enabled() {
        return;
    }
    if let Some(context) = traceparent.and_then(stored) {
        Span::current().add_link(context);
    }
}

/// The run of a call an approval released: an `execute_tool` span, a child of the approval's
/// request, linked to the call's own span (`traceparent`).
pub fn rerun(tool: &str, effect: &str, call_id: &str, traceparent: Option<&str>) -> Span {
    let span = call(tool, effect);
    if span.is_none() {
        return span;
    }
    span.record("toolgate.call_id", call_id);
    if let Some(context) = traceparent.and_then(stored) {
        span.add_link(context);
    }
    span
}

/// Whether the current span is recorded (one of toolgate's exported spans): what a call path
/// asks before it pays for a child span, such as boxing the future the child instruments.
pub fn recording() -> bool {
    under_ours()
}

/// Whether the current span is one of toolgate's exported spans, so that a child of it is
/// recorded. A trace left unsampled at its root has none of toolgate's spans at all (see
/// [`super::sampled`]): its requests pay for no span below the root's decision.
fn under_ours() -> bool {
    enabled()
        && Span::current()
            .metadata()
            .is_some_and(|meta| meta.target() == TARGET)
}

/// An HTTP request's `SERVER` span, named by its method and route template (never its path),
/// a child of the context its headers carry.
pub fn server(method: &str, route: &str, headers: &axum::http::HeaderMap) -> Span {
    if !enabled() {
        return Span::none();
    }
    let parent = propagation::from_headers(headers);
    if !super::sampled(&parent) {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = Empty,
        enduser.id = Empty,
    );
    adopt(&span, parent);
    span
}

/// Gives a `SERVER` span what its caller's context `parent` carries: the baggage entries the
/// configuration names, as attributes, and `parent` as its parent when it names a span.
fn adopt(span: &Span, parent: opentelemetry::Context) {
    for attribute in propagation::baggage_attributes(&parent) {
        span.set_attribute(attribute.key, attribute.value);
    }
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Records the response's status on a [`server`] span; a 5xx is an error.
pub fn answered(span: &Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "error");
    }
}

/// Names the principal of the request being served, if it has a name, on its [`server`] span.
pub fn principal(name: Option<&str>) {
    if let Some(name) = name.filter(|_| enabled()) {
        Span::current().record("enduser.id", name);
    }
}

/// A call of `tool`: the `execute_tool <tool>` span its attempts and records are children of.
pub fn call(tool: &str, effect: &str) -> Span {
    if !under_ours() {
        return Span::none();
    }
    tool_span!(
        "execute_tool",
        "internal",
        tool,
        toolgate.effect = effect,
        toolgate.call_id = Empty,
        toolgate.status = Empty,
    )
}

/// Records the id of the call `span` (its `execute_tool` span) is about, once the call has
/// answered: recorded once, as the id is not known for sure before (a keyed request's new id
/// gives way to the existing call's when its key has one), and an attribute recorded twice is
/// exported twice.
pub fn call_id(span: &Span, call_id: &str) {
    span.record("toolgate.call_id", call_id);
}

/// Records a call's outcome on its [`call`] span: its status, or the error code it was
/// refused with.
pub fn outcome(span: &Span, status: &str, error: Option<&str>) {
    span.record("toolgate.status", status);
    if let Some(error) = error {
        failed(span, error);
    }
}

/// One attempt of a call's run (the first is 1); `toolgate.retry_wait_ms` is recorded on it
/// when another attempt follows after a wait.
pub fn attempt(number: u32) -> Span {
    if !under_ours() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "attempt",
        otel.name = %format_args!("attempt {number}"),
        toolgate.attempt = number,
        toolgate.retry_wait_ms = Empty,
        error.type = Empty,
    )
}

/// Records on an [`attempt`] span that it failed with `error` and another follows after
/// `wait`.
pub fn retried(span: &Span, error: &str, wait: std::time::Duration) {
    span.record("error.type", error);
    span.record(
        "toolgate.retry_wait_ms",
        u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
    );
}

/// A call of an upstream MCP server's tool: the `CLIENT` span `tools/call <tool>` (its name
/// upstream), whose context goes in the request's `_meta`.
pub fn upstream_call(remote: &str, upstream: &str) -> Span {
    if !under_ours() {
        return Span::none();
    }
    tool_span!(
        "tools/call",
        "client",
        remote,
        mcp.method.name = "tools/call",
        toolgate.upstream = upstream,
    )
}

/// Records what came of a [`webhook_attempt`]: the receiver's status, if it answered, and
/// whether the delivery failed (a status, or `transport` when none came).
pub fn webhook_answered(span: &Span, status: Option<u16>, delivered: bool) {
    if let Some(status) = status {
        span.record("http.response.status_code", status);
    }
    if !delivered {
        failed(
            span,
            &status.map_or_else(|| "transport".into(), |s| s.to_string()),
        );
    }
}

/// The `traceparent` and `tracestate` headers of a request sent under `span` (none when the
/// span is off).
pub fn headers_of(span: &Span) -> axum::http::HeaderMap {
    let mut headers = axum::http::HeaderMap::new();
    if !span.is_none() {
        propagation::inject_headers(&span.context(), &mut headers);
    }
    headers
}

/// The `_meta` of a request sent under `span`: its `traceparent` and `tracestate`. `None` when
/// the span is off.
pub fn meta_of(span: &Span) -> Option<serde_json::Map<String, serde_json::Value>> {
    if span.is_none() {
        return None;
    }
    let mut meta = serde_json::Map::new();
    propagation::inject_meta(&span.context(), &mut meta);
    Some(meta)
}

/// Records how a call of a span's request failed (`tool_error` for a result with `isError`, a
/// JSON-RPC error code, a transport failure).
pub fn failed(span: &Span, error: &str) {
    span.record("error.type", error);
    span.record("otel.status_code", "error");
}

/// One attempt of a webhook delivery: a `CLIENT` span of its own trace, linked to the span of
/// the call it is about (`call_traceparent`), its context sent in the request's `traceparent`.
/// Named by the receiver's host alone: a webhook's path and query may hold a secret.
pub fn webhook_attempt(url: &str, attempt: u32, call_traceparent: Option<&str>) -> Span {
    if !enabled() {
        return Span::none();
    }
    let call = call_traceparent.and_then(stored);
    let follows = match &call {
        Some(context) => context.is_sampled(),
        None => super::sampled(&opentelemetry::Context::new()),
    };
    if !follows {
        return Span::none();
    }
    let host = reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default();
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "webhook",
        otel.name = "POST webhook",
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = "POST",
        server.address = host,
        toolgate.webhook.attempt = attempt,
        http.response.status_code = Empty,
        error.type = Empty,
    );
    if let Some(context) = call {
        span.add_link(context);
    }
    span
}

/// The commit of one write of the store (`write` names it: `insert`, `finish`, ...): from the
/// moment it is queued to its batch's commit, with the batch's size once committed.
/// Made only under a call's span: the store's own upkeep is not traced.
pub fn store_commit(write: &'static str) -> Span {
    if !under_ours() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "store commit",
        otel.name = %format_args!("store commit {write}"),
        toolgate.store.write = write,
        toolgate.store.batch_size = Empty,
    )
}

/// `/mcp`'s `tools/call <tool>` `SERVER` span, by the MCP semantic conventions. Its parent is
/// the context in the request's `_meta` when it carries one (the HTTP request's span is then
/// a link), else the HTTP request's span.
pub fn mcp_call(
    tool: &str,
    request_id: &str,
    protocol_version: Option<&str>,
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Span {
    if !enabled() {
        return Span::none();
    }
    // The `_meta` context decides when there is one, else the HTTP request's span.
    let parent = meta.and_then(propagation::from_meta);
    let follows = match &parent {
        Some(cx) => cx.span().span_context().is_sampled(),
        None => under_ours(),
    };
    if !follows {
        return Span::none();
    }
    let span = tool_span!(
        "tools/call",
        "server",
        tool,
        mcp.method.name = "tools/call",
        jsonrpc.request.id = request_id,
        mcp.protocol.version = protocol_version.unwrap_or(""),
    );
    if let Some(parent) = parent {
        let http = Span::current().context().span().span_context().clone();
        adopt(&span, parent);
        if http.is_valid() {
            span.add_link(http);
        }
    }
    span
}
