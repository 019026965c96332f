//! Opaque access tokens, through the issuer's introspection endpoint (RFC 7662): toolgate
//! authenticates as its configured client and asks whether the token is active. Each answer is
//! cached by the token's SHA-256 (never the token itself) until the token's `exp`, and at most
//! `introspection_cache_s`; an inactive answer for that long too, so a token the provider
//! refused costs it one request, not one per retry. Active and inactive answers are kept apart,
//! each bounded (past [`MAX_CACHED`] entries the expired go first, then the rest of that kind):
//! a flood of made-up tokens cannot push out the answers for real ones. At most
//! [`MAX_ASKING`] introspections are under way at once; a request waiting for one looks at the
//! cache again first, so many requests with one new token cost the provider one request.
//!
//! What any client can send is bounded before the provider hears of it: a string that cannot
//! be an access token (RFC 6750's `b64token`, 8 to 4,096 characters) is never sent
//! ([`could_be_token`]), and each client address may have at most [`PER_CLIENT`] tokens
//! introspected that the cache did not know ([`Introspector::may_ask`]): one client's made-up
//! bearers spend that client's allowance, not the provider's rate limit for everyone.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::IssuerError;
use super::config::Introspection;
use crate::dispatch::quota::bucket::{Rate, spend};

/// The most answers of each kind kept per issuer.
const MAX_CACHED: usize = 10_000;
/// The most introspections under way at once, per issuer.
const MAX_ASKING: usize = 16;
/// The longest an introspection may take, and the largest answer read.
const TIMEOUT: Duration = Duration::from_secs(5);
const MAX_BYTES: usize = 64 * 1024;

/// How many tokens the cache did not know one client address may have introspected: on average
/// a minute, and at once.
pub(super) const PER_CLIENT: Rate = Rate {
    per_minute: 30,
    burst: 10,
};
/// The most client addresses whose allowance is kept, per issuer.
const MAX_CLIENTS: usize = 4096;

/// Whether `token` could be an access token an issuer handed out: RFC 6750's `b64token` (letters,
/// digits, `-._~+/`, then `=` padding), 8 to 4,096 characters. Anything else is never sent.
pub(super) fn could_be_token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    (8..=4096).contains(&token.len())
        && !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

/// An answer: the active token's claims, or `None` for an inactive one.
pub(super) type Answer = Option<Map<String, Value>>;

struct Kept {
    answer: Answer,
    until: Instant,
}

/// One issuer's introspection client and its cache.
pub(super) struct Introspector {
    settings: Introspection,
    secret: String,
    client: reqwest::Client,
    /// Active answers, and inactive ones, apart.
    active: Mutex<HashMap<[u8; 32], Kept>>,
    inactive: Mutex<HashMap<[u8; 32], Kept>>,
    asking: tokio::sync::Semaphore,
    /// Each client address's allowance of new tokens: its bucket's theoretical arrival time
    /// (see `dispatch::quota::bucket`), in microseconds since `epoch`.
    clients: Mutex<HashMap<IpAddr, i64>>,
    epoch: Instant,
    /// When a failure was last logged.
    logged: Mutex<Option<Instant>>,
}

impl Introspector {
    pub(super) fn new(settings: &Introspection, secret: String) -> Result<Self, IssuerError> {
        let client = super::provider_client(TIMEOUT)?;
        Ok(Introspector {
            settings: settings.clone(),
            secret,
            client,
            active: Mutex::new(HashMap::new()),
            inactive: Mutex::new(HashMap::new()),
            asking: tokio::sync::Semaphore::new(MAX_ASKING),
            clients: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            logged: Mutex::new(None),
        })
    }

    /// Whether a failure may be logged now: once every 10 s at most.
    pub(super) fn may_log(&self) -> bool {
        let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
        let due = logged.is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
        if due {
            *logged = Some(Instant::now());
        }
        due
    }

    /// Whether a token the cache does not know may be introspected for `client` now, spending
    /// one of its [`PER_CLIENT`] allowance. A request without a client address (toolgate
    /// mounted in an app that gives none) is not limited.
    pub(super) fn may_ask(&self, client: Option<IpAddr>) -> bool {
        let Some(client) = client else {
            return true;
        };
        // An IPv6 client holds a whole /64: one allowance for it.
        let client = match client {
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
            v4 => v4,
        };
        let now = i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&client) {
            // Those whose allowance is whole again have nothing to remember; past that, every
            // allowance starts again (the provider stays bounded by `MAX_ASKING` at once).
            clients.retain(|_, tat| *tat > now);
            if clients.len() >= MAX_CLIENTS {
                clients.clear();
            }
        }
        let tat = clients.get(&client).copied().unwrap_or(now);
        match spend(tat, now, PER_CLIENT) {
            Ok(next) => {
                clients.insert(client, next);
                true
            }
            Err(_) => false,
        }
    }

    /// The cached answer for the token hashing to `hash`, if any is still kept.
    pub(super) fn cached(&self, hash: &[u8; 32]) -> Option<Answer> {
        let now = Instant::now();
        let found = |cache: &Mutex<HashMap<[u8; 32], Kept>>| {
            let cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache
                .get(hash)
                .filter(|kept| now < kept.until)
                .map(|kept| kept.answer.clone())
        };
        found(&self.active).or_else(|| found(&self.inactive))
    }

    /// Asks the provider about `token` (hashing to `hash`), and keeps the answer.
    pub(super) async fn introspect(&self, token: &str, hash: [u8; 32]) -> Result<Answer, String> {
        let _asking = self
            .asking
            .acquire()
            .await
            .map_err(|_| "introspection is shut".to_owned())?;
        // Another request may have asked about the same token meanwhile.
        if let Some(answer) = self.cached(&hash) {
            return Ok(answer);
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", "access_token")
            .finish();
        let url = self.settings.url.clone();
        let basic = Some((self.settings.client_id.as_str(), self.secret.as_str()));
        let response = crate::base::form_post(&self.client, url, basic, body)
            .send()
            .await
            .map_err(|err| format!("introspection: {err}"))?;
        if !response.status().is_success() {
            return Err(format!("introspection: {}", response.status()));
        }
        let bytes = crate::base::read_bounded(response, MAX_BYTES).await?;
        let answer: Map<String, Value> = serde_json::from_slice(&bytes)
            .map_err(|err| format!("introspection answer is not a JSON object: {err}"))?;
        let active = answer.get("active").and_then(Value::as_bool) == Some(true);
        let mut keep_for = self.settings.cache;
        if let Some(exp) = answer.get("exp").and_then(Value::as_u64) {
            let left = exp.saturating_sub(super::unix_now());
            keep_for = keep_for.min(Duration::from_secs(left));
        }
        let answer = active.then_some(answer);
        let cache = if active { &self.active } else { &self.inactive };
        let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_CACHED {
            let now = Instant::now();
            cache.retain(|_, kept| kept.until > now);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(
            hash,
            Kept {
                answer: answer.clone(),
                until: Instant::now() + keep_for,
            },
        );
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_could_be_a_token_is_sent() {
        assert!(could_be_token("2YotnFZFEjr1zCsicMWpAA"));
        assert!(could_be_token("abc.def-ghi_jkl~mno+pqr/stu=="));
        for not in [
            "short",
            "two words here",
            "<script>alert(1)</script>",
            "=====",
        ] {
            assert!(!could_be_token(not), "{not}");
        }
        assert!(!could_be_token(&"a".repeat(4097)));
    }
}
