//! Pinned tool definitions: what an upstream tool was trusted as, and what becomes of it when
//! its server lists something else.
//!
//! A tool's definition is its name, title, description, input and output schema and
//! annotations, as canonical JSON (keys sorted at every level, no white space), and its hash is
//! that text's SHA-256 ([`Definition`]). The store keeps a pin per tool ([`ToolPin`]), so every
//! replica holds the same tools. Each tool list read (at start, on `list_changed`, every
//! `refresh_s`) is compared with the pins ([`served`]):
//! - a tool whose definition is its pin's is served as listed;
//! - a pinned tool whose definition changed is **held**: served with its pinned definition (its
//!   description says it is held), every call refused `409 tool_changed`, until an admin
//!   accepts the change ([`PinBook::accept`], which pins the definition listed now);
//! - a tool without a pin is pinned and served, or held and not served, as `on_new_tool` says
//!   (by default pinned at the upstream's first connection, held afterwards);
//! - a tool no longer listed is not served; one listed again as pinned is served again.
//!
//! Nothing of this is on a call's path: a call reads the pin the tool was built with.
//! [`PinBook`] keeps, for the doors, what each upstream lists now beside its pins: the changes
//! an admin reviews (REST `GET /upstreams/{name}/changes`, the inbox).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use rmcp::model::Tool as McpTool;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::changes::change_of;
pub use super::changes::{ChangeKind, ListedDefinition, PinnedDefinition, ToolChange};
use super::link::Link;
use super::tool::{UpstreamTool, prefixed};
use crate::contract::erased::{DynTool, Pinned};
use crate::store::{NewTools, Store, StoreError, Timestamp, ToolPin};

/// `pins`: whether an upstream's tool definitions are pinned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinMode {
    /// Pinned: a changed tool is held for an admin.
    #[default]
    On,
    /// Not pinned: changes pass through (as before pins).
    Off,
}

/// `on_new_tool`: what a tool without a pin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnNewTool {
    /// Pinned as listed, and served.
    Pin,
    /// Held for an admin, not served.
    Hold,
}

/// The members of a tool's definition that are pinned (as MCP names them).
pub(super) const PINNED_FIELDS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// What a held tool's description begins with, on every door.
const HELD_MARK: &str = "[held: this tool's definition changed upstream and waits for an \
                         admin; calls are refused] ";

/// A tool's definition as pinned: its canonical JSON and that text's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// The SHA-256 of `canonical`, in hex.
    pub hash: String,
    /// The definition's JSON, keys sorted at every level, no white space.
    pub canonical: String,
}

impl Definition {
    /// The definition of `tool`, as listed.
    pub fn of(tool: &McpTool) -> Definition {
        let whole = serde_json::to_value(tool).unwrap_or(Value::Null);
        let mut picked = serde_json::Map::new();
        if let Value::Object(members) = whole {
            for (key, value) in members {
                if PINNED_FIELDS.contains(&key.as_str()) {
                    picked.insert(key, value);
                }
            }
        }
        let canonical = sorted(Value::Object(picked)).to_string();
        Definition {
            hash: hex::encode(Sha256::digest(canonical.as_bytes())),
            canonical,
        }
    }

    /// The definition as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.canonical).unwrap_or(Value::Null)
    }
}

/// `value` with the members of every object in key order, whatever order a map keeps.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(members) => {
            let mut members: Vec<(String, Value)> = members.into_iter().collect();
            members.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                members
                    .into_iter()
                    .map(|(key, value)| (key, sorted(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// What one upstream lists now beside its pins, as the last tool list read left them.
#[derive(Clone)]
struct Book {
    link: Arc<Link>,
    /// The tool list last read, whole (to publish again once a change is accepted).
    listed: Vec<McpTool>,
    /// The definitions of the tools selected from it, by name upstream.
    definitions: BTreeMap<String, Definition>,
    /// The upstream's pins, by tool name.
    pins: BTreeMap<String, ToolPin>,
}

/// Every pinned upstream's tools as listed now and as pinned, shared by the supervisors and
/// the doors. Cheap to clone.
#[derive(Clone, Default)]
pub struct PinBook {
    books: Arc<RwLock<BTreeMap<String, Book>>>,
    /// One publication at a time (a tool list read, an accept), so the last one stands.
    publishing: Arc<tokio::sync::Mutex<()>>,
}

/// Why a change could not be accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// No pinned upstream has this name.
    #[error("no upstream with pinned tools is named `{0}`")]
    UnknownUpstream(String),
    /// The upstream lists no change of this tool now.
    #[error("upstream `{upstream}` lists no change of tool `{tool}`")]
    NoChange {
        /// The upstream.
        upstream: String,
        /// The tool.
        tool: String,
    },
    /// The hash accepted is not the one of the definition listed now (a second change came in
    /// between): nothing was accepted.
    #[error("the hash accepted is not the one the upstream lists now")]
    HashMismatch {
        /// The hash pinned; empty for a new tool.
        pinned: String,
        /// The hash listed now.
        current: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PinBook {
    /// The upstreams with pins, by name.
    pub fn upstreams(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// The changes of `upstream` waiting for an admin, by tool name; `None` when no pinned
    /// upstream has that name.
    pub fn changes(&self, upstream: &str) -> Option<Vec<ToolChange>> {
        let books = self.read();
        let book = books.get(upstream)?;
        Some(
            book.definitions
                .iter()
                .filter_map(|(tool, listed)| change_of(upstream, tool, listed, book.pins.get(tool)))
                .collect(),
        )
    }

    /// Accepts the change of `upstream`'s `tool` whose definition hashes to `hash`, as `by`:
    /// the definition listed now is pinned (in the store, for every replica), and the tool is
    /// served with it at once here (other replicas at their next tool list read).
    pub async fn accept(
        &self,
        dispatcher: &crate::dispatch::Dispatcher,
        upstream: &str,
        tool: &str,
        hash: &str,
        by: Option<&str>,
    ) -> Result<ToolPin, AcceptError> {
        let _one = self.publishing.lock().await;
        let (link, listed, definition, pinned) = {
            let books = self.read();
            let book = books
                .get(upstream)
                .ok_or_else(|| AcceptError::UnknownUpstream(upstream.to_owned()))?;
            let definition = book
                .definitions
                .get(tool)
                .filter(|listed| {
                    book.pins
                        .get(tool)
                        .is_none_or(|pin| pin.hash != listed.hash)
                })
                .ok_or_else(|| AcceptError::NoChange {
                    upstream: upstream.to_owned(),
                    tool: tool.to_owned(),
                })?;
            let pinned = book.pins.get(tool).map(|pin| pin.hash.clone());
            (
                book.link.clone(),
                book.listed.clone(),
                definition.clone(),
                pinned,
            )
        };
        // The hash as a person copied it: surrounding white space is not part of it.
        if definition.hash != hash.trim() {
            return Err(AcceptError::HashMismatch {
                pinned: pinned.unwrap_or_default(),
                current: definition.hash,
            });
        }
        let pin = ToolPin {
            upstream: upstream.to_owned(),
            tool: tool.to_owned(),
            hash: definition.hash,
            definition: definition.canonical,
            pinned_at: Timestamp::now(),
            pinned_by: by.map(str::to_owned),
            accepted: true,
        };
        let detail = serde_json::json!({
            "upstream": upstream,
            "tool": tool,
            "served_as": prefixed(upstream, tool),
            "hash": pin.hash,
            "pinned_hash": pinned,
            "accepted_by": by,
        });
        dispatcher
            .store()
            .accept_pin(&pin, &detail.to_string())
            .await?;
        tracing::info!(
            upstream,
            tool,
            hash = %pin.hash,
            by = by.unwrap_or("-"),
            "an upstream tool's changed definition was accepted and pinned"
        );
        let tools = self.served(dispatcher.store(), &link, &listed).await;
        super::swap_in(dispatcher, &link, tools);
        Ok(pin)
    }

    /// Publishes `listed`, read from `link`, into `dispatcher`: its tools as their pins say.
    pub(super) async fn publish(
        &self,
        dispatcher: &crate::dispatch::Dispatcher,
        link: &Arc<Link>,
        listed: &[McpTool],
    ) {
        let _one = self.publishing.lock().await;
        let tools = self.served(dispatcher.store(), link, listed).await;
        super::swap_in(dispatcher, link, tools);
    }

    /// The tools to serve of `listed`, read from `link` (whose pins are on), as their pins say;
    /// the store's pins are made and read first. With the store unreachable, the pins last read
    /// stand and nothing new is pinned: every changed tool is held, every new one left out.
    pub(super) async fn served(
        &self,
        store: &Arc<dyn Store>,
        link: &Arc<Link>,
        listed: &[McpTool],
    ) -> Vec<Arc<dyn DynTool>> {
        let upstream = link.name();
        let new_tools = link.config.pins.unwrap_or(NewTools::PinFirst);
        // A tool whose served name would not be valid is never served: nor pinned, nor held.
        let chosen: Vec<&McpTool> = super::selected(link, listed)
            .into_iter()
            .filter(|tool| {
                crate::contract::registry::is_valid_tool_name(&super::tool::prefixed(
                    upstream, &tool.name,
                ))
            })
            .collect();
        let definitions: BTreeMap<String, Definition> = chosen
            .iter()
            .map(|tool| (tool.name.to_string(), Definition::of(tool)))
            .collect();
        let now = Timestamp::now();
        let candidates = definitions
            .iter()
            .map(|(tool, definition)| ToolPin {
                upstream: upstream.to_owned(),
                tool: tool.clone(),
                hash: definition.hash.clone(),
                definition: definition.canonical.clone(),
                pinned_at: now,
                pinned_by: None,
                accepted: false,
            })
            .collect();
        let read = store.pins_on_connect(upstream, candidates, new_tools).await;
        let stored = read.is_ok();
        let pins = match read {
            Ok(pins) => pins
                .into_iter()
                .map(|pin| (pin.tool.clone(), pin))
                .collect(),
            Err(err) => {
                tracing::error!(
                    upstream,
                    error = %err,
                    "cannot read the upstream's pinned tools: the pins last read stand, changed \
                     tools are held and new ones left out"
                );
                self.read()
                    .get(upstream)
                    .map(|book| book.pins.clone())
                    .unwrap_or_default()
            }
        };
        let mut tools: Vec<Arc<dyn DynTool>> = Vec::new();
        let mut held = 0;
        for remote in &chosen {
            let definition = &definitions[remote.name.as_ref()];
            let policy = link.config.policies.get(remote.name.as_ref());
            match pins.get(remote.name.as_ref()) {
                Some(pin) if pin.hash == definition.hash => {
                    let pinned = Pinned {
                        hash: pin.hash.clone(),
                        since_ms: pin.since_ms(),
                        changed_to: None,
                    };
                    tools.push(Arc::new(
                        UpstreamTool::new(link.clone(), remote, policy).pinned(pinned),
                    ));
                }
                Some(pin) => {
                    held += 1;
                    let Ok(trusted) = serde_json::from_str::<McpTool>(&pin.definition) else {
                        tracing::error!(upstream, tool = %remote.name, "a pinned definition cannot be read; the tool is not served");
                        continue;
                    };
                    let pinned = Pinned {
                        hash: pin.hash.clone(),
                        since_ms: pin.since_ms(),
                        changed_to: Some(definition.hash.clone()),
                    };
                    let tool = UpstreamTool::new(link.clone(), &trusted, policy)
                        .pinned(pinned)
                        .marked(HELD_MARK);
                    tools.push(Arc::new(tool));
                }
                None => held += 1,
            }
        }
        let (changes, found) = self.record(link, listed, definitions, pins);
        for change in changes.iter().filter(|change| found.contains(&change.tool)) {
            tracing::warn!(
                upstream,
                tool = %change.tool,
                kind = ?change.kind,
                differs = ?change.differs,
                hash = %change.upstream.hash,
                "an upstream tool's definition is not the one pinned: held until an admin \
                 accepts it (GET /upstreams/{{name}}/changes)"
            );
        }
        crate::metrics::upstream_pins(upstream, held, found.len());
        // Told in the feed once, by whichever replica reads it first; asked at every read, so
        // that a store that failed once is asked again.
        if stored && !changes.is_empty() {
            let notes = changes.iter().map(|change| change.note(upstream)).collect();
            if let Err(err) = store.tell_changes(upstream, notes).await {
                tracing::error!(upstream, error = %err, "cannot record the upstream's changed tools in the feed; asked again at the next tool list read");
            }
        }
        tools
    }

    /// Keeps what `link` lists now beside its pins: the changes, and the tools of those not
    /// known before in this process.
    fn record(
        &self,
        link: &Arc<Link>,
        listed: &[McpTool],
        definitions: BTreeMap<String, Definition>,
        pins: BTreeMap<String, ToolPin>,
    ) -> (Vec<ToolChange>, Vec<String>) {
        let upstream = link.name();
        let mut books = self.books.write().unwrap_or_else(PoisonError::into_inner);
        let before: BTreeMap<String, String> = books
            .get(upstream)
            .map(|book| {
                book.definitions
                    .iter()
                    .filter_map(|(tool, listed)| {
                        change_of(upstream, tool, listed, book.pins.get(tool))
                            .map(|change| (tool.clone(), change.upstream.hash))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let changes: Vec<ToolChange> = definitions
            .iter()
            .filter_map(|(tool, listed)| change_of(upstream, tool, listed, pins.get(tool)))
            .collect();
        let found = changes
            .iter()
            .filter(|change| before.get(&change.tool) != Some(&change.upstream.hash))
            .map(|change| change.tool.clone())
            .collect();
        books.insert(
            upstream.to_owned(),
            Book {
                link: link.clone(),
                listed: listed.to_vec(),
                definitions,
                pins,
            },
        );
        (changes, found)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Book>> {
        self.books.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(description: &str, schema: Value) -> McpTool {
        serde_json::from_value(json!({
            "name": "write_file",
            "description": description,
            "inputSchema": schema,
            "_meta": {"ignored": true},
        }))
        .unwrap()
    }

    #[test]
    fn a_definition_hashes_its_pinned_fields_in_key_order() {
        let a = tool(
            "Writes a file.",
            json!({"type": "object", "properties": {"b": {}, "a": {}}}),
        );
        let b = tool(
            "Writes a file.",
            json!({"properties": {"a": {}, "b": {}}, "type": "object"}),
        );
        let one = Definition::of(&a);
        assert_eq!(one, Definition::of(&b), "the order of keys does not count");
        assert_eq!(
            one.canonical,
            r#"{"description":"Writes a file.","inputSchema":{"properties":{"a":{},"b":{}},"type":"object"},"name":"write_file"}"#
        );
        assert_eq!(one.hash.len(), 64);
        let changed = Definition::of(&tool(
            "Writes a file, then mails it.",
            json!({"type": "object"}),
        ));
        assert_ne!(
            one.hash, changed.hash,
            "a description that changes changes the hash"
        );
        let back: McpTool = serde_json::from_str(&one.canonical).unwrap();
        assert_eq!(
            Definition::of(&back),
            one,
            "a pinned definition reads back as it was"
        );
    }
}
