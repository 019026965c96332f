//! Pins of upstream tools, as stored: [`PinStore`] keeps, for each upstream MCP server's tool,
//! the definition a person (or the first connection) trusted and its hash, where every replica
//! finds them, so all replicas hold the same changed tools.
//!
//! What a definition is, and its hash, is `crate::upstream`'s (the canonical JSON of its name,
//! title, description, schemas and annotations); here it is text, kept as it was hashed. The
//! first connection of an upstream is told apart by a row of its own (`pinned_upstreams`):
//! inserting it does nothing when another process did it first, so of two replicas connecting
//! at once one pins what it listed and the other reads those pins back.
//!
//! Every operation goes through the backend's one writer (they are rare: a tool list read, an
//! admin's accept), as one [`PinOp`]: `sqlite/pins.rs` and `postgres/pins.rs` apply them.

use async_trait::async_trait;

use super::backend::Backend;
use super::queue::WriteOp;
use super::{StoreError, Timestamp};

/// One upstream tool's pin: the definition trusted, and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPin {
    /// The upstream's name (`[[upstreams]] name`).
    pub upstream: String,
    /// The tool's name on the upstream server.
    pub tool: String,
    /// The SHA-256 (hex) of `definition`.
    pub hash: String,
    /// The canonical JSON of the definition (sorted keys), as hashed.
    pub definition: String,
    /// When it was pinned.
    pub pinned_at: Timestamp,
    /// Who pinned it: the admin who accepted a change; `None` when a connection pinned it.
    pub pinned_by: Option<String>,
    /// Whether an admin accepted it; `false` when a connection pinned it as it was listed.
    pub accepted: bool,
}

impl ToolPin {
    /// Since when a call's approval is of this definition: an accepted pin's time (a call made
    /// before an admin accepted it was made against another definition); a pin a connection
    /// made holds for every call before it (the tool was not served otherwise, or served as it
    /// is now, as when pins are first turned on).
    pub fn since_ms(&self) -> i64 {
        if self.accepted {
            self.pinned_at.0
        } else {
            i64::MIN
        }
    }
}

/// A change of an upstream's tool to tell admins of: an `upstream.tool_changed` feed entry,
/// written once per definition whichever replica reads it first, and only while the tool's pin
/// is still the one the change was read against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolChangeNote {
    /// The tool's name on the upstream server.
    pub tool: String,
    /// The hash pinned when the change was read; `None` for a tool without a pin.
    pub pinned_hash: Option<String>,
    /// The hash of the definition listed.
    pub hash: String,
    /// The entry's `change`, as JSON text.
    pub detail: String,
}

/// What a connection does with a tool that has no pin yet (`on_new_tool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewTools {
    /// Pin it at the upstream's first connection, hold it afterwards (the default).
    PinFirst,
    /// Always pin it.
    Pin,
    /// Always hold it, the first connection's tools too.
    Hold,
}

/// The pins of upstream tools, shared by every process on the store. A store that keeps none
/// (the defaults) fails every call of it: upstream tools are then held, never passed through
/// unchecked.
#[async_trait]
pub trait PinStore: Send + Sync {
    /// The pins of `upstream` once a connection listed `listed` (each as it would be pinned
    /// now): a listed tool without a pin is pinned as `new_tools` says, the upstream's first
    /// connection (by any process) being the one that first asks; then every pin of the
    /// upstream, by tool name.
    async fn pins_on_connect(
        &self,
        _upstream: &str,
        _listed: Vec<ToolPin>,
        _new_tools: NewTools,
    ) -> Result<Vec<ToolPin>, StoreError> {
        Err(no_pins())
    }

    /// Writes an `upstream.tool_changed` feed entry of `upstream` for each of `changes` not
    /// told before (by any process) whose tool's pin is still the one it was read against.
    async fn tell_changes(
        &self,
        _upstream: &str,
        _changes: Vec<ToolChangeNote>,
    ) -> Result<(), StoreError> {
        Err(no_pins())
    }

    /// Pins `pin`, in place of the tool's pin if it has one (an admin accepted a change), and
    /// writes an `upstream.change_accepted` feed entry whose change is `detail` (JSON text),
    /// in one transaction; the changes of the tool told before are forgotten.
    async fn accept_pin(&self, _pin: &ToolPin, _detail: &str) -> Result<(), StoreError> {
        Err(no_pins())
    }
}

fn no_pins() -> StoreError {
    StoreError::Backend("this store keeps no pins of upstream tools".into())
}

/// A pin write, as the writer applies it.
pub(crate) enum PinOp {
    /// [`PinStore::pins_on_connect`].
    Connect {
        upstream: String,
        listed: Vec<ToolPin>,
        new_tools: NewTools,
    },
    /// [`PinStore::tell_changes`].
    Tell {
        upstream: String,
        changes: Vec<ToolChangeNote>,
    },
    /// [`PinStore::accept_pin`]: the pin, and the entry's change.
    Accept(ToolPin, String),
}

impl PinOp {
    /// Whether a connection that finds the upstream's first-connection row `first` (inserted
    /// now) pins the listed tools that have no pin.
    pub(crate) fn pins_new(new_tools: NewTools, first: bool) -> bool {
        match new_tools {
            NewTools::Pin => true,
            NewTools::Hold => false,
            NewTools::PinFirst => first,
        }
    }
}

/// The columns of `tool_pins`, in [`ToolPin`]'s order.
pub(crate) const PIN_COLUMNS: &str =
    "upstream, tool, hash, definition, pinned_at, pinned_by, accepted";

#[async_trait]
impl<B: Backend> PinStore for B {
    async fn pins_on_connect(
        &self,
        upstream: &str,
        listed: Vec<ToolPin>,
        new_tools: NewTools,
    ) -> Result<Vec<ToolPin>, StoreError> {
        let op = PinOp::Connect {
            upstream: upstream.to_owned(),
            listed,
            new_tools,
        };
        self.write(WriteOp::Pins(Box::new(op))).await?.pins()
    }

    async fn tell_changes(
        &self,
        upstream: &str,
        changes: Vec<ToolChangeNote>,
    ) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let op = PinOp::Tell {
            upstream: upstream.to_owned(),
            changes,
        };
        self.write(WriteOp::Pins(Box::new(op))).await?.settled()
    }

    async fn accept_pin(&self, pin: &ToolPin, detail: &str) -> Result<(), StoreError> {
        let op = PinOp::Accept(pin.clone(), detail.to_owned());
        self.write(WriteOp::Pins(Box::new(op))).await?.settled()
    }
}
