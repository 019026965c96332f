//! REST APIs as upstreams: `[[upstreams]]` with `openapi = "<document>"`. Each operation of the
//! document is a tool ([`operations`]), served as any upstream tool is (pins, policies,
//! approval, idempotency keys, retries by effect, attestations), whose attempt is one HTTP
//! request ([`request`]).
//!
//! The document is read at start (a document that cannot be read, or that names an operation
//! without an id or two operations under one name, stops the start) and again every
//! `refresh_s`; each reading that changes the tool list is published like an MCP server's new
//! list, so a changed operation of a pinned upstream is held for an admin.

mod call;
mod config;
mod document;
mod names;
mod operations;
mod request;
mod schema;
mod security;
mod servers;

pub(in crate::upstream) use config::check;
pub use config::{Selector, Source};
pub(crate) use operations::Operation;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rmcp::model::Tool as McpTool;

use super::link::Link;

/// How long connecting to the API may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One REST API: its document's source, the HTTP client its calls go through, and the
/// operations of the document read last.
pub(crate) struct Api {
    source: Source,
    client: reqwest::Client,
    operations: RwLock<Arc<HashMap<String, Arc<Operation>>>>,
}

impl Api {
    /// The API of `source` (nothing read yet).
    pub(crate) fn new(source: Source) -> Result<Api, String> {
        crate::base::install_crypto();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| format!("cannot build the HTTP client: {err}"))?;
        Ok(Api {
            source,
            client,
            operations: RwLock::default(),
        })
    }

    /// Reads the document and makes its tools (for the upstream `upstream`, whose `tools`
    /// globs are `globs`; `exchange` when it acts as its caller); the operations are kept for
    /// the tools made from this list.
    pub(crate) async fn load(
        &self,
        upstream: &str,
        globs: &[String],
        exchange: bool,
    ) -> Result<Vec<McpTool>, String> {
        let began = std::time::Instant::now();
        let shown = super::link::shown_url(&self.source.document);
        let (bytes, url) = document::read(&self.client, &self.source.document)
            .await
            .map_err(|err| format!("the OpenAPI document {shown}: {err}"))?;
        let (source, name, globs) = (self.source.clone(), upstream.to_owned(), globs.to_vec());
        // Parsing and resolving a large document (GitHub's is 13 MB) is seconds of work: not on
        // the runtime's threads.
        let built = tokio::task::spawn_blocking(move || {
            let document = document::Document::parse(&bytes, url)
                .map_err(|err| format!("the OpenAPI document {shown}: {err}"))?;
            operations::build(&document, &name, &globs, &source, exchange)
        })
        .await
        .map_err(|err| format!("reading the OpenAPI document failed: {err}"))??;
        for (operation, why) in &built.skipped {
            tracing::warn!(
                upstream,
                operation = %operation,
                reason = %why,
                "an operation of the OpenAPI document is not served"
            );
        }
        tracing::info!(
            upstream,
            tools = built.tools.len(),
            skipped = built.skipped.len(),
            ms = began.elapsed().as_millis() as u64,
            "OpenAPI document read"
        );
        *self
            .operations
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(built.operations);
        Ok(built.tools)
    }

    /// `failure` with every secret of the entry (its credentials, its headers' values) taken
    /// out of its message: an API's answer may echo what it was sent, and the message is
    /// recorded and shown to callers and approvers.
    pub(crate) fn redact(&self, failure: request::Failure) -> request::Failure {
        use request::Failure;
        let clean = |mut message: String| {
            let secrets = self.source.credentials.iter().chain(&self.source.headers);
            for (_, secret) in secrets {
                if secret.len() >= 4 {
                    message = message.replace(secret.as_str(), "[redacted]");
                }
            }
            message
        };
        match failure {
            Failure::Refused(message) => Failure::Refused(clean(message)),
            Failure::Undelivered(message) => Failure::Undelivered(clean(message)),
            Failure::Input(message) => Failure::Input(clean(message)),
            Failure::Unavailable {
                message,
                may_have_run,
                retry_after,
            } => Failure::Unavailable {
                message: clean(message),
                may_have_run,
                retry_after,
            },
        }
    }

    /// The operation of the tool named `name` upstream, as last read.
    pub(crate) fn operation(&self, name: &str) -> Option<Arc<Operation>> {
        self.operations
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }
}

/// Reads `link`'s document again every `refresh_s` (if set), handing each list that differs
/// from the last to `publish`.
pub(super) async fn refresh<F: Future<Output = ()>>(
    link: Arc<Link>,
    mut last: Vec<McpTool>,
    publish: impl Fn(Vec<McpTool>) -> F,
) {
    let (Some(api), Some(every)) = (&link.api, link.config.refresh) else {
        return;
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let read = api
            .load(link.name(), &link.config.tools, link.exchange.is_some())
            .await;
        match read {
            Ok(tools) if tools == last => {}
            Ok(tools) => {
                tracing::info!(
                    upstream = link.name(),
                    tools = tools.len(),
                    "the OpenAPI document changed"
                );
                last = tools.clone();
                publish(tools).await;
            }
            Err(err) => {
                tracing::warn!(upstream = link.name(), error = %err, "cannot read the OpenAPI document again; serving what was read before");
            }
        }
    }
}
