//! Durable state: calls and the suspensions that park them until a person decides, the change
//! feed, the webhook outbox, the approval inbox's sessions, standing approvals, the keys of
//! decision links and of attestations, and upstream tools' pins.
//!
//! [`Store`] is the seam a backend implements, as traits by concern under it: [`CallStore`]
//! (calls, suspensions, idempotency, reconciliation), [`FeedStore`] (the change feed),
//! [`OutboxStore`] (webhook deliveries), [`SessionStore`] (inbox sessions), [`StandingStore`]
//! (standing approvals), [`LinkKeyStore`] (the keys that sign decision links),
//! [`SigningKeyStore`] (the keys that sign attestations) and [`PinStore`] (upstream tools'
//! pinned definitions); `Store` itself keeps what concerns the whole store (readiness, counts, shutdown). A caller holds an
//! `Arc<dyn Store>` (whose methods include every sub-trait's); code holding a concrete backend
//! brings the sub-trait it calls into scope. [`SqliteStore`] is the
//! embedded default; [`PostgresStore`] lets several replicas share one database.
//!
//! Several parts of the server write, not only the dispatcher (every change of a call, including
//! those an approver or an admin asks of it): the webhook outbox (`crate::feed::webhooks`: its
//! cursor, claims and settlements), the admin API (sending a failed delivery again), the inbox
//! (its sessions), the upstreams (their tools' pins), the signer of attestations (its keys) and
//! the store's upkeep in `crate::app` (pruning the feed and expired sessions).
//! Each of those writes is one write of the backend's one batching writer (`queue.rs` lists
//! them); on PostgreSQL, only the heartbeat (its lease, and its sweep of dead replicas' calls)
//! and the migrations write beside it. Every backend runs the same conformance suite
//! (`tests/store/`), and keeps these promises (paths below `src/store/`):
//!
//! - **a write returns only once it is committed** (durable), so an answer sent after it is true.
//!   SQLite: `sqlite/writer.rs`, each write in a savepoint of one transaction per batch, one
//!   fsync per batch (group commit), `synchronous = FULL` set in `sqlite/mod.rs`
//!   (`open_connection`). PostgreSQL: `postgres/writer/mod.rs` (`apply`), one transaction per
//!   batch with `synchronous_commit` on, answered after the commit.
//! - **of two resolutions of one token exactly one wins** (single-use approvals). SQLite:
//!   `sqlite/writes.rs` (`resolve`), an `UPDATE` conditional on a pending, unexpired suspension
//!   by the one writer; `unresolved` says why a token did not resolve. PostgreSQL:
//!   `postgres/writer/conditional.rs` (`resolve`), the same conditional `UPDATE`; a second
//!   resolution on any replica waits for the first's row lock and then changes nothing.
//! - **a call's pending suspension and its `suspended` status change together.** SQLite:
//!   `sqlite/writes.rs` (`insert`, `record_outcome`, `insert_suspension`) in the writer's one
//!   transaction. PostgreSQL: `postgres/writer/batch.rs` (`SuspensionRows`, written after
//!   `INSERT_CALLS` and `FINISH_CALLS` in the batch's transaction).
//! - **at most one call per (tool, idempotency key)**, across restarts and across servers sharing
//!   a database: a unique index with a conditional insert. SQLite: `sqlite/writes.rs` (`insert`)
//!   on the index of `migrations/sqlite/0002_idempotency_events_auth.sql`. PostgreSQL:
//!   `postgres/writer/batch.rs` (`INSERT_CALLS`, `ON CONFLICT DO NOTHING`; `existing` answers
//!   the call holding the key) on the index of `migrations/postgres/0001_schema.sql`.
//! - **an outcome only from the run that owns its call**, any other kept as `late_outcome`.
//!   SQLite: `sqlite/writes.rs` (`record_outcome`, conditional on `running` and the run's
//!   attempt). PostgreSQL: `postgres/writer/batch.rs` (`FINISH_CALLS`, conditional on the owner
//!   replica too; `late_outcome`).
//! - **an interrupted call is claimed once, a call needing reconciliation is settled once.**
//!   SQLite: `sqlite/writes.rs` (`rerun`, `reconcile`). PostgreSQL:
//!   `postgres/writer/conditional.rs` (`rerun`, `reconcile`): `UPDATE`s conditional on the
//!   status they leave.
//! - **every change of a call appends to its history in the same transaction.** SQLite:
//!   `sqlite/writes.rs` (`append_event`). PostgreSQL: the statement that changes the call appends
//!   to `calls.events` itself (`postgres/writer/`). Events are encoded by `record.rs`.
//! - **records written behind their answer** (`insert_behind`) are committed with the next
//!   batch, and read back by `call` and `list_calls` (read-your-writes): `queue.rs` (`Behind`),
//!   and `backend.rs` (`call`, `list_calls`: a `Ping` through the writer, committed in order,
//!   before reading again); kept while the store cannot take them (`Behind::keep`). SQLite:
//!   `sqlite/writer.rs` (`insert_read_records`; kept while a commit fails). PostgreSQL:
//!   `postgres/writer/mod.rs` (in the batch's `INSERT_CALLS`; kept while the database is
//!   unreachable), bounded in `postgres/mod.rs` (`insert_behind`).
//! - **the feed: every change but into `running`, none missed, none repeated, in commit order.**
//!   SQLite: `sqlite/writes.rs` (`append_feed`) in the writer's transaction, so rowid order is
//!   commit order; read by `sqlite/reads.rs` (`feed`). PostgreSQL: entries ordered by (xid,
//!   seq), read only below the horizon of feed writers: `postgres/feed.rs` (`horizon`,
//!   `BEGIN_WRITE`, taken first in `postgres/writer/mod.rs` `apply`), written by
//!   `postgres/writer/batch.rs` (`FeedRows`). Pruning raises the floor under which a cursor is
//!   expired: `sqlite/writes.rs`, `postgres/writer/conditional.rs` (`prune_feed`). Wake-ups: each
//!   writer bumps `feed_changes` after a commit that may have fed; PostgreSQL also `NOTIFY`s
//!   the other replicas (`postgres/feed.rs`, `listen`).
//! - **the outbox cursor moves by compare-and-set, with the deliveries it creates; a delivery has
//!   one claimant at a time.** SQLite: `sqlite/webhooks.rs` (`enqueue`, `claim` with
//!   `claimed_until`), which one writer cannot race. PostgreSQL: `postgres/webhooks.rs`, a
//!   conditional `UPDATE` under the cursor's row lock, and `FOR UPDATE SKIP LOCKED` claims.
//! - **a standing approval's call limit is never exceeded**, across replicas: a call takes one
//!   by a conditional `UPDATE` (`calls_left > 0`, unexpired, unrevoked) in the transaction that
//!   records it. SQLite: `sqlite/standing.rs`, by the one writer. PostgreSQL:
//!   `postgres/writer/standing.rs`, the row locked and re-checked (`standing.rs` has the types).
//! - **an expired inbox session is never answered**: `sqlite/sessions.rs`,
//!   `postgres/sessions.rs` (`find`, filtered by `expires_at`).
//! - **a rotation period has one decision-link key**, however many processes make it at once:
//!   `sqlite/link_keys.rs`, `postgres/link_keys.rs` (`make`, an insert that does nothing on the
//!   period's unique `epoch`, then a read of the period's key).
//! - **an upstream's first connection is one**, however many replicas connect at once: an
//!   insert that does nothing when the upstream's row exists, in the transaction that pins
//!   what the connection listed: `sqlite/pins.rs`, `postgres/pins.rs` (`connect`).
//! - **a call left running by a dead process is settled** (`interrupted` or
//!   `needs_reconciliation`, by effect). SQLite: `sqlite/recovery.rs` at open, safe because
//!   `sqlite/mod.rs` (`lock`) makes one server the file's only owner. PostgreSQL:
//!   `postgres/leases.rs`, the heartbeat's sweep of calls whose owner has no live lease.
//! - **every change of a call is on the audit chain, in the transaction that makes it, one chain
//!   with no gap.** SQLite: `sqlite/audit.rs` (`append`), called by each write of `writes.rs`
//!   that changes a call (`append_event*`, `insert`, `record_outcome`) and by the writer's
//!   records written behind, in the same savepoint. PostgreSQL: the triggers of
//!   `migrations/postgres/0017_audit.sql` capture each change into `audit_pending`, and
//!   `postgres/audit.rs` (`chain_final`) chains the rows below the feed's horizon, one chainer at
//!   a time. Both build entries with `audit/chain.rs`.
//! - **the schema is brought up to date at open**, and a newer one refused:
//!   `sqlite/migrations.rs` (`user_version`), `postgres/migrations.rs` (under an advisory lock);
//!   the SQL in `migrations/`.
//!
//! What is shared by every SQL backend is written once: turning calls and outcomes into rows in
//! `record.rs`, reading rows back into records in `rows.rs` (over each backend's one way of
//! reading a column); the write half of every trait (one queued write per method) and
//! read-your-writes in `backend.rs`.

mod audit;
mod backend;
mod calls;
pub mod config;
mod edits;
mod error;
mod feed;
mod link_keys;
mod outbox;
mod pins;
mod postgres;
mod queue;
mod record;
mod rows;
mod sessions;
mod signing_keys;
mod sqlite;
mod standing;
mod suspensions;
mod timestamp;

use async_trait::async_trait;

pub use audit::{
    AuditEntry, AuditPath, AuditStore, CHECKPOINT, ExportState, GENESIS, NewCheckpoint,
    canonical_json, link,
};
pub use calls::{
    Actor, CallError, CallEvent, CallFilter, CallPage, CallRecord, CallStatus, CallSummary,
    Inserted, NewCall, Outcome, Reconciled, Rerun, Settlement,
};
pub use edits::{CallEdit, EditMark};
pub use error::StoreError;
pub use feed::{
    ApprovalsSoFar, CHANGE_ACCEPTED, FEED_TYPES, FeedCursor, FeedEntry, FeedPage, FeedSubject,
    TOOL_CHANGED, UPSTREAM_FEED_TYPES, feed_types, is_feed_type,
};
pub use link_keys::{LinkKey, LinkKeyStore};
pub use outbox::{Delivery, DeliveryPage, DeliveryResult, DeliveryStatus, NewDelivery};
pub use pins::{NewTools, PinStore, ToolChangeNote, ToolPin};
pub use postgres::{PostgresOptions, PostgresStore, redact_url};
pub use sessions::InboxSession;
pub use signing_keys::{SigningKey, SigningKeyStore};
pub use sqlite::SqliteStore;
pub use standing::{
    NewStanding, STANDING_APPROVED, STANDING_GRANTED, StandingApproval, StandingStore, StandingUse,
};
pub use suspensions::{
    Approval, ApprovalPage, ApprovalState, ApprovalVote, RejectOption, Resolution, Resolved,
    SuspensionView,
};
pub use timestamp::Timestamp;

/// What the store holds now, counted: `GET /metrics` reads it at each scrape, so that every
/// replica on a shared database shows the same figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Pending, unexpired suspensions: what [`CallStore::pending_approvals`] would list.
    pub pending_approvals: u64,
    /// On a database shared by several processes, the replicas whose lease is live (this one's
    /// included); `None` on a backend of one process.
    pub live_replicas: Option<u64>,
}

/// Durable storage, whole: the four concerns below, and what concerns the store itself. See the
/// module docs for what a backend promises. `Arc<dyn Store>` is how the server holds one.
#[async_trait]
pub trait Store:
    CallStore
    + AuditStore
    + FeedStore
    + OutboxStore
    + SessionStore
    + StandingStore
    + LinkKeyStore
    + PinStore
    + SigningKeyStore
    + Send
    + Sync
    + 'static
{
    /// Checks the store can serve requests.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The pending, unexpired suspensions counted, and on a shared database the live replicas:
    /// one cheap read (a count over the index of pending suspensions), for each scrape of
    /// `GET /metrics`.
    async fn counts(&self) -> Result<StoreCounts, StoreError>;

    /// The backend's name, as `/readyz` shows it: `sqlite`, `postgres`.
    fn backend(&self) -> &'static str;

    /// This process's replica id, on a backend shared by several processes.
    fn replica(&self) -> Option<&str> {
        None
    }

    /// Commits what is written behind and lets go of the store, at a clean shutdown: a replica
    /// ends its lease, so that calls it leaves running are settled by another replica at once.
    async fn close(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    /// Whether quota buckets are kept here, shared by every replica (see
    /// `crate::dispatch::quota`): a bucket is its theoretical arrival time on the database's
    /// clock, paid and refunded by one statement each. A backend of one process keeps none,
    /// and the dispatcher keeps its buckets itself.
    fn shares_quotas(&self) -> bool {
        false
    }

    /// Pays one call of `interval_us` from the bucket of `principal` and `scope` (a tool's name,
    /// or empty for the principal's own), whose time may run at most `tolerance_us` ahead of
    /// now. Only asked of a store that [`Store::shares_quotas`].
    async fn spend_quota(
        &self,
        _principal: &str,
        _scope: &str,
        _interval_us: i64,
        _tolerance_us: i64,
    ) -> Result<QuotaSpend, StoreError> {
        Err(StoreError::Backend(
            "this store keeps no quota buckets".into(),
        ))
    }

    /// Gives one call of `interval_us` back to a bucket (a replay, which was no new call).
    async fn refund_quota(
        &self,
        _principal: &str,
        _scope: &str,
        _interval_us: i64,
    ) -> Result<(), StoreError> {
        Err(StoreError::Backend(
            "this store keeps no quota buckets".into(),
        ))
    }
}

/// Calls and their suspensions: recording intents and outcomes, one call per idempotency key,
/// resolving suspensions, re-running interrupted calls, settling those that need
/// reconciliation, and reading them back.
///
/// Writes that change a call take `actor`, the API key name of whoever caused the change, for
/// its event history.
#[async_trait]
pub trait CallStore: Send + Sync {
    /// Records a new call: `running` (its intent, before the tool runs) when `outcome` is
    /// `None`, or already finished with `outcome`. When a call with the
    /// same (tool, idempotency key) exists, writes nothing and returns it.
    async fn insert_call(
        &self,
        call: NewCall,
        outcome: Option<Outcome>,
    ) -> Result<Inserted, StoreError>;

    /// Records a finished call without waiting for the commit: for calls whose loss costs
    /// nothing (a `read` without an idempotency key, completed or failed; never a suspension).
    /// A later [`CallStore::call`] for it must find it (read-your-writes), and dropping the
    /// store must commit it. By default it is [`CallStore::insert_call`], waited for.
    async fn insert_behind(&self, call: NewCall, outcome: &Outcome) -> Result<(), StoreError> {
        self.insert_call(call, Some(outcome.clone()))
            .await
            .map(drop)
    }

    /// Records how the run of the call `call_id` that began at attempt `run` ended, after
    /// `attempts` runs of its tool in all. Conditional: the call must still be `running` under
    /// this run (on a shared database, owned by this replica too); `run: None` accepts any run
    /// of this process. Otherwise the outcome is appended to the call's history as
    /// `late_outcome` and refused with [`StoreError::LeaseLost`] (or
    /// [`StoreError::NotRunning`] when no such call exists).
    async fn finish_call(
        &self,
        call_id: &str,
        run: Option<u32>,
        attempts: u32,
        outcome: &Outcome,
    ) -> Result<(), StoreError>;

    /// Claims an `interrupted` call to run it again: it becomes `running` with one more
    /// attempt. `None` when it is not interrupted (someone else claimed it first).
    async fn rerun_interrupted(&self, call_id: &str) -> Result<Option<Rerun>, StoreError>;

    /// The call `call_id` with its events, if it exists.
    async fn call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError>;

    /// Whether a call of `tool` holds the idempotency key `key` (a request with it is a
    /// replay, answered from that call). A store that cannot tell says `false` (a spent quota
    /// then refuses replays too).
    async fn key_taken(&self, _tool: &str, _key: &str) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Up to `limit` calls matching `filter`, newest first, after the cursor `after`.
    async fn list_calls(
        &self,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<CallPage, StoreError>;

    /// Up to `limit` pending, unexpired suspensions after the cursor `after`, oldest first.
    async fn pending_approvals(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError> {
        self.pending_approvals_of(None, after, limit).await
    }

    /// [`CallStore::pending_approvals`], only those of the tool `tool` when it is given.
    async fn pending_approvals_of(
        &self,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError>;

    /// What `token` stands for, if it ever existed.
    async fn approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError>;

    /// Resolves the suspension `token`, if it is still pending and unexpired, as `actor` (a
    /// name).
    async fn resolve(
        &self,
        token: &str,
        resolution: Resolution,
        actor: Option<&str>,
    ) -> Result<Resolved, StoreError> {
        self.resolve_by(token, resolution, &Actor::named(actor))
            .await
    }

    /// [`CallStore::resolve`], by `actor`, its display name recorded with its name.
    async fn resolve_by(
        &self,
        token: &str,
        resolution: Resolution,
        actor: &Actor,
    ) -> Result<Resolved, StoreError>;

    /// Escalates the pending, unexpired suspensions of `tool` made at or before `created_by`
    /// that are not escalated yet, each once however many processes ask (its `escalated_at`, an
    /// `escalated` event, a `call.escalated` feed entry); the calls escalated.
    async fn escalate(&self, tool: &str, created_by: Timestamp) -> Result<Vec<String>, StoreError>;

    /// Settles a call that needs reconciliation (or an interrupted one). Settling it as failed
    /// releases its idempotency key: the effect did not happen, so a new request may make it.
    async fn reconcile(
        &self,
        call_id: &str,
        settlement: Settlement,
        actor: Option<&str>,
    ) -> Result<Reconciled, StoreError> {
        self.reconcile_by(call_id, settlement, &Actor::named(actor))
            .await
    }

    /// [`CallStore::reconcile`], by `actor`, its display name recorded with its name.
    async fn reconcile_by(
        &self,
        call_id: &str,
        settlement: Settlement,
        actor: &Actor,
    ) -> Result<Reconciled, StoreError>;
}

/// The change feed: every change of a call's status other than into `running`, in commit
/// order, for the waiters, the event stream and the webhook outbox to follow.
#[async_trait]
pub trait FeedStore: Send + Sync {
    /// Up to `limit` feed entries after `after`, oldest first: none missed, none repeated, on
    /// every backend, however many processes write at once. `None` reads from the start of
    /// what is retained. A cursor older than the retention is [`StoreError::CursorExpired`].
    async fn feed(&self, after: Option<&FeedCursor>, limit: u32) -> Result<FeedPage, StoreError>;

    /// The cursor after the newest entry now: reading after it returns only entries to come.
    async fn feed_head(&self) -> Result<FeedCursor, StoreError>;

    /// Drops feed entries older than `before`; a cursor they were after becomes expired.
    async fn prune_feed(&self, before: Timestamp) -> Result<u64, StoreError>;

    /// Changes whenever the feed may have grown: at once for a commit of this process, and on
    /// a shared database when another process says so (or on a short timer, in case that
    /// message was lost). Wake-ups may be spurious; read the feed to know.
    fn feed_changes(&self) -> tokio::sync::watch::Receiver<u64>;
}

/// The webhook outbox: its cursor along the feed, and the deliveries it creates, claims and
/// settles (on a shared database, each by one process at a time).
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Where the webhook outbox has read the feed up to; `None` before its first start.
    async fn webhook_cursor(&self) -> Result<Option<FeedCursor>, StoreError>;

    /// Creates `deliveries` and moves the webhook outbox's cursor from `from` to `to`, in one
    /// transaction, if the cursor is still `from` (of several processes, one moves it; the
    /// others get `false` and read again). Feed entries are durable before they are read, so
    /// a process killed after a change committed still delivers it: whoever moves the cursor
    /// next creates its deliveries.
    async fn enqueue_deliveries(
        &self,
        from: Option<&FeedCursor>,
        to: &FeedCursor,
        deliveries: Vec<NewDelivery>,
    ) -> Result<bool, StoreError>;

    /// Claims up to `limit` pending deliveries due now for `lease` (on a shared database, each
    /// by one process: a claimed delivery is not claimed again until its lease runs out, so a
    /// process killed mid-delivery loses none); counts the attempt.
    async fn claim_deliveries(
        &self,
        limit: u32,
        lease: std::time::Duration,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Records how an attempt of the delivery `id` ended.
    async fn settle_delivery(&self, id: i64, result: DeliveryResult) -> Result<(), StoreError>;

    /// The webhooks' deliveries, newest first, in `status` if given, after the cursor `after`.
    async fn list_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<DeliveryPage, StoreError>;

    /// The notification channels' deliveries (`[[notify]]`), as
    /// [`list_deliveries`](Self::list_deliveries) lists the webhooks'.
    async fn list_notifications(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<DeliveryPage, StoreError>;

    /// The notification channels' deliveries about the call `call_id`, oldest first, with
    /// their bodies and receipts (what a decision of the call updates).
    async fn call_notifications(&self, call_id: &str) -> Result<Vec<Delivery>, StoreError>;

    /// Makes the failed delivery `id` pending again, due now; `None` when no delivery has this
    /// id, the delivery as it is when it is not failed.
    async fn retry_delivery(&self, id: i64) -> Result<Option<Delivery>, StoreError>;

    /// The webhooks whose receiver answered `410 Gone` to their last attempt: disabled.
    async fn disabled_webhooks(&self) -> Result<Vec<String>, StoreError>;
}

/// The approval inbox's sessions, found by the hash of their id.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Records a new inbox session, once committed.
    async fn create_session(&self, session: &InboxSession) -> Result<(), StoreError>;

    /// The session whose id hashes to `id_sha256` (hex), if it exists and has not expired by
    /// `now`: an expired session is never answered, whether or not it was pruned yet.
    async fn session(
        &self,
        id_sha256: &str,
        now: Timestamp,
    ) -> Result<Option<InboxSession>, StoreError>;

    /// Ends the session whose id hashes to `id_sha256`; whether there was one.
    async fn delete_session(&self, id_sha256: &str) -> Result<bool, StoreError>;

    /// Drops the sessions expired by `now`; how many.
    async fn prune_sessions(&self, now: Timestamp) -> Result<u64, StoreError>;
}

/// What paying one call from a shared quota bucket came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaSpend {
    /// Paid: the call may run.
    Paid,
    /// The bucket cannot pay for `wait_us` microseconds more.
    Short {
        /// How long until it can.
        wait_us: i64,
    },
}
