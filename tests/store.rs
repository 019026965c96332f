//! The store conformance suite: what every `Store` backend must do. Each backend runs every
//! check through `suite!` below; a new backend adds one invocation.

mod common;

use std::sync::Arc;

use serde_json::json;
use toolgate::Effect;
use toolgate::store::{
    ApprovalState, CallError, CallFilter, CallStatus, Delivery, DeliveryResult, DeliveryStatus,
    FeedCursor, FeedEntry, InboxSession, Inserted, NewCall, NewDelivery, Outcome, PostgresOptions,
    PostgresStore, Reconciled, Resolution, Resolved, Settlement, SqliteStore, Store, StoreError,
    Timestamp,
};

fn new_call(id: &str) -> NewCall {
    NewCall {
        call_id: id.to_owned(),
        tool: "tool".into(),
        effect: Effect::Write,
        caller: Some("agent".into()),
        input: json!({"id": id}),
        idempotency_key: None,
        attempts: 1,
        created_at: Timestamp::now(),
    }
}

fn keyed(id: &str, key: &str, effect: Effect) -> NewCall {
    NewCall {
        idempotency_key: Some(key.to_owned()),
        effect,
        ..new_call(id)
    }
}

fn suspended(token: &str) -> Outcome {
    Outcome::Suspended {
        token: token.to_owned(),
        reason: format!("decide {token}"),
        input_schema: json!({"type": "object"}),
        expires_at: None,
    }
}

fn kinds(call: &toolgate::store::CallRecord) -> Vec<&str> {
    call.events.iter().map(|e| e.kind.as_str()).collect()
}

async fn intent_then_outcome(store: Arc<dyn Store>) {
    store.insert_call(new_call("c1"), None).await.unwrap();
    let running = store.call("c1").await.unwrap().unwrap();
    assert_eq!(running.status, CallStatus::Running);
    assert_eq!(running.attempts, 1);
    assert_eq!(running.input, json!({"id": "c1"}));
    assert_eq!(running.output, None);

    // A run that began at another attempt does not own the call: refused, and kept as evidence.
    let err = store
        .finish_call("c1", Some(7), 1, &Outcome::Completed { output: json!(0) })
        .await
        .unwrap_err();
    match err {
        StoreError::LeaseLost(call) => {
            assert_eq!(call.status, CallStatus::Running);
            assert_eq!(kinds(&call), ["created", "late_outcome"]);
            assert_eq!(call.events[1].details.as_ref().unwrap()["output"], json!(0));
        }
        other => panic!("expected LeaseLost, got {other}"),
    }
    store
        .finish_call(
            "c1",
            Some(1),
            2,
            &Outcome::Completed {
                output: json!({"ok": true}),
            },
        )
        .await
        .unwrap();
    let done = store.call("c1").await.unwrap().unwrap();
    assert_eq!(done.status, CallStatus::Completed);
    assert_eq!(done.output, Some(json!({"ok": true})));
    assert_eq!(done.attempts, 2);
    assert_eq!(done.caller.as_deref(), Some("agent"));
    assert_eq!(done.effect, Effect::Write);
    assert!(done.updated_at >= done.created_at);
    assert_eq!(kinds(&done), ["created", "late_outcome", "completed"]);
    assert_eq!(done.events[0].actor.as_deref(), Some("agent"));

    // An outcome for a call that is not running is refused, recorded as late, and changes
    // nothing else.
    let err = store
        .finish_call(
            "c1",
            None,
            1,
            &Outcome::Failed {
                error: CallError::new("x", "y"),
            },
        )
        .await
        .unwrap_err();
    let StoreError::LeaseLost(call) = err else {
        panic!("expected LeaseLost, got {err}");
    };
    assert_eq!(call.status, CallStatus::Completed);
    assert_eq!(call.output, Some(json!({"ok": true})));
    assert_eq!(call.events.last().unwrap().kind, "late_outcome");
    assert_eq!(
        call.events.last().unwrap().details.as_ref().unwrap()["error"]["code"],
        "x"
    );
    assert_eq!(
        store.call("c1").await.unwrap().unwrap().status,
        CallStatus::Completed
    );
    // No such call: nothing to record it on.
    let err = store
        .finish_call("missing", None, 1, &Outcome::Completed { output: json!(1) })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotRunning { .. }), "{err}");
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

    // A call recorded already completed, at once or behind its answer, has the history of one
    // recorded as it ran: created by its caller, then completed with its attempts.
    let before = Timestamp::now();
    store
        .insert_call(
            NewCall {
                attempts: 3,
                ..new_call("d1")
            },
            Some(Outcome::Completed { output: json!(1) }),
        )
        .await
        .unwrap();
    store
        .insert_behind(
            NewCall {
                effect: Effect::Read,
                caller: None,
                ..new_call("d2")
            },
            &Outcome::Completed { output: json!(2) },
        )
        .await
        .unwrap();
    for (id, actor, attempts) in [("d1", Some("agent"), 3), ("d2", None, 1)] {
        let call = store.call(id).await.unwrap().unwrap();
        assert_eq!(call.status, CallStatus::Completed, "{id}");
        assert_eq!(kinds(&call), ["created", "completed"], "{id}");
        assert_eq!(call.events[0].actor.as_deref(), actor, "{id}");
        assert_eq!(call.events[0].at, call.created_at, "{id}");
        assert_eq!(call.events[1].actor, None, "{id}");
        assert_eq!(call.events[1].at, call.updated_at, "{id}");
        assert!(call.updated_at >= before, "{id}");
        assert_eq!(
            call.events[1].details,
            Some(json!({ "attempts": attempts })),
            "{id}"
        );
    }

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
    match store.resolve("ta", approve(), Some("ops")).await.unwrap() {
        Resolved::Approved(call) => {
            assert_eq!(call.status, CallStatus::Running);
            assert_eq!(call.attempts, 2);
            assert_eq!(call.suspension, None);
            assert_eq!(
                kinds(&call),
                ["created", "suspended", "approved", "redispatched"]
            );
            assert_eq!(call.events[2].actor.as_deref(), Some("ops"));
        }
        other => panic!("expected approved, got {other:?}"),
    }
    assert!(matches!(
        store.resolve("ta", approve(), Some("ops")).await.unwrap(),
        Resolved::AlreadyResolved(_)
    ));
    assert!(matches!(
        store.approval("ta").await.unwrap(),
        Some(ApprovalState::Resolved(_))
    ));
    assert_eq!(
        store.resolve("nope", approve(), None).await.unwrap(),
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
    match store
        .resolve("tr", reject.clone(), Some("ops"))
        .await
        .unwrap()
    {
        Resolved::Rejected(call) => {
            assert_eq!(call.status, CallStatus::Rejected);
            assert_eq!(call.error, Some(CallError::new("rejected", "no")));
            assert_eq!(call.attempts, 1);
            let last = call.events.last().unwrap();
            assert_eq!(
                (last.kind.as_str(), last.actor.as_deref()),
                ("rejected", Some("ops"))
            );
        }
        other => panic!("expected rejected, got {other:?}"),
    }
    match store.resolve("tr", reject, None).await.unwrap() {
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
                store.resolve("tx", resolution, None).await.unwrap()
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        match task.await.unwrap() {
            Resolved::Approved(_) | Resolved::Rejected(_) => winners += 1,
            Resolved::AlreadyResolved(_) => {}
            other => panic!("unexpected {other:?}"),
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

    // A suspension recorded as the outcome of a running call names its tool as well as one
    // recorded with its call.
    store
        .insert_call(
            NewCall {
                tool: "other_tool".into(),
                ..new_call("p7")
            },
            None,
        )
        .await
        .unwrap();
    store
        .finish_call("p7", Some(1), 1, &suspended("tp7"))
        .await
        .unwrap();
    let all = store.pending_approvals(None, 500).await.unwrap();
    let tool_of = |token: &str| {
        all.approvals
            .iter()
            .find(|a| a.token == token)
            .map(|a| (a.tool.clone(), a.call_id.clone()))
    };
    assert_eq!(tool_of("tp0"), Some(("tool".into(), "p0".into())));
    assert_eq!(tool_of("tp7"), Some(("other_tool".into(), "p7".into())));
}

async fn counts_show_what_is_pending_now(store: Arc<dyn Store>) {
    // On a shared database, this store's own lease is live; a store of one process has none.
    let live = store.replica().map(|_| 1);
    let counts = store.counts().await.unwrap();
    assert_eq!(counts.pending_approvals, 0);
    assert_eq!(counts.live_replicas, live);

    let expired = Outcome::Suspended {
        token: "tc-expired".into(),
        reason: "too late".into(),
        input_schema: json!({"type": "object"}),
        expires_at: Some(Timestamp(1)),
    };
    store
        .insert_call(new_call("cc0"), Some(suspended("tc0")))
        .await
        .unwrap();
    store
        .insert_call(new_call("cc1"), Some(suspended("tc1")))
        .await
        .unwrap();
    store
        .insert_call(new_call("cc2"), Some(expired))
        .await
        .unwrap();
    store.insert_call(new_call("cc3"), None).await.unwrap();
    store
        .finish_call("cc3", Some(1), 1, &suspended("tc3"))
        .await
        .unwrap();
    // Pending and unexpired only, as the approvals queue lists them.
    assert_eq!(store.counts().await.unwrap().pending_approvals, 3);
    let reject = Resolution::Reject {
        reason: "no".into(),
    };
    store.resolve("tc1", reject, None).await.unwrap();
    let approve = Resolution::Approve {
        resume_input: json!({}),
    };
    store.resolve("tc3", approve, None).await.unwrap();
    let counts = store.counts().await.unwrap();
    assert_eq!(counts.pending_approvals, 1);
    assert_eq!(counts.live_replicas, live);
}

async fn many_read_records_written_behind_keep_their_own_fields(store: Arc<dyn Store>) {
    // More than a statement's worth of rows in one commit window, each with its own values, so a
    // row bound in another's place would show.
    let n = 150;
    for i in 0..n {
        store
            .insert_behind(
                NewCall {
                    effect: Effect::Read,
                    caller: (i % 2 == 0).then(|| format!("agent{i}")),
                    input: json!({ "i": i }),
                    attempts: 1 + i % 3,
                    created_at: Timestamp(1_700_000_000_000 + i64::from(i)),
                    ..new_call(&format!("behind{i}"))
                },
                &Outcome::Completed {
                    output: json!({ "o": i }),
                },
            )
            .await
            .unwrap();
    }
    for i in 0..n {
        let id = format!("behind{i}");
        let call = store.call(&id).await.unwrap().expect(&id);
        assert_eq!(call.status, CallStatus::Completed, "{id}");
        assert_eq!(call.effect, Effect::Read, "{id}");
        assert_eq!(call.input, json!({ "i": i }), "{id}");
        assert_eq!(call.output, Some(json!({ "o": i })), "{id}");
        assert_eq!(call.attempts, 1 + i % 3, "{id}");
        assert_eq!(
            call.caller,
            (i % 2 == 0).then(|| format!("agent{i}")),
            "{id}"
        );
        assert_eq!(
            call.created_at,
            Timestamp(1_700_000_000_000 + i64::from(i)),
            "{id}"
        );
        assert_eq!(kinds(&call), ["created", "completed"], "{id}");
        assert_eq!(
            call.events[1].details,
            Some(json!({ "attempts": 1 + i % 3 })),
            "{id}"
        );
    }
}

async fn many_concurrent_writes_all_land(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let id = format!("w{i}");
                store.insert_call(new_call(&id), None).await.unwrap();
                store
                    .finish_call(&id, Some(1), 1, &Outcome::Completed { output: json!(i) })
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

async fn one_call_per_idempotency_key(store: Arc<dyn Store>) {
    assert_eq!(
        store
            .insert_call(keyed("k1", "refund:o-1", Effect::Write), None)
            .await
            .unwrap(),
        Inserted::New
    );
    // The same key on the same tool: nothing written, the first call returned.
    match store
        .insert_call(keyed("k2", "refund:o-1", Effect::Write), None)
        .await
        .unwrap()
    {
        Inserted::Existing(call) => {
            assert_eq!(call.call_id, "k1");
            assert_eq!(call.status, CallStatus::Running);
        }
        other => panic!("expected the existing call, got {other:?}"),
    }
    assert!(store.call("k2").await.unwrap().is_none());
    // The same key on another tool is another effect.
    let other_tool = NewCall {
        tool: "other".into(),
        ..keyed("k3", "refund:o-1", Effect::Write)
    };
    assert_eq!(
        store.insert_call(other_tool, None).await.unwrap(),
        Inserted::New
    );

    // Of many concurrent inserts with one key, exactly one is new.
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .insert_call(keyed(&format!("race{i}"), "race", Effect::Idempotent), None)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut new = 0;
    for task in tasks {
        if task.await.unwrap() == Inserted::New {
            new += 1;
        }
    }
    assert_eq!(new, 1);
}

async fn interrupted_calls_are_claimed_once(store: Arc<dyn Store>) {
    // Only an interrupted call can be claimed; a running one cannot.
    store.insert_call(new_call("i1"), None).await.unwrap();
    assert!(store.rerun_interrupted("i1").await.unwrap().is_none());
    assert!(store.rerun_interrupted("missing").await.unwrap().is_none());
}

async fn reconciliation_settles_once(store: Arc<dyn Store>) {
    store
        .insert_call(
            new_call("n1"),
            Some(Outcome::NeedsReconciliation {
                error: CallError::new("tool_timeout", "slow"),
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        store.call("n1").await.unwrap().unwrap().status,
        CallStatus::NeedsReconciliation
    );
    match store
        .reconcile("n1", Settlement::Output(json!({"id": 1})), Some("ops"))
        .await
        .unwrap()
    {
        Reconciled::Settled(call) => {
            assert_eq!(call.status, CallStatus::Completed);
            assert_eq!(call.output, Some(json!({"id": 1})));
            let last = call.events.last().unwrap();
            assert_eq!(
                (last.kind.as_str(), last.actor.as_deref()),
                ("reconciled", Some("ops"))
            );
        }
        other => panic!("expected settled, got {other:?}"),
    }
    assert!(matches!(
        store
            .reconcile("n1", Settlement::Error("no".into()), None)
            .await
            .unwrap(),
        Reconciled::NotNeeded(_)
    ));
    assert_eq!(
        store
            .reconcile("zz", Settlement::Error("no".into()), None)
            .await
            .unwrap(),
        Reconciled::UnknownCall
    );
}

async fn external_completion_and_expiry(store: Arc<dyn Store>) {
    store
        .insert_call(new_call("e1"), Some(suspended("te1")))
        .await
        .unwrap();
    match store
        .resolve(
            "te1",
            Resolution::Complete {
                output: json!({"r": 1}),
            },
            Some("ops"),
        )
        .await
        .unwrap()
    {
        Resolved::Completed(call) => {
            assert_eq!(call.status, CallStatus::Completed);
            assert_eq!(call.output, Some(json!({"r": 1})));
            assert_eq!(call.attempts, 1, "the tool did not run");
        }
        other => panic!("expected completed, got {other:?}"),
    }

    let past = Outcome::Suspended {
        token: "te2".into(),
        reason: "late".into(),
        input_schema: json!({}),
        expires_at: Some(Timestamp(Timestamp::now().0 - 1)),
    };
    store.insert_call(new_call("e2"), Some(past)).await.unwrap();
    // Expired by the clock: not listed, shown as expired, and refused.
    let page = store.pending_approvals(None, 500).await.unwrap();
    assert!(page.approvals.iter().all(|a| a.token != "te2"));
    assert_eq!(
        store.call("e2").await.unwrap().unwrap().status,
        CallStatus::Expired
    );
    assert!(matches!(
        store.approval("te2").await.unwrap(),
        Some(ApprovalState::Expired(_))
    ));
    match store
        .resolve(
            "te2",
            Resolution::Approve {
                resume_input: json!({}),
            },
            None,
        )
        .await
        .unwrap()
    {
        Resolved::Expired(call) => {
            assert_eq!(call.status, CallStatus::Expired);
            assert_eq!(call.error.unwrap().code, "suspension_expired");
        }
        other => panic!("expected expired, got {other:?}"),
    }
}

async fn calls_list_newest_first_with_filters(store: Arc<dyn Store>) {
    for i in 0..5 {
        let call = NewCall {
            tool: if i % 2 == 0 { "even" } else { "odd" }.into(),
            ..new_call(&format!("l{i}"))
        };
        store
            .insert_call(call, Some(Outcome::Completed { output: json!(i) }))
            .await
            .unwrap();
    }
    let even = CallFilter {
        tool: Some("even".into()),
        ..CallFilter::default()
    };
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list_calls(even.clone(), cursor, 2).await.unwrap();
        ids.extend(page.calls.iter().map(|c| c.call_id.clone()));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(ids, ["l4", "l2", "l0"]);
    let running = CallFilter {
        status: Some(CallStatus::Running),
        ..CallFilter::default()
    };
    assert!(
        store
            .list_calls(running, None, 50)
            .await
            .unwrap()
            .calls
            .is_empty()
    );
}

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

async fn the_feed_has_one_entry_per_change_in_order(store: Arc<dyn Store>) {
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
                reason: "no".into(),
            },
            Some("ops"),
        )
        .await
        .unwrap();
    let entries = read_feed(store.as_ref(), Some(start.clone()), 2, 4).await;
    let seen: Vec<(&str, &str, u32)> = entries
        .iter()
        .map(|e| (e.kind.as_str(), e.call.call_id.as_str(), e.call.attempts))
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
    assert_eq!(entries[0].call.status, CallStatus::Suspended);
    assert_eq!(entries[2].call.status, CallStatus::Completed);
    assert_eq!(entries[2].call.caller.as_deref(), Some("agent"));
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

async fn a_pruned_feed_expires_older_cursors(store: Arc<dyn Store>) {
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
    assert_eq!(rest[0].call.call_id, "new");
    let all = read_feed(store.as_ref(), None, 10, 1).await;
    assert_eq!(all, rest, "from the start of what is retained");
}

async fn concurrent_writers_lose_and_repeat_no_feed_entry(store: Arc<dyn Store>) {
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
                seen.extend(page.entries.into_iter().map(|e| e.call.call_id));
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

/// A delivery of the `n`th message to `webhook`.
fn delivery(webhook: &str, n: usize) -> NewDelivery {
    NewDelivery {
        webhook: webhook.to_owned(),
        message_id: format!("msg_{n}"),
        kind: "call.suspended".into(),
        call_id: format!("c{n}"),
        body: format!("{{\"n\":{n}}}"),
    }
}

/// Try again at `at`, after an answer with `status` if there was one.
fn retry_at(at: Timestamp, status: Option<u16>, error: &str) -> DeliveryResult {
    DeliveryResult::Retry {
        at,
        status,
        error: error.to_owned(),
    }
}

/// Give up, after an answer with `status` if there was one.
fn give_up(status: Option<u16>, error: &str) -> DeliveryResult {
    DeliveryResult::Failed {
        status,
        error: error.to_owned(),
    }
}

fn at(cursor: &str) -> FeedCursor {
    FeedCursor(cursor.to_owned())
}

/// A claim lease no test outlives: what is claimed with it stays claimed.
const HELD: std::time::Duration = std::time::Duration::from_secs(600);

/// Every delivery, newest first (without bodies).
async fn all_deliveries(store: &dyn Store) -> Vec<Delivery> {
    store
        .list_deliveries(None, None, 1000)
        .await
        .unwrap()
        .deliveries
}

/// The delivery `id` as listed.
async fn listed(store: &dyn Store, id: i64) -> Delivery {
    all_deliveries(store)
        .await
        .into_iter()
        .find(|d| d.id == id)
        .unwrap_or_else(|| panic!("no delivery {id}"))
}

/// Claims (for [`HELD`]) until a claim returns something, within a deadline.
async fn claim_when_due(store: &dyn Store) -> Vec<Delivery> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let claimed = store.claim_deliveries(10, HELD).await.unwrap();
        if !claimed.is_empty() {
            return claimed;
        }
        assert!(std::time::Instant::now() < deadline, "nothing became due");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn the_outbox_cursor_moves_by_compare_and_set(store: Arc<dyn Store>) {
    assert_eq!(store.webhook_cursor().await.unwrap(), None);
    // Before the first move there is no cursor to move from.
    let moved = store
        .enqueue_deliveries(Some(&at("1")), &at("2"), vec![delivery("https://a", 0)])
        .await
        .unwrap();
    assert!(!moved);
    assert_eq!(store.webhook_cursor().await.unwrap(), None);
    assert!(all_deliveries(store.as_ref()).await.is_empty());

    let moved = store
        .enqueue_deliveries(
            None,
            &at("1"),
            vec![delivery("https://a", 1), delivery("https://b", 1)],
        )
        .await
        .unwrap();
    assert!(moved);
    assert_eq!(store.webhook_cursor().await.unwrap(), Some(at("1")));
    let created = all_deliveries(store.as_ref()).await;
    let seen: Vec<(&str, &str)> = created
        .iter()
        .map(|d| (d.webhook.as_str(), d.message_id.as_str()))
        .collect();
    assert_eq!(seen, [("https://b", "msg_1"), ("https://a", "msg_1")]);
    for d in &created {
        assert_eq!(d.status, DeliveryStatus::Pending);
        assert_eq!(d.attempts, 0);
        assert_eq!(d.kind, "call.suspended");
        assert_eq!(d.call_id, "c1");
        assert_eq!((d.last_status, d.last_error.as_deref()), (None, None));
        assert!(d.next_attempt_at.is_some(), "due now");
        assert!(d.body.is_empty(), "lists leave the body out");
    }

    // From a stale cursor (none, or one it has moved past): refused, and nothing is written.
    for stale in [None, Some(at("0"))] {
        let moved = store
            .enqueue_deliveries(stale.as_ref(), &at("9"), vec![delivery("https://a", 9)])
            .await
            .unwrap();
        assert!(!moved, "from {stale:?}");
    }
    assert_eq!(store.webhook_cursor().await.unwrap(), Some(at("1")));
    assert_eq!(all_deliveries(store.as_ref()).await, created);

    // Past entries nobody wants: the cursor moves with no delivery.
    assert!(
        store
            .enqueue_deliveries(Some(&at("1")), &at("2"), Vec::new())
            .await
            .unwrap()
    );
    assert!(
        !store
            .enqueue_deliveries(Some(&at("1")), &at("3"), vec![delivery("https://a", 3)])
            .await
            .unwrap()
    );
    assert_eq!(store.webhook_cursor().await.unwrap(), Some(at("2")));
    assert_eq!(all_deliveries(store.as_ref()).await, created);
}

async fn a_delivery_is_retried_once_due_then_delivered(store: Arc<dyn Store>) {
    let bodies = [delivery("https://a", 1), delivery("https://a", 2)];
    store
        .enqueue_deliveries(None, &at("1"), bodies.to_vec())
        .await
        .unwrap();
    let claimed = store.claim_deliveries(10, HELD).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let (first, second) = (&claimed[0], &claimed[1]);
    assert!(first.id < second.id, "oldest first");
    assert_eq!(first.message_id, "msg_1");
    assert_eq!(first.body, bodies[0].body, "a claim carries the body");
    assert_eq!(second.body, bodies[1].body);
    assert_eq!(first.attempts, 1, "the claim counts the attempt");
    assert_eq!(first.status, DeliveryStatus::Pending);
    // Claimed: not claimed again while the lease runs.
    assert!(store.claim_deliveries(10, HELD).await.unwrap().is_empty());

    // The first is due again in an hour: not claimable before then.
    let later = Timestamp(Timestamp::now().0 + 3_600_000);
    store
        .settle_delivery(
            first.id,
            retry_at(later, Some(503), "503 Service Unavailable"),
        )
        .await
        .unwrap();
    let waiting = listed(store.as_ref(), first.id).await;
    assert_eq!(waiting.status, DeliveryStatus::Pending);
    assert_eq!(waiting.next_attempt_at, Some(later));
    assert_eq!(waiting.last_status, Some(503));
    assert_eq!(
        waiting.last_error.as_deref(),
        Some("503 Service Unavailable")
    );
    assert!(store.claim_deliveries(10, HELD).await.unwrap().is_empty());

    // The second is due again in a moment, without an answer: claimable once it is due.
    let soon = Timestamp(Timestamp::now().0 + 200);
    store
        .settle_delivery(second.id, retry_at(soon, None, "connection refused"))
        .await
        .unwrap();
    let again = claim_when_due(store.as_ref()).await;
    assert_eq!(again.len(), 1, "the first is not due yet: {again:?}");
    assert_eq!(again[0].id, second.id);
    assert_eq!(again[0].attempts, 2);
    assert_eq!(again[0].last_status, None);
    assert_eq!(again[0].last_error.as_deref(), Some("connection refused"));
    assert_eq!(
        again[0].body, bodies[1].body,
        "the same body on every attempt"
    );

    store
        .settle_delivery(second.id, DeliveryResult::Delivered { status: 204 })
        .await
        .unwrap();
    let delivered = listed(store.as_ref(), second.id).await;
    assert_eq!(delivered.status, DeliveryStatus::Delivered);
    assert_eq!(delivered.attempts, 2);
    assert_eq!(delivered.last_status, Some(204));
    assert_eq!(delivered.last_error, None);
    assert_eq!(delivered.next_attempt_at, None);
    assert!(delivered.updated_at >= delivered.created_at);
    assert!(store.claim_deliveries(10, HELD).await.unwrap().is_empty());
}

async fn a_claim_whose_claimant_died_runs_out(store: Arc<dyn Store>) {
    store
        .enqueue_deliveries(None, &at("1"), vec![delivery("https://a", 1)])
        .await
        .unwrap();
    // Claimed for a moment, and never settled: its claimant is gone.
    let claimed = store
        .claim_deliveries(10, std::time::Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let again = claim_when_due(store.as_ref()).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, claimed[0].id);
    assert_eq!(again[0].attempts, 2);
    // Held for long this time.
    assert!(store.claim_deliveries(10, HELD).await.unwrap().is_empty());
}

async fn a_failed_delivery_is_sent_again_on_request(store: Arc<dyn Store>) {
    store
        .enqueue_deliveries(None, &at("1"), vec![delivery("https://a", 1)])
        .await
        .unwrap();
    let id = store.claim_deliveries(10, HELD).await.unwrap()[0].id;
    store
        .settle_delivery(id, give_up(Some(400), "400 Bad Request"))
        .await
        .unwrap();
    let failed = listed(store.as_ref(), id).await;
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert_eq!(failed.next_attempt_at, None);
    assert_eq!(failed.last_status, Some(400));
    assert!(store.claim_deliveries(10, HELD).await.unwrap().is_empty());

    let retried = store.retry_delivery(id).await.unwrap().unwrap();
    assert_eq!(retried.id, id);
    assert_eq!(retried.status, DeliveryStatus::Pending);
    assert_eq!(retried.attempts, 1, "attempts are kept");
    assert!(retried.next_attempt_at.is_some(), "due now");
    let claimed = store.claim_deliveries(10, HELD).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, id);
    assert_eq!(claimed[0].attempts, 2);

    // Not failed: nothing to do, and the delivery as it is.
    let pending = store.retry_delivery(id).await.unwrap().unwrap();
    assert_eq!(
        (pending.status, pending.attempts),
        (DeliveryStatus::Pending, 2)
    );
    assert!(
        store.claim_deliveries(10, HELD).await.unwrap().is_empty(),
        "still claimed"
    );
    store
        .settle_delivery(id, DeliveryResult::Delivered { status: 200 })
        .await
        .unwrap();
    let delivered = store.retry_delivery(id).await.unwrap().unwrap();
    assert_eq!(delivered.status, DeliveryStatus::Delivered);
    // A late settlement of a delivery that is no longer pending changes nothing.
    store
        .settle_delivery(id, retry_at(Timestamp::now(), Some(500), "late"))
        .await
        .unwrap();
    assert_eq!(listed(store.as_ref(), id).await, {
        let mut listed = delivered;
        listed.body = String::new();
        listed
    });
    assert_eq!(store.retry_delivery(id + 1000).await.unwrap(), None);
}

async fn deliveries_list_newest_first_by_status_in_pages(store: Arc<dyn Store>) {
    store
        .enqueue_deliveries(
            None,
            &at("1"),
            (1..=5).map(|n| delivery("https://a", n)).collect(),
        )
        .await
        .unwrap();
    let claimed = store.claim_deliveries(2, HELD).await.unwrap();
    let ids: Vec<&str> = claimed.iter().map(|d| d.message_id.as_str()).collect();
    assert_eq!(ids, ["msg_1", "msg_2"], "the oldest, up to the limit");
    store
        .settle_delivery(claimed[0].id, DeliveryResult::Delivered { status: 200 })
        .await
        .unwrap();
    store
        .settle_delivery(claimed[1].id, give_up(None, "timed out"))
        .await
        .unwrap();

    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_deliveries(None, after, 2).await.unwrap();
        assert!(page.deliveries.iter().all(|d| d.body.is_empty()));
        pages.push(
            page.deliveries
                .iter()
                .map(|d| d.message_id.clone())
                .collect::<Vec<_>>(),
        );
        match page.next_cursor {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    assert_eq!(
        pages,
        [
            vec!["msg_5", "msg_4"],
            vec!["msg_3", "msg_2"],
            vec!["msg_1"]
        ]
    );
    // A page that ends exactly at the last delivery says no other follows.
    let whole = store.list_deliveries(None, None, 5).await.unwrap();
    assert_eq!((whole.deliveries.len(), whole.next_cursor), (5, None));

    let in_status = |status| {
        let store = store.clone();
        async move {
            store
                .list_deliveries(Some(status), None, 10)
                .await
                .unwrap()
                .deliveries
                .into_iter()
                .map(|d| (d.message_id, d.status))
                .collect::<Vec<_>>()
        }
    };
    let pending = DeliveryStatus::Pending;
    assert_eq!(
        in_status(pending).await,
        [
            ("msg_5".to_owned(), pending),
            ("msg_4".to_owned(), pending),
            ("msg_3".to_owned(), pending)
        ]
    );
    assert_eq!(
        in_status(DeliveryStatus::Delivered).await,
        [("msg_1".to_owned(), DeliveryStatus::Delivered)]
    );
    assert_eq!(
        in_status(DeliveryStatus::Failed).await,
        [("msg_2".to_owned(), DeliveryStatus::Failed)]
    );
    let page = store.list_deliveries(Some(pending), None, 2).await.unwrap();
    let rest = store
        .list_deliveries(Some(pending), page.next_cursor, 2)
        .await
        .unwrap();
    assert_eq!(rest.deliveries.len(), 1);
    assert_eq!(rest.deliveries[0].message_id, "msg_3");
    assert_eq!(rest.next_cursor, None);
}

async fn a_webhook_whose_receiver_answers_410_is_disabled(store: Arc<dyn Store>) {
    store
        .enqueue_deliveries(
            None,
            &at("1"),
            vec![
                delivery("https://gone", 1),
                delivery("https://busy", 1),
                delivery("https://gone", 2),
            ],
        )
        .await
        .unwrap();
    assert!(store.disabled_webhooks().await.unwrap().is_empty());
    let claimed = store.claim_deliveries(10, HELD).await.unwrap();
    assert_eq!(claimed.len(), 3);
    store
        .settle_delivery(claimed[0].id, give_up(Some(410), "410 Gone"))
        .await
        .unwrap();
    store
        .settle_delivery(
            claimed[1].id,
            retry_at(
                Timestamp(Timestamp::now().0 + 3_600_000),
                Some(500),
                "500 Internal Server Error",
            ),
        )
        .await
        .unwrap();
    store
        .settle_delivery(claimed[2].id, give_up(Some(410), "410 Gone"))
        .await
        .unwrap();
    assert_eq!(store.disabled_webhooks().await.unwrap(), ["https://gone"]);
}

async fn concurrent_claims_never_share_a_delivery(store: Arc<dyn Store>) {
    store
        .enqueue_deliveries(
            None,
            &at("1"),
            (0..50).map(|n| delivery("https://a", n)).collect(),
        )
        .await
        .unwrap();
    let claimants: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let claimed = store.claim_deliveries(3, HELD).await.unwrap();
                    if claimed.is_empty() {
                        return mine;
                    }
                    mine.extend(claimed.into_iter().map(|d| d.id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for claimant in claimants {
        all.extend(claimant.await.unwrap());
    }
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "no delivery claimed twice");
    assert_eq!(all.len(), 50, "every delivery claimed");
    for d in all_deliveries(store.as_ref()).await {
        assert_eq!(d.attempts, 1, "delivery {}", d.id);
    }
}

async fn pending_approvals_filter_by_tool_and_name_the_caller(store: Arc<dyn Store>) {
    for (id, tool) in [("f1", "refunds"), ("f2", "emails"), ("f3", "refunds")] {
        let call = NewCall {
            tool: tool.into(),
            caller: (id != "f2").then(|| "agent".to_owned()),
            ..new_call(id)
        };
        store
            .insert_call(call, Some(suspended(&format!("t{id}"))))
            .await
            .unwrap();
    }
    let refunds = store
        .pending_approvals_of(Some("refunds"), None, 1)
        .await
        .unwrap();
    assert_eq!(refunds.approvals.len(), 1);
    assert_eq!(refunds.approvals[0].token, "tf1");
    assert_eq!(refunds.approvals[0].caller.as_deref(), Some("agent"));
    let rest = store
        .pending_approvals_of(Some("refunds"), refunds.next_cursor, 10)
        .await
        .unwrap();
    let tokens: Vec<&str> = rest.approvals.iter().map(|a| a.token.as_str()).collect();
    assert_eq!(tokens, ["tf3"], "the next page of the same tool only");
    assert_eq!(rest.next_cursor, None);
    let all = store.pending_approvals_of(None, None, 10).await.unwrap();
    assert_eq!(all.approvals.len(), 3);
    assert_eq!(all.approvals[1].caller, None, "a call made with auth off");
    let none = store
        .pending_approvals_of(Some("nothing"), None, 10)
        .await
        .unwrap();
    assert!(none.approvals.is_empty());
}

fn session(id: &str, expires_at: Timestamp) -> InboxSession {
    InboxSession {
        id_sha256: id.to_owned(),
        key_name: Some("finance-ops".into()),
        role: "approver".into(),
        key_fingerprint: Some("ab".repeat(32)),
        created_at: Timestamp::now(),
        expires_at,
    }
}

async fn inbox_sessions_expire_and_end(store: Arc<dyn Store>) {
    let now = Timestamp::now();
    let live = session(&"1".repeat(64), Timestamp(now.0 + 60_000));
    let stale = session(&"2".repeat(64), Timestamp(now.0 - 1));
    let anonymous = InboxSession {
        key_name: None,
        key_fingerprint: None,
        role: "admin".into(),
        ..session(&"3".repeat(64), Timestamp(now.0 + 60_000))
    };
    for s in [&live, &stale, &anonymous] {
        store.create_session(s).await.unwrap();
    }
    assert_eq!(
        store.session(&live.id_sha256, now).await.unwrap(),
        Some(live.clone())
    );
    assert_eq!(
        store.session(&anonymous.id_sha256, now).await.unwrap(),
        Some(anonymous.clone())
    );
    // Expired, pruned or not, a session is never answered.
    assert_eq!(store.session(&stale.id_sha256, now).await.unwrap(), None);
    assert_eq!(
        store
            .session(&live.id_sha256, Timestamp(now.0 + 60_000))
            .await
            .unwrap(),
        None,
        "expired at its expiry"
    );
    assert_eq!(store.session(&"9".repeat(64), now).await.unwrap(), None);
    assert_eq!(
        store.prune_sessions(now).await.unwrap(),
        1,
        "only the stale one"
    );
    assert_eq!(store.prune_sessions(now).await.unwrap(), 0);
    assert!(store.session(&live.id_sha256, now).await.unwrap().is_some());
    // Signing out ends it, once.
    assert!(store.delete_session(&live.id_sha256).await.unwrap());
    assert!(!store.delete_session(&live.id_sha256).await.unwrap());
    assert_eq!(store.session(&live.id_sha256, now).await.unwrap(), None);
    assert!(
        store
            .session(&anonymous.id_sha256, now)
            .await
            .unwrap()
            .is_some()
    );
}

macro_rules! suite {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;

            async fn store() -> (Arc<dyn Store>, Box<dyn std::any::Any>) {
                $make().await
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
            async fn counts_show_what_is_pending_now() {
                super::counts_show_what_is_pending_now(store().await.0).await;
            }
            #[tokio::test]
            async fn many_read_records_written_behind_keep_their_own_fields() {
                super::many_read_records_written_behind_keep_their_own_fields(store().await.0)
                    .await;
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
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn one_call_per_idempotency_key() {
                super::one_call_per_idempotency_key(store().await.0).await;
            }
            #[tokio::test]
            async fn interrupted_calls_are_claimed_once() {
                super::interrupted_calls_are_claimed_once(store().await.0).await;
            }
            #[tokio::test]
            async fn reconciliation_settles_once() {
                super::reconciliation_settles_once(store().await.0).await;
            }
            #[tokio::test]
            async fn external_completion_and_expiry() {
                super::external_completion_and_expiry(store().await.0).await;
            }
            #[tokio::test]
            async fn calls_list_newest_first_with_filters() {
                super::calls_list_newest_first_with_filters(store().await.0).await;
            }
            #[tokio::test]
            async fn the_feed_has_one_entry_per_change_in_order() {
                super::the_feed_has_one_entry_per_change_in_order(store().await.0).await;
            }
            #[tokio::test]
            async fn a_pruned_feed_expires_older_cursors() {
                super::a_pruned_feed_expires_older_cursors(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_writers_lose_and_repeat_no_feed_entry() {
                super::concurrent_writers_lose_and_repeat_no_feed_entry(store().await.0).await;
            }
            #[tokio::test]
            async fn the_outbox_cursor_moves_by_compare_and_set() {
                super::the_outbox_cursor_moves_by_compare_and_set(store().await.0).await;
            }
            #[tokio::test]
            async fn a_delivery_is_retried_once_due_then_delivered() {
                super::a_delivery_is_retried_once_due_then_delivered(store().await.0).await;
            }
            #[tokio::test]
            async fn a_claim_whose_claimant_died_runs_out() {
                super::a_claim_whose_claimant_died_runs_out(store().await.0).await;
            }
            #[tokio::test]
            async fn a_failed_delivery_is_sent_again_on_request() {
                super::a_failed_delivery_is_sent_again_on_request(store().await.0).await;
            }
            #[tokio::test]
            async fn deliveries_list_newest_first_by_status_in_pages() {
                super::deliveries_list_newest_first_by_status_in_pages(store().await.0).await;
            }
            #[tokio::test]
            async fn a_webhook_whose_receiver_answers_410_is_disabled() {
                super::a_webhook_whose_receiver_answers_410_is_disabled(store().await.0).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_claims_never_share_a_delivery() {
                super::concurrent_claims_never_share_a_delivery(store().await.0).await;
            }
            #[tokio::test]
            async fn pending_approvals_filter_by_tool_and_name_the_caller() {
                super::pending_approvals_filter_by_tool_and_name_the_caller(store().await.0).await;
            }
            #[tokio::test]
            async fn inbox_sessions_expire_and_end() {
                super::inbox_sessions_expire_and_end(store().await.0).await;
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
        "ALTER TABLE suspensions DROP COLUMN tool; DROP TABLE feed; DROP TABLE feed_state; \
         DROP TABLE webhook_deliveries; DROP TABLE webhook_outbox; DROP TABLE inbox_sessions; \
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
