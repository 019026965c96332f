//! The keys that sign attestations, as stored: [`SigningKeyStore`] keeps them where every
//! replica finds them, so an attestation made on one replica verifies against the key set any
//! replica publishes, and across restarts.
//!
//! As for decision links' keys ([`super::LinkKeyStore`]): one key per rotation period (its
//! `epoch`), made by an insert that does nothing when the period has a key already, so two
//! processes that make it at once sign with the one stored. A key is published until
//! `retire_at` (when every attestation it signed has expired), and pruned then. What the keys
//! sign, and how, is `crate::signing`'s.

use async_trait::async_trait;

use super::{StoreError, Timestamp};

/// A key that signs attestations. Its private half is never printed (`Debug` leaves it out).
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey {
    /// Its id: random, URL-safe, the `kid` its tokens name.
    pub id: String,
    /// The rotation period it signs in: Unix ms divided by the period's length.
    pub epoch: i64,
    /// The JWS algorithm it signs with: `EdDSA`.
    pub alg: String,
    /// The private key, PKCS#8 DER.
    pub private_der: Vec<u8>,
    /// The public key as its JWK names it (Ed25519: the 32 bytes of `x`).
    pub public: Vec<u8>,
    /// When it was made.
    pub created_at: Timestamp,
    /// From then on, a newer key signs.
    pub signs_until: Timestamp,
    /// From then on, no token it signed is valid: it is no longer published, and is pruned.
    pub retire_at: Timestamp,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("id", &self.id)
            .field("epoch", &self.epoch)
            .field("alg", &self.alg)
            .field("created_at", &self.created_at)
            .field("signs_until", &self.signs_until)
            .field("retire_at", &self.retire_at)
            .finish_non_exhaustive()
    }
}

/// The attestations' signing keys, shared by every process on the store.
#[async_trait]
pub trait SigningKeyStore: Send + Sync {
    /// The key of `key.epoch`'s period: `key`, stored now, or the one stored for that period
    /// first (by this process or another), which `key` then does not replace.
    async fn signing_key_for(&self, key: &SigningKey) -> Result<SigningKey, StoreError>;

    /// The keys not retired by `now`, newest first.
    async fn signing_keys(&self, now: Timestamp) -> Result<Vec<SigningKey>, StoreError>;

    /// Drops the keys retired by `now`; how many.
    async fn prune_signing_keys(&self, now: Timestamp) -> Result<u64, StoreError>;
}
