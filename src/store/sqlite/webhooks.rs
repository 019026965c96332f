//! The webhook outbox on SQLite: its cursor along the feed and its deliveries.
//!
//! The writes ([`enqueue`], [`claim`], [`settle`], [`retry`]) are run by the writer thread, each
//! in its savepoint like every other write, so the one writer stays the file's only writer; the
//! reads ([`cursor`], [`list`], [`disabled_webhooks`]) run on the pool. With one writer, a
//! compare-and-set of the cursor and a claim cannot race another; the same SQL on a shared
//! database needs row locks (`postgres/webhooks.rs`).

use rusqlite::{Connection, OptionalExtension, params};

use super::backend;
use crate::store::record::{delivery_receipt, settled_delivery};
use crate::store::rows::{DELIVERY_COLUMNS, RawDelivery};
use crate::store::{
    Delivery, DeliveryPage, DeliveryResult, DeliveryStatus, FeedCursor, NewDelivery, StoreError,
};

/// Moves the outbox's cursor from `from` (`None`: it has none yet) to `to` and creates
/// `deliveries`, pending and due now; `false`, writing nothing, when the cursor is not `from`.
pub(super) fn enqueue(
    conn: &Connection,
    from: Option<&str>,
    to: &str,
    deliveries: &[NewDelivery],
    now: i64,
) -> Result<bool, StoreError> {
    let moved = match from {
        None => conn
            .prepare_cached(
                "INSERT INTO webhook_outbox (id, cursor, updated_at) VALUES (1, ?1, ?2) \
                 ON CONFLICT DO NOTHING",
            )
            .and_then(|mut st| st.execute(params![to, now])),
        Some(from) => conn
            .prepare_cached(
                "UPDATE webhook_outbox SET cursor = ?2, updated_at = ?3 \
                 WHERE id = 1 AND cursor = ?1",
            )
            .and_then(|mut st| st.execute(params![from, to, now])),
    }
    .map_err(backend)?;
    if moved == 0 {
        return Ok(false);
    }
    let mut st = conn
        .prepare_cached(
            "INSERT INTO webhook_deliveries (webhook, message_id, type, call_id, body, status, \
             attempts, next_attempt_at, created_at, updated_at, channel, recipient) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'pending', 0, ?6, ?6, ?6, ?7, ?8)",
        )
        .map_err(backend)?;
    for delivery in deliveries {
        st.execute(params![
            delivery.webhook,
            delivery.message_id,
            delivery.kind,
            delivery.call_id,
            delivery.body,
            now,
            delivery.channel,
            delivery.recipient
        ])
        .map_err(backend)?;
    }
    Ok(true)
}

/// Claims up to `limit` pending deliveries due at `now` and not claimed (or whose claim ran
/// out), oldest first, until `now + lease_ms`; counts their attempt.
pub(super) fn claim(
    conn: &Connection,
    limit: u32,
    lease_ms: i64,
    now: i64,
) -> Result<Vec<Delivery>, StoreError> {
    let sql = format!(
        "UPDATE webhook_deliveries SET claimed_until = ?3, attempts = attempts + 1, \
         updated_at = ?1 \
         WHERE id IN (SELECT id FROM webhook_deliveries WHERE status = 'pending' \
           AND next_attempt_at <= ?1 AND (claimed_until IS NULL OR claimed_until <= ?1) \
           ORDER BY id LIMIT ?2) \
         RETURNING {DELIVERY_COLUMNS}, body"
    );
    let mut st = conn.prepare_cached(&sql).map_err(backend)?;
    let rows = st
        .query_map(
            params![now, i64::from(limit), now.saturating_add(lease_ms)],
            |row| RawDelivery::read(row),
        )
        .map_err(backend)?;
    let mut claimed = rows
        .map(|row| row.map_err(backend)?.decode())
        .collect::<Result<Vec<_>, _>>()?;
    // RETURNING follows no order.
    claimed.sort_by_key(|delivery| delivery.id);
    Ok(claimed)
}

/// Records how an attempt of the pending delivery `id` ended, and releases its claim. A
/// delivery no longer pending (settled by whoever claimed it after this claim ran out) stays
/// as it is.
pub(super) fn settle(
    conn: &Connection,
    id: i64,
    result: &DeliveryResult,
    now: i64,
) -> Result<(), StoreError> {
    let (status, last_status, last_error, next_attempt_at) = settled_delivery(result);
    conn.prepare_cached(
        "UPDATE webhook_deliveries SET status = ?2, last_status = ?3, last_error = ?4, \
         next_attempt_at = ?5, claimed_until = NULL, updated_at = ?6, \
         receipt = COALESCE(?7, receipt) \
         WHERE id = ?1 AND status = 'pending'",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            status,
            last_status,
            last_error,
            next_attempt_at,
            now,
            delivery_receipt(result)
        ])
    })
    .map_err(backend)
    .map(drop)
}

/// Makes the failed delivery `id` pending again, due now; the delivery as it is now.
pub(super) fn retry(conn: &Connection, id: i64, now: i64) -> Result<Option<Delivery>, StoreError> {
    conn.prepare_cached(
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?2, \
         claimed_until = NULL, updated_at = ?2 WHERE id = ?1 AND status = 'failed'",
    )
    .and_then(|mut st| st.execute(params![id, now]))
    .map_err(backend)?;
    let sql = format!("SELECT {DELIVERY_COLUMNS}, body FROM webhook_deliveries WHERE id = ?1");
    conn.prepare_cached(&sql)
        .and_then(|mut st| st.query_row([id], |row| RawDelivery::read(row)).optional())
        .map_err(backend)?
        .map(RawDelivery::decode)
        .transpose()
}

/// Where the outbox has read the feed up to, if it has started.
pub(super) fn cursor(conn: &Connection) -> Result<Option<FeedCursor>, StoreError> {
    conn.prepare_cached("SELECT cursor FROM webhook_outbox WHERE id = 1")
        .and_then(|mut st| st.query_row([], |row| row.get(0)).optional())
        .map_err(backend)
        .map(|cursor| cursor.map(FeedCursor))
}

/// Up to `limit` deliveries in `status` (any, if `None`), newest first, before the id `after`;
/// without their bodies: the webhooks', or (`channels`) the notification channels'.
pub(super) fn list(
    conn: &Connection,
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
         WHERE (?1 IS NULL OR status = ?1) AND id < ?2 AND {which} ORDER BY id DESC LIMIT ?3"
    );
    let mut st = conn.prepare_cached(&sql).map_err(backend)?;
    // One more than asked tells whether another page follows.
    let rows = st
        .query_map(
            params![
                status.map(DeliveryStatus::as_str),
                after.unwrap_or(i64::MAX),
                i64::from(limit) + 1
            ],
            |row| RawDelivery::read(row),
        )
        .map_err(backend)?;
    let mut deliveries = Vec::with_capacity(limit as usize);
    let mut more = false;
    for row in rows {
        let raw = row.map_err(backend)?;
        if deliveries.len() == limit as usize {
            more = true;
            break;
        }
        deliveries.push(raw.decode()?);
    }
    let next_cursor = more
        .then(|| deliveries.last().map(|d: &Delivery| d.id))
        .flatten();
    Ok(DeliveryPage {
        deliveries,
        next_cursor,
    })
}

/// The webhooks with a delivery whose receiver last answered `410 Gone`.
pub(super) fn disabled_webhooks(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut st = conn
        .prepare_cached(
            "SELECT DISTINCT webhook FROM webhook_deliveries WHERE last_status = 410 \
             AND channel IS NULL ORDER BY webhook",
        )
        .map_err(backend)?;
    let rows = st.query_map([], |row| row.get(0)).map_err(backend)?;
    rows.collect::<Result<_, _>>().map_err(backend)
}

/// The notification channels' deliveries about the call `call_id`, oldest first, with their
/// bodies.
pub(super) fn call_notifications(
    conn: &Connection,
    call_id: &str,
) -> Result<Vec<Delivery>, StoreError> {
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS}, body FROM webhook_deliveries \
         WHERE call_id = ?1 AND channel IS NOT NULL ORDER BY id"
    );
    let mut st = conn.prepare_cached(&sql).map_err(backend)?;
    let rows = st
        .query_map([call_id], |row| RawDelivery::read(row))
        .map_err(backend)?;
    rows.map(|row| row.map_err(backend)?.decode()).collect()
}
