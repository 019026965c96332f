//! Attestations' signing keys on SQLite: stored by the writer thread like every other write (so
//! its insert-unless-the-period-has-one cannot race), read on the pool.

use rusqlite::{Connection, Row, params};

use super::backend;
use crate::store::{SigningKey, StoreError, Timestamp};

const COLUMNS: &str = "id, epoch, alg, private_der, public, created_at, signs_until, retire_at";

fn read(row: &Row<'_>) -> rusqlite::Result<SigningKey> {
    Ok(SigningKey {
        id: row.get(0)?,
        epoch: row.get(1)?,
        alg: row.get(2)?,
        private_der: row.get(3)?,
        public: row.get(4)?,
        created_at: Timestamp(row.get(5)?),
        signs_until: Timestamp(row.get(6)?),
        retire_at: Timestamp(row.get(7)?),
    })
}

/// Stores `key` unless its period has a key; the period's key.
pub(super) fn make(conn: &Connection, key: &SigningKey) -> Result<SigningKey, StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO signing_keys ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (epoch) DO NOTHING"
    ))
    .and_then(|mut st| {
        st.execute(params![
            key.id,
            key.epoch,
            key.alg,
            key.private_der,
            key.public,
            key.created_at.0,
            key.signs_until.0,
            key.retire_at.0
        ])
    })
    .map_err(backend)?;
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM signing_keys WHERE epoch = ?1"
    ))
    .and_then(|mut st| st.query_row([key.epoch], read))
    .map_err(backend)
}

/// The keys not retired by `now`, newest first.
pub(super) fn live(conn: &Connection, now: i64) -> Result<Vec<SigningKey>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM signing_keys WHERE retire_at > ?1 ORDER BY epoch DESC"
    ))
    .and_then(|mut st| st.query_map([now], read)?.collect())
    .map_err(backend)
}

/// Drops the keys retired by `now`.
pub(super) fn prune(conn: &Connection, now: i64) -> Result<u64, StoreError> {
    conn.prepare_cached("DELETE FROM signing_keys WHERE retire_at <= ?1")
        .and_then(|mut st| st.execute([now]))
        .map_err(backend)
        .map(|n| n as u64)
}
