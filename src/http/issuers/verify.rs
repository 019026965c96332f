//! One token, decided: which issuer it claims, then everything that issuer requires of it.

use std::sync::Arc;

use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
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
    /// For the metrics: `malformed`, `unknown_issuer`, `algorithm`, `type`, `unknown_key`,
    /// `signature`, `expired`, `not_yet_valid`, `audience`, `claims`, `no_grant`.
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
struct Parts {
    alg: Algorithm,
    kid: Option<String>,
    iss: String,
}

fn parts(token: &str) -> Result<Parts, Refused> {
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
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    let alg = super::config::asymmetric(alg).ok_or_else(|| {
        Refused::new(
            "algorithm",
            format!("the token's algorithm `{alg}` is not accepted"),
        )
    })?;
    let typ = header.get("typ").and_then(Value::as_str).unwrap_or("");
    let typ = typ.strip_prefix("application/").unwrap_or(typ);
    if !typ.eq_ignore_ascii_case("jwt") && !typ.eq_ignore_ascii_case("at+jwt") {
        return Err(Refused::new(
            "type",
            "the token's `typ` is neither JWT nor at+jwt",
        ));
    }
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
    Ok(Parts { alg, kid, iss })
}

/// Decides `token` with the keys cached now; `fetch` is whether they were just fetched (an
/// unknown key then fails closed rather than asking again).
pub(super) fn check(issuers: &[Arc<Issuer>], token: &str, fetched: bool) -> Verdict {
    let parts = match parts(token) {
        Ok(parts) => parts,
        Err(refused) => return Verdict::Refused(refused),
    };
    let Some(issuer) = issuers.iter().find(|i| i.settings.issuer == parts.iss) else {
        return Verdict::Refused(Refused::new(
            "unknown_issuer",
            "the token's issuer is not one this server trusts",
        ));
    };
    let refused = |refused: Refused| {
        crate::metrics::token_verified(&issuer.settings.name, refused.result);
        Verdict::Refused(refused)
    };
    if !issuer.settings.algorithms.contains(&parts.alg) {
        return refused(Refused::new(
            "algorithm",
            format!(
                "the token's algorithm {:?} is not accepted from this issuer",
                parts.alg
            ),
        ));
    }
    let keys = issuer.keys.current();
    if keys.stale()
        && !fetched
        && keys.find(parts.kid.as_deref(), parts.alg).is_some()
        && issuer.keys.refresh_due()
    {
        // Still usable while a fresh copy is fetched behind this request.
        let issuer = issuer.clone();
        tokio::spawn(async move { drop(issuer.keys.refetch().await) });
    }
    let Some(key) = keys.find(parts.kid.as_deref(), parts.alg) else {
        if fetched {
            return refused(Refused::new(
                "unknown_key",
                "the token's key is not in its issuer's key set",
            ));
        }
        return Verdict::Fetch;
    };
    let settings = &issuer.settings;
    let mut validation = Validation::new(parts.alg);
    validation.leeway = settings.leeway.as_secs();
    validation.validate_nbf = true;
    validation.set_audience(&settings.audiences);
    validation.set_issuer(&[&settings.issuer]);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    let claims = match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
    {
        Ok(data) => data.claims,
        Err(err) => return refused(refusal(err.kind())),
    };
    let Some(name) = claims
        .get(&settings.name_claim)
        .and_then(|value| match value {
            Value::String(text) if !text.is_empty() => Some(text.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
    else {
        return refused(Refused::new(
            "claims",
            format!(
                "the token has no `{}` to name its principal",
                settings.name_claim
            ),
        ));
    };
    let role = match grants::role(&settings.grants, &claims) {
        Ok(role) => role,
        Err(why) => {
            let message = match why {
                NoRole::NoGrant => "the token matches no grant of its issuer",
                NoRole::CallerAndApprover => {
                    "the token matches a caller's grant and an approver's: whoever calls tools \
                     never decides on them"
                }
            };
            return refused(Refused {
                result: "no_grant",
                message: message.into(),
                forbidden: true,
            });
        }
    };
    issuer.accepted.inc();
    Verdict::Accepted(Principal {
        name: Some(format!("{}:{name}", settings.name)),
        role,
    })
}

/// Decides `token`, fetching its issuer's key set first when its key is not cached.
pub(super) async fn check_fetching(
    issuers: &[Arc<Issuer>],
    token: &str,
) -> Result<Principal, Refused> {
    match check(issuers, token, false) {
        Verdict::Accepted(principal) => return Ok(principal),
        Verdict::Refused(refused) => return Err(refused),
        Verdict::Fetch => {}
    }
    // `check` found the issuer, so it is found again.
    if let Ok(parts) = parts(token)
        && let Some(issuer) = issuers.iter().find(|i| i.settings.issuer == parts.iss)
    {
        issuer.keys.refetch().await;
    }
    match check(issuers, token, true) {
        Verdict::Accepted(principal) => Ok(principal),
        Verdict::Refused(refused) => Err(refused),
        Verdict::Fetch => unreachable!("a check after a fetch never asks for another"),
    }
}

fn refusal(kind: &jsonwebtoken::errors::ErrorKind) -> Refused {
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
