//! Approval with edits, as every backend keeps it: an approver's edit held by the suspension
//! (shown as the input that stands), restarting the count of several approvers, made the
//! call's input when the call is approved (the original kept, with who edited), and kept
//! through a re-run; an edit equal to the input as it stands is no edit.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::store::{Actor, ApprovalState, Outcome, Resolution, Resolved, Store};

use crate::calls::{kinds, new_call, suspended};

fn approve(quorum: u32, edit: Option<Value>) -> Resolution {
    Resolution::Approve {
        resume_input: json!({}),
        quorum,
        edit,
    }
}

fn actor(name: &str) -> Actor {
    Actor::named(Some(name))
}

pub(crate) async fn edits_are_held_counted_anew_and_run(store: Arc<dyn Store>) {
    store
        .insert_call(new_call("e1"), Some(suspended("te")))
        .await
        .unwrap();
    let original = json!({"id": "e1"});
    let edited = json!({"id": "e1", "to": "board"});
    // Bob approves as called; Alice's edit clears his approval and counts first.
    let (alice, bob) = (actor("alice"), actor("bob"));
    let first = store.resolve_by("te", approve(2, None), &bob).await;
    assert!(matches!(first.unwrap(), Resolved::Recorded { .. }));
    let edit = approve(2, Some(edited.clone()));
    match store.resolve_by("te", edit, &alice).await.unwrap() {
        Resolved::Recorded { call, approvals } => {
            let names: Vec<_> = approvals.iter().map(|a| a.approver.as_deref()).collect();
            assert_eq!(names, [Some("alice")], "the count restarted");
            assert_eq!(call.input, original, "not the call's input until approved");
            let tail = &kinds(&call)[2..];
            assert_eq!(tail, ["approval_recorded", "edited", "approval_recorded"]);
            assert_eq!(call.events[3].actor.as_deref(), Some("alice"));
            assert_eq!(call.events[3].details, Some(json!({"input": edited})));
        }
        other => panic!("expected recorded, got {other:?}"),
    }
    match store.approval("te").await.unwrap() {
        Some(ApprovalState::Pending(approval)) => {
            assert_eq!(
                approval.input,
                Some(edited.clone()),
                "the input as it stands"
            );
            assert_eq!(approval.original_input, Some(original.clone()));
            assert_eq!(approval.edited.unwrap().by.as_deref(), Some("alice"));
            assert_eq!(approval.approvals.len(), 1);
        }
        other => panic!("expected pending, got {other:?}"),
    }
    // Bob again, with the edit as it stands (no edit): the second of that input; it runs.
    let again = approve(2, Some(edited.clone()));
    let Resolved::Approved(call) = store.resolve_by("te", again, &bob).await.unwrap() else {
        panic!("expected approved");
    };
    assert_eq!(call.input, edited);
    assert_eq!(call.original_input, Some(original.clone()));
    assert_eq!(call.edited.as_ref().unwrap().by.as_deref(), Some("alice"));
    assert_eq!(kinds(&call).iter().filter(|k| **k == "edited").count(), 1);

    // Interrupted, its re-run runs the edited input.
    let interrupted = Outcome::Interrupted {
        reason: "stopped".into(),
    };
    store
        .finish_call("e1", Some(call.attempts), call.attempts, &interrupted)
        .await
        .unwrap();
    let rerun = store.rerun_interrupted("e1").await.unwrap().unwrap();
    assert_eq!(rerun.call.input, edited);
    assert_eq!(rerun.call.original_input, Some(original));

    // One approver, with an "edit" equal to the input: no edit.
    store
        .insert_call(new_call("e2"), Some(suspended("tf")))
        .await
        .unwrap();
    let same = approve(1, Some(json!({"id": "e2"})));
    let Resolved::Approved(call) = store.resolve_by("tf", same, &alice).await.unwrap() else {
        panic!("expected approved");
    };
    assert!(!kinds(&call).contains(&"edited"));
    assert_eq!((call.original_input, call.edited), (None, None));
}
