//! Crash recovery: settling, when the store opens, the calls a previous process left `running`.
//!
//! Their runs ended with that process and nobody is left to record how they ended: unsettled,
//! such a call would stay `running` for good. Settled here, a read or idempotent call runs again
//! when its request comes back, and a write, whose effect may have happened, waits for a person.
//! It is safe only because one server owns the file (the lock taken in `mod.rs`): a second
//! server would settle calls the first is still running.

use rusqlite::{Connection, TransactionBehavior, params};
use serde_json::json;

use super::backend;
use super::writes::{append_event, append_feed};
use crate::store::{CallStatus, StoreError, Timestamp};

/// Settles calls a previous process left `running`: a read or idempotent call may run again
/// when its request comes back (`interrupted`); a write's effect may have happened, so a person
/// decides (`needs_reconciliation`).
pub(super) fn recover(conn: &mut Connection) -> Result<(), StoreError> {
    let now = Timestamp::now().0;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let mut counts = [0usize; 2];
    let mut settled = Vec::new();
    {
        let mut running = tx
            .prepare("SELECT call_id, effect, tool FROM calls WHERE status = 'running'")
            .map_err(backend)?;
        let rows: Vec<(String, String, String)> = running
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .map_err(backend)?
            .collect::<Result<_, _>>()
            .map_err(backend)?;
        for (call_id, effect, tool) in rows {
            let (status, slot) = if effect == "write" {
                (CallStatus::NeedsReconciliation, 1)
            } else {
                (CallStatus::Interrupted, 0)
            };
            tx.execute(
                "UPDATE calls SET status = ?2, updated_at = ?3 WHERE call_id = ?1",
                params![call_id, status.as_str(), now],
            )
            .map_err(backend)?;
            append_event(
                &tx,
                &call_id,
                now,
                status.as_str(),
                None,
                Some(&json!({"reason": "the server stopped while the call was running"})),
            )?;
            append_feed(&tx, &call_id, now, status, None)?;
            counts[slot] += 1;
            settled.push((tool, status));
        }
    }
    tx.commit().map_err(backend)?;
    for (tool, status) in settled {
        crate::metrics::call_outcome(&tool, status.as_str());
    }
    if counts != [0, 0] {
        tracing::warn!(
            interrupted = counts[0],
            needs_reconciliation = counts[1],
            "recovered calls left running by a previous process"
        );
    }
    Ok(())
}
