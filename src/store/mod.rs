//! Durable state: calls, and the suspensions that park them until a person decides.
//!
//! [`Store`] is the seam a backend implements; [`SqliteStore`] is the embedded default. The
//! dispatcher (`crate::dispatch`) is the only writer, and it relies on these promises every
//! backend keeps:
//! - a write returns only once it is committed (durable), so an answer sent after it is true;
//! - resolving a suspension is conditional: of two resolutions of one token exactly one wins;
//! - a call's pending suspension and its `suspended` status change together, in one transaction;
//! - at most one call exists per (tool, idempotency key): a unique constraint with a conditional
//!   insert, so exactly-once holds across restarts and across servers sharing one database;
//! - every change of a call appends to its event history in the same transaction.
//!
//! Every backend runs the same conformance suite (`tests/store.rs`).
//!
//! Where the SQLite backend keeps each of them (paths below `src/store/`):
//! - durable writes, committed together (group commit): `sqlite/writer.rs`; `synchronous =
//!   FULL` is set in `sqlite/mod.rs` (`open_connection`);
//! - the conditional resolve: `sqlite/writes.rs` (`resolve`; `unresolved` says why a token did
//!   not resolve);
//! - a suspension with its call's `suspended` status: `sqlite/writes.rs` (`insert`,
//!   `record_outcome`), in the writer's one transaction;
//! - one call per (tool, idempotency key): `sqlite/writes.rs` (`insert`), on the unique index of
//!   `migrations/sqlite/0002_idempotency_events_auth.sql`;
//! - the event history: `sqlite/writes.rs` (`append_event`), each event encoded by `record.rs`;
//! - records written behind their answer (`insert_behind`): `sqlite/writer.rs` (`Behind`,
//!   `insert_read_records`); read-your-writes for them in `sqlite/mod.rs` (`call`);
//! - the reads: `sqlite/reads.rs`;
//! - crash recovery at open: `sqlite/recovery.rs`, safe because `sqlite/mod.rs` (`lock`) makes
//!   one server the file's only owner;
//! - the webhook outbox (its cursor moved together with the deliveries it creates, claims,
//!   settlements): `sqlite/webhooks.rs`, its writes run by the writer like every other;
//! - migrations: `sqlite/migrations.rs`, the SQL in `migrations/sqlite/`.
//!
//! What is not SQLite's, turning calls and outcomes into rows and rows back into records, is in
//! `record.rs`, for every SQL backend to share.

pub mod config;
mod postgres;
mod queue;
mod record;
mod sqlite;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::contract::meta::Effect;

pub use postgres::{PostgresOptions, PostgresStore, redact_url};
pub use sqlite::SqliteStore;

/// A point in time, in Unix milliseconds; serialized as RFC 3339 (UTC, milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
    }

    fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(u64::try_from(self.0).unwrap_or(0))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        humantime::format_rfc3339_millis(self.to_system_time()).fmt(f)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Where a call is in its lifecycle.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The tool is running (or was, when the server stopped).
    Running,
    /// Waiting for a person to approve or reject.
    Suspended,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// A person rejected it; the tool did not run again.
    Rejected,
    /// A `read` or `idempotent` call was running when the server stopped; the same request
    /// (same idempotency key) runs it again.
    Interrupted,
    /// A `write` call was running when the server stopped, or timed out: its effect may or may
    /// not have happened. Never re-run by itself; an approver settles it.
    NeedsReconciliation,
    /// Its suspension expired before anyone approved or rejected it.
    Expired,
}

impl CallStatus {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Running => "running",
            CallStatus::Suspended => "suspended",
            CallStatus::Completed => "completed",
            CallStatus::Failed => "failed",
            CallStatus::Rejected => "rejected",
            CallStatus::Interrupted => "interrupted",
            CallStatus::NeedsReconciliation => "needs_reconciliation",
            CallStatus::Expired => "expired",
        }
    }

    /// The status named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => CallStatus::Running,
            "suspended" => CallStatus::Suspended,
            "completed" => CallStatus::Completed,
            "failed" => CallStatus::Failed,
            "rejected" => CallStatus::Rejected,
            "interrupted" => CallStatus::Interrupted,
            "needs_reconciliation" => CallStatus::NeedsReconciliation,
            "expired" => CallStatus::Expired,
            _ => return None,
        })
    }
}

/// Why a call failed or was rejected, as recorded and shown.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct CallError {
    /// A stable token, such as `tool_failed` or `rejected`.
    pub code: String,
    /// A sentence for people.
    pub message: String,
    /// Structured evidence, when there is some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

impl CallError {
    /// An error without details.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CallError {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }
}

/// A suspension as a call record shows it while it is pending.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SuspensionView {
    /// The single-use token an approver resolves it with.
    pub token: String,
    /// What the approver is asked.
    pub reason: String,
    /// The JSON Schema the approver's input must satisfy.
    pub input_schema: Value,
    /// When the call was suspended.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When the suspension expires, if it does.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
}

/// One entry of a call's append-only history.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CallEvent {
    /// When it happened.
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// What happened: `created`, `suspended`, `approved`, `rejected`, `completed_externally`,
    /// `redispatched`, `completed`, `failed`, `interrupted`, `needs_reconciliation`,
    /// `reconciled`, `expired`. A finished run's event carries its `attempts` (retries
    /// included) and, when it failed, the error (`tool_timeout` for a timeout).
    pub kind: String,
    /// The API key name of whoever caused it, when a client or a person did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Evidence, such as an error or the number of attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// Everything recorded about one call.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CallRecord {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// What the tool does to the world.
    pub effect: Effect,
    /// Where the call is in its lifecycle.
    pub status: CallStatus,
    /// The API key name that made the call; `null` when auth is off.
    pub caller: Option<String>,
    /// The idempotency key the call ran under, if any.
    pub idempotency_key: Option<String>,
    /// The input it was called with.
    pub input: Value,
    /// The output, once completed.
    pub output: Option<Value>,
    /// Why it failed or was rejected.
    pub error: Option<CallError>,
    /// The pending suspension, while suspended.
    pub suspension: Option<SuspensionView>,
    /// When the call was made.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When its record last changed.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// How many times its tool has run (an approval or a retry runs it again).
    pub attempts: u32,
    /// What happened to the call, oldest first. Left out of lists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<CallEvent>,
}

/// A call about to be recorded.
#[derive(Debug, Clone)]
pub struct NewCall {
    /// A fresh call id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// What the tool does to the world.
    pub effect: Effect,
    /// The API key name making the call, when auth is on.
    pub caller: Option<String>,
    /// The input, already validated.
    pub input: Value,
    /// The idempotency key: the tool's own, or one derived from the client's header. At most
    /// one call exists per (tool, key).
    pub idempotency_key: Option<String>,
    /// How many times the tool has run: 1 for an intent recorded before the first run.
    pub attempts: u32,
    /// When the call was made.
    pub created_at: Timestamp,
}

/// What inserting a call did.
#[derive(Debug, Clone, PartialEq)]
pub enum Inserted {
    /// The call is new.
    New,
    /// A call with the same (tool, idempotency key) exists; nothing was written.
    Existing(Box<CallRecord>),
}

/// How an attempt ended, as recorded.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The call completed with this output.
    Completed {
        /// The tool's output.
        output: Value,
    },
    /// The call failed.
    Failed {
        /// Why.
        error: CallError,
    },
    /// The call waits for a person; the suspension is created with it.
    Suspended {
        /// A fresh single-use token.
        token: String,
        /// What the approver is asked.
        reason: String,
        /// The JSON Schema the approver's input must satisfy.
        input_schema: Value,
        /// When the suspension expires, if it does.
        expires_at: Option<Timestamp>,
    },
    /// The effect of a `write` call may or may not have happened (it timed out): a person must
    /// settle it.
    NeedsReconciliation {
        /// Why.
        error: CallError,
    },
    /// The run ended before its tool ran (its store could not be reached): the same request
    /// runs it again.
    Interrupted {
        /// Why.
        reason: String,
    },
}

/// A pending suspension, as the approvals queue shows it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Approval {
    /// The token to approve or reject it with.
    pub token: String,
    /// The suspended call.
    pub call_id: String,
    /// The tool the call is for.
    pub tool: String,
    /// The API key name that made the call; `null` when auth is off.
    pub caller: Option<String>,
    /// What the approver is asked.
    pub reason: String,
    /// The JSON Schema the approver's input must satisfy.
    pub input_schema: Value,
    /// When the call was suspended.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When it expires, if it does.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    /// The call's input; present when one approval is read by its token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

/// One page of the approvals queue.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalPage {
    /// Oldest first.
    pub approvals: Vec<Approval>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<i64>,
}

/// A person's session of the approval inbox, as stored. The store never sees the session id
/// itself (it lives in the person's cookie), only its SHA-256: a copy of the database lets no
/// one act as anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxSession {
    /// The SHA-256 of the session id, in hex: what the session is found by.
    pub id_sha256: String,
    /// The name of the API key the person signed in with; `None` when auth is off.
    pub key_name: Option<String>,
    /// That key's role when they signed in (`approver`, `admin`).
    pub role: String,
    /// A fingerprint of that key (a domain-separated SHA-256 of its token's hash), so that a
    /// session ends when its key is removed or given a new token, even under the same name.
    pub key_fingerprint: Option<String>,
    /// When the person signed in.
    pub created_at: Timestamp,
    /// When the session ends by itself.
    pub expires_at: Timestamp,
}

/// What the store holds now, counted: `GET /metrics` reads it at each scrape, so that every
/// replica on a shared database shows the same figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Pending, unexpired suspensions: what [`Store::pending_approvals`] would list.
    pub pending_approvals: u64,
    /// On a database shared by several processes, the replicas whose lease is live (this one's
    /// included); `None` on a backend of one process.
    pub live_replicas: Option<u64>,
}

/// What a token currently stands for.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalState {
    /// Still waiting, with the call's input.
    Pending(Approval),
    /// Already approved, rejected or completed; the call as it is now.
    Resolved(CallRecord),
    /// It expired before anyone resolved it; the call as it is now.
    Expired(CallRecord),
}

/// A person's decision on a suspension.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// Run the tool again with this (validated) input as `ctx.resume()`.
    Approve {
        /// The approver's input.
        resume_input: Value,
    },
    /// Finish the call as rejected; the tool does not run.
    Reject {
        /// The approver's reason.
        reason: String,
    },
    /// Finish the call as completed with work done outside the server; the tool does not run.
    Complete {
        /// The output, already checked against the tool's output schema.
        output: Value,
    },
    /// Record that a suspension found expired has expired (the call becomes `expired`).
    Expire,
}

/// What resolving a token did.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// Approved: the call is `running` again, its attempts counted; it must be re-dispatched.
    Approved(CallRecord),
    /// Rejected: the call is `rejected`.
    Rejected(CallRecord),
    /// Completed externally: the call is `completed`.
    Completed(CallRecord),
    /// Someone resolved it first; the call as it is now.
    AlreadyResolved(CallRecord),
    /// It had expired: now recorded as such; the call as it is now.
    Expired(CallRecord),
    /// No suspension ever had this token.
    UnknownToken,
}

/// A failure of the store itself (not of a call).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed (I/O, locking, a closed connection).
    #[error("store backend failed: {0}")]
    Backend(String),
    /// Stored data could not be read back.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database cannot be reached (down, restarting, cut off) or did not answer in time.
    /// Nothing was acknowledged; the request may be retried.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// An outcome was recorded for a call that does not exist.
    #[error("call {call_id} is not running")]
    NotRunning {
        /// The call.
        call_id: String,
    },
    /// An outcome came from a run that no longer owns its call: its replica lost its lease and
    /// the call was settled meanwhile, or the call moved on. The outcome was not recorded as
    /// the call's, but appended to its history as a `late_outcome` event; the call as it is now.
    #[error("the run no longer owns call {}", .0.call_id)]
    LeaseLost(Box<CallRecord>),
    /// Another process holds the store.
    #[error("the store at {0} is in use by another process")]
    Locked(String),
    /// A feed cursor older than the feed's retention: entries after it were pruned.
    #[error("the feed cursor is older than the feed's retention")]
    CursorExpired,
    /// A feed cursor this backend did not write.
    #[error("not a feed cursor: {0}")]
    BadCursor(String),
    /// The store's schema is newer than this build understands.
    #[error("the database schema is version {found}, newer than this build's {supported}")]
    SchemaTooNew {
        /// The version found.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
}

/// An interrupted call claimed for another run.
#[derive(Debug, Clone, PartialEq)]
pub struct Rerun {
    /// The call, now `running`.
    pub call: CallRecord,
    /// The approver's input, when the interrupted run was the re-dispatch of an approval: the
    /// new run resumes with it rather than asking again.
    pub resume_input: Option<Value>,
}

/// How a call needing reconciliation is settled.
#[derive(Debug, Clone)]
pub enum Settlement {
    /// The effect happened, with this output (already checked against the output schema).
    Output(Value),
    /// The effect did not happen, for this reason.
    Error(String),
}

/// What settling a call did.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// Settled; the call as it is now.
    Settled(CallRecord),
    /// The call does not need reconciliation; the call as it is now.
    NotNeeded(CallRecord),
    /// No call has this id.
    UnknownCall,
}

/// A position in the change feed, as text: opaque to clients, which hand it back to read on
/// from it (an SSE `id:`, `?after=`). Each backend writes and parses its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FeedCursor(pub String);

impl std::fmt::Display for FeedCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One change of a call, as the change feed keeps it: every change of a call's status other
/// than into `running`, in commit order. A plain read without an idempotency key that finishes
/// within its request has none.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEntry {
    /// Its position: reading after it returns the entries that follow.
    pub cursor: FeedCursor,
    /// `call.<status>`: `call.suspended`, `call.completed`, `call.failed`, `call.rejected`,
    /// `call.expired`, `call.interrupted`, `call.needs_reconciliation`.
    pub kind: String,
    /// When the change happened.
    pub at: Timestamp,
    /// The call as the change left it (its status, attempts and `updated_at` as of the entry).
    pub call: CallSummary,
    /// For `call.suspended`: the suspension it made.
    pub suspension: Option<SuspensionView>,
}

/// The types of feed entries, as `FeedEntry::kind` names them.
pub const FEED_TYPES: [&str; 7] = [
    "call.suspended",
    "call.completed",
    "call.failed",
    "call.rejected",
    "call.expired",
    "call.interrupted",
    "call.needs_reconciliation",
];

/// A page of the change feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedPage {
    /// The entries after the cursor asked for, oldest first.
    pub entries: Vec<FeedEntry>,
    /// Where to read on from: the last entry's cursor, or the one asked for if none.
    pub cursor: FeedCursor,
    /// Entries after these exist but are not final yet (on a shared database, a transaction
    /// older than theirs is still in flight): read again shortly rather than wait for a wake-up.
    pub settling: bool,
}

/// A webhook delivery to create: one message for one webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    /// The webhook, by its URL (its identity in the store).
    pub webhook: String,
    /// The message id, the same on every attempt (`webhook-id`).
    pub message_id: String,
    /// The feed entry type it carries (`call.suspended`, ...).
    pub kind: String,
    /// The call it is about.
    pub call_id: String,
    /// The request body, exactly as it is signed and sent on every attempt.
    pub body: String,
}

/// Where a delivery stands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not delivered yet; it will be (again) at `next_attempt_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Given up: attempts ran out, the receiver refused it for good, or the webhook is
    /// disabled. An admin may send it again.
    Failed,
}

impl DeliveryStatus {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    /// The status named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => DeliveryStatus::Pending,
            "delivered" => DeliveryStatus::Delivered,
            "failed" => DeliveryStatus::Failed,
            _ => return None,
        })
    }
}

/// A webhook delivery, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    /// Its id.
    pub id: i64,
    /// The webhook's URL.
    pub webhook: String,
    /// The message id (`webhook-id`), the same on every attempt.
    pub message_id: String,
    /// The feed entry type it carries.
    #[serde(rename = "type")]
    pub kind: String,
    /// The call it is about.
    pub call_id: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made.
    pub attempts: u32,
    /// The HTTP status of the last attempt, when the receiver answered.
    pub last_status: Option<u16>,
    /// Why the last attempt failed, when it did.
    pub last_error: Option<String>,
    /// When it is tried next, while pending.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_attempt_at: Option<Timestamp>,
    /// When it was created.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// The request body (not shown in lists).
    #[serde(skip)]
    pub body: String,
}

/// How an attempt to deliver ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryResult {
    /// The receiver answered 2xx with this status.
    Delivered {
        /// The HTTP status.
        status: u16,
    },
    /// Try again at `at`.
    Retry {
        /// When.
        at: Timestamp,
        /// The receiver's status, when it answered.
        status: Option<u16>,
        /// Why it failed.
        error: String,
    },
    /// Give up.
    Failed {
        /// The receiver's status, when it answered.
        status: Option<u16>,
        /// Why.
        error: String,
    },
}

/// A page of deliveries, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryPage {
    /// The deliveries.
    pub deliveries: Vec<Delivery>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<i64>,
}

/// Which calls to list.
#[derive(Debug, Clone, Default)]
pub struct CallFilter {
    /// Only calls in this status.
    pub status: Option<CallStatus>,
    /// Only calls of this tool.
    pub tool: Option<String>,
}

/// A call as a list shows it: its state, without its input, output and history (which can be
/// large; read the call for them).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CallSummary {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// What the tool does to the world.
    pub effect: Effect,
    /// Where the call is in its lifecycle.
    pub status: CallStatus,
    /// The API key name that made the call.
    pub caller: Option<String>,
    /// The idempotency key the call ran under, if any.
    pub idempotency_key: Option<String>,
    /// When the call was made.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When its record last changed.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// How many times its tool has run.
    pub attempts: u32,
}

/// One page of calls, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPage {
    /// The calls.
    pub calls: Vec<CallSummary>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<i64>,
}

/// Durable storage of calls and suspensions. See the module docs for what a backend promises.
///
/// Writes that change a call take `actor`, the API key name of whoever caused the change, for
/// its event history.
#[async_trait]
pub trait Store: Send + Sync + 'static {
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
    /// A later [`Store::call`] for it must find it (read-your-writes), and dropping the store
    /// must commit it. By default it is [`Store::insert_call`], waited for.
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

    /// [`Store::pending_approvals`], only those of the tool `tool` when it is given.
    async fn pending_approvals_of(
        &self,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError>;

    /// The pending, unexpired suspensions counted, and on a shared database the live replicas:
    /// one cheap read (a count over the index of pending suspensions), for each scrape of
    /// `GET /metrics`.
    async fn counts(&self) -> Result<StoreCounts, StoreError>;

    /// What `token` stands for, if it ever existed.
    async fn approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError>;

    /// Resolves the suspension `token`, if it is still pending and unexpired.
    async fn resolve(
        &self,
        token: &str,
        resolution: Resolution,
        actor: Option<&str>,
    ) -> Result<Resolved, StoreError>;

    /// Settles a call that needs reconciliation (or an interrupted one). Settling it as failed
    /// releases its idempotency key: the effect did not happen, so a new request may make it.
    async fn reconcile(
        &self,
        call_id: &str,
        settlement: Settlement,
        actor: Option<&str>,
    ) -> Result<Reconciled, StoreError>;

    /// Checks the store can serve requests.
    async fn ping(&self) -> Result<(), StoreError>;

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

    /// Deliveries, newest first, in `status` if given, after the cursor `after`.
    async fn list_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<DeliveryPage, StoreError>;

    /// Makes the failed delivery `id` pending again, due now; `None` when no delivery has this
    /// id, the delivery as it is when it is not failed.
    async fn retry_delivery(&self, id: i64) -> Result<Option<Delivery>, StoreError>;

    /// The webhooks whose receiver answered `410 Gone` to their last attempt: disabled.
    async fn disabled_webhooks(&self) -> Result<Vec<String>, StoreError>;

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
}
