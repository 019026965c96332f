//! An issuer's key set (JWKS), cached. The set is fetched when first needed (its URL configured,
//! or the `jwks_uri` of the issuer's discovery document), kept for the `max-age` its answer
//! gives (bounded to 5 minutes … 24 hours; 5 minutes without one), and refreshed in the
//! background once stale, the stale set serving meanwhile. A token whose `kid` the set lacks
//! asks for a fetch at once (a provider that rotated its keys), but fetches of one issuer are
//! one at a time and at most one every [`REFETCH_EVERY`]: a flood of made-up `kid`s costs the
//! provider one request. While the provider cannot be reached the cached keys keep working and
//! an unknown key fails closed.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use url::Url;

use super::IssuerError;
use super::config::{Settings, asymmetric, secure_url};
use crate::base::{discovery_document, read_bounded};

/// The fewest seconds between two fetches of one issuer's key set.
pub(super) const REFETCH_EVERY: Duration = Duration::from_secs(30);
/// How long a key set is kept at least, and at most, whatever its answer says.
const MIN_AGE: Duration = Duration::from_secs(5 * 60);
const MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest a fetch may take, and the largest answer read.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_BYTES: usize = 512 * 1024;

/// The family of key a signature algorithm needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Rsa,
    P256,
    P384,
    Ed25519,
}

fn family_of(alg: Algorithm) -> Option<Family> {
    Some(match alg {
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => Family::Rsa,
        Algorithm::ES256 => Family::P256,
        Algorithm::ES384 => Family::P384,
        Algorithm::EdDSA => Family::Ed25519,
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => return None,
    })
}

/// One verification key of the set.
pub(super) struct Key {
    kid: Option<String>,
    /// The algorithm the key is for, when the set says.
    alg: Option<Algorithm>,
    family: Family,
    pub(super) decoding: DecodingKey,
}

/// The keys as last fetched.
#[derive(Default)]
pub(super) struct Cached {
    keys: Vec<Key>,
    /// Until when the set is fresh; `None` before the first fetch.
    fresh_until: Option<Instant>,
}

impl Cached {
    /// The key for a token signed with `alg` under `kid`: of that `kid` (or, for a token without
    /// one, the only key of the family), whose family and stated algorithm fit `alg`.
    pub(super) fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<&Key> {
        let family = family_of(alg)?;
        let fits = |key: &&Key| key.family == family && key.alg.is_none_or(|a| a == alg);
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(fits)
                .find(|key| key.kid.as_deref() == Some(kid)),
            None => {
                let mut candidates = self.keys.iter().filter(fits);
                let only = candidates.next()?;
                candidates.next().is_none().then_some(only)
            }
        }
    }

    /// Whether a fresh fetch is due.
    pub(super) fn stale(&self) -> bool {
        self.fresh_until.is_none_or(|until| Instant::now() >= until)
    }
}

/// What one fetch at a time needs to remember.
#[derive(Default)]
struct Fetching {
    /// When the last fetch began.
    last: Option<Instant>,
    /// The key set's URL, once discovered.
    discovered: Option<Url>,
}

/// An issuer's key set: the cache, and the one fetch at a time that renews it.
pub(super) struct KeySet {
    name: String,
    issuer: String,
    configured: Option<Url>,
    client: reqwest::Client,
    cached: RwLock<Arc<Cached>>,
    fetching: tokio::sync::Mutex<Fetching>,
}

impl KeySet {
    pub(super) fn new(settings: &Settings) -> Result<Self, IssuerError> {
        let client = super::provider_client(FETCH_TIMEOUT)?;
        Ok(KeySet {
            name: settings.name.clone(),
            issuer: settings.issuer.clone(),
            configured: settings.jwks_url.clone(),
            client,
            cached: RwLock::new(Arc::new(Cached::default())),
            fetching: tokio::sync::Mutex::new(Fetching::default()),
        })
    }

    /// The keys as cached now.
    pub(super) fn current(&self) -> Arc<Cached> {
        self.cached
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether a background refresh of a stale set may start now: no fetch under way, and
    /// none began within [`REFETCH_EVERY`].
    pub(super) fn refresh_due(&self) -> bool {
        self.fetching.try_lock().is_ok_and(|fetching| {
            fetching
                .last
                .is_none_or(|last| last.elapsed() >= REFETCH_EVERY)
        })
    }

    /// Fetches the set again, unless another fetch is under way (then its result is waited for)
    /// or one began less than [`REFETCH_EVERY`] ago; the keys as cached afterwards.
    pub(super) async fn refetch(&self) -> Arc<Cached> {
        let before = Instant::now();
        let mut fetching = self.fetching.lock().await;
        // A fetch that began while this one waited for the lock has just renewed the set.
        if fetching
            .last
            .is_some_and(|last| last >= before || last.elapsed() < REFETCH_EVERY)
        {
            return self.current();
        }
        fetching.last = Some(Instant::now());
        match self.fetch(&mut fetching).await {
            Ok(fresh) => {
                crate::metrics::key_set_fetched(&self.name, "fetched");
                let fresh = Arc::new(fresh);
                *self.cached.write().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
                fresh
            }
            Err(why) => {
                crate::metrics::key_set_fetched(&self.name, "failed");
                tracing::warn!(issuer = %self.name, error = %why, "cannot fetch the issuer's key set; the cached keys stay in use");
                self.current()
            }
        }
    }

    async fn fetch(&self, fetching: &mut Fetching) -> Result<Cached, String> {
        let url = match (&self.configured, &fetching.discovered) {
            (Some(url), _) | (None, Some(url)) => url.clone(),
            (None, None) => {
                let url = self.discover().await?;
                fetching.discovered = Some(url.clone());
                url
            }
        };
        let response = self.get(url.clone()).await?;
        let max_age = max_age(response.headers()).clamp(MIN_AGE, MAX_AGE);
        let body = read_bounded(response, MAX_BYTES).await?;
        let keys = parse_set(&body).map_err(|why| format!("the key set at {url}: {why}"))?;
        Ok(Cached {
            keys,
            fresh_until: Some(Instant::now() + max_age),
        })
    }

    /// The key set's URL from the issuer's discovery document (which must name this issuer).
    async fn discover(&self) -> Result<Url, String> {
        let document = discovery_document(&self.client, &self.issuer, MAX_BYTES).await?;
        let jwks = document
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or("the discovery document has no jwks_uri")?;
        secure_url(jwks)
    }

    async fn get(&self, url: Url) -> Result<reqwest::Response, String> {
        let shown = url.to_string();
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|err| format!("GET {shown}: {err}"))?;
        if !response.status().is_success() {
            return Err(format!("GET {shown}: {}", response.status()));
        }
        Ok(response)
    }
}

/// The `max-age` of a `Cache-Control` header, or the least age when there is none.
fn max_age(headers: &reqwest::header::HeaderMap) -> Duration {
    headers
        .get_all(reqwest::header::CACHE_CONTROL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|directive| {
            let (name, value) = directive.trim().split_once('=')?;
            name.eq_ignore_ascii_case("max-age")
                .then(|| value.trim().trim_matches('"').parse::<u64>().ok())
                .flatten()
        })
        .map_or(MIN_AGE, Duration::from_secs)
}

/// The verification keys of a JWKS document: its signing keys of a family we verify with; a
/// key of another kind (an encryption key, a symmetric one, an unknown curve) is skipped.
fn parse_set(body: &[u8]) -> Result<Vec<Key>, String> {
    let document: Value = serde_json::from_slice(body).map_err(|err| format!("not JSON: {err}"))?;
    let entries = document
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("no `keys` array")?;
    let mut keys = Vec::new();
    for entry in entries {
        let Ok(jwk) = serde_json::from_value::<Jwk>(entry.clone()) else {
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let family = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Family::Rsa,
            AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
                EllipticCurve::P256 => Family::P256,
                EllipticCurve::P384 => Family::P384,
                _ => continue,
            },
            AlgorithmParameters::OctetKeyPair(okp) => match okp.curve {
                EllipticCurve::Ed25519 => Family::Ed25519,
                _ => continue,
            },
            AlgorithmParameters::OctetKey(_) => continue,
        };
        // A stated algorithm the key is not for, or not one we verify, rules the key out.
        let alg = match entry.get("alg").and_then(Value::as_str) {
            Some(name) => match asymmetric(name) {
                Some(alg) if family_of(alg) == Some(family) => Some(alg),
                _ => continue,
            },
            None => None,
        };
        let Ok(decoding) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            family,
            decoding,
        });
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_set_keeps_signing_keys_of_a_known_family_and_finds_them_by_kid_and_alg() {
        let set = serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "ec", "alg": "ES256",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed",
             "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "oct", "kid": "secret", "k": "c2VjcmV0"},
            {"kty": "EC", "crv": "P-256", "kid": "enc", "use": "enc",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "EC", "crv": "P-256", "kid": "wrong-alg", "alg": "RS256",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "XYZ", "kid": "unknown"}
        ]});
        let keys = parse_set(set.to_string().as_bytes()).unwrap();
        let kids: Vec<_> = keys.iter().map(|k| k.kid.as_deref().unwrap()).collect();
        assert_eq!(kids, ["ec", "ed"]);
        let cached = Cached {
            keys,
            fresh_until: None,
        };
        assert!(cached.find(Some("ec"), Algorithm::ES256).is_some());
        assert!(cached.find(Some("ec"), Algorithm::ES384).is_none());
        assert!(cached.find(Some("ec"), Algorithm::RS256).is_none());
        assert!(cached.find(Some("ec"), Algorithm::HS256).is_none());
        assert!(cached.find(Some("ed"), Algorithm::EdDSA).is_some());
        assert!(cached.find(None, Algorithm::EdDSA).is_some());
        assert!(cached.find(Some("nope"), Algorithm::ES256).is_none());
        assert!(cached.stale());
    }

    #[test]
    fn a_key_sets_age_comes_from_cache_control() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(max_age(&headers), MIN_AGE);
        headers.insert(
            reqwest::header::CACHE_CONTROL,
            "public, max-age=3600".parse().unwrap(),
        );
        assert_eq!(max_age(&headers), Duration::from_secs(3600));
        headers.insert(reqwest::header::CACHE_CONTROL, "no-cache".parse().unwrap());
        assert_eq!(max_age(&headers), MIN_AGE);
    }
}
