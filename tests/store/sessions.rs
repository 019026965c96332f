//! Inbox sessions: created, found by their hash until they expire, ended, pruned.

use std::sync::Arc;

use toolgate::store::{InboxSession, Store, Timestamp};

fn session(id: &str, expires_at: Timestamp) -> InboxSession {
    InboxSession {
        id_sha256: id.to_owned(),
        key_name: Some("finance-ops".into()),
        role: "approver".into(),
        key_fingerprint: Some("ab".repeat(32)),
        created_at: Timestamp::now(),
        expires_at,
        display_name: None,
        decides: None,
    }
}

pub(crate) async fn inbox_sessions_expire_and_end(store: Arc<dyn Store>) {
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
