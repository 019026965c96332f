//! Standing approvals on SQLite: each [`StandingOp`] as the writer thread applies it, in its
//! savepoint of the batch's transaction. One writer takes a call of a standing approval at a
//! time, so the conditional `UPDATE` ([`take_one`]) cannot be raced: a limit is never exceeded.

use rusqlite::{Connection, OptionalExtension, params};

use super::backend;
use super::writes::{append_event_by, insert, resolve};
use crate::store::record::{Prepared, PreparedCall};
use crate::store::standing::{
    STANDING_COLUMNS, StandingOp, StandingReply, StandingUse, Taken, granted_details,
    read_standing, standing_details,
};
use crate::store::{
    Actor, Inserted, Resolved, STANDING_APPROVED, STANDING_GRANTED, StandingApproval, StoreError,
};

/// Applies `op` at `now` (Unix ms).
pub(super) fn apply(
    conn: &Connection,
    op: StandingOp,
    now: i64,
) -> Result<StandingReply, StoreError> {
    match op {
        StandingOp::Approve {
            token,
            resolution,
            actor,
            standing,
        } => {
            let resolved = resolve(conn, &token, resolution, &actor, now)?;
            if let Resolved::Approved(call) = &resolved {
                let caller = call.caller.as_deref().ok_or_else(|| {
                    StoreError::Backend("a standing approval of a call with no caller".into())
                })?;
                conn.prepare_cached(
                    "INSERT INTO standing_approvals (id, tool, caller, approver, approver_name, \
                     call_id, calls, calls_left, created_at, expires_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        standing.id,
                        call.tool,
                        caller,
                        actor.name,
                        actor.display,
                        call.call_id,
                        i64::from(standing.calls),
                        now,
                        standing.expires_at.0
                    ])
                })
                .map_err(backend)?;
                let details = granted_details(&standing);
                append_event_by(
                    conn,
                    &call.call_id,
                    now,
                    STANDING_GRANTED,
                    &actor,
                    Some(&details),
                )?;
            }
            Ok(StandingReply::Resolved(Box::new(resolved)))
        }
        StandingOp::InsertCall(call, suspended, since) => {
            insert_call(conn, call, suspended, since, now)
                .map(|(inserted, used)| StandingReply::Inserted(inserted, used))
        }
        StandingOp::List(at) => {
            let sql = format!(
                "SELECT {STANDING_COLUMNS} FROM standing_approvals WHERE revoked_at IS NULL \
                 AND calls_left > 0 AND expires_at > ?1 ORDER BY created_at DESC, id"
            );
            let mut st = conn.prepare_cached(&sql).map_err(backend)?;
            let rows = st
                .query_map(params![at], |row| read_standing(row))
                .map_err(backend)?;
            let listed = rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend)?;
            Ok(StandingReply::Listed(listed))
        }
        StandingOp::Get(id) => Ok(StandingReply::One(find(conn, &id)?.map(Box::new))),
        StandingOp::Revoke { id, by, at } => {
            let revoked = conn
                .prepare_cached(
                    "UPDATE standing_approvals SET revoked_at = ?2, revoked_by = ?3 \
                     WHERE id = ?1 AND revoked_at IS NULL",
                )
                .and_then(|mut st| st.execute(params![id, at, by]))
                .map_err(backend)?;
            let found = find(conn, &id)?;
            if let (1, Some(standing)) = (revoked, &found) {
                super::audit::other(conn, at, revoked_source(standing, by.as_deref()))?;
            }
            Ok(StandingReply::One(found.map(Box::new)))
        }
    }
}

/// The standing approval `id`, if it exists.
fn find(conn: &Connection, id: &str) -> Result<Option<StandingApproval>, StoreError> {
    let sql = format!("SELECT {STANDING_COLUMNS} FROM standing_approvals WHERE id = ?1");
    conn.prepare_cached(&sql)
        .and_then(|mut st| {
            st.query_row(params![id], |row| read_standing(row))
                .optional()
        })
        .map_err(backend)
}

/// Takes one call of a standing approval of `tool` for `caller` that holds at `now`: the one
/// that expires first.
fn take_one(
    conn: &Connection,
    tool: &str,
    caller: &str,
    since: i64,
    now: i64,
) -> Result<Option<Taken>, StoreError> {
    conn.prepare_cached(
        "UPDATE standing_approvals SET calls_left = calls_left - 1 WHERE id = ( \
           SELECT id FROM standing_approvals WHERE tool = ?1 AND caller = ?2 \
           AND revoked_at IS NULL AND calls_left > 0 AND expires_at > ?3 AND created_at >= ?4 \
           ORDER BY expires_at, id LIMIT 1 \
         ) AND calls_left > 0 RETURNING id, approver, approver_name",
    )
    .and_then(|mut st| {
        st.query_row(params![tool, caller, now, since], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()
    })
    .map_err(backend)
}

/// [`crate::store::StandingStore::insert_standing_call`].
fn insert_call(
    conn: &Connection,
    call: PreparedCall,
    suspended: Prepared,
    since: i64,
    now: i64,
) -> Result<(Inserted, Option<StandingUse>), StoreError> {
    let taken = match call.caller.as_deref() {
        Some(caller) => take_one(conn, &call.tool, caller, since, now)?,
        None => None,
    };
    let Some((id, approver, approver_name)) = taken else {
        return Ok((insert(conn, call, Some(suspended), now)?, None));
    };
    let call_id = call.call_id.clone();
    match insert(conn, call, None, now)? {
        Inserted::New => {}
        // The key's call answers; nothing is taken (the savepoint keeps the rest).
        existing @ Inserted::Existing(_) => {
            conn.execute(
                "UPDATE standing_approvals SET calls_left = calls_left + 1 WHERE id = ?1",
                params![id],
            )
            .map_err(backend)?;
            return Ok((existing, None));
        }
    }
    let by = Actor {
        name: approver.clone(),
        display: approver_name,
    };
    let details = standing_details(&id);
    append_event_by(conn, &call_id, now, STANDING_APPROVED, &by, Some(&details))?;
    Ok((Inserted::New, Some(StandingUse { id, approver })))
}

/// The audit chain's record of a standing approval revoked (`standing.revoked`), as PostgreSQL's
/// trigger writes it too.
fn revoked_source(standing: &StandingApproval, by: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "kind": "standing.revoked",
        "id": standing.id,
        "tool": standing.tool,
        "caller": standing.caller,
        "by": by,
    })
}
