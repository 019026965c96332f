//! One upstream tool as a toolgate tool: a [`DynTool`] named `<upstream>__<tool>` whose attempt
//! is one `tools/call` to the server.
//!
//! The lifecycle around it is the native tools' one (schema check, approval, intent, timeout,
//! retries by effect, output check, record); what is decided here is what the server's answer
//! means: `isError` is the tool failing (permanently: the server said no, asking again will not
//! change that), `structuredContent` (else the text content) is the output, and a link that
//! failed is [`ToolError::Unavailable`], saying whether the request may have arrived.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, ContentBlock, MetaObject, RequestMetaObject, Tool as McpTool,
};
use serde_json::{Map, Value};
use tracing::Instrument as _;

use super::config::{KeyTemplate, SEPARATOR, UpstreamPolicy};
use super::http::PASS_FIELD;
use super::link::Link;
use crate::contract::ctx::ToolCtx;
use crate::contract::erased::{DynTool, Pinned};
use crate::contract::error::{HandlerError, ToolError, Unavailable};
use crate::contract::meta::Effect;
use crate::contract::outcome::ToolOutcome;
use crate::telemetry::spans;

/// Where a `tools/call` carries the call's attestation in its `_meta`; the HTTP client also
/// sends it as the `Toolgate-Attestation` header.
pub(crate) const ATTESTATION_META: &str = "dev.toolgate/attestation";

/// When to try a tool whose server is down again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The most characters of an upstream's error text kept: it is recorded on the call, and shown
/// to callers and approvers.
const MAX_ERROR_CHARS: usize = 4000;

/// A tool served by an upstream MCP server.
pub(crate) struct UpstreamTool {
    pub(super) name: String,
    /// Its name on the upstream server.
    pub(super) remote: Arc<str>,
    description: String,
    pub(super) effect: Effect,
    input_schema: Value,
    output_schema: Option<Value>,
    key: Option<KeyTemplate>,
    pub(super) link: Arc<Link>,
    /// The operation a call sends, for a tool of an OpenAPI document.
    operation: Option<Arc<super::openapi::Operation>>,
    /// The pin it is served under, when its upstream's pins are on.
    pin: Option<Pinned>,
}

impl UpstreamTool {
    /// The toolgate tool for the upstream's `tool`, with its policy from the configuration.
    pub(crate) fn new(link: Arc<Link>, tool: &McpTool, policy: Option<&UpstreamPolicy>) -> Self {
        let hints = tool.annotations.as_ref();
        // Annotations are the server's word, not a guarantee: without them, a write.
        let annotated = match hints {
            Some(hints) if hints.read_only_hint == Some(true) => Effect::Read,
            Some(hints) if hints.idempotent_hint == Some(true) => Effect::Idempotent,
            _ => Effect::Write,
        };
        let input = Value::Object(tool.input_schema.as_ref().clone());
        UpstreamTool {
            name: prefixed(link.name(), &tool.name),
            remote: Arc::from(tool.name.as_ref()),
            // Shown to models and approvers in every list: bounded like an error's text.
            description: bounded(
                tool.description
                    .as_deref()
                    .map(str::to_owned)
                    .unwrap_or_default(),
            ),
            effect: policy.and_then(|p| p.effect).unwrap_or(annotated),
            input_schema: crate::schema::clean_input_schema(&input),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|schema| crate::schema::clean_schema(&Value::Object(schema.as_ref().clone()))),
            key: policy
                .and_then(|p| p.idempotency_key.as_deref())
                .and_then(|template| KeyTemplate::parse(template).ok()),
            operation: link.api.as_ref().and_then(|api| api.operation(&tool.name)),
            link,
            pin: None,
        }
    }

    /// The tool, served under `pin`.
    pub(crate) fn pinned(mut self, pin: Pinned) -> Self {
        self.pin = Some(pin);
        self
    }

    /// The tool, its description beginning with `mark` (a held tool says so on every door).
    pub(crate) fn marked(mut self, mark: &str) -> Self {
        self.description.insert_str(0, mark);
        self
    }

    pub(super) fn unavailable(&self, message: String, may_have_run: bool) -> ToolError {
        self.unavailable_for(message, may_have_run, RETRY_AFTER)
    }

    /// [`Self::unavailable`], to be tried again after `retry_after`.
    pub(super) fn unavailable_for(
        &self,
        message: String,
        may_have_run: bool,
        retry_after: Duration,
    ) -> ToolError {
        ToolError::Unavailable {
            tool: self.name.clone(),
            unavailable: Unavailable {
                message,
                retry_after,
            },
            may_have_run,
        }
    }

    /// The call's attestation, for this upstream, over the arguments as sent: a call that
    /// cannot carry one is not sent (nothing left, so it may be tried again).
    pub(super) async fn attestation(
        &self,
        ctx: &ToolCtx,
        input: &Value,
    ) -> Result<Option<String>, ToolError> {
        ctx.attestation(self.link.name(), input)
            .await
            .map_err(|err| {
                tracing::warn!(tool = %self.name, error = %err, "a call to an upstream was not sent");
                self.unavailable(
                    "toolgate could not sign the call's attestation now.".into(),
                    false,
                )
            })
    }

    /// The call's arguments: its input, an object (the input schema's root is one, and the
    /// check before this lets nothing else in).
    pub(super) fn arguments(&self, input: Value) -> Result<Map<String, Value>, ToolError> {
        match input {
            Value::Object(arguments) => Ok(arguments),
            _ => Err(ToolError::InvalidInput {
                tool: self.name.clone(),
                violations: vec![crate::contract::error::InputViolation {
                    path: String::new(),
                    message: "the input must be an object".into(),
                }],
            }),
        }
    }

    fn down(&self) -> Unavailable {
        Unavailable {
            message: format!(
                "The upstream MCP server `{}` is not reachable now.",
                self.link.name()
            ),
            retry_after: RETRY_AFTER,
        }
    }
}

/// The toolgate name of the upstream `server`'s tool `tool`.
pub(crate) fn prefixed(server: &str, tool: &str) -> String {
    format!("{server}{SEPARATOR}{tool}")
}

#[async_trait]
impl DynTool for UpstreamTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn effect(&self) -> Effect {
        self.effect
    }

    fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }

    fn idempotency_key(&self, input: &Value) -> Option<String> {
        self.key.as_ref()?.render(input)
    }

    fn pinned(&self) -> Option<&Pinned> {
        self.pin.as_ref()
    }

    fn ready(&self) -> Result<(), Unavailable> {
        if self.link.api.is_some() {
            // A REST API has no session to lose: each call finds out for itself.
            return Ok(());
        }
        match self.link.peer() {
            Some((_, peer)) if !peer.is_transport_closed() => Ok(()),
            _ => Err(self.down()),
        }
    }

    async fn before_approval(&self, ctx: &ToolCtx) -> Result<(), ToolError> {
        match &self.link.exchange {
            Some(exchange) => exchange.hold(&self.name, ctx).await,
            None => Ok(()),
        }
    }

    fn attested(&self) -> bool {
        // Every call to the upstream carries the call's attestation.
        true
    }

    async fn call_json(
        &self,
        ctx: &ToolCtx,
        input: Value,
    ) -> Result<ToolOutcome<Value>, ToolError> {
        // The lifecycle refuses a held tool's calls before they run; a run that gets here
        // anyway (a call re-run after a crash, say) sends nothing either.
        if self.pin.as_ref().is_some_and(Pinned::is_held) {
            return Err(ToolError::Handler {
                tool: self.name.clone(),
                source: HandlerError::message(format!(
                    "The definition of tool `{}` changed upstream since it was pinned; nothing \
                     was sent (tool_changed).",
                    self.name
                ))
                .permanent(),
            });
        }
        if let Some(api) = &self.link.api {
            return match &self.operation {
                Some(operation) => self.call_api(api, operation, ctx, input).await,
                // Built from a definition its document no longer has: nothing to send.
                None => Err(self.unavailable(
                    format!(
                        "The operation of tool `{}` is not in its OpenAPI document now.",
                        self.name
                    ),
                    false,
                )),
            };
        }
        let Some((session, peer)) = self
            .link
            .peer()
            .filter(|(_, peer)| !peer.is_transport_closed())
        else {
            return Err(self.unavailable(self.down().message, false));
        };
        let attestation = self.attestation(ctx, &input).await?;
        // An upstream that acts as each caller: this call's bearer, held by a pass while the
        // call runs (dropped with it).
        let pass = match &self.link.exchange {
            Some(exchange) => {
                let bearer = exchange.bearer(&self.name, ctx).await?;
                Some(self.link.passes.issue(bearer))
            }
            None => None,
        };
        let arguments = self.arguments(input)?;
        let mut params =
            CallToolRequestParams::new(self.remote.to_string()).with_arguments(arguments);
        let span = spans::upstream_call(&self.remote, self.link.name());
        let mut meta = spans::meta_of(&span);
        if let Some(attestation) = attestation {
            meta.get_or_insert_default()
                .insert(ATTESTATION_META.into(), Value::String(attestation));
        }
        if let Some(meta) = meta {
            params.meta = Some(RequestMetaObject(MetaObject(meta)));
        }
        if let Some(pass) = &pass {
            let meta = params.meta.get_or_insert_with(Default::default);
            meta.0.0.insert(PASS_FIELD.into(), pass.nonce().into());
        }
        let failed = |message: String| ToolError::Handler {
            tool: self.name.clone(),
            source: HandlerError::message(bounded(message)).permanent(),
        };
        let answer = peer.call_tool(params).instrument(span.clone()).await;
        if let (Some(exchange), Ok(_) | Err(ServiceError::McpError(_))) =
            (&self.link.exchange, &answer)
        {
            // The upstream answered: what was held for the call's approval is spent.
            exchange.release(ctx.call_id());
        }
        if !span.is_none() {
            match &answer {
                Ok(result) if result.is_error == Some(true) => spans::failed(&span, "tool_error"),
                Ok(_) => {}
                Err(ServiceError::McpError(error)) => {
                    spans::failed(&span, &error.code.0.to_string())
                }
                Err(_) => spans::failed(&span, "transport"),
            }
        }
        match answer {
            Ok(result) if result.is_error == Some(true) => {
                let text = text_of(&result.content);
                Err(failed(if text.is_empty() {
                    "The upstream tool reported an error without a message.".into()
                } else {
                    text
                }))
            }
            Ok(result) => Ok(ToolOutcome::Output(match result.structured_content {
                Some(structured) => structured,
                None => Value::String(text_of(&result.content)),
            })),
            Err(ServiceError::McpError(error)) => Err(failed(format!(
                "The upstream MCP server refused the call: {} ({}).",
                error.message, error.code.0
            ))),
            Err(ServiceError::UnexpectedResponse) => Err(failed(
                "The upstream MCP server answered the call with something other than a tool \
                 result."
                    .into(),
            )),
            Err(err) => {
                let failure = LinkFailure::of(&err);
                tracing::warn!(
                    tool = %self.name,
                    upstream = self.link.name(),
                    error = %self.link.redacted(&err.to_string()),
                    may_have_run = failure.may_have_run,
                    "a call could not reach its upstream MCP server"
                );
                // Only a link that is gone is dropped: one bad answer (a proxy's 502, a body
                // over the limit) fails this call alone, not every call in flight on it.
                if failure.link_gone {
                    self.link.report_broken(session);
                }
                Err(self.unavailable(
                    format!(
                        "The upstream MCP server `{}` could not be reached.",
                        self.link.name()
                    ),
                    failure.may_have_run,
                ))
            }
        }
    }
}

/// `text`, cut to [`MAX_ERROR_CHARS`].
pub(super) fn bounded(text: String) -> String {
    match text.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The text blocks of a result, one per line.
fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a failed request to the upstream says about the request and the link.
struct LinkFailure {
    /// Whether the request may have reached the server (`false`: provably never left).
    may_have_run: bool,
    /// Whether the session is gone, so it must be made again.
    link_gone: bool,
}

impl LinkFailure {
    fn of(err: &ServiceError) -> LinkFailure {
        match err {
            // The session closed under the request: whether it arrived is unknown.
            ServiceError::TransportClosed => LinkFailure {
                may_have_run: true,
                link_gone: true,
            },
            ServiceError::TransportSend(send) if refused(send.error.as_ref()) => LinkFailure {
                may_have_run: false,
                link_gone: true,
            },
            _ => LinkFailure {
                may_have_run: true,
                link_gone: false,
            },
        }
    }
}

/// Whether the transport's error proves nothing was sent: the HTTP connection was refused (the
/// client opens one per request), or a stdio server's pipe had no reader left (messages are
/// newline-framed, so a part of one is never read as a request).
fn refused(error: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(http) = error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return match http {
            StreamableHttpError::Client(client) => client.is_connect(),
            StreamableHttpError::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
            _ => false,
        };
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::BrokenPipe
            );
        }
        source = current.source();
    }
    false
}
