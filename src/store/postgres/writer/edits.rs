//! Approval with edits on PostgreSQL: holding an approver's edit on its suspension, and making
//! it the call's input once the call is approved. The rule (when an edit restarts the count) is
//! `crate::store::edits`'; here are only its statements, run inside the resolution's
//! transaction after the suspension's row is locked (by `vote`'s `FOR UPDATE`, or by the
//! conditional update that approves it), so that two replicas' edits are applied one after
//! the other.

use serde_json::Value;

use crate::store::edits::PendingEdit;
use crate::store::postgres::pg_error;
use crate::store::postgres::reads::Conn;
use crate::store::{Actor, StoreError};

/// Holds `by`'s `edit` on the suspension `token` of the call `call_id` when it changes the
/// input as it stands, with its `edited` event in the call's history; whether it did (the
/// approvals counted so far are then of another input).
pub(super) async fn hold(
    c: &Conn<'_>,
    token: &str,
    call_id: &str,
    edit: Option<&Value>,
    by: &Actor,
    now: i64,
) -> Result<bool, StoreError> {
    if edit.is_none() {
        return Ok(false);
    }
    let row = c
        .query_opt(
            "SELECT s.edit, c.input FROM suspensions s JOIN calls c ON c.call_id = s.call_id \
             WHERE s.token = $1",
            &[&token],
        )
        .await
        .map_err(pg_error)?
        .ok_or_else(|| StoreError::Corrupt(format!("suspension of {call_id} vanished")))?;
    let standing: Option<&str> = row.try_get(0).map_err(pg_error)?;
    let input: &str = row.try_get(1).map_err(pg_error)?;
    let Some(held) = PendingEdit::proposed(edit, standing, input, by, now)? else {
        return Ok(false);
    };
    c.execute(
        "UPDATE suspensions SET edit = $2 WHERE token = $1",
        &[&token, &held.stored()?],
    )
    .await
    .map_err(pg_error)?;
    c.execute(
        "UPDATE calls SET events = events || $2::text::jsonb WHERE call_id = $1",
        &[&call_id, &held.event(by)],
    )
    .await
    .map_err(pg_error)?;
    Ok(true)
}

/// Makes the edit the suspension `token` holds, if any, the input of its call `call_id`,
/// which keeps the input it was called with and who edited it.
pub(super) async fn release(c: &Conn<'_>, token: &str, call_id: &str) -> Result<(), StoreError> {
    let row = c
        .query_opt(
            "SELECT s.edit, c.input, c.edited FROM suspensions s \
             JOIN calls c ON c.call_id = s.call_id WHERE s.token = $1 AND s.edit IS NOT NULL",
            &[&token],
        )
        .await
        .map_err(pg_error)?;
    let Some(row) = row else {
        return Ok(());
    };
    let held: Option<&str> = row.try_get(0).map_err(pg_error)?;
    let input: &str = row.try_get(1).map_err(pg_error)?;
    let edited: Option<&str> = row.try_get(2).map_err(pg_error)?;
    let Some(held) = PendingEdit::parse(held)? else {
        return Ok(());
    };
    let (input, edited) = held.released(input, edited)?;
    c.execute(
        "UPDATE calls SET input = $2, edited = $3 WHERE call_id = $1",
        &[&call_id, &input, &edited],
    )
    .await
    .map_err(pg_error)?;
    Ok(())
}
