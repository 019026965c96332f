//! Standing approvals on PostgreSQL: each [`StandingOp`] as the batch applies it, one after
//! another with the other conditional writes, in the batch's transaction.
//!
//! A call takes one of a standing approval's calls by one conditional `UPDATE` ([`take_one`]):
//! the row it picks is re-checked under its row lock (`calls_left > 0`), so of two replicas
//! racing for the last call, the second waits for the first's commit and then takes nothing.
//! The call is recorded in the same transaction: released (`running`, with its
//! `standing_approved` event), or suspended when nothing was taken.

use super::batch::{CallRows, FeedRows, SuspensionRows, existing};
use super::conditional::resolve;
use crate::store::postgres::pg_error;
use crate::store::postgres::reads::Conn;
use crate::store::queue::Reply;
use crate::store::record::{Prepared, PreparedCall, actor_event_json};
use crate::store::standing::{
    STANDING_COLUMNS, StandingOp, StandingReply, StandingUse, Taken, granted_details,
    read_standing, standing_details,
};
use crate::store::{
    Actor, Inserted, Resolved, STANDING_APPROVED, STANDING_GRANTED, StandingApproval, StoreError,
};

/// Applies `op` at `now` (Unix ms) for `replica`; feed entries go to `feed`.
pub(super) async fn apply(
    c: &Conn<'_>,
    replica: &str,
    op: &StandingOp,
    feed: &mut FeedRows,
    now: i64,
) -> Result<StandingReply, StoreError> {
    match op {
        StandingOp::Approve {
            token,
            resolution,
            actor,
            standing,
        } => {
            let resolved = resolve(c, replica, token, resolution, actor, feed, now).await?;
            if let Resolved::Approved(call) = &resolved {
                let caller = call.caller.as_deref().ok_or_else(|| {
                    StoreError::Backend("a standing approval of a call with no caller".into())
                })?;
                let calls = i32::try_from(standing.calls).unwrap_or(i32::MAX);
                c.execute(
                    "INSERT INTO standing_approvals (id, tool, caller, approver, approver_name, \
                     call_id, calls, calls_left, created_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9)",
                    &[
                        &standing.id,
                        &call.tool,
                        &caller,
                        &actor.name,
                        &actor.display,
                        &call.call_id,
                        &calls,
                        &now,
                        &standing.expires_at.0,
                    ],
                )
                .await
                .map_err(pg_error)?;
                let details = granted_details(standing);
                let event = actor_event_json(now, STANDING_GRANTED, actor, Some(&details));
                append(c, &call.call_id, &event).await?;
            }
            Ok(StandingReply::Resolved(Box::new(resolved)))
        }
        StandingOp::InsertCall(call, suspended, since) => {
            insert_call(c, replica, call, suspended, *since, feed, now)
                .await
                .map(|(inserted, used)| StandingReply::Inserted(inserted, used))
        }
        StandingOp::List(at) => {
            let sql = format!(
                "SELECT {STANDING_COLUMNS} FROM standing_approvals WHERE revoked_at IS NULL \
                 AND calls_left > 0 AND expires_at > $1 ORDER BY created_at DESC, id"
            );
            let rows = c.query(&sql, &[at]).await.map_err(pg_error)?;
            let listed = rows
                .iter()
                .map(read_standing)
                .collect::<Result<Vec<_>, _>>()
                .map_err(pg_error)?;
            Ok(StandingReply::Listed(listed))
        }
        StandingOp::Get(id) => Ok(StandingReply::One(find(c, id).await?.map(Box::new))),
        StandingOp::Revoke { id, by, at } => {
            c.execute(
                "UPDATE standing_approvals SET revoked_at = $2, revoked_by = $3 \
                 WHERE id = $1 AND revoked_at IS NULL",
                &[id, at, by],
            )
            .await
            .map_err(pg_error)?;
            Ok(StandingReply::One(find(c, id).await?.map(Box::new)))
        }
    }
}

/// The standing approval `id`, if it exists.
async fn find(c: &Conn<'_>, id: &str) -> Result<Option<StandingApproval>, StoreError> {
    let sql = format!("SELECT {STANDING_COLUMNS} FROM standing_approvals WHERE id = $1");
    let row = c.query_opt(&sql, &[&id]).await.map_err(pg_error)?;
    row.as_ref()
        .map(read_standing)
        .transpose()
        .map_err(pg_error)
}

/// Takes one call of a standing approval of `tool` for `caller` that holds at `now`: the one
/// that expires first. The sub-select locks the row it picks (waiting for another replica's
/// commit, then re-checking it, and moving on to the next holding row if it no longer holds),
/// and the update is conditional on a call left under that lock.
async fn take_one(
    c: &Conn<'_>,
    tool: &str,
    caller: &str,
    since: i64,
    now: i64,
) -> Result<Option<Taken>, StoreError> {
    let row = c
        .query_opt(
            "UPDATE standing_approvals SET calls_left = calls_left - 1 WHERE id = ( \
               SELECT id FROM standing_approvals WHERE tool = $1 AND caller = $2 \
               AND revoked_at IS NULL AND calls_left > 0 AND expires_at > $3 \
               AND created_at >= $4 \
               ORDER BY expires_at, id LIMIT 1 FOR UPDATE \
             ) AND calls_left > 0 AND revoked_at IS NULL AND expires_at > $3 \
             RETURNING id, approver, approver_name",
            &[&tool, &caller, &now, &since],
        )
        .await
        .map_err(pg_error)?;
    row.map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
        .transpose()
        .map_err(pg_error)
}

/// [`crate::store::StandingStore::insert_standing_call`].
async fn insert_call(
    c: &Conn<'_>,
    replica: &str,
    call: &PreparedCall,
    suspended: &Prepared,
    since: i64,
    feed: &mut FeedRows,
    now: i64,
) -> Result<(Inserted, Option<StandingUse>), StoreError> {
    let taken = match call.caller.as_deref() {
        Some(caller) => take_one(c, &call.tool, caller, since, now).await?,
        None => None,
    };
    let mut rows = CallRows::default();
    rows.push(call, taken.is_none().then_some(suspended));
    if !rows.insert(c, replica).await?.contains(&call.call_id) {
        if let Some((id, ..)) = &taken {
            c.execute(
                "UPDATE standing_approvals SET calls_left = calls_left + 1 WHERE id = $1",
                &[id],
            )
            .await
            .map_err(pg_error)?;
        }
        return match existing(c, call, now).await?? {
            Reply::Inserted(inserted) => Ok((inserted, None)),
            _ => Err(StoreError::Backend("an insert answered otherwise".into())),
        };
    }
    let Some((id, approver, approver_name)) = taken else {
        let mut suspensions = SuspensionRows::default();
        suspensions.push(&call.call_id, suspended);
        suspensions.insert(c, now).await?;
        feed.push_outcome(&call.call_id, suspended);
        return Ok((Inserted::New, None));
    };
    let by = Actor {
        name: approver.clone(),
        display: approver_name,
    };
    let event = actor_event_json(now, STANDING_APPROVED, &by, Some(&standing_details(&id)));
    append(c, &call.call_id, &event).await?;
    Ok((Inserted::New, Some(StandingUse { id, approver })))
}

/// Appends `event` to the history of the call `call_id`.
async fn append(c: &Conn<'_>, call_id: &str, event: &str) -> Result<(), StoreError> {
    c.execute(
        "UPDATE calls SET events = events || $2::text::jsonb WHERE call_id = $1",
        &[&call_id, &event],
    )
    .await
    .map_err(pg_error)?;
    Ok(())
}
