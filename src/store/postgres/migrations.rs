//! The PostgreSQL schema's versions: numbered SQL files in `src/store/migrations/postgres/`,
//! applied in order at start-up under an advisory lock, so replicas that start together migrate
//! once (the others wait, then find nothing to do). `toolgate_migrations` records what was
//! applied; a database whose schema is newer than this build is refused (`SchemaTooNew`).

use super::{pg_error, pool_error};
use crate::store::StoreError;

/// Versioned schema changes, applied in order.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_schema.sql"),
    include_str!("../migrations/postgres/0002_feed.sql"),
    include_str!("../migrations/postgres/0003_webhooks.sql"),
    include_str!("../migrations/postgres/0004_inbox_sessions.sql"),
    include_str!("../migrations/postgres/0005_quota_buckets.sql"),
    include_str!("../migrations/postgres/0006_inbox_people.sql"),
    include_str!("../migrations/postgres/0007_approval_policies.sql"),
    include_str!("../migrations/postgres/0008_running_calls.sql"),
    include_str!("../migrations/postgres/0009_call_traces.sql"),
    include_str!("../migrations/postgres/0010_feed_approvals.sql"),
    include_str!("../migrations/postgres/0011_approval_edits.sql"),
    include_str!("../migrations/postgres/0012_standing_approvals.sql"),
    include_str!("../migrations/postgres/0013_notifications.sql"),
    include_str!("../migrations/postgres/0014_link_keys.sql"),
    include_str!("../migrations/postgres/0015_tool_pins.sql"),
    include_str!("../migrations/postgres/0016_signing_keys.sql"),
    include_str!("../migrations/postgres/0017_audit.sql"),
    include_str!("../migrations/postgres/0018_audit_completed.sql"),
];

/// The advisory lock key migrations run under (an arbitrary constant: "toolgate" in ASCII).
const MIGRATION_LOCK: i64 = 0x746f_6f6c_6761_7465;

/// Brings the schema up to date, holding the migration lock while it does.
pub(super) async fn migrate(pool: &deadpool_postgres::Pool) -> Result<(), StoreError> {
    let mut conn = pool.get().await.map_err(pool_error)?;
    conn.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg_error)?;
    let result = apply(&mut conn).await;
    // Released explicitly: the connection goes back to the pool, and a lock left held would
    // keep the next replica's start waiting.
    let unlocked = conn
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg_error);
    result.and(unlocked.map(drop))
}

async fn apply(conn: &mut deadpool_postgres::Object) -> Result<(), StoreError> {
    conn.batch_execute(
        "CREATE TABLE IF NOT EXISTS toolgate_migrations (\
           version integer PRIMARY KEY, \
           applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    )
    .await
    .map_err(pg_error)?;
    let current: i32 = conn
        .query_one(
            "SELECT coalesce(max(version), 0) FROM toolgate_migrations",
            &[],
        )
        .await
        .map_err(pg_error)?
        .try_get(0)
        .map_err(pg_error)?;
    let supported = MIGRATIONS.len() as i64;
    if i64::from(current) > supported {
        return Err(StoreError::SchemaTooNew {
            found: i64::from(current),
            supported,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as i32 + 1;
        let tx = conn.transaction().await.map_err(pg_error)?;
        tx.batch_execute(sql)
            .await
            .map_err(|e| StoreError::Backend(format!("migration {version} failed: {e}")))?;
        tx.execute(
            "INSERT INTO toolgate_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        tracing::info!(version, "applied store migration");
    }
    Ok(())
}
