//! Standing approvals: granted with the approval that releases a call (in its transaction, and
//! only if it does), spent one call at a time by calls of its tool and caller (recorded
//! `running` with a `standing_approved` event, else suspended), never past its limit however
//! many calls race for it, and not after it expires or is revoked.

use std::sync::Arc;

use serde_json::json;
use toolgate::Effect;
use toolgate::store::{
    Actor, CallStatus, Inserted, NewCall, NewStanding, Resolution, Resolved, StandingUse, Store,
    Timestamp,
};

use super::calls::{keyed, kinds, new_call, suspended};

fn approve() -> Resolution {
    Resolution::Approve {
        resume_input: json!({}),
        quorum: 1,
        edit: None,
    }
}

fn standing(id: &str, calls: u32, for_ms: i64) -> NewStanding {
    NewStanding {
        id: id.to_owned(),
        calls,
        expires_at: Timestamp(Timestamp::now().0 + for_ms),
    }
}

/// A suspended call `id` of `tool` by `agent`, approved by `ops` with `grant`.
async fn granted(store: &Arc<dyn Store>, id: &str, tool: &str, grant: NewStanding) {
    let call = NewCall {
        tool: tool.to_owned(),
        ..new_call(id)
    };
    let token = format!("tok-{id}");
    store
        .insert_call(call, Some(suspended(&token)))
        .await
        .unwrap();
    let ops = Actor::named(Some("ops"));
    let resolved = store
        .approve_standing(&token, approve(), &ops, grant)
        .await
        .unwrap();
    assert!(matches!(resolved, Resolved::Approved(_)), "{resolved:?}");
    // The grant is in the approved call's history, by its approver.
    let call = store.call(id).await.unwrap().unwrap();
    let event = call.events.last().unwrap();
    assert_eq!(
        kinds(&call)[2..],
        ["approved", "redispatched", "standing_granted"]
    );
    assert_eq!(event.actor.as_deref(), Some("ops"));
}

/// Any standing approval may be taken, whenever it was granted.
const ANY_GRANT: Timestamp = Timestamp(i64::MIN);

/// A new call `id` of `tool` by `caller` that its policy would suspend: whether a standing
/// approval released it, and the call as recorded.
async fn asked(store: &Arc<dyn Store>, id: &str, tool: &str, caller: &str) -> Option<StandingUse> {
    asked_since(store, id, tool, caller, ANY_GRANT).await
}

/// [`asked`], taking only a standing approval granted at or after `since`.
async fn asked_since(
    store: &Arc<dyn Store>,
    id: &str,
    tool: &str,
    caller: &str,
    since: Timestamp,
) -> Option<StandingUse> {
    let call = NewCall {
        tool: tool.to_owned(),
        caller: Some(caller.to_owned()),
        ..new_call(id)
    };
    let (inserted, used) = store
        .insert_standing_call(call, suspended(&format!("tok-{id}")), since)
        .await
        .unwrap();
    assert_eq!(inserted, Inserted::New);
    let record = store.call(id).await.unwrap().unwrap();
    assert_eq!(record.standing_approval, used);
    match &used {
        Some(_) => {
            assert_eq!(record.status, CallStatus::Running);
            assert_eq!(kinds(&record), ["created", "standing_approved"]);
            assert_eq!(record.events[1].actor.as_deref(), Some("ops"));
        }
        None => assert_eq!(record.status, CallStatus::Suspended),
    }
    used
}

pub(crate) async fn standing_approvals_release_calls_up_to_their_limit(store: Arc<dyn Store>) {
    granted(&store, "g1", "tool", standing("sa_1", 3, 3_600_000)).await;
    let listed = store.standing_approvals(Timestamp::now()).await.unwrap();
    assert_eq!(listed.len(), 1);
    let held = &listed[0];
    assert_eq!(
        (held.id.as_str(), held.tool.as_str(), held.caller.as_str()),
        ("sa_1", "tool", "agent")
    );
    assert_eq!(held.approver.as_deref(), Some("ops"));
    assert_eq!(held.call_id, "g1");
    assert_eq!((held.calls, held.calls_left), (3, 3));

    // Another caller and another tool are not released.
    assert_eq!(asked(&store, "x1", "tool", "other").await, None);
    assert_eq!(asked(&store, "x2", "other_tool", "agent").await, None);
    // Nor a call that takes only a standing approval granted later (after the tool's
    // definition was accepted anew): it is suspended, and takes nothing.
    let later = Timestamp(Timestamp::now().0 + 60_000);
    assert_eq!(
        asked_since(&store, "x3", "tool", "agent", later).await,
        None
    );
    // Three calls, then none.
    let used = Some(StandingUse {
        id: "sa_1".into(),
        approver: Some("ops".into()),
    });
    assert_eq!(asked(&store, "c1", "tool", "agent").await, used);
    // A key already held answers its call and takes nothing (what it took is given back).
    let (inserted, taken) = store
        .insert_standing_call(
            keyed("c1b", "k", Effect::Write),
            suspended("tok-c1b"),
            ANY_GRANT,
        )
        .await
        .unwrap();
    assert_eq!((inserted, taken.is_some()), (Inserted::New, true));
    let (inserted, taken) = store
        .insert_standing_call(
            keyed("c1c", "k", Effect::Write),
            suspended("tok-c1c"),
            ANY_GRANT,
        )
        .await
        .unwrap();
    assert!(matches!(inserted, Inserted::Existing(_)), "{inserted:?}");
    assert_eq!(taken, None);
    assert_eq!(asked(&store, "c3", "tool", "agent").await, used);
    assert_eq!(asked(&store, "c4", "tool", "agent").await, None);
    let spent = store.standing_approval("sa_1").await.unwrap().unwrap();
    assert_eq!(spent.calls_left, 0);
    assert!(
        store
            .standing_approvals(Timestamp::now())
            .await
            .unwrap()
            .is_empty()
    );
}

pub(crate) async fn standing_approvals_end_when_expired_or_revoked(store: Arc<dyn Store>) {
    granted(&store, "g1", "tool", standing("sa_old", 5, -1)).await;
    assert_eq!(asked(&store, "c1", "tool", "agent").await, None, "expired");
    granted(&store, "g2", "tool", standing("sa_new", 5, 3_600_000)).await;
    let listed = store.standing_approvals(Timestamp::now()).await.unwrap();
    assert_eq!(listed.len(), 1, "the expired one is not listed: {listed:?}");
    assert!(asked(&store, "c2", "tool", "agent").await.is_some());
    let revoked = store
        .revoke_standing("sa_new", Some("root"), Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert!(revoked.revoked_at.is_some());
    assert_eq!(revoked.revoked_by.as_deref(), Some("root"));
    assert_eq!(revoked.calls_left, 4);
    assert_eq!(asked(&store, "c3", "tool", "agent").await, None, "revoked");
    assert!(
        store
            .standing_approvals(Timestamp::now())
            .await
            .unwrap()
            .is_empty()
    );
    // Revoking again keeps who did it first; an unknown id is none.
    let again = store
        .revoke_standing("sa_new", Some("ops"), Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.revoked_by.as_deref(), Some("root"));
    let unknown = store.revoke_standing("sa_x", None, Timestamp::now()).await;
    assert_eq!(unknown.unwrap(), None);

    // An approval that does not release the call records nothing.
    let ops = Actor::named(Some("ops"));
    let late = store
        .approve_standing("tok-g2", approve(), &ops, standing("sa_late", 5, 3_600_000))
        .await
        .unwrap();
    assert!(matches!(late, Resolved::AlreadyResolved(_)), "{late:?}");
    assert_eq!(store.standing_approval("sa_late").await.unwrap(), None);
}

pub(crate) async fn concurrent_calls_never_exceed_the_limit(store: Arc<dyn Store>) {
    granted(&store, "g", "tool", standing("sa_race", 5, 3_600_000)).await;
    let racers = (0..20).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            let call = new_call(&format!("r{n}"));
            let token = format!("tok-r{n}");
            store
                .insert_standing_call(call, suspended(&token), ANY_GRANT)
                .await
                .unwrap()
                .1
        })
    });
    let mut released = 0;
    for racer in racers.collect::<Vec<_>>() {
        released += usize::from(racer.await.unwrap().is_some());
    }
    assert_eq!(released, 5);
    let spent = store.standing_approval("sa_race").await.unwrap().unwrap();
    assert_eq!(spent.calls_left, 0);
}
