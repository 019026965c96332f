//! The queue in front of a backend's batching writer: the writes it applies, what each
//! answers, and the records written behind their answer that wait to go with the next commit.
//!
//! Both backends batch the same way (one writer takes every write waiting, applies them in one
//! transaction, commits once, then answers each), so they share these types; each backend's
//! writer (`sqlite/writer.rs`, `postgres/writer/`) turns them into its own statements.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use super::record::{Prepared, PreparedCall};
use super::{
    Actor, Delivery, DeliveryResult, FeedCursor, InboxSession, Inserted, NewCall, NewDelivery,
    Outcome, Reconciled, Rerun, Resolution, Resolved, Settlement, StoreError,
};

/// How long records written behind the answer wait for company before the writer commits them
/// (unless a write someone waits for comes first and takes them along). The price of an fsync is
/// then paid by every record of that window, not by a handful each. A crash loses at most this
/// window of `read` records, which have no effect to lose; a clean shutdown loses none.
pub(crate) const BEHIND_WINDOW: Duration = Duration::from_millis(10);

/// Records written behind that make the writer commit at once instead of waiting out the window.
pub(crate) const BEHIND_FULL: usize = 2048;

/// Records written behind that may wait at most before callers wait for the writer.
pub(crate) const BEHIND_MAX: usize = 4 * BEHIND_FULL;

/// The most read records written behind kept while the store cannot take them (a database that
/// cannot be reached, a full disk); past it, the oldest are dropped (and logged). They have no
/// effect to lose; memory does.
pub(crate) const MAX_BEHIND_KEPT: usize = 100_000;

/// How often read records kept while the store cannot take them are tried again.
pub(crate) const RETRY_KEPT: Duration = Duration::from_secs(1);

/// What a backend's writer is sent.
#[allow(
    clippy::large_enum_variant,
    reason = "moved once into the channel's slots; a box would cost an allocation per write"
)]
pub(crate) enum Msg {
    /// A write someone waits for.
    Write(Job),
    /// Records written behind are waiting: commit them within [`BEHIND_WINDOW`].
    BehindWaiting,
    /// [`BEHIND_FULL`] records written behind are waiting: commit them now.
    BehindFull,
}

/// Records written behind the answer, not yet taken by the writer.
#[derive(Default)]
pub(crate) struct Behind {
    pub(crate) records: Vec<(PreparedCall, Prepared)>,
    /// `BehindWaiting` was sent for these records (the writer resets it when it takes them).
    signalled: bool,
}

impl Behind {
    /// Adds a record written behind, and says what the writer must be told, if anything: that
    /// records wait (once per window), or that they are [`BEHIND_FULL`].
    pub(crate) fn push(this: &Mutex<Behind>, record: (PreparedCall, Prepared)) -> Option<Msg> {
        Behind::push_counted(this, record).0
    }

    /// [`Behind::push`], and whether more than [`BEHIND_MAX`] records now wait: a writer that
    /// falls that far behind makes its callers wait for it (see the PostgreSQL store).
    pub(crate) fn push_counted(
        this: &Mutex<Behind>,
        record: (PreparedCall, Prepared),
    ) -> (Option<Msg>, bool) {
        let mut behind = this.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        behind.records.push(record);
        let over = behind.records.len() > BEHIND_MAX;
        let msg = if behind.records.len() == BEHIND_FULL {
            Some(Msg::BehindFull)
        } else if !behind.signalled {
            behind.signalled = true;
            Some(Msg::BehindWaiting)
        } else {
            None
        };
        (msg, over)
    }

    /// Puts read records whose batch could not be written back in front of the queue, keeping
    /// at most [`MAX_BEHIND_KEPT`] (the oldest are dropped, and logged).
    pub(crate) fn keep(this: &Mutex<Behind>, mut records: Vec<(PreparedCall, Prepared)>) {
        if records.is_empty() {
            return;
        }
        let mut behind = this.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        records.append(&mut behind.records);
        if records.len() > MAX_BEHIND_KEPT {
            let lost = records.len() - MAX_BEHIND_KEPT;
            records.drain(..lost);
            tracing::error!(
                lost,
                "read call records dropped while the store cannot take them"
            );
        }
        behind.records = records;
    }

    pub(crate) fn take(this: &Mutex<Behind>) -> Vec<(PreparedCall, Prepared)> {
        let mut behind = this.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        behind.signalled = false;
        std::mem::take(&mut behind.records)
    }
}

/// One write and where its result goes once committed.
pub(crate) struct Job {
    pub(crate) op: WriteOp,
    pub(crate) reply: Waiter,
}

/// Who waits for a write: its result's way back, and the span of its commit (none unless
/// traces are exported), which is told the size of the batch the write was committed in.
pub(crate) struct Waiter {
    pub(crate) reply: oneshot::Sender<Result<Reply, StoreError>>,
    pub(crate) span: tracing::Span,
}

/// What a writer commits at once: the writes it took from its queue, and the records written
/// behind that wait.
pub(crate) struct Batch {
    pub(crate) ops: Vec<WriteOp>,
    /// The callers of `ops`, in their order.
    pub(crate) replies: Vec<Waiter>,
    pub(crate) records: Vec<(PreparedCall, Prepared)>,
    /// Whether a write of the batch may grow the feed.
    pub(crate) fed: bool,
}

impl Batch {
    /// `jobs` and the records written behind now; `None` when there are neither.
    pub(crate) fn take(jobs: Vec<Job>, behind: &Mutex<Behind>) -> Option<Self> {
        // Taken after the writes: a read-your-writes probe (`Ping`) commits every record
        // written behind before it was sent.
        let records = Behind::take(behind);
        if jobs.is_empty() && records.is_empty() {
            return None;
        }
        let (ops, replies): (Vec<WriteOp>, Vec<_>) =
            jobs.into_iter().map(|job| (job.op, job.reply)).unzip();
        let fed = ops.iter().any(WriteOp::may_feed);
        Some(Batch {
            ops,
            replies,
            records,
            fed,
        })
    }
}

/// Answers the callers of a batch's writes, each with its write's result; `writes` is the
/// batch's size, records written behind included.
pub(crate) fn answer(replies: Vec<Waiter>, results: Vec<Result<Reply, StoreError>>, writes: usize) {
    for (Waiter { reply, span }, result) in replies.into_iter().zip(results) {
        if !span.is_none() {
            span.record("toolgate.store.batch_size", writes);
        }
        // The caller went away: a failure must still be heard.
        if let Err(Err(err)) = reply.send(result) {
            tracing::error!(error = %err, "a write whose caller went away failed");
        }
    }
}

/// A write the writer applies, one of the Store trait's.
pub(crate) enum WriteOp {
    Insert(PreparedCall, Option<Prepared>),
    /// The outcome of the run of `call_id` that began at attempt `run` (`None`: any run of this
    /// process).
    Finish {
        call_id: String,
        run: Option<u32>,
        outcome: Prepared,
    },
    Rerun(String),
    Resolve(String, Resolution, Actor),
    Reconcile(String, Settlement, Actor),
    /// Drops the feed entries older than this time (Unix ms).
    PruneFeed(i64),
    /// Escalates the pending suspensions of `tool` made at or before `created_by` (Unix ms).
    Escalate {
        tool: String,
        created_by: i64,
    },
    /// Creates deliveries and moves the webhook outbox's cursor, if it is still `from`.
    EnqueueDeliveries {
        from: Option<String>,
        to: String,
        deliveries: Vec<NewDelivery>,
    },
    /// Claims up to `limit` due deliveries for `lease_ms` milliseconds.
    ClaimDeliveries {
        limit: u32,
        lease_ms: i64,
    },
    /// Records how an attempt of the delivery ended.
    SettleDelivery(i64, DeliveryResult),
    /// Makes the failed delivery pending again.
    RetryDelivery(i64),
    /// Records an inbox session.
    CreateSession(Box<InboxSession>),
    /// Ends the inbox session whose id hashes to this (hex).
    DeleteSession(String),
    /// Drops the inbox sessions expired by this time (Unix ms).
    PruneSessions(i64),
    /// A standing approval's write (`standing.rs`).
    Standing(Box<super::standing::StandingOp>),
    /// Stores a decision links' key for its period, unless the period has one.
    LinkKey(Box<super::LinkKey>),
    /// Drops the decision links' keys retired by this time (Unix ms).
    PruneLinkKeys(i64),
    /// A pin of upstream tools' write or read (`pins.rs`).
    Pins(Box<super::pins::PinOp>),
    /// Stores an attestations' signing key for its period, unless the period has one.
    SigningKey(Box<super::SigningKey>),
    /// Drops the signing keys retired by this time (Unix ms).
    PruneSigningKeys(i64),
    /// Appends a checkpoint to the audit chain, and keeps the key that signed it.
    Checkpoint(Box<super::NewCheckpoint>),
    /// An export of the audit chain claimed, or its attempt settled.
    AuditExport(Box<super::audit::ExportOp>),
    /// Nothing: proves the writer thread is alive and can take the write lock.
    Ping,
}

/// What a write answers, by the kind of write.
pub(crate) enum Reply {
    Done,
    /// A finish refused: the run no longer owns the call. Its outcome was appended to the
    /// call's history as `late_outcome`; the call as it is now.
    Late(Box<super::CallRecord>),
    Inserted(Inserted),
    Rerun(Option<Box<Rerun>>),
    Resolved(Box<Resolved>),
    Reconciled(Box<Reconciled>),
    /// How many rows were dropped: feed entries, or inbox sessions.
    Pruned(u64),
    /// The calls whose suspensions were escalated.
    Escalated(Vec<String>),
    /// Whether the webhook outbox's cursor moved (and the deliveries were created).
    Enqueued(bool),
    /// The deliveries claimed, oldest first.
    Claimed(Vec<Delivery>),
    /// The delivery as it is now, if it exists.
    Delivery(Option<Box<Delivery>>),
    /// What a standing approval's write answers (boxed: every other reply stays small).
    Standing(Box<super::standing::StandingReply>),
    /// The key of a period, as stored.
    LinkKey(Box<super::LinkKey>),
    /// An upstream's pins, as stored.
    Pins(Vec<super::ToolPin>),
    /// The signing key of a period, as stored.
    SigningKey(Box<super::SigningKey>),
    /// Where a claimed export of the audit chain stands; `None`: another process has it.
    Export(Option<i64>),
}

impl WriteOp {
    /// What kind of write it is, as the span of its commit is named.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            WriteOp::Insert(..) => "insert",
            WriteOp::Finish { .. } => "finish",
            WriteOp::Rerun(_) => "rerun",
            WriteOp::Resolve(..) => "resolve",
            WriteOp::Reconcile(..) => "reconcile",
            WriteOp::PruneFeed(_) => "prune_feed",
            WriteOp::Escalate { .. } => "escalate",
            WriteOp::EnqueueDeliveries { .. } => "enqueue_deliveries",
            WriteOp::ClaimDeliveries { .. } => "claim_deliveries",
            WriteOp::SettleDelivery(..) => "settle_delivery",
            WriteOp::RetryDelivery(_) => "retry_delivery",
            WriteOp::CreateSession(_) => "create_session",
            WriteOp::DeleteSession(_) => "delete_session",
            WriteOp::PruneSessions(_) => "prune_sessions",
            WriteOp::Standing(_) => "standing",
            WriteOp::LinkKey(_) => "link_key",
            WriteOp::PruneLinkKeys(_) => "prune_link_keys",
            WriteOp::Pins(_) => "pins",
            WriteOp::SigningKey(_) => "signing_key",
            WriteOp::PruneSigningKeys(_) => "prune_signing_keys",
            WriteOp::Checkpoint(_) => "audit_checkpoint",
            WriteOp::AuditExport(_) => "audit_export",
            WriteOp::Ping => "ping",
        }
    }

    /// Whether applying it may append to the change feed (so that a commit wakes the feed's
    /// readers): any change of a call's status other than into `running`.
    pub(crate) fn may_feed(&self) -> bool {
        match self {
            WriteOp::Insert(_, outcome) => outcome.is_some(),
            WriteOp::Finish { .. }
            | WriteOp::Resolve(..)
            | WriteOp::Reconcile(..)
            | WriteOp::Escalate { .. } => true,
            // A change told or accepted is a feed entry (rare: a tool list read, an accept).
            WriteOp::Pins(op) => !matches!(**op, super::pins::PinOp::Connect { .. }),
            WriteOp::Standing(op) => matches!(
                **op,
                super::standing::StandingOp::Approve { .. }
                    | super::standing::StandingOp::InsertCall(..)
            ),
            WriteOp::Rerun(_)
            | WriteOp::PruneFeed(_)
            | WriteOp::EnqueueDeliveries { .. }
            | WriteOp::ClaimDeliveries { .. }
            | WriteOp::SettleDelivery(..)
            | WriteOp::RetryDelivery(_)
            | WriteOp::CreateSession(_)
            | WriteOp::DeleteSession(_)
            | WriteOp::PruneSessions(_)
            | WriteOp::LinkKey(_)
            | WriteOp::PruneLinkKeys(_)
            | WriteOp::SigningKey(_)
            | WriteOp::PruneSigningKeys(_)
            | WriteOp::Checkpoint(_)
            | WriteOp::AuditExport(_)
            | WriteOp::Ping => false,
        }
    }

    /// Inserting `call`, running or already finished with `outcome`.
    pub(crate) fn insert(call: NewCall, outcome: Option<Outcome>) -> Result<Self, StoreError> {
        let attempts = call.attempts;
        let outcome = outcome.map(|o| Prepared::new(&o, attempts)).transpose()?;
        Ok(WriteOp::Insert(PreparedCall::new(call), outcome))
    }

    /// Recording how the run of `call_id` that began at attempt `run` ended.
    pub(crate) fn finish(
        call_id: &str,
        run: Option<u32>,
        attempts: u32,
        outcome: &Outcome,
    ) -> Result<Self, StoreError> {
        Ok(WriteOp::Finish {
            call_id: call_id.to_owned(),
            run,
            outcome: Prepared::new(outcome, attempts)?,
        })
    }

    /// Resolving the suspension `token`.
    pub(crate) fn resolve(token: &str, resolution: Resolution, actor: &Actor) -> Self {
        WriteOp::Resolve(token.to_owned(), resolution, actor.clone())
    }

    /// Settling the call `call_id`.
    pub(crate) fn reconcile(call_id: &str, settlement: Settlement, actor: &Actor) -> Self {
        WriteOp::Reconcile(call_id.to_owned(), settlement, actor.clone())
    }

    /// Creating `deliveries` and moving the webhook outbox's cursor from `from` to `to`.
    pub(crate) fn enqueue_deliveries(
        from: Option<&FeedCursor>,
        to: &FeedCursor,
        deliveries: Vec<NewDelivery>,
    ) -> Self {
        WriteOp::EnqueueDeliveries {
            from: from.map(|cursor| cursor.0.clone()),
            to: to.0.clone(),
            deliveries,
        }
    }

    /// Claiming up to `limit` due deliveries for `lease`.
    pub(crate) fn claim_deliveries(limit: u32, lease: Duration) -> Self {
        WriteOp::ClaimDeliveries {
            limit,
            lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
        }
    }
}

/// A record written behind its answer, prepared by the caller's task.
pub(crate) fn behind(
    call: NewCall,
    outcome: &Outcome,
) -> Result<(PreparedCall, Prepared), StoreError> {
    let outcome = Prepared::new(outcome, call.attempts)?;
    Ok((PreparedCall::new(call), outcome))
}

/// Each write's answer, as the Store trait returns it: the reply of the write's kind (any other
/// is the writer's mistake). Written by `answers!` below, but for [`Reply::finished`].
impl Reply {
    pub(crate) fn finished(self) -> Result<(), StoreError> {
        match self {
            Reply::Done => Ok(()),
            Reply::Late(call) => Err(StoreError::LeaseLost(call)),
            _ => Err(unexpected()),
        }
    }
}

/// The answers of one reply each: `name -> Type { pattern => value }` is the method `name`,
/// which returns `value` for a reply matching `pattern` and fails on any other.
macro_rules! answers {
    ($($name:ident -> $answer:ty { $reply:pat => $value:expr })*) => {
        impl Reply {
            $(
                pub(crate) fn $name(self) -> Result<$answer, StoreError> {
                    match self {
                        $reply => Ok($value),
                        _ => Err(unexpected()),
                    }
                }
            )*
        }
    };
}

answers! {
    inserted -> Inserted { Reply::Inserted(inserted) => inserted }
    rerun -> Option<Rerun> { Reply::Rerun(rerun) => rerun.map(|r| *r) }
    resolved -> Resolved { Reply::Resolved(resolved) => *resolved }
    pruned -> u64 { Reply::Pruned(count) => count }
    escalated -> Vec<String> { Reply::Escalated(calls) => calls }
    reconciled -> Reconciled { Reply::Reconciled(reconciled) => *reconciled }
    enqueued -> bool { Reply::Enqueued(moved) => moved }
    claimed -> Vec<Delivery> { Reply::Claimed(deliveries) => deliveries }
    settled -> () { Reply::Done => () }
    delivery -> Option<Delivery> { Reply::Delivery(delivery) => delivery.map(|d| *d) }
    standing -> super::standing::StandingReply { Reply::Standing(reply) => *reply }
    link_key -> super::LinkKey { Reply::LinkKey(key) => *key }
    pins -> Vec<super::ToolPin> { Reply::Pins(pins) => pins }
    signing_key -> super::SigningKey { Reply::SigningKey(key) => *key }
    export -> Option<i64> { Reply::Export(after) => after }
}

fn unexpected() -> StoreError {
    StoreError::Backend("unexpected reply from the store's writer".into())
}
