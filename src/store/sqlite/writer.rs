//! The writer thread: the one connection that writes, batching what it is sent.
//!
//! It takes every write waiting in its queue (up to [`MAX_BATCH`]), applies each in its own
//! savepoint inside one transaction, commits once (one fsync for the whole batch: group commit),
//! and only then answers each caller. So a write that returned is on disk, and concurrent calls
//! share the cost of the disk's flush instead of queueing behind one flush each. Records written
//! behind their answer ([`Behind`]) go with the next commit, or wait at most [`BEHIND_WINDOW`]
//! for one; they are inserted here, many to a statement. While the store cannot take them they
//! are kept (see [`Behind::keep`]) and tried again every [`RETRY_KEPT`]. The statements of each
//! write are in `writes.rs`.

use std::sync::{Mutex, mpsc};

use rusqlite::{Connection, TransactionBehavior};

use super::writes::{
    INSERT_CALL, escalate, execute_insert, insert, prune_feed, reconcile, record_outcome, rerun,
    resolve,
};
use super::{backend, cannot_write, link_keys, sessions, signing_keys, webhooks};
use crate::store::queue::{self, BEHIND_WINDOW, Batch, Behind, Msg, RETRY_KEPT, Reply, WriteOp};
use crate::store::record::{DERIVED_EVENTS, Prepared, PreparedCall};
use crate::store::{CallStatus, StoreError, Timestamp};

/// The most writes someone waits for committed in one transaction.
const MAX_BATCH: usize = 512;

/// Read records written behind their answer.
type Records = Vec<(PreparedCall, Prepared)>;

/// The writer thread: batch, apply, commit once, answer. Ends when every sender is gone, after
/// committing what is left.
pub(super) fn write_loop(
    mut conn: Connection,
    queue: mpsc::Receiver<Msg>,
    behind: &Mutex<Behind>,
    feed: &tokio::sync::watch::Sender<u64>,
) {
    let mut open = true;
    // Read records kept while the disk was full are tried again on a timer too, not only when
    // the next write comes.
    let mut kept = false;
    while open {
        let mut jobs = Vec::new();
        let next = if kept {
            match queue.recv_timeout(RETRY_KEPT) {
                Err(mpsc::RecvTimeoutError::Timeout) => Ok(Msg::BehindFull),
                Err(mpsc::RecvTimeoutError::Disconnected) => Err(mpsc::RecvError),
                Ok(msg) => Ok(msg),
            }
        } else {
            queue.recv()
        };
        match next {
            Ok(Msg::Write(job)) => jobs.push(job),
            // Records written behind wait for company for a while, unless a write someone
            // waits for (or a full queue) comes first.
            Ok(Msg::BehindWaiting) => {
                let deadline = std::time::Instant::now() + BEHIND_WINDOW;
                loop {
                    match queue
                        .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
                    {
                        Ok(Msg::Write(job)) => {
                            jobs.push(job);
                            break;
                        }
                        Ok(Msg::BehindWaiting) => continue,
                        Ok(Msg::BehindFull) | Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
            }
            Ok(Msg::BehindFull) => {}
            Err(mpsc::RecvError) => open = false,
        }
        while open && jobs.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(Msg::Write(job)) => jobs.push(job),
                Ok(Msg::BehindWaiting | Msg::BehindFull) => {}
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => open = false,
            }
        }
        let Some(Batch {
            ops,
            replies,
            records,
            fed,
        }) = Batch::take(jobs, behind)
        else {
            continue;
        };
        let (writes, started) = (ops.len() + records.len(), std::time::Instant::now());
        let (results, unwritten) = apply_batch(&mut conn, ops, records);
        crate::metrics::store_batch(writes, started.elapsed());
        kept = !unwritten.is_empty();
        Behind::keep(behind, unwritten);
        // Readers of the feed in this process hear of the commit at once.
        if fed {
            feed.send_modify(|changes| *changes = changes.wrapping_add(1));
        }
        queue::answer(replies, results, writes);
    }
}

/// Applies every op in one transaction, each inside its own savepoint so one failing op does not
/// undo the others, and inserts the records written behind: each op's result, and the records to
/// keep for the next batch. If the transaction fails as a whole (it cannot begin or commit, or
/// SQLite rolled it back), every op fails and the records are kept: such a failure is the
/// store's, not theirs (a full disk, an I/O error), and they are tried again with the next
/// batch (at most [`crate::store::queue::MAX_BEHIND_KEPT`] of them).
fn apply_batch(
    conn: &mut Connection,
    ops: Vec<WriteOp>,
    records: Records,
) -> (Vec<Result<Reply, StoreError>>, Records) {
    let count = ops.len();
    let fail_all = |err: StoreError, records: Records| {
        tracing::error!(error = %err, read_records_kept = records.len(), "store commit failed");
        let results = (0..count).map(|_| Err(err.clone())).collect();
        (results, records)
    };
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(err) => return fail_all(backend(err), records),
    };
    let now = Timestamp::now().0;
    let mut results = Vec::with_capacity(count);
    for op in ops {
        let result = match tx.savepoint() {
            Ok(sp) => match apply(&sp, op, now) {
                Ok(reply) => sp.commit().map(|()| reply).map_err(backend),
                // Dropping the savepoint rolls back what the op did.
                Err(err) => Err(err),
            },
            Err(err) => Err(backend(err)),
        };
        match result {
            // SQLite rolled the whole transaction back, as it may when a statement meets a full
            // disk or an I/O error: nothing of the batch is written, and what came after would
            // run on its own, outside it.
            Err(err) if tx.is_autocommit() => return fail_all(err, records),
            result => results.push(result),
        }
    }
    let reads = insert_read_records(&tx, &records);
    if let Reads::RolledBack(err) = reads {
        return fail_all(err, records);
    }
    match tx.commit() {
        Ok(()) if matches!(reads, Reads::Written) => (results, Vec::new()),
        Ok(()) => (results, records),
        Err(err) => fail_all(backend(err), records),
    }
}

fn apply(conn: &Connection, op: WriteOp, now: i64) -> Result<Reply, StoreError> {
    match op {
        WriteOp::Insert(call, outcome) => insert(conn, call, outcome, now).map(Reply::Inserted),
        WriteOp::Finish {
            call_id,
            run,
            outcome,
        } => Ok(match record_outcome(conn, &call_id, run, outcome, now)? {
            None => Reply::Done,
            Some(call) => Reply::Late(Box::new(call)),
        }),
        WriteOp::Rerun(call_id) => {
            rerun(conn, &call_id, now).map(|rerun| Reply::Rerun(rerun.map(Box::new)))
        }
        WriteOp::Resolve(token, resolution, actor) => {
            resolve(conn, &token, resolution, &actor, now)
                .map(|resolved| Reply::Resolved(Box::new(resolved)))
        }
        WriteOp::Reconcile(call_id, settlement, actor) => {
            reconcile(conn, &call_id, settlement, &actor, now)
                .map(|reconciled| Reply::Reconciled(Box::new(reconciled)))
        }
        WriteOp::PruneFeed(before) => prune_feed(conn, before).map(Reply::Pruned),
        WriteOp::Escalate { tool, created_by } => {
            escalate(conn, &tool, created_by, now).map(Reply::Escalated)
        }
        WriteOp::EnqueueDeliveries {
            from,
            to,
            deliveries,
        } => webhooks::enqueue(conn, from.as_deref(), &to, &deliveries, now).map(Reply::Enqueued),
        WriteOp::ClaimDeliveries { limit, lease_ms } => {
            webhooks::claim(conn, limit, lease_ms, now).map(Reply::Claimed)
        }
        WriteOp::SettleDelivery(id, result) => {
            webhooks::settle(conn, id, &result, now).map(|()| Reply::Done)
        }
        WriteOp::RetryDelivery(id) => {
            webhooks::retry(conn, id, now).map(|delivery| Reply::Delivery(delivery.map(Box::new)))
        }
        WriteOp::CreateSession(session) => sessions::create(conn, &session).map(|()| Reply::Done),
        WriteOp::DeleteSession(id) => sessions::delete(conn, &id).map(Reply::Pruned),
        WriteOp::PruneSessions(now) => sessions::prune(conn, now).map(Reply::Pruned),
        WriteOp::Standing(op) => {
            super::standing::apply(conn, *op, now).map(|reply| Reply::Standing(Box::new(reply)))
        }
        WriteOp::LinkKey(key) => {
            link_keys::make(conn, &key).map(|key| Reply::LinkKey(Box::new(key)))
        }
        WriteOp::PruneLinkKeys(now) => link_keys::prune(conn, now).map(Reply::Pruned),
        WriteOp::Pins(op) => super::pins::apply(conn, *op, now),
        WriteOp::SigningKey(key) => {
            signing_keys::make(conn, &key).map(|key| Reply::SigningKey(Box::new(key)))
        }
        WriteOp::PruneSigningKeys(now) => signing_keys::prune(conn, now).map(Reply::Pruned),
        WriteOp::Checkpoint(checkpoint) => {
            super::audit::checkpoint(conn, &checkpoint, now).map(|()| Reply::Done)
        }
        WriteOp::AuditExport(op) => super::audit::export(conn, &op).map(Reply::Export),
        WriteOp::Ping => Ok(Reply::Done),
    }
}

/// What became of the read records a batch inserts.
#[derive(Debug)]
enum Reads {
    /// Written, but for any that could not be for a reason of their own (logged as lost).
    Written,
    /// The disk had no room (or failed): none is written, and they are kept for the next batch.
    NoRoom,
    /// SQLite rolled the batch's whole transaction back on this error: nothing is written.
    RolledBack(StoreError),
}

/// Inserts the read records written behind, with their audit entries, in a savepoint of the
/// batch's transaction. A record that cannot be written for a reason of its own (its call id
/// taken) is logged as lost. No statement runs once SQLite has rolled the transaction back.
fn insert_read_records(conn: &Connection, records: &[(PreparedCall, Prepared)]) -> Reads {
    if records.is_empty() {
        return Reads::Written;
    }
    let rolled_back = |err: rusqlite::Error| Reads::RolledBack(backend(err));
    let (completed, others): (Vec<_>, Vec<_>) = records.iter().partition(|(call, outcome)| {
        outcome.status == CallStatus::Completed && call.idempotency_key.is_none()
    });
    // The records and their audit entries (each call's creation and outcome) are committed
    // together or not at all: one savepoint, rolled back (and the records logged as lost) when
    // the entries cannot be written.
    if let Err(err) = conn
        .prepare_cached("SAVEPOINT reads")
        .and_then(|mut st| st.execute([]))
    {
        if conn.is_autocommit() {
            return rolled_back(err);
        }
        if cannot_write(&err) {
            return Reads::NoRoom;
        }
        tracing::error!(error = %err, lost = records.len(), "read call records could not be written");
        return Reads::Written;
    }
    let mut no_room = false;
    let mut written: Vec<&(PreparedCall, Prepared)> = Vec::with_capacity(completed.len());
    let mut chunks = completed.chunks_exact(COMPLETED_READS_PER_INSERT);
    for chunk in chunks.by_ref() {
        let result = conn
            .prepare_cached(insert_completed_reads_sql(COMPLETED_READS_PER_INSERT))
            .and_then(|mut statement| {
                for (row, (call, outcome)) in chunk.iter().enumerate() {
                    bind_completed_read(
                        &mut statement,
                        row * COMPLETED_READ_PARAMS,
                        call,
                        outcome,
                    )?;
                }
                statement.raw_execute()
            });
        match result {
            Ok(n) if n == chunk.len() => written.extend(chunk.iter().copied()),
            Ok(n) => {
                tracing::error!(
                    lost = chunk.len() - n,
                    "read call records could not be written: their call ids are taken"
                );
                // Only those written get entries.
                let held = |call: &PreparedCall| super::audit::holds(conn, call).unwrap_or(false);
                written.extend(chunk.iter().copied().filter(|(call, _)| held(call)));
            }
            Err(err) if conn.is_autocommit() => return rolled_back(err),
            Err(err) if cannot_write(&err) => no_room = true,
            Err(err) => tracing::error!(
                error = %err,
                lost = chunk.len(),
                "read call records could not be written"
            ),
        }
    }
    let singles = chunks.remainder().iter().copied().map(|record| {
        let result =
            conn.prepare_cached(insert_completed_reads_sql(1))
                .and_then(|mut statement| {
                    bind_completed_read(&mut statement, 0, &record.0, &record.1)?;
                    statement.raw_execute()
                });
        (record, result)
    });
    let others = others.iter().copied().map(|record| {
        let result = conn
            .prepare_cached(INSERT_CALL)
            .and_then(|mut statement| execute_insert(&mut statement, &record.0, Some(&record.1)));
        (record, result)
    });
    for (record, result) in singles.chain(others) {
        match result {
            Err(err) if conn.is_autocommit() => return rolled_back(err),
            Err(err) if cannot_write(&err) => no_room = true,
            result => {
                if log_read_record_result(&record.0.call_id, result) {
                    written.push(record);
                }
            }
        }
    }
    let run = |sql: &str| conn.prepare_cached(sql).and_then(|mut st| st.execute([]));
    // Whether the records' audit entries are written too (`false`: the disk had no room).
    let appended = if no_room {
        Ok(false)
    } else {
        let mut changes = Vec::with_capacity(written.len());
        for (call, outcome) in &written {
            super::audit::inserted(&mut changes, call, Some(outcome));
        }
        super::audit::append(conn, changes).map(|()| true)
    };
    let rollback = || run("ROLLBACK TO reads").and_then(|_| run("RELEASE reads"));
    let (ended, reads) = match appended {
        Err(err) if conn.is_autocommit() => return Reads::RolledBack(err),
        Ok(true) => (run("RELEASE reads"), Reads::Written),
        Ok(false) | Err(StoreError::Unavailable(_)) => (rollback(), Reads::NoRoom),
        Err(err) => {
            tracing::error!(
                error = %err,
                lost = written.len(),
                "read call records could not be written: their audit entries could not be"
            );
            (rollback(), Reads::Written)
        }
    };
    match ended {
        Err(err) if conn.is_autocommit() => rolled_back(err),
        Err(err) => {
            tracing::error!(error = %err, "the read records' savepoint did not end");
            reads
        }
        Ok(_) => reads,
    }
}

/// Whether the record was written; logs why not.
fn log_read_record_result(call_id: &str, result: rusqlite::Result<usize>) -> bool {
    let error = match result {
        Ok(1) => return true,
        Ok(_) => "the call id is taken".to_owned(),
        Err(err) => err.to_string(),
    };
    tracing::error!(error, call_id, "a read call's record could not be written");
    false
}

/// How many completed reads one statement inserts: SQLite's work per statement (opening a
/// cursor on each of the table's B-trees and indexes, halting, resetting) is then shared.
const COMPLETED_READS_PER_INSERT: usize = 32;
/// The parameters [`bind_completed_read`] binds per row.
const COMPLETED_READ_PARAMS: usize = 10;

/// Binds one completed read's row as parameters `offset + 1 ..= offset + 10`.
fn bind_completed_read(
    statement: &mut rusqlite::Statement<'_>,
    offset: usize,
    call: &PreparedCall,
    outcome: &Prepared,
) -> rusqlite::Result<()> {
    statement.raw_bind_parameter(offset + 1, &call.call_id)?;
    statement.raw_bind_parameter(offset + 2, &call.tool)?;
    statement.raw_bind_parameter(offset + 3, call.effect)?;
    statement.raw_bind_parameter(offset + 4, &call.caller)?;
    statement.raw_bind_parameter(offset + 5, &call.input)?;
    statement.raw_bind_parameter(offset + 6, &outcome.output)?;
    statement.raw_bind_parameter(offset + 7, i64::from(call.attempts))?;
    statement.raw_bind_parameter(offset + 8, call.created_at)?;
    statement.raw_bind_parameter(offset + 9, outcome.at)?;
    statement.raw_bind_parameter(offset + 10, &call.trace)
}

/// [`INSERT_CALL`] for the most common row by far, a completed read written behind its answer,
/// `rows` (1 or [`COMPLETED_READS_PER_INSERT`]) at a time: what is the same in every such row is
/// part of the statement instead of bound each time.
fn insert_completed_reads_sql(rows: usize) -> &'static str {
    use std::sync::OnceLock;
    static ONE: OnceLock<String> = OnceLock::new();
    static CHUNK: OnceLock<String> = OnceLock::new();
    let cell = if rows == 1 { &ONE } else { &CHUNK };
    debug_assert!(rows == 1 || rows == COMPLETED_READS_PER_INSERT);
    cell.get_or_init(|| {
        let values: Vec<String> = (0..rows)
            .map(|row| {
                let p: Vec<String> = (1..=COMPLETED_READ_PARAMS)
                    .map(|n| format!("?{}", row * COMPLETED_READ_PARAMS + n))
                    .collect();
                format!(
                    "({}, {}, {}, {}, 'completed', {}, {}, NULL, NULL, {}, {}, {}, \
                     '{DERIVED_EVENTS}', {})",
                    p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]
                )
            })
            .collect();
        format!(
            "INSERT INTO calls (call_id, tool, effect, caller, status, input, output, error, \
             idempotency_key, attempts, created_at, updated_at, events, trace) VALUES {} \
             ON CONFLICT DO NOTHING",
            values.join(", ")
        )
    })
}
