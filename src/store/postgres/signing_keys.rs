//! Attestations' signing keys on PostgreSQL, shared by every replica: stored in the writer's batch
//! transaction, read on the pool. Two replicas making a period's key at once insert the same
//! `epoch`: the later insert waits for the first's commit on the unique index, then does
//! nothing, and reads the first's key back, so both sign with it.

use tokio_postgres::Row;

use super::pg_error;
use super::reads::Conn;
use crate::store::{SigningKey, StoreError, Timestamp};

const COLUMNS: &str = "id, epoch, alg, private_der, public, created_at, signs_until, retire_at";

fn read(row: &Row) -> Result<SigningKey, tokio_postgres::Error> {
    Ok(SigningKey {
        id: row.try_get(0)?,
        epoch: row.try_get(1)?,
        alg: row.try_get(2)?,
        private_der: row.try_get(3)?,
        public: row.try_get(4)?,
        created_at: Timestamp(row.try_get(5)?),
        signs_until: Timestamp(row.try_get(6)?),
        retire_at: Timestamp(row.try_get(7)?),
    })
}

/// Stores `key` unless its period has a key; the period's key.
pub(super) async fn make(c: &Conn<'_>, key: &SigningKey) -> Result<SigningKey, StoreError> {
    c.execute(
        &format!(
            "INSERT INTO signing_keys ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (epoch) DO NOTHING"
        ),
        &[
            &key.id,
            &key.epoch,
            &key.alg,
            &key.private_der,
            &key.public,
            &key.created_at.0,
            &key.signs_until.0,
            &key.retire_at.0,
        ],
    )
    .await
    .map_err(pg_error)?;
    let row = c
        .query_opt(
            &format!("SELECT {COLUMNS} FROM signing_keys WHERE epoch = $1"),
            &[&key.epoch],
        )
        .await
        .map_err(pg_error)?
        .ok_or_else(|| StoreError::Corrupt("the period's signing key is gone".into()))?;
    read(&row).map_err(pg_error)
}

/// The keys not retired by `now`, newest first.
pub(super) async fn live(c: &Conn<'_>, now: i64) -> Result<Vec<SigningKey>, StoreError> {
    let rows = c
        .query(
            &format!("SELECT {COLUMNS} FROM signing_keys WHERE retire_at > $1 ORDER BY epoch DESC"),
            &[&now],
        )
        .await
        .map_err(pg_error)?;
    rows.iter()
        .map(read)
        .collect::<Result<_, _>>()
        .map_err(pg_error)
}

/// Drops the keys retired by `now`.
pub(super) async fn prune(c: &Conn<'_>, now: i64) -> Result<u64, StoreError> {
    c.execute("DELETE FROM signing_keys WHERE retire_at <= $1", &[&now])
        .await
        .map_err(pg_error)
}
