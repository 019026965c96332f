//! The keys that sign decision links, as stored: [`LinkKeyStore`] keeps them where every
//! replica finds them, so a link made on one replica verifies on all, and across restarts.
//!
//! One key per rotation period (its `epoch`): making a period's key is an insert that does
//! nothing when the period has one already, so two processes that make it at once end up
//! signing with the same key. A key verifies until `retire_at` (when every link it signed has
//! expired), and is pruned then. What the keys sign, and how, is `crate::notify::links`'s.

use async_trait::async_trait;

use super::{StoreError, Timestamp};

/// A key that signs decision links. Its secret is never printed (`Debug` leaves it out).
#[derive(Clone, PartialEq, Eq)]
pub struct LinkKey {
    /// Its id: random, URL-safe, the `kid` its links name.
    pub id: String,
    /// The rotation period it signs in: Unix ms divided by the period's length.
    pub epoch: i64,
    /// The HMAC key: 32 random bytes.
    pub secret: Vec<u8>,
    /// When it was made.
    pub created_at: Timestamp,
    /// From then on, a newer key signs.
    pub signs_until: Timestamp,
    /// From then on, no link it signed is valid: it is refused, and pruned.
    pub retire_at: Timestamp,
}

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkKey")
            .field("id", &self.id)
            .field("epoch", &self.epoch)
            .field("created_at", &self.created_at)
            .field("signs_until", &self.signs_until)
            .field("retire_at", &self.retire_at)
            .finish_non_exhaustive()
    }
}

/// The keys of decision links, shared by every process on the store.
#[async_trait]
pub trait LinkKeyStore: Send + Sync {
    /// The key of `key.epoch`'s period: `key`, stored now, or the one stored for that period
    /// first (by this process or another), which `key` then does not replace.
    async fn link_key_for(&self, key: &LinkKey) -> Result<LinkKey, StoreError>;

    /// The keys not retired by `now`, newest first.
    async fn link_keys(&self, now: Timestamp) -> Result<Vec<LinkKey>, StoreError>;

    /// Drops the keys retired by `now`; how many.
    async fn prune_link_keys(&self, now: Timestamp) -> Result<u64, StoreError>;
}
