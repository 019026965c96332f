//! The outbox loop: feed entries into deliveries, one per entry and matching webhook, and the
//! notification channels' (`super::super::channels`) for the entry.
//!
//! The cursor it reads from is kept in the store and moved in the transaction that queues the
//! deliveries (`Store::enqueue_deliveries`), so of several replicas following one feed exactly
//! one turns a page into deliveries, and a process killed between the two loses nothing.

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{IDLE, Loop, Shared, pause};
use crate::store::{FeedCursor, NewDelivery, Store, StoreError};

/// Entries the outbox reads at a time.
const PAGE: u32 = 200;

/// The outbox loop: feed entries into deliveries.
pub(super) async fn outbox(mut run: Loop) {
    let mut changes = run.store.feed_changes();
    let mut fresh = None;
    loop {
        if *run.released.borrow() {
            return;
        }
        changes.borrow_and_update();
        let step = advance(run.store.as_ref(), &run.shared, &mut fresh).await;
        let wait = match step {
            Ok(Advanced::Delivered) => {
                run.nudge.wake();
                continue;
            }
            Ok(Advanced::Raced) => continue,
            Ok(Advanced::Settling) => Duration::from_millis(20),
            Ok(Advanced::Idle) => IDLE,
            Err(err) => {
                tracing::debug!(error = %err, "the webhook outbox cannot read the feed now");
                IDLE
            }
        };
        if !pause(&mut run.released, wait, changes.changed()).await {
            return;
        }
    }
}

enum Advanced {
    /// Deliveries were made (or entries passed).
    Delivered,
    /// Another process moved the cursor first.
    Raced,
    /// Newer entries are not final yet.
    Settling,
    /// Nothing new.
    Idle,
}

/// One step of the outbox. `fresh` says whether the outbox had never run on this store when
/// this process started: then it reads the feed from its oldest entry but delivers only what
/// happened since the webhooks started (a change made just after the start is not lost to a
/// race with this loop's first read, and older history is not sent to a new webhook).
async fn advance(
    store: &dyn Store,
    shared: &Shared,
    fresh: &mut Option<bool>,
) -> Result<Advanced, StoreError> {
    let from = store.webhook_cursor().await?;
    let fresh = *fresh.get_or_insert(from.is_none());
    let page = match store.feed(from.as_ref(), PAGE).await {
        Ok(page) => page,
        Err(StoreError::CursorExpired) => {
            let head = store.feed_head().await?;
            tracing::error!(
                "the webhook outbox fell behind the feed's retention; changes before now were \
                 not delivered"
            );
            store
                .enqueue_deliveries(from.as_ref(), &head, Vec::new())
                .await?;
            return Ok(Advanced::Raced);
        }
        Err(err) => return Err(err),
    };
    if page.entries.is_empty() {
        return Ok(if page.settling {
            Advanced::Settling
        } else {
            Advanced::Idle
        });
    }
    let mut deliveries = Vec::new();
    for entry in &page.entries {
        if fresh && entry.at < shared.started {
            continue;
        }
        for hook in shared.hooks.iter().filter(|hook| hook.wants(entry)) {
            let body = serde_json::json!({
                "type": entry.kind,
                "timestamp": entry.at,
                // A webhook's receiver is an approver's system: it gets the token.
                "data": crate::feed::entry_data(entry, true),
            });
            deliveries.push(NewDelivery {
                webhook: hook.url().to_owned(),
                message_id: message_id(&entry.cursor, hook.url()),
                kind: entry.kind.clone(),
                call_id: entry
                    .call()
                    .map(|call| call.call_id.clone())
                    .unwrap_or_default(),
                body: body.to_string(),
                channel: None,
                recipient: None,
            });
        }
        if let Some(channels) = &shared.channels {
            let more = channels.deliveries(entry, &deliveries).await?;
            deliveries.extend(more);
        }
    }
    Ok(
        if store
            .enqueue_deliveries(from.as_ref(), &page.cursor, deliveries)
            .await?
        {
            Advanced::Delivered
        } else {
            Advanced::Raced
        },
    )
}

/// The message id of an entry for a webhook (or for a channel's recipient, `target` naming
/// both): the same whoever makes the delivery.
pub fn message_id(cursor: &FeedCursor, url: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(cursor.0.as_bytes());
    hash.update([0]);
    hash.update(url.as_bytes());
    format!("msg_{}", hex::encode(&hash.finalize()[..16]))
}
