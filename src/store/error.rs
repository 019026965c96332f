//! The store's own failures (not a call's): told apart by variant, so that a door maps each one
//! (an unreachable database is `503`, a lost lease is the call as it now is) without reading
//! messages.

use super::CallRecord;

/// A failure of the store itself (not of a call).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed (I/O, locking, a closed connection).
    #[error("store backend failed: {0}")]
    Backend(String),
    /// Stored data could not be read back.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database cannot be reached (down, restarting, cut off) or did not answer in time.
    /// Nothing was acknowledged; the request may be retried.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// An outcome was recorded for a call that does not exist.
    #[error("call {call_id} is not running")]
    NotRunning {
        /// The call.
        call_id: String,
    },
    /// An outcome came from a run that no longer owns its call: its replica lost its lease and
    /// the call was settled meanwhile, or the call moved on. The outcome was not recorded as
    /// the call's, but appended to its history as a `late_outcome` event; the call as it is now.
    #[error("the run no longer owns call {}", .0.call_id)]
    LeaseLost(Box<CallRecord>),
    /// Another process holds the store.
    #[error("the store at {0} is in use by another process")]
    Locked(String),
    /// A feed cursor older than the feed's retention: entries after it were pruned.
    #[error("the feed cursor is older than the feed's retention")]
    CursorExpired,
    /// A feed cursor this backend did not write.
    #[error("not a feed cursor: {0}")]
    BadCursor(String),
    /// The store's schema is newer than this build understands.
    #[error("the database schema is version {found}, newer than this build's {supported}")]
    SchemaTooNew {
        /// The version found.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
}
