//! toolgate's signing keys, and what they sign: a compact JWS over any claims
//! ([`Signer::sign`]), the key set that verifies them ([`Signer::jwks`], served at
//! `/.well-known/jwks.json`), and a call's attestation ([`Attester`] for the contract's
//! `ToolCtx::attestation`).
//!
//! Keys come from `[signing] key_file` (a PKCS#8 PEM, Ed25519 or P-256: one key, whose `kid`
//! is its thumbprint; rotated by replacing the file), or are made here and kept in the store
//! ([`SigningKeyStore`](crate::store::SigningKeyStore)), so every replica signs with the same
//! key and publishes the same set. A stored key signs for one rotation period
//! (`rotate_after_s`, its `epoch` being Unix time over the period): the first signature of a
//! period makes its key, once across replicas (the store's insert does nothing for a period
//! that has one). A key is published until every token it signed has expired (the end of its
//! period plus the tokens' life), then pruned. Private keys are stored as they are (as decision
//! links' keys are): a copy of the database can sign, as it can read every call; never logged
//! (`Debug` leaves them out).
//!
//! A floor below the lifecycle (`dispatch`), above `store`: the call lifecycle hands tools a
//! [`Signer`] as their attester; a later signed audit chain signs with [`Signer::sign`].

mod config;
mod keys;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Map, Value, json};

use crate::contract::attest::{AttestError, Attester, CallFacts, arguments_sha256};
use crate::store::{SigningKey, Store, StoreError, Timestamp};
use keys::Key;

pub use config::{Signing, SigningConfig};

/// How long one stored key signs before the next one does by default: a week.
pub const DEFAULT_ROTATION: Duration = Duration::from_secs(7 * 86_400);

/// How long an attestation is valid by default: a minute (it is checked as the call arrives).
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// Why nothing was signed.
#[derive(Debug)]
pub enum SignError {
    /// The store could not give (or keep) the period's key.
    Store(StoreError),
    /// A key that does not sign (a stored key this build cannot read), or claims that are not
    /// JSON.
    Key(String),
}

impl std::fmt::Display for SignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignError::Store(err) => write!(f, "no signing key: {err}"),
            SignError::Key(err) => f.write_str(err),
        }
    }
}

impl From<StoreError> for SignError {
    fn from(err: StoreError) -> Self {
        SignError::Store(err)
    }
}

/// Signs with toolgate's key, and publishes the keys that verify what it signed.
pub struct Signer {
    store: Arc<dyn Store>,
    /// `iss` of what it signs: the server's public URL, or `toolgate`.
    issuer: String,
    /// The key of `[signing] key_file`, when set: it alone signs; the store keeps none.
    fixed: Option<Arc<Key>>,
    rotation: Duration,
    ttl: Duration,
    /// The stored key that signs in the current period, and that period.
    current: Mutex<Option<(i64, Arc<Key>)>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("issuer", &self.issuer)
            .field("from_file", &self.fixed.is_some())
            .field("rotation", &self.rotation)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Signer {
    /// A signer whose keys are made and kept in `store`, rotated every `rotation`, signing
    /// tokens valid for `ttl`, issued by `issuer`.
    pub fn new(store: Arc<dyn Store>, issuer: &str, rotation: Duration, ttl: Duration) -> Self {
        Signer {
            store,
            issuer: issuer.to_owned(),
            fixed: None,
            rotation: rotation.max(Duration::from_secs(1)),
            ttl: ttl.max(Duration::from_secs(1)),
            current: Mutex::new(None),
        }
    }

    /// How long what it signs is valid.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A compact JWS over `claims`, with `iss`, `iat`, `exp` (its time to live from now) and a
    /// random `jti` added where `claims` has none; its header names the key (`kid`) and
    /// `typ` `JWT`.
    pub async fn sign(&self, claims: Map<String, Value>) -> Result<String, SignError> {
        self.sign_as(claims, true).await
    }

    /// A compact JWS over `claims` that does not expire: evidence kept for as long as the
    /// record it signs (an audit checkpoint), with `iss`, `iat` and `jti` added, and no `exp`.
    /// Its key is one the store keeps published for as long (the store's checkpoint write
    /// sees to it).
    pub async fn sign_lasting(&self, claims: Map<String, Value>) -> Result<String, SignError> {
        self.sign_as(claims, false).await
    }

    async fn sign_as(
        &self,
        mut claims: Map<String, Value>,
        expires: bool,
    ) -> Result<String, SignError> {
        let now = Timestamp::now();
        let key = self.signing_key(now).await?;
        let iat = now.0.div_euclid(1000);
        // Never past the key's retirement, when it leaves the key set (a replica whose `ttl_s`
        // is longer than the one that made the key would otherwise sign tokens nobody can
        // verify before they expire).
        let until = now.0.saturating_add(millis(self.ttl));
        let exp = key
            .retire_at
            .map_or(until, |retire| until.min(retire))
            .div_euclid(1000);
        let jti = B64.encode(random(16).map_err(SignError::Key)?);
        for (name, value) in [
            ("iss", json!(self.issuer)),
            ("iat", json!(iat)),
            ("exp", json!(exp)),
            ("jti", json!(jti)),
        ] {
            if expires || name != "exp" {
                claims.entry(name).or_insert(value);
            }
        }
        key.sign(&Value::Object(claims))
            .map_err(|err| SignError::Key(format!("cannot sign: {err}")))
    }

    /// The key set that verifies what it signed and may still be valid: `{"keys": [...]}`,
    /// the signing key first.
    pub async fn jwks(&self) -> Result<Value, SignError> {
        if let Some(key) = &self.fixed {
            return Ok(json!({ "keys": [key.jwk()] }));
        }
        let now = Timestamp::now();
        // A set always holds the key that signs now, made if this period has none yet.
        self.signing_key(now).await?;
        let live = self.store.signing_keys(now).await?;
        // From the stored public halves: the private ones need not be read to publish a key.
        let mut keys = Vec::with_capacity(live.len());
        for stored in &live {
            match keys::jwk(&stored.id, &stored.alg, &stored.public) {
                Some(jwk) => keys.push(jwk),
                None => {
                    tracing::warn!(kid = %stored.id, alg = %stored.alg, "a stored signing key is left out of the key set")
                }
            }
        }
        Ok(json!({ "keys": keys }))
    }

    /// The key that signs now: the file's, or this period's, made (once across replicas) if
    /// it has none yet.
    async fn signing_key(&self, now: Timestamp) -> Result<Arc<Key>, SignError> {
        if let Some(key) = &self.fixed {
            return Ok(key.clone());
        }
        let period = millis(self.rotation).max(1);
        let epoch = now.0.div_euclid(period);
        if let Some((_, key)) = (self.current.lock().unwrap_or_else(|e| e.into_inner()))
            .as_ref()
            .filter(|(period, _)| *period == epoch)
        {
            return Ok(key.clone());
        }
        let signs_until = epoch.saturating_add(1).saturating_mul(period);
        let (private_der, public) = keys::generate().map_err(SignError::Key)?;
        let id = B64.encode(random(16).map_err(SignError::Key)?);
        let fresh = SigningKey {
            id,
            epoch,
            alg: "EdDSA".into(),
            private_der,
            public,
            created_at: now,
            signs_until: Timestamp(signs_until),
            // A second of slack: a token signed at the period's last instant expires after it.
            retire_at: Timestamp(
                signs_until
                    .saturating_add(millis(self.ttl))
                    .saturating_add(1_000),
            ),
        };
        let stored = self.store.signing_key_for(&fresh).await?;
        // A new period: the keys whose tokens have all expired go.
        if let Err(err) = self.store.prune_signing_keys(now).await {
            tracing::debug!(error = %err, "cannot prune signing keys now");
        }
        let mut key = Key::of(&stored.id, &stored.alg, &stored.private_der, &stored.public)
            .map_err(SignError::Key)?;
        key.retire_at = Some(stored.retire_at.0);
        let key = Arc::new(key);
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((stored.epoch, key.clone()));
        Ok(key)
    }
}

/// `n` random bytes from the OS.
fn random(n: usize) -> Result<Vec<u8>, String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|err| format!("the OS gave no random bytes: {err}"))?;
    Ok(bytes)
}

/// The claims of a call's attestation for `audience`, over `arguments`.
pub fn attestation_claims(
    facts: &CallFacts,
    audience: &str,
    arguments: &Value,
) -> Map<String, Value> {
    let approvals: Vec<Value> = facts
        .approvals
        .iter()
        .map(|a| json!({ "by": a.who, "at": a.at_ms.div_euclid(1000) }))
        .collect();
    let mut claims = Map::new();
    claims.insert("aud".into(), json!(audience));
    if let Some(caller) = &facts.caller {
        claims.insert("sub".into(), json!(caller));
    }
    claims.insert("call_id".into(), json!(facts.call_id));
    claims.insert("tool".into(), json!(facts.tool));
    claims.insert("args_sha256".into(), json!(arguments_sha256(arguments)));
    claims.insert("caller".into(), json!(facts.caller));
    claims.insert("approval".into(), json!(facts.decision.as_str()));
    claims.insert("approvals".into(), Value::Array(approvals));
    if let crate::contract::attest::Decision::Standing(id) = &facts.decision {
        claims.insert("standing_approval_id".into(), json!(id));
    }
    claims.insert("policy".into(), json!(facts.policy));
    claims
}

#[async_trait]
impl Attester for Signer {
    async fn attest(
        &self,
        facts: &CallFacts,
        audience: &str,
        arguments: &Value,
    ) -> Result<String, AttestError> {
        self.sign(attestation_claims(facts, audience, arguments))
            .await
            .map_err(|err| AttestError(err.to_string()))
    }
}
