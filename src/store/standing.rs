//! Standing approvals: an approver's "this tool, for this caller, for the next N seconds or K
//! calls", recorded with the approval that granted it, and spent one call at a time by the
//! calls its policy would otherwise suspend.
//!
//! A concern of its own ([`StandingStore`]) because of its promise: **a standing approval's
//! call limit is never exceeded**, however many calls and replicas race for it. A call takes
//! one by a conditional `UPDATE ... SET calls_left = calls_left - 1 WHERE calls_left > 0 AND
//! expires_at > now AND revoked_at IS NULL`, in the transaction that records the call (released,
//! with a `standing_approved` event naming it, or suspended when none holds): SQLite's one
//! writer cannot race itself; on PostgreSQL a second replica waits for the first's row lock and
//! re-checks the condition. The writes are the backends' (`sqlite/standing.rs`,
//! `postgres/writer/standing.rs`); every one goes through the batching writer.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::rows::Columns;
use super::{Actor, Inserted, NewCall, Outcome, Resolution, Resolved, StoreError, Timestamp};

/// The kind of the event that records a call released by a standing approval.
pub const STANDING_APPROVED: &str = "standing_approved";

/// A standing approval as it is listed.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct StandingApproval {
    /// Its id (`sa_...`): what `DELETE /standing-approvals/{id}` revokes, and what the calls it
    /// releases are recorded with.
    pub id: String,
    /// The tool whose calls it releases.
    pub tool: String,
    /// The principal whose calls it releases.
    pub caller: String,
    /// Who granted it.
    pub approver: Option<String>,
    /// The name that approver is shown by, when they signed in with an identity provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver_name: Option<String>,
    /// The call whose approval granted it.
    pub call_id: String,
    /// How many calls it released at most, in all.
    pub calls: u32,
    /// How many it may still release.
    pub calls_left: u32,
    /// When it was granted.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When it stops releasing calls.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
    /// When it was revoked, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub revoked_at: Option<Timestamp>,
    /// Who revoked it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_by: Option<String>,
}

/// A standing approval to record with the approval that grants it: its approver is the
/// approval's, its caller and tool the approved call's.
#[derive(Debug, Clone, PartialEq)]
pub struct NewStanding {
    /// A fresh id.
    pub id: String,
    /// How many calls it may release.
    pub calls: u32,
    /// When it stops releasing calls.
    pub expires_at: Timestamp,
}

/// The standing approval that released a call, as the call's record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StandingUse {
    /// The standing approval's id.
    pub id: String,
    /// Who granted it.
    pub approver: Option<String>,
}

/// The columns of a standing approval, in the order [`read_standing`] reads them.
pub(crate) const STANDING_COLUMNS: &str = "id, tool, caller, approver, approver_name, call_id, \
     calls, calls_left, created_at, expires_at, revoked_at, revoked_by";

/// Reads a row of [`STANDING_COLUMNS`].
pub(crate) fn read_standing<R: Columns>(row: &R) -> Result<StandingApproval, R::Error> {
    let count = |n: i64| u32::try_from(n).unwrap_or(0);
    Ok(StandingApproval {
        id: row.text(0)?,
        tool: row.text(1)?,
        caller: row.text(2)?,
        approver: row.text_or_null(3)?,
        approver_name: row.text_or_null(4)?,
        call_id: row.text(5)?,
        calls: count(row.integer(6)?),
        calls_left: count(row.integer(7)?),
        created_at: Timestamp(row.bigint(8)?),
        expires_at: Timestamp(row.bigint(9)?),
        revoked_at: row.bigint_or_null(10)?.map(Timestamp),
        revoked_by: row.text_or_null(11)?,
    })
}

/// One call taken from a standing approval, as the conditional update returns it: the
/// standing approval's id, its approver and the name they are shown by.
pub(crate) type Taken = (String, Option<String>, Option<String>);

/// The kind of the event that records, on the call whose approval granted it, a standing
/// approval granted.
pub const STANDING_GRANTED: &str = "standing_granted";

/// The details of a `standing_granted` event: what was granted.
pub(crate) fn granted_details(standing: &NewStanding) -> serde_json::Value {
    serde_json::json!({
        "standing_approval_id": standing.id,
        "calls": standing.calls,
        "expires_at": standing.expires_at,
    })
}

/// The details of a `standing_approved` event: the standing approval's id.
pub(crate) fn standing_details(id: &str) -> serde_json::Value {
    serde_json::json!({ "standing_approval_id": id })
}

/// The standing approval that released a call, as its `standing_approved` event names it.
pub(crate) fn released_by(events: &[super::CallEvent]) -> Option<StandingUse> {
    let event = events
        .iter()
        .find(|event| event.kind == STANDING_APPROVED)?;
    let id = event
        .details
        .as_ref()?
        .get("standing_approval_id")?
        .as_str()?;
    Some(StandingUse {
        id: id.to_owned(),
        approver: event.actor.clone(),
    })
}

/// Standing approvals: granted with an approval, spent by calls, listed, revoked. A store that
/// keeps none (its defaults) grants none, so releases no call: every call its policy would
/// suspend is suspended.
#[async_trait]
pub trait StandingStore: super::CallStore + Send + Sync {
    /// [`CallStore::resolve_by`](super::CallStore::resolve_by) with an approval that, when it
    /// releases the call, also records `standing` for the call's tool and caller, by `actor`,
    /// in the same transaction. The call must have a caller.
    async fn approve_standing(
        &self,
        _token: &str,
        _resolution: Resolution,
        _actor: &Actor,
        _standing: NewStanding,
    ) -> Result<Resolved, StoreError> {
        Err(StoreError::Backend(
            "this store keeps no standing approvals".into(),
        ))
    }

    /// Records a new call that its policy would suspend (`suspended`, an outcome with its
    /// suspension): released instead, recorded `running` with a `standing_approved` event,
    /// when a standing approval of its tool and caller holds (one of its calls is taken, in the
    /// same transaction); else as [`CallStore::insert_call`](super::CallStore::insert_call)
    /// with `suspended`. A call with the same (tool, idempotency key) is answered as there,
    /// and takes nothing. Only a standing approval granted at or after `granted_since` is
    /// taken (one granted before is of a definition of the tool no longer trusted).
    async fn insert_standing_call(
        &self,
        call: NewCall,
        suspended: Outcome,
        granted_since: Timestamp,
    ) -> Result<(Inserted, Option<StandingUse>), StoreError> {
        let _ = granted_since;
        let inserted = self.insert_call(call, Some(suspended)).await?;
        Ok((inserted, None))
    }

    /// The standing approvals that hold at `now` (not revoked, not expired, calls left),
    /// newest first.
    async fn standing_approvals(
        &self,
        _now: Timestamp,
    ) -> Result<Vec<StandingApproval>, StoreError> {
        Ok(Vec::new())
    }

    /// The standing approval `id`, whatever its state.
    async fn standing_approval(&self, _id: &str) -> Result<Option<StandingApproval>, StoreError> {
        Ok(None)
    }

    /// Revokes the standing approval `id` by `by` (a no-op if it was revoked already); it as
    /// it is now, `None` when no standing approval has this id.
    async fn revoke_standing(
        &self,
        _id: &str,
        _by: Option<&str>,
        _now: Timestamp,
    ) -> Result<Option<StandingApproval>, StoreError> {
        Ok(None)
    }
}

/// A standing approval's write, as the batching writer applies it (see `queue.rs`).
pub(crate) enum StandingOp {
    /// [`StandingStore::approve_standing`].
    Approve {
        token: String,
        resolution: Resolution,
        actor: Actor,
        standing: NewStanding,
    },
    /// [`StandingStore::insert_standing_call`]: the call, its suspended outcome, and the
    /// earliest grant (Unix ms) a standing approval it takes may have.
    InsertCall(super::record::PreparedCall, super::record::Prepared, i64),
    /// [`StandingStore::standing_approvals`] at this time (Unix ms). A read, through the writer
    /// so that it sees every call it released: it is rare (a person's listing).
    List(i64),
    /// [`StandingStore::standing_approval`].
    Get(String),
    /// [`StandingStore::revoke_standing`]: by whom, at what time (Unix ms).
    Revoke {
        id: String,
        by: Option<String>,
        at: i64,
    },
}

/// What a [`StandingOp`] answers.
pub(crate) enum StandingReply {
    Resolved(Box<Resolved>),
    Inserted(Inserted, Option<StandingUse>),
    Listed(Vec<StandingApproval>),
    One(Option<Box<StandingApproval>>),
}

impl StandingReply {
    fn unexpected() -> StoreError {
        StoreError::Backend("unexpected reply from the store's writer".into())
    }

    pub(crate) fn resolved(self) -> Result<Resolved, StoreError> {
        match self {
            StandingReply::Resolved(resolved) => Ok(*resolved),
            _ => Err(Self::unexpected()),
        }
    }

    pub(crate) fn inserted(self) -> Result<(Inserted, Option<StandingUse>), StoreError> {
        match self {
            StandingReply::Inserted(inserted, used) => Ok((inserted, used)),
            _ => Err(Self::unexpected()),
        }
    }

    pub(crate) fn listed(self) -> Result<Vec<StandingApproval>, StoreError> {
        match self {
            StandingReply::Listed(list) => Ok(list),
            _ => Err(Self::unexpected()),
        }
    }

    pub(crate) fn one(self) -> Result<Option<StandingApproval>, StoreError> {
        match self {
            StandingReply::One(one) => Ok(one.map(|one| *one)),
            _ => Err(Self::unexpected()),
        }
    }
}
