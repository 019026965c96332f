//! Decision links: the link a message gives one person to decide one approval without a
//! sign-in, signed with a key toolgate keeps, and why a link is refused.
//!
//! A link is `{public_url}/inbox/link/{kid}.{payload}.{tag}` (each part URL-safe base64):
//! - `payload` is JSON naming the deployment it is for (`aud`, the public URL), the call, its
//!   suspension (by a hash of the token: the token itself never appears in a URL, a mail or a
//!   browser's history), the person (`who`), and when it was made and expires (`iat`, `exp`).
//! - `tag` is 44 bytes: `mac`, the HMAC-SHA256 of `kid.payload` under the key `kid`, then
//!   `seal`, the first 12 bytes of an HMAC of `mac` under the same key.
//!
//! Why not a JWS (HS256 through `jsonwebtoken`)? It would sign as well, but one signature over
//! header and payload cannot tell a changed payload from a made-up signature. The seal can: a
//! tag whose seal checks out was made by this key (only its holder can seal), so a link whose
//! seal is good but whose `mac` does not match its payload is a genuine link that was
//! **altered**; a tag whose seal fails was never made by the key: **forged**. (An attacker who
//! changes the payload and keeps the tag gets "altered"; one who invents a tag gets "forged";
//! neither gets anything decided, and the comparison is in constant time.) The format is also
//! shorter than a JWS, which matters in a mail.
//!
//! Keys live in the store ([`LinkKeyStore`]), so every replica signs and verifies alike. One
//! key signs per rotation period ([`DEFAULT_ROTATION`], a week; its `epoch` is Unix time over the
//! period): the first link of a period makes the period's key, and two replicas making it at
//! once store one (the store's insert does nothing for a period that has a key). A key keeps
//! verifying until every link it signed has expired (the end of its period plus the link TTL),
//! then it is refused and pruned (a link's expiry is capped at its key's retirement, so a
//! replica configured with a longer TTL than the key's maker never outlives the key). Key bytes
//! come from the OS (`getrandom`) and are never logged; they are stored as they are, so a copy
//! of the database can make links, as it can read every call.
//!
//! Refusals ([`Refusal`]): **forged** (not a link's shape, or a tag this key never made),
//! **altered** (a genuine tag over another payload), **foreign** (signed by a key this store
//! does not hold: another deployment's, or one retired after all its links expired; or a link
//! made for another public URL: a staging server's link opened against production, say),
//! **expired**, **used** (the approval it names is decided, or was decided by this person: a
//! link serves once, and its page may be reloaded until it decides), and **not allowed** (the
//! person is not one the server knows, or may no longer decide that tool; checked by the page,
//! which knows `[[people]]`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::message::MessageFacts;
use crate::store::{ApprovalState, CallRecord, CallStatus, LinkKey, Store, StoreError, Timestamp};

/// How long a link serves by default (`[inbox] link_ttl_s`): a day.
pub const DEFAULT_LINK_TTL: Duration = Duration::from_secs(86_400);

/// How long one key signs before the next one does: a week.
pub const DEFAULT_ROTATION: Duration = Duration::from_secs(7 * 86_400);

/// The length of `mac`, and of the seal after it.
const MAC_LEN: usize = 32;
const SEAL_LEN: usize = 12;

/// Makes and verifies decision links, with keys kept in the store.
pub struct Links {
    store: Arc<dyn Store>,
    /// The public URL links start with, without a trailing `/`: also their audience.
    public_url: String,
    ttl: Duration,
    rotation: Duration,
    /// Whether links are signed (`[inbox] links = "signed"`), or plain deep links to the call's
    /// page behind the inbox's sign-in (`"sign_in"`).
    signed: bool,
    /// The keys seen, not retired: a link is verified without a read of the store once its key
    /// is known here.
    keys: Mutex<Vec<LinkKey>>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("public_url", &self.public_url)
            .field("ttl", &self.ttl)
            .field("signed", &self.signed)
            .finish_non_exhaustive()
    }
}

/// Why a link is refused. The page says which, and decides nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a link's shape, or a tag the key never made.
    Forged,
    /// A tag the key made, over another payload: the link was changed.
    Altered,
    /// Past its expiry.
    Expired,
    /// The approval it names is decided (or the person decided it already): a link serves once.
    Used,
    /// Signed by a key this store does not hold, or made for another public URL.
    Foreign,
    /// The person is unknown here, or may not decide this approval (any longer).
    NotAllowed,
}

impl Refusal {
    /// The refusal's stable name, as pages and tests tell it: `forged`, `altered`, ...
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Forged => "forged",
            Refusal::Altered => "altered",
            Refusal::Expired => "expired",
            Refusal::Used => "used",
            Refusal::Foreign => "foreign",
            Refusal::NotAllowed => "not_allowed",
        }
    }
}

/// Why a link could not be verified: refused, or the store could not answer.
#[derive(Debug)]
pub enum VerifyError {
    /// The link is refused.
    Refused(Refusal),
    /// The store failed; nothing is known about the link.
    Store(StoreError),
}

impl From<StoreError> for VerifyError {
    fn from(err: StoreError) -> Self {
        VerifyError::Store(err)
    }
}

impl From<Refusal> for VerifyError {
    fn from(refusal: Refusal) -> Self {
        VerifyError::Refused(refusal)
    }
}

/// What a signed link says.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claims {
    /// The public URL of the deployment it is for.
    aud: String,
    /// The call.
    call: String,
    /// Which suspension of the call: a hash of its token.
    sus: String,
    /// The person, by their `[[people]]` name.
    who: String,
    /// When it was made, and when it expires (Unix ms).
    iat: i64,
    exp: i64,
}

/// A link that checks out: its call, waiting for this person's decision.
pub struct Verified {
    /// The call, as it is now (suspended, on the suspension the link names: a decision reads
    /// the pending token from it, so a link never decides a later suspension of the call).
    pub call: CallRecord,
    /// The person the link is for (a `[[people]]` name).
    pub person: String,
    /// When the link expires.
    pub expires_at: Timestamp,
    /// The key that signed it, to bind the page's forms to the link.
    secret: Vec<u8>,
    link: String,
}

impl std::fmt::Debug for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verified")
            .field("call_id", &self.call.call_id)
            .field("person", &self.person)
            .finish_non_exhaustive()
    }
}

impl Verified {
    /// The CSRF token of the link's page in the browser holding `cookie` (the page's random
    /// double-submit cookie): an HMAC, under the link's key, of the cookie and the link, so a
    /// form is accepted only from a page of this link, in the browser it was shown in.
    pub fn csrf(&self, cookie: &str) -> String {
        let mac = mac(
            &self.secret,
            &[
                b"toolgate link csrf\0",
                cookie.as_bytes(),
                b"\0",
                self.link.as_bytes(),
            ],
        );
        hex::encode(mac)
    }

    /// Whether `sent` is the CSRF token of `cookie`'s page, compared in constant time.
    pub fn check_csrf(&self, cookie: &str, sent: &str) -> bool {
        bool::from(self.csrf(cookie).as_bytes().ct_eq(sent.as_bytes()))
    }
}

fn mac(secret: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// The tag of `kid.payload` under `secret`: its MAC, then the MAC's seal.
fn tag(secret: &[u8], kid: &str, payload: &str) -> ([u8; MAC_LEN], [u8; SEAL_LEN]) {
    let signed = mac(
        secret,
        &[
            b"toolgate link v1\0",
            kid.as_bytes(),
            b".",
            payload.as_bytes(),
        ],
    );
    (signed, seal(secret, &signed))
}

fn seal(secret: &[u8], signed: &[u8]) -> [u8; SEAL_LEN] {
    let full = mac(secret, &[b"toolgate link seal\0", signed]);
    let mut out = [0u8; SEAL_LEN];
    out.copy_from_slice(&full[..SEAL_LEN]);
    out
}

/// Which suspension a link names: a hash of its token, so the token stays out of URLs.
fn suspension_of(token: &str) -> String {
    let hash = Sha256::new()
        .chain_update(b"toolgate link suspension\0")
        .chain_update(token.as_bytes())
        .finalize();
    hex::encode(&hash[..16])
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// `n` random bytes from the OS.
fn random(n: usize) -> Result<Vec<u8>, StoreError> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes)
        .map_err(|err| StoreError::Backend(format!("the OS gave no random bytes: {err}")))?;
    Ok(bytes)
}

impl Links {
    /// Signed links starting with `public_url` (`https://tools.example.com`: a trailing `/` is
    /// dropped), serving for `ttl`, with keys in `store`.
    pub fn new(store: Arc<dyn Store>, public_url: &str, ttl: Duration) -> Self {
        Links {
            store,
            public_url: public_url.trim_end_matches('/').to_owned(),
            ttl: ttl.max(Duration::from_secs(1)),
            rotation: DEFAULT_ROTATION,
            signed: true,
            keys: Mutex::new(Vec::new()),
        }
    }

    /// How long one key signs before the next one does (default [`DEFAULT_ROTATION`]).
    pub fn rotate_every(mut self, period: Duration) -> Self {
        self.rotation = period.max(Duration::from_secs(1));
        self
    }

    /// Plain deep links to the call's inbox page, behind its sign-in (`[inbox] links =
    /// "sign_in"`), instead of signed ones.
    pub fn sign_in_only(mut self, plain: bool) -> Self {
        self.signed = !plain;
        self
    }

    /// Whether links are signed (else plain deep links behind the inbox's sign-in).
    pub fn signed(&self) -> bool {
        self.signed
    }

    /// The absolute URL of the link for `person` (a `[[people]]` name) to decide the approval
    /// `token`: signed, it names that one suspension and that person and expires after the
    /// link TTL; with `sign_in_only`, the call's page in the inbox. A token the store never
    /// made is an error.
    pub async fn link(&self, token: &str, person: &str) -> Result<String, StoreError> {
        let call_id = match self.store.approval(token).await? {
            Some(ApprovalState::Pending(approval)) => approval.call_id,
            Some(ApprovalState::Resolved(call) | ApprovalState::Expired(call)) => call.call_id,
            None => return Err(StoreError::Backend("no approval has this token".into())),
        };
        self.link_for(call_id, token, person).await
    }

    /// [`Links::link`] for the approval `token` of the call `call_id`, both known already (a
    /// message's): no read of the store but the signing key's.
    pub async fn link_for(
        &self,
        call_id: String,
        token: &str,
        person: &str,
    ) -> Result<String, StoreError> {
        if !self.signed {
            return Ok(format!("{}/inbox/calls/{call_id}", self.public_url));
        }
        let now = Timestamp::now();
        let key = self.signing_key(now).await?;
        let claims = Claims {
            aud: self.public_url.clone(),
            call: call_id,
            sus: suspension_of(token),
            who: person.to_owned(),
            iat: now.0,
            exp: now.0.saturating_add(millis(self.ttl)).min(key.retire_at.0),
        };
        let json = serde_json::to_vec(&claims)
            .map_err(|err| StoreError::Backend(format!("a link's claims: {err}")))?;
        let payload = B64.encode(json);
        let (signed, sealed) = tag(&key.secret, &key.id, &payload);
        let tag = B64.encode([signed.as_slice(), sealed.as_slice()].concat());
        Ok(format!(
            "{}/inbox/link/{}.{payload}.{tag}",
            self.public_url, key.id
        ))
    }

    /// The key that signs now: this period's, made (once across replicas) if it has none yet.
    async fn signing_key(&self, now: Timestamp) -> Result<LinkKey, StoreError> {
        let period = millis(self.rotation).max(1);
        let epoch = now.0.div_euclid(period);
        let cached = self.cached(|key| key.epoch == epoch, now);
        if let Some(key) = cached {
            return Ok(key);
        }
        let signs_until = epoch.saturating_add(1).saturating_mul(period);
        let fresh = LinkKey {
            id: B64.encode(random(16)?),
            epoch,
            secret: random(32)?,
            created_at: now,
            signs_until: Timestamp(signs_until),
            retire_at: Timestamp(signs_until.saturating_add(millis(self.ttl))),
        };
        let key = self.store.link_key_for(&fresh).await?;
        // A new period: the keys whose links have all expired go.
        if let Err(err) = self.store.prune_link_keys(now).await {
            tracing::debug!(error = %err, "cannot prune link keys now");
        }
        self.remember(key.clone(), now);
        Ok(key)
    }

    /// A live key found in the cache.
    fn cached(&self, found: impl Fn(&LinkKey) -> bool, now: Timestamp) -> Option<LinkKey> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .find(|key| key.retire_at > now && found(key))
            .cloned()
    }

    fn remember(&self, key: LinkKey, now: Timestamp) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.retain(|known| known.retire_at > now && known.id != key.id);
        keys.push(key);
    }

    /// The live key `kid`: from the cache, else from the store (another replica may have made
    /// it since); none when the store holds no such key, or it retired.
    async fn verifying_key(
        &self,
        kid: &str,
        now: Timestamp,
    ) -> Result<Option<LinkKey>, StoreError> {
        if let Some(key) = self.cached(|key| key.id == kid, now) {
            return Ok(Some(key));
        }
        let live = self.store.link_keys(now).await?;
        let found = live.iter().find(|key| key.id == kid).cloned();
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        *keys = live;
        Ok(found)
    }

    /// Checks the signed part of a link (what follows `/inbox/link/`): the link's call,
    /// waiting for the person's decision, or why it is refused. The person's rights are the
    /// page's to check ([`Refusal::NotAllowed`]).
    pub async fn verify(&self, signed: &str) -> Result<Verified, VerifyError> {
        let (claims, key) = self.genuine(signed).await?;
        let Some(call) = self.store.call(&claims.call).await? else {
            return Err(Refusal::Foreign.into());
        };
        let pending = call
            .suspension
            .as_ref()
            .filter(|_| call.status == CallStatus::Suspended)
            .filter(|s| suspension_of(&s.token) == claims.sus)
            .is_some();
        if !pending {
            return Err(Refusal::Used.into());
        }
        Ok(Verified {
            call,
            person: claims.who,
            expires_at: Timestamp(claims.exp),
            secret: key.secret,
            link: signed.to_owned(),
        })
    }

    /// The call of a genuine, unexpired link for this server, whatever became of it, and the
    /// link's person: what the page after a decision shows.
    pub async fn decided(&self, signed: &str) -> Result<(CallRecord, String), VerifyError> {
        let (claims, _) = self.genuine(signed).await?;
        match self.store.call(&claims.call).await? {
            Some(call) => Ok((call, claims.who)),
            None => Err(Refusal::Foreign.into()),
        }
    }

    /// What a link says, once it is known to be made by a key of this store, for this server,
    /// and unexpired; and that key.
    async fn genuine(&self, signed: &str) -> Result<(Claims, LinkKey), VerifyError> {
        let now = Timestamp::now();
        let mut parts = signed.split('.');
        let (Some(kid), Some(payload), Some(sent), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refusal::Forged.into());
        };
        let sent = B64.decode(sent).map_err(|_| Refusal::Forged)?;
        if sent.len() != MAC_LEN + SEAL_LEN || kid.is_empty() || kid.len() > 64 {
            return Err(Refusal::Forged.into());
        }
        let Some(key) = self.verifying_key(kid, now).await? else {
            return Err(Refusal::Foreign.into());
        };
        let (sent_mac, sent_seal) = sent.split_at(MAC_LEN);
        if !bool::from(seal(&key.secret, sent_mac).ct_eq(sent_seal)) {
            return Err(Refusal::Forged.into());
        }
        let (expected, _) = tag(&key.secret, kid, payload);
        if !bool::from(expected.ct_eq(sent_mac)) {
            return Err(Refusal::Altered.into());
        }
        // Signed by this key: what it says is what this server wrote.
        let claims: Claims = B64
            .decode(payload)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .ok_or(Refusal::Forged)?;
        if claims.aud != self.public_url {
            return Err(Refusal::Foreign.into());
        }
        if claims.exp <= now.0 {
            return Err(Refusal::Expired.into());
        }
        Ok((claims, key))
    }
}

/// The link of a message: signed, for a person who may decide; the call's inbox page for a
/// fixed recipient (no person), or when links are plain (`links = "sign_in"`). Made as the
/// message is sent, so its time runs from then.
#[async_trait::async_trait]
impl super::LinkMaker for Links {
    async fn link(&self, facts: &MessageFacts, person: Option<&str>) -> Result<String, String> {
        match person {
            Some(person) if self.signed => (self
                .link_for(facts.call_id.clone(), &facts.token, person)
                .await)
                .map_err(|err| err.to_string()),
            _ => Ok(facts.inbox_url.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_tells_a_genuine_tag_from_a_made_up_one() {
        let secret = [7u8; 32];
        let (signed, sealed) = tag(&secret, "kid", "payload");
        assert_eq!(seal(&secret, &signed), sealed);
        let (other, _) = tag(&secret, "kid", "payloaD");
        assert_ne!(other, signed, "another payload, another MAC");
        assert_ne!(
            seal(&[8u8; 32], &signed),
            sealed,
            "another key, another seal"
        );
    }

    #[test]
    fn the_token_never_shows_in_what_names_its_suspension() {
        let named = suspension_of("sus_secret-token");
        assert_eq!(named.len(), 32);
        assert!(!named.contains("secret"));
        assert_ne!(named, suspension_of("sus_other"));
    }
}
