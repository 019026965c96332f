//! The MCP door: `/mcp` serves the same tools over the Model Context Protocol (Streamable HTTP),
//! with the official Rust SDK (`rmcp`) doing the protocol and this module only translating.
//!
//! One endpoint serves both eras without sessions: 2026-07-28 (per-request `_meta`, no
//! handshake, `server/discover`) and 2025-11-25 (`initialize`), each request answered with JSON.
//! The door is one hand-written [`ServerHandler`] over the tool set: `tools/list` answers the
//! catalog built at start-up ([`catalog`]), and `tools/call` runs the one call lifecycle
//! (`crate::dispatch`) exactly as `POST /tools/{name}/call` does: the same records, idempotency,
//! effects, retries, timeouts and limits. What differs is only how answers look ([`answers`]).
//! A plain stateless `tools/call` reaches the same [`Door::call`] without the SDK's per-request
//! service ([`direct`]).
//!
//! Three promises are kept here rather than by the SDK:
//! - an approver's token never reaches an MCP client: a suspended call is answered as pending
//!   (or, to a client that declared the tasks extension, as a task), and `toolgate_await_call`
//!   or `tasks/get` tell its outcome once a person decided;
//! - auth happens before any MCP processing: the route's gate (the same bearer keys and roles
//!   as REST) answers `401` first, and the principal it admitted travels to the handler in the
//!   HTTP request's extensions, which the SDK hands over with each request;
//! - a `Host` or `Origin` refused against DNS rebinding is answered with the error envelope,
//!   like every other refusal, by the gate in front of every route (`crate::http::hosts`),
//!   not the SDK's plain text; `rebinding`'s tests hold the two checks to the same rules.

mod answers;
pub(crate) mod catalog;
pub mod config;
mod direct;
#[cfg(test)]
mod rebinding;
mod scopes;

use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, RequestId, RequestMetaObject, ServerCapabilities,
    ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use tracing::Instrument as _;

use crate::dispatch::live::Derived;
use crate::dispatch::{CallOptions, CallOutcome, DispatchError, Dispatcher};
use crate::http::auth::Principal;
use crate::http::hold::{Held, HeldSlot};
use crate::store::{CallRecord, CallStatus};
use catalog::{AWAIT_TOOL, McpCatalog};

/// The key of `_meta` that carries a call's idempotency key over MCP (the REST door's
/// `Idempotency-Key` header), scoped to the tool and the caller the same way.
pub const IDEMPOTENCY_KEY_META: &str = "dev.toolgate/idempotencyKey";

/// How often a client holding a task is told to ask `tasks/get`, in milliseconds.
const POLL_INTERVAL_MS: u64 = 2_000;

/// The longest `toolgate_await_call` holds a request, in seconds.
pub const MAX_AWAIT_S: u64 = 50;

/// `/mcp`'s settings (`[mcp]` in the binary's configuration).
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// Whether `/mcp` is served at all.
    pub enabled: bool,
    /// The `Host` values accepted (names or addresses, without a port: any port is accepted),
    /// against DNS rebinding. A request whose `Origin` names another host is refused too.
    pub allowed_hosts: Vec<String>,
}

impl Default for McpOptions {
    /// Enabled, for a server reached on a loopback address.
    fn default() -> Self {
        McpOptions {
            enabled: true,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
        }
    }
}

impl McpOptions {
    /// The hosts to accept for a server bound to `bind`: its address, `localhost` when that is
    /// a loopback address, and `extra` (`[mcp] allowed_hosts`).
    pub fn hosts_for(bind: std::net::IpAddr, extra: &[String]) -> Vec<String> {
        crate::http::hosts::allowed_for(bind, extra)
    }
}

/// The `/mcp` route: the SDK's Streamable HTTP transport, stateless and answering JSON, over
/// one [`Door`] (the gate in front of it checks `Host` and `Origin` first), with a `tools/call`
/// of the common shapes answered by the door directly ([`direct`]).
pub(crate) fn route(
    door: Door,
    options: &McpOptions,
    max_body_bytes: usize,
) -> axum::routing::MethodRouter {
    let dispatcher = door.0.dispatcher.clone();
    let handler = door.clone();
    let transport = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        transport_config(&options.allowed_hosts, max_body_bytes),
    );
    let route = axum::routing::any_service(transport)
        .layer(axum::middleware::from_fn_with_state(door, direct::answer));
    // Only a server whose tools require scopes reads a `tools/call` before the SDK does.
    if dispatcher.requires_scopes() {
        route.layer(axum::middleware::from_fn_with_state(
            (dispatcher, max_body_bytes),
            scopes::check,
        ))
    } else {
        route
    }
}

/// The SDK transport's settings. Its own Host and Origin check is given the same list as
/// the gate's (`crate::http::hosts`), which answers first; the SDK's stays as a backstop.
fn transport_config(allowed_hosts: &[String], max_body_bytes: usize) -> StreamableHttpServerConfig {
    // An Origin must name an allowed host (any scheme and port); a request without one (every
    // client that is not a browser) passes, as the transport's rules say.
    let origins = allowed_hosts.iter().flat_map(|host| {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        [format!("http://{host}:*"), format!("https://{host}:*")]
    });
    StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(allowed_hosts.to_vec())
        .with_allowed_origins(origins.collect::<Vec<_>>())
        .enforce_origin_validation()
        .with_max_request_body_bytes(max_body_bytes)
}

/// The MCP handler: what it needs of the server, shared by every request (the SDK makes one
/// handler per request, so this is one pointer to clone).
#[derive(Clone)]
pub(crate) struct Door(Arc<Shared>);

struct Shared {
    dispatcher: Dispatcher,
    catalog: Derived<McpCatalog>,
}

impl Door {
    /// The door over `dispatcher`'s tools.
    pub(crate) fn new(dispatcher: Dispatcher) -> Self {
        let catalog = Derived::new(&dispatcher.tools(), McpCatalog::new);
        Door(Arc::new(Shared {
            dispatcher,
            catalog,
        }))
    }

    /// Whether the tool of this name promotes parameters to `Mcp-Param-*` headers.
    fn promotes_headers(&self, name: &str) -> bool {
        let catalog = self.0.catalog.get(&self.0.dispatcher.tools());
        catalog.1.promotes_headers(name)
    }

    /// What `tools/list` answers for the tool list as it stands, as `principal` sees it: only
    /// the tools it may call.
    fn catalog(&self, principal: &Principal) -> Arc<(u64, McpCatalog)> {
        self.0
            .catalog
            .view(&self.0.dispatcher.tools(), &principal.tools)
    }
}

/// What the door reads of an MCP request besides its params: the HTTP request it came in with
/// (the principal the gate admitted, the slot of a held request), its `_meta`, and whether its
/// client declared the tasks extension.
pub(super) struct Asked<'a> {
    parts: &'a Parts,
    meta: &'a RequestMetaObject,
    tasks: bool,
    /// The JSON-RPC request's id, as written.
    id: &'a RequestId,
}

impl<'a> Asked<'a> {
    /// What the SDK hands over with a request.
    fn of(context: &'a RequestContext<RoleServer>) -> Result<Self, McpError> {
        let parts = context
            .extensions
            .get::<Parts>()
            .ok_or_else(|| internal("an MCP request without its HTTP request"))?;
        let tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        Ok(Asked {
            parts,
            meta: &context.meta,
            tasks,
            id: &context.id,
        })
    }

    /// The protocol version the request speaks: its header's, else its `_meta`'s.
    fn protocol_version(&self) -> Option<String> {
        self.parts
            .headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| self.meta.protocol_version().map(|v| v.as_str().to_owned()))
    }

    /// Who is asking, as the route's gate admitted them.
    fn principal(&self) -> Result<Principal, McpError> {
        self.parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| internal("an MCP request that passed no gate"))
    }

    /// The call's idempotency key from `_meta`, checked as the REST header is.
    fn idempotency_key(&self) -> Result<Option<String>, McpError> {
        let Some(value) = self.meta.get(IDEMPOTENCY_KEY_META) else {
            return Ok(None);
        };
        crate::dispatch::check_idempotency_key(value.as_str().unwrap_or_default())
            .map(Some)
            .map_err(|message| {
                McpError::invalid_params(format!("`_meta.{IDEMPOTENCY_KEY_META}`: {message}"), None)
            })
    }
}

/// Who is asking a request the SDK hands over.
fn principal(context: &RequestContext<RoleServer>) -> Result<Principal, McpError> {
    Asked::of(context)?.principal()
}

/// A failure of the server itself: logged, and answered `-32603` without its cause.
fn internal(what: &str) -> McpError {
    tracing::error!(error = what, "MCP request failed");
    McpError::internal_error("The server failed to handle this request.", None)
}

/// Whether the request speaks 2026-07-28 or later (per-request `_meta`), rather than the
/// `initialize` era.
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

impl Door {
    /// `toolgate_await_call`: holds until the call leaves `running` or `suspended` (or the
    /// time is up), then answers its outcome as the call itself would have.
    async fn await_call(
        &self,
        arguments: Value,
        context: &Asked<'_>,
    ) -> Result<CallToolResult, McpError> {
        let principal = context.principal()?;
        let asked = match catalog::AwaitInput::parse(arguments) {
            Ok(asked) => asked,
            Err(violations) => return Ok(answers::invalid_await_input(&violations)),
        };
        let mut held = None;
        if asked.wait_seconds > 0 {
            // Past the key's `max_held`, answered at once, as a tool error to wait out.
            let permit = match self.0.dispatcher.quotas().hold(&principal) {
                Ok(permit) => permit,
                Err(refused) => return Ok(answers::rate_limited(&refused)),
            };
            let slot = context.parts.extensions.get::<HeldSlot>().cloned();
            let limit = Duration::from_secs(asked.wait_seconds);
            held = Some(Held::new(limit, slot, permit));
        }
        let hold = Held::hold(&mut held);
        match self
            .0
            .dispatcher
            .watch_call(&principal, &asked.call_id, hold)
            .await
        {
            Ok(call) => Ok(answers::from_record(&call)),
            Err(err) => answers::dispatch_error(err),
        }
    }

    /// `tools/call`, however the request reached the door: the SDK's handler
    /// ([`ServerHandler::call_tool`]) and the direct way ([`direct`]) both end here.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: &Asked<'_>,
    ) -> Result<CallToolResponse, McpError> {
        if !crate::telemetry::enabled() {
            return self.run(request, context).await;
        }
        let span = crate::telemetry::spans::mcp_call(
            &request.name,
            &context.id.to_string(),
            context.protocol_version().as_deref(),
            Some(&context.meta.0.0),
        );
        let answer = self.run(request, context).instrument(span.clone()).await;
        match &answer {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                crate::telemetry::spans::failed(&span, "tool_error");
            }
            Err(error) => crate::telemetry::spans::failed(&span, &error.code.0.to_string()),
            Ok(_) => {}
        }
        answer
    }

    /// A `tools/call`, as [`Door::call`] answers it.
    async fn run(
        &self,
        request: CallToolRequestParams,
        context: &Asked<'_>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        if let Err(DispatchError::TooDeep(max)) = self.0.dispatcher.check_depth(&arguments) {
            return Err(McpError::invalid_params(
                format!("The arguments are nested deeper than {max} levels."),
                None,
            ));
        }
        if request.name == AWAIT_TOOL {
            return Box::pin(self.await_call(arguments, context))
                .await
                .map(Into::into);
        }
        let principal = context.principal()?;
        if self.catalog(&principal).1.get(&request.name).is_none() {
            return Err(McpError::invalid_params(
                format!("No tool is named `{}`.", request.name),
                None,
            ));
        }
        let options = CallOptions {
            principal,
            idempotency_key: context.idempotency_key()?,
        };
        // Boxed: the SDK spawns and moves the handler's future for every request, and the whole
        // call lifecycle inline made it large enough that copying it cost more than the call
        // (BENCHMARKS.md, MCP).
        let call = Box::pin(self.0.dispatcher.call(&request.name, arguments, options));
        let result = match call.await {
            Ok(result) => result,
            Err(err) => return answers::dispatch_error(err).map(Into::into),
        };
        if matches!(result.outcome, CallOutcome::Suspended { .. }) && context.tasks {
            // The task's times are the call's: a replayed call's task is as old as the call.
            let call = match self.0.dispatcher.store().call(&result.call_id).await {
                Ok(Some(call)) => call,
                Ok(None) => return Err(internal("a suspended call without its record")),
                Err(err) => return Err(answers::protocol_error(err.into())),
            };
            let task = answers::task_of(&call, POLL_INTERVAL_MS);
            return Ok(CreateTaskResult::new(task.task).into());
        }
        Ok(answers::from_result(&result).into())
    }

    /// A task's state, from its call's record.
    async fn task(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallRecord, McpError> {
        let principal = principal(context)?;
        match self.0.dispatcher.visible_call(&principal, task_id).await {
            Ok(call) => Ok(call),
            Err(DispatchError::UnknownCall(_)) => Err(McpError::invalid_params(
                format!("No task has the id `{task_id}`."),
                None,
            )),
            Err(err) => Err(answers::protocol_error(err)),
        }
    }
}

impl ServerHandler for Door {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Tools served by toolgate. Some calls wait for a person's approval: such a call \
             answers that it is pending, with its call_id; do not call it again, but call \
             toolgate_await_call with that call_id to learn its outcome.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let catalog = self.catalog(&principal(&context)?);
        let tools = if is_modern(&context) {
            &catalog.1.tools
        } else {
            &catalog.1.legacy_tools
        };
        Ok(ListToolsResult::with_all_items(tools.to_vec()))
    }

    /// Asked by the SDK without the request (for the `Mcp-Param-*` headers' schema check): the
    /// whole catalog. A tool the principal may not call is refused by `call_tool` all the same.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        let catalog = self.0.catalog.get(&self.0.dispatcher.tools());
        catalog.1.get(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, &Asked::of(&context)?).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let call = self.task(&request.task_id, &context).await?;
        Ok(GetTaskResult::new(answers::task_of(
            &call,
            POLL_INTERVAL_MS,
        )))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let call = self.task(&request.task_id, &context).await?;
        match call.status {
            CallStatus::Suspended => Err(McpError::invalid_request(
                format!(
                    "Call `{}` waits for a person's decision and cannot be cancelled here: only \
                     an approver decides (they may reject it).",
                    call.call_id
                ),
                None,
            )),
            CallStatus::Running | CallStatus::NeedsReconciliation => {
                Err(McpError::invalid_request(
                    format!(
                        "Call `{}` is {} and cannot be cancelled: a tool is never cut off \
                         half-way.",
                        call.call_id,
                        call.status.as_str()
                    ),
                    None,
                ))
            }
            // Already over: cancelling it is acknowledged and changes nothing.
            _ => Ok(()),
        }
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let call = self.task(&request.task_id, &context).await?;
        Err(McpError::invalid_params(
            format!(
                "Task `{}` asks for no input: its call waits for an approver, not for this client.",
                call.call_id
            ),
            None,
        ))
    }
}

/// A text block.
fn text(text: impl Into<String>) -> ContentBlock {
    ContentBlock::text(text.into())
}
