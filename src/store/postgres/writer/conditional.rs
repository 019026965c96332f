//! The batch's conditional writes: re-running an interrupted call, resolving a suspension,
//! settling a call that needs reconciliation, pruning the feed. Each depends on what it finds,
//! so each runs as its own statements, one write after another, inside the batch's transaction.
//!
//! Their conditions are the Store traits' promises on a shared database: an `UPDATE` that
//! matches only the state it leaves (`interrupted`, a pending and unexpired suspension,
//! `needs_reconciliation`), so that of two replicas doing the same the second waits for the
//! first's row lock and then changes nothing.

use serde_json::{Value, json};

use super::batch::FeedRows;
use crate::store::postgres::pg_error;
use crate::store::postgres::reads::{Conn, find_call, load_call};
use crate::store::record::{
    APPROVAL_RECORDED, ESCALATED, Vote, actor_event_json, approvals_so_far, approved_details,
    event_json, expired_error, json_text, parse_json, rejected_details, rejected_error,
    settled_columns, to_json,
};
use crate::store::{
    Actor, CallRecord, CallStatus, Reconciled, Rerun, Resolution, Resolved, Settlement, StoreError,
};

pub(super) async fn rerun(
    c: &Conn<'_>,
    replica: &str,
    call_id: &str,
    now: i64,
) -> Result<Option<Rerun>, StoreError> {
    let event = event_json(
        now,
        "redispatched",
        None,
        Some(&json!({"after": "interrupted"})),
    );
    let claimed = c
        .execute(
            "WITH claimed AS ( \
               UPDATE calls SET status = 'running', attempts = attempts + 1, updated_at = $2, \
               owner = $3, events = events || $4::text::jsonb \
               WHERE call_id = $1 AND status = 'interrupted' RETURNING call_id \
             ) INSERT INTO running_calls (call_id, owner) SELECT call_id, $3 FROM claimed \
             ON CONFLICT (call_id) DO UPDATE SET owner = EXCLUDED.owner",
            &[&call_id, &now, &replica, &event],
        )
        .await
        .map_err(pg_error)?;
    if claimed == 0 {
        return Ok(None);
    }
    // The call's latest suspension, if approved, is what the interrupted run resumed.
    let resume = c
        .query_opt(
            "SELECT status, resume_input FROM suspensions WHERE call_id = $1 \
             ORDER BY seq DESC LIMIT 1",
            &[&call_id],
        )
        .await
        .map_err(pg_error)?;
    let resume_input = match resume {
        Some(row) => {
            let status: String = row.try_get(0).map_err(pg_error)?;
            let input: Option<String> = row.try_get(1).map_err(pg_error)?;
            match input {
                Some(input) if status == "approved" => Some(parse_json(&input)?),
                _ => None,
            }
        }
        None => None,
    };
    Ok(Some(Rerun {
        call: load_call(c, call_id, now).await?,
        resume_input,
    }))
}

pub(super) async fn resolve(
    c: &Conn<'_>,
    replica: &str,
    token: &str,
    resolution: &Resolution,
    by: &Actor,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Resolved, StoreError> {
    let actor = by.name.as_deref();
    if let Resolution::Approve {
        quorum,
        resume_input,
        edit,
    } = resolution
        && *quorum > 1
        && let Some(answer) = vote(c, token, *quorum, (resume_input, edit), by, feed, now).await?
    {
        return Ok(answer);
    }
    let (status, resume_input, reject_reason) = match resolution {
        Resolution::Approve { resume_input, .. } => {
            ("approved", Some(json_text(resume_input)), None)
        }
        Resolution::Reject { reason, .. } => ("rejected", None, reason.as_deref()),
        Resolution::Complete { .. } => ("completed", None, None),
        // Whoever read it as expired has decided; this only writes it down.
        Resolution::Expire => return unresolved(c, token, feed, now).await,
    };
    // Conditional on `pending` and unexpired: of two resolutions of one token, on any replicas,
    // the second waits for the first's lock and then changes nothing.
    let call_id: Option<String> = c
        .query_opt(
            "UPDATE suspensions SET status = $2, resume_input = $3, reject_reason = $4, \
             resolved_at = $5, resolved_by = $6 WHERE token = $1 AND status = 'pending' \
             AND (expires_at IS NULL OR expires_at > $5) RETURNING call_id",
            &[&token, &status, &resume_input, &reject_reason, &now, &actor],
        )
        .await
        .map_err(pg_error)?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(pg_error)?;
    let Some(call_id) = call_id else {
        return unresolved(c, token, feed, now).await;
    };
    match resolution {
        Resolution::Approve {
            resume_input, edit, ..
        } => {
            super::edits::hold(c, token, &call_id, edit.as_ref(), by, now).await?;
            super::edits::release(c, token, &call_id).await?;
            let details = approved_details(resume_input);
            let events = format!(
                "[{},{}]",
                actor_event_json(now, "approved", by, Some(&details)),
                event_json::<Value>(now, "redispatched", None, None)
            );
            c.execute(
                "WITH resumed AS ( \
                   UPDATE calls SET status = 'running', attempts = attempts + 1, \
                   updated_at = $2, owner = $3, events = events || $4::text::jsonb \
                   WHERE call_id = $1 RETURNING call_id \
                 ) INSERT INTO running_calls (call_id, owner) SELECT call_id, $3 FROM resumed \
                 ON CONFLICT (call_id) DO UPDATE SET owner = EXCLUDED.owner",
                &[&call_id, &now, &replica, &events],
            )
            .await
            .map_err(pg_error)?;
            Ok(Resolved::Approved(load_call(c, &call_id, now).await?))
        }
        Resolution::Reject { reason, option } => {
            let error = to_json(&rejected_error(reason.as_deref(), option.as_ref()))?;
            let details = rejected_details(reason.as_deref(), option.as_ref());
            let event = actor_event_json(now, "rejected", by, details.as_ref());
            let call = end(c, feed, &REJECTED, &call_id, &error, &event, now).await?;
            Ok(Resolved::Rejected(call))
        }
        Resolution::Complete { output } => {
            let event = actor_event_json::<Value>(now, "completed_externally", by, None);
            let output = json_text(output);
            let call = end(c, feed, &COMPLETED, &call_id, &output, &event, now).await?;
            Ok(Resolved::Completed(call))
        }
        Resolution::Expire => unreachable!("handled before the update"),
    }
}

/// An approval of the suspension `token`, whose policy needs `quorum` distinct approvers,
/// recorded if it is still pending and unexpired: the answer when it is short of the quorum or
/// its approver approved before; `None` when it reaches the quorum (the approvals stored, the
/// caller approves the suspension as with one approver) or the token is not pending (the
/// caller says why). The suspension's row is locked first: of two approvals on two replicas,
/// the second reads the first's, so that exactly one of them reaches the quorum. An approval
/// with an edit that changes the input (`resume_input` and the edit) counts first, alone.
async fn vote(
    c: &Conn<'_>,
    token: &str,
    quorum: u32,
    (resume_input, edit): (&Value, &Option<Value>),
    by: &Actor,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Option<Resolved>, StoreError> {
    let row = c
        .query_opt(
            "SELECT call_id, approvals FROM suspensions WHERE token = $1 AND status = 'pending' \
             AND (expires_at IS NULL OR expires_at > $2) FOR UPDATE",
            &[&token, &now],
        )
        .await
        .map_err(pg_error)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let call_id: String = row.try_get(0).map_err(pg_error)?;
    let stored: Option<&str> = row.try_get(1).map_err(pg_error)?;
    // An edit restarts the count: the approvals so far were of another input.
    let restarted = super::edits::hold(c, token, &call_id, edit.as_ref(), by, now).await?;
    let stored = if restarted { None } else { stored };
    let (votes, short) = match Vote::cast(stored, by, quorum, now)? {
        Vote::Again(approvals) => {
            let call = load_call(c, &call_id, now).await?;
            return Ok(Some(Resolved::AlreadyApproved { call, approvals }));
        }
        Vote::Quorum(votes) => (votes, false),
        Vote::Short(votes) => (votes, true),
    };
    c.execute(
        "UPDATE suspensions SET approvals = $2 WHERE token = $1",
        &[&token, &to_json(&votes)?],
    )
    .await
    .map_err(pg_error)?;
    if !short {
        return Ok(None);
    }
    let event = actor_event_json(
        now,
        "approval_recorded",
        by,
        Some(&approved_details(resume_input)),
    );
    c.execute(
        "UPDATE calls SET updated_at = $2, events = events || $3::text::jsonb \
         WHERE call_id = $1",
        &[&call_id, &now, &event],
    )
    .await
    .map_err(pg_error)?;
    let call = load_call(c, &call_id, now).await?;
    let attempts = i32::try_from(call.attempts).unwrap_or(i32::MAX);
    let progress = approvals_so_far(&votes, quorum)?;
    feed.push_kind(
        &call.call_id,
        attempts,
        APPROVAL_RECORDED,
        Some(token),
        Some(progress),
    );
    Ok(Some(Resolved::Recorded {
        call,
        approvals: votes,
    }))
}

/// Escalates the pending, unexpired suspensions of `tool` made at or before `created_by` that
/// are not escalated yet; the calls escalated. Conditional on `escalated_at IS NULL`: of two
/// replicas sweeping at once, the second waits for the first's row locks and then changes
/// nothing, so each suspension is escalated once.
pub(super) async fn escalate(
    c: &Conn<'_>,
    tool: &str,
    created_by: i64,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Vec<String>, StoreError> {
    let event = event_json::<Value>(now, "escalated", None, None);
    let rows = c
        .query(
            "WITH escalated AS (UPDATE suspensions SET escalated_at = $3 \
               WHERE status = 'pending' AND tool = $1 AND escalated_at IS NULL \
               AND created_at <= $2 AND (expires_at IS NULL OR expires_at > $3) \
               RETURNING token, call_id) \
             UPDATE calls c SET updated_at = $3, events = c.events || $4::text::jsonb \
             FROM escalated e WHERE c.call_id = e.call_id \
             RETURNING c.call_id, c.attempts, e.token",
            &[&tool, &created_by, &now, &event],
        )
        .await
        .map_err(pg_error)?;
    let mut calls = Vec::with_capacity(rows.len());
    for row in rows {
        let call_id: String = row.try_get(0).map_err(pg_error)?;
        let attempts: i32 = row.try_get(1).map_err(pg_error)?;
        let token: String = row.try_get(2).map_err(pg_error)?;
        feed.push_kind(&call_id, attempts, ESCALATED, Some(&token), None);
        calls.push(call_id);
    }
    Ok(calls)
}

/// An end a resolved call comes to: its status, and the statement that writes it, binding the
/// call, the one column it sets (its error or its output), the time and the event it appends,
/// as `$1` to `$4`.
struct End {
    status: CallStatus,
    sql: &'static str,
}

const REJECTED: End = End {
    status: CallStatus::Rejected,
    sql: "UPDATE calls SET status = 'rejected', error = $2, updated_at = $3, \
          events = events || $4::text::jsonb WHERE call_id = $1",
};

const COMPLETED: End = End {
    status: CallStatus::Completed,
    sql: "UPDATE calls SET status = 'completed', output = $2, updated_at = $3, \
          events = events || $4::text::jsonb WHERE call_id = $1",
};

const EXPIRED: End = End {
    status: CallStatus::Expired,
    sql: "UPDATE calls SET status = 'expired', error = $2, updated_at = $3, \
          events = events || $4::text::jsonb WHERE call_id = $1",
};

/// Brings the call `call_id` to `end`, setting its column to `value` and appending `event`;
/// the call as it is then, with its feed entry added.
async fn end(
    c: &Conn<'_>,
    feed: &mut FeedRows,
    end: &End,
    call_id: &str,
    value: &str,
    event: &str,
    now: i64,
) -> Result<CallRecord, StoreError> {
    c.execute(end.sql, &[&call_id, &value, &now, &event])
        .await
        .map_err(pg_error)?;
    let call = load_call(c, call_id, now).await?;
    feed.push(&call, end.status, None);
    Ok(call)
}

/// Why a token could not be resolved: it never existed, was resolved before, or has expired
/// (which is recorded now, once, by whichever replica gets there first).
async fn unresolved(
    c: &Conn<'_>,
    token: &str,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Resolved, StoreError> {
    let expired: Option<String> = c
        .query_opt(
            "UPDATE suspensions SET status = 'expired', resolved_at = $2 WHERE token = $1 \
             AND status = 'pending' AND expires_at IS NOT NULL AND expires_at <= $2 \
             RETURNING call_id",
            &[&token, &now],
        )
        .await
        .map_err(pg_error)?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(pg_error)?;
    if let Some(call_id) = expired {
        let error = to_json(&expired_error())?;
        let event = event_json::<Value>(now, "expired", None, None);
        let call = end(c, feed, &EXPIRED, &call_id, &error, &event, now).await?;
        return Ok(Resolved::Expired(call));
    }
    let row = c
        .query_opt(
            "SELECT call_id, status FROM suspensions WHERE token = $1",
            &[&token],
        )
        .await
        .map_err(pg_error)?;
    let Some(row) = row else {
        return Ok(Resolved::UnknownToken);
    };
    let call_id: String = row.try_get(0).map_err(pg_error)?;
    let status: String = row.try_get(1).map_err(pg_error)?;
    let call = load_call(c, &call_id, now).await?;
    Ok(if status == "expired" {
        Resolved::Expired(call)
    } else {
        Resolved::AlreadyResolved(call)
    })
}

pub(super) async fn reconcile(
    c: &Conn<'_>,
    call_id: &str,
    settlement: &Settlement,
    by: &Actor,
    feed: &mut FeedRows,
    now: i64,
) -> Result<Reconciled, StoreError> {
    let (status, output, error) = settled_columns(settlement)?;
    let event = actor_event_json(
        now,
        "reconciled",
        by,
        Some(&json!({"status": status.as_str()})),
    );
    // Settled as failed, the effect did not happen: the key is released so that a new request
    // can make it.
    let changed = c
        .execute(
            "UPDATE calls SET status = $2, output = $3, error = $4, updated_at = $5, \
             idempotency_key = CASE WHEN $2 = 'failed' THEN NULL ELSE idempotency_key END, \
             events = events || $6::text::jsonb \
             WHERE call_id = $1 AND status IN ('needs_reconciliation', 'interrupted')",
            &[&call_id, &status.as_str(), &output, &error, &now, &event],
        )
        .await
        .map_err(pg_error)?;
    if changed == 0 {
        return Ok(match find_call(c, call_id, now).await? {
            Some(call) => Reconciled::NotNeeded(call),
            None => Reconciled::UnknownCall,
        });
    }
    let call = load_call(c, call_id, now).await?;
    feed.push(&call, status, None);
    Ok(Reconciled::Settled(call))
}

/// Drops the final feed entries older than `before` (Unix ms) and every entry before them, and
/// raises the floor under which a cursor is expired.
pub(super) async fn prune_feed(c: &Conn<'_>, before: i64) -> Result<u64, StoreError> {
    let row = c
        .query_opt(
            "SELECT xid::text, seq FROM feed \
             WHERE at < $1 AND xid < pg_snapshot_xmin(pg_current_snapshot()) \
             ORDER BY xid DESC, seq DESC LIMIT 1",
            &[&before],
        )
        .await
        .map_err(pg_error)?
        .map(|row| {
            Ok::<_, tokio_postgres::Error>((
                row.try_get::<_, String>(0)?,
                row.try_get::<_, i64>(1)?,
            ))
        })
        .transpose()
        .map_err(pg_error)?;
    let Some((xid, seq)) = row else {
        return Ok(0);
    };
    let dropped = c
        .execute(
            "DELETE FROM feed WHERE (xid, seq) <= ($1::text::xid8, $2)",
            &[&xid, &seq],
        )
        .await
        .map_err(pg_error)?;
    c.execute(
        "UPDATE feed_state SET floor_xid = $1::text::xid8, floor_seq = $2 \
         WHERE (floor_xid, floor_seq) < ($1::text::xid8, $2)",
        &[&xid, &seq],
    )
    .await
    .map_err(pg_error)?;
    Ok(dropped)
}
