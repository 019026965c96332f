//! Replicas and their leases, and the sweep that settles the calls of dead replicas.
//!
//! Each process on a PostgreSQL store is a replica with a fresh id. It holds a lease in
//! `replicas`, renewed every heartbeat by the database's clock (`clock_timestamp()`), never the
//! process's: clocks of different machines disagree, the database's is one clock. Every
//! heartbeat, after renewing its own lease, a replica sweeps the running calls whose owner has no
//! live lease (its row expired or is gone): `read` and `idempotent` calls become `interrupted`
//! (the same request runs them again), `write` calls `needs_reconciliation` (their effect may
//! have happened; a person settles them), exactly as SQLite's recovery at open does. `FOR UPDATE
//! SKIP LOCKED` keeps two sweepers off the same rows, and a live replica's calls are never
//! touched. A replica that was paused past its lease renews it when it wakes; the calls it ran
//! may have been swept meanwhile, and its late outcomes are then refused (see the writer).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{pg_error, pool_error};
use crate::store::{StoreError, Timestamp};

/// Takes or renews this replica's lease for `ttl`.
const RENEW: &str = "INSERT INTO replicas (replica_id, lease_expires_at) \
     VALUES ($1, clock_timestamp() + $2::bigint * interval '1 millisecond') \
     ON CONFLICT (replica_id) DO UPDATE SET lease_expires_at = EXCLUDED.lease_expires_at";

/// Settles up to 1,000 running calls whose owner has no live lease, and names them.
/// The candidates are found in `running_calls`; the lock is taken on the call (and its status
/// checked again once locked), before its `running_calls` row is deleted, in the order every
/// writer takes them.
const SWEEP: &str = "WITH dead AS ( \
       SELECT c.call_id FROM running_calls rc JOIN calls c ON c.call_id = rc.call_id \
       WHERE c.status = 'running' AND NOT EXISTS ( \
         SELECT 1 FROM replicas r \
         WHERE r.replica_id = c.owner AND r.lease_expires_at > clock_timestamp()) \
       LIMIT 1000 FOR UPDATE OF c SKIP LOCKED \
     ), settled AS ( \
       SELECT d.call_id, CASE WHEN c.effect = 'write' THEN 'needs_reconciliation' \
         ELSE 'interrupted' END AS status \
       FROM dead d JOIN calls c ON c.call_id = d.call_id \
     ), \
     updated AS ( \
       UPDATE calls c SET status = s.status, updated_at = $1, \
         events = c.events || jsonb_build_object('at', $1::bigint, 'kind', s.status, \
           'details', jsonb_build_object( \
             'reason', 'the replica running the call stopped: its lease expired', \
             'replica', c.owner)) \
       FROM settled s WHERE c.call_id = s.call_id \
       RETURNING c.call_id, c.tool, c.status, c.owner, c.attempts \
     ), ended AS ( \
       DELETE FROM running_calls rc USING updated u WHERE rc.call_id = u.call_id \
     ), fed AS ( \
       INSERT INTO feed (at, type, call_id, attempts) \
       SELECT $1, 'call.' || status, call_id, attempts FROM updated \
     ) \
     SELECT call_id, tool, status, owner FROM updated";

/// Forgets replicas whose lease has expired and who own no running call.
const FORGET: &str = "DELETE FROM replicas r WHERE r.lease_expires_at <= clock_timestamp() \
     AND NOT EXISTS (SELECT 1 FROM running_calls rc WHERE rc.owner = r.replica_id)";

/// Ends this replica's lease at once, so that any calls it leaves running are swept by the
/// next heartbeat of another replica rather than after the lease.
const RELEASE: &str = "DELETE FROM replicas WHERE replica_id = $1";

/// How a replica's lease is kept.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease {
    pub(super) ttl: Duration,
    pub(super) heartbeat: Duration,
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Takes (or renews) the lease of `replica`.
pub(super) async fn renew(
    conn: &deadpool_postgres::ClientWrapper,
    replica: &str,
    lease: Lease,
) -> Result<(), StoreError> {
    let statement = conn.prepare_cached(RENEW).await.map_err(pg_error)?;
    conn.execute(&statement, &[&replica, &millis(lease.ttl)])
        .await
        .map_err(pg_error)
        .map(drop)
}

/// Sweeps the calls of dead replicas, until none is left; returns how many it settled.
pub(super) async fn sweep(conn: &deadpool_postgres::ClientWrapper) -> Result<usize, StoreError> {
    let statement = conn.prepare_cached(SWEEP).await.map_err(pg_error)?;
    let mut settled = 0;
    loop {
        // It writes the feed: its transaction takes the writers' lock before it has an xid
        // (see `feed::horizon`). The connection is the heartbeat's own: nothing interleaves.
        if let Err(err) = conn
            .batch_execute(&format!("BEGIN; {}", super::feed::BEGIN_WRITE))
            .await
        {
            let _ = conn.batch_execute("ROLLBACK").await;
            return Err(pg_error(err));
        }
        let rows = match conn.query(&statement, &[&Timestamp::now().0]).await {
            Ok(rows) => rows,
            Err(err) => {
                let _ = conn.batch_execute("ROLLBACK").await;
                return Err(pg_error(err));
            }
        };
        conn.batch_execute("COMMIT").await.map_err(pg_error)?;
        for row in &rows {
            let call_id: String = row.try_get(0).map_err(pg_error)?;
            let tool: String = row.try_get(1).map_err(pg_error)?;
            let status: String = row.try_get(2).map_err(pg_error)?;
            let owner: Option<String> = row.try_get(3).map_err(pg_error)?;
            tracing::warn!(
                call_id,
                tool,
                status,
                replica = owner.as_deref().unwrap_or("?"),
                "settled a call whose replica stopped (its lease expired)"
            );
            crate::metrics::call_outcome(&tool, &status);
        }
        settled += rows.len();
        if rows.len() < 1000 {
            break;
        }
    }
    if settled > 0 {
        // The settled calls are in the feed: its readers here and on the other replicas.
        conn.batch_execute(super::feed::NOTIFY)
            .await
            .map_err(pg_error)?;
    }
    conn.execute(FORGET, &[]).await.map_err(pg_error)?;
    Ok(settled)
}

/// Ends the lease of `replica`.
pub(super) async fn release(
    pool: &deadpool_postgres::Pool,
    replica: &str,
) -> Result<(), StoreError> {
    let conn = pool.get().await.map_err(pool_error)?;
    conn.execute(RELEASE, &[&replica])
        .await
        .map_err(pg_error)
        .map(drop)
}

/// The heartbeat task: every `lease.heartbeat`, renew this replica's lease, then sweep. Ends
/// when `stop` changes (or its sender is dropped).
pub(super) async fn heartbeat(
    pool: deadpool_postgres::Pool,
    replica: Arc<str>,
    lease: Lease,
    feed: Arc<watch::Sender<u64>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(lease.heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewed = Instant::now();
    let mut failing = false;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.changed() => return,
        }
        let beat = async {
            let conn = pool.get().await.map_err(pool_error)?;
            renew(&conn, &replica, lease).await?;
            sweep(&conn).await
        };
        // A beat that hangs must not stop the next one from being tried.
        let result = tokio::time::timeout(lease.ttl.max(lease.heartbeat), beat)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the database did not answer the heartbeat".into(),
                ))
            });
        match result {
            Ok(settled) => {
                if settled > 0 {
                    feed.send_modify(|changes| *changes = changes.wrapping_add(1));
                }
                if failing || renewed.elapsed() > lease.ttl {
                    tracing::warn!(
                        replica = %replica,
                        "lease renewed after {} ms without: calls this replica was running may \
                         have been settled by another replica meanwhile",
                        renewed.elapsed().as_millis()
                    );
                }
                failing = false;
                renewed = Instant::now();
            }
            Err(err) => {
                if !failing {
                    tracing::warn!(replica = %replica, error = %err, "cannot renew the lease");
                }
                failing = true;
            }
        }
    }
}
