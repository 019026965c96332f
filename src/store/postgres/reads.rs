//! Reading calls and suspensions back: the record of one call, lists of calls, the approvals
//! queue. Every function takes a [`Conn`], so the writer reads inside its transaction (what it
//! just changed) and the request path reads on a pooled connection, with the same SQL.

use tokio_postgres::types::ToSql;
use tokio_postgres::{Error as PgError, Row, Statement};

use super::super::edits::PendingEdit;
use super::super::record::parse_json;
use super::super::rows::{Columns, RawCall, parse_effect};
use super::super::{
    Approval, ApprovalPage, ApprovalState, ApprovalVote, CallFilter, CallPage, CallRecord,
    CallStatus, CallSummary, StoreCounts, StoreError,
};
use super::pg_error;
use crate::store::Timestamp;

/// A connection to run statements on: a pooled one, or the writer's (with its batch's
/// transaction open on it). Statements are prepared once per connection (deadpool's statement
/// cache), not on every run.
pub(super) struct Conn<'a>(pub(super) &'a deadpool_postgres::ClientWrapper);

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl Conn<'_> {
    /// `sql`, prepared (or taken from the cache), with the client to run it on.
    async fn prepare(&self, sql: &str) -> Result<(&tokio_postgres::Client, Statement), PgError> {
        Ok((self.0, self.0.prepare_cached(sql).await?))
    }

    pub(super) async fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, PgError> {
        let (client, statement) = self.prepare(sql).await?;
        client.query(&statement, params).await
    }

    pub(super) async fn query_opt(
        &self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>, PgError> {
        let (client, statement) = self.prepare(sql).await?;
        client.query_opt(&statement, params).await
    }

    pub(super) async fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64, PgError> {
        let (client, statement) = self.prepare(sql).await?;
        client.execute(&statement, params).await
    }
}

/// A call with its pending suspension, its columns in the order [`RawCall::read`] reads them.
const CALL: &str = "SELECT c.call_id, c.tool, c.effect, c.status, c.caller, \
     c.idempotency_key, c.input, c.output, c.error, c.attempts, c.created_at, c.updated_at, \
     s.token, s.reason, s.input_schema, s.created_at, s.expires_at, \
     coalesce(c.events::text, ''), c.trace, c.edited \
     FROM calls c LEFT JOIN suspensions s ON s.call_id = c.call_id AND s.status = 'pending' \
     WHERE c.call_id = $1";

/// A PostgreSQL row's columns, as every backend reads them.
impl Columns for Row {
    type Error = PgError;

    fn text(&self, i: usize) -> Result<String, PgError> {
        self.try_get(i)
    }

    fn text_or_null(&self, i: usize) -> Result<Option<String>, PgError> {
        self.try_get(i)
    }

    fn bigint(&self, i: usize) -> Result<i64, PgError> {
        self.try_get(i)
    }

    fn bigint_or_null(&self, i: usize) -> Result<Option<i64>, PgError> {
        self.try_get(i)
    }

    fn integer(&self, i: usize) -> Result<i64, PgError> {
        self.try_get::<_, i32>(i).map(i64::from)
    }

    fn integer_or_null(&self, i: usize) -> Result<Option<i64>, PgError> {
        Ok(self.try_get::<_, Option<i32>>(i)?.map(i64::from))
    }
}

/// The call `call_id` as of `now`, if it exists.
pub(super) async fn find_call(
    conn: &Conn<'_>,
    call_id: &str,
    now: i64,
) -> Result<Option<CallRecord>, StoreError> {
    let Some(row) = conn.query_opt(CALL, &[&call_id]).await.map_err(pg_error)? else {
        return Ok(None);
    };
    RawCall::read(&row).map_err(pg_error)?.decode(now).map(Some)
}

/// Whether a call of `tool` holds the idempotency key `key`.
pub(super) async fn key_taken(conn: &Conn<'_>, tool: &str, key: &str) -> Result<bool, StoreError> {
    conn.query_opt(
        "SELECT 1 FROM calls WHERE tool = $1 AND idempotency_key = $2",
        &[&tool, &key],
    )
    .await
    .map(|row| row.is_some())
    .map_err(pg_error)
}

/// The call `call_id`, which must exist (the caller just changed it).
pub(super) async fn load_call(
    conn: &Conn<'_>,
    call_id: &str,
    now: i64,
) -> Result<CallRecord, StoreError> {
    find_call(conn, call_id, now)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("call {call_id} vanished")))
}

/// Calls newest first. A suspended call whose time is up is listed as expired, though stored
/// as suspended, so that filters and pages agree with what records show.
const LIST_CALLS: &str = "SELECT seq, call_id, tool, effect, shown, caller, idempotency_key, \
     created_at, updated_at, attempts, \
     EXISTS (SELECT 1 FROM suspensions e \
       WHERE e.call_id = listed.call_id AND e.escalated_at IS NOT NULL) FROM ( \
       SELECT c.seq, c.call_id, c.tool, c.effect, c.caller, c.idempotency_key, c.created_at, \
         c.updated_at, c.attempts, \
         CASE WHEN c.status = 'suspended' AND s.expires_at IS NOT NULL \
              AND s.expires_at <= $5 THEN 'expired' ELSE c.status END AS shown \
       FROM calls c \
       LEFT JOIN suspensions s ON s.call_id = c.call_id AND s.status = 'pending' \
       WHERE ($2::text IS NULL OR c.tool = $2) AND c.seq < $3 \
     ) listed WHERE ($1::text IS NULL OR shown = $1) ORDER BY seq DESC LIMIT $4";

pub(super) async fn list_calls(
    conn: &Conn<'_>,
    filter: &CallFilter,
    after: Option<i64>,
    limit: u32,
) -> Result<CallPage, StoreError> {
    let status = filter.status.map(CallStatus::as_str);
    let rows = conn
        .query(
            LIST_CALLS,
            &[
                &status,
                &filter.tool,
                &after.unwrap_or(i64::MAX),
                &(i64::from(limit) + 1),
                &Timestamp::now().0,
            ],
        )
        .await
        .map_err(pg_error)?;
    let (calls, next_cursor) = page(&rows, limit, |row| {
        let effect: String = row.try_get(3).map_err(pg_error)?;
        let status: String = row.try_get(4).map_err(pg_error)?;
        let seq = row.try_get::<_, i64>(0).map_err(pg_error)?;
        let call = CallSummary {
            call_id: row.try_get(1).map_err(pg_error)?,
            tool: row.try_get(2).map_err(pg_error)?,
            effect: parse_effect(&effect)?,
            status: CallStatus::parse(&status)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown call status {status}")))?,
            caller: row.try_get(5).map_err(pg_error)?,
            idempotency_key: row.try_get(6).map_err(pg_error)?,
            created_at: Timestamp(row.try_get(7).map_err(pg_error)?),
            updated_at: Timestamp(row.try_get(8).map_err(pg_error)?),
            attempts: u32::try_from(row.try_get::<_, i32>(9).map_err(pg_error)?)
                .unwrap_or(u32::MAX),
            escalated: row.try_get(10).map_err(pg_error)?,
        };
        Ok((seq, call))
    })?;
    Ok(CallPage { calls, next_cursor })
}

/// The first `limit` of `rows` (asked for one more, which tells whether another page follows),
/// each read by `read` into its cursor and its item; with the last one's cursor when another
/// page follows.
fn page<T>(
    rows: &[Row],
    limit: u32,
    mut read: impl FnMut(&Row) -> Result<(i64, T), StoreError>,
) -> Result<(Vec<T>, Option<i64>), StoreError> {
    let more = rows.len() > limit as usize;
    let mut items = Vec::with_capacity(rows.len().min(limit as usize));
    let mut next_cursor = None;
    for row in rows.iter().take(limit as usize) {
        let (cursor, item) = read(row)?;
        next_cursor = Some(cursor);
        items.push(item);
    }
    Ok((items, if more { next_cursor } else { None }))
}

/// The approvals columns: seq, token, call_id, tool, reason, input_schema, created_at,
/// expires_at, the call's caller, the approvals recorded so far, and when it was escalated.
const APPROVAL_COLUMNS: &str = "SELECT s.seq, s.token, s.call_id, s.tool, s.reason, \
     s.input_schema, s.created_at, s.expires_at, c.caller, s.approvals, s.escalated_at";

fn approval_from_row(row: &Row) -> Result<(i64, Approval), StoreError> {
    let schema: String = row.try_get(5).map_err(pg_error)?;
    Ok((
        row.try_get(0).map_err(pg_error)?,
        Approval {
            token: row.try_get(1).map_err(pg_error)?,
            call_id: row.try_get(2).map_err(pg_error)?,
            tool: row.try_get(3).map_err(pg_error)?,
            reason: row.try_get(4).map_err(pg_error)?,
            input_schema: parse_json(&schema)?,
            created_at: Timestamp(row.try_get(6).map_err(pg_error)?),
            expires_at: row
                .try_get::<_, Option<i64>>(7)
                .map_err(pg_error)?
                .map(Timestamp),
            caller: row.try_get(8).map_err(pg_error)?,
            input: None,
            original_input: None,
            edited: None,
            reject_options: Vec::new(),
            approvals_required: 1,
            approvals: ApprovalVote::parse_all(
                row.try_get::<_, Option<&str>>(9).map_err(pg_error)?,
            )?,
            escalated_at: row
                .try_get::<_, Option<i64>>(10)
                .map_err(pg_error)?
                .map(Timestamp),
        },
    ))
}

pub(super) async fn pending_approvals(
    conn: &Conn<'_>,
    tool: Option<&str>,
    after: Option<i64>,
    limit: u32,
) -> Result<ApprovalPage, StoreError> {
    let sql = format!(
        "{APPROVAL_COLUMNS} FROM suspensions s JOIN calls c ON c.call_id = s.call_id \
         WHERE s.status = 'pending' AND s.seq > $1 \
         AND (s.expires_at IS NULL OR s.expires_at > $3) \
         AND ($4::text IS NULL OR s.tool = $4) ORDER BY s.seq LIMIT $2"
    );
    // One more than asked tells whether another page follows.
    let rows = conn
        .query(
            &sql,
            &[
                &after.unwrap_or(0),
                &(i64::from(limit) + 1),
                &Timestamp::now().0,
                &tool,
            ],
        )
        .await
        .map_err(pg_error)?;
    let (approvals, next_cursor) = page(&rows, limit, approval_from_row)?;
    Ok(ApprovalPage {
        approvals,
        next_cursor,
    })
}

/// The pending, unexpired suspensions (over the index of pending ones) and the replicas whose
/// lease is live now, by the database's clock as leases are kept, in one round trip.
pub(super) async fn counts(conn: &Conn<'_>) -> Result<StoreCounts, StoreError> {
    let row = conn
        .query(
            "SELECT (SELECT count(*) FROM suspensions WHERE status = 'pending' \
               AND (expires_at IS NULL OR expires_at > $1)), \
             (SELECT count(*) FROM replicas WHERE lease_expires_at > clock_timestamp())",
            &[&Timestamp::now().0],
        )
        .await
        .map_err(pg_error)?;
    let row = row
        .first()
        .ok_or_else(|| StoreError::Backend("a count returned no row".into()))?;
    let count = |index: usize| {
        row.try_get::<_, i64>(index)
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(pg_error)
    };
    Ok(StoreCounts {
        pending_approvals: count(0)?,
        live_replicas: Some(count(1)?),
    })
}

pub(super) async fn approval(
    conn: &Conn<'_>,
    token: &str,
    now: i64,
) -> Result<Option<ApprovalState>, StoreError> {
    let sql = format!(
        "{APPROVAL_COLUMNS}, c.input, s.status, s.edit FROM suspensions s \
         JOIN calls c ON c.call_id = s.call_id WHERE s.token = $1"
    );
    let Some(row) = conn.query_opt(&sql, &[&token]).await.map_err(pg_error)? else {
        return Ok(None);
    };
    let (_, mut approval) = approval_from_row(&row)?;
    let input: String = row.try_get(11).map_err(pg_error)?;
    let status: String = row.try_get(12).map_err(pg_error)?;
    let expired = status == "expired"
        || (status == "pending" && approval.expires_at.is_some_and(|at| at.0 <= now));
    if expired {
        let call = load_call(conn, &approval.call_id, now).await?;
        return Ok(Some(ApprovalState::Expired(call)));
    }
    if status != "pending" {
        let call = load_call(conn, &approval.call_id, now).await?;
        return Ok(Some(ApprovalState::Resolved(call)));
    }
    let edit: Option<&str> = row.try_get(13).map_err(pg_error)?;
    PendingEdit::show(&mut approval, parse_json(&input)?, edit)?;
    Ok(Some(ApprovalState::Pending(approval)))
}
