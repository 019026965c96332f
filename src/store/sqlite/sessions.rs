//! Inbox sessions on SQLite: written by the writer thread like every other write (so the one
//! writer stays the file's only writer), read on the pool.

use rusqlite::{Connection, OptionalExtension, params};

use super::backend;
use crate::store::rows::read_session;
use crate::store::{InboxSession, StoreError};

/// Records `session`.
pub(super) fn create(conn: &Connection, session: &InboxSession) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO inbox_sessions (id_sha256, key_name, role, key_fingerprint, created_at, \
         expires_at, display_name, decides) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .and_then(|mut st| {
        st.execute(params![
            session.id_sha256,
            session.key_name,
            session.role,
            session.key_fingerprint,
            session.created_at.0,
            session.expires_at.0,
            session.display_name,
            session.decides
        ])
    })
    .map_err(backend)
    .map(drop)
}

/// The unexpired session found by `id_sha256`.
pub(super) fn find(
    conn: &Connection,
    id_sha256: &str,
    now: i64,
) -> Result<Option<InboxSession>, StoreError> {
    conn.prepare_cached(
        "SELECT id_sha256, key_name, role, key_fingerprint, created_at, expires_at, \
         display_name, decides FROM inbox_sessions WHERE id_sha256 = ?1 AND expires_at > ?2",
    )
    .and_then(|mut st| {
        st.query_row(params![id_sha256, now], |row| read_session(row))
            .optional()
    })
    .map_err(backend)
}

/// Ends the session found by `id_sha256`; how many rows went (0 or 1).
pub(super) fn delete(conn: &Connection, id_sha256: &str) -> Result<u64, StoreError> {
    conn.prepare_cached("DELETE FROM inbox_sessions WHERE id_sha256 = ?1")
        .and_then(|mut st| st.execute([id_sha256]))
        .map_err(backend)
        .map(|n| n as u64)
}

/// Drops the sessions expired by `now`.
pub(super) fn prune(conn: &Connection, now: i64) -> Result<u64, StoreError> {
    conn.prepare_cached("DELETE FROM inbox_sessions WHERE expires_at <= ?1")
        .and_then(|mut st| st.execute([now]))
        .map_err(backend)
        .map(|n| n as u64)
}
