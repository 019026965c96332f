//! The store conformance suite: what every `Store` backend must do. Each backend runs every
//! check through `suite!` below; a new backend adds one invocation.

mod common;

use std::sync::Arc;

use serde_json::json;
use toolgate::store::{
    ApprovalState, CallError, CallStatus, NewCall, Outcome, Resolution, Resolved, SqliteStore,
    Store, StoreError, Timestamp,
};

fn new_call(id: &str) -> NewCall {
    NewCall {
        call_id: id.to_owned(),
        tool: "tool".into(),
        input: json!({"id": id}),
        idempotency_key: None,
        created_at: Timestamp::now(),
    }
}

fn suspended(token: &str) -> Outcome {
    Outcome::Suspended {
        token: token.to_owned(),
        reason: format!("decide {token}"),
        input_schema: json!({"type": "object"}),
    }
}

async fn intent_then_outcome(store: Arc<dyn Store>) {
    store.insert_call(new_call("c1"), None).await.unwrap();
    let running = store.call("c1").await.unwrap().unwrap();
    assert_eq!(running.status, CallStatus::Running);
    assert_eq!(running.attempts, 1);
    assert_eq!(running.input, json!({"id": "c1"}));
    assert_eq!(running.output, None);

    store
        .finish_call(
            "c1",
            Outcome::Completed {
                output: json!({"ok": true}),
            },
        )
        .await
        .unwrap();
    let done = store.call("c1").await.unwrap().unwrap();
    assert_eq!(done.status, CallStatus::Completed);
    assert_eq!(done.output, Some(json!({"ok": true})));
    assert!(done.updated_at >= done.created_at);

    // An outcome for a call that is not running is refused and changes nothing.
    let err = store
        .finish_call(
            "c1",
            Outcome::Failed {
                error: CallError::new("x", "y"),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning { .. }), "{err}");
    assert_eq!(
        store.call("c1").await.unwrap().unwrap().status,
        CallStatus::Completed
    );
    assert!(store.call("missing").await.unwrap().is_none());
}

async fn finished_in_one_write(store: Arc<dyn Store>) {
    let error = CallError::new("tool_failed", "boom");
    store
        .insert_call(
            new_call("f1"),
            Some(Outcome::Failed {
                error: error.clone(),
            }),
        )
        .await
        .unwrap();
    let failed = store.call("f1").await.unwrap().unwrap();
    assert_eq!(failed.status, CallStatus::Failed);
    assert_eq!(failed.error, Some(error));

    store
        .insert_call(new_call("s1"), Some(suspended("t1")))
        .await
        .unwrap();
    let call = store.call("s1").await.unwrap().unwrap();
    assert_eq!(call.status, CallStatus::Suspended);
    let view = call.suspension.unwrap();
    assert_eq!(view.token, "t1");
    assert_eq!(view.reason, "decide t1");

    // The same call id twice is refused; the first record stands.
    assert!(store.insert_call(new_call("s1"), None).await.is_err());
    assert_eq!(
        store.call("s1").await.unwrap().unwrap().status,
        CallStatus::Suspended
    );
}

async fn approve_is_single_use(store: Arc<dyn Store>) {
    store
        .insert_call(new_call("a1"), Some(suspended("ta")))
        .await
        .unwrap();
    match store.approval("ta").await.unwrap() {
        Some(ApprovalState::Pending(approval)) => {
            assert_eq!(approval.call_id, "a1");
            assert_eq!(approval.input, Some(json!({"id": "a1"})));
        }
        other => panic!("expected pending, got {other:?}"),
    }
    let approve = || Resolution::Approve {
        resume_input: json!({"yes": 1}),
    };
    match store.resolve("ta", approve()).await.unwrap() {
        Resolved::Approved(call) => {
            assert_eq!(call.status, CallStatus::Running);
            assert_eq!(call.attempts, 2);
            assert_eq!(call.suspension, None);
        }
        other => panic!("expected approved, got {other:?}"),
    }
    assert!(matches!(
        store.resolve("ta", approve()).await.unwrap(),
        Resolved::AlreadyResolved(_)
    ));
    assert!(matches!(
        store.approval("ta").await.unwrap(),
        Some(ApprovalState::Resolved(_))
    ));
    assert_eq!(
        store.resolve("nope", approve()).await.unwrap(),
        Resolved::UnknownToken
    );
    assert_eq!(store.approval("nope").await.unwrap(), None);
    let page = store.pending_approvals(None, 10).await.unwrap();
    assert!(page.approvals.iter().all(|a| a.token != "ta"));
}

async fn reject_records_the_reason(store: Arc<dyn Store>) {
    store
        .insert_call(new_call("r1"), Some(suspended("tr")))
        .await
        .unwrap();
    let reject = Resolution::Reject {
        reason: "no".into(),
    };
    match store.resolve("tr", reject.clone()).await.unwrap() {
        Resolved::Rejected(call) => {
            assert_eq!(call.status, CallStatus::Rejected);
            assert_eq!(call.error, Some(CallError::new("rejected", "no")));
            assert_eq!(call.attempts, 1);
        }
        other => panic!("expected rejected, got {other:?}"),
    }
    match store.resolve("tr", reject).await.unwrap() {
        Resolved::AlreadyResolved(call) => assert_eq!(call.status, CallStatus::Rejected),
        other => panic!("expected already resolved, got {other:?}"),
    }
}

async fn concurrent_resolutions_have_one_winner(store: Arc<dyn Store>) {
    store
        .insert_call(new_call("x1"), Some(suspended("tx")))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let resolution = if i % 2 == 0 {
                    Resolution::Approve {
                        resume_input: json!(i),
                    }
                } else {
                    Resolution::Reject {
                        reason: format!("r{i}"),
                    }
                };
                store.resolve("tx", resolution).await.unwrap()
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        match task.await.unwrap() {
            Resolved::Approved(_) | Resolved::Rejected(_) => winners += 1,
            Resolved::AlreadyResolved(_) => {}
            Resolved::UnknownToken => panic!("the token exists"),
        }
    }
    assert_eq!(winners, 1);
}

async fn pending_pages_oldest_first(store: Arc<dyn Store>) {
    let before = store
        .pending_approvals(None, 500)
        .await
        .unwrap()
        .approvals
        .len();
    for i in 0..7 {
        store
            .insert_call(
                new_call(&format!("p{i}")),
                Some(suspended(&format!("tp{i}"))),
            )
            .await
            .unwrap();
    }
    let mut tokens = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.pending_approvals(cursor, 3).await.unwrap();
        assert!(page.approvals.len() <= 3);
        tokens.extend(page.approvals.into_iter().map(|a| a.token));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let ours: Vec<String> = tokens.into_iter().filter(|t| t.starts_with("tp")).collect();
    let expected: Vec<String> = (0..7).map(|i| format!("tp{i}")).collect();
    assert_eq!(ours, expected);
    let all = store.pending_approvals(None, 500).await.unwrap();
    assert_eq!(all.approvals.len(), before + 7);
    assert_eq!(all.next_cursor, None);
}

async fn many_concurrent_writes_all_land(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let id = format!("w{i}");
                store.insert_call(new_call(&id), None).await.unwrap();
                store
                    .finish_call(&id, Outcome::Completed { output: json!(i) })
                    .await
                    .unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    for i in 0..200 {
        let call = store.call(&format!("w{i}")).await.unwrap().unwrap();
        assert_eq!(call.output, Some(json!(i)));
    }
    store.ping().await.unwrap();
}

macro_rules! suite {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;

            async fn store() -> (Arc<dyn Store>, tempfile::TempDir) {
                let dir = common::temp_dir();
                let store: Arc<dyn Store> = Arc::new($make(dir.path()));
                (store, dir)
            }

            #[tokio::test]
            async fn intent_then_outcome() {
                super::intent_then_outcome(store().await.0).await;
            }
            #[tokio::test]
            async fn finished_in_one_write() {
                super::finished_in_one_write(store().await.0).await;
            }
            #[tokio::test]
            async fn approve_is_single_use() {
                super::approve_is_single_use(store().await.0).await;
            }
            #[tokio::test]
            async fn reject_records_the_reason() {
                super::reject_records_the_reason(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_resolutions_have_one_winner() {
                super::concurrent_resolutions_have_one_winner(store().await.0).await;
            }
            #[tokio::test]
            async fn pending_pages_oldest_first() {
                super::pending_pages_oldest_first(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn many_concurrent_writes_all_land() {
                super::many_concurrent_writes_all_land(store().await.0).await;
            }
        }
    };
}

fn open_sqlite(dir: &std::path::Path) -> SqliteStore {
    SqliteStore::open(dir.join("toolgate.db")).unwrap()
}

suite!(sqlite, open_sqlite);

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
    assert_eq!(
        store.call("k2").await.unwrap().unwrap().output,
        Some(json!(2))
    );
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
