//! The change feed: one entry per change, in commit order, none missed or repeated however
//! many write at once; pruning expires older cursors.

use std::sync::Arc;

use serde_json::json;
use toolgate::Effect;
use toolgate::store::{
    CallStatus, FeedCursor, FeedEntry, NewCall, Outcome, Resolution, Store, StoreError, Timestamp,
};

use crate::calls::{new_call, suspended};

/// `expected` feed entries from `after`, read in pages of `page`, then proof that none follows.
/// On a shared database an entry becomes readable once every older transaction (of any
/// database of the cluster) has ended, so this polls, with a deadline.
async fn read_feed(
    store: &dyn Store,
    mut after: Option<FeedCursor>,
    page: u32,
    expected: usize,
) -> Vec<FeedEntry> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut all = Vec::new();
    loop {
        let read = store.feed(after.as_ref(), page).await.unwrap();
        after = Some(read.cursor);
        all.extend(read.entries);
        if all.len() >= expected {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {expected} entries: {all:?}",
            all.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let more = store.feed(after.as_ref(), page).await.unwrap();
    assert!(more.entries.is_empty(), "no more: {:?}", more.entries);
    all
}

pub(crate) async fn the_feed_has_one_entry_per_change_in_order(store: Arc<dyn Store>) {
    let start = store.feed_head().await.unwrap();
    let mut changes = store.feed_changes();
    changes.borrow_and_update();
    // Into `running`: no entry. A read recorded behind its answer: no entry.
    store.insert_call(new_call("e1"), None).await.unwrap();
    store
        .insert_behind(
            NewCall {
                effect: Effect::Read,
                ..new_call("quiet")
            },
            &Outcome::Completed { output: json!(0) },
        )
        .await
        .unwrap();
    store
        .finish_call("e1", Some(1), 1, &suspended("te1"))
        .await
        .unwrap();
    assert!(
        changes.has_changed().unwrap(),
        "a commit wakes the feed's readers"
    );
    store
        .insert_call(new_call("e2"), Some(suspended("te2")))
        .await
        .unwrap();
    store
        .resolve(
            "te1",
            Resolution::Approve {
                resume_input: json!({}),
                quorum: 1,
                edit: None,
            },
            Some("ops"),
        )
        .await
        .unwrap();
    store
        .finish_call("e1", Some(2), 2, &Outcome::Completed { output: json!(1) })
        .await
        .unwrap();
    store
        .resolve(
            "te2",
            Resolution::Reject {
                reason: Some("no".into()),
                option: None,
            },
            Some("ops"),
        )
        .await
        .unwrap();
    let entries = read_feed(store.as_ref(), Some(start.clone()), 2, 4).await;
    let seen: Vec<(&str, &str, u32)> = entries
        .iter()
        .map(|e| {
            (
                e.kind.as_str(),
                e.call().unwrap().call_id.as_str(),
                e.call().unwrap().attempts,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("call.suspended", "e1", 1),
            ("call.suspended", "e2", 1),
            ("call.completed", "e1", 2),
            ("call.rejected", "e2", 1),
        ]
    );
    let suspension = entries[0].suspension.as_ref().unwrap();
    assert_eq!(suspension.token, "te1");
    assert_eq!(suspension.reason, "decide te1");
    assert_eq!(entries[0].call().unwrap().status, CallStatus::Suspended);
    assert_eq!(entries[2].call().unwrap().status, CallStatus::Completed);
    assert_eq!(entries[2].call().unwrap().caller.as_deref(), Some("agent"));
    assert!(entries[2].suspension.is_none());
    // Resuming after any entry returns exactly the ones after it.
    for (i, entry) in entries.iter().enumerate() {
        let rest = read_feed(store.as_ref(), Some(entry.cursor.clone()), 3, 3 - i).await;
        assert_eq!(rest, entries[i + 1..], "after entry {i}");
    }
    // The head is past them all.
    let head = store.feed_head().await.unwrap();
    assert!(
        read_feed(store.as_ref(), Some(head), 10, 0)
            .await
            .is_empty()
    );
    // A cursor this backend never wrote is refused.
    let err = store
        .feed(Some(&FeedCursor("not a cursor".into())), 10)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::BadCursor(_)), "{err}");
}

pub(crate) async fn a_pruned_feed_expires_older_cursors(store: Arc<dyn Store>) {
    let start = store.feed_head().await.unwrap();
    store
        .insert_call(new_call("old"), Some(suspended("t-old")))
        .await
        .unwrap();
    let after_old = read_feed(store.as_ref(), Some(start.clone()), 10, 1).await[0]
        .cursor
        .clone();
    // Only final entries are pruned (see `read_feed`).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while store
        .prune_feed(Timestamp(Timestamp::now().0 + 1))
        .await
        .unwrap()
        == 0
    {
        assert!(std::time::Instant::now() < deadline, "nothing pruned");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    store
        .insert_call(new_call("new"), Some(suspended("t-new")))
        .await
        .unwrap();
    // A cursor from before what was pruned has missed entries: told so, not handed a gap.
    let err = store.feed(Some(&start), 10).await.unwrap_err();
    assert!(matches!(err, StoreError::CursorExpired), "{err}");
    // One at the pruned edge has missed nothing.
    let rest = read_feed(store.as_ref(), Some(after_old), 10, 1).await;
    assert_eq!(rest[0].call().unwrap().call_id, "new");
    let all = read_feed(store.as_ref(), None, 10, 1).await;
    assert_eq!(all, rest, "from the start of what is retained");
}

pub(crate) async fn concurrent_writers_lose_and_repeat_no_feed_entry(store: Arc<dyn Store>) {
    let start = store.feed_head().await.unwrap();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..25 {
                    let id = format!("cw{w}-{i}");
                    store
                        .insert_call(new_call(&id), Some(suspended(&format!("t{id}"))))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    // A reader follows the feed while they write.
    let reader = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut after = start;
            while seen.len() < 200 {
                let page = store.feed(Some(&after), 7).await.unwrap();
                after = page.cursor;
                seen.extend(
                    page.entries
                        .into_iter()
                        .map(|e| e.call().unwrap().call_id.clone()),
                );
                tokio::task::yield_now().await;
            }
            seen
        })
    };
    for writer in writers {
        writer.await.unwrap();
    }
    let seen = tokio::time::timeout(std::time::Duration::from_secs(60), reader)
        .await
        .expect("the reader sees every entry")
        .unwrap();
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!(seen.len(), 200);
    assert_eq!(unique.len(), 200, "no entry twice");
}
