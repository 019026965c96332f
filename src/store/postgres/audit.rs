//! The audit chain on PostgreSQL, one chain for every replica: the triggers of
//! `migrations/postgres/0017_audit.sql` capture each change as a pending row in the transaction
//! that makes it, and a chainer numbers and hashes them ([`chain_final`]).
//!
//! Pending rows are taken as the feed's entries are read: only below the feed's horizon
//! (`feed::horizon`), where they are final (every transaction that writes them holds the feed
//! writers' lock), in (xid, pos) order. So no pending row can ever appear before one chained,
//! and the chain needs no gap filled. One chainer at a time, across replicas, under a
//! transaction-scoped advisory lock: each replica's [`chainer`] tries it after every commit it
//! hears of and on a short timer, and a reader of the chain waits for it (read-your-writes).

use std::time::Duration;

use tokio::sync::watch;

use super::pg_error;
use super::reads::Conn;
use crate::store::audit::{ExportOp, PENDING_COLUMNS, Pending, chain};
use crate::store::{AuditEntry, AuditPath, ExportState, NewCheckpoint, StoreError};

/// The chainers' lock: keys "tool" and "audi" in ASCII.
const TRY_LOCK: &str = "SELECT pg_try_advisory_xact_lock(1953460076, 1635083369)";
const LOCK: &str = "SELECT pg_advisory_xact_lock(1953460076, 1635083369)";

/// The most rows chained by one statement.
const ROUND: i64 = 2_000;

/// How often a replica's chainer looks, when it hears of no commit.
const TICK: Duration = Duration::from_millis(500);

/// Chains, in one transaction, every pending row that is final; waits for another replica's
/// chainer when `wait`, else leaves the work to it. Whether it chained.
pub(super) async fn chain_final(c: &Conn<'_>, wait: bool) -> Result<bool, StoreError> {
    c.0.batch_execute("BEGIN").await.map_err(pg_error)?;
    let chained = chain_in_transaction(c, wait).await;
    let end = match chained {
        Ok(true) => "COMMIT",
        _ => "ROLLBACK",
    };
    c.0.batch_execute(end).await.map_err(pg_error)?;
    chained
}

async fn chain_in_transaction(c: &Conn<'_>, wait: bool) -> Result<bool, StoreError> {
    if wait {
        c.execute(LOCK, &[]).await.map_err(pg_error)?;
    } else {
        let got: bool = c
            .query_opt(TRY_LOCK, &[])
            .await
            .map_err(pg_error)?
            .map(|row| row.get(0))
            .unwrap_or(false);
        if !got {
            return Ok(false);
        }
    }
    let horizon = super::feed::horizon(c).await?;
    loop {
        let rows = c
            .query(
                &format!(
                    "SELECT {PENDING_COLUMNS} FROM audit_pending \
                     WHERE xid < $1::text::xid8 ORDER BY xid, pos LIMIT $2"
                ),
                &[&horizon, &ROUND],
            )
            .await
            .map_err(pg_error)?;
        if rows.is_empty() {
            return Ok(true);
        }
        let pending: Vec<Pending> = rows
            .iter()
            .map(|row| {
                Pending::read(
                    |i| row.try_get::<_, Option<String>>(i),
                    |i| match i {
                        9 => row.try_get::<_, Option<i32>>(i).map(|n| n.map(i64::from)),
                        _ => row.try_get::<_, Option<i64>>(i),
                    },
                )
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(pg_error)?;
        let full = pending.len() as i64 == ROUND;
        let taken: Vec<i64> = pending.iter().map(|p| p.pos).collect();
        let head = c
            .query_opt("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1", &[])
            .await
            .map_err(pg_error)?
            .map(|row| (row.get::<_, i64>(0), row.get::<_, String>(1)));
        let mut columns = Columns::default();
        for row in chain(head, pending) {
            columns.seq.push(row.seq);
            columns.at.push(row.at);
            columns.call_id.push(row.call_id);
            columns.entry.push(row.entry);
            columns.hash.push(row.hash);
            columns.covers.push(row.covers);
        }
        c.execute(
            "INSERT INTO audit (seq, at, call_id, entry, hash, covers) \
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], \
                                  $5::text[], $6::bigint[])",
            &[
                &columns.seq,
                &columns.at,
                &columns.call_id,
                &columns.entry,
                &columns.hash,
                &columns.covers,
            ],
        )
        .await
        .map_err(pg_error)?;
        c.execute(
            "DELETE FROM audit_pending WHERE pos = ANY($1::bigint[])",
            &[&taken],
        )
        .await
        .map_err(pg_error)?;
        if !full {
            return Ok(true);
        }
    }
}

/// The chained rows of a round, a column each (one `INSERT ... unnest` for them all).
#[derive(Default)]
struct Columns {
    seq: Vec<i64>,
    at: Vec<i64>,
    call_id: Vec<Option<String>>,
    entry: Vec<String>,
    hash: Vec<String>,
    covers: Vec<Option<i64>>,
}

/// A replica's chainer: after each commit it hears of (the feed's counter), and every [`TICK`],
/// until the store stops.
pub(super) async fn chainer(
    pool: deadpool_postgres::Pool,
    mut changes: watch::Receiver<u64>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            _ = changes.changed() => {}
            () = tokio::time::sleep(TICK) => {}
        }
        if *stopped.borrow() {
            return;
        }
        let conn = match pool.get().await {
            Ok(conn) => conn,
            Err(err) => {
                tracing::debug!(error = %err, "the audit chainer has no connection now");
                continue;
            }
        };
        if let Err(err) = chain_final(&Conn(&conn), false).await {
            tracing::warn!(error = %err, "cannot chain the audit entries now");
        }
    }
}

/// Appends a checkpoint as a pending row (chained after every change before it), and keeps its
/// key published: in the writer's transaction.
pub(super) async fn checkpoint(
    c: &Conn<'_>,
    checkpoint: &NewCheckpoint,
    now: i64,
) -> Result<(), StoreError> {
    let source = crate::store::audit::checkpoint_source(checkpoint);
    c.execute(
        "INSERT INTO audit_pending (at, source) VALUES ($1, $2)",
        &[&now, &source],
    )
    .await
    .map_err(pg_error)?;
    c.execute(
        "UPDATE signing_keys SET retire_at = $2 WHERE id = $1",
        &[&checkpoint.kid, &i64::MAX],
    )
    .await
    .map_err(pg_error)?;
    Ok(())
}

fn entry(row: &tokio_postgres::Row) -> Result<AuditEntry, StoreError> {
    Ok(AuditEntry {
        seq: row.try_get(0).map_err(pg_error)?,
        entry: row.try_get(1).map_err(pg_error)?,
        hash: row.try_get(2).map_err(pg_error)?,
    })
}

/// Chained entries numbered above `after`, at most `limit`.
pub(super) async fn entries(
    c: &Conn<'_>,
    after: i64,
    limit: u32,
) -> Result<Vec<AuditEntry>, StoreError> {
    c.query(
        "SELECT seq, entry, hash FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2",
        &[&after, &i64::from(limit)],
    )
    .await
    .map_err(pg_error)?
    .iter()
    .map(entry)
    .collect()
}

/// The last chained entry.
pub(super) async fn head(c: &Conn<'_>) -> Result<Option<AuditEntry>, StoreError> {
    c.query_opt(
        "SELECT seq, entry, hash FROM audit ORDER BY seq DESC LIMIT 1",
        &[],
    )
    .await
    .map_err(pg_error)?
    .as_ref()
    .map(entry)
    .transpose()
}

/// The call's entries, through the first checkpoint covering its last (at most `limit`).
pub(super) async fn path(
    c: &Conn<'_>,
    call_id: &str,
    limit: u32,
) -> Result<Option<AuditPath>, StoreError> {
    let call_entries: Vec<i64> = c
        .query(
            "SELECT seq FROM audit WHERE call_id = $1 ORDER BY seq",
            &[&call_id],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let (Some(&first), Some(&last)) = (call_entries.first(), call_entries.last()) else {
        return Ok(None);
    };
    let checkpoint: Option<i64> = c
        .query_opt("SELECT min(seq) FROM audit WHERE covers >= $1", &[&last])
        .await
        .map_err(pg_error)?
        .and_then(|row| row.get(0));
    let end = checkpoint.unwrap_or(i64::MAX);
    let entries = c
        .query(
            "SELECT seq, entry, hash FROM audit WHERE seq >= $1 AND seq <= $2 \
             ORDER BY seq LIMIT $3",
            &[&first, &end, &i64::from(limit)],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(entry)
        .collect::<Result<Vec<_>, _>>()?;
    let prev: Option<String> = c
        .query_opt("SELECT hash FROM audit WHERE seq = $1", &[&(first - 1)])
        .await
        .map_err(pg_error)?
        .map(|row| row.get(0));
    Ok(Some(AuditPath::new(
        prev,
        entries,
        call_entries,
        checkpoint,
    )))
}

/// An export's claim, or its attempt settled (`ExportOp`), in the writer's transaction.
pub(super) async fn export(c: &Conn<'_>, op: &ExportOp) -> Result<Option<i64>, StoreError> {
    match op {
        ExportOp::Claim {
            sink,
            owner,
            now,
            until,
        } => {
            c.execute(
                "INSERT INTO audit_exports (sink, after_seq, delivered, failures) \
                 VALUES ($1, 0, 0, 0) ON CONFLICT (sink) DO NOTHING",
                &[sink],
            )
            .await
            .map_err(pg_error)?;
            Ok(c.query_opt(
                "UPDATE audit_exports SET claimed_by = $2, claimed_until = $4 \
                     WHERE sink = $1 \
                     AND (claimed_by IS NULL OR claimed_by = $2 OR claimed_until < $3) \
                     RETURNING after_seq",
                &[sink, owner, now, until],
            )
            .await
            .map_err(pg_error)?
            .map(|row| row.get(0)))
        }
        ExportOp::Release { sink, owner } => {
            c.execute(
                "UPDATE audit_exports SET claimed_by = NULL, claimed_until = NULL \
                 WHERE sink = $1 AND claimed_by = $2",
                &[sink, owner],
            )
            .await
            .map_err(pg_error)?;
            Ok(None)
        }
        ExportOp::Settle {
            sink,
            owner,
            after,
            delivered,
            error,
            now,
        } => {
            c.execute(
                "UPDATE audit_exports SET after_seq = greatest(after_seq, $3), \
                 delivered = delivered + $4, \
                 failures = failures + CASE WHEN $5::text IS NULL THEN 0 ELSE 1 END, \
                 last_error = $5, last_at = $6 WHERE sink = $1 AND claimed_by = $2",
                &[sink, owner, after, delivered, error, now],
            )
            .await
            .map_err(pg_error)?;
            Ok(None)
        }
    }
}

/// Every export's state.
pub(super) async fn exports(c: &Conn<'_>) -> Result<Vec<ExportState>, StoreError> {
    c.query(
        "SELECT sink, after_seq, delivered, failures, last_error, last_at FROM audit_exports \
         ORDER BY sink",
        &[],
    )
    .await
    .map_err(pg_error)?
    .iter()
    .map(|row| {
        Ok(ExportState {
            sink: row.try_get(0)?,
            after_seq: row.try_get(1)?,
            delivered: row.try_get(2)?,
            failures: row.try_get(3)?,
            last_error: row.try_get(4)?,
            last_at: row.try_get(5)?,
        })
    })
    .collect::<Result<_, tokio_postgres::Error>>()
    .map_err(pg_error)
}
