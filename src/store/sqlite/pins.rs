//! Pins of upstream tools on SQLite: every [`PinOp`] applied by the writer thread, in its
//! transaction, so a connection's first-connection row and the pins it makes commit together.

use rusqlite::{Connection, Row, params};

use super::backend;
use crate::store::pins::{PIN_COLUMNS, PinOp};
use crate::store::queue::Reply;
use crate::store::{CHANGE_ACCEPTED, StoreError, TOOL_CHANGED, Timestamp, ToolPin};

fn read(row: &Row<'_>) -> rusqlite::Result<ToolPin> {
    Ok(ToolPin {
        upstream: row.get(0)?,
        tool: row.get(1)?,
        hash: row.get(2)?,
        definition: row.get(3)?,
        pinned_at: Timestamp(row.get(4)?),
        pinned_by: row.get(5)?,
        accepted: row.get(6)?,
    })
}

/// Applies `op` at `now` (Unix ms).
pub(super) fn apply(conn: &Connection, op: PinOp, now: i64) -> Result<Reply, StoreError> {
    match op {
        PinOp::Connect {
            upstream,
            listed,
            new_tools,
        } => {
            let first = conn
                .prepare_cached(
                    "INSERT INTO pinned_upstreams (upstream, first_at) VALUES (?1, ?2) \
                     ON CONFLICT (upstream) DO NOTHING",
                )
                .and_then(|mut st| st.execute(params![upstream, now]))
                .map_err(backend)?
                == 1;
            if PinOp::pins_new(new_tools, first) {
                for pin in &listed {
                    insert(conn, pin, false)?;
                }
            }
            list(conn, &upstream).map(Reply::Pins)
        }
        PinOp::Tell { upstream, changes } => {
            for change in &changes {
                // Told once, and only while the pin is the one the change was read against (an
                // admin may have accepted it since).
                let told = conn
                    .prepare_cached(
                        "INSERT INTO tool_changes (upstream, tool, hash, told_at) \
                         SELECT ?1, ?2, ?3, ?4 \
                         WHERE (SELECT hash FROM tool_pins WHERE upstream = ?1 AND tool = ?2) \
                           IS ?5 \
                         ON CONFLICT (upstream, tool, hash) DO NOTHING",
                    )
                    .and_then(|mut st| {
                        st.execute(params![
                            upstream,
                            change.tool,
                            change.hash,
                            now,
                            change.pinned_hash
                        ])
                    })
                    .map_err(backend)?;
                if told == 1 {
                    append(conn, now, TOOL_CHANGED, &upstream, &change.detail)?;
                }
            }
            Ok(Reply::Done)
        }
        PinOp::Accept(pin, detail) => {
            insert(conn, &pin, true)?;
            conn.prepare_cached("DELETE FROM tool_changes WHERE upstream = ?1 AND tool = ?2")
                .and_then(|mut st| st.execute(params![pin.upstream, pin.tool]))
                .map_err(backend)?;
            append(conn, now, CHANGE_ACCEPTED, &pin.upstream, &detail)?;
            Ok(Reply::Done)
        }
    }
}

/// Appends a feed entry of `kind` about `upstream`'s tool, its change `detail` (JSON text): of
/// no call, so its `call_id` is empty.
fn append(
    conn: &Connection,
    at: i64,
    kind: &str,
    upstream: &str,
    detail: &str,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO feed (at, type, call_id, attempts, upstream, detail) \
         VALUES (?1, ?2, '', 0, ?3, ?4)",
    )
    .and_then(|mut st| st.execute(params![at, kind, upstream, detail]))
    .map_err(backend)?;
    if kind == crate::store::CHANGE_ACCEPTED {
        let change: serde_json::Value = serde_json::from_str(detail).unwrap_or_default();
        let source = serde_json::json!({"kind": kind, "upstream": upstream, "change": change});
        super::audit::other(conn, at, source)?;
    }
    Ok(())
}

/// Inserts `pin`; over the tool's pin when `replace`, else only when it has none.
fn insert(conn: &Connection, pin: &ToolPin, replace: bool) -> Result<(), StoreError> {
    let conflict = if replace {
        "DO UPDATE SET hash = excluded.hash, definition = excluded.definition, \
         pinned_at = excluded.pinned_at, pinned_by = excluded.pinned_by, \
         accepted = excluded.accepted"
    } else {
        "DO NOTHING"
    };
    conn.prepare_cached(&format!(
        "INSERT INTO tool_pins ({PIN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         ON CONFLICT (upstream, tool) {conflict}"
    ))
    .and_then(|mut st| {
        st.execute(params![
            pin.upstream,
            pin.tool,
            pin.hash,
            pin.definition,
            pin.pinned_at.0,
            pin.pinned_by,
            pin.accepted
        ])
    })
    .map_err(backend)
    .map(drop)
}

/// Every pin of `upstream`, by tool name.
fn list(conn: &Connection, upstream: &str) -> Result<Vec<ToolPin>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {PIN_COLUMNS} FROM tool_pins WHERE upstream = ?1 ORDER BY tool"
    ))
    .and_then(|mut st| st.query_map([upstream], read)?.collect())
    .map_err(backend)
}
