//! Inbox sessions on PostgreSQL, shared by every replica: written in the writer's batch
//! transaction, read on the pool. A session made on one replica is found on all of them.

use super::pg_error;
use super::reads::Conn;
use crate::store::rows::read_session;
use crate::store::{InboxSession, StoreError};

/// Records `session`.
pub(super) async fn create(c: &Conn<'_>, session: &InboxSession) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO inbox_sessions (id_sha256, key_name, role, key_fingerprint, created_at, \
         expires_at, display_name, decides) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &session.id_sha256,
            &session.key_name,
            &session.role,
            &session.key_fingerprint,
            &session.created_at.0,
            &session.expires_at.0,
            &session.display_name,
            &session.decides,
        ],
    )
    .await
    .map_err(pg_error)
    .map(drop)
}

/// The unexpired session found by `id_sha256`.
pub(super) async fn find(
    c: &Conn<'_>,
    id_sha256: &str,
    now: i64,
) -> Result<Option<InboxSession>, StoreError> {
    let row = c
        .query_opt(
            "SELECT id_sha256, key_name, role, key_fingerprint, created_at, expires_at, \
             display_name, decides FROM inbox_sessions WHERE id_sha256 = $1 AND expires_at > $2",
            &[&id_sha256, &now],
        )
        .await
        .map_err(pg_error)?;
    row.map(|row| read_session(&row))
        .transpose()
        .map_err(pg_error)
}

/// Ends the session found by `id_sha256`; how many rows went (0 or 1).
pub(super) async fn delete(c: &Conn<'_>, id_sha256: &str) -> Result<u64, StoreError> {
    c.execute(
        "DELETE FROM inbox_sessions WHERE id_sha256 = $1",
        &[&id_sha256],
    )
    .await
    .map_err(pg_error)
}

/// Drops the sessions expired by `now`.
pub(super) async fn prune(c: &Conn<'_>, now: i64) -> Result<u64, StoreError> {
    c.execute("DELETE FROM inbox_sessions WHERE expires_at <= $1", &[&now])
        .await
        .map_err(pg_error)
}
