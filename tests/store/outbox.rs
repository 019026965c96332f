//! The webhook outbox: its cursor moved by compare-and-set, deliveries claimed once, retried,
//! settled, sent again, listed, and webhooks disabled by `410 Gone`.

use std::sync::Arc;

use toolgate::store::{
    Delivery, DeliveryResult, DeliveryStatus, FeedCursor, NewDelivery, Store, Timestamp,
};

/// A delivery of the `n`th message to `webhook`.
fn delivery(webhook: &str, n: usize) -> NewDelivery {
    NewDelivery {
        webhook: webhook.to_owned(),
        message_id: format!("msg_{n}"),
        kind: "call.suspended".into(),
        call_id: format!("c{n}"),
        body: format!("{{\"n\":{n}}}"),
        channel: None,
        recipient: None,
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

pub(crate) async fn the_outbox_cursor_moves_by_compare_and_set(store: Arc<dyn Store>) {
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

pub(crate) async fn a_delivery_is_retried_once_due_then_delivered(store: Arc<dyn Store>) {
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
        .settle_delivery(
            second.id,
            DeliveryResult::Delivered {
                status: 204,
                receipt: None,
            },
        )
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

pub(crate) async fn a_claim_whose_claimant_died_runs_out(store: Arc<dyn Store>) {
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

pub(crate) async fn a_failed_delivery_is_sent_again_on_request(store: Arc<dyn Store>) {
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
        .settle_delivery(
            id,
            DeliveryResult::Delivered {
                status: 200,
                receipt: None,
            },
        )
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

pub(crate) async fn deliveries_list_newest_first_by_status_in_pages(store: Arc<dyn Store>) {
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
        .settle_delivery(
            claimed[0].id,
            DeliveryResult::Delivered {
                status: 200,
                receipt: None,
            },
        )
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

pub(crate) async fn a_webhook_whose_receiver_answers_410_is_disabled(store: Arc<dyn Store>) {
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

pub(crate) async fn concurrent_claims_never_share_a_delivery(store: Arc<dyn Store>) {
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
