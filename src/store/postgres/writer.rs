//! The batching writer: one task, one connection, one transaction per batch.
//!
//! PostgreSQL's own commit grouping tops out near the disk's fsync rate, and a round trip per
//! statement would cap a replica far below it. So, as on SQLite, every write waiting in the queue
//! (up to [`MAX_BATCH`]) is applied in one transaction and committed once, and each caller is
//! answered only after that commit. Within the batch, writes of one kind share one statement:
//! all new calls (and the read records written behind their answer) are one multi-row `INSERT`
//! over `unnest` arrays, all outcomes one `UPDATE ... FROM unnest`, all new suspensions one
//! `INSERT`. Resolutions, re-runs and settlements, which are rarer and each conditional on what
//! they find, run one after another in the same transaction.
//!
//! The promises of the Store trait, in SQL:
//! - one call per (tool, idempotency key): the unique index and `ON CONFLICT DO NOTHING` in
//!   [`INSERT_CALLS`]; a conflicting call is looked up and answered instead;
//! - an outcome only from the run that owns the call: [`FINISH_CALLS`] is conditional on
//!   `status = 'running' AND owner = <this replica> AND attempts = <the run's first attempt>`;
//!   a refused outcome is appended to the call's history as `late_outcome` ([`late_outcome`]);
//! - one winner per suspension: [`resolve`]'s update is conditional on a pending, unexpired
//!   suspension, and a second resolution (on any replica) waits for the first's row lock, then
//!   finds it resolved;
//! - every change appends its event to `calls.events` in the same statement.
//!
//! If a statement of a batch fails, the transaction is rolled back and each write of the batch
//! is applied again alone, so one bad write fails alone. If the database cannot be reached,
//! every write of the batch fails with [`StoreError::Unavailable`] and the read records written
//! behind are kept (up to [`MAX_BEHIND_KEPT`]) for the next batch.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::reads::{Conn, find_call, load_call};
use super::{pg_error, pool_error, sessions, webhooks};
use crate::store::queue::{BEHIND_WINDOW, Behind, Msg, Reply, WriteOp};
use crate::store::record::{
    DERIVED_EVENTS, Prepared, PreparedCall, event_json, events_json, expired_error, feed_type,
    json_text, parse_json, settled_columns, to_json,
};
use crate::store::{
    CallError, CallStatus, Inserted, Reconciled, Rerun, Resolution, Resolved, Settlement,
    StoreError, Timestamp,
};

/// The most writes someone waits for committed in one transaction.
const MAX_BATCH: usize = 512;

/// How long one batch may take, round trips and commit included, before its writes are
/// answered `Unavailable` (a database that stopped answering must not hang its clients).
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The most read records written behind kept while the database cannot be reached; past it, the
/// oldest are dropped (and logged). They have no effect to lose; memory does.
const MAX_BEHIND_KEPT: usize = 100_000;

/// How often read records kept while the database is unreachable are retried.
const RETRY_KEPT: Duration = Duration::from_secs(1);

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
            // Taken after the writes: a read-your-writes probe (`Ping`) commits every record
            // written behind before it was sent.
            let records = Behind::take(&behind);
            if jobs.is_empty() && records.is_empty() {
                continue;
            }
            let (ops, replies): (Vec<WriteOp>, Vec<_>) =
                jobs.into_iter().map(|job| (job.op, job.reply)).unzip();
            let fed = ops.iter().any(WriteOp::may_feed);
            let (writes, started) = (ops.len() + records.len(), tokio::time::Instant::now());
            let results = self.commit(&ops, records, &behind).await;
            crate::metrics::store_batch(writes, started.elapsed());
            let committed = results.iter().any(Result::is_ok);
            // Readers of the feed in this process hear of the commit at once.
            if fed && committed {
                self.feed
                    .send_modify(|changes| *changes = changes.wrapping_add(1));
            }
            for (reply, result) in replies.into_iter().zip(results) {
                // The caller went away: a failure must still be heard.
                if let Err(Err(err)) = reply.send(result) {
                    tracing::error!(error = %err, "a write whose caller went away failed");
                }
            }
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
                keep_behind(behind, records);
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

/// Puts read records whose batch could not reach the database back in front of the queue.
fn keep_behind(behind: &Mutex<Behind>, mut records: Vec<(PreparedCall, Prepared)>) {
    if records.is_empty() {
        return;
    }
    let mut behind = behind
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    records.append(&mut behind.records);
    if records.len() > MAX_BEHIND_KEPT {
        let lost = records.len() - MAX_BEHIND_KEPT;
        records.drain(..lost);
        tracing::error!(
            lost,
            "read call records dropped while the database is unreachable"
        );
    }
    behind.records = records;
}

/// Inserts calls (new ones, and read records written behind) from `unnest` arrays; a call whose
/// id or (tool, idempotency key) is taken is skipped. Returns the ids inserted.
pub(super) const INSERT_CALLS: &str = "INSERT INTO calls (call_id, tool, effect, caller, status, \
     input, output, error, idempotency_key, attempts, created_at, updated_at, owner, events) \
     SELECT u.call_id, u.tool, u.effect, u.caller, u.status, u.input, u.output, u.error, \
       u.idempotency_key, u.attempts, u.created_at, u.updated_at, $14, u.events::jsonb \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
       $7::text[], $8::text[], $9::text[], $10::int4[], $11::int8[], $12::int8[], $13::text[]) \
       AS u(call_id, tool, effect, caller, status, input, output, error, idempotency_key, \
            attempts, created_at, updated_at, events) \
     ON CONFLICT DO NOTHING RETURNING call_id";

/// Records the outcomes of runs that still own their call; returns the ids recorded.
pub(super) const FINISH_CALLS: &str = "UPDATE calls c SET status = u.status, output = u.output, \
     error = u.error, updated_at = $9, attempts = u.attempts, events = c.events || u.event::jsonb \
     FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::int4[], \
       $7::text[]) AS u(call_id, run, status, output, error, attempts, event) \
     WHERE c.call_id = u.call_id AND c.status = 'running' AND c.owner = $8 \
       AND (u.run IS NULL OR c.attempts = u.run) \
     RETURNING c.call_id";

/// Creates suspensions, each with its call's tool.
const INSERT_SUSPENSIONS: &str = "INSERT INTO suspensions (token, call_id, tool, reason, \
     input_schema, status, created_at, expires_at) \
     SELECT u.token, u.call_id, c.tool, u.reason, u.input_schema, 'pending', $6, u.expires_at \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[]) \
       AS u(token, call_id, reason, input_schema, expires_at) \
     JOIN calls c ON c.call_id = u.call_id";

/// Appends one event (or a JSON array of events) to a call's history.
const APPEND_EVENT: &str =
    "UPDATE calls SET events = events || $2::text::jsonb WHERE call_id = $1 AND events IS NOT NULL";

/// The columns of [`INSERT_CALLS`], one vector each.
#[derive(Default)]
struct CallRows<'a> {
    call_id: Vec<&'a str>,
    tool: Vec<&'a str>,
    effect: Vec<&'a str>,
    caller: Vec<Option<&'a str>>,
    status: Vec<&'a str>,
    input: Vec<&'a str>,
    output: Vec<Option<&'a str>>,
    error: Vec<Option<&'a str>>,
    key: Vec<Option<&'a str>>,
    attempts: Vec<i32>,
    created_at: Vec<i64>,
    updated_at: Vec<i64>,
    events: Vec<Option<String>>,
}

impl<'a> CallRows<'a> {
    fn push(&mut self, call: &'a PreparedCall, outcome: Option<&'a Prepared>) {
        let (status, output, error, updated_at) = match outcome {
            Some(o) => (o.status, o.output.as_deref(), o.error.as_deref(), o.at),
            None => (CallStatus::Running, None, None, call.created_at),
        };
        let events = events_json(call, outcome);
        self.call_id.push(&call.call_id);
        self.tool.push(&call.tool);
        self.effect.push(call.effect);
        self.caller.push(call.caller.as_deref());
        self.status.push(status.as_str());
        self.input.push(&call.input);
        self.output.push(output);
        self.error.push(error);
        self.key.push(call.idempotency_key.as_deref());
        self.attempts.push(attempts_i32(call.attempts));
        self.created_at.push(call.created_at);
        self.updated_at.push(updated_at);
        // A call inserted already completed keeps its events implicit (`NULL`).
        self.events
            .push((events != DERIVED_EVENTS).then_some(events));
    }

    async fn insert(&self, conn: &Conn<'_>, replica: &str) -> Result<HashSet<String>, StoreError> {
        if self.call_id.is_empty() {
            return Ok(HashSet::new());
        }
        let rows = conn
            .query(
                INSERT_CALLS,
                &[
                    &self.call_id,
                    &self.tool,
                    &self.effect,
                    &self.caller,
                    &self.status,
                    &self.input,
                    &self.output,
                    &self.error,
                    &self.key,
                    &self.attempts,
                    &self.created_at,
                    &self.updated_at,
                    &self.events,
                    &replica,
                ],
            )
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| row.try_get::<_, String>(0).map_err(pg_error))
            .collect()
    }
}

/// The columns of [`INSERT_SUSPENSIONS`].
#[derive(Default)]
struct SuspensionRows<'a> {
    token: Vec<&'a str>,
    call_id: Vec<&'a str>,
    reason: Vec<&'a str>,
    input_schema: Vec<&'a str>,
    expires_at: Vec<Option<i64>>,
}

impl<'a> SuspensionRows<'a> {
    fn push(&mut self, call_id: &'a str, outcome: &'a Prepared) {
        if let Some((token, reason, schema, expires_at)) = &outcome.suspension {
            self.token.push(token);
            self.call_id.push(call_id);
            self.reason.push(reason);
            self.input_schema.push(schema);
            self.expires_at.push(*expires_at);
        }
    }

    async fn insert(&self, conn: &Conn<'_>, now: i64) -> Result<(), StoreError> {
        if self.token.is_empty() {
            return Ok(());
        }
        let inserted = conn
            .execute(
                INSERT_SUSPENSIONS,
                &[
                    &self.token,
                    &self.call_id,
                    &self.reason,
                    &self.input_schema,
                    &self.expires_at,
                    &now,
                ],
            )
            .await
            .map_err(pg_error)?;
        if inserted as usize != self.token.len() {
            // Each call is written first, in the same transaction.
            return Err(StoreError::Backend(
                "a suspension's call is missing".to_owned(),
            ));
        }
        Ok(())
    }
}

fn attempts_i32(attempts: u32) -> i32 {
    i32::try_from(attempts).unwrap_or(i32::MAX)
}

/// Applies one batch in one transaction and commits it.
async fn apply(
    conn: &mut deadpool_postgres::Object,
    replica: &str,
    ops: &[WriteOp],
    records: &[(PreparedCall, Prepared)],
) -> Result<Results, StoreError> {
    let tx = conn.transaction().await.map_err(pg_error)?;
    // Only the read records written behind, which nobody waits for and whose loss costs
    // nothing: their commit need not wait for the disk. Then, before the transaction has an
    // xid, the feed writers' lock: it may write the feed (see `feed::horizon`).
    let durable = ops.iter().any(|op| !matches!(op, WriteOp::Ping));
    if !durable {
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .await
            .map_err(pg_error)?;
    }
    // Sent first and not waited for: the batch's statements follow it on the connection, and
    // PostgreSQL runs them in order, so the lock is taken before anything gets an xid, at no
    // round trip of its own (and, prepared once per connection, with no parse either).
    let begin_write = tx
        .prepare_cached(super::feed::BEGIN_WRITE)
        .await
        .map_err(pg_error)?;
    let lock = tx.execute(&begin_write, &[]);
    let c = Conn::Tx(&tx);
    let body = async {
        let now = Timestamp::now().0;
        let mut results: Vec<Option<Result<Reply, StoreError>>> =
            ops.iter().map(|_| None).collect();
        let mut suspensions = SuspensionRows::default();
        let mut feed = FeedRows::default();

        // New calls and read records: one statement.
        let mut rows = CallRows::default();
        for op in ops {
            if let WriteOp::Insert(call, outcome) = op {
                rows.push(call, outcome.as_ref());
            }
        }
        for (call, outcome) in records {
            rows.push(call, Some(outcome));
        }
        let inserted = rows.insert(&c, replica).await?;
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
                existing(&c, call, now).await?
            });
        }
        for (call, _) in records {
            if !inserted.contains(&call.call_id) {
                tracing::error!(call_id = %call.call_id, "a read call's record could not be written: the call id is taken");
            }
        }

        // Outcomes: one statement; those refused are late.
        finish(
            &c,
            replica,
            ops,
            &mut results,
            &mut suspensions,
            &mut feed,
            now,
        )
        .await?;
        suspensions.insert(&c, now).await?;

        // The rest, one after another.
        for (index, op) in ops.iter().enumerate() {
            let result = match op {
                WriteOp::Insert(..) | WriteOp::Finish { .. } => continue,
                WriteOp::Rerun(call_id) => rerun(&c, replica, call_id, now)
                    .await
                    .map(|rerun| Reply::Rerun(rerun.map(Box::new))),
                WriteOp::Resolve(token, resolution, actor) => resolve(
                    &c,
                    replica,
                    token,
                    resolution,
                    actor.as_deref(),
                    &mut feed,
                    now,
                )
                .await
                .map(|resolved| Reply::Resolved(Box::new(resolved))),
                WriteOp::Reconcile(call_id, settlement, actor) => {
                    reconcile(&c, call_id, settlement, actor.as_deref(), &mut feed, now)
                        .await
                        .map(|reconciled| Reply::Reconciled(Box::new(reconciled)))
                }
                WriteOp::PruneFeed(before) => prune_feed(&c, *before).await.map(Reply::Pruned),
                WriteOp::EnqueueDeliveries {
                    from,
                    to,
                    deliveries,
                } => webhooks::enqueue(&c, from.as_deref(), to, deliveries, now)
                    .await
                    .map(Reply::Enqueued),
                WriteOp::ClaimDeliveries { limit, lease_ms } => {
                    webhooks::claim(&c, *limit, *lease_ms, now)
                        .await
                        .map(Reply::Claimed)
                }
                WriteOp::SettleDelivery(id, result) => webhooks::settle(&c, *id, result, now)
                    .await
                    .map(|()| Reply::Done),
                WriteOp::RetryDelivery(id) => webhooks::retry(&c, *id, now)
                    .await
                    .map(|delivery| Reply::Delivery(delivery.map(Box::new))),
                WriteOp::CreateSession(session) => {
                    sessions::create(&c, session).await.map(|()| Reply::Done)
                }
                WriteOp::DeleteSession(id) => sessions::delete(&c, id).await.map(Reply::Pruned),
                WriteOp::PruneSessions(now) => sessions::prune(&c, *now).await.map(Reply::Pruned),
                WriteOp::Ping => Ok(Reply::Done),
            };
            // A statement that failed aborted the transaction: the whole batch is retried op by op.
            if let Err(err @ (StoreError::Backend(_) | StoreError::Unavailable(_))) = &result {
                return Err(err.clone());
            }
            results[index] = Some(result);
        }
        feed.insert(&c, now).await?;
        Ok(results)
    };
    let (locked, body) = futures_util::future::join(lock, body).await;
    locked.map_err(pg_error)?;
    let results = body?;
    tx.commit().await.map_err(pg_error)?;
    Ok(results
        .into_iter()
        .map(|result| result.unwrap_or(Ok(Reply::Done)))
        .collect())
}

/// The answer to an insert that wrote nothing: the call holding its (tool, idempotency key), or
/// an error if its call id was taken.
async fn existing(
    c: &Conn<'_>,
    call: &PreparedCall,
    now: i64,
) -> Result<Result<Reply, StoreError>, StoreError> {
    let holder = match &call.idempotency_key {
        Some(key) => c
            .query_opt(
                "SELECT call_id FROM calls WHERE tool = $1 AND idempotency_key = $2",
                &[&call.tool, key],
            )
            .await
            .map_err(pg_error)?
            .map(|row| row.try_get::<_, String>(0))
            .transpose()
            .map_err(pg_error)?,
        None => None,
    };
    Ok(match holder {
        Some(call_id) => Ok(Reply::Inserted(Inserted::Existing(Box::new(
            load_call(c, &call_id, now).await?,
        )))),
        None => Err(StoreError::Backend(format!(
            "call id {} already exists",
            call.call_id
        ))),
    })
}

/// Records every outcome of the batch in one statement; an outcome refused (its run no longer
/// owns the call) is appended to the call's history as `late_outcome`.
async fn finish<'a>(
    c: &Conn<'_>,
    replica: &str,
    ops: &'a [WriteOp],
    results: &mut [Option<Result<Reply, StoreError>>],
    suspensions: &mut SuspensionRows<'a>,
    feed: &mut FeedRows,
    now: i64,
) -> Result<(), StoreError> {
    let mut call_ids = Vec::new();
    let mut runs = Vec::new();
    let mut statuses = Vec::new();
    let mut outputs = Vec::new();
    let mut errors = Vec::new();
    let mut attempts = Vec::new();
    let mut events = Vec::new();
    for op in ops {
        if let WriteOp::Finish {
            call_id,
            run,
            outcome,
        } = op
        {
            call_ids.push(call_id.as_str());
            runs.push(run.map(attempts_i32));
            statuses.push(outcome.status.as_str());
            outputs.push(outcome.output.as_deref());
            errors.push(outcome.error.as_deref());
            attempts.push(attempts_i32(outcome.attempts));
            events.push(outcome.event());
        }
    }
    if call_ids.is_empty() {
        return Ok(());
    }
    let events: Vec<&str> = events.iter().map(|e| e.as_ref()).collect();
    let finished: HashSet<String> = c
        .query(
            FINISH_CALLS,
            &[
                &call_ids, &runs, &statuses, &outputs, &errors, &attempts, &events, &replica, &now,
            ],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(|row| row.try_get::<_, String>(0).map_err(pg_error))
        .collect::<Result<_, _>>()?;
    for (index, op) in ops.iter().enumerate() {
        let WriteOp::Finish {
            call_id,
            run,
            outcome,
        } = op
        else {
            continue;
        };
        results[index] = Some(if finished.contains(call_id) {
            suspensions.push(call_id, outcome);
            feed.push_outcome(call_id, outcome);
            Ok(Reply::Done)
        } else {
            late_outcome(c, replica, call_id, *run, outcome, now).await?
        });
    }
    Ok(())
}

/// An outcome whose run no longer owns its call (its replica lost the lease and the call was
/// swept, or it was settled meanwhile): kept in the call's history as evidence for whoever
/// reconciles it, and refused.
async fn late_outcome(
    c: &Conn<'_>,
    replica: &str,
    call_id: &str,
    run: Option<u32>,
    outcome: &Prepared,
    now: i64,
) -> Result<Result<Reply, StoreError>, StoreError> {
    let event = outcome.late_event(Some(replica), run, now)?;
    let appended = c
        .execute(APPEND_EVENT, &[&call_id, &event])
        .await
        .map_err(pg_error)?;
    if appended == 0 {
        return Ok(Err(StoreError::NotRunning {
            call_id: call_id.to_owned(),
        }));
    }
    Ok(Ok(Reply::Late(Box::new(load_call(c, call_id, now).await?))))
}

async fn rerun(
    c: &Conn<'_>,
    replica: &str,
    call_id: &str,
    now: i64,
) -> Result<Option<Rerun>, StoreError> {
    let event = event_json(
        now,
        "redispatched",
        None,
        Some(&json!({"after": "interrupted"})),
    );
    let claimed = c
        .execute(
            "UPDATE calls SET status = 'running', attempts = attempts + 1, updated_at = $2, \
             owner = $3, events = events || $4::text::jsonb \
             WHERE call_id = $1 AND status = 'interrupted'",
            &[&call_id, &now, &replica, &event],
        )
        .await
        .map_err(pg_error)?;
    if claimed == 0 {
        return Ok(None);
    }
    // The call's latest suspension, if approved, is what the interrupted run resumed.
    let resume = c
        .query_opt(
            "SELECT status, resume_input FROM suspensions WHERE call_id = $1 \
             ORDER BY seq DESC LIMIT 1",
            &[&call_id],
        )
        .await
        .map_err(pg_error)?;
    let resume_input = match resume {
        Some(row) => {
            let status: String = row.try_get(0).map_err(pg_error)?;
            let input: Option<String> = row.try_get(1).map_err(pg_error)?;
            match input {
                Some(input) if status == "approved" => Some(parse_json(&input)?),
                _ => None,
            }
        }
        None => None,
    };
    Ok(Some(Rerun {
        call: load_call(c, call_id, now).await?,
        resume_input,
    }))
}

async fn resolve(
    c: &Conn<'_>,
    replica: &str,
    token: &str,
    resolution: &Resolution,
    actor: Option<&str>,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Resolved, StoreError> {
    let (status, resume_input, reject_reason) = match resolution {
        Resolution::Approve { resume_input } => ("approved", Some(json_text(resume_input)), None),
        Resolution::Reject { reason } => ("rejected", None, Some(reason.as_str())),
        Resolution::Complete { .. } => ("completed", None, None),
        // Whoever read it as expired has decided; this only writes it down.
        Resolution::Expire => return unresolved(c, token, feed, now).await,
    };
    // Conditional on `pending` and unexpired: of two resolutions of one token, on any replicas,
    // the second waits for the first's lock and then changes nothing.
    let call_id: Option<String> = c
        .query_opt(
            "UPDATE suspensions SET status = $2, resume_input = $3, reject_reason = $4, \
             resolved_at = $5, resolved_by = $6 WHERE token = $1 AND status = 'pending' \
             AND (expires_at IS NULL OR expires_at > $5) RETURNING call_id",
            &[&token, &status, &resume_input, &reject_reason, &now, &actor],
        )
        .await
        .map_err(pg_error)?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(pg_error)?;
    let Some(call_id) = call_id else {
        return unresolved(c, token, feed, now).await;
    };
    match resolution {
        Resolution::Approve { .. } => {
            let events = format!(
                "[{},{}]",
                event_json::<Value>(now, "approved", actor, None),
                event_json::<Value>(now, "redispatched", None, None)
            );
            c.execute(
                "UPDATE calls SET status = 'running', attempts = attempts + 1, updated_at = $2, \
                 owner = $3, events = events || $4::text::jsonb WHERE call_id = $1",
                &[&call_id, &now, &replica, &events],
            )
            .await
            .map_err(pg_error)?;
            Ok(Resolved::Approved(load_call(c, &call_id, now).await?))
        }
        Resolution::Reject { reason } => {
            let error = to_json(&CallError::new("rejected", reason.clone()))?;
            let event = event_json(now, "rejected", actor, Some(&json!({"reason": reason})));
            c.execute(
                "UPDATE calls SET status = 'rejected', error = $2, updated_at = $3, \
                 events = events || $4::text::jsonb WHERE call_id = $1",
                &[&call_id, &error, &now, &event],
            )
            .await
            .map_err(pg_error)?;
            let call = load_call(c, &call_id, now).await?;
            feed.push(&call, CallStatus::Rejected, None);
            Ok(Resolved::Rejected(call))
        }
        Resolution::Complete { output } => {
            let event = event_json::<Value>(now, "completed_externally", actor, None);
            c.execute(
                "UPDATE calls SET status = 'completed', output = $2, updated_at = $3, \
                 events = events || $4::text::jsonb WHERE call_id = $1",
                &[&call_id, &json_text(output), &now, &event],
            )
            .await
            .map_err(pg_error)?;
            let call = load_call(c, &call_id, now).await?;
            feed.push(&call, CallStatus::Completed, None);
            Ok(Resolved::Completed(call))
        }
        Resolution::Expire => unreachable!("handled before the update"),
    }
}

/// Why a token could not be resolved: it never existed, was resolved before, or has expired
/// (which is recorded now, once, by whichever replica gets there first).
async fn unresolved(
    c: &Conn<'_>,
    token: &str,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Resolved, StoreError> {
    let expired: Option<String> = c
        .query_opt(
            "UPDATE suspensions SET status = 'expired', resolved_at = $2 WHERE token = $1 \
             AND status = 'pending' AND expires_at IS NOT NULL AND expires_at <= $2 \
             RETURNING call_id",
            &[&token, &now],
        )
        .await
        .map_err(pg_error)?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(pg_error)?;
    if let Some(call_id) = expired {
        let error = to_json(&expired_error())?;
        let event = event_json::<Value>(now, "expired", None, None);
        c.execute(
            "UPDATE calls SET status = 'expired', error = $2, updated_at = $3, \
             events = events || $4::text::jsonb WHERE call_id = $1",
            &[&call_id, &error, &now, &event],
        )
        .await
        .map_err(pg_error)?;
        let call = load_call(c, &call_id, now).await?;
        feed.push(&call, CallStatus::Expired, None);
        return Ok(Resolved::Expired(call));
    }
    let row = c
        .query_opt(
            "SELECT call_id, status FROM suspensions WHERE token = $1",
            &[&token],
        )
        .await
        .map_err(pg_error)?;
    let Some(row) = row else {
        return Ok(Resolved::UnknownToken);
    };
    let call_id: String = row.try_get(0).map_err(pg_error)?;
    let status: String = row.try_get(1).map_err(pg_error)?;
    let call = load_call(c, &call_id, now).await?;
    Ok(if status == "expired" {
        Resolved::Expired(call)
    } else {
        Resolved::AlreadyResolved(call)
    })
}

async fn reconcile(
    c: &Conn<'_>,
    call_id: &str,
    settlement: &Settlement,
    actor: Option<&str>,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Reconciled, StoreError> {
    let (status, output, error) = settled_columns(settlement)?;
    let event = event_json(
        now,
        "reconciled",
        actor,
        Some(&json!({"status": status.as_str()})),
    );
    // Settled as failed, the effect did not happen: the key is released so that a new request
    // can make it.
    let changed = c
        .execute(
            "UPDATE calls SET status = $2, output = $3, error = $4, updated_at = $5, \
             idempotency_key = CASE WHEN $2 = 'failed' THEN NULL ELSE idempotency_key END, \
             events = events || $6::text::jsonb \
             WHERE call_id = $1 AND status IN ('needs_reconciliation', 'interrupted')",
            &[&call_id, &status.as_str(), &output, &error, &now, &event],
        )
        .await
        .map_err(pg_error)?;
    if changed == 0 {
        return Ok(match find_call(c, call_id, now).await? {
            Some(call) => Reconciled::NotNeeded(call),
            None => Reconciled::UnknownCall,
        });
    }
    let call = load_call(c, call_id, now).await?;
    feed.push(&call, status, None);
    Ok(Reconciled::Settled(call))
}

/// Appends the batch's feed entries, in order. The values are all given: a join with `calls`
/// here was planned once, on a small table, as a scan of the whole table, which every batch
/// then paid as the table grew.
const INSERT_FEED: &str = "INSERT INTO feed (at, type, call_id, attempts, token) \
     SELECT $1, u.type, u.call_id, u.attempts, u.token \
     FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[]) WITH ORDINALITY \
       AS u(call_id, type, token, attempts, n) \
     ORDER BY u.n";

/// The change feed entries of one batch, in the order of its changes.
#[derive(Default)]
pub(super) struct FeedRows {
    call_id: Vec<String>,
    kind: Vec<&'static str>,
    token: Vec<Option<String>>,
    /// The call's attempts as the change left them.
    attempts: Vec<i32>,
}

impl FeedRows {
    /// The change of `call` (as it is after the change) into `status`.
    fn push(&mut self, call: &crate::store::CallRecord, status: CallStatus, token: Option<&str>) {
        self.add(&call.call_id, status, token, call.attempts);
    }

    fn add(&mut self, call_id: &str, status: CallStatus, token: Option<&str>, attempts: u32) {
        self.call_id.push(call_id.to_owned());
        self.kind.push(feed_type(status));
        self.token.push(token.map(str::to_owned));
        self.attempts.push(attempts_i32(attempts));
    }

    fn push_outcome(&mut self, call_id: &str, outcome: &Prepared) {
        let token = outcome.suspension.as_ref().map(|s| s.0.as_str());
        self.add(call_id, outcome.status, token, outcome.attempts);
    }

    async fn insert(&self, c: &Conn<'_>, now: i64) -> Result<(), StoreError> {
        if self.call_id.is_empty() {
            return Ok(());
        }
        c.execute(
            INSERT_FEED,
            &[&now, &self.call_id, &self.kind, &self.token, &self.attempts],
        )
        .await
        .map_err(pg_error)
        .map(drop)
    }
}

/// Drops the final feed entries older than `before` (Unix ms) and every entry before them, and
/// raises the floor under which a cursor is expired.
async fn prune_feed(c: &Conn<'_>, before: i64) -> Result<u64, StoreError> {
    let row = c
        .query_opt(
            "SELECT xid::text, seq FROM feed \
             WHERE at < $1 AND xid < pg_snapshot_xmin(pg_current_snapshot()) \
             ORDER BY xid DESC, seq DESC LIMIT 1",
            &[&before],
        )
        .await
        .map_err(pg_error)?
        .map(|row| {
            Ok::<_, tokio_postgres::Error>((
                row.try_get::<_, String>(0)?,
                row.try_get::<_, i64>(1)?,
            ))
        })
        .transpose()
        .map_err(pg_error)?;
    let Some((xid, seq)) = row else {
        return Ok(0);
    };
    let dropped = c
        .execute(
            "DELETE FROM feed WHERE (xid, seq) <= ($1::text::xid8, $2)",
            &[&xid, &seq],
        )
        .await
        .map_err(pg_error)?;
    c.execute(
        "UPDATE feed_state SET floor_xid = $1::text::xid8, floor_seq = $2 \
         WHERE (floor_xid, floor_seq) < ($1::text::xid8, $2)",
        &[&xid, &seq],
    )
    .await
    .map_err(pg_error)?;
    Ok(dropped)
}
