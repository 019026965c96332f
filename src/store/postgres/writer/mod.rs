//! The batching writer: one task, one connection, one transaction per batch.
//!
//! PostgreSQL's own commit grouping tops out near the disk's fsync rate, and a round trip per
//! statement would cap a replica far below it. So, as on SQLite, every write waiting in the queue
//! (up to [`MAX_BATCH`]) is applied in one transaction and committed once, and each caller is
//! answered only after that commit. Within the batch, writes of one kind share one statement
//! (`batch.rs`): all new calls (and the read records written behind their answer) are one
//! multi-row `INSERT` over `unnest` arrays, all outcomes one `UPDATE ... FROM unnest`, all new
//! suspensions one `INSERT`, all feed entries one `INSERT`. Resolutions, re-runs, settlements
//! and the rest, which are rarer and each conditional on what they find (`conditional.rs`, and
//! the outbox's and sessions' statements in `webhooks.rs` and `sessions.rs`), run one after
//! another in the same transaction. This file is the loop: taking a batch, [`apply`]ing it in
//! that order, committing, answering.
//!
//! The promises of the Store traits, in SQL:
//! - one call per (tool, idempotency key): the unique index and `ON CONFLICT DO NOTHING` in
//!   [`batch::INSERT_CALLS`]; a conflicting call is looked up and answered instead;
//! - an outcome only from the run that owns the call: [`batch::FINISH_CALLS`] is conditional on
//!   `status = 'running' AND owner = <this replica> AND attempts = <the run's first attempt>`;
//!   a refused outcome is appended to the call's history as `late_outcome`
//!   ([`batch::late_outcome`]);
//! - one winner per suspension: [`conditional::resolve`]'s update is conditional on a pending,
//!   unexpired suspension, and a second resolution (on any replica) waits for the first's row
//!   lock, then finds it resolved;
//! - every change appends its event to `calls.events` in the same statement.
//!
//! If a statement of a batch fails, the transaction is rolled back and each write of the batch
//! is applied again alone, so one bad write fails alone. If the database cannot be reached,
//! every write of the batch fails with [`StoreError::Unavailable`] and the read records written
//! behind are kept (up to [`queue::MAX_BEHIND_KEPT`]) for the next batch.

mod batch;
mod conditional;
mod edits;
mod standing;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::reads::Conn;
use super::{link_keys, pg_error, pool_error, sessions, signing_keys, webhooks};
use crate::store::queue::{self, BEHIND_WINDOW, Batch, Behind, Msg, RETRY_KEPT, Reply, WriteOp};
use crate::store::record::{Prepared, PreparedCall};
use crate::store::{Inserted, StoreError, Timestamp};
use batch::{CallRows, FeedRows, OutcomeRows, SuspensionRows, existing, settle_outcomes};
use conditional::{escalate, prune_feed, reconcile, rerun, resolve};

/// The most writes someone waits for committed in one transaction.
const MAX_BATCH: usize = 512;

/// How long one batch may take, round trips and commit included, before its writes are
/// answered `Unavailable` (a database that stopped answering must not hang its clients).
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The writer's state: its pool (of the writer's own connections), the replica it writes for,
/// and the connection it holds between batches.
pub(super) struct Writer {
    pub(super) pool: deadpool_postgres::Pool,
    pub(super) replica: Arc<str>,
    pub(super) conn: Option<deadpool_postgres::Object>,
    /// Bumped after each commit that may have grown the feed.
    pub(super) feed: Arc<tokio::sync::watch::Sender<u64>>,
}

type Results = Vec<Result<Reply, StoreError>>;

impl Writer {
    /// The writer task: batch, apply, commit once, answer. Ends when every sender is gone,
    /// after committing what is left.
    pub(super) async fn run(
        mut self,
        mut queue: mpsc::UnboundedReceiver<Msg>,
        behind: Arc<Mutex<Behind>>,
    ) {
        let mut open = true;
        while open {
            let mut jobs = Vec::new();
            // Read records kept while the database was unreachable are retried on a timer too,
            // not only when the next write comes.
            let next = if self.kept_behind(&behind) {
                tokio::time::timeout(RETRY_KEPT, queue.recv())
                    .await
                    .unwrap_or(Some(Msg::BehindFull))
            } else {
                queue.recv().await
            };
            match next {
                Some(Msg::Write(job)) => jobs.push(job),
                // Records written behind wait for company for a while, unless a write someone
                // waits for (or a full queue) comes first.
                Some(Msg::BehindWaiting) => {
                    let deadline = tokio::time::Instant::now() + BEHIND_WINDOW;
                    loop {
                        match tokio::time::timeout_at(deadline, queue.recv()).await {
                            Ok(Some(Msg::Write(job))) => {
                                jobs.push(job);
                                break;
                            }
                            Ok(Some(Msg::BehindWaiting)) => continue,
                            Ok(Some(Msg::BehindFull)) | Err(_) => break,
                            Ok(None) => {
                                open = false;
                                break;
                            }
                        }
                    }
                }
                Some(Msg::BehindFull) => {}
                None => open = false,
            }
            while open && jobs.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(Msg::Write(job)) => jobs.push(job),
                    Ok(Msg::BehindWaiting | Msg::BehindFull) => {}
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => open = false,
                }
            }
            let Some(Batch {
                ops,
                replies,
                records,
                fed,
            }) = Batch::take(jobs, &behind)
            else {
                continue;
            };
            let (writes, started) = (ops.len() + records.len(), tokio::time::Instant::now());
            let results = self.commit(&ops, records, &behind).await;
            crate::metrics::store_batch(writes, started.elapsed());
            let committed = results.iter().any(Result::is_ok);
            // Readers of the feed in this process hear of the commit at once.
            if fed && committed {
                self.feed
                    .send_modify(|changes| *changes = changes.wrapping_add(1));
            }
            queue::answer(replies, results, writes);
            // Other replicas hear of it through NOTIFY, sent once per batch in its own small
            // transaction: inside the batch's, it would serialize every commit behind it.
            if fed && committed {
                self.notify().await;
            }
        }
    }

    /// Tells the other replicas' feed listeners that the feed has grown. A lost notification
    /// costs only latency: listeners also re-read on a timer.
    async fn notify(&mut self) {
        if let Some(conn) = &self.conn
            && let Err(err) = conn.batch_execute(super::feed::NOTIFY).await
        {
            tracing::debug!(error = %err, "cannot notify the other replicas of a feed change");
        }
    }

    /// Whether read records wait that an earlier batch could not write.
    fn kept_behind(&self, behind: &Mutex<Behind>) -> bool {
        self.conn.is_none()
            && !behind
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .records
                .is_empty()
    }

    /// Applies `ops` and `records` in one transaction; if a statement fails, each op alone.
    async fn commit(
        &mut self,
        ops: &[WriteOp],
        records: Vec<(PreparedCall, Prepared)>,
        behind: &Mutex<Behind>,
    ) -> Results {
        match self.attempt(ops, &records).await {
            Ok(results) => results,
            Err(err @ StoreError::Unavailable(_)) => {
                self.conn = None;
                Behind::keep(behind, records);
                ops.iter().map(|_| Err(err.clone())).collect()
            }
            Err(err) => {
                tracing::warn!(error = %err, writes = ops.len(), "a batch failed; applying its writes one by one");
                let mut results = Vec::with_capacity(ops.len());
                for op in ops {
                    let result = match self.attempt(std::slice::from_ref(op), &[]).await {
                        Ok(mut one) => one.pop().unwrap_or_else(|| Err(err.clone())),
                        Err(err) => Err(err),
                    };
                    results.push(result);
                }
                if !records.is_empty()
                    && let Err(err) = self.attempt(&[], &records).await
                {
                    tracing::error!(error = %err, lost = records.len(), "read call records could not be written");
                }
                results
            }
        }
    }

    /// One transaction, under [`BATCH_TIMEOUT`].
    async fn attempt(
        &mut self,
        ops: &[WriteOp],
        records: &[(PreparedCall, Prepared)],
    ) -> Result<Results, StoreError> {
        if self.conn.as_ref().is_none_or(|conn| conn.is_closed()) {
            self.conn = Some(self.pool.get().await.map_err(pool_error)?);
        }
        let replica = self.replica.clone();
        let conn = self.conn.as_mut().expect("connected above");
        match tokio::time::timeout(BATCH_TIMEOUT, apply(conn, &replica, ops, records)).await {
            Ok(result) => result,
            Err(_elapsed) => {
                // Taken out of the pool and closed: a connection that stopped answering must not
                // be handed to anyone else.
                if let Some(conn) = self.conn.take() {
                    drop(deadpool_postgres::Object::take(conn));
                }
                Err(StoreError::Unavailable(format!(
                    "the database did not commit within {} s",
                    BATCH_TIMEOUT.as_secs()
                )))
            }
        }
    }
}

/// Applies one batch in one transaction and commits it, in as few round trips as the batch
/// allows: `BEGIN`, the feed writers' lock, the new calls' `INSERT` and the outcomes' `UPDATE`
/// are sent together (PostgreSQL runs a connection's statements in order, and the two touch
/// different calls: an outcome's call was committed by an earlier batch). What depends on an
/// answer waits for it (a taken idempotency key's holder, a late outcome, a suspension, the
/// rarer conditional writes), then the feed's `INSERT`, then `COMMIT`. Any failure is rolled
/// back explicitly before the error is returned.
async fn apply(
    conn: &mut deadpool_postgres::Object,
    replica: &str,
    ops: &[WriteOp],
    records: &[(PreparedCall, Prepared)],
) -> Result<Results, StoreError> {
    let client: &deadpool_postgres::ClientWrapper = conn;
    match applied(client, replica, ops, records).await {
        Ok(results) => Ok(results),
        Err(err) => {
            // Ends the transaction if it is still open (after a COMMIT it is a no-op). A
            // connection that cannot even do this is closed by the next batch's check.
            let _ = client.batch_execute("ROLLBACK").await;
            Err(err)
        }
    }
}

/// [`apply`]'s statements, from `BEGIN` to `COMMIT`.
async fn applied(
    client: &deadpool_postgres::ClientWrapper,
    replica: &str,
    ops: &[WriteOp],
    records: &[(PreparedCall, Prepared)],
) -> Result<Results, StoreError> {
    // Only the read records written behind, which nobody waits for and whose loss costs
    // nothing: their commit need not wait for the disk.
    let durable = ops.iter().any(|op| !matches!(op, WriteOp::Ping));
    let begin = if durable {
        "BEGIN"
    } else {
        "BEGIN; SET LOCAL synchronous_commit = off"
    };
    // Then, before the transaction has an xid, the feed writers' lock: it may write the feed
    // (see `feed::horizon`). Prepared once per connection, so it has no parse either.
    let begin_write = client
        .prepare_cached(super::feed::BEGIN_WRITE)
        .await
        .map_err(pg_error)?;
    let c = &Conn(client);
    let now = Timestamp::now().0;
    let mut results: Vec<Option<Result<Reply, StoreError>>> = ops.iter().map(|_| None).collect();
    let mut suspensions = SuspensionRows::default();
    let mut feed = FeedRows::default();

    // New calls and read records: one statement; outcomes: another; sent with BEGIN.
    let mut rows = CallRows::default();
    for op in ops {
        if let WriteOp::Insert(call, outcome) = op {
            rows.push(call, outcome.as_ref());
        }
    }
    for (call, outcome) in records {
        rows.push(call, Some(outcome));
    }
    let outcomes = OutcomeRows::of(ops);
    let (begun, locked, inserted, finished) = futures_util::future::join4(
        client.batch_execute(begin),
        client.execute(&begin_write, &[]),
        rows.insert(c, replica),
        outcomes.record(c, replica, now),
    )
    .await;
    begun.map_err(pg_error)?;
    locked.map_err(pg_error)?;
    let (inserted, finished) = (inserted?, finished?);
    for (index, op) in ops.iter().enumerate() {
        let WriteOp::Insert(call, outcome) = op else {
            continue;
        };
        results[index] = Some(if inserted.contains(&call.call_id) {
            if let Some(outcome) = outcome {
                suspensions.push(&call.call_id, outcome);
                feed.push_outcome(&call.call_id, outcome);
            }
            Ok(Reply::Inserted(Inserted::New))
        } else {
            existing(c, call, now).await?
        });
    }
    for (call, _) in records {
        if !inserted.contains(&call.call_id) {
            tracing::error!(call_id = %call.call_id, "a read call's record could not be written: the call id is taken");
        }
    }
    // Outcomes: those refused are late.
    settle_outcomes(
        c,
        replica,
        ops,
        &finished,
        &mut results,
        &mut suspensions,
        &mut feed,
        now,
    )
    .await?;
    suspensions.insert(c, now).await?;

    // The rest, one after another.
    for (index, op) in ops.iter().enumerate() {
        let result = match op {
            WriteOp::Insert(..) | WriteOp::Finish { .. } => continue,
            WriteOp::Rerun(call_id) => rerun(c, replica, call_id, now)
                .await
                .map(|rerun| Reply::Rerun(rerun.map(Box::new))),
            WriteOp::Resolve(token, resolution, actor) => {
                resolve(c, replica, token, resolution, actor, &mut feed, now)
                    .await
                    .map(|resolved| Reply::Resolved(Box::new(resolved)))
            }
            WriteOp::Reconcile(call_id, settlement, actor) => {
                reconcile(c, call_id, settlement, actor, &mut feed, now)
                    .await
                    .map(|reconciled| Reply::Reconciled(Box::new(reconciled)))
            }
            WriteOp::PruneFeed(before) => prune_feed(c, *before).await.map(Reply::Pruned),
            WriteOp::Escalate { tool, created_by } => {
                escalate(c, tool, *created_by, &mut feed, now)
                    .await
                    .map(Reply::Escalated)
            }
            WriteOp::EnqueueDeliveries {
                from,
                to,
                deliveries,
            } => webhooks::enqueue(c, from.as_deref(), to, deliveries, now)
                .await
                .map(Reply::Enqueued),
            WriteOp::ClaimDeliveries { limit, lease_ms } => {
                webhooks::claim(c, *limit, *lease_ms, now)
                    .await
                    .map(Reply::Claimed)
            }
            WriteOp::SettleDelivery(id, result) => webhooks::settle(c, *id, result, now)
                .await
                .map(|()| Reply::Done),
            WriteOp::RetryDelivery(id) => webhooks::retry(c, *id, now)
                .await
                .map(|delivery| Reply::Delivery(delivery.map(Box::new))),
            WriteOp::CreateSession(session) => {
                sessions::create(c, session).await.map(|()| Reply::Done)
            }
            WriteOp::DeleteSession(id) => sessions::delete(c, id).await.map(Reply::Pruned),
            WriteOp::PruneSessions(now) => sessions::prune(c, *now).await.map(Reply::Pruned),
            WriteOp::Standing(op) => standing::apply(c, replica, op, &mut feed, now)
                .await
                .map(|reply| Reply::Standing(Box::new(reply))),
            WriteOp::LinkKey(key) => link_keys::make(c, key)
                .await
                .map(|key| Reply::LinkKey(Box::new(key))),
            WriteOp::PruneLinkKeys(now) => link_keys::prune(c, *now).await.map(Reply::Pruned),
            WriteOp::Pins(op) => super::pins::apply(c, op, now).await,
            WriteOp::SigningKey(key) => signing_keys::make(c, key)
                .await
                .map(|key| Reply::SigningKey(Box::new(key))),
            WriteOp::PruneSigningKeys(now) => signing_keys::prune(c, *now).await.map(Reply::Pruned),
            WriteOp::Checkpoint(checkpoint) => super::audit::checkpoint(c, checkpoint, now)
                .await
                .map(|()| Reply::Done),
            WriteOp::AuditExport(op) => super::audit::export(c, op).await.map(Reply::Export),
            WriteOp::Ping => Ok(Reply::Done),
        };
        // A statement that failed aborted the transaction: the whole batch is retried op by op.
        if let Err(err @ (StoreError::Backend(_) | StoreError::Unavailable(_))) = &result {
            return Err(err.clone());
        }
        results[index] = Some(result);
    }
    // The feed's entries and the commit, sent together: the commit counts only if the insert
    // before it succeeded (after a failed one it is a rollback).
    // The COMMIT is sent once the feed's entries are in, never beside them: a statement not yet
    // prepared on this connection is sent only after its parse is answered, so a COMMIT sent
    // with it would go first and commit without them.
    feed.insert(c, now).await?;
    client.batch_execute("COMMIT").await.map_err(pg_error)?;
    Ok(results
        .into_iter()
        .map(|result| result.unwrap_or(Ok(Reply::Done)))
        .collect())
}
