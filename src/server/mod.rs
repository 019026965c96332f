//! The HTTP API, on axum.
//!
//! [`ServerBuilder`] turns a [`ToolSet`] and a [`Store`] into an `axum::Router` that can be
//! served alone or merged into another app. One file per resource holds its routes' handlers;
//! they are thin, translating HTTP into the call lifecycle (`crate::dispatch`) and its results
//! back. Every error answer goes through [`error::ApiError`]. What changes only with the tool
//! list (the list, in toolgate's own format and each provider's, each descriptor, the OpenAPI
//! document) is serialized once per generation of the list here.

pub(crate) mod approvals;
pub mod auth;
mod calls;
pub mod error;
pub(crate) mod events;
pub(crate) mod extract;
mod health;
mod metrics;
pub mod openapi;
mod responses;
mod tools;
pub(crate) mod wait;
mod webhooks;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::routing::{get, post};
use tower::ServiceBuilder;
use tower_http::trace::{DefaultOnRequest, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::contract::registry::ToolSet;
use crate::dispatch::live::Derived;
use crate::dispatch::{DispatchConfig, Dispatcher, Running};
use crate::schema::Format;
use crate::slots::Slots;
use crate::store::Store;
use auth::{Access, ApiKey, Gate, GateLayer, Keys};
use error::ApiError;
pub(crate) use tools::check_idempotency_key;

/// The default largest request body, in bytes (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The default deepest JSON nesting accepted in inputs and outputs.
pub const DEFAULT_MAX_JSON_DEPTH: usize = 64;
/// The default most requests handled at once; more are refused with `503 overloaded`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// Builds the toolgate `Router` from a tool set and a store.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = toolgate::store::SqliteStore::open("toolgate.db")?;
/// let router = toolgate::ServerBuilder::new(toolgate::ToolSet::new(), store).build();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, router).await?;
/// # Ok(()) }
/// ```
pub struct ServerBuilder {
    tools: ToolSet,
    store: Arc<dyn Store>,
    max_body_bytes: usize,
    max_json_depth: usize,
    max_in_flight: usize,
    keys: Vec<ApiKey>,
    dispatch: DispatchConfig,
    webhooks: crate::feed::webhooks::Webhooks,
    mcp: crate::mcp::McpOptions,
    inbox: crate::inbox::InboxOptions,
    upstreams: crate::upstream::Upstreams,
}

/// What every handler shares: one `Arc`, so each request clones one pointer.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Shared>);

pub(crate) struct Shared {
    pub(crate) dispatcher: Dispatcher,
    /// Requests held until a call changes or a suspension arrives.
    pub(crate) feed: crate::feed::Feed,
    /// Wakes the webhook sender (an admin's retry).
    webhooks: crate::feed::webhooks::Nudge,
    catalog: Derived<Catalog>,
    pub(crate) max_json_depth: usize,
    /// The approval inbox's own state: its options, the keys people sign in with, the sign-in
    /// limiter.
    pub(crate) inbox: crate::inbox::Inbox,
}

impl Shared {
    /// The serialized answers of the tool list as it stands.
    fn catalog(&self) -> Arc<(u64, Catalog)> {
        self.catalog.get(&self.dispatcher.tools())
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Answers that change only with the tool list, serialized once per generation of it.
struct Catalog {
    tools_json: Bytes,
    /// `GET /tools?format=…`, in the order of `Format::ALL`.
    provider_json: Vec<(Format, Bytes)>,
    descriptor_json: HashMap<String, Bytes>,
    openapi_json: Bytes,
}

impl ServerBuilder {
    /// A builder serving `tools`, recording in `store`.
    pub fn new(tools: ToolSet, store: impl Store) -> Self {
        ServerBuilder::with_shared_store(tools, Arc::new(store))
    }

    /// Like [`ServerBuilder::new`], with a store the caller keeps a handle on.
    pub fn with_shared_store(tools: ToolSet, store: Arc<dyn Store>) -> Self {
        ServerBuilder {
            tools,
            store,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            keys: Vec::new(),
            dispatch: DispatchConfig::default(),
            webhooks: crate::feed::webhooks::Webhooks::none(),
            mcp: crate::mcp::McpOptions::default(),
            inbox: crate::inbox::InboxOptions::default(),
            upstreams: crate::upstream::Upstreams::none(),
        }
    }

    /// The largest request body accepted, in bytes; larger ones get `413 payload_too_large`.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The deepest JSON nesting accepted in inputs and outputs; deeper gets `400 bad_request`.
    pub fn max_json_depth(mut self, depth: usize) -> Self {
        self.max_json_depth = depth;
        self
    }

    /// The most requests handled at once; more get `503 overloaded` at once instead of a queue.
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.max_in_flight = requests.max(1);
        self
    }

    /// The API keys; with none (the default), auth is off and every request acts as admin.
    pub fn api_keys(mut self, keys: Vec<ApiKey>) -> Self {
        self.keys = keys;
        self
    }

    /// Per-tool timeouts, concurrency limits and approval TTLs, and the retry policy.
    pub fn dispatch_config(mut self, config: DispatchConfig) -> Self {
        self.dispatch = config;
        self
    }

    /// The webhooks to deliver the change feed to (`Config::webhooks`); they start when the
    /// router is built, which must then happen inside a tokio runtime.
    pub fn webhooks(mut self, webhooks: crate::feed::webhooks::Webhooks) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// `/mcp`: whether it is served, and the `Host` values it accepts (by default, loopback
    /// names only: a server reached under another name must list it).
    pub fn mcp(mut self, options: crate::mcp::McpOptions) -> Self {
        self.mcp = options;
        self
    }

    /// `/inbox`, the approvers' web page: whether it is served, how long a sign-in lasts, and
    /// whether its cookies are `Secure` (see [`crate::inbox`]).
    pub fn inbox(mut self, options: crate::inbox::InboxOptions) -> Self {
        self.inbox = options;
        self
    }

    /// Upstream MCP servers whose tools are served too ([`crate::upstream::Upstreams::connect`]);
    /// their supervisors start when the router is built, which must then happen inside a tokio
    /// runtime.
    pub fn upstreams(mut self, upstreams: crate::upstream::Upstreams) -> Self {
        self.upstreams = upstreams;
        self
    }

    /// The router, with every route and layer in place.
    pub fn build(self) -> Router {
        self.build_with_running().0
    }

    /// The router, and the count of calls it runs: a graceful shutdown waits for
    /// [`Running::idle`] after the server stops accepting, so no tool is cut off half-way
    /// (calls run on even when their client hangs up).
    pub fn build_with_running(self) -> (Router, Running) {
        let dispatcher = Dispatcher::with_config(Arc::new(self.tools), self.store, &self.dispatch);
        self.upstreams.start(&dispatcher);
        let auth = !self.keys.is_empty();
        let catalog = Derived::new(&dispatcher.tools(), move |tools| Catalog::new(tools, auth));
        let mcp_catalog = self.mcp.enabled.then(|| {
            Derived::new(&dispatcher.tools(), |tools| {
                crate::mcp::catalog::McpCatalog::new(tools)
            })
        });
        let running = dispatcher.running().clone();
        let feed = crate::feed::Feed::new(dispatcher.store().clone(), running.released());
        let webhooks = self
            .webhooks
            .start(dispatcher.store().clone(), running.released());
        let mcp = mcp_catalog.map(|catalog| {
            let door = crate::mcp::Door::new(
                dispatcher.clone(),
                feed.clone(),
                catalog,
                self.max_json_depth,
            );
            crate::mcp::service(door, &self.mcp, self.max_body_bytes)
        });
        let keys = Arc::new(Keys::new(self.keys));
        let inbox_enabled = self.inbox.enabled;
        let state = AppState(Arc::new(Shared {
            dispatcher,
            feed,
            webhooks,
            catalog,
            max_json_depth: self.max_json_depth,
            inbox: crate::inbox::Inbox::new(self.inbox, keys.clone()),
        }));
        let in_flight = Slots::new(self.max_in_flight);
        // Every route but the health probes has a gate: load shedding, auth, the role check;
        // and the body limit; and, outside the gate, the count of its requests by status. One
        // stack per route, boxed once: a layer on the whole router would wrap (and box, and
        // clone per request) every route once more.
        let max_body_bytes = self.max_body_bytes;
        let gate_with = |access, holds| {
            ServiceBuilder::new()
                .layer(metrics::RequestsLayer::default())
                .layer(DefaultBodyLimit::max(max_body_bytes))
                .layer(GateLayer(Arc::new(Gate {
                    keys: keys.clone(),
                    in_flight: in_flight.clone(),
                    access,
                    holds,
                })))
        };
        let gate = |access| gate_with(access, false);
        let router = Router::new()
            .route("/tools", get(tools::list).route_layer(gate(Access::Tools)))
            .route(
                "/tools/{name}",
                get(tools::get).route_layer(gate(Access::Tools)),
            )
            .route(
                "/tools/{name}/call",
                post(tools::call).route_layer(gate(Access::Tools)),
            )
            .route(
                "/calls",
                get(calls::list).route_layer(gate(Access::Approvals)),
            )
            .route(
                "/calls/{call_id}",
                get(calls::get).route_layer(gate(Access::OwnCalls)),
            )
            .route(
                "/calls/{call_id}/resolve",
                post(calls::resolve).route_layer(gate(Access::Approvals)),
            )
            .route(
                "/approvals",
                get(approvals::list).route_layer(gate(Access::Approvals)),
            )
            .route(
                "/approvals/{token}",
                get(approvals::get).route_layer(gate(Access::Approvals)),
            )
            .route(
                "/approvals/{token}/approve",
                post(approvals::approve).route_layer(gate(Access::Approvals)),
            )
            .route(
                "/approvals/{token}/reject",
                post(approvals::reject).route_layer(gate(Access::Approvals)),
            )
            .route(
                "/approvals/{token}/complete",
                post(approvals::complete).route_layer(gate(Access::Approvals)),
            )
            .route(
                "/webhooks/deliveries",
                get(webhooks::list).route_layer(gate(Access::Admin)),
            )
            .route(
                "/webhooks/deliveries/{id}/retry",
                post(webhooks::retry).route_layer(gate(Access::Admin)),
            )
            .route(
                "/events",
                get(events::events).route_layer(gate_with(Access::OwnCalls, true)),
            )
            .route(
                "/openapi.json",
                get(serve_openapi).route_layer(gate(Access::Document)),
            )
            .route(
                "/metrics",
                get(metrics::serve).route_layer(gate(Access::Admin)),
            )
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz));
        // MCP: the same gate as the tools (a caller may list and call; held requests of
        // `toolgate_await_call` give their slot back while they wait).
        let router = match mcp {
            Some(mcp) => router.route(
                "/mcp",
                axum::routing::any_service(mcp).layer(gate_with(Access::Tools, true)),
            ),
            None => router,
        };
        // The inbox: its pages authenticate by session cookie themselves (a browser sends no
        // bearer token), so its gate sheds load and counts requests but checks no key.
        let router = if inbox_enabled {
            router.merge(crate::inbox::routes().route_layer(gate(Access::Inbox)))
        } else {
            router
        };
        let router = router
            .fallback(|| async { ApiError::RouteNotFound })
            .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
            .with_state(state);
        // One span per request, named by its route template rather than its path, so
        // suspension tokens in paths are never logged; the call id is added once known. And one
        // access-log line per request. Both are DEBUG, and the layer is only there when DEBUG is
        // on for either when the router is built: at the default INFO it would cost about a
        // tenth of an echo call's CPU, and what is logged about a call at INFO and above names
        // its `call_id` and `tool` itself.
        let traced = tracing::enabled!(target: "toolgate::server", Level::DEBUG)
            || tracing::enabled!(target: "tower_http::trace::on_response", Level::DEBUG);
        let router = if traced {
            router.layer(
                TraceLayer::new_for_http()
                    .make_span_with(|req: &Request| {
                        let route = req
                            .extensions()
                            .get::<MatchedPath>()
                            .map_or("unmatched", |path| path.as_str());
                        tracing::debug_span!(
                            "request",
                            method = %req.method(),
                            route,
                            call_id = tracing::field::Empty,
                        )
                    })
                    .on_request(DefaultOnRequest::new().level(Level::DEBUG))
                    .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
            )
        } else {
            router
        };
        (router, running)
    }
}

impl Catalog {
    fn new(tools: &ToolSet, auth: bool) -> Self {
        let descriptors = tools.descriptors();
        let descriptor_json = descriptors
            .iter()
            .map(|d| (d.name.clone(), to_json_bytes(d)))
            .collect();
        let provider_json = Format::ALL
            .into_iter()
            .map(|format| {
                let list = tools::ProviderToolList {
                    tools: crate::schema::tool_list(format, &descriptors),
                };
                (format, to_json_bytes(&list))
            })
            .collect();
        let tools_json = to_json_bytes(&tools::ToolList { tools: descriptors });
        let openapi_json = to_json_bytes(&openapi::document(tools, auth));
        Catalog {
            tools_json,
            provider_json,
            descriptor_json,
            openapi_json,
        }
    }

    /// The tool list in `format`.
    fn provider_tools(&self, format: Format) -> &Bytes {
        self.provider_json
            .iter()
            .find(|(f, _)| *f == format)
            .map(|(_, bytes)| bytes)
            .expect("the catalog holds every format")
    }
}

fn to_json_bytes<T: serde::Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("serializing plain data to JSON cannot fail"))
}

async fn serve_openapi(
    axum::extract::State(app): axum::extract::State<AppState>,
) -> axum::response::Response {
    tools::json_response(&app.catalog().1.openapi_json)
}
