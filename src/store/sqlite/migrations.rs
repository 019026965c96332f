//! The SQLite schema: numbered migrations, applied in order when the store opens.
//!
//! The SQL lives in `src/store/migrations/sqlite/`, one file per version, compiled in. The
//! database records the last one applied in `PRAGMA user_version`, so each migration runs once
//! on a database, and a build refuses a database that a newer build has migrated further.

use rusqlite::{Connection, TransactionBehavior};

use super::backend;
use crate::store::StoreError;

/// Versioned schema changes, applied in order; `PRAGMA user_version` records the last applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite/0001_calls_and_suspensions.sql"),
    include_str!("../migrations/sqlite/0002_idempotency_events_auth.sql"),
    include_str!("../migrations/sqlite/0003_derived_events.sql"),
    include_str!("../migrations/sqlite/0004_suspension_tool.sql"),
    include_str!("../migrations/sqlite/0005_feed.sql"),
    include_str!("../migrations/sqlite/0006_webhooks.sql"),
    include_str!("../migrations/sqlite/0007_inbox_sessions.sql"),
    include_str!("../migrations/sqlite/0008_inbox_people.sql"),
    include_str!("../migrations/sqlite/0009_approval_policies.sql"),
    include_str!("../migrations/sqlite/0010_call_traces.sql"),
    include_str!("../migrations/sqlite/0011_feed_approvals.sql"),
    include_str!("../migrations/sqlite/0012_approval_edits.sql"),
    include_str!("../migrations/sqlite/0013_standing_approvals.sql"),
    include_str!("../migrations/sqlite/0014_notifications.sql"),
    include_str!("../migrations/sqlite/0015_link_keys.sql"),
    include_str!("../migrations/sqlite/0016_tool_pins.sql"),
    include_str!("../migrations/sqlite/0017_signing_keys.sql"),
    include_str!("../migrations/sqlite/0018_audit.sql"),
];

/// Applies the migrations `conn`'s database has not had yet, each in its own exclusive
/// transaction; refuses a database newer than this build.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let supported = MIGRATIONS.len() as i64;
    let current: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(backend)?;
    if current > supported {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as i64 + 1;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Exclusive)
            .map_err(backend)?;
        tx.execute_batch(sql)
            .map_err(|e| StoreError::Backend(format!("migration {version} failed: {e}")))?;
        tx.pragma_update(None, "user_version", version)
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        tracing::info!(version, "applied store migration");
    }
    Ok(())
}
