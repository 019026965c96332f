//! One token, decided: which issuer it claims, then everything that issuer requires of it.

use std::net::IpAddr;
use std::sync::Arc;

use base64::Engine;
use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};

use super::Issuer;
use super::grants::{self, NoRole};
use crate::dispatch::who::Principal;

/// What deciding a token from the cache came to.
pub(crate) enum Verdict {
    /// Its principal.
    Accepted(Principal),
    /// Refused.
    Refused(Refused),
    /// Its issuer's key set must be fetched first (its key is not cached).
    Fetch,
}

/// Why a token is refused: a short word, counted in `/metrics`, and what the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// For the metrics: `malformed`, `critical`, `unknown_issuer`, `algorithm`, `type`,
    /// `unknown_key`, `signature`, `expired`, `not_yet_valid`, `audience`, `claims`, `no_grant`,
    /// `inactive`, `introspection_failed`, `introspection_limited`.
    pub(crate) result: &'static str,
    /// For the client.
    pub(crate) message: String,
    /// Whether it was a valid token, only without a role here: `403`, not `401`.
    pub(crate) forbidden: bool,
}

impl Refused {
    fn new(result: &'static str, message: impl Into<String>) -> Self {
        Refused {
            result,
            message: message.into(),
            forbidden: false,
        }
    }
}

/// The unverified parts of a token needed to choose how to verify it.
pub(super) struct Parts {
    pub(super) alg: Algorithm,
    pub(super) kid: Option<String>,
    pub(super) iss: String,
    /// The header's `typ` (`application/` taken off), if any.
    pub(super) typ: Option<String>,
}

impl Parts {
    /// Whether `typ` says a JWT access token may be this: `JWT` or `at+jwt` (RFC 9068).
    fn typed_as_access_token(&self) -> bool {
        self.typ.as_deref().is_some_and(|typ| {
            typ.eq_ignore_ascii_case("jwt") || typ.eq_ignore_ascii_case("at+jwt")
        })
    }
}

pub(super) fn parts(token: &str) -> Result<Parts, Refused> {
    let malformed = || Refused::new("malformed", "the token is not a signed JWT");
    let mut segments = token.split('.');
    let (Some(header), Some(payload), Some(_), None) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return Err(malformed());
    };
    let decode = |segment: &str| -> Result<Map<String, Value>, Refused> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(segment)
            .map_err(|_| malformed())?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(malformed()),
        }
    };
    let header = decode(header)?;
    // RFC 7515 4.1.11: a recipient refuses a token whose `crit` names header parameters it
    // does not understand; toolgate understands none that may be critical.
    if header.contains_key("crit") {
        return Err(Refused::new(
            "critical",
            "the token's header names critical parameters (`crit`) toolgate does not understand",
        ));
    }
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    let alg = super::config::asymmetric(alg).ok_or_else(|| {
        Refused::new(
            "algorithm",
            format!("the token's algorithm `{alg}` is not accepted"),
        )
    })?;
    let typ = header
        .get("typ")
        .and_then(Value::as_str)
        .map(|typ| typ.strip_prefix("application/").unwrap_or(typ).to_owned());
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(malformed()),
    };
    let iss = decode(payload)?
        .get("iss")
        .and_then(Value::as_str)
        .ok_or_else(|| Refused::new("claims", "the token has no `iss`"))?
        .to_owned();
    Ok(Parts { alg, kid, iss, typ })
}

/// Decides `token` with the keys cached now; `fetch` is whether they were just fetched (an
/// unknown key then fails closed rather than asking again).
pub(super) fn check(issuers: &[Arc<Issuer>], token: &str, fetched: bool) -> Verdict {
    if !looks_like_jwt(token) && issuers.iter().any(|i| i.introspector.is_some()) {
        return opaque_cached(issuers, token);
    }
    // Refused before its issuer is known: counted under no issuer's name.
    let unattributed = |refused: Refused| {
        crate::metrics::token_verified("", refused.result);
        Verdict::Refused(refused)
    };
    let parts = match parts(token) {
        Ok(parts) if parts.typed_as_access_token() => parts,
        Ok(_) => {
            return unattributed(Refused::new(
                "type",
                "the token's `typ` is neither JWT nor at+jwt",
            ));
        }
        Err(refused) => return unattributed(refused),
    };
    let Some(issuer) = issuers.iter().find(|i| i.settings.issuer == parts.iss) else {
        return unattributed(Refused::new(
            "unknown_issuer",
            "the token's issuer is not one this server trusts",
        ));
    };
    let refused = |refused: Refused| {
        crate::metrics::token_verified(&issuer.settings.name, refused.result);
        Verdict::Refused(refused)
    };
    let Some(validation) = issuer.settings.validation(parts.alg) else {
        return refused(Refused::new(
            "algorithm",
            format!(
                "the token's algorithm {:?} is not accepted from this issuer",
                parts.alg
            ),
        ));
    };
    let keys = issuer.keys.current();
    let key = keys.find(parts.kid.as_deref(), parts.alg);
    if key.is_some() && keys.stale() && !fetched && issuer.keys.refresh_due() {
        // Still usable while a fresh copy is fetched behind this request.
        let issuer = issuer.clone();
        tokio::spawn(async move { drop(issuer.keys.refetch().await) });
    }
    let Some(key) = key else {
        if fetched {
            return refused(Refused::new(
                "unknown_key",
                "the token's key is not in its issuer's key set",
            ));
        }
        // A fetch for a key the set lacks takes the issuer's window for 30 s: spent only on a
        // token that every check but its signature admits, so that a made-up one with stale or
        // misdirected claims does not keep a rotation's first real token waiting.
        if let Err(why) = claims_admitted(token, validation) {
            return refused(why);
        }
        return Verdict::Fetch;
    };
    let claims = match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, validation)
    {
        Ok(data) => data.claims,
        Err(err) => return refused(refusal(err.kind())),
    };
    // An ID token (typ JWT too, same issuer and keys, and an `aud` that may be a client id
    // listed in `audiences`) says who signed in somewhere, not what they may do here.
    if ["nonce", "at_hash", "c_hash"]
        .iter()
        .any(|claim| claims.contains_key(*claim))
    {
        return refused(Refused::new("type", "an ID token is no access token"));
    }
    match principal(issuer, &claims) {
        Ok(principal) => Verdict::Accepted(with_token(principal, issuer, token)),
        Err(why) => refused(why),
    }
}

/// `principal` keeping the `token` it was admitted with (a secret, for an upstream that acts as
/// the caller).
fn with_token(principal: Principal, issuer: &Issuer, token: &str) -> Principal {
    let subject = principal.name.as_deref().unwrap_or_default();
    let token = crate::base::CallerToken::new(token, issuer.name(), subject);
    Principal {
        token: Some(token),
        ..principal
    }
}

/// The principal of an accepted token's `claims` under `issuer`'s grants (counted accepted).
pub(super) fn principal(
    issuer: &Issuer,
    claims: &Map<String, Value>,
) -> Result<Principal, Refused> {
    let settings = &issuer.settings;
    let named = |claim: &str| {
        claims.get(claim).and_then(|value| match value {
            Value::String(text) if !text.is_empty() => Some(text.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
    };
    // A client's own token (client credentials) may name no subject; it is the client's.
    let name = named(&settings.name_claim)
        .or_else(|| {
            (settings.name_claim == "sub")
                .then(|| named("client_id"))
                .flatten()
        })
        .ok_or_else(|| {
            Refused::new(
                "claims",
                format!(
                    "the token has no `{}` to name its principal",
                    settings.name_claim
                ),
            )
        })?;
    // The name is recorded on calls and shown in pages: bounded, and nothing in it that a
    // terminal or a page would act on.
    if name.len() > MAX_NAME_BYTES || name.chars().any(is_hidden) {
        return Err(Refused::new(
            "claims",
            format!(
                "the token's `{}` is longer than {MAX_NAME_BYTES} bytes or holds control characters",
                settings.name_claim
            ),
        ));
    }
    let rights = grants::rights(&settings.grants, claims).map_err(|why| {
        let message = match why {
            NoRole::NoGrant => "the token matches no grant of its issuer",
            NoRole::CallerAndApprover => {
                "the token matches a caller's grant and an approver's: whoever calls tools \
                 never decides on them"
            }
        };
        Refused {
            result: "no_grant",
            message: message.into(),
            forbidden: true,
        }
    })?;
    issuer.accepted.inc();
    let scopes: Vec<String> = grants::scopes(claims).map(str::to_owned).collect();
    Ok(Principal {
        name: Some(format!("{}:{name}", settings.name)),
        role: rights.role,
        tools: rights.tools,
        decides: rights.decides,
        scopes: Some(scopes.into()),
        display: None,
        claims: Some(Arc::new(claims.clone())),
        token: None,
    })
}

/// The longest principal name a token may give (its name claim), in bytes.
const MAX_NAME_BYTES: usize = 256;

/// Whether `c` is a control character or one that reorders text (a bidi override or
/// isolate): never part of a name shown to people.
pub(super) fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `token` has a JWS's three parts; anything else is an opaque token.
fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}

/// An opaque token decided from the introspection answers cached: active at an issuer
/// (then held to that issuer's rules), inactive at every one that introspects, or unknown.
fn opaque_cached(issuers: &[Arc<Issuer>], token: &str) -> Verdict {
    let hash = crate::base::token_sha256(token);
    let mut unknown = false;
    for issuer in issuers {
        let Some(introspector) = &issuer.introspector else {
            continue;
        };
        match introspector.cached(&hash) {
            Some(Some(claims)) => return decide_introspected(issuer, token, &claims),
            Some(None) => {}
            None => unknown = true,
        }
    }
    if unknown {
        Verdict::Fetch
    } else {
        Verdict::Refused(Refused::new(
            "inactive",
            "the token is not active at its issuer",
        ))
    }
}

/// An active token's introspection answer, held to `issuer`'s `iss`, `aud`, `exp` and `nbf`.
fn decide_introspected(issuer: &Issuer, token: &str, claims: &Map<String, Value>) -> Verdict {
    let settings = &issuer.settings;
    let refused = |refused: Refused| {
        crate::metrics::token_verified(&settings.name, refused.result);
        Verdict::Refused(refused)
    };
    if claims
        .get("iss")
        .and_then(Value::as_str)
        .is_some_and(|iss| iss != settings.issuer)
    {
        return refused(Refused::new(
            "unknown_issuer",
            "the token's issuer is wrong",
        ));
    }
    let meant_here = match claims.get("aud") {
        Some(Value::String(aud)) => settings.audiences.contains(aud),
        Some(Value::Array(auds)) => auds
            .iter()
            .filter_map(Value::as_str)
            .any(|aud| settings.audiences.iter().any(|a| a == aud)),
        _ => false,
    };
    if !meant_here {
        return refused(Refused::new(
            "audience",
            "the token is not meant for this server (`aud`)",
        ));
    }
    let now = super::unix_now();
    let leeway = settings.leeway.as_secs();
    if claims
        .get("token_type")
        .and_then(Value::as_str)
        .is_some_and(|kind| {
            !["bearer", "access_token", "dpop"].contains(&kind.to_ascii_lowercase().as_str())
        })
    {
        return refused(Refused::new("type", "the token is no access token"));
    }
    if claims
        .get("exp")
        .and_then(Value::as_u64)
        .is_some_and(|exp| exp.saturating_add(leeway) < now)
    {
        return refused(Refused::new("expired", "the token has expired"));
    }
    if claims
        .get("nbf")
        .and_then(Value::as_u64)
        .is_some_and(|nbf| nbf > now.saturating_add(leeway))
    {
        return refused(Refused::new("not_yet_valid", "the token is not valid yet"));
    }
    match principal(issuer, claims) {
        Ok(principal) => Verdict::Accepted(with_token(principal, issuer, token)),
        Err(why) => refused(why),
    }
}

/// Asks each introspecting issuer without an answer cached about the opaque `token`: the
/// first that says it is active decides it.
async fn introspect(
    issuers: &[Arc<Issuer>],
    token: &str,
    client: Option<IpAddr>,
) -> Result<Principal, Refused> {
    // What cannot be an issuer's token is never sent to one.
    if !super::introspect::could_be_token(token) {
        return Err(Refused::new(
            "malformed",
            "the bearer is neither a JWT nor an access token's characters",
        ));
    }
    let hash = crate::base::token_sha256(token);
    let (mut failed, mut limited) = (false, false);
    for issuer in issuers {
        let Some(introspector) = &issuer.introspector else {
            continue;
        };
        let answer = match introspector.cached(&hash) {
            Some(answer) => answer,
            // A token new to the cache spends the client's allowance first.
            None if !introspector.may_ask(client) => {
                crate::metrics::token_verified(&issuer.settings.name, "introspection_limited");
                limited = true;
                continue;
            }
            None => match introspector.introspect(token, hash).await {
                Ok(answer) => answer,
                Err(why) => {
                    // At most one line every 10 s: any client can make introspection fail.
                    if introspector.may_log() {
                        tracing::warn!(issuer = %issuer.settings.name, error = %why, "cannot introspect a token");
                    }
                    crate::metrics::token_verified(&issuer.settings.name, "introspection_failed");
                    failed = true;
                    continue;
                }
            },
        };
        let Some(claims) = answer else {
            crate::metrics::token_verified(&issuer.settings.name, "inactive");
            continue;
        };
        return match decide_introspected(issuer, token, &claims) {
            Verdict::Accepted(principal) => Ok(principal),
            Verdict::Refused(refused) => Err(refused),
            Verdict::Fetch => unreachable!("an answer is decided"),
        };
    }
    Err(if failed {
        Refused::new(
            "introspection_failed",
            "the token could not be checked at its issuer now",
        )
    } else if limited {
        Refused::new(
            "introspection_limited",
            "too many new tokens from this address to check now; try again in a few seconds",
        )
    } else {
        Refused::new("inactive", "the token is not active at its issuer")
    })
}

/// Decides `token`, fetching its issuer's key set first when its key is not cached, or
/// introspecting it when it is opaque.
pub(super) async fn check_fetching(
    issuers: &[Arc<Issuer>],
    token: &str,
    client: Option<IpAddr>,
) -> Result<Principal, Refused> {
    match check(issuers, token, false) {
        Verdict::Accepted(principal) => return Ok(principal),
        Verdict::Refused(refused) => return Err(refused),
        Verdict::Fetch => {}
    }
    if !looks_like_jwt(token) {
        return introspect(issuers, token, client).await;
    }
    // `check` found the issuer, so it is found again.
    if let Ok(parts) = parts(token)
        && let Some(issuer) = issuers.iter().find(|i| i.settings.issuer == parts.iss)
    {
        // In a task of its own: a client that hangs up must not abandon a fetch that has
        // already taken the issuer's 30 s window.
        let issuer = issuer.clone();
        let _ = tokio::spawn(async move { drop(issuer.keys.refetch().await) }).await;
    }
    match check(issuers, token, true) {
        Verdict::Accepted(principal) => Ok(principal),
        Verdict::Refused(refused) => Err(refused),
        Verdict::Fetch => unreachable!("a check after a fetch never asks for another"),
    }
}

/// Whether `token`'s claims pass `validation` (its issuer's: audience, expiry, not-before),
/// its signature unchecked: the key that would check it is not known yet.
fn claims_admitted(token: &str, validation: &jsonwebtoken::Validation) -> Result<(), Refused> {
    let mut unsigned = validation.clone();
    unsigned.insecure_disable_signature_validation();
    // Never a key: with the signature unchecked, none is read.
    let none = jsonwebtoken::DecodingKey::from_secret(&[]);
    jsonwebtoken::decode::<Map<String, Value>>(token, &none, &unsigned)
        .map(drop)
        .map_err(|err| refusal(err.kind()))
}

pub(super) fn refusal(kind: &jsonwebtoken::errors::ErrorKind) -> Refused {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::ExpiredSignature => Refused::new("expired", "the token has expired"),
        ErrorKind::ImmatureSignature => Refused::new("not_yet_valid", "the token is not valid yet"),
        ErrorKind::InvalidAudience => {
            Refused::new("audience", "the token is not meant for this server (`aud`)")
        }
        ErrorKind::InvalidIssuer => Refused::new("unknown_issuer", "the token's issuer is wrong"),
        ErrorKind::InvalidSignature => Refused::new("signature", "the token's signature is wrong"),
        ErrorKind::MissingRequiredClaim(claim) => {
            Refused::new("claims", format!("the token has no `{claim}`"))
        }
        ErrorKind::InvalidAlgorithm => {
            Refused::new("algorithm", "the token's algorithm does not fit its key")
        }
        _ => Refused::new("malformed", "the token could not be read"),
    }
}
