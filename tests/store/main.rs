//! The store conformance suite: what every `Store` backend must do, by concern (`calls.rs`,
//! `suspensions.rs`, `feed.rs`, `outbox.rs`, `sessions.rs`, `standing.rs`, `link_keys.rs`,
//! `pins.rs`, `signing_keys.rs`).
//! Each backend runs every check through `suite!` below; a new backend adds one invocation. What
//! only the embedded backend does (its file, across reopens and crashes) is checked at the end of
//! this file; what only a shared database does is in `tests/store_postgres.rs`. One test binary,
//! so that it links once.

#[path = "../common/mod.rs"]
mod common;

mod calls;
mod edits;
mod feed;
mod link_keys;
mod outbox;
mod pins;
mod sessions;
mod signing_keys;
mod standing;
mod suspensions;

use std::sync::Arc;

use serde_json::json;
use toolgate::Effect;
use toolgate::store::{
    CallFilter, CallStatus, CallStore, NewCall, Outcome, PostgresOptions, PostgresStore,
    SqliteStore, Store, StoreError, Timestamp,
};

use calls::{keyed, kinds, new_call, suspended};

macro_rules! suite {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;

            async fn store() -> (Arc<dyn Store>, Box<dyn std::any::Any>) {
                $make().await
            }

            #[tokio::test]
            async fn intent_then_outcome() {
                super::calls::intent_then_outcome(store().await.0).await;
            }
            #[tokio::test]
            async fn finished_in_one_write() {
                super::calls::finished_in_one_write(store().await.0).await;
            }
            #[tokio::test]
            async fn counts_show_what_is_pending_now() {
                super::suspensions::counts_show_what_is_pending_now(store().await.0).await;
            }
            #[tokio::test]
            async fn many_read_records_written_behind_keep_their_own_fields() {
                super::calls::many_read_records_written_behind_keep_their_own_fields(
                    store().await.0,
                )
                .await;
            }
            #[tokio::test]
            async fn approve_is_single_use() {
                super::suspensions::approve_is_single_use(store().await.0).await;
            }
            #[tokio::test]
            async fn reject_records_the_reason() {
                super::suspensions::reject_records_the_reason(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn escalation_happens_once() {
                super::suspensions::escalation_happens_once(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn several_approvers_release_a_call_once() {
                super::suspensions::several_approvers_release_a_call_once(store().await.0).await;
            }
            #[tokio::test]
            async fn edits_are_held_counted_anew_and_run() {
                super::edits::edits_are_held_counted_anew_and_run(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_resolutions_have_one_winner() {
                super::suspensions::concurrent_resolutions_have_one_winner(store().await.0).await;
            }
            #[tokio::test]
            async fn pending_pages_oldest_first() {
                super::suspensions::pending_pages_oldest_first(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn many_concurrent_writes_all_land() {
                super::calls::many_concurrent_writes_all_land(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn one_call_per_idempotency_key() {
                super::calls::one_call_per_idempotency_key(store().await.0).await;
            }
            #[tokio::test]
            async fn interrupted_calls_are_claimed_once() {
                super::calls::interrupted_calls_are_claimed_once(store().await.0).await;
            }
            #[tokio::test]
            async fn reconciliation_settles_once() {
                super::calls::reconciliation_settles_once(store().await.0).await;
            }
            #[tokio::test]
            async fn external_completion_and_expiry() {
                super::suspensions::external_completion_and_expiry(store().await.0).await;
            }
            #[tokio::test]
            async fn calls_list_newest_first_with_filters() {
                super::calls::calls_list_newest_first_with_filters(store().await.0).await;
            }
            #[tokio::test]
            async fn the_feed_has_one_entry_per_change_in_order() {
                super::feed::the_feed_has_one_entry_per_change_in_order(store().await.0).await;
            }
            #[tokio::test]
            async fn a_pruned_feed_expires_older_cursors() {
                super::feed::a_pruned_feed_expires_older_cursors(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_writers_lose_and_repeat_no_feed_entry() {
                super::feed::concurrent_writers_lose_and_repeat_no_feed_entry(store().await.0)
                    .await;
            }
            #[tokio::test]
            async fn the_outbox_cursor_moves_by_compare_and_set() {
                super::outbox::the_outbox_cursor_moves_by_compare_and_set(store().await.0).await;
            }
            #[tokio::test]
            async fn a_delivery_is_retried_once_due_then_delivered() {
                super::outbox::a_delivery_is_retried_once_due_then_delivered(store().await.0).await;
            }
            #[tokio::test]
            async fn a_claim_whose_claimant_died_runs_out() {
                super::outbox::a_claim_whose_claimant_died_runs_out(store().await.0).await;
            }
            #[tokio::test]
            async fn a_failed_delivery_is_sent_again_on_request() {
                super::outbox::a_failed_delivery_is_sent_again_on_request(store().await.0).await;
            }
            #[tokio::test]
            async fn deliveries_list_newest_first_by_status_in_pages() {
                super::outbox::deliveries_list_newest_first_by_status_in_pages(store().await.0)
                    .await;
            }
            #[tokio::test]
            async fn a_webhook_whose_receiver_answers_410_is_disabled() {
                super::outbox::a_webhook_whose_receiver_answers_410_is_disabled(store().await.0)
                    .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_claims_never_share_a_delivery() {
                super::outbox::concurrent_claims_never_share_a_delivery(store().await.0).await;
            }
            #[tokio::test]
            async fn pending_approvals_filter_by_tool_and_name_the_caller() {
                super::suspensions::pending_approvals_filter_by_tool_and_name_the_caller(
                    store().await.0,
                )
                .await;
            }
            #[tokio::test]
            async fn inbox_sessions_expire_and_end() {
                super::sessions::inbox_sessions_expire_and_end(store().await.0).await;
            }
            #[tokio::test]
            async fn standing_approvals_release_calls_up_to_their_limit() {
                super::standing::standing_approvals_release_calls_up_to_their_limit(
                    store().await.0,
                )
                .await;
            }
            #[tokio::test]
            async fn standing_approvals_end_when_expired_or_revoked() {
                super::standing::standing_approvals_end_when_expired_or_revoked(store().await.0)
                    .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_calls_never_exceed_the_limit() {
                super::standing::concurrent_calls_never_exceed_the_limit(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_periods_link_key_is_made_once_and_retired() {
                super::link_keys::a_periods_link_key_is_made_once_and_retired(store().await.0)
                    .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn an_upstreams_first_connection_pins_once() {
                super::pins::an_upstreams_first_connection_pins_once(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_tool_change_is_told_once_until_accepted() {
                super::pins::a_tool_change_is_told_once_until_accepted(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_periods_signing_key_is_made_once_and_retired() {
                super::signing_keys::a_periods_signing_key_is_made_once_and_retired(
                    store().await.0,
                )
                .await;
            }
        }
    };
}

fn open_sqlite(dir: &std::path::Path) -> SqliteStore {
    SqliteStore::open(dir.join("toolgate.db")).unwrap()
}

/// A fresh SQLite store, with the directory that holds it.
async fn sqlite_store() -> (Arc<dyn Store>, Box<dyn std::any::Any>) {
    let dir = common::temp_dir();
    let store: Arc<dyn Store> = Arc::new(open_sqlite(dir.path()));
    (store, Box::new(dir))
}

/// A PostgreSQL store on a fresh database of its own, with the database's guard.
async fn postgres_store() -> (Arc<dyn Store>, Box<dyn std::any::Any>) {
    let db = common::pg::TestDb::create().await;
    let store = PostgresStore::open(&db.url, test_pg_options())
        .await
        .unwrap();
    (Arc::new(store), Box::new(db))
}

fn test_pg_options() -> PostgresOptions {
    PostgresOptions {
        pool_size: 4,
        ..PostgresOptions::default()
    }
}

suite!(sqlite, sqlite_store);
suite!(postgres, postgres_store);

#[tokio::test]
async fn sqlite_keeps_everything_across_a_reopen() {
    let dir = common::temp_dir();
    {
        let store = open_sqlite(dir.path());
        store
            .insert_call(new_call("k1"), Some(suspended("tk")))
            .await
            .unwrap();
        store
            .insert_call(
                new_call("k2"),
                Some(Outcome::Completed { output: json!(2) }),
            )
            .await
            .unwrap();
    }
    let store = open_sqlite(dir.path());
    let k2 = store.call("k2").await.unwrap().unwrap();
    assert_eq!(k2.output, Some(json!(2)));
    assert_eq!(kinds(&k2), ["created", "completed"]);
    assert_eq!(k2.events[1].details, Some(json!({"attempts": 1})));
    let page = store.pending_approvals(None, 10).await.unwrap();
    assert_eq!(page.approvals.len(), 1);
    assert_eq!(page.approvals[0].token, "tk");
}

#[test]
fn sqlite_refuses_a_database_from_a_newer_build() {
    let dir = common::temp_dir();
    let path = dir.path().join("toolgate.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    match SqliteStore::open(&path) {
        Err(StoreError::SchemaTooNew { found: 99, .. }) => {}
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a newer schema must not be opened"),
    }
}

#[tokio::test]
async fn sqlite_migration_4_names_the_tool_of_suspensions_made_before_it() {
    let dir = common::temp_dir();
    let path = dir.path().join("toolgate.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store
            .insert_call(
                NewCall {
                    tool: "ask_human".into(),
                    ..new_call("m1")
                },
                Some(suspended("tm1")),
            )
            .await
            .unwrap();
    }
    // The file as a build before migration 4 left it: no `tool` on suspensions.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "ALTER TABLE suspensions DROP COLUMN tool; ALTER TABLE suspensions DROP COLUMN approvals; \
         ALTER TABLE suspensions DROP COLUMN escalated_at; \
         DROP TABLE feed; DROP TABLE feed_state; \
         DROP TABLE webhook_deliveries; DROP TABLE webhook_outbox; DROP TABLE inbox_sessions; \
         DROP TABLE link_keys; DROP TABLE signing_keys; \
         ALTER TABLE calls DROP COLUMN trace; \
         ALTER TABLE suspensions DROP COLUMN edit; ALTER TABLE calls DROP COLUMN edited; \
         DROP TABLE standing_approvals; DROP TABLE tool_pins; DROP TABLE pinned_upstreams; \
         DROP TABLE tool_changes; DROP TABLE audit; DROP TABLE audit_exports; \
         PRAGMA user_version = 3;",
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&path).unwrap();
    let page = store.pending_approvals(None, 10).await.unwrap();
    assert_eq!(page.approvals.len(), 1);
    assert_eq!(page.approvals[0].tool, "ask_human");
    assert_eq!(page.approvals[0].token, "tm1");
}

#[tokio::test]
async fn sqlite_recovers_calls_left_running_by_effect() {
    let dir = common::temp_dir();
    {
        let store = open_sqlite(dir.path());
        store
            .insert_call(keyed("w", "kw", Effect::Write), None)
            .await
            .unwrap();
        store
            .insert_call(keyed("i", "ki", Effect::Idempotent), None)
            .await
            .unwrap();
        store
            .insert_call(keyed("r", "kr", Effect::Read), None)
            .await
            .unwrap();
        // The process "dies" here: nothing finishes these calls.
    }
    let store = open_sqlite(dir.path());
    let status = |id: &'static str| {
        let store = store.clone();
        async move { store.call(id).await.unwrap().unwrap() }
    };
    let write = status("w").await;
    assert_eq!(write.status, CallStatus::NeedsReconciliation);
    assert_eq!(write.events.last().unwrap().kind, "needs_reconciliation");
    assert_eq!(status("i").await.status, CallStatus::Interrupted);
    assert_eq!(status("r").await.status, CallStatus::Interrupted);

    // An interrupted call is claimed by exactly one re-run.
    let claimed = store.rerun_interrupted("i").await.unwrap().unwrap();
    assert_eq!(claimed.call.status, CallStatus::Running);
    assert_eq!(claimed.resume_input, None, "it was never approved");
    assert_eq!(claimed.call.attempts, 2);
    assert!(store.rerun_interrupted("i").await.unwrap().is_none());
    // A write is never claimed for a re-run.
    assert!(store.rerun_interrupted("w").await.unwrap().is_none());
}

#[test]
fn a_second_process_cannot_open_the_same_store() {
    let dir = common::temp_dir();
    let first = open_sqlite(dir.path());
    match SqliteStore::open(dir.path().join("toolgate.db")) {
        Err(StoreError::Locked(_)) => {}
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("two owners of one store would recover each other's running calls"),
    }
    drop(first);
    let _again = open_sqlite(dir.path());
}

#[tokio::test]
async fn sqlite_lists_lazily_expired_calls_as_expired() {
    let dir = common::temp_dir();
    let store = open_sqlite(dir.path());
    for (id, expires) in [("fresh", None), ("stale", Some(Timestamp(1)))] {
        let outcome = Outcome::Suspended {
            token: format!("t-{id}"),
            reason: "r".into(),
            input_schema: json!({}),
            expires_at: expires,
        };
        store
            .insert_call(new_call(id), Some(outcome))
            .await
            .unwrap();
    }
    let only = |status| CallFilter {
        status: Some(status),
        ..CallFilter::default()
    };
    let expired = store
        .list_calls(only(CallStatus::Expired), None, 1)
        .await
        .unwrap();
    assert_eq!(expired.calls.len(), 1);
    assert_eq!(expired.calls[0].call_id, "stale");
    assert_eq!(expired.next_cursor, None);
    let suspended = store
        .list_calls(only(CallStatus::Suspended), None, 1)
        .await
        .unwrap();
    assert_eq!(suspended.calls[0].call_id, "fresh");
    assert_eq!(suspended.next_cursor, None);
}
