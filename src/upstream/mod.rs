//! Upstream MCP servers, served as toolgate tools: `[[upstreams]]` in the configuration.
//!
//! Each server's tools become [`DynTool`]s named `<upstream>__<tool>` ([`tool`]), so every door
//! (REST, OpenAPI, the provider formats, `/mcp`, the inbox) serves them, and every call of one
//! goes through the one lifecycle: approval gates from the configuration, idempotency keys from
//! a template, intent recorded before anything is sent, retries by effect, reconciliation of a
//! write that may have happened. Annotations are the server's hints: an unannotated tool is a
//! write.
//!
//! The servers are reached with the official Rust SDK's client: a child process over stdio, or
//! Streamable HTTP ([`link`]). At start, each is connected once: a stdio server that cannot be
//! started stops the start, an HTTP server that does not answer does not (its tools appear once
//! it does). Then each has a supervisor task that keeps it connected, re-reads its tool list when
//! it changes, and swaps the tools into the dispatcher's live set.
//!
//! Each tool list is compared with the tools' pins ([`pins`]) first, unless the upstream's
//! `pins = "off"`: a tool whose definition changed since it was trusted is held for an admin.

mod auth;
mod changes;
pub mod config;
mod exchange;
mod http;
mod key;
mod link;
pub mod openapi;
pub mod pins;
mod tool;

pub use pins::PinBook;

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::Tool as McpTool;

use crate::contract::erased::DynTool;
use crate::contract::registry::glob_matches;
use crate::contract::registry::{RegistryError, ToolSet, is_valid_tool_name};
use crate::dispatch::Dispatcher;
use config::{Transport, Upstream};
use link::{Link, Session};
use tool::{UpstreamTool, prefixed};

/// Why the upstreams could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// A stdio server could not be started, or did not complete the MCP handshake.
    #[error("upstream `{upstream}` could not start: {message}")]
    Start {
        /// The upstream.
        upstream: String,
        /// Why.
        message: String,
    },
    /// An upstream tool's name, prefixed, is not a valid tool name.
    #[error(
        "tool `{tool}` of upstream `{upstream}` would be served as `{name}`, which is not a \
         valid tool name (^[a-zA-Z0-9_-]{{1,64}}$); leave it out with the upstream's `tools` globs"
    )]
    InvalidName {
        /// The upstream.
        upstream: String,
        /// The tool's name upstream.
        tool: String,
        /// The name it would be served as.
        name: String,
    },
    /// Two tools would be served under one name.
    #[error(
        "two tools would be served as `{name}`: {first} and {second}; leave one out with its \
         upstream's `tools` globs"
    )]
    Collision {
        /// The name.
        name: String,
        /// One tool.
        first: String,
        /// The other.
        second: String,
    },
}

/// The upstreams, connected once and ready to be supervised by the server they serve in.
#[derive(Default)]
pub struct Upstreams {
    started: Vec<Started>,
    /// The pinned upstreams' tools as listed and as pinned, for the doors.
    book: PinBook,
}

struct Started {
    link: Arc<Link>,
    /// The MCP session made at start; `None` for a REST API, or an HTTP server that did not
    /// answer.
    session: Option<Session>,
    /// The tool list read at start; `None` for an HTTP server that did not answer.
    listed: Option<Vec<McpTool>>,
    tools: Vec<Arc<dyn DynTool>>,
    /// Whether `tools` are as the pins say (always, with pins off); if not, the supervisor
    /// publishes the start's list once it has read the pins.
    pinned: bool,
}

impl Upstreams {
    /// No upstreams.
    pub fn none() -> Self {
        Upstreams::default()
    }

    /// Connects each upstream once (all at once) and reads its tools. Fails when a stdio
    /// server cannot be started, or when a tool's name is invalid or taken (by `natives` or by
    /// another upstream's tool), naming the tools.
    pub async fn connect(
        upstreams: Vec<Upstream>,
        natives: &ToolSet,
    ) -> Result<Upstreams, UpstreamError> {
        let connecting = upstreams.into_iter().map(|config| async move {
            let name = config.name.clone();
            let link = Link::new(config).map_err(|message| UpstreamError::Start {
                upstream: name,
                message,
            })?;
            let reached = async {
                if let Some(api) = &link.api {
                    let listed = api
                        .load(link.name(), &link.config.tools, link.exchange.is_some())
                        .await?;
                    return Ok((None, listed));
                }
                let session = link.connect().await?;
                let listed = Link::list(session.peer()).await?;
                Ok::<_, String>((Some(session), listed))
            };
            match reached.await {
                Ok((session, listed)) => Ok((link, session, Some(listed))),
                // A stdio server that cannot start, or a document that cannot be read, stops
                // the start.
                Err(message) if !matches!(link.config.transport, Transport::Http { .. }) => {
                    Err(UpstreamError::Start {
                        upstream: link.name().to_owned(),
                        message,
                    })
                }
                // Not a reason to stop: its supervisor keeps trying, and its tools appear then.
                Err(message) => {
                    tracing::warn!(
                        upstream = link.name(),
                        error = %message,
                        "the upstream MCP server does not answer with its tools; they appear \
                         once it does"
                    );
                    Ok((link, None, None))
                }
            }
        });
        let mut started = Vec::new();
        // Every served name, and what it is, to name both sides of a collision.
        let mut names: BTreeMap<String, String> = natives
            .iter()
            .map(|tool| {
                (
                    tool.name().to_owned(),
                    format!("the tool `{}`", tool.name()),
                )
            })
            .collect();
        for connected in futures_util::future::join_all(connecting).await {
            let (link, session, listed) = connected?;
            let mut tools = Vec::new();
            for remote in selected(&link, listed.as_deref().unwrap_or_default()) {
                let name = prefixed(link.name(), &remote.name);
                if !is_valid_tool_name(&name) {
                    return Err(UpstreamError::InvalidName {
                        upstream: link.name().to_owned(),
                        tool: remote.name.to_string(),
                        name,
                    });
                }
                let this = format!("tool `{}` of upstream `{}`", remote.name, link.name());
                if let Some(first) = names.insert(name.clone(), this.clone()) {
                    return Err(UpstreamError::Collision {
                        name,
                        first,
                        second: this,
                    });
                }
                tools.push(upstream_tool(&link, remote));
            }
            let pinned = link.config.pins.is_none() || listed.is_none();
            started.push(Started {
                link,
                session,
                listed,
                tools,
                pinned,
            });
        }
        Ok(Upstreams {
            started,
            book: PinBook::default(),
        })
    }

    /// Compares the tools read at start with their pins in `store` (pinning them at an
    /// upstream's first connection), so that the server starts serving them as their pins say.
    /// An upstream whose pins are off is left as it is.
    pub async fn pin(&mut self, store: &Arc<dyn crate::store::Store>) {
        for started in &mut self.started {
            if started.pinned {
                continue;
            }
            if let Some(listed) = &started.listed {
                started.tools = self.book.served(store, &started.link, listed).await;
                started.pinned = true;
            }
        }
    }

    /// The pinned upstreams' changes, as the doors show them.
    pub fn book(&self) -> PinBook {
        self.book.clone()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
    }

    /// How many upstream tools were read at start.
    pub fn tool_count(&self) -> usize {
        self.started.iter().map(|started| started.tools.len()).sum()
    }

    /// The upstream tools read at start, as served.
    pub fn tools(&self) -> impl Iterator<Item = &dyn DynTool> {
        self.started
            .iter()
            .flat_map(|started| started.tools.iter().map(AsRef::as_ref))
    }

    /// Whether `name` is in an upstream's namespace (`<upstream>__<tool>`), listed at start or
    /// not: settings for it are an upstream tool's, whether or not its server answered yet.
    pub fn covers(&self, name: &str) -> bool {
        self.started.iter().any(|started| {
            name.strip_prefix(started.link.name())
                .and_then(|rest| rest.strip_prefix(config::SEPARATOR))
                .is_some_and(|tool| !tool.is_empty())
        })
    }

    /// Adds the tools read at start to `dispatcher`, and starts each upstream's supervisor
    /// (inside the current tokio runtime).
    pub(crate) fn start(self, dispatcher: &Dispatcher) {
        for Started {
            link,
            session,
            listed,
            tools,
            pinned,
        } in self.started
        {
            // Tools not compared with their pins yet (a builder not started with
            // `ServerBuilder::start`) are served once they are, by the supervisor.
            let unpinned = match (&listed, pinned) {
                (Some(listed), false) => Some(listed.clone()),
                _ => {
                    for err in dispatcher.replace_upstream_tools(link.name(), tools) {
                        tracing::error!(upstream = link.name(), error = %err, "an upstream tool is not served");
                    }
                    None
                }
            };
            let dispatcher = dispatcher.clone();
            let publisher = link.clone();
            let book = self.book.clone();
            let on_list = move |listed: Vec<McpTool>| {
                let (dispatcher, publisher, book) =
                    (dispatcher.clone(), publisher.clone(), book.clone());
                async move {
                    if publisher.config.pins.is_some() {
                        book.publish(&dispatcher, &publisher, &listed).await;
                    } else {
                        swap_in(&dispatcher, &publisher, unpinned_tools(&publisher, &listed));
                    }
                }
            };
            tokio::spawn(async move {
                if let Some(listed) = unpinned {
                    on_list(listed).await;
                }
                if link.api.is_some() {
                    openapi::refresh(link, listed.unwrap_or_default(), on_list).await;
                } else {
                    link.supervise(session.zip(listed), on_list).await;
                }
            });
        }
    }
}

/// The most tools served from one upstream; past it, the rest of its list is left out.
const MAX_TOOLS: usize = 1000;

/// The tools of `listed` that `link`'s globs select (at most [`MAX_TOOLS`]). A policy that
/// names no tool selected is logged: a misspelt name would leave a tool without its gate.
fn selected<'a>(link: &Link, listed: &'a [McpTool]) -> Vec<&'a McpTool> {
    let globs = &link.config.tools;
    let mut chosen: Vec<&McpTool> = listed
        .iter()
        .filter(|tool| globs.iter().any(|glob| glob_matches(glob, &tool.name)))
        .collect();
    if chosen.len() > MAX_TOOLS {
        tracing::error!(
            upstream = link.name(),
            tools = chosen.len(),
            served = MAX_TOOLS,
            "the upstream lists more tools than are served from one upstream; the rest are left out"
        );
        chosen.truncate(MAX_TOOLS);
    }
    for policy in link.config.policies.keys() {
        if !chosen.iter().any(|tool| tool.name == policy.as_str()) {
            tracing::warn!(
                upstream = link.name(),
                tool = %policy,
                "a policy names a tool the upstream does not serve now (misspelt, or not listed \
                 yet): its settings apply once a tool of that name is listed"
            );
        }
    }
    chosen
}

fn upstream_tool(link: &Arc<Link>, remote: &McpTool) -> Arc<dyn DynTool> {
    let policy = link.config.policies.get(remote.name.as_ref());
    Arc::new(UpstreamTool::new(link.clone(), remote, policy))
}

/// The tools of `listed` to serve from `link` as listed (its pins off): a tool whose name is
/// invalid is left out, and logged.
fn unpinned_tools(link: &Arc<Link>, listed: &[McpTool]) -> Vec<Arc<dyn DynTool>> {
    selected(link, listed)
        .into_iter()
        .map(|remote| upstream_tool(link, remote))
        .collect()
}

/// Swaps `tools`, served from `link`, into the dispatcher: a tool whose name is invalid or taken
/// is left out, and logged.
fn swap_in(dispatcher: &Dispatcher, link: &Arc<Link>, tools: Vec<Arc<dyn DynTool>>) {
    let mut valid = Vec::with_capacity(tools.len());
    for tool in tools {
        if is_valid_tool_name(tool.name()) {
            valid.push(tool);
        } else {
            tracing::error!(
                upstream = link.name(),
                name = tool.name(),
                "an upstream tool's name is not a valid tool name; not served"
            );
        }
    }
    let count = valid.len();
    for err in dispatcher.replace_upstream_tools(link.name(), valid) {
        let reason = match &err {
            RegistryError::DuplicateName { .. } => "its name is taken by another tool",
            _ => "it cannot be registered",
        };
        tracing::error!(upstream = link.name(), error = %err, reason, "an upstream tool is not served");
    }
    tracing::debug!(
        upstream = link.name(),
        tools = count,
        "upstream tools swapped in"
    );
}
