//! Calls, feed entries, webhook deliveries and inbox sessions as a SQL backend reads them back,
//! and those rows decoded into records.
//!
//! The write half (rows as they are written) is `record.rs`. Here every SQL backend shares one
//! reading of each row's columns, in one order, and one decoding of it (a suspension whose time
//! is up shows as expired; a completed call's events are derived), so that a record reads the
//! same whichever backend stored it. A backend brings only how it reads one column of its result
//! rows ([`Columns`]) and SQL that selects the columns in the order read here.

use serde_json::{Value, json};

use super::record::{DERIVED_EVENTS, expired_error, parse_json};
use super::{
    CallEvent, CallRecord, CallStatus, InboxSession, StoreError, SuspensionView, Timestamp,
};
use crate::contract::meta::Effect;

/// How a backend reads one column of a result row, by its position. Each backend implements it
/// once, for its row type; the rows below are read over it, so their column order is written
/// once for every backend.
pub(crate) trait Columns {
    /// What reading a column fails with: the backend's own error.
    type Error;

    /// A `TEXT` column.
    fn text(&self, i: usize) -> Result<String, Self::Error>;

    /// A `TEXT` column that may be null.
    fn text_or_null(&self, i: usize) -> Result<Option<String>, Self::Error>;

    /// A `BIGINT` column: a time, an id.
    fn bigint(&self, i: usize) -> Result<i64, Self::Error>;

    /// A `BIGINT` column that may be null.
    fn bigint_or_null(&self, i: usize) -> Result<Option<i64>, Self::Error>;

    /// An `INTEGER` column (32 bits on PostgreSQL): a count of attempts, an HTTP status.
    fn integer(&self, i: usize) -> Result<i64, Self::Error>;

    /// An `INTEGER` column that may be null.
    fn integer_or_null(&self, i: usize) -> Result<Option<i64>, Self::Error>;
}

/// A call row as stored, before its JSON columns are parsed.
pub(crate) struct RawCall {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    pub(crate) effect: String,
    pub(crate) status: String,
    pub(crate) caller: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) input: String,
    pub(crate) output: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) attempts: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) suspension: RawSuspension,
    pub(crate) events: String,
    pub(crate) trace: Option<String>,
    /// `calls.edited`, as stored.
    pub(crate) edited: Option<String>,
}

/// A suspension's joined columns, all null when the row has none.
pub(crate) struct RawSuspension {
    token: Option<String>,
    reason: Option<String>,
    input_schema: Option<String>,
    created_at: Option<i64>,
    expires_at: Option<i64>,
}

/// The effect stored as `s`.
pub(crate) fn parse_effect(s: &str) -> Result<Effect, StoreError> {
    match s {
        "read" => Ok(Effect::Read),
        "idempotent" => Ok(Effect::Idempotent),
        "write" => Ok(Effect::Write),
        other => Err(StoreError::Corrupt(format!("unknown effect {other}"))),
    }
}

impl RawCall {
    /// Reads a row of a call's columns: `call_id, tool, effect, status, caller,
    /// idempotency_key, input, output, error, attempts, created_at, updated_at`, its pending
    /// suspension's `token, reason, input_schema, created_at, expires_at`, then `events`,
    /// `trace` and `edited`.
    pub(crate) fn read<R: Columns>(row: &R) -> Result<Self, R::Error> {
        Ok(RawCall {
            call_id: row.text(0)?,
            tool: row.text(1)?,
            effect: row.text(2)?,
            status: row.text(3)?,
            caller: row.text_or_null(4)?,
            idempotency_key: row.text_or_null(5)?,
            input: row.text(6)?,
            output: row.text_or_null(7)?,
            error: row.text_or_null(8)?,
            attempts: row.integer(9)?,
            created_at: row.bigint(10)?,
            updated_at: row.bigint(11)?,
            suspension: RawSuspension::read(row, 12, 13)?,
            events: row.text(17)?,
            trace: row.text_or_null(18)?,
            edited: row.text_or_null(19)?,
        })
    }

    /// The record as of `now`: a suspension whose time is up shows as `expired` even before
    /// anyone tries to resolve it (which records the expiry).
    pub(crate) fn decode(self, now: i64) -> Result<CallRecord, StoreError> {
        let events = if self.events == DERIVED_EVENTS {
            derived_events(&self)
        } else {
            parse_json::<Vec<StoredEvent>>(&self.events)?
                .into_iter()
                .map(|e| CallEvent {
                    at: Timestamp(e.at),
                    kind: e.kind,
                    actor: e.actor,
                    actor_name: e.actor_name,
                    details: e.details,
                })
                .collect()
        };
        let mut status = CallStatus::parse(&self.status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown call status {}", self.status)))?;
        let mut error = self.error.as_deref().map(parse_json).transpose()?;
        let expires_at = self.suspension.expires_at;
        let mut suspension = self.suspension.view()?;
        if status == CallStatus::Suspended && expires_at.is_some_and(|at| at <= now) {
            status = CallStatus::Expired;
            suspension = None;
            error = Some(expired_error());
        }
        let edit = super::CallEdit::parse(self.edited.as_deref())?;
        Ok(CallRecord {
            call_id: self.call_id,
            tool: self.tool,
            effect: parse_effect(&self.effect)?,
            status,
            caller: self.caller,
            idempotency_key: self.idempotency_key,
            input: parse_json(&self.input)?,
            original_input: edit.as_ref().map(|edit| edit.original_input.clone()),
            edited: edit.map(|edit| edit.mark),
            output: self.output.as_deref().map(parse_json).transpose()?,
            error,
            suspension,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
            standing_approval: super::standing::released_by(&events),
            events,
            traceparent: self.trace,
        })
    }
}

/// The events of a call stored with [`DERIVED_EVENTS`].
fn derived_events(raw: &RawCall) -> Vec<CallEvent> {
    vec![
        CallEvent {
            at: Timestamp(raw.created_at),
            kind: "created".to_owned(),
            actor: raw.caller.clone(),
            actor_name: None,
            details: None,
        },
        CallEvent {
            at: Timestamp(raw.updated_at),
            kind: CallStatus::Completed.as_str().to_owned(),
            actor: None,
            actor_name: None,
            details: Some(json!({ "attempts": raw.attempts })),
        },
    ]
}

/// An event as read back from a call's `events` array.
#[derive(serde::Deserialize)]
struct StoredEvent {
    at: i64,
    kind: String,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    actor_name: Option<String>,
    #[serde(default)]
    details: Option<Value>,
}

impl RawSuspension {
    /// Reads the `token` at column `token`, and `reason, input_schema, created_at, expires_at`
    /// from column `reason` on.
    fn read<R: Columns>(row: &R, token: usize, reason: usize) -> Result<Self, R::Error> {
        Ok(RawSuspension {
            token: row.text_or_null(token)?,
            reason: row.text_or_null(reason)?,
            input_schema: row.text_or_null(reason + 1)?,
            created_at: row.bigint_or_null(reason + 2)?,
            expires_at: row.bigint_or_null(reason + 3)?,
        })
    }

    /// The suspension, when the row has one.
    fn view(self) -> Result<Option<SuspensionView>, StoreError> {
        Ok(
            match (self.token, self.reason, self.input_schema, self.created_at) {
                (Some(token), Some(reason), Some(schema), Some(at)) => Some(SuspensionView {
                    token,
                    reason,
                    input_schema: parse_json(&schema)?,
                    created_at: Timestamp(at),
                    expires_at: self.expires_at.map(Timestamp),
                }),
                _ => None,
            },
        )
    }
}

/// A feed entry as stored, with its call's unchanging columns joined, before parsing.
pub(crate) struct RawFeedEntry {
    pub(crate) cursor: String,
    pub(crate) at: i64,
    pub(crate) kind: String,
    pub(crate) about: RawSubject,
}

/// What a stored feed entry is about, before parsing.
pub(crate) enum RawSubject {
    /// A call's change.
    Call(Box<RawCallChange>),
    /// An upstream tool's change: the upstream, and the change as JSON text.
    Upstream { upstream: String, change: String },
}

/// A call's feed entry as stored, with its call's unchanging columns joined.
pub(crate) struct RawCallChange {
    pub(crate) call_id: String,
    pub(crate) attempts: i64,
    pub(crate) tool: String,
    pub(crate) effect: String,
    pub(crate) caller: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) suspension: RawSuspension,
    /// The call's error, for an entry of a final status that has one (rejected, failed,
    /// expired): it cannot change after the entry.
    pub(crate) error: Option<String>,
    /// For `call.approval_recorded`: the approvals as it recorded them, as stored.
    pub(crate) progress: Option<String>,
    /// Whether an approval of the call was ever escalated.
    pub(crate) escalated: bool,
    /// The call's `edited`, as stored now.
    pub(crate) edited: Option<String>,
}

impl RawFeedEntry {
    /// Reads the entry at `cursor` from a row whose columns from `first` on are the entry's
    /// `at, type, call_id, attempts, token`, its call's `tool, effect, caller,
    /// idempotency_key, created_at`, its suspension's `reason, input_schema, created_at,
    /// expires_at`, the call's `error` for a final status, the entry's `approvals`,
    /// whether the call was ever escalated, its `edited`, and the entry's `upstream` and
    /// `detail` (the columns before `first` are the backend's cursor). An entry with an
    /// `upstream` is of an upstream's tool: it has no call, and its call's columns are null.
    pub(crate) fn read<R: Columns>(
        row: &R,
        first: usize,
        cursor: String,
    ) -> Result<Self, R::Error> {
        let about = match row.text_or_null(first + 18)? {
            Some(upstream) => RawSubject::Upstream {
                upstream,
                change: row.text_or_null(first + 19)?.unwrap_or_default(),
            },
            None => RawSubject::Call(Box::new(RawCallChange {
                call_id: row.text(first + 2)?,
                attempts: row.integer(first + 3)?,
                tool: row.text(first + 5)?,
                effect: row.text(first + 6)?,
                caller: row.text_or_null(first + 7)?,
                idempotency_key: row.text_or_null(first + 8)?,
                created_at: row.bigint(first + 9)?,
                suspension: RawSuspension::read(row, first + 4, first + 10)?,
                error: row.text_or_null(first + 14)?,
                progress: row.text_or_null(first + 15)?,
                escalated: row.integer(first + 16)? != 0,
                edited: row.text_or_null(first + 17)?,
            })),
        };
        Ok(RawFeedEntry {
            cursor,
            at: row.bigint(first)?,
            kind: row.text(first + 1)?,
            about,
        })
    }

    pub(crate) fn decode(self) -> Result<super::FeedEntry, StoreError> {
        let (cursor, kind, at) = (super::FeedCursor(self.cursor), self.kind, self.at);
        let call = match self.about {
            RawSubject::Upstream { upstream, change } => {
                return Ok(super::FeedEntry {
                    cursor,
                    kind,
                    at: Timestamp(at),
                    subject: super::FeedSubject::Upstream {
                        upstream,
                        change: parse_json(&change)?,
                    },
                    suspension: None,
                    error: None,
                    progress: None,
                    edited: None,
                });
            }
            RawSubject::Call(call) => *call,
        };
        let status = super::record::feed_status(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown feed entry type {kind}")))?;
        let suspension = call.suspension.view()?;
        // An edit made after the entry (the call suspended again, say) is not the entry's.
        let edited = super::CallEdit::parse(call.edited.as_deref())?
            .filter(|edit| edit.mark.at.0 <= at)
            .map(Box::new);
        Ok(super::FeedEntry {
            cursor,
            kind,
            at: Timestamp(at),
            subject: super::FeedSubject::Call(super::CallSummary {
                call_id: call.call_id,
                tool: call.tool,
                effect: parse_effect(&call.effect)?,
                status,
                caller: call.caller,
                idempotency_key: call.idempotency_key,
                created_at: Timestamp(call.created_at),
                updated_at: Timestamp(at),
                attempts: u32::try_from(call.attempts).unwrap_or(u32::MAX),
                escalated: call.escalated,
            }),
            suspension,
            error: call.error.as_deref().map(parse_json).transpose()?,
            progress: call.progress.as_deref().map(parse_json).transpose()?,
            edited,
        })
    }
}

/// A delivery's columns but for its body, in the order [`RawDelivery::read`] reads them (the
/// body follows them).
pub(crate) const DELIVERY_COLUMNS: &str = "id, webhook, message_id, type, call_id, status, \
     attempts, last_status, last_error, next_attempt_at, created_at, updated_at, channel, \
     recipient, receipt";

/// A webhook delivery row as stored, before its status is parsed.
pub(crate) struct RawDelivery {
    pub(crate) id: i64,
    pub(crate) webhook: String,
    pub(crate) message_id: String,
    pub(crate) kind: String,
    pub(crate) call_id: String,
    pub(crate) status: String,
    pub(crate) attempts: i64,
    pub(crate) last_status: Option<i64>,
    pub(crate) last_error: Option<String>,
    pub(crate) next_attempt_at: Option<i64>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) channel: Option<String>,
    pub(crate) recipient: Option<String>,
    pub(crate) receipt: Option<String>,
    /// Empty in lists, which leave it out.
    pub(crate) body: String,
}

impl RawDelivery {
    /// Reads a row of [`DELIVERY_COLUMNS`] followed by the body.
    pub(crate) fn read<R: Columns>(row: &R) -> Result<Self, R::Error> {
        Ok(RawDelivery {
            id: row.bigint(0)?,
            webhook: row.text(1)?,
            message_id: row.text(2)?,
            kind: row.text(3)?,
            call_id: row.text(4)?,
            status: row.text(5)?,
            attempts: row.integer(6)?,
            last_status: row.integer_or_null(7)?,
            last_error: row.text_or_null(8)?,
            next_attempt_at: row.bigint_or_null(9)?,
            created_at: row.bigint(10)?,
            updated_at: row.bigint(11)?,
            channel: row.text_or_null(12)?,
            recipient: row.text_or_null(13)?,
            receipt: row.text_or_null(14)?,
            body: row.text(15)?,
        })
    }

    pub(crate) fn decode(self) -> Result<super::Delivery, StoreError> {
        let status = super::DeliveryStatus::parse(&self.status).ok_or_else(|| {
            StoreError::Corrupt(format!("unknown delivery status {}", self.status))
        })?;
        let last_status = self
            .last_status
            .map(|s| {
                u16::try_from(s)
                    .map_err(|_| StoreError::Corrupt(format!("HTTP status {s} out of range")))
            })
            .transpose()?;
        Ok(super::Delivery {
            id: self.id,
            webhook: self.webhook,
            message_id: self.message_id,
            kind: self.kind,
            call_id: self.call_id,
            status,
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
            last_status,
            last_error: self.last_error,
            next_attempt_at: self.next_attempt_at.map(Timestamp),
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            body: self.body,
            channel: self.channel,
            recipient: self.recipient,
            receipt: self.receipt,
        })
    }
}

/// Reads a row of an inbox session's `id_sha256, key_name, role, key_fingerprint, created_at,
/// expires_at`.
pub(crate) fn read_session<R: Columns>(row: &R) -> Result<InboxSession, R::Error> {
    Ok(InboxSession {
        id_sha256: row.text(0)?,
        key_name: row.text_or_null(1)?,
        role: row.text(2)?,
        key_fingerprint: row.text_or_null(3)?,
        created_at: Timestamp(row.bigint(4)?),
        expires_at: Timestamp(row.bigint(5)?),
        display_name: row.text_or_null(6)?,
        decides: row.text_or_null(7)?,
    })
}
