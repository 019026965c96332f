//! Suspensions: single-use approvals, one winner among concurrent resolutions, rejection,
//! external completion and expiry, the approvals queue (its pages, its filter, its count).

use std::sync::Arc;

use serde_json::json;
use toolgate::store::{
    Actor, ApprovalState, CallError, CallStatus, NewCall, Outcome, RejectOption, Resolution,
    Resolved, Store, Timestamp,
};

use crate::calls::{kinds, new_call, suspended};

pub(crate) async fn approve_is_single_use(store: Arc<dyn Store>) {
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
        quorum: 1,
        edit: None,
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
            assert_eq!(
                call.events[2].details,
                Some(json!({"answer": {"yes": 1}})),
                "the approval's answer, for the history"
            );
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

pub(crate) async fn reject_records_the_reason(store: Arc<dyn Store>) {
    store
        .insert_call(new_call("r1"), Some(suspended("tr")))
        .await
        .unwrap();
    let reject = Resolution::Reject {
        reason: Some("no".into()),
        option: None,
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

    // Without a reason: none is recorded, and the error says so.
    store
        .insert_call(new_call("r2"), Some(suspended("tr2")))
        .await
        .unwrap();
    let quiet = Resolution::Reject {
        reason: None,
        option: None,
    };
    match store.resolve("tr2", quiet, Some("ops")).await.unwrap() {
        Resolved::Rejected(call) => {
            assert_eq!(
                call.error,
                Some(CallError::new("rejected", "Rejected without a reason."))
            );
            let last = call.events.last().unwrap();
            assert_eq!((last.kind.as_str(), &last.details), ("rejected", &None));
        }
        other => panic!("expected rejected, got {other:?}"),
    }

    // With an option of the tool's policy: named in the message and in the details, and
    // read back so from the store.
    store
        .insert_call(new_call("r3"), Some(suspended("tr3")))
        .await
        .unwrap();
    let option = RejectOption {
        name: "too_large".into(),
        description: "Above what an agent may refund.".into(),
    };
    let chosen = Resolution::Reject {
        reason: Some("Ask for 100 at most.".into()),
        option: Some(option),
    };
    let expected = CallError {
        details: Some(json!({
            "option": "too_large",
            "description": "Above what an agent may refund.",
        })),
        ..CallError::new(
            "rejected",
            "Rejected: too_large (Above what an agent may refund.). Ask for 100 at most.",
        )
    };
    match store.resolve("tr3", chosen, Some("ops")).await.unwrap() {
        Resolved::Rejected(call) => {
            assert_eq!(call.error.as_ref(), Some(&expected));
            let last = call.events.last().unwrap();
            assert_eq!(
                last.details,
                Some(json!({"reason": "Ask for 100 at most.", "option": "too_large"}))
            );
        }
        other => panic!("expected rejected, got {other:?}"),
    }
    let read = store.call("r3").await.unwrap().unwrap();
    assert_eq!(read.error, Some(expected));
}

pub(crate) async fn concurrent_resolutions_have_one_winner(store: Arc<dyn Store>) {
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
                        quorum: 1,
                        edit: None,
                    }
                } else {
                    Resolution::Reject {
                        reason: Some(format!("r{i}")),
                        option: None,
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

pub(crate) async fn pending_pages_oldest_first(store: Arc<dyn Store>) {
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

pub(crate) async fn counts_show_what_is_pending_now(store: Arc<dyn Store>) {
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
        reason: Some("no".into()),
        option: None,
    };
    store.resolve("tc1", reject, None).await.unwrap();
    let approve = Resolution::Approve {
        resume_input: json!({}),
        quorum: 1,
        edit: None,
    };
    store.resolve("tc3", approve, None).await.unwrap();
    let counts = store.counts().await.unwrap();
    assert_eq!(counts.pending_approvals, 1);
    assert_eq!(counts.live_replicas, live);
}

pub(crate) async fn external_completion_and_expiry(store: Arc<dyn Store>) {
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
                quorum: 1,
                edit: None,
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

pub(crate) async fn pending_approvals_filter_by_tool_and_name_the_caller(store: Arc<dyn Store>) {
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

/// A suspension whose policy needs three distinct approvers: the first two are recorded (the
/// call still suspended, a `call.approval_recorded` feed entry and event each), the same
/// approver again changes nothing, and the third releases the call; concurrent approvals by
/// distinct approvers reach the quorum exactly once.
pub(crate) async fn several_approvers_release_a_call_once(store: Arc<dyn Store>) {
    store
        .insert_call(new_call("q1"), Some(suspended("tq")))
        .await
        .unwrap();
    let head = store.feed_head().await.unwrap();
    let approve = |n: i64| Resolution::Approve {
        resume_input: json!({"n": n}),
        quorum: 3,
        edit: None,
    };
    let actor = |name: &str| Actor {
        name: Some(name.to_owned()),
        display: Some(format!("{name} (shown)")),
    };
    match store
        .resolve_by("tq", approve(1), &actor("alice"))
        .await
        .unwrap()
    {
        Resolved::Recorded { call, approvals } => {
            assert_eq!(call.status, CallStatus::Suspended);
            assert_eq!(call.attempts, 1);
            assert_eq!(call.suspension.as_ref().unwrap().token, "tq");
            assert_eq!(kinds(&call), ["created", "suspended", "approval_recorded"]);
            let event = call.events.last().unwrap();
            assert_eq!(event.actor.as_deref(), Some("alice"));
            assert_eq!(event.details, Some(json!({"answer": {"n": 1}})));
            assert_eq!(approvals.len(), 1);
            assert_eq!(approvals[0].approver.as_deref(), Some("alice"));
            assert_eq!(approvals[0].display_name.as_deref(), Some("alice (shown)"));
        }
        other => panic!("expected recorded, got {other:?}"),
    }
    // The same approver again: nothing changes, and the approvals so far are told.
    match store
        .resolve_by("tq", approve(9), &actor("alice"))
        .await
        .unwrap()
    {
        Resolved::AlreadyApproved { call, approvals } => {
            assert_eq!(call.status, CallStatus::Suspended);
            assert_eq!(kinds(&call).len(), 3, "no event for a repeated approval");
            assert_eq!(approvals.len(), 1);
        }
        other => panic!("expected already approved, got {other:?}"),
    }
    match store
        .resolve_by("tq", approve(2), &actor("bob"))
        .await
        .unwrap()
    {
        Resolved::Recorded { approvals, .. } => {
            let names: Vec<_> = approvals.iter().map(|a| a.approver.as_deref()).collect();
            assert_eq!(names, [Some("alice"), Some("bob")]);
        }
        other => panic!("expected recorded, got {other:?}"),
    }
    // Read back: still pending, with both approvals, oldest first.
    match store.approval("tq").await.unwrap() {
        Some(ApprovalState::Pending(approval)) => {
            let names: Vec<_> = approval
                .approvals
                .iter()
                .map(|a| a.approver.as_deref())
                .collect();
            assert_eq!(names, [Some("alice"), Some("bob")]);
        }
        other => panic!("expected pending, got {other:?}"),
    }
    let listed = store.pending_approvals(None, 500).await.unwrap();
    let listed = listed.approvals.iter().find(|a| a.token == "tq").unwrap();
    assert_eq!(listed.approvals.len(), 2);
    match store
        .resolve_by("tq", approve(3), &actor("carol"))
        .await
        .unwrap()
    {
        Resolved::Approved(call) => {
            assert_eq!(call.status, CallStatus::Running);
            assert_eq!(call.attempts, 2);
            assert_eq!(
                kinds(&call),
                [
                    "created",
                    "suspended",
                    "approval_recorded",
                    "approval_recorded",
                    "approved",
                    "redispatched"
                ]
            );
            assert_eq!(call.events[4].actor.as_deref(), Some("carol"));
        }
        other => panic!("expected approved, got {other:?}"),
    }
    assert!(matches!(
        store
            .resolve_by("tq", approve(4), &actor("dan"))
            .await
            .unwrap(),
        Resolved::AlreadyResolved(_)
    ));
    // The feed: one entry per approval short of the quorum, naming the suspension; then none
    // for the change into running.
    let page = store.feed(Some(&head), 100).await.unwrap();
    let ours: Vec<_> = page
        .entries
        .iter()
        .filter(|entry| entry.call().unwrap().call_id == "q1")
        .collect();
    let types: Vec<_> = ours.iter().map(|entry| entry.kind.as_str()).collect();
    assert_eq!(types, ["call.approval_recorded", "call.approval_recorded"]);
    for entry in ours {
        assert_eq!(entry.call().unwrap().status, CallStatus::Suspended);
        assert_eq!(entry.suspension.as_ref().unwrap().token, "tq");
    }

    // Eight distinct approvers at once on a quorum of two: exactly one releases the call, one
    // is recorded before it, the others find it resolved.
    store
        .insert_call(new_call("q2"), Some(suspended("tq2")))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let approve = Resolution::Approve {
                    resume_input: json!(i),
                    quorum: 2,
                    edit: None,
                };
                let by = Actor::named(Some(&format!("approver-{i}")));
                store.resolve_by("tq2", approve, &by).await.unwrap()
            })
        })
        .collect();
    let (mut released, mut recorded) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Resolved::Approved(_) => released += 1,
            Resolved::Recorded { .. } => recorded += 1,
            Resolved::AlreadyResolved(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((released, recorded), (1, 1));
}

/// Escalation: the pending, unexpired suspensions of one tool made by a time are escalated
/// once (their `escalated_at`, an `escalated` event, a `call.escalated` feed entry); others,
/// and a second sweep, change nothing. Concurrent sweeps escalate each once.
pub(crate) async fn escalation_happens_once(store: Arc<dyn Store>) {
    let head = store.feed_head().await.unwrap();
    let of = |id: &str, tool: &str| NewCall {
        tool: tool.to_owned(),
        ..new_call(id)
    };
    store
        .insert_call(of("e1", "tool"), Some(suspended("te1")))
        .await
        .unwrap();
    store
        .insert_call(of("e2", "other"), Some(suspended("te2")))
        .await
        .unwrap();
    let lapsed = Outcome::Suspended {
        token: "te3".into(),
        reason: "decide te3".into(),
        input_schema: json!({"type": "object"}),
        expires_at: Some(Timestamp(Timestamp::now().0 - 1_000)),
    };
    store
        .insert_call(of("e3", "tool"), Some(lapsed))
        .await
        .unwrap();
    store
        .insert_call(of("e4", "tool"), Some(suspended("te4")))
        .await
        .unwrap();
    let reject = Resolution::Reject {
        reason: None,
        option: None,
    };
    store.resolve("te4", reject, Some("ops")).await.unwrap();

    // Made before a time long past: nothing is due yet.
    let long_ago = Timestamp(Timestamp::now().0 - 3_600_000);
    assert!(store.escalate("tool", long_ago).await.unwrap().is_empty());

    let due = Timestamp(Timestamp::now().0 + 1_000);
    assert_eq!(store.escalate("tool", due).await.unwrap(), ["e1"]);
    assert!(
        store.escalate("tool", due).await.unwrap().is_empty(),
        "once"
    );
    match store.approval("te1").await.unwrap() {
        Some(ApprovalState::Pending(approval)) => assert!(approval.escalated_at.is_some()),
        other => panic!("expected pending, got {other:?}"),
    }
    match store.approval("te2").await.unwrap() {
        Some(ApprovalState::Pending(approval)) => assert_eq!(approval.escalated_at, None),
        other => panic!("expected pending, got {other:?}"),
    }
    let call = store.call("e1").await.unwrap().unwrap();
    assert_eq!(call.status, CallStatus::Suspended);
    assert_eq!(kinds(&call), ["created", "suspended", "escalated"]);
    let page = store.feed(Some(&head), 100).await.unwrap();
    let escalations: Vec<_> = page
        .entries
        .iter()
        .filter(|entry| entry.kind == "call.escalated")
        .collect();
    assert_eq!(escalations.len(), 1);
    assert_eq!(escalations[0].call().unwrap().call_id, "e1");
    assert_eq!(escalations[0].call().unwrap().status, CallStatus::Suspended);
    assert_eq!(escalations[0].suspension.as_ref().unwrap().token, "te1");
    // Approving an escalated suspension works as any other.
    let approve = Resolution::Approve {
        resume_input: json!({}),
        quorum: 1,
        edit: None,
    };
    assert!(matches!(
        store.resolve("te1", approve, Some("ops")).await.unwrap(),
        Resolved::Approved(_)
    ));

    // Eight sweeps at once over twenty suspensions: each escalated once.
    for i in 0..20 {
        store
            .insert_call(
                of(&format!("m{i}"), "many"),
                Some(suspended(&format!("tm{i}"))),
            )
            .await
            .unwrap();
    }
    let due = Timestamp(Timestamp::now().0 + 1_000);
    let sweeps: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.escalate("many", due).await.unwrap() })
        })
        .collect();
    let mut escalated = Vec::new();
    for sweep in sweeps {
        escalated.extend(sweep.await.unwrap());
    }
    let total: usize = 20;
    assert_eq!(
        escalated.len(),
        total,
        "no sweep escalated what another did"
    );
    escalated.sort();
    escalated.dedup();
    assert_eq!(escalated.len(), total);
    let page = store.feed(Some(&head), 500).await.unwrap();
    let entries = page
        .entries
        .iter()
        .filter(|entry| entry.kind == "call.escalated" && entry.call().unwrap().tool == "many")
        .count();
    assert_eq!(entries, total, "one call.escalated per suspension");
}
