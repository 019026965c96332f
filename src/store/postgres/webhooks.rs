//! The webhook outbox on PostgreSQL: its cursor along the feed and its deliveries, shared by
//! every replica.
//!
//! The writes ([`enqueue`], [`claim`], [`settle`], [`retry`]) run in the writer's batch
//! transaction; the reads ([`cursor`], [`list`], [`disabled_webhooks`]) on the pool. Replicas
//! race for both kinds of work, and row locks decide:
//! - moving the cursor is a compare-and-set: a conditional `UPDATE` (or, for the first move, an
//!   `INSERT ... ON CONFLICT DO NOTHING`). A replica racing another waits for its row lock, then
//!   finds the cursor moved (or the row there) and changes nothing, so one of them creates the
//!   deliveries of the entries it read and the others return `false`;
//! - a claim locks the due deliveries it takes with `FOR UPDATE SKIP LOCKED`, so a claim of
//!   another replica still in flight is skipped rather than waited for, and sets their lease
//!   (`claimed_until`) in the same statement: two replicas never claim one delivery, and one
//!   whose claimant died is claimable again once its lease is over.

use tokio_postgres::Row;

use super::pg_error;
use super::reads::Conn;
use crate::store::record::{delivery_receipt, settled_delivery};
use crate::store::rows::{DELIVERY_COLUMNS, RawDelivery};
use crate::store::{
    Delivery, DeliveryPage, DeliveryResult, DeliveryStatus, FeedCursor, NewDelivery, StoreError,
};

fn decode_all(rows: &[Row]) -> Result<Vec<Delivery>, StoreError> {
    rows.iter()
        .map(|row| RawDelivery::read(row).map_err(pg_error)?.decode())
        .collect()
}

/// The first move of the cursor: one row, inserted by whoever gets there first.
const START_CURSOR: &str = "INSERT INTO webhook_outbox (id, cursor, updated_at) \
     VALUES (1, $1, $2) ON CONFLICT DO NOTHING";

/// Every later move: conditional on the cursor being where the mover read from.
const MOVE_CURSOR: &str = "UPDATE webhook_outbox SET cursor = $2, updated_at = $3 \
     WHERE id = 1 AND cursor = $1";

/// Creates deliveries from `unnest` arrays, pending and due now, in the order given.
const INSERT_DELIVERIES: &str = "INSERT INTO webhook_deliveries (webhook, message_id, type, \
     call_id, body, status, attempts, next_attempt_at, created_at, updated_at, channel, \
     recipient) \
     SELECT u.webhook, u.message_id, u.type, u.call_id, u.body, 'pending', 0, $6, $6, $6, \
       u.channel, u.recipient \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $7::text[], \
       $8::text[]) WITH ORDINALITY \
       AS u(webhook, message_id, type, call_id, body, channel, recipient, n) \
     ORDER BY u.n";

/// Moves the outbox's cursor from `from` (`None`: it has none yet) to `to` and creates
/// `deliveries`; `false`, writing nothing, when the cursor is not `from` (another replica moved
/// it first).
pub(super) async fn enqueue(
    c: &Conn<'_>,
    from: Option<&str>,
    to: &str,
    deliveries: &[NewDelivery],
    now: i64,
) -> Result<bool, StoreError> {
    let moved = match from {
        None => c.execute(START_CURSOR, &[&to, &now]).await,
        Some(from) => c.execute(MOVE_CURSOR, &[&from, &to, &now]).await,
    }
    .map_err(pg_error)?;
    if moved == 0 {
        return Ok(false);
    }
    if deliveries.is_empty() {
        return Ok(true);
    }
    let column =
        |field: fn(&NewDelivery) -> &str| -> Vec<&str> { deliveries.iter().map(field).collect() };
    c.execute(
        INSERT_DELIVERIES,
        &[
            &column(|d| &d.webhook),
            &column(|d| &d.message_id),
            &column(|d| &d.kind),
            &column(|d| &d.call_id),
            &column(|d| &d.body),
            &now,
            &deliveries
                .iter()
                .map(|d| d.channel.as_deref())
                .collect::<Vec<_>>(),
            &deliveries
                .iter()
                .map(|d| d.recipient.as_deref())
                .collect::<Vec<_>>(),
        ],
    )
    .await
    .map_err(pg_error)?;
    Ok(true)
}

/// Takes the due deliveries no other replica is claiming, oldest first, and sets their lease.
const CLAIM: &str = "UPDATE webhook_deliveries d \
     SET claimed_until = $3, attempts = d.attempts + 1, updated_at = $1 \
     FROM (SELECT id FROM webhook_deliveries \
           WHERE status = 'pending' AND next_attempt_at <= $1 \
             AND (claimed_until IS NULL OR claimed_until <= $1) \
           ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED) due \
     WHERE d.id = due.id \
     RETURNING d.id, d.webhook, d.message_id, d.type, d.call_id, d.status, d.attempts, \
       d.last_status, d.last_error, d.next_attempt_at, d.created_at, d.updated_at, d.channel, \
       d.recipient, d.receipt, d.body";

/// Claims up to `limit` pending deliveries due at `now`, until `now + lease_ms`; counts their
/// attempt.
pub(super) async fn claim(
    c: &Conn<'_>,
    limit: u32,
    lease_ms: i64,
    now: i64,
) -> Result<Vec<Delivery>, StoreError> {
    let rows = c
        .query(
            CLAIM,
            &[&now, &i64::from(limit), &now.saturating_add(lease_ms)],
        )
        .await
        .map_err(pg_error)?;
    let mut claimed = decode_all(&rows)?;
    // RETURNING follows no order.
    claimed.sort_by_key(|delivery| delivery.id);
    Ok(claimed)
}

/// Records how an attempt of the pending delivery `id` ended, and releases its claim. A
/// delivery no longer pending (settled by whoever claimed it after this claim ran out) stays
/// as it is.
pub(super) async fn settle(
    c: &Conn<'_>,
    id: i64,
    result: &DeliveryResult,
    now: i64,
) -> Result<(), StoreError> {
    let (status, last_status, last_error, next_attempt_at) = settled_delivery(result);
    let last_status = last_status.and_then(|s| i32::try_from(s).ok());
    c.execute(
        "UPDATE webhook_deliveries SET status = $2, last_status = $3, last_error = $4, \
         next_attempt_at = $5, claimed_until = NULL, updated_at = $6, \
         receipt = COALESCE($7, receipt) \
         WHERE id = $1 AND status = 'pending'",
        &[
            &id,
            &status,
            &last_status,
            &last_error,
            &next_attempt_at,
            &now,
            &delivery_receipt(result),
        ],
    )
    .await
    .map_err(pg_error)
    .map(drop)
}

/// Makes the failed delivery `id` pending again, due now; the delivery as it is now.
pub(super) async fn retry(c: &Conn<'_>, id: i64, now: i64) -> Result<Option<Delivery>, StoreError> {
    c.execute(
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = $2, \
         claimed_until = NULL, updated_at = $2 WHERE id = $1 AND status = 'failed'",
        &[&id, &now],
    )
    .await
    .map_err(pg_error)?;
    let sql = format!("SELECT {DELIVERY_COLUMNS}, body FROM webhook_deliveries WHERE id = $1");
    let row = c.query_opt(&sql, &[&id]).await.map_err(pg_error)?;
    row.map(|row| RawDelivery::read(&row).map_err(pg_error)?.decode())
        .transpose()
}

/// Where the outbox has read the feed up to, if it has started.
pub(super) async fn cursor(c: &Conn<'_>) -> Result<Option<FeedCursor>, StoreError> {
    c.query_opt("SELECT cursor FROM webhook_outbox WHERE id = 1", &[])
        .await
        .map_err(pg_error)?
        .map(|row| row.try_get(0).map(FeedCursor))
        .transpose()
        .map_err(pg_error)
}

/// Up to `limit` deliveries in `status` (any, if `None`), newest first, before the id `after`;
/// without their bodies: the webhooks', or (`channels`) the notification channels'.
pub(super) async fn list(
    c: &Conn<'_>,
    status: Option<DeliveryStatus>,
    after: Option<i64>,
    limit: u32,
    channels: bool,
) -> Result<DeliveryPage, StoreError> {
    let which = if channels {
        "channel IS NOT NULL"
    } else {
        "channel IS NULL"
    };
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS}, '' FROM webhook_deliveries \
         WHERE ($1::text IS NULL OR status = $1) AND id < $2 AND {which} \
         ORDER BY id DESC LIMIT $3"
    );
    // One more than asked tells whether another page follows.
    let rows = c
        .query(
            &sql,
            &[
                &status.map(DeliveryStatus::as_str),
                &after.unwrap_or(i64::MAX),
                &(i64::from(limit) + 1),
            ],
        )
        .await
        .map_err(pg_error)?;
    let more = rows.len() > limit as usize;
    let deliveries = decode_all(&rows[..rows.len().min(limit as usize)])?;
    let next_cursor = more.then(|| deliveries.last().map(|d| d.id)).flatten();
    Ok(DeliveryPage {
        deliveries,
        next_cursor,
    })
}

/// The webhooks with a delivery whose receiver last answered `410 Gone`.
pub(super) async fn disabled_webhooks(c: &Conn<'_>) -> Result<Vec<String>, StoreError> {
    c.query(
        "SELECT DISTINCT webhook FROM webhook_deliveries WHERE last_status = 410 \
         AND channel IS NULL ORDER BY webhook",
        &[],
    )
    .await
    .map_err(pg_error)?
    .iter()
    .map(|row| row.try_get(0).map_err(pg_error))
    .collect()
}

/// The notification channels' deliveries about the call `call_id`, oldest first, with their
/// bodies.
pub(super) async fn call_notifications(
    c: &Conn<'_>,
    call_id: &str,
) -> Result<Vec<Delivery>, StoreError> {
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS}, body FROM webhook_deliveries \
         WHERE call_id = $1 AND channel IS NOT NULL ORDER BY id"
    );
    let rows = c.query(&sql, &[&call_id]).await.map_err(pg_error)?;
    decode_all(&rows)
}
