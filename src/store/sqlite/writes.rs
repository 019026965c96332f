//! The statements of each write: what the writer thread runs, in a savepoint, for each
//! `WriteOp`.
//!
//! Here the Store trait's promises are kept in SQL: the conditional insert on (tool,
//! idempotency key) in [`insert`]; the resolution conditional on a pending, unexpired
//! suspension in [`resolve`], so that of two resolutions of one token exactly one wins; a
//! suspension written in the same transaction as its call's `suspended` status
//! ([`insert_suspension`]); an event appended with every change ([`append_event`]). Every
//! write answers with the call as it now is, read back inside the same transaction.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use super::reads::{find_call, load_call};
use super::{audit, backend};
use crate::store::record::{
    APPROVAL_RECORDED, ESCALATED, Prepared, PreparedCall, Vote, actor_event_json, approvals_so_far,
    approved_details, events_json, expired_error, feed_type, json_text, parse_json,
    rejected_details, rejected_error, settled_columns, to_json,
};
use crate::store::{
    Actor, ApprovalVote, CallRecord, CallStatus, Inserted, Reconciled, Rerun, Resolution, Resolved,
    Settlement, StoreError,
};

/// Claims the interrupted call `call_id` for another run; `None` when it is not interrupted.
pub(super) fn rerun(
    conn: &Connection,
    call_id: &str,
    now: i64,
) -> Result<Option<Rerun>, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE calls SET status = 'running', attempts = attempts + 1, \
             updated_at = ?2 WHERE call_id = ?1 AND status = 'interrupted'",
        )
        .and_then(|mut st| st.execute(params![call_id, now]))
        .map_err(backend)?;
    if changed == 0 {
        return Ok(None);
    }
    append_event(
        conn,
        call_id,
        now,
        "redispatched",
        None,
        Some(&json!({"after": "interrupted"})),
    )?;
    // The call's latest suspension, if approved, is what the interrupted run resumed.
    let resume: Option<(String, Option<String>)> = conn
        .prepare_cached(
            "SELECT status, resume_input FROM suspensions WHERE call_id = ?1 \
             ORDER BY seq DESC LIMIT 1",
        )
        .and_then(|mut st| {
            st.query_row([call_id], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(backend)?;
    let resume_input = match resume {
        Some((status, Some(input))) if status == "approved" => Some(parse_json(&input)?),
        _ => None,
    };
    Ok(Some(Rerun {
        call: load_call(conn, call_id, now)?,
        resume_input,
    }))
}

/// Inserts a call; with an idempotency key that another call of the tool holds, nothing.
pub(super) const INSERT_CALL: &str = "INSERT INTO calls (call_id, tool, effect, caller, \
    status, input, output, error, idempotency_key, attempts, created_at, updated_at, events, \
    trace) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
    ON CONFLICT DO NOTHING";

/// Runs [`INSERT_CALL`] for `call`. A call recorded with its outcome is inserted as it ends, in
/// one row with both its events: no `running` row to update a moment later.
pub(super) fn execute_insert(
    statement: &mut rusqlite::Statement<'_>,
    call: &PreparedCall,
    outcome: Option<&Prepared>,
) -> rusqlite::Result<usize> {
    let (status, output, error, updated_at) = match outcome {
        Some(o) => (o.status, o.output.as_deref(), o.error.as_deref(), o.at),
        None => (CallStatus::Running, None, None, call.created_at),
    };
    statement.execute(params![
        call.call_id,
        call.tool,
        call.effect,
        call.caller,
        status.as_str(),
        call.input,
        output,
        error,
        call.idempotency_key,
        i64::from(call.attempts),
        call.created_at,
        updated_at,
        events_json(call, outcome),
        call.trace
    ])
}

/// Records a new call, running or already finished with `outcome`; a call with the same
/// (tool, idempotency key) is returned instead.
pub(super) fn insert(
    conn: &Connection,
    call: PreparedCall,
    outcome: Option<Prepared>,
    now: i64,
) -> Result<Inserted, StoreError> {
    // The conditional insert: a second call with the same (tool, idempotency key) writes
    // nothing, and the one that exists is returned instead.
    let changed = conn
        .prepare_cached(INSERT_CALL)
        .and_then(|mut st| execute_insert(&mut st, &call, outcome.as_ref()))
        .map_err(backend)?;
    if changed == 0 {
        let existing: Option<String> = match &call.idempotency_key {
            Some(key) => conn
                .prepare_cached(
                    "SELECT call_id FROM calls WHERE tool = ?1 AND idempotency_key = ?2",
                )
                .and_then(|mut st| {
                    st.query_row(params![call.tool, key], |row| row.get(0))
                        .optional()
                })
                .map_err(backend)?,
            None => None,
        };
        return match existing {
            Some(call_id) => Ok(Inserted::Existing(Box::new(load_call(
                conn, &call_id, now,
            )?))),
            None => Err(StoreError::Backend(format!(
                "call id {} already exists",
                call.call_id
            ))),
        };
    }
    let mut entries = Vec::with_capacity(2);
    audit::inserted(&mut entries, &call, outcome.as_ref());
    audit::append(conn, entries)?;
    if let Some(outcome) = outcome {
        let token = outcome.suspension.as_ref().map(|s| s.0.clone());
        if let Some(suspension) = outcome.suspension {
            insert_suspension(conn, &call.call_id, suspension, now)?;
        }
        append_feed(conn, &call.call_id, now, outcome.status, token.as_deref())?;
    }
    Ok(Inserted::New)
}

/// Creates the pending suspension of the call `call_id`, whose row is written first, in the
/// same transaction.
fn insert_suspension(
    conn: &Connection,
    call_id: &str,
    (token, reason, input_schema, expires_at): (String, String, String, Option<i64>),
    now: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO suspensions (token, call_id, tool, reason, input_schema, status, \
         created_at, expires_at) \
         SELECT ?1, ?2, c.tool, ?3, ?4, 'pending', ?5, ?6 FROM calls c WHERE c.call_id = ?2",
    )
    .and_then(|mut st| {
        st.execute(params![
            token,
            call_id,
            reason,
            input_schema,
            now,
            expires_at
        ])
    })
    .map_err(backend)
    .and_then(|inserted| match inserted {
        1 => Ok(()),
        // The call is written first, in the same transaction.
        _ => Err(StoreError::Backend(format!("no call {call_id} to suspend"))),
    })
}

/// Appends one event to the call's history, and to the audit chain.
pub(super) fn append_event(
    conn: &Connection,
    call_id: &str,
    at: i64,
    kind: &str,
    actor: Option<&str>,
    details: Option<&Value>,
) -> Result<(), StoreError> {
    let by = Actor {
        name: actor.map(str::to_owned),
        display: None,
    };
    append_event_by(conn, call_id, at, kind, &by, details)
}

/// Appends one event caused by `by` (its name and display name) to the call's history, and to
/// the audit chain.
pub(super) fn append_event_by(
    conn: &Connection,
    call_id: &str,
    at: i64,
    kind: &str,
    by: &Actor,
    details: Option<&Value>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE calls SET events = json_insert(events, '$[#]', json(?2)) WHERE call_id = ?1",
    )
    .and_then(|mut st| st.execute(params![call_id, actor_event_json(at, kind, by, details)]))
    .map_err(backend)?;
    let who = (by.name.as_deref(), by.display.as_deref());
    audit::event(conn, call_id, at, kind, who, details.map(Value::to_string))
}

/// Moves the running call `call_id` to its outcome, with its event; a suspension is created
/// with it.
/// An outcome whose run no longer owns the call (the call is not running, or runs again under
/// a later attempt) is not recorded as the call's: it is appended to its history as
/// `late_outcome`, and the call is answered as it is now.
pub(super) fn record_outcome(
    conn: &Connection,
    call_id: &str,
    run: Option<u32>,
    outcome: Prepared,
    now: i64,
) -> Result<Option<CallRecord>, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE calls SET status = ?2, output = ?3, error = ?4, updated_at = ?5, \
             attempts = ?6, events = json_insert(events, '$[#]', json(?7)) \
             WHERE call_id = ?1 AND status = 'running' AND (?8 IS NULL OR attempts = ?8)",
        )
        .and_then(|mut st| {
            st.execute(params![
                call_id,
                outcome.status.as_str(),
                outcome.output,
                outcome.error,
                now,
                i64::from(outcome.attempts),
                outcome.event(),
                run.map(i64::from)
            ])
        })
        .map_err(backend)?;
    if changed == 0 {
        let late = outcome.late_event(None, run, now)?;
        let appended = conn
            .prepare_cached(
                "UPDATE calls SET events = json_insert(events, '$[#]', json(?2)) \
                 WHERE call_id = ?1 AND events != ''",
            )
            .and_then(|mut st| st.execute(params![call_id, late]))
            .map_err(backend)?;
        if appended == 0 {
            return Err(StoreError::NotRunning {
                call_id: call_id.to_owned(),
            });
        }
        audit::stored_event(conn, call_id, &late)?;
        return load_call(conn, call_id, now).map(Some);
    }
    audit::recorded_outcome(conn, call_id, &outcome)?;
    let token = outcome.suspension.as_ref().map(|s| s.0.clone());
    if let Some(suspension) = outcome.suspension {
        insert_suspension(conn, call_id, suspension, now)?;
    }
    append_feed(conn, call_id, now, outcome.status, token.as_deref())?;
    Ok(None)
}

/// Appends the change of `call_id` into `status` to the change feed, with the call's attempts
/// as the change left them (so after the call's row is updated).
pub(super) fn append_feed(
    conn: &Connection,
    call_id: &str,
    at: i64,
    status: CallStatus,
    token: Option<&str>,
) -> Result<(), StoreError> {
    append_feed_of(conn, call_id, at, feed_type(status), token, None)
}

/// [`append_feed`], of the entry type `kind`, with the approvals a `call.approval_recorded`
/// entry keeps (`progress`, as stored).
fn append_feed_of(
    conn: &Connection,
    call_id: &str,
    at: i64,
    kind: &str,
    token: Option<&str>,
    progress: Option<&str>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO feed (at, type, call_id, attempts, token, approvals) \
         SELECT ?2, ?3, call_id, attempts, ?4, ?5 FROM calls WHERE call_id = ?1",
    )
    .and_then(|mut st| st.execute(params![call_id, at, kind, token, progress]))
    .map_err(backend)
    .map(drop)
}

/// Resolves the suspension `token`, if it is still pending and unexpired.
pub(super) fn resolve(
    conn: &Connection,
    token: &str,
    resolution: Resolution,
    by: &Actor,
    now: i64,
) -> Result<Resolved, StoreError> {
    let actor = by.name.as_deref();
    let status = match &resolution {
        Resolution::Approve { .. } => "approved",
        Resolution::Reject { .. } => "rejected",
        Resolution::Complete { .. } => "completed",
        // Whoever read it as expired has decided; this only writes it down.
        Resolution::Expire => return unresolved(conn, token, now),
    };
    if let Resolution::Approve { quorum, .. } = &resolution
        && *quorum > 1
        && let Some(answer) = vote(conn, token, *quorum, &resolution, by, now)?
    {
        return Ok(answer);
    }
    let (resume_input, reject_reason) = match &resolution {
        Resolution::Approve { resume_input, .. } => (Some(json_text(resume_input)), None),
        Resolution::Reject { reason, .. } => (None, reason.as_deref()),
        Resolution::Complete { .. } | Resolution::Expire => (None, None),
    };
    // Conditional on `pending` and unexpired: of two resolutions of one token, the second
    // changes nothing.
    let call_id: Option<String> = conn
        .prepare_cached(
            "UPDATE suspensions SET status = ?2, resume_input = ?3, reject_reason = ?4, \
             resolved_at = ?5, resolved_by = ?6 WHERE token = ?1 AND status = 'pending' \
             AND (expires_at IS NULL OR expires_at > ?5) RETURNING call_id",
        )
        .and_then(|mut st| {
            st.query_row(
                params![token, status, resume_input, reject_reason, now, actor],
                |row| row.get(0),
            )
            .optional()
        })
        .map_err(backend)?;
    let Some(call_id) = call_id else {
        return unresolved(conn, token, now);
    };
    match resolution {
        Resolution::Approve {
            resume_input, edit, ..
        } => {
            super::edits::hold(conn, token, &call_id, edit.as_ref(), by, now)?;
            super::edits::release(conn, token, &call_id)?;
            conn.prepare_cached(
                "UPDATE calls SET status = 'running', attempts = attempts + 1, updated_at = ?2 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, now]))
            .map_err(backend)?;
            let details = approved_details(&resume_input);
            append_event_by(conn, &call_id, now, "approved", by, Some(&details))?;
            append_event(conn, &call_id, now, "redispatched", None, None)?;
            Ok(Resolved::Approved(load_call(conn, &call_id, now)?))
        }
        Resolution::Reject { reason, option } => {
            let error = to_json(&rejected_error(reason.as_deref(), option.as_ref()))?;
            conn.prepare_cached(
                "UPDATE calls SET status = 'rejected', error = ?2, updated_at = ?3 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, error, now]))
            .map_err(backend)?;
            let details = rejected_details(reason.as_deref(), option.as_ref());
            append_event_by(conn, &call_id, now, "rejected", by, details.as_ref())?;
            append_feed(conn, &call_id, now, CallStatus::Rejected, None)?;
            Ok(Resolved::Rejected(load_call(conn, &call_id, now)?))
        }
        Resolution::Complete { output } => {
            conn.prepare_cached(
                "UPDATE calls SET status = 'completed', output = ?2, updated_at = ?3 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, json_text(&output), now]))
            .map_err(backend)?;
            append_event_by(conn, &call_id, now, "completed_externally", by, None)?;
            append_feed(conn, &call_id, now, CallStatus::Completed, None)?;
            Ok(Resolved::Completed(load_call(conn, &call_id, now)?))
        }
        Resolution::Expire => unreachable!("handled before the update"),
    }
}

/// An approval of the suspension `token`, whose policy needs `quorum` distinct approvers,
/// recorded if it is still pending and unexpired: the answer when it is short of the quorum or
/// its approver approved before; `None` when it reaches the quorum (the approvals stored, the
/// caller approves the suspension as with one approver) or the token is not pending (the
/// caller says why).
fn vote(
    conn: &Connection,
    token: &str,
    quorum: u32,
    resolution: &Resolution,
    by: &Actor,
    now: i64,
) -> Result<Option<Resolved>, StoreError> {
    let Resolution::Approve {
        resume_input, edit, ..
    } = resolution
    else {
        return Ok(None);
    };
    let row: Option<(String, Option<String>)> = conn
        .prepare_cached(
            "SELECT call_id, approvals FROM suspensions WHERE token = ?1 AND status = 'pending' \
             AND (expires_at IS NULL OR expires_at > ?2)",
        )
        .and_then(|mut st| {
            st.query_row(params![token, now], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(backend)?;
    let Some((call_id, stored)) = row else {
        return Ok(None);
    };
    let store = |votes: &[ApprovalVote]| -> Result<(), StoreError> {
        let votes = to_json(&votes)?;
        conn.prepare_cached("UPDATE suspensions SET approvals = ?2 WHERE token = ?1")
            .and_then(|mut st| st.execute(params![token, votes]))
            .map_err(backend)
            .map(drop)
    };
    // An edit restarts the count: the approvals so far were of another input.
    let restarted = super::edits::hold(conn, token, &call_id, edit.as_ref(), by, now)?;
    let stored = if restarted { None } else { stored };
    match Vote::cast(stored.as_deref(), by, quorum, now)? {
        Vote::Again(approvals) => Ok(Some(Resolved::AlreadyApproved {
            call: load_call(conn, &call_id, now)?,
            approvals,
        })),
        Vote::Quorum(votes) => {
            store(&votes)?;
            Ok(None)
        }
        Vote::Short(approvals) => {
            store(&approvals)?;
            conn.prepare_cached("UPDATE calls SET updated_at = ?2 WHERE call_id = ?1")
                .and_then(|mut st| st.execute(params![call_id, now]))
                .map_err(backend)?;
            let details = approved_details(resume_input);
            append_event_by(conn, &call_id, now, "approval_recorded", by, Some(&details))?;
            let progress = approvals_so_far(&approvals, quorum)?;
            append_feed_of(
                conn,
                &call_id,
                now,
                APPROVAL_RECORDED,
                Some(token),
                Some(&progress),
            )?;
            Ok(Some(Resolved::Recorded {
                call: load_call(conn, &call_id, now)?,
                approvals,
            }))
        }
    }
}

/// Escalates the pending, unexpired suspensions of `tool` made at or before `created_by` that
/// are not escalated yet; the calls escalated.
pub(super) fn escalate(
    conn: &Connection,
    tool: &str,
    created_by: i64,
    now: i64,
) -> Result<Vec<String>, StoreError> {
    let escalated: Vec<(String, String)> = conn
        .prepare_cached(
            "UPDATE suspensions SET escalated_at = ?3 WHERE status = 'pending' AND tool = ?1 \
             AND escalated_at IS NULL AND created_at <= ?2 \
             AND (expires_at IS NULL OR expires_at > ?3) RETURNING token, call_id",
        )
        .and_then(|mut st| {
            st.query_map(params![tool, created_by, now], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect()
        })
        .map_err(backend)?;
    for (token, call_id) in &escalated {
        conn.prepare_cached("UPDATE calls SET updated_at = ?2 WHERE call_id = ?1")
            .and_then(|mut st| st.execute(params![call_id, now]))
            .map_err(backend)?;
        append_event(conn, call_id, now, "escalated", None, None)?;
        append_feed_of(conn, call_id, now, ESCALATED, Some(token), None)?;
    }
    Ok(escalated.into_iter().map(|(_, call_id)| call_id).collect())
}

/// Why a token could not be resolved: it never existed, was resolved before, or has expired
/// (which is recorded now, so the call's record says so too).
fn unresolved(conn: &Connection, token: &str, now: i64) -> Result<Resolved, StoreError> {
    let row: Option<(String, String)> = conn
        .prepare_cached("SELECT call_id, status FROM suspensions WHERE token = ?1")
        .and_then(|mut st| {
            st.query_row([token], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(backend)?;
    let Some((call_id, status)) = row else {
        return Ok(Resolved::UnknownToken);
    };
    match status.as_str() {
        "expired" => return Ok(Resolved::Expired(load_call(conn, &call_id, now)?)),
        "pending" => {}
        _ => return Ok(Resolved::AlreadyResolved(load_call(conn, &call_id, now)?)),
    }
    conn.prepare_cached(
        "UPDATE suspensions SET status = 'expired', resolved_at = ?2 WHERE token = ?1",
    )
    .and_then(|mut st| st.execute(params![token, now]))
    .map_err(backend)?;
    let error = to_json(&expired_error())?;
    conn.prepare_cached(
        "UPDATE calls SET status = 'expired', error = ?2, updated_at = ?3 WHERE call_id = ?1",
    )
    .and_then(|mut st| st.execute(params![call_id, error, now]))
    .map_err(backend)?;
    append_event(conn, &call_id, now, "expired", None, None)?;
    append_feed(conn, &call_id, now, CallStatus::Expired, None)?;
    Ok(Resolved::Expired(load_call(conn, &call_id, now)?))
}

/// Settles a call that needs reconciliation (or an interrupted one).
pub(super) fn reconcile(
    conn: &Connection,
    call_id: &str,
    settlement: Settlement,
    by: &Actor,
    now: i64,
) -> Result<Reconciled, StoreError> {
    let (status, output, error) = settled_columns(&settlement)?;
    // Settled as failed, the effect did not happen: the key is released so that a new request
    // can make it.
    let changed = conn
        .prepare_cached(
            "UPDATE calls SET status = ?2, output = ?3, error = ?4, updated_at = ?5, \
             idempotency_key = CASE WHEN ?2 = 'failed' THEN NULL ELSE idempotency_key END \
             WHERE call_id = ?1 AND status IN ('needs_reconciliation', 'interrupted')",
        )
        .and_then(|mut st| st.execute(params![call_id, status.as_str(), output, error, now]))
        .map_err(backend)?;
    if changed == 0 {
        return Ok(match find_call(conn, call_id, now)? {
            Some(call) => Reconciled::NotNeeded(call),
            None => Reconciled::UnknownCall,
        });
    }
    append_event_by(
        conn,
        call_id,
        now,
        "reconciled",
        by,
        Some(&json!({"status": status.as_str()})),
    )?;
    append_feed(conn, call_id, now, status, None)?;
    Ok(Reconciled::Settled(load_call(conn, call_id, now)?))
}

/// Drops the feed entries older than `before` (Unix ms), and every entry before them, and
/// raises the floor under which a cursor is expired.
pub(super) fn prune_feed(conn: &Connection, before: i64) -> Result<u64, StoreError> {
    let last: Option<i64> = conn
        .prepare_cached("SELECT max(seq) FROM feed WHERE at < ?1")
        .and_then(|mut st| st.query_row([before], |row| row.get(0)))
        .map_err(backend)?;
    let Some(last) = last else {
        return Ok(0);
    };
    let dropped = conn
        .prepare_cached("DELETE FROM feed WHERE seq <= ?1")
        .and_then(|mut st| st.execute([last]))
        .map_err(backend)?;
    conn.prepare_cached("UPDATE feed_state SET floor = max(floor, ?1)")
        .and_then(|mut st| st.execute([last]))
        .map_err(backend)?;
    Ok(dropped as u64)
}
