//! Approval with edits on SQLite: holding an approver's edit on its suspension, and making it
//! the call's input once the call is approved. The rule (when an edit restarts the count) is
//! `crate::store::edits`'; here are only its statements, run by the writer inside the
//! resolution's transaction.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::backend;
use crate::store::edits::PendingEdit;
use crate::store::{Actor, StoreError};

/// Holds `by`'s `edit` on the suspension `token` of the call `call_id` when it changes the
/// input as it stands, with its `edited` event in the call's history; whether it did (the
/// approvals counted so far are then of another input).
pub(super) fn hold(
    conn: &Connection,
    token: &str,
    call_id: &str,
    edit: Option<&Value>,
    by: &Actor,
    now: i64,
) -> Result<bool, StoreError> {
    if edit.is_none() {
        return Ok(false);
    }
    let (standing, input): (Option<String>, String) = conn
        .prepare_cached(
            "SELECT s.edit, c.input FROM suspensions s JOIN calls c ON c.call_id = s.call_id \
             WHERE s.token = ?1",
        )
        .and_then(|mut st| st.query_row([token], |row| Ok((row.get(0)?, row.get(1)?))))
        .map_err(backend)?;
    let Some(held) = PendingEdit::proposed(edit, standing.as_deref(), &input, by, now)? else {
        return Ok(false);
    };
    let stored = held.stored()?;
    conn.prepare_cached("UPDATE suspensions SET edit = ?2 WHERE token = ?1")
        .and_then(|mut st| st.execute(params![token, stored]))
        .map_err(backend)?;
    let event = held.event(by);
    conn.prepare_cached(
        "UPDATE calls SET events = json_insert(events, '$[#]', json(?2)) WHERE call_id = ?1",
    )
    .and_then(|mut st| st.execute(params![call_id, event]))
    .map_err(backend)?;
    super::audit::stored_event(conn, call_id, &event)?;
    Ok(true)
}

/// Makes the edit the suspension `token` holds, if any, the input of its call `call_id`,
/// which keeps the input it was called with and who edited it.
pub(super) fn release(conn: &Connection, token: &str, call_id: &str) -> Result<(), StoreError> {
    let row: Option<(String, String, Option<String>)> = conn
        .prepare_cached(
            "SELECT s.edit, c.input, c.edited FROM suspensions s \
             JOIN calls c ON c.call_id = s.call_id WHERE s.token = ?1 AND s.edit IS NOT NULL",
        )
        .and_then(|mut st| {
            st.query_row([token], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                .optional()
        })
        .map_err(backend)?;
    let Some((held, input, edited)) = row else {
        return Ok(());
    };
    let Some(held) = PendingEdit::parse(Some(&held))? else {
        return Ok(());
    };
    let (input, edited) = held.released(&input, edited.as_deref())?;
    conn.prepare_cached("UPDATE calls SET input = ?2, edited = ?3 WHERE call_id = ?1")
        .and_then(|mut st| st.execute(params![call_id, input, edited]))
        .map_err(backend)?;
    Ok(())
}
