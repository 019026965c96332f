//! The audit chain on SQLite: the triggers of `migrations/sqlite/0018_audit.sql` capture each
//! change as a pending row, and the writer chains every pending row before it commits its batch
//! ([`chain_pending`]), so an entry is hashed in the transaction of the change it records. One
//! writer, so the order of rows is the order of commits, and the head read here is the head.

use rusqlite::{Connection, OptionalExtension, params};

use super::backend;
use crate::store::audit::{PENDING_COLUMNS, Pending, chain};
use crate::store::{AuditEntry, AuditPath, NewCheckpoint, StoreError};

/// Chains the pending rows, in the order they were written, into `audit`.
pub(super) fn chain_pending(conn: &Connection) -> Result<(), StoreError> {
    let pending: Vec<Pending> = conn
        .prepare_cached(&format!(
            "SELECT {PENDING_COLUMNS} FROM audit_pending ORDER BY pos"
        ))
        .and_then(|mut st| {
            st.query_map([], |row| Pending::read(|i| row.get(i), |i| row.get(i)))?
                .collect()
        })
        .map_err(backend)?;
    let Some(last) = pending.last().map(|p| p.pos) else {
        return Ok(());
    };
    let head = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
        .and_then(|mut st| {
            st.query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(backend)?;
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
    conn.prepare_cached("DELETE FROM audit_pending WHERE pos <= ?1")
        .and_then(|mut st| st.execute([last]))
        .map_err(backend)?;
    Ok(())
}

/// Appends a checkpoint (chained with the batch), and keeps its key published.
pub(super) fn checkpoint(
    conn: &Connection,
    checkpoint: &NewCheckpoint,
    now: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT INTO audit_pending (at, source) VALUES (?1, ?2)")
        .and_then(|mut st| {
            st.execute(params![
                now,
                crate::store::audit::checkpoint_source(checkpoint)
            ])
        })
        .map_err(backend)?;
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
