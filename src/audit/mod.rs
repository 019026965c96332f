//! The audit record's wing: what signs the chain's head ([`Checkpointer`]), and what checks an
//! export or a receipt against the public keys ([`verify`]), for the server, the `toolgate audit
//! verify` command and anyone's tests.
//!
//! The chain itself is the store's (`crate::store::AuditStore`): every change is captured in
//! the transaction that makes it and hashed onto the chain there (SQLite) or by one chainer
//! below the feed's horizon (PostgreSQL). A checkpoint is a JWS by toolgate's signing key
//! (`crate::signing`, the keys of `/.well-known/jwks.json`) over the number and hash of the
//! entry at the head, appended as an entry itself; the key that signed one stays published.
//! Above `store` and `signing`, below the doors.

mod command;
mod config;
pub mod export;
pub mod verify;

pub use command::verify as verify_command;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Map, Value, json};

use crate::signing::Signer;
use crate::store::{CHECKPOINT, NewCheckpoint, Store, StoreError};

pub use config::AuditConfig;

/// Signs the chain's head, on a timer and at a graceful stop.
pub struct Checkpointer {
    store: Arc<dyn Store>,
    signer: Arc<Signer>,
}

impl Checkpointer {
    /// Signing `store`'s chain with `signer`'s key.
    pub fn new(store: Arc<dyn Store>, signer: Arc<Signer>) -> Self {
        Checkpointer { store, signer }
    }

    /// Signs the head now and appends the checkpoint, unless the head is a checkpoint already
    /// (nothing new to cover) or the chain is empty; the number of the entry it covers.
    pub async fn checkpoint(&self) -> Result<Option<i64>, String> {
        let head = self.store.audit_head().await.map_err(|e| e.to_string())?;
        let Some(head) = head else {
            return Ok(None);
        };
        if is_checkpoint(&head.entry) {
            return Ok(None);
        }
        let mut claims = Map::new();
        claims.insert("sub".into(), json!("audit"));
        claims.insert("audit_seq".into(), json!(head.seq));
        claims.insert("audit_hash".into(), json!(head.hash));
        let jws = self
            .signer
            .sign_lasting(claims)
            .await
            .map_err(|err| err.to_string())?;
        let kid = kid_of(&jws).ok_or("the signature names no key")?;
        let checkpoint = NewCheckpoint {
            seq: head.seq,
            hash: head.hash,
            kid,
            jws,
        };
        self.store
            .append_checkpoint(checkpoint)
            .await
            .map_err(|err: StoreError| err.to_string())?;
        Ok(Some(head.seq))
    }

    /// Checkpoints every `interval` until `released`, then once more.
    pub fn start(
        self: Arc<Self>,
        interval: Duration,
        mut released: tokio::sync::watch::Receiver<bool>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("built outside a tokio runtime: the audit chain is not checkpointed");
            return;
        };
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(100)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = released.wait_for(|released| *released) => return,
                }
                if let Err(err) = self.checkpoint().await {
                    tracing::warn!(error = %err, "cannot checkpoint the audit chain now");
                }
            }
        });
    }
}

/// Whether an entry's canonical JSON is a checkpoint's.
fn is_checkpoint(entry: &str) -> bool {
    serde_json::from_str::<Value>(entry).is_ok_and(|entry| entry["event"]["type"] == CHECKPOINT)
}

/// The `kid` of a compact JWS's header.
pub(crate) fn kid_of(jws: &str) -> Option<String> {
    let header = B64.decode(jws.split('.').next()?).ok()?;
    let header: Value = serde_json::from_slice(&header).ok()?;
    header["kid"].as_str().map(str::to_owned)
}
