//! A held tool's change, as an admin reviews it: the definition pinned beside the one its
//! server lists now, the members that differ, and what the change feed tells of it. See
//! [`super::pins`].

use serde::Serialize;
use serde_json::Value;

use super::pins::{Definition, PINNED_FIELDS};
use super::tool::prefixed;
use crate::store::{Timestamp, ToolChangeNote, ToolPin};

/// A difference between a tool's pin and what its server lists now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ToolChange {
    /// The tool's name on the upstream server.
    pub tool: String,
    /// The name it is served as (`<upstream>__<tool>`).
    pub served_as: String,
    /// `changed` (its definition is not the pinned one) or `new` (it has no pin).
    pub kind: ChangeKind,
    /// The members of the definition that differ (`description`, `inputSchema`, ...).
    pub differs: Vec<String>,
    /// The definition pinned (trusted); `null` for a new tool.
    pub pinned: Option<PinnedDefinition>,
    /// The definition the server lists now: accept it with its `hash`.
    pub upstream: ListedDefinition,
}

impl ToolChange {
    /// The change as `upstream`'s `upstream.tool_changed` feed entry tells it: what a reader
    /// needs to find it (`GET /upstreams/{name}/changes`) and accept it, not the definitions.
    pub(super) fn note(&self, upstream: &str) -> ToolChangeNote {
        let pinned_hash = self.pinned.as_ref().map(|pin| pin.hash.clone());
        let detail = serde_json::json!({
            "upstream": upstream,
            "tool": self.tool,
            "served_as": self.served_as,
            "kind": self.kind,
            "differs": self.differs,
            "hash": self.upstream.hash,
            "pinned_hash": pinned_hash,
        });
        ToolChangeNote {
            tool: self.tool.clone(),
            pinned_hash,
            hash: self.upstream.hash.clone(),
            detail: detail.to_string(),
        }
    }
}

/// Whether a change is of a pinned tool or of one never pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A pinned tool whose definition changed: held, listed with its pinned definition.
    Changed,
    /// A tool without a pin, held: not served until accepted.
    New,
}

/// A pinned definition, as a change shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PinnedDefinition {
    /// Its SHA-256 (hex).
    pub hash: String,
    /// The definition.
    #[schema(value_type = Object)]
    pub definition: Value,
    /// When it was pinned.
    #[schema(value_type = String, format = DateTime)]
    pub pinned_at: Timestamp,
    /// The admin who accepted it; `null` when a connection pinned it.
    pub pinned_by: Option<String>,
}

/// A definition as the server lists it now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ListedDefinition {
    /// Its SHA-256 (hex): what an accept names.
    pub hash: String,
    /// The definition.
    #[schema(value_type = Object)]
    pub definition: Value,
}

/// The change of `upstream`'s `tool`, listed as `listed`, against its `pin`; `None` when it is
/// the one pinned.
pub(super) fn change_of(
    upstream: &str,
    tool: &str,
    listed: &Definition,
    pin: Option<&ToolPin>,
) -> Option<ToolChange> {
    if pin.is_some_and(|pin| pin.hash == listed.hash) {
        return None;
    }
    let now = listed.json();
    let pinned = pin.map(|pin| PinnedDefinition {
        hash: pin.hash.clone(),
        definition: serde_json::from_str(&pin.definition).unwrap_or(Value::Null),
        pinned_at: pin.pinned_at,
        pinned_by: pin.pinned_by.clone(),
    });
    let differs = PINNED_FIELDS
        .iter()
        .filter(|field| {
            let before = pinned.as_ref().and_then(|pin| pin.definition.get(**field));
            before != now.get(**field)
        })
        .map(|field| (*field).to_owned())
        .collect();
    Some(ToolChange {
        tool: tool.to_owned(),
        served_as: prefixed(upstream, tool),
        kind: if pinned.is_some() {
            ChangeKind::Changed
        } else {
            ChangeKind::New
        },
        differs,
        pinned,
        upstream: ListedDefinition {
            hash: listed.hash.clone(),
            definition: now,
        },
    })
}
