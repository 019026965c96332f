//! Decision links' keys: one per rotation period however many processes make it at once, listed
//! newest first until they retire, then pruned.

use std::sync::Arc;

use toolgate::store::{LinkKey, Store, Timestamp};

fn key(id: &str, epoch: i64, secret: u8, retire_at: Timestamp) -> LinkKey {
    LinkKey {
        id: id.to_owned(),
        epoch,
        secret: vec![secret; 32],
        created_at: Timestamp::now(),
        signs_until: Timestamp(retire_at.0 - 1_000),
        retire_at,
    }
}

pub(crate) async fn a_periods_link_key_is_made_once_and_retired(store: Arc<dyn Store>) {
    let now = Timestamp::now();
    let later = Timestamp(now.0 + 60_000);
    // Eight makers of the same period at once: every one gets the same key, stored once.
    let makers: Vec<_> = (0..8u8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .link_key_for(&key(&format!("kid-{i}"), 7, i, later))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut made = Vec::new();
    for maker in makers {
        made.push(maker.await.unwrap());
    }
    let first = made[0].clone();
    assert!(made.iter().all(|k| *k == first), "one key: {made:?}");
    assert_eq!(first.secret, vec![first.secret[0]; 32], "stored whole");
    // The next period has its own key; the old one still verifies, listed after it.
    let next = store
        .link_key_for(&key("kid-next", 8, 9, Timestamp(now.0 + 120_000)))
        .await
        .unwrap();
    assert_eq!(next.id, "kid-next");
    let stale = key("kid-stale", 3, 1, Timestamp(now.0 - 1));
    store.link_key_for(&stale).await.unwrap();
    let live = store.link_keys(now).await.unwrap();
    let ids: Vec<&str> = live.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(
        ids,
        ["kid-next", first.id.as_str()],
        "retired keys are never listed"
    );
    assert_eq!(live[1], first);
    assert_eq!(
        store.prune_link_keys(now).await.unwrap(),
        1,
        "only the stale one"
    );
    assert_eq!(store.prune_link_keys(now).await.unwrap(), 0);
    // Past its retirement, a key is no longer listed, and pruned.
    assert_eq!(store.link_keys(later).await.unwrap().len(), 1);
    assert_eq!(store.prune_link_keys(later).await.unwrap(), 1);
    // The debug print of a key never shows its secret.
    assert!(!format!("{first:?}").contains("secret"));
}
