//! Decision links' keys on SQLite: stored by the writer thread like every other write (so its
//! insert-unless-the-period-has-one cannot race), read on the pool.

use rusqlite::{Connection, Row, params};

use super::backend;
use crate::store::{LinkKey, StoreError, Timestamp};

const COLUMNS: &str = "id, epoch, secret, created_at, signs_until, retire_at";

fn read(row: &Row<'_>) -> rusqlite::Result<LinkKey> {
    Ok(LinkKey {
        id: row.get(0)?,
        epoch: row.get(1)?,
        secret: row.get(2)?,
        created_at: Timestamp(row.get(3)?),
        signs_until: Timestamp(row.get(4)?),
        retire_at: Timestamp(row.get(5)?),
    })
}

/// Stores `key` unless its period has a key; the period's key.
pub(super) fn make(conn: &Connection, key: &LinkKey) -> Result<LinkKey, StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO link_keys ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (epoch) DO NOTHING"
    ))
    .and_then(|mut st| {
        st.execute(params![
            key.id,
            key.epoch,
            key.secret,
            key.created_at.0,
            key.signs_until.0,
            key.retire_at.0
        ])
    })
    .map_err(backend)?;
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM link_keys WHERE epoch = ?1"))
        .and_then(|mut st| st.query_row([key.epoch], read))
        .map_err(backend)
}

/// The keys not retired by `now`, newest first.
pub(super) fn live(conn: &Connection, now: i64) -> Result<Vec<LinkKey>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM link_keys WHERE retire_at > ?1 ORDER BY epoch DESC"
    ))
    .and_then(|mut st| st.query_map([now], read)?.collect())
    .map_err(backend)
}

/// Drops the keys retired by `now`.
pub(super) fn prune(conn: &Connection, now: i64) -> Result<u64, StoreError> {
    conn.prepare_cached("DELETE FROM link_keys WHERE retire_at <= ?1")
        .and_then(|mut st| st.execute([now]))
        .map_err(backend)
        .map(|n| n as u64)
}
