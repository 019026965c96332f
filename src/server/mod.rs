//! The HTTP API, on axum.
//!
//! [`ServerBuilder`] turns a [`ToolSet`] and a [`Store`] into an `axum::Router` that can be
//! served alone or merged into another app. One file per resource holds its routes' handlers;
//! they are thin, translating HTTP into the call lifecycle (`crate::dispatch`) and its results
//! back. Every error answer goes through [`error::ApiError`]. What does not change while the
//! server runs (the tool list, each descriptor, the OpenAPI document) is serialized once here.

mod approvals;
mod calls;
pub mod error;
mod extract;
mod health;
pub mod openapi;
mod responses;
mod tools;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::routing::{get, post};
use tower_http::trace::{DefaultOnRequest, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::contract::registry::ToolSet;
use crate::dispatch::Dispatcher;
use crate::store::Store;
use error::ApiError;

/// The default largest request body, in bytes (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

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
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    dispatcher: Dispatcher,
    catalog: Arc<Catalog>,
}

/// Answers that never change while the server runs, serialized once.
struct Catalog {
    tools_json: Bytes,
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
        }
    }

    /// The largest request body accepted, in bytes; larger ones get `413 payload_too_large`.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The router, with every route and layer in place.
    pub fn build(self) -> Router {
        let catalog = Arc::new(Catalog::new(&self.tools));
        let state = AppState {
            dispatcher: Dispatcher::new(Arc::new(self.tools), self.store),
            catalog,
        };
        Router::new()
            .route("/tools", get(tools::list))
            .route("/tools/{name}", get(tools::get))
            .route("/tools/{name}/call", post(tools::call))
            .route("/calls/{call_id}", get(calls::get))
            .route("/approvals", get(approvals::list))
            .route("/approvals/{token}", get(approvals::get))
            .route("/approvals/{token}/approve", post(approvals::approve))
            .route("/approvals/{token}/reject", post(approvals::reject))
            .route("/openapi.json", get(serve_openapi))
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz))
            .fallback(|| async { ApiError::RouteNotFound })
            .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
            .with_state(state)
            .layer(DefaultBodyLimit::max(self.max_body_bytes))
            .layer(
                // One span per request, named by its route template rather than its path, so
                // suspension tokens in paths are never logged. The call id is added once known.
                TraceLayer::new_for_http()
                    .make_span_with(|req: &Request| {
                        let route = req
                            .extensions()
                            .get::<MatchedPath>()
                            .map_or("unmatched", |path| path.as_str());
                        tracing::info_span!(
                            "request",
                            method = %req.method(),
                            route,
                            call_id = tracing::field::Empty,
                        )
                    })
                    .on_request(DefaultOnRequest::new().level(Level::DEBUG))
                    .on_response(DefaultOnResponse::new().level(Level::INFO)),
            )
    }
}

impl Catalog {
    fn new(tools: &ToolSet) -> Self {
        let descriptors = tools.descriptors();
        let descriptor_json = descriptors
            .iter()
            .map(|d| (d.name.clone(), json_bytes(d)))
            .collect();
        let tools_json = json_bytes(&tools::ToolList { tools: descriptors });
        let openapi_json = json_bytes(&openapi::document(tools));
        Catalog {
            tools_json,
            descriptor_json,
            openapi_json,
        }
    }
}

fn json_bytes<T: serde::Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("serializing plain data to JSON cannot fail"))
}

async fn serve_openapi(
    axum::extract::State(app): axum::extract::State<AppState>,
) -> axum::response::Response {
    tools::json_bytes(&app.catalog.openapi_json)
}
