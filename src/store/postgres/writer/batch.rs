//! The batch's multi-row statements: all the new calls of a batch (and the read records written
//! behind) in one `INSERT`, all its outcomes in one `UPDATE`, its new suspensions and its feed
//! entries in one `INSERT` each, every one over `unnest` arrays.
//!
//! One statement for many rows is what lets a replica commit thousands of writes a second: a
//! round trip per write would cap it far below what the disk allows. Each `*Rows` gathers the
//! columns of its statement while the loop (`mod.rs`) walks the batch; what a row was refused
//! (a taken idempotency key, a run that no longer owns its call) is answered here too.

use std::collections::HashSet;

use crate::store::postgres::pg_error;
use crate::store::postgres::reads::{Conn, load_call};
use crate::store::queue::{Reply, WriteOp};
use crate::store::record::{DERIVED_EVENTS, Prepared, PreparedCall, events_json, feed_type};
use crate::store::{CallStatus, Inserted, StoreError};

/// Inserts calls (new ones, and read records written behind) from `unnest` arrays; a call whose
/// id or (tool, idempotency key) is taken is skipped. Returns the ids inserted.
/// Those inserted running are entered in `running_calls`.
pub(super) const INSERT_CALLS: &str = "WITH inserted AS ( \
       INSERT INTO calls (call_id, tool, effect, caller, status, input, output, error, \
         idempotency_key, attempts, created_at, updated_at, owner, events, trace) \
       SELECT u.call_id, u.tool, u.effect, u.caller, u.status, u.input, u.output, u.error, \
         u.idempotency_key, u.attempts, u.created_at, u.updated_at, $14, u.events::jsonb, \
         u.trace \
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
         $7::text[], $8::text[], $9::text[], $10::int4[], $11::int8[], $12::int8[], $13::text[], \
         $15::text[]) \
         AS u(call_id, tool, effect, caller, status, input, output, error, idempotency_key, \
              attempts, created_at, updated_at, events, trace) \
       ON CONFLICT DO NOTHING RETURNING call_id, status \
     ), running AS ( \
       INSERT INTO running_calls (call_id, owner) \
       SELECT call_id, $14 FROM inserted WHERE status = 'running' \
     ) SELECT call_id FROM inserted";

/// Records the outcomes of runs that still own their call, and takes those calls out of
/// `running_calls`; returns the ids recorded. The update touches no indexed column of `calls`.
pub(super) const FINISH_CALLS: &str = "WITH finished AS ( \
       UPDATE calls c SET status = u.status, output = u.output, error = u.error, \
         updated_at = $9, attempts = u.attempts, events = c.events || u.event::jsonb \
       FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::int4[], \
         $7::text[]) AS u(call_id, run, status, output, error, attempts, event) \
       WHERE c.call_id = u.call_id AND c.status = 'running' AND c.owner = $8 \
         AND (u.run IS NULL OR c.attempts = u.run) \
       RETURNING c.call_id \
     ), ended AS ( \
       DELETE FROM running_calls r USING finished f WHERE r.call_id = f.call_id \
     ) SELECT call_id FROM finished";

/// Creates suspensions, each with its call's tool.
const INSERT_SUSPENSIONS: &str = "INSERT INTO suspensions (token, call_id, tool, reason, \
     input_schema, status, created_at, expires_at) \
     SELECT u.token, u.call_id, c.tool, u.reason, u.input_schema, 'pending', $6, u.expires_at \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[]) \
       AS u(token, call_id, reason, input_schema, expires_at) \
     JOIN calls c ON c.call_id = u.call_id";

/// Appends one event (or a JSON array of events) to a call's history.
const APPEND_EVENT: &str =
    "UPDATE calls SET events = events || $2::text::jsonb WHERE call_id = $1 AND events IS NOT NULL";

/// The columns of [`INSERT_CALLS`], one vector each.
#[derive(Default)]
pub(super) struct CallRows<'a> {
    call_id: Vec<&'a str>,
    tool: Vec<&'a str>,
    effect: Vec<&'a str>,
    caller: Vec<Option<&'a str>>,
    status: Vec<&'a str>,
    input: Vec<&'a str>,
    output: Vec<Option<&'a str>>,
    error: Vec<Option<&'a str>>,
    key: Vec<Option<&'a str>>,
    attempts: Vec<i32>,
    created_at: Vec<i64>,
    updated_at: Vec<i64>,
    events: Vec<Option<String>>,
    trace: Vec<Option<&'a str>>,
}

impl<'a> CallRows<'a> {
    pub(super) fn push(&mut self, call: &'a PreparedCall, outcome: Option<&'a Prepared>) {
        let (status, output, error, updated_at) = match outcome {
            Some(o) => (o.status, o.output.as_deref(), o.error.as_deref(), o.at),
            None => (CallStatus::Running, None, None, call.created_at),
        };
        let events = events_json(call, outcome);
        self.call_id.push(&call.call_id);
        self.tool.push(&call.tool);
        self.effect.push(call.effect);
        self.caller.push(call.caller.as_deref());
        self.status.push(status.as_str());
        self.input.push(&call.input);
        self.output.push(output);
        self.error.push(error);
        self.key.push(call.idempotency_key.as_deref());
        self.attempts.push(attempts_i32(call.attempts));
        self.created_at.push(call.created_at);
        self.updated_at.push(updated_at);
        // A call inserted already completed keeps its events implicit (`NULL`).
        self.events
            .push((events != DERIVED_EVENTS).then_some(events));
        self.trace.push(call.trace.as_deref());
    }

    pub(super) async fn insert(
        &self,
        conn: &Conn<'_>,
        replica: &str,
    ) -> Result<HashSet<String>, StoreError> {
        if self.call_id.is_empty() {
            return Ok(HashSet::new());
        }
        let rows = conn
            .query(
                INSERT_CALLS,
                &[
                    &self.call_id,
                    &self.tool,
                    &self.effect,
                    &self.caller,
                    &self.status,
                    &self.input,
                    &self.output,
                    &self.error,
                    &self.key,
                    &self.attempts,
                    &self.created_at,
                    &self.updated_at,
                    &self.events,
                    &replica,
                    &self.trace,
                ],
            )
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| row.try_get::<_, String>(0).map_err(pg_error))
            .collect()
    }
}

/// The columns of [`INSERT_SUSPENSIONS`].
#[derive(Default)]
pub(super) struct SuspensionRows<'a> {
    token: Vec<&'a str>,
    call_id: Vec<&'a str>,
    reason: Vec<&'a str>,
    input_schema: Vec<&'a str>,
    expires_at: Vec<Option<i64>>,
}

impl<'a> SuspensionRows<'a> {
    pub(super) fn push(&mut self, call_id: &'a str, outcome: &'a Prepared) {
        if let Some((token, reason, schema, expires_at)) = &outcome.suspension {
            self.token.push(token);
            self.call_id.push(call_id);
            self.reason.push(reason);
            self.input_schema.push(schema);
            self.expires_at.push(*expires_at);
        }
    }

    pub(super) async fn insert(&self, conn: &Conn<'_>, now: i64) -> Result<(), StoreError> {
        if self.token.is_empty() {
            return Ok(());
        }
        let inserted = conn
            .execute(
                INSERT_SUSPENSIONS,
                &[
                    &self.token,
                    &self.call_id,
                    &self.reason,
                    &self.input_schema,
                    &self.expires_at,
                    &now,
                ],
            )
            .await
            .map_err(pg_error)?;
        if inserted as usize != self.token.len() {
            // Each call is written first, in the same transaction.
            return Err(StoreError::Backend(
                "a suspension's call is missing".to_owned(),
            ));
        }
        Ok(())
    }
}

fn attempts_i32(attempts: u32) -> i32 {
    i32::try_from(attempts).unwrap_or(i32::MAX)
}

/// The answer to an insert that wrote nothing: the call holding its (tool, idempotency key), or
/// an error if its call id was taken.
pub(super) async fn existing(
    c: &Conn<'_>,
    call: &PreparedCall,
    now: i64,
) -> Result<Result<Reply, StoreError>, StoreError> {
    let holder = match &call.idempotency_key {
        Some(key) => c
            .query_opt(
                "SELECT call_id FROM calls WHERE tool = $1 AND idempotency_key = $2",
                &[&call.tool, key],
            )
            .await
            .map_err(pg_error)?
            .map(|row| row.try_get::<_, String>(0))
            .transpose()
            .map_err(pg_error)?,
        None => None,
    };
    Ok(match holder {
        Some(call_id) => Ok(Reply::Inserted(Inserted::Existing(Box::new(
            load_call(c, &call_id, now).await?,
        )))),
        None => Err(StoreError::Backend(format!(
            "call id {} already exists",
            call.call_id
        ))),
    })
}

/// The outcomes of a batch, recorded in one statement ([`FINISH_CALLS`]).
#[derive(Default)]
pub(super) struct OutcomeRows<'a> {
    call_ids: Vec<&'a str>,
    runs: Vec<Option<i32>>,
    statuses: Vec<&'a str>,
    outputs: Vec<Option<&'a str>>,
    errors: Vec<Option<&'a str>>,
    attempts: Vec<i32>,
    events: Vec<std::borrow::Cow<'a, str>>,
}

impl<'a> OutcomeRows<'a> {
    /// The outcomes among `ops`.
    pub(super) fn of(ops: &'a [WriteOp]) -> Self {
        let mut rows = OutcomeRows::default();
        for op in ops {
            if let WriteOp::Finish {
                call_id,
                run,
                outcome,
            } = op
            {
                rows.call_ids.push(call_id.as_str());
                rows.runs.push(run.map(attempts_i32));
                rows.statuses.push(outcome.status.as_str());
                rows.outputs.push(outcome.output.as_deref());
                rows.errors.push(outcome.error.as_deref());
                rows.attempts.push(attempts_i32(outcome.attempts));
                rows.events.push(outcome.event());
            }
        }
        rows
    }

    /// Records them: the ids of the calls whose run still owned them.
    pub(super) async fn record(
        &self,
        c: &Conn<'_>,
        replica: &str,
        now: i64,
    ) -> Result<HashSet<String>, StoreError> {
        if self.call_ids.is_empty() {
            return Ok(HashSet::new());
        }
        let events: Vec<&str> = self.events.iter().map(|e| e.as_ref()).collect();
        c.query(
            FINISH_CALLS,
            &[
                &self.call_ids,
                &self.runs,
                &self.statuses,
                &self.outputs,
                &self.errors,
                &self.attempts,
                &events,
                &replica,
                &now,
            ],
        )
        .await
        .map_err(pg_error)?
        .iter()
        .map(|row| row.try_get::<_, String>(0).map_err(pg_error))
        .collect()
    }
}

/// Answers the outcomes of `ops` once [`OutcomeRows::record`] said which were `finished`: their
/// suspensions and feed entries follow; an outcome refused (its run no longer owns the call) is
/// appended to the call's history as `late_outcome`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn settle_outcomes<'a>(
    c: &Conn<'_>,
    replica: &str,
    ops: &'a [WriteOp],
    finished: &HashSet<String>,
    results: &mut [Option<Result<Reply, StoreError>>],
    suspensions: &mut SuspensionRows<'a>,
    feed: &mut FeedRows,
    now: i64,
) -> Result<(), StoreError> {
    for (index, op) in ops.iter().enumerate() {
        let WriteOp::Finish {
            call_id,
            run,
            outcome,
        } = op
        else {
            continue;
        };
        results[index] = Some(if finished.contains(call_id) {
            suspensions.push(call_id, outcome);
            feed.push_outcome(call_id, outcome);
            Ok(Reply::Done)
        } else {
            late_outcome(c, replica, call_id, *run, outcome, now).await?
        });
    }
    Ok(())
}

/// An outcome whose run no longer owns its call (its replica lost the lease and the call was
/// swept, or it was settled meanwhile): kept in the call's history as evidence for whoever
/// reconciles it, and refused.
async fn late_outcome(
    c: &Conn<'_>,
    replica: &str,
    call_id: &str,
    run: Option<u32>,
    outcome: &Prepared,
    now: i64,
) -> Result<Result<Reply, StoreError>, StoreError> {
    let event = outcome.late_event(Some(replica), run, now)?;
    let appended = c
        .execute(APPEND_EVENT, &[&call_id, &event])
        .await
        .map_err(pg_error)?;
    if appended == 0 {
        return Ok(Err(StoreError::NotRunning {
            call_id: call_id.to_owned(),
        }));
    }
    Ok(Ok(Reply::Late(Box::new(load_call(c, call_id, now).await?))))
}

/// Appends the batch's feed entries, in order. The values are all given: a join with `calls`
/// here was planned once, on a small table, as a scan of the whole table, which every batch
/// then paid as the table grew.
const INSERT_FEED: &str = "INSERT INTO feed (at, type, call_id, attempts, token, approvals) \
     SELECT $1, u.type, u.call_id, u.attempts, u.token, u.approvals \
     FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::text[]) WITH ORDINALITY \
       AS u(call_id, type, token, attempts, approvals, n) \
     ORDER BY u.n";

/// The change feed entries of one batch, in the order of its changes.
#[derive(Default)]
pub(super) struct FeedRows {
    call_id: Vec<String>,
    kind: Vec<&'static str>,
    token: Vec<Option<String>>,
    /// The call's attempts as the change left them.
    attempts: Vec<i32>,
    /// What a `call.approval_recorded` entry keeps of its approval, as stored.
    approvals: Vec<Option<String>>,
}

impl FeedRows {
    /// The change of `call` (as it is after the change) into `status`.
    pub(super) fn push(
        &mut self,
        call: &crate::store::CallRecord,
        status: CallStatus,
        token: Option<&str>,
    ) {
        self.add(&call.call_id, status, token, call.attempts);
    }

    /// An entry of type `kind` about `call` (as it is after the change), not a change of its
    /// status (`call.approval_recorded`, with the approvals it keeps, or `call.escalated`).
    pub(super) fn push_kind(
        &mut self,
        call_id: &str,
        attempts: i32,
        kind: &'static str,
        token: Option<&str>,
        approvals: Option<String>,
    ) {
        self.call_id.push(call_id.to_owned());
        self.kind.push(kind);
        self.token.push(token.map(str::to_owned));
        self.attempts.push(attempts);
        self.approvals.push(approvals);
    }

    fn add(&mut self, call_id: &str, status: CallStatus, token: Option<&str>, attempts: u32) {
        self.call_id.push(call_id.to_owned());
        self.kind.push(feed_type(status));
        self.token.push(token.map(str::to_owned));
        self.attempts.push(attempts_i32(attempts));
        self.approvals.push(None);
    }

    pub(super) fn push_outcome(&mut self, call_id: &str, outcome: &Prepared) {
        let token = outcome.suspension.as_ref().map(|s| s.0.as_str());
        self.add(call_id, outcome.status, token, outcome.attempts);
    }

    pub(super) async fn insert(&self, c: &Conn<'_>, now: i64) -> Result<(), StoreError> {
        if self.call_id.is_empty() {
            return Ok(());
        }
        c.execute(
            INSERT_FEED,
            &[
                &now,
                &self.call_id,
                &self.kind,
                &self.token,
                &self.attempts,
                &self.approvals,
            ],
        )
        .await
        .map_err(pg_error)
        .map(drop)
    }
}
