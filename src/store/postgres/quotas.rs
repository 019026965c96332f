//! Quota buckets shared by every replica: a bucket is a row holding its theoretical arrival
//! time (see `crate::dispatch::quota`), paid by one conditional upsert on the database's clock,
//! so that every replica's calls draw on the same bucket, exactly, whatever the replicas' own
//! clocks say. Run on the pool, beside the writer: a bucket is no record of a call, and its
//! table is unlogged (`migrations/postgres/0005_quota_buckets.sql`).

use super::pg_error;
use super::reads::Conn;
use crate::store::{QuotaSpend, StoreError};

/// Pays `$3` (the interval) from the bucket unless its time would then run more than `$4` (the
/// tolerance) ahead of now, by the database's clock in microseconds: a new row (a bucket never
/// paid from is full), or the row moved by one interval. `EXCLUDED.tat - $3` is now, as the
/// statement read it once.
const SPEND: &str = "INSERT INTO quota_buckets AS b (principal, scope, tat) \
     SELECT $1, $2, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + $3 \
     ON CONFLICT (principal, scope) DO UPDATE \
       SET tat = GREATEST(b.tat, EXCLUDED.tat - $3) + $3 \
       WHERE GREATEST(b.tat, EXCLUDED.tat - $3) + $3 - (EXCLUDED.tat - $3) <= $4 \
     RETURNING b.tat";

/// A bucket's time, and now, by the database's clock.
const READ: &str = "SELECT tat, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
     FROM quota_buckets WHERE principal = $1 AND scope = $2";

/// Pays one call from a bucket, or says how long until it can.
pub(super) async fn spend(
    c: &Conn<'_>,
    principal: &str,
    scope: &str,
    interval_us: i64,
    tolerance_us: i64,
) -> Result<QuotaSpend, StoreError> {
    let paid = c
        .query_opt(SPEND, &[&principal, &scope, &interval_us, &tolerance_us])
        .await
        .map_err(pg_error)?;
    if paid.is_some() {
        return Ok(QuotaSpend::Paid);
    }
    // Refused: the wait is read afresh (after any payment that raced this one), so it is never
    // shorter than the bucket asks.
    let row = c
        .query_opt(READ, &[&principal, &scope])
        .await
        .map_err(pg_error)?;
    let wait_us = row
        .map(|row| {
            let (tat, now): (i64, i64) = (row.get(0), row.get(1));
            tat.max(now) + interval_us - now - tolerance_us
        })
        .unwrap_or(0);
    Ok(QuotaSpend::Short {
        wait_us: wait_us.max(1),
    })
}

/// Gives one call back to a bucket.
pub(super) async fn refund(
    c: &Conn<'_>,
    principal: &str,
    scope: &str,
    interval_us: i64,
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE quota_buckets SET tat = tat - $3 WHERE principal = $1 AND scope = $2",
        &[&principal, &scope, &interval_us],
    )
    .await
    .map_err(pg_error)
    .map(drop)
}
