//! Calls: intents and outcomes, records written behind, many concurrent writes, one call per
//! idempotency key, re-runs of interrupted calls, reconciliation, lists. The helpers that make
//! calls are here too; the other concerns' checks use them.

use std::sync::Arc;

use serde_json::json;
use toolgate::Effect;
use toolgate::store::{
    CallError, CallFilter, CallStatus, Inserted, NewCall, Outcome, Reconciled, Settlement, Store,
    StoreError, Timestamp,
};

pub(crate) fn new_call(id: &str) -> NewCall {
    NewCall {
        call_id: id.to_owned(),
        tool: "tool".into(),
        effect: Effect::Write,
        caller: Some("agent".into()),
        input: json!({"id": id}),
        idempotency_key: None,
        attempts: 1,
        created_at: Timestamp::now(),
        trace: None,
    }
}

pub(crate) fn keyed(id: &str, key: &str, effect: Effect) -> NewCall {
    NewCall {
        idempotency_key: Some(key.to_owned()),
        effect,
        ..new_call(id)
    }
}

pub(crate) fn suspended(token: &str) -> Outcome {
    Outcome::Suspended {
        token: token.to_owned(),
        reason: format!("decide {token}"),
        input_schema: json!({"type": "object"}),
        expires_at: None,
    }
}

pub(crate) fn kinds(call: &toolgate::store::CallRecord) -> Vec<&str> {
    call.events.iter().map(|e| e.kind.as_str()).collect()
}

pub(crate) async fn intent_then_outcome(store: Arc<dyn Store>) {
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

pub(crate) async fn finished_in_one_write(store: Arc<dyn Store>) {
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

pub(crate) async fn many_read_records_written_behind_keep_their_own_fields(store: Arc<dyn Store>) {
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

pub(crate) async fn many_concurrent_writes_all_land(store: Arc<dyn Store>) {
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

pub(crate) async fn one_call_per_idempotency_key(store: Arc<dyn Store>) {
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

pub(crate) async fn interrupted_calls_are_claimed_once(store: Arc<dyn Store>) {
    // Only an interrupted call can be claimed; a running one cannot.
    store.insert_call(new_call("i1"), None).await.unwrap();
    assert!(store.rerun_interrupted("i1").await.unwrap().is_none());
    assert!(store.rerun_interrupted("missing").await.unwrap().is_none());
}

pub(crate) async fn reconciliation_settles_once(store: Arc<dyn Store>) {
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

pub(crate) async fn calls_list_newest_first_with_filters(store: Arc<dyn Store>) {
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
