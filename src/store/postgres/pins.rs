//! Pins of upstream tools on PostgreSQL, shared by every replica: every [`PinOp`] applied in
//! the writer's batch transaction. Two replicas making an upstream's first connection at once
//! insert the same `pinned_upstreams` row: the later insert waits for the first's commit on the
//! primary key, then does nothing (so it is not the first, and pins nothing new unless told
//! to), and reads the first's pins back.

use tokio_postgres::Row;

use super::pg_error;
use super::reads::Conn;
use crate::store::pins::{PIN_COLUMNS, PinOp};
use crate::store::queue::Reply;
use crate::store::{CHANGE_ACCEPTED, StoreError, TOOL_CHANGED, Timestamp, ToolPin};

fn read(row: &Row) -> Result<ToolPin, tokio_postgres::Error> {
    Ok(ToolPin {
        upstream: row.try_get(0)?,
        tool: row.try_get(1)?,
        hash: row.try_get(2)?,
        definition: row.try_get(3)?,
        pinned_at: Timestamp(row.try_get(4)?),
        pinned_by: row.try_get(5)?,
        accepted: row.try_get(6)?,
    })
}

/// Applies `op` at `now` (Unix ms).
pub(super) async fn apply(c: &Conn<'_>, op: &PinOp, now: i64) -> Result<Reply, StoreError> {
    match op {
        PinOp::Connect {
            upstream,
            listed,
            new_tools,
        } => {
            let first = c
                .execute(
                    "INSERT INTO pinned_upstreams (upstream, first_at) VALUES ($1, $2) \
                     ON CONFLICT (upstream) DO NOTHING",
                    &[upstream, &now],
                )
                .await
                .map_err(pg_error)?
                == 1;
            if PinOp::pins_new(*new_tools, first) {
                for pin in listed {
                    insert(c, pin, false).await?;
                }
            }
            list(c, upstream).await.map(Reply::Pins)
        }
        PinOp::Tell { upstream, changes } => {
            for change in changes {
                // Told once, and only while the pin is the one the change was read against (an
                // admin may have accepted it since).
                let told = c
                    .execute(
                        "INSERT INTO tool_changes (upstream, tool, hash, told_at) \
                         SELECT $1::text, $2::text, $3::text, $4::bigint \
                         WHERE (SELECT hash FROM tool_pins WHERE upstream = $1 AND tool = $2) \
                           IS NOT DISTINCT FROM $5::text \
                         ON CONFLICT (upstream, tool, hash) DO NOTHING",
                        &[
                            upstream,
                            &change.tool,
                            &change.hash,
                            &now,
                            &change.pinned_hash,
                        ],
                    )
                    .await
                    .map_err(pg_error)?;
                if told == 1 {
                    append(c, now, TOOL_CHANGED, upstream, &change.detail).await?;
                }
            }
            Ok(Reply::Done)
        }
        PinOp::Accept(pin, detail) => {
            insert(c, pin, true).await?;
            c.execute(
                "DELETE FROM tool_changes WHERE upstream = $1 AND tool = $2",
                &[&pin.upstream, &pin.tool],
            )
            .await
            .map_err(pg_error)?;
            append(c, now, CHANGE_ACCEPTED, &pin.upstream, detail).await?;
            Ok(Reply::Done)
        }
    }
}

/// Appends a feed entry of `kind` about `upstream`'s tool, its change `detail` (JSON text): of
/// no call, so its `call_id` is empty. The batch's transaction holds the feed writers' lock.
async fn append(
    c: &Conn<'_>,
    at: i64,
    kind: &str,
    upstream: &str,
    detail: &str,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO feed (at, type, call_id, attempts, upstream, detail) \
         VALUES ($1, $2, '', 0, $3, $4)",
        &[&at, &kind, &upstream, &detail],
    )
    .await
    .map_err(pg_error)
    .map(drop)
}

/// Inserts `pin`; over the tool's pin when `replace`, else only when it has none.
async fn insert(c: &Conn<'_>, pin: &ToolPin, replace: bool) -> Result<(), StoreError> {
    let conflict = if replace {
        "DO UPDATE SET hash = excluded.hash, definition = excluded.definition, \
         pinned_at = excluded.pinned_at, pinned_by = excluded.pinned_by, \
         accepted = excluded.accepted"
    } else {
        "DO NOTHING"
    };
    c.execute(
        &format!(
            "INSERT INTO tool_pins ({PIN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (upstream, tool) {conflict}"
        ),
        &[
            &pin.upstream,
            &pin.tool,
            &pin.hash,
            &pin.definition,
            &pin.pinned_at.0,
            &pin.pinned_by,
            &pin.accepted,
        ],
    )
    .await
    .map_err(pg_error)
    .map(drop)
}

/// Every pin of `upstream`, by tool name.
async fn list(c: &Conn<'_>, upstream: &str) -> Result<Vec<ToolPin>, StoreError> {
    let rows = c
        .query(
            &format!("SELECT {PIN_COLUMNS} FROM tool_pins WHERE upstream = $1 ORDER BY tool"),
            &[&upstream],
        )
        .await
        .map_err(pg_error)?;
    rows.iter()
        .map(read)
        .collect::<Result<_, _>>()
        .map_err(pg_error)
}
