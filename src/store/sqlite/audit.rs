//! The audit chain on SQLite: each change is chained where the writer makes it, in the
//! statement's savepoint ([`append`]): the writes that change a call call [`event`],
//! [`created`] or [`outcome`] (`writes.rs`: `append_event`, `insert`, `record_outcome`; the
//! writer's records written behind; `edits.rs`), those of standing approvals, accepted upstream
//! changes and checkpoints [`other`]. One writer, so the head read here is the head, and a
//! savepoint rolled back takes its entries with it: a record never commits without its entry,
//! nor an entry without its record. No trigger and no JSON in SQL: the call path pays only for
//! the entry itself (its canonical JSON, its hashes, its row).

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::backend;
use crate::store::audit::{CallChange, Change, ExportOp, Pending, chain};
use crate::store::record::{Prepared, PreparedCall};
use crate::store::{AuditEntry, AuditPath, CallStatus, ExportState, NewCheckpoint, StoreError};

/// Chains `changes` (time, call, change) after the head, in order.
pub(super) fn append(
    conn: &Connection,
    changes: Vec<(i64, Option<String>, Change)>,
) -> Result<(), StoreError> {
    if changes.is_empty() {
        return Ok(());
    }
    let head = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
        .and_then(|mut st| {
            st.query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(backend)?;
    let pending = changes
        .into_iter()
        .map(|(at, call_id, change)| Pending {
            pos: 0,
            at,
            call_id,
            change,
        })
        .collect();
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO audit (seq, at, call_id, entry, hash, covers) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(backend)?;
    for done in chain(head, pending) {
        insert
            .execute(params![
                done.seq,
                done.at,
                done.call_id,
                done.entry,
                done.hash,
                done.covers
            ])
            .map_err(backend)?;
    }
    Ok(())
}

/// Whether the record of `call` is the one just written (its id is not another call's).
pub(super) fn holds(conn: &Connection, call: &PreparedCall) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM calls WHERE call_id = ?1 AND created_at = ?2 AND input = ?3")
        .and_then(|mut st| {
            st.query_row(params![call.call_id, call.created_at, call.input], |_| {
                Ok(())
            })
            .optional()
        })
        .map(|found| found.is_some())
        .map_err(backend)
}

/// Whether an event's kind carries the call's output: a completion.
fn completes(kind: &str) -> bool {
    kind == "completed" || kind == "completed_externally"
}

/// The `created` change of `call`, as inserted; with its status, attempts and output when it
/// was inserted already `completed` (one entry records both: `chain::write_call_event`).
fn created(call: &PreparedCall, completed: Option<&Prepared>) -> (i64, Option<String>, Change) {
    let change = CallChange {
        kind: "created".into(),
        actor: call.caller.clone(),
        tool: Some(call.tool.clone()),
        effect: Some(call.effect.into()),
        input: Some(call.input.clone()),
        status: completed.map(|done| done.status.as_str().into()),
        attempts: completed.map(|done| i64::from(done.attempts)),
        output: completed.and_then(|done| done.output.clone()),
        ..CallChange::default()
    };
    (
        call.created_at,
        Some(call.call_id.clone()),
        Change::Call(Box::new(change)),
    )
}

/// The changes of `call`, just inserted, finished with `outcome` when it has one, pushed onto
/// `changes`: `created`, then the outcome's. A call inserted already completed (every read
/// record) is one entry: its creation and its outcome are one write.
pub(super) fn inserted(
    changes: &mut Vec<(i64, Option<String>, Change)>,
    call: &PreparedCall,
    outcome: Option<&Prepared>,
) {
    match outcome {
        Some(done) if done.status == CallStatus::Completed => {
            changes.push(created(call, Some(done)))
        }
        Some(outcome) => {
            changes.push(created(call, None));
            changes.push(self::outcome(&call.call_id, &call.tool, outcome));
        }
        None => changes.push(created(call, None)),
    }
}

/// The change of the call `call_id` of `tool` into `outcome`.
fn outcome(call_id: &str, tool: &str, outcome: &Prepared) -> (i64, Option<String>, Change) {
    let kind = outcome.status.as_str();
    let details = outcome.event_details();
    let change = CallChange {
        kind: kind.into(),
        details,
        tool: Some(tool.into()),
        status: Some(kind.into()),
        attempts: Some(i64::from(outcome.attempts)),
        output: outcome.output.clone().filter(|_| completes(kind)),
        error: outcome.error.clone(),
        ..CallChange::default()
    };
    (
        outcome.at,
        Some(call_id.to_owned()),
        Change::Call(Box::new(change)),
    )
}

/// Chains the change of the running call `call_id` into `outcome`, just recorded.
pub(super) fn recorded_outcome(
    conn: &Connection,
    call_id: &str,
    recorded: &Prepared,
) -> Result<(), StoreError> {
    let tool: String = conn
        .prepare_cached("SELECT tool FROM calls WHERE call_id = ?1")
        .and_then(|mut st| st.query_row([call_id], |row| row.get(0)))
        .map_err(backend)?;
    append(conn, vec![outcome(call_id, &tool, recorded)])
}

/// Chains the event `kind` of the call `call_id` (by `actor`, with `details`), the call's
/// columns as the change left them.
pub(super) fn event(
    conn: &Connection,
    call_id: &str,
    at: i64,
    kind: &str,
    actor: (Option<&str>, Option<&str>),
    details: Option<String>,
) -> Result<(), StoreError> {
    let columns = conn
        .prepare_cached(
            "SELECT tool, status, attempts, output, error FROM calls WHERE call_id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([call_id], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, Option<String>>(3)?,
                    row.get::<_, Option<String>>(4)?,
                ))
            })
            .optional()
        })
        .map_err(backend)?;
    let Some((tool, status, attempts, output, error)) = columns else {
        return Ok(());
    };
    let change = CallChange {
        kind: kind.into(),
        actor: actor.0.map(str::to_owned),
        actor_name: actor.1.map(str::to_owned),
        details,
        tool: Some(tool),
        status: Some(status),
        attempts: Some(attempts),
        output: output.filter(|_| completes(kind)),
        error,
        ..CallChange::default()
    };
    append(
        conn,
        vec![(at, Some(call_id.to_owned()), Change::Call(Box::new(change)))],
    )
}

/// [`event`] from an event as stored in a call's history (JSON text).
pub(super) fn stored_event(conn: &Connection, call_id: &str, text: &str) -> Result<(), StoreError> {
    let stored: Value = serde_json::from_str(text)
        .map_err(|err| StoreError::Corrupt(format!("an event is not JSON: {err}")))?;
    let details = stored.get("details").map(Value::to_string);
    event(
        conn,
        call_id,
        stored["at"].as_i64().unwrap_or_default(),
        stored["kind"].as_str().unwrap_or("unknown"),
        (stored["actor"].as_str(), stored["actor_name"].as_str()),
        details,
    )
}

/// Chains a change of no call's history: `source` is its JSON, naming its `kind`.
pub(super) fn other(conn: &Connection, at: i64, source: Value) -> Result<(), StoreError> {
    append(conn, vec![(at, None, Change::Other(source.to_string()))])
}

/// Appends a checkpoint, and keeps its key published.
pub(super) fn checkpoint(
    conn: &Connection,
    checkpoint: &NewCheckpoint,
    now: i64,
) -> Result<(), StoreError> {
    let source = crate::store::audit::checkpoint_source(checkpoint);
    append(conn, vec![(now, None, Change::Other(source))])?;
    conn.prepare_cached("UPDATE signing_keys SET retire_at = ?2 WHERE id = ?1")
        .and_then(|mut st| st.execute(params![checkpoint.kid, i64::MAX]))
        .map_err(backend)?;
    Ok(())
}

fn entry(row: &rusqlite::Row<'_>) -> rusqlite::Result<AuditEntry> {
    Ok(AuditEntry {
        seq: row.get(0)?,
        entry: row.get(1)?,
        hash: row.get(2)?,
    })
}

/// Chained entries numbered above `after`, at most `limit`.
pub(super) fn entries(
    conn: &Connection,
    after: i64,
    limit: u32,
) -> Result<Vec<AuditEntry>, StoreError> {
    conn.prepare_cached("SELECT seq, entry, hash FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2")
        .and_then(|mut st| st.query_map(params![after, limit], entry)?.collect())
        .map_err(backend)
}

/// The last chained entry.
pub(super) fn head(conn: &Connection) -> Result<Option<AuditEntry>, StoreError> {
    conn.prepare_cached("SELECT seq, entry, hash FROM audit ORDER BY seq DESC LIMIT 1")
        .and_then(|mut st| st.query_row([], entry).optional())
        .map_err(backend)
}

/// The call's entries, through the first checkpoint covering its last (at most `limit`).
pub(super) fn path(
    conn: &Connection,
    call_id: &str,
    limit: u32,
) -> Result<Option<AuditPath>, StoreError> {
    let call_entries: Vec<i64> = conn
        .prepare_cached("SELECT seq FROM audit WHERE call_id = ?1 AND seq IS NOT NULL ORDER BY seq")
        .and_then(|mut st| st.query_map([call_id], |row| row.get(0))?.collect())
        .map_err(backend)?;
    let (Some(&first), Some(&last)) = (call_entries.first(), call_entries.last()) else {
        return Ok(None);
    };
    let checkpoint: Option<i64> = conn
        .prepare_cached("SELECT min(seq) FROM audit WHERE covers >= ?1")
        .and_then(|mut st| st.query_row([last], |row| row.get(0)))
        .map_err(backend)?;
    let end = checkpoint.unwrap_or(i64::MAX);
    let entries: Vec<AuditEntry> = conn
        .prepare_cached(
            "SELECT seq, entry, hash FROM audit WHERE seq >= ?1 AND seq <= ?2 \
             ORDER BY seq LIMIT ?3",
        )
        .and_then(|mut st| st.query_map(params![first, end, limit], entry)?.collect())
        .map_err(backend)?;
    let prev: Option<String> = conn
        .prepare_cached("SELECT hash FROM audit WHERE seq = ?1")
        .and_then(|mut st| st.query_row([first - 1], |row| row.get(0)).optional())
        .map_err(backend)?;
    Ok(Some(AuditPath::new(
        prev,
        entries,
        call_entries,
        checkpoint,
    )))
}

/// An export's claim, or its attempt settled (`ExportOp`).
pub(super) fn export(conn: &Connection, op: &ExportOp) -> Result<Option<i64>, StoreError> {
    match op {
        ExportOp::Claim {
            sink,
            owner,
            now,
            until,
        } => {
            conn.prepare_cached(
                "INSERT INTO audit_exports (sink, after_seq, delivered, failures) \
                 VALUES (?1, 0, 0, 0) ON CONFLICT (sink) DO NOTHING",
            )
            .and_then(|mut st| st.execute([sink]))
            .map_err(backend)?;
            conn.prepare_cached(
                "UPDATE audit_exports SET claimed_by = ?2, claimed_until = ?4 WHERE sink = ?1 \
                 AND (claimed_by IS NULL OR claimed_by = ?2 OR claimed_until < ?3) \
                 RETURNING after_seq",
            )
            .and_then(|mut st| {
                st.query_row(params![sink, owner, now, until], |row| row.get(0))
                    .optional()
            })
            .map_err(backend)
        }
        ExportOp::Release { sink, owner } => {
            conn.prepare_cached(
                "UPDATE audit_exports SET claimed_by = NULL, claimed_until = NULL \
                 WHERE sink = ?1 AND claimed_by = ?2",
            )
            .and_then(|mut st| st.execute(params![sink, owner]))
            .map_err(backend)?;
            Ok(None)
        }
        ExportOp::Settle {
            sink,
            owner,
            after,
            delivered,
            error,
            now,
        } => {
            conn.prepare_cached(
                "UPDATE audit_exports SET after_seq = max(after_seq, ?3), \
                 delivered = delivered + ?4, failures = failures + (?5 IS NOT NULL), \
                 last_error = ?5, last_at = ?6 WHERE sink = ?1 AND claimed_by = ?2",
            )
            .and_then(|mut st| st.execute(params![sink, owner, after, delivered, error, now]))
            .map_err(backend)?;
            Ok(None)
        }
    }
}

/// Every export's state.
pub(super) fn exports(conn: &Connection) -> Result<Vec<ExportState>, StoreError> {
    conn.prepare_cached(
        "SELECT sink, after_seq, delivered, failures, last_error, last_at FROM audit_exports \
         ORDER BY sink",
    )
    .and_then(|mut st| {
        st.query_map([], |row| {
            Ok(ExportState {
                sink: row.get(0)?,
                after_seq: row.get(1)?,
                delivered: row.get(2)?,
                failures: row.get(3)?,
                last_error: row.get(4)?,
                last_at: row.get(5)?,
            })
        })?
        .collect()
    })
    .map_err(backend)
}
