//! The change feed on PostgreSQL: reading it without missing or repeating an entry while
//! several replicas write at once, and hearing when it grows.
//!
//! Entries are ordered by (xid, seq), the id of the transaction that wrote them and their number
//! in it, and a reader takes only entries whose transaction is older than every transaction
//! that may still write the feed (the horizon, [`horizon`]). Such an entry is final: its
//! transaction committed (or aborted, and left nothing), and every feed writer still to commit
//! has a larger xid, so no entry can ever appear before it. Ordering by `seq` alone would not
//! do: a sequence value is taken before commit, so entry 10 can be visible before entry 9
//! commits, and a reader that moved past 10 would lose 9 for ever. A cursor is `<xid>-<seq>`.
//!
//! The horizon counts only feed writers, not every transaction of the PostgreSQL server (which
//! `pg_snapshot_xmin` would: a long transaction in any database there, a migration or a session
//! left idle in a transaction, would hold every reader back until it ended). A feed writer
//! takes a shared advisory lock as its first statement, before it has an xid
//! ([`BEGIN_WRITE`]). A reader then reads, in one statement, the next xid to be assigned as of
//! its snapshot and the xids of every transaction holding that lock in this database (from
//! `pg_locks`, which every role may read, and which is not a snapshot but the lock table as it
//! is); the horizon is the least of them. A writer whose xid is below the next xid had it, and
//! the lock, before that snapshot: it is either among the holders (the horizon is at most its
//! xid) or it has ended, and a transaction leaves the lock table only after it is visible as
//! committed, so the reader's next statement, which reads the entries, sees its rows.
//!
//! Wake-ups: the writer bumps an in-process counter after each commit that may have grown the
//! feed, and sends `NOTIFY toolgate_feed` in its own small transaction. [`listen`] holds one
//! connection with `LISTEN toolgate_feed` and bumps the counter on every notification, on every
//! (re)connection, and on a short timer, since a notification is lost while the connection is
//! down. A waiting reader holds no connection and no thread: it waits on the counter.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio_postgres::{AsyncMessage, NoTls};

use super::pg_error;
use super::reads::Conn;
use crate::store::rows::RawFeedEntry;
use crate::store::{FeedCursor, FeedPage, StoreError};

/// Sent after a commit that may have grown the feed.
pub(super) const NOTIFY: &str = "SELECT pg_notify('toolgate_feed', '')";

/// The first statement of a transaction that may write the feed: it must come before the
/// transaction has an xid (before any write, or `FOR UPDATE`). The writers' advisory lock,
/// shared, to the transaction's end: keys 0x746f6f6c and 0x66656564, "tool" and "feed" in
/// ASCII.
pub(super) const BEGIN_WRITE: &str = "SELECT pg_advisory_xact_lock_shared(1953460076, 1717921124)";

/// The next xid as of this statement's snapshot, and the (32-bit) xids of the transactions
/// holding the writers' lock in this database now.
const WRITERS: &str = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text,      ARRAY(SELECT t.transactionid::text FROM pg_locks a        JOIN pg_locks t ON t.pid = a.pid AND t.locktype = 'transactionid'          AND t.mode = 'ExclusiveLock' AND t.granted        WHERE a.locktype = 'advisory' AND a.granted AND a.objsubid = 2          AND a.classid = 1953460076::oid AND a.objid = 1717921124::oid          AND a.database = (SELECT oid FROM pg_database WHERE datname = current_database()))";

/// The feed's horizon now, as an xid8's text: every entry below it is final (see the module's
/// opening). Entries are then read by a later statement, with a later snapshot.
pub(super) async fn horizon(c: &Conn<'_>) -> Result<String, StoreError> {
    let row = c
        .query_opt(WRITERS, &[])
        .await
        .map_err(pg_error)?
        .ok_or_else(|| StoreError::Corrupt("the feed's horizon read no row".into()))?;
    let next: String = row.try_get(0).map_err(pg_error)?;
    let next: u64 = next
        .parse()
        .map_err(|_| StoreError::Corrupt(format!("xmax `{next}` is not an xid8")))?;
    let writers: Vec<String> = row.try_get(1).map_err(pg_error)?;
    let mut horizon = next;
    for xid in writers {
        let xid: u32 = xid
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("`{xid}` is not an xid")))?;
        horizon = horizon.min(widen(xid, next));
    }
    Ok(horizon.to_string())
}

/// The 64-bit xid of a transaction in flight whose 32-bit xid is `xid`, given the next xid
/// `next`: the one below `next` with those low bits (xids in flight are within 2^31 of it).
fn widen(xid: u32, next: u64) -> u64 {
    let candidate = (next & !0xFFFF_FFFF) | u64::from(xid);
    if candidate >= next {
        candidate.saturating_sub(1 << 32)
    } else {
        candidate
    }
}

/// How often a replica re-reads the feed even without a notification.
const RECHECK: Duration = Duration::from_secs(1);

/// A cursor of this backend: `<xid>-<seq>`.
fn parse_cursor(cursor: &FeedCursor) -> Result<(String, i64), StoreError> {
    let bad = || StoreError::BadCursor(cursor.0.clone());
    let (xid, seq) = cursor.0.split_once('-').ok_or_else(bad)?;
    if xid.is_empty() || xid.len() > 20 || !xid.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let seq = seq
        .parse::<i64>()
        .ok()
        .filter(|s| *s >= 0)
        .ok_or_else(bad)?;
    Ok((xid.to_owned(), seq))
}

fn cursor(xid: &str, seq: i64) -> FeedCursor {
    FeedCursor(format!("{xid}-{seq}"))
}

/// The final entries after a position, oldest first.
const FEED: &str = "SELECT f.xid::text, f.seq, f.at, f.type, f.call_id, f.attempts, f.token, \
     c.tool, c.effect, c.caller, c.idempotency_key, c.created_at, s.reason, s.input_schema, \
     s.created_at, s.expires_at, \
     CASE WHEN f.type IN ('call.rejected', 'call.failed', 'call.expired') THEN c.error END, \
     f.approvals, EXISTS (SELECT 1 FROM suspensions e \
       WHERE e.call_id = c.call_id AND e.escalated_at IS NOT NULL)::int, c.edited, \
     f.upstream, f.detail \
     FROM feed f LEFT JOIN calls c ON c.call_id = f.call_id \
     LEFT JOIN suspensions s ON s.token = f.token \
     WHERE (f.xid, f.seq) > ($1::text::xid8, $2) \
       AND f.xid < $4::text::xid8 \
     ORDER BY f.xid, f.seq LIMIT $3";

/// Up to `limit` final entries after `after` (`None`: from the oldest retained).
pub(super) async fn read(
    c: &Conn<'_>,
    after: Option<&FeedCursor>,
    limit: u32,
) -> Result<FeedPage, StoreError> {
    let floor = c
        .query_opt("SELECT floor_xid::text, floor_seq FROM feed_state", &[])
        .await
        .map_err(pg_error)?
        .ok_or_else(|| StoreError::Corrupt("feed_state is empty".into()))?;
    let floor: (String, i64) = (
        floor.try_get(0).map_err(pg_error)?,
        floor.try_get(1).map_err(pg_error)?,
    );
    let (xid, seq) = match after {
        Some(after) => {
            let (xid, seq) = parse_cursor(after)?;
            let expired: bool = c
                .query_opt(
                    "SELECT ($1::text::xid8, $2::bigint) < (floor_xid, floor_seq) FROM feed_state",
                    &[&xid, &seq],
                )
                .await
                .map_err(pg_error)?
                .map(|row| row.try_get(0))
                .transpose()
                .map_err(pg_error)?
                .unwrap_or(false);
            if expired {
                return Err(StoreError::CursorExpired);
            }
            (xid, seq)
        }
        None => floor,
    };
    let horizon = horizon(c).await?;
    let rows = c
        .query(FEED, &[&xid, &seq, &i64::from(limit), &horizon])
        .await
        .map_err(pg_error)?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let xid: String = row.try_get(0).map_err(pg_error)?;
        let seq: i64 = row.try_get(1).map_err(pg_error)?;
        let raw = RawFeedEntry::read(row, 2, cursor(&xid, seq).0).map_err(pg_error)?;
        entries.push(raw.decode()?);
    }
    let full = entries.len() == limit as usize;
    let cursor = entries
        .last()
        .map_or_else(|| cursor(&xid, seq), |e| e.cursor.clone());
    // Entries past the page that are visible but not final yet: their reader comes back soon
    // instead of waiting for the next wake-up (their transaction's NOTIFY may come from a
    // transaction older than theirs that does not notify at all).
    let settling = !full && {
        let (xid, seq) = parse_cursor(&cursor)?;
        c.query_opt(
            "SELECT 1 FROM feed WHERE (xid, seq) > ($1::text::xid8, $2) \
             AND xid >= $3::text::xid8 LIMIT 1",
            &[&xid, &seq, &horizon],
        )
        .await
        .map_err(pg_error)?
        .is_some()
    };
    Ok(FeedPage {
        entries,
        cursor,
        settling,
    })
}

/// The cursor after the newest final entry: reading after it returns only entries to come.
pub(super) async fn head(c: &Conn<'_>) -> Result<FeedCursor, StoreError> {
    let horizon = horizon(c).await?;
    let newest = c
        .query_opt(
            "SELECT xid::text, seq FROM feed \
             WHERE xid < $1::text::xid8 \
             ORDER BY xid DESC, seq DESC LIMIT 1",
            &[&horizon],
        )
        .await
        .map_err(pg_error)?;
    let row = match newest {
        Some(row) => row,
        None => c
            .query_opt("SELECT floor_xid::text, floor_seq FROM feed_state", &[])
            .await
            .map_err(pg_error)?
            .ok_or_else(|| StoreError::Corrupt("feed_state is empty".into()))?,
    };
    Ok(cursor(
        &row.try_get::<_, String>(0).map_err(pg_error)?,
        row.try_get(1).map_err(pg_error)?,
    ))
}

fn bump(feed: &watch::Sender<u64>) {
    feed.send_modify(|changes| *changes = changes.wrapping_add(1));
}

/// The listener task: `LISTEN toolgate_feed` on a connection of its own, reconnecting when it
/// drops; bumps `feed` on each notification, each (re)connection and every [`RECHECK`]. Ends
/// when `stop` changes or its sender is dropped.
pub(super) async fn listen(
    config: tokio_postgres::Config,
    feed: Arc<watch::Sender<u64>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let (heard, mut notifications) = mpsc::unbounded_channel();
            // The connection is driven here rather than spawned on its own, to see its
            // notifications.
            let driver = tokio::spawn(async move {
                let mut messages =
                    futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                while let Some(Ok(message)) = messages.next().await {
                    if matches!(message, AsyncMessage::Notification(_)) && heard.send(()).is_err() {
                        break;
                    }
                }
            });
            if client.batch_execute("LISTEN toolgate_feed").await.is_ok() {
                // Whatever was notified while no connection listened is read now.
                bump(&feed);
                loop {
                    tokio::select! {
                        heard = notifications.recv() => match heard {
                            Some(()) => bump(&feed),
                            None => break,
                        },
                        () = tokio::time::sleep(RECHECK) => bump(&feed),
                        _ = stop.changed() => {
                            driver.abort();
                            return;
                        }
                    }
                }
            }
            driver.abort();
        }
        tokio::select! {
            () = tokio::time::sleep(RECHECK) => bump(&feed),
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn a_32_bit_xid_in_flight_widens_to_the_one_below_the_next() {
        assert_eq!(widen(5, 10), 5);
        // Past a wrap: next is in epoch 1, the xid in flight still in epoch 0.
        let next = (1u64 << 32) + 3;
        assert_eq!(widen(u32::MAX - 1, next), u64::from(u32::MAX - 1));
        assert_eq!(widen(2, next), (1 << 32) + 2);
        assert_eq!(widen(0, 1), 0);
        // The lock's keys, as the SQL spells them.
        assert_eq!(0x746f_6f6c, 1_953_460_076);
        assert_eq!(0x6665_6564, 1_717_921_124);
    }
}
