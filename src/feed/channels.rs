//! Notification channels (email and Slack, `[[notify]]`) as the webhooks' outbox sees them: a
//! seam, so that the outbox, which stands on a floor below the lifecycle, carries messages whose
//! content (who may decide, what the call asks) only a floor above it knows.
//!
//! The outbox asks [`Channels::deliveries`] for each feed entry it reads, in the transaction
//! that moves its cursor, so a channel's messages are made exactly once across replicas and a
//! process killed after a change committed still has them made by whoever reads on; the sender
//! hands each channel's delivery it claims to [`Channels::send`] and records the [`Sent`]
//! (retries with the webhooks' backoff, or the channel's own `Retry-After`). The implementation
//! is `crate::notify`'s, wired by the composition root.

use std::time::Duration;

use async_trait::async_trait;

use crate::store::{Delivery, FeedEntry, NewDelivery, StoreError};

/// The notification channels the outbox carries messages for.
#[async_trait]
pub trait Channels: Send + Sync {
    /// The channels' deliveries of `entry` (each with its `channel` and `recipient`, and a
    /// message id the same whoever makes it); `made` are the deliveries already made for the
    /// entries before it in the same page, not yet stored. An error leaves the page unread, to
    /// be read again.
    async fn deliveries(
        &self,
        entry: &FeedEntry,
        made: &[NewDelivery],
    ) -> Result<Vec<NewDelivery>, StoreError>;

    /// One attempt to send `delivery`, one of the channels' (its `channel` is set).
    async fn send(&self, delivery: &Delivery) -> Sent;
}

/// How one attempt of a channel's delivery ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    /// Sent: the channel's code for it (SMTP's `250`, HTTP's `200`), and what to keep of its
    /// answer (Slack: the message's channel and `ts`), which later deliveries may read.
    Delivered {
        /// The channel's status code.
        status: u16,
        /// What to keep, as JSON.
        receipt: Option<String>,
    },
    /// Not now: try again, after `after` if the channel said (`Retry-After`), else with the
    /// outbox's backoff, until its attempts run out.
    Retry {
        /// The channel's status code, if it answered.
        status: Option<u16>,
        /// Why, for the delivery's listing.
        error: String,
        /// The wait the channel asked for.
        after: Option<Duration>,
    },
    /// Never: refused for good.
    Failed {
        /// The channel's status code, if it answered.
        status: Option<u16>,
        /// Why, for the delivery's listing.
        error: String,
    },
}
