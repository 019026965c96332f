//! Opaque access tokens, through the issuer's introspection endpoint (RFC 7662): toolgate
//! authenticates as its configured client and asks whether the token is active. Each answer is
//! cached by the token's SHA-256 (never the token itself) until the token's `exp`, and at most
//! `introspection_cache_s`; an inactive answer for that long too, so a token the provider
//! refused costs it one request, not one per retry. Active and inactive answers are kept apart,
//! each bounded (past [`MAX_CACHED`] entries the expired go first, then the rest of that kind):
//! a flood of made-up tokens cannot push out the answers for real ones. At most
//! [`MAX_ASKING`] introspections are under way at once; a request waiting for one looks at the
//! cache again first, so many requests with one new token cost the provider one request.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::IssuerError;
use super::config::Introspection;

/// The most answers of each kind kept per issuer.
const MAX_CACHED: usize = 10_000;
/// The most introspections under way at once, per issuer.
const MAX_ASKING: usize = 16;
/// The longest an introspection may take, and the largest answer read.
const TIMEOUT: Duration = Duration::from_secs(5);
const MAX_BYTES: usize = 64 * 1024;

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
