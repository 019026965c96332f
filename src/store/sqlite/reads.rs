//! The read queries, run on the pool of read connections (and by the writer, which reads a
//! call back after changing it).
//!
//! Each is a plain function over a `Connection`: `mod.rs` runs it inside `SqliteStore::read`,
//! on a blocking thread, and the writer runs `find_call` and `load_call` inside its
//! transaction, so that a write's answer shows what it wrote. Reading a row's columns in order
//! and decoding it into a record are shared with every backend (`crate::store::rows`); what is
//! SQLite's is the SQL and how one column of its rows is read (`Columns for Row`).

use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use super::backend;
use crate::contract::meta::Effect;
use crate::store::edits::PendingEdit;
use crate::store::record::parse_json;
use crate::store::rows::{Columns, RawCall, RawFeedEntry, parse_effect};
use crate::store::{
    Approval, ApprovalPage, ApprovalState, ApprovalVote, CallFilter, CallPage, CallRecord,
    CallStatus, CallSummary, FeedCursor, FeedPage, StoreCounts, StoreError, Timestamp,
};

/// A call's columns, with its pending suspension joined, in the order [`RawCall::read`] reads
/// them.
const CALL_COLUMNS: &str = "SELECT c.call_id, c.tool, c.effect, c.status, c.caller, \
     c.idempotency_key, c.input, c.output, c.error, c.attempts, c.created_at, c.updated_at, \
     s.token, s.reason, s.input_schema, s.created_at, s.expires_at, c.events, c.trace, \
     c.edited FROM calls c LEFT JOIN suspensions s ON s.call_id = c.call_id AND s.status = 'pending'";

/// Whether an approval of the call `c` was ever escalated: one probe of the index of its
/// suspensions, which the rule of who sees a call reads from a listed call or a feed entry.
const EVER_ESCALATED: &str = "EXISTS (SELECT 1 FROM suspensions e \
     WHERE e.call_id = c.call_id AND e.escalated_at IS NOT NULL)";

/// The call `call_id`, which must exist.
pub(super) fn load_call(
    conn: &Connection,
    call_id: &str,
    now: i64,
) -> Result<CallRecord, StoreError> {
    find_call(conn, call_id, now)?
        .ok_or_else(|| StoreError::Corrupt(format!("call {call_id} vanished")))
}

/// The call `call_id` with its events, if it exists.
pub(super) fn find_call(
    conn: &Connection,
    call_id: &str,
    now: i64,
) -> Result<Option<CallRecord>, StoreError> {
    let sql = format!("{CALL_COLUMNS} WHERE c.call_id = ?1");
    let Some(raw) = conn
        .prepare_cached(&sql)
        .and_then(|mut st| st.query_row([call_id], |row| RawCall::read(row)).optional())
        .map_err(backend)?
    else {
        return Ok(None);
    };
    raw.decode(now).map(Some)
}

/// Whether a call of `tool` holds the idempotency key `key`.
pub(super) fn key_taken(conn: &Connection, tool: &str, key: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM calls WHERE tool = ?1 AND idempotency_key = ?2")
        .and_then(|mut st| st.exists(params![tool, key]))
        .map_err(backend)
}

/// A SQLite row's columns, as every backend reads them.
impl Columns for Row<'_> {
    type Error = rusqlite::Error;

    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }

    fn text_or_null(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }

    fn bigint(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }

    fn bigint_or_null(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }

    fn integer(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }

    fn integer_or_null(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
}

/// The approvals columns: seq, token, call_id, tool, reason, input_schema, created_at,
/// expires_at, the call's caller, the approvals recorded so far, and when it was escalated.
const APPROVAL_COLUMNS: &str = "SELECT s.seq, s.token, s.call_id, s.tool, s.reason, \
     s.input_schema, s.created_at, s.expires_at, c.caller, s.approvals, s.escalated_at";

/// Reads a row of [`APPROVAL_COLUMNS`]: its seq, the approval without its input schema, and
/// the schema as stored.
fn approval_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, Approval, String)> {
    Ok((
        row.get(0)?,
        Approval {
            token: row.get(1)?,
            call_id: row.get(2)?,
            tool: row.get(3)?,
            reason: row.get(4)?,
            input_schema: Value::Null,
            created_at: Timestamp(row.get(6)?),
            expires_at: row.get::<_, Option<i64>>(7)?.map(Timestamp),
            caller: row.get(8)?,
            input: None,
            original_input: None,
            edited: None,
            reject_options: Vec::new(),
            approvals_required: 1,
            approvals: ApprovalVote::parse_all(row.get::<_, Option<String>>(9)?.as_deref())
                .map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(9, Type::Text, Box::new(e))
                })?,
            escalated_at: row.get::<_, Option<i64>>(10)?.map(Timestamp),
        },
        row.get(5)?,
    ))
}

/// Up to `limit` calls matching `filter`, newest first, after the cursor `after` (a rowid).
pub(super) fn list_calls(
    conn: &Connection,
    filter: CallFilter,
    after: Option<i64>,
    limit: u32,
) -> Result<CallPage, StoreError> {
    // A suspended call whose time is up is expired, though stored as suspended: the
    // status is computed here so that filters and pages agree with what records show.
    let sql = format!(
        "SELECT c.rowid, c.call_id, c.tool, c.effect, \
         CASE WHEN c.status = 'suspended' AND s.expires_at IS NOT NULL \
              AND s.expires_at <= ?5 THEN 'expired' ELSE c.status END AS shown, \
         c.caller, c.idempotency_key, c.created_at, c.updated_at, c.attempts, {EVER_ESCALATED} \
         FROM calls c \
         LEFT JOIN suspensions s ON s.call_id = c.call_id AND s.status = 'pending' \
         WHERE (?1 IS NULL OR shown = ?1) AND (?2 IS NULL OR c.tool = ?2) \
         AND c.rowid < ?3 ORDER BY c.rowid DESC LIMIT ?4"
    );
    let mut st = conn.prepare_cached(&sql).map_err(backend)?;
    let rows = st
        .query_map(
            params![
                filter.status.map(CallStatus::as_str),
                filter.tool,
                after.unwrap_or(i64::MAX),
                i64::from(limit) + 1,
                Timestamp::now().0
            ],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, String>(4)?,
                    CallSummary {
                        call_id: row.get(1)?,
                        tool: row.get(2)?,
                        effect: Effect::Read,
                        status: CallStatus::Running,
                        caller: row.get(5)?,
                        idempotency_key: row.get(6)?,
                        created_at: Timestamp(row.get(7)?),
                        updated_at: Timestamp(row.get(8)?),
                        attempts: u32::try_from(row.get::<_, i64>(9)?).unwrap_or(u32::MAX),
                        escalated: row.get(10)?,
                    },
                ))
            },
        )
        .map_err(backend)?;
    let mut calls = Vec::with_capacity(limit as usize);
    let mut next_cursor = None;
    let mut more = false;
    for row in rows {
        let (rowid, effect, status, mut call) = row.map_err(backend)?;
        if calls.len() == limit as usize {
            more = true;
            break;
        }
        call.effect = parse_effect(&effect)?;
        call.status = CallStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown call status {status}")))?;
        next_cursor = Some(rowid);
        calls.push(call);
    }
    Ok(CallPage {
        calls,
        next_cursor: if more { next_cursor } else { None },
    })
}

/// Up to `limit` pending, unexpired suspensions after the cursor `after` (a seq), oldest first.
pub(super) fn pending_approvals(
    conn: &Connection,
    tool: Option<&str>,
    after: Option<i64>,
    limit: u32,
) -> Result<ApprovalPage, StoreError> {
    let sql = format!(
        "{APPROVAL_COLUMNS} FROM suspensions s JOIN calls c ON c.call_id = s.call_id \
         WHERE s.status = 'pending' AND s.seq > ?1 \
         AND (s.expires_at IS NULL OR s.expires_at > ?3) AND (?4 IS NULL OR s.tool = ?4) \
         ORDER BY s.seq LIMIT ?2"
    );
    let mut st = conn.prepare_cached(&sql).map_err(backend)?;
    // One more than asked tells whether another page follows.
    let rows = st
        .query_map(
            params![
                after.unwrap_or(0),
                i64::from(limit) + 1,
                Timestamp::now().0,
                tool
            ],
            approval_from_row,
        )
        .map_err(backend)?;
    let mut approvals = Vec::with_capacity(limit as usize);
    let mut next_cursor = None;
    let mut more = false;
    for row in rows {
        let (seq, mut approval, schema) = row.map_err(backend)?;
        if approvals.len() == limit as usize {
            more = true;
            break;
        }
        approval.input_schema = parse_json(&schema)?;
        next_cursor = Some(seq);
        approvals.push(approval);
    }
    Ok(ApprovalPage {
        approvals,
        next_cursor: if more { next_cursor } else { None },
    })
}

/// The pending, unexpired suspensions counted, over the index of pending ones.
pub(super) fn counts(conn: &Connection) -> Result<StoreCounts, StoreError> {
    let pending: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM suspensions WHERE status = 'pending' \
             AND (expires_at IS NULL OR expires_at > ?1)",
        )
        .and_then(|mut st| st.query_row([Timestamp::now().0], |row| row.get(0)))
        .map_err(backend)?;
    Ok(StoreCounts {
        pending_approvals: u64::try_from(pending).unwrap_or(0),
        live_replicas: None,
    })
}

/// What `token` stands for, if it ever existed.
pub(super) fn approval(
    conn: &Connection,
    token: &str,
) -> Result<Option<ApprovalState>, StoreError> {
    let now = Timestamp::now().0;
    let sql = format!(
        "{APPROVAL_COLUMNS}, c.input, s.status, s.edit FROM suspensions s \
         JOIN calls c ON c.call_id = s.call_id WHERE s.token = ?1"
    );
    let row = conn
        .prepare_cached(&sql)
        .and_then(|mut st| {
            st.query_row([token], |row| {
                Ok((
                    approval_from_row(row)?,
                    row.get::<_, String>(11)?,
                    row.get::<_, String>(12)?,
                    row.get::<_, Option<String>>(13)?,
                ))
            })
            .optional()
        })
        .map_err(backend)?;
    let Some(((_, mut approval, schema), input, status, edit)) = row else {
        return Ok(None);
    };
    if status == "expired" {
        return Ok(Some(ApprovalState::Expired(load_call(
            conn,
            &approval.call_id,
            now,
        )?)));
    }
    if status != "pending" {
        return Ok(Some(ApprovalState::Resolved(load_call(
            conn,
            &approval.call_id,
            now,
        )?)));
    }
    if approval.expires_at.is_some_and(|at| at.0 <= now) {
        return Ok(Some(ApprovalState::Expired(load_call(
            conn,
            &approval.call_id,
            now,
        )?)));
    }
    approval.input_schema = parse_json(&schema)?;
    PendingEdit::show(&mut approval, parse_json(&input)?, edit.as_deref())?;
    Ok(Some(ApprovalState::Pending(approval)))
}

/// A feed cursor of this backend: the entry's `seq`.
pub(super) fn parse_cursor(cursor: &FeedCursor) -> Result<i64, StoreError> {
    cursor
        .0
        .parse::<i64>()
        .ok()
        .filter(|seq| *seq >= 0)
        .ok_or_else(|| StoreError::BadCursor(cursor.0.clone()))
}

/// Up to `limit` feed entries after `after` (`None`: from the oldest retained).
pub(super) fn feed(
    conn: &Connection,
    after: Option<i64>,
    limit: u32,
) -> Result<FeedPage, StoreError> {
    let floor: i64 = conn
        .prepare_cached("SELECT floor FROM feed_state")
        .and_then(|mut st| st.query_row([], |row| row.get(0)))
        .map_err(backend)?;
    let after = match after {
        Some(after) if after < floor => return Err(StoreError::CursorExpired),
        Some(after) => after,
        None => floor,
    };
    let sql = format!(
        "SELECT f.seq, f.at, f.type, f.call_id, f.attempts, f.token, c.tool, c.effect, \
             c.caller, c.idempotency_key, c.created_at, s.reason, s.input_schema, s.created_at, \
             s.expires_at, \
             CASE WHEN f.type IN ('call.rejected', 'call.failed', 'call.expired') THEN c.error END, \
             f.approvals, {EVER_ESCALATED}, c.edited, f.upstream, f.detail \
             FROM feed f LEFT JOIN calls c ON c.call_id = f.call_id \
             LEFT JOIN suspensions s ON s.token = f.token \
             WHERE f.seq > ?1 ORDER BY f.seq LIMIT ?2"
    );
    let mut st = conn.prepare_cached(&sql).map_err(backend)?;
    let rows = st
        .query_map(params![after, i64::from(limit)], |row| {
            RawFeedEntry::read(row, 1, row.get::<_, i64>(0)?.to_string())
        })
        .map_err(backend)?;
    let mut entries = Vec::new();
    for row in rows {
        entries.push(row.map_err(backend)?.decode()?);
    }
    let cursor = entries
        .last()
        .map_or_else(|| FeedCursor(after.to_string()), |e| e.cursor.clone());
    // One writer commits in order: every committed entry is final.
    Ok(FeedPage {
        entries,
        cursor,
        settling: false,
    })
}

/// The cursor after the newest entry.
pub(super) fn feed_head(conn: &Connection) -> Result<FeedCursor, StoreError> {
    let head: i64 = conn
        .prepare_cached(
            "SELECT max(coalesce((SELECT max(seq) FROM feed), 0), \
             (SELECT floor FROM feed_state))",
        )
        .and_then(|mut st| st.query_row([], |row| row.get(0)))
        .map_err(backend)?;
    Ok(FeedCursor(head.to_string()))
}
