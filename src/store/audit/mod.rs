//! The audit chain: one append-only record of every call's creation and changes (suspensions,
//! approvals with who and a hash of the answer, rejections, escalations, external completions,
//! reconciliations, uses of standing approvals), of standing approvals granted and revoked, of
//! upstream tool changes an admin accepted, and of the checkpoints that sign it.
//!
//! Each entry is `{"at", "event", "seq"}`, and its hash is `SHA-256(previous hash || the
//! entry's canonical JSON)` (RFC 8785; the first entry's previous hash is 32 zero bytes), so any
//! language can recompute it and an entry changed, removed or moved breaks every hash after it.
//! Inputs, outputs and answers appear as the SHA-256 of their canonical JSON: the chain keeps no
//! secret a caller sent.
//!
//! How changes are captured is the backends', always in the transaction that makes the change:
//! the SQLite writer appends each entry in the savepoint of its write (`sqlite/audit.rs`);
//! PostgreSQL's triggers capture every change of a call whatever statement makes it, and its
//! chainer chains them below the feed's horizon (`postgres/audit.rs`). How a captured change
//! becomes an entry is here ([`chain`]), shared by both, so both write the same entries. What signs the head, and what checks an export, is
//! `crate::audit`'s.

mod chain;

use async_trait::async_trait;

use super::StoreError;

pub(crate) use chain::{CallChange, Change, Pending, chain};
pub use chain::{canonical_json, link};

/// The hash before the first entry: 32 zero bytes, in hex.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The event type of a checkpoint entry.
pub const CHECKPOINT: &str = "audit.checkpoint";

/// One entry of the chain, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Its number: 1, 2, ... with no gap.
    pub seq: i64,
    /// Its canonical JSON: `{"at","event","seq"}`, as hashed.
    pub entry: String,
    /// Its hash, hex.
    pub hash: String,
}

impl AuditEntry {
    /// The entry as one line of an export: its JSON with its `hash`.
    pub fn line(&self) -> String {
        let body = self.entry.strip_suffix('}').unwrap_or(&self.entry);
        format!("{body},\"hash\":\"{}\"}}", self.hash)
    }
}

/// A call's entries and the checkpoint that covers them, with every entry between: what proves
/// the call without the rest of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPath {
    /// The hash before the first entry.
    pub prev: String,
    /// The entries from the call's first to the checkpoint (or to the head, when none covers
    /// the call's last entry yet), in order.
    pub entries: Vec<AuditEntry>,
    /// The numbers of the call's own entries.
    pub call_entries: Vec<i64>,
    /// Whether the last entry is a checkpoint covering the call's last entry.
    pub covered: bool,
}

/// The columns of a pending row, in the order [`Pending::from_columns`] reads them.
pub(crate) const PENDING_COLUMNS: &str = "pos, at, call_id, kind, actor, actor_name, details, \
    tool, status, attempts, effect, input, output, error, source";

impl Pending {
    /// A pending row, read column by column in the order of [`PENDING_COLUMNS`] by `text` and
    /// `int` (`pos`, `at` and `attempts` are integers).
    pub(crate) fn read<E>(
        text: impl Fn(usize) -> Result<Option<String>, E>,
        int: impl Fn(usize) -> Result<Option<i64>, E>,
    ) -> Result<Self, E> {
        let change = match text(3)? {
            Some(kind) => Change::Call(Box::new(CallChange {
                kind,
                actor: text(4)?,
                actor_name: text(5)?,
                details: text(6)?,
                tool: text(7)?,
                status: text(8)?,
                attempts: int(9)?,
                effect: text(10)?,
                input: text(11)?,
                output: text(12)?,
                error: text(13)?,
            })),
            None => Change::Other(text(14)?.unwrap_or_default()),
        };
        Ok(Pending {
            pos: int(0)?.unwrap_or_default(),
            at: int(1)?.unwrap_or_default(),
            call_id: text(2)?,
            change,
        })
    }
}

impl AuditPath {
    /// The path read: the hash before its first entry (`None`: the first of the chain), its
    /// entries, the call's, and the number of the checkpoint covering the call, if any.
    pub(crate) fn new(
        prev: Option<String>,
        entries: Vec<AuditEntry>,
        call_entries: Vec<i64>,
        checkpoint: Option<i64>,
    ) -> Self {
        let covered = checkpoint.is_some() && entries.last().map(|e| e.seq) == checkpoint;
        AuditPath {
            prev: prev.unwrap_or_else(|| GENESIS.to_owned()),
            entries,
            call_entries,
            covered,
        }
    }
}

/// A checkpoint to append: the head it signs and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCheckpoint {
    /// The number and hash of the entry signed.
    pub seq: i64,
    pub hash: String,
    /// The key that signed (kept published while the chain needs it).
    pub kid: String,
    /// The compact JWS over `{"audit_seq", "audit_hash", ...}`.
    pub jws: String,
}

/// Where an export of the chain (`[audit.export]`'s `otlp` or `syslog`) stands.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ExportState {
    /// The export: `otlp` or `syslog`.
    pub sink: String,
    /// The last entry it delivered (0: none yet).
    pub after_seq: i64,
    /// Entries delivered, in all.
    pub delivered: i64,
    /// Attempts that failed, in all.
    pub failures: i64,
    /// Why the last attempt failed, if it did.
    pub last_error: Option<String>,
    /// When it last tried (Unix ms).
    pub last_at: Option<i64>,
}

/// A write of an export's state.
#[derive(Debug, Clone)]
pub(crate) enum ExportOp {
    /// `owner` claims the export `sink` until `until` (Unix ms), unless another owner's claim
    /// holds at `now`; answers where it stands (`after_seq`) when claimed.
    Claim {
        sink: String,
        owner: String,
        now: i64,
        until: i64,
    },
    /// `owner` lets go of the export `sink`, so that another process may send it at once.
    Release { sink: String, owner: String },
    /// `owner`'s attempt ended: delivered up to `after` (`delivered` entries), or failed.
    Settle {
        sink: String,
        owner: String,
        after: i64,
        delivered: i64,
        error: Option<String>,
        now: i64,
    },
}

/// The audit chain, as every backend keeps it.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Chained entries numbered above `after`, at most `limit`, in order (what was written
    /// before this call is chained first).
    async fn audit_entries(&self, after: i64, limit: u32) -> Result<Vec<AuditEntry>, StoreError>;

    /// The last entry chained, if any.
    async fn audit_head(&self) -> Result<Option<AuditEntry>, StoreError>;

    /// The entries of the call `call_id`, from its first to the first checkpoint that covers
    /// its last (at most `limit` entries); `None` when the call has no entry.
    async fn audit_path(&self, call_id: &str, limit: u32) -> Result<Option<AuditPath>, StoreError>;

    /// Appends a checkpoint: chained after every change already written, and the key that
    /// signed it kept published from then on.
    async fn append_checkpoint(&self, checkpoint: NewCheckpoint) -> Result<(), StoreError>;

    /// `owner` claims the export `sink` for `lease_ms` (unless another owner's claim holds):
    /// the last entry it delivered, or `None` when another owner has it.
    async fn claim_audit_export(
        &self,
        sink: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Option<i64>, StoreError>;

    /// Records how `owner`'s attempt of the export `sink` ended: delivered through `after`
    /// (`delivered` entries), or failed with `error`.
    async fn settle_audit_export(
        &self,
        sink: &str,
        owner: &str,
        after: i64,
        delivered: i64,
        error: Option<String>,
    ) -> Result<(), StoreError>;

    /// `owner` lets go of the export `sink` (at a graceful stop).
    async fn release_audit_export(&self, sink: &str, owner: &str) -> Result<(), StoreError>;

    /// Every export's state.
    async fn audit_exports(&self) -> Result<Vec<ExportState>, StoreError>;
}

/// What a checkpoint's pending row holds.
pub(crate) fn checkpoint_source(checkpoint: &NewCheckpoint) -> String {
    serde_json::json!({
        "kind": crate::store::CHECKPOINT,
        "head_seq": checkpoint.seq,
        "head_hash": checkpoint.hash,
        "kid": checkpoint.kid,
        "jws": checkpoint.jws,
    })
    .to_string()
}

/// What a backend brings to [`AuditStore`]: its reads of the chain (from what is chained), and
/// how it makes sure what was written is chained before a read.
pub(crate) trait AuditBackend: super::backend::Backend {
    /// [`AuditStore::audit_entries`], from what is chained.
    fn read_audit(
        &self,
        after: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send;

    /// The last entry chained.
    fn read_audit_head(
        &self,
    ) -> impl Future<Output = Result<Option<AuditEntry>, StoreError>> + Send;

    /// [`AuditStore::audit_path`], from what is chained.
    fn read_audit_path(
        &self,
        call_id: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Option<AuditPath>, StoreError>> + Send;

    /// [`AuditStore::audit_exports`].
    fn read_audit_exports(
        &self,
    ) -> impl Future<Output = Result<Vec<ExportState>, StoreError>> + Send;

    /// Before the chain is read: what was written is committed, and chained.
    fn settle_audit(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move { self.write(super::queue::WriteOp::Ping).await.map(drop) }
    }
}

#[async_trait]
impl<B: AuditBackend> AuditStore for B {
    async fn audit_entries(&self, after: i64, limit: u32) -> Result<Vec<AuditEntry>, StoreError> {
        self.settle_audit().await?;
        self.read_audit(after, limit).await
    }

    async fn audit_head(&self) -> Result<Option<AuditEntry>, StoreError> {
        self.settle_audit().await?;
        self.read_audit_head().await
    }

    async fn audit_path(&self, call_id: &str, limit: u32) -> Result<Option<AuditPath>, StoreError> {
        self.settle_audit().await?;
        self.read_audit_path(call_id, limit).await
    }

    async fn append_checkpoint(&self, checkpoint: NewCheckpoint) -> Result<(), StoreError> {
        self.write(super::queue::WriteOp::Checkpoint(Box::new(checkpoint)))
            .await
            .map(drop)
    }

    async fn claim_audit_export(
        &self,
        sink: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        let now = super::Timestamp::now().0;
        let op = ExportOp::Claim {
            sink: sink.to_owned(),
            owner: owner.to_owned(),
            now,
            until: now.saturating_add(lease_ms),
        };
        self.write(super::queue::WriteOp::AuditExport(Box::new(op)))
            .await?
            .export()
    }

    async fn settle_audit_export(
        &self,
        sink: &str,
        owner: &str,
        after: i64,
        delivered: i64,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        let op = ExportOp::Settle {
            sink: sink.to_owned(),
            owner: owner.to_owned(),
            after,
            delivered,
            error,
            now: super::Timestamp::now().0,
        };
        self.write(super::queue::WriteOp::AuditExport(Box::new(op)))
            .await
            .map(drop)
    }

    async fn release_audit_export(&self, sink: &str, owner: &str) -> Result<(), StoreError> {
        let op = ExportOp::Release {
            sink: sink.to_owned(),
            owner: owner.to_owned(),
        };
        self.write(super::queue::WriteOp::AuditExport(Box::new(op)))
            .await
            .map(drop)
    }

    async fn audit_exports(&self) -> Result<Vec<ExportState>, StoreError> {
        self.read_audit_exports().await
    }
}
