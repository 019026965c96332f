//! Attestations' signing keys: one per rotation period however many processes make it at once,
//! listed newest first until they retire (the key set published), then pruned.

use std::sync::Arc;

use toolgate::store::{SigningKey, Store, Timestamp};

fn key(id: &str, epoch: i64, byte: u8, retire_at: Timestamp) -> SigningKey {
    SigningKey {
        id: id.to_owned(),
        epoch,
        alg: "EdDSA".into(),
        private_der: vec![byte; 48],
        public: vec![byte.wrapping_add(1); 32],
        created_at: Timestamp::now(),
        signs_until: Timestamp(retire_at.0 - 1_000),
        retire_at,
    }
}

pub(crate) async fn a_periods_signing_key_is_made_once_and_retired(store: Arc<dyn Store>) {
    let now = Timestamp::now();
    let later = Timestamp(now.0 + 60_000);
    // Eight makers of the same period at once: every one gets the same key, stored once.
    let makers: Vec<_> = (0..8u8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .signing_key_for(&key(&format!("kid-{i}"), 7, i, later))
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
    let byte = first.private_der[0];
    assert_eq!(first.private_der, vec![byte; 48], "stored whole");
    assert_eq!(
        first.public,
        vec![byte + 1; 32],
        "the public half of the same key"
    );
    assert_eq!(first.alg, "EdDSA");
    // The next period has its own key; the old one is still published, listed after it.
    let next = store
        .signing_key_for(&key("kid-next", 8, 9, Timestamp(now.0 + 120_000)))
        .await
        .unwrap();
    assert_eq!(next.id, "kid-next");
    store
        .signing_key_for(&key("kid-stale", 3, 1, Timestamp(now.0 - 1)))
        .await
        .unwrap();
    let live = store.signing_keys(now).await.unwrap();
    let ids: Vec<&str> = live.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(
        ids,
        ["kid-next", first.id.as_str()],
        "retired keys are never listed"
    );
    assert_eq!(live[1], first);
    assert_eq!(
        store.prune_signing_keys(now).await.unwrap(),
        1,
        "only the stale one"
    );
    assert_eq!(store.prune_signing_keys(now).await.unwrap(), 0);
    // Past its retirement, a key is no longer listed, and pruned.
    assert_eq!(store.signing_keys(later).await.unwrap().len(), 1);
    assert_eq!(store.prune_signing_keys(later).await.unwrap(), 1);
    // The debug print of a key never shows its private half.
    let printed = format!("{first:?}");
    assert!(!printed.contains("private") && !printed.contains(&format!("{byte}, {byte}")));
}
