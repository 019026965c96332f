//! A person signing in with an issuer: OpenID Connect's authorization code flow with PKCE, as
//! the inbox's single sign-on uses it (`[inbox.oidc]`).
//!
//! This server is the relying party: it sends the browser to the issuer's
//! `authorization_endpoint` (from its discovery document) with `state`, `nonce` and an S256
//! `code_challenge`; it exchanges the code the browser brings back at the `token_endpoint`,
//! authenticating as its client (HTTP Basic, RFC 6749 2.3.1), with the `code_verifier`; and it
//! verifies the ID token it gets as every token of the issuer is verified (its signature with the
//! issuer's key set, fetched once for an unknown key; `iss`; `exp` and `nbf` with the leeway),
//! with `aud` naming this client, `azp` (if any) this client, and `nonce` the one this sign-in
//! sent. The person is `<issuer name>:<name claim>`, with the rights the issuer's grants give
//! the ID token's claims, and a display name from its `name` or `email`.
//!
//! Nothing of a token is logged; the client secret is only ever sent to the token endpoint.

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};
use sha2::Digest;
use subtle::ConstantTimeEq;
use tokio::sync::OnceCell;
use url::Url;

use super::config::secure_url;
use super::verify::{self, Refused};
use super::{Issuer, IssuerError, Issuers};
use crate::base::{discovery_document, read_bounded};
use crate::dispatch::who::Principal;

/// How long one request to the issuer may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from the issuer.
const MAX_BYTES: usize = 256 * 1024;
/// The longest display name kept, in characters.
const MAX_DISPLAY_CHARS: usize = 200;

/// The issuer's endpoints, from its discovery document.
#[derive(Debug)]
struct Endpoints {
    authorization: Url,
    token: Url,
}

/// Signing people in with one issuer, as one client of it.
pub struct SignIn {
    issuer: Arc<Issuer>,
    client_id: String,
    client_secret: String,
    scopes: String,
    client: reqwest::Client,
    endpoints: OnceCell<Endpoints>,
    fingerprint: String,
}

impl std::fmt::Debug for SignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIn")
            .field("issuer", &self.issuer.settings.name)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// Why a sign-in did not work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignInError {
    /// The issuer could not be reached, or answered what it should not have.
    Provider(String),
    /// The ID token was refused.
    Refused(String),
    /// A valid ID token, whose grants give no role here.
    Forbidden(String),
}

impl Issuers {
    /// Sign-in with the issuer named `name`, as the client `client_id` (its secret
    /// `client_secret`), asking for `scopes` (`openid` always among them).
    pub fn sign_in(
        &self,
        name: &str,
        client_id: &str,
        client_secret: String,
        scopes: &[String],
    ) -> Result<SignIn, IssuerError> {
        let issuer = self
            .issuers
            .iter()
            .find(|issuer| issuer.settings.name == name)
            .ok_or_else(|| {
                IssuerError(format!(
                    "[inbox.oidc] issuer `{name}` is no [[auth.issuers]] name"
                ))
            })?
            .clone();
        if client_id.trim().is_empty() {
            return Err(IssuerError("[inbox.oidc] client_id is empty".into()));
        }
        let mut asked: Vec<&str> = vec!["openid"];
        for scope in scopes {
            let token_char = |b: u8| b.is_ascii_graphic() && b != b'"' && b != b'\\';
            if scope.is_empty() || !scope.bytes().all(token_char) {
                return Err(IssuerError(format!(
                    "[inbox.oidc] scopes: `{scope}` is not a scope"
                )));
            }
            if !asked.contains(&scope.as_str()) {
                asked.push(scope);
            }
        }
        let grants = format!(
            "{}\0{}\0{client_id}\0{:?}",
            issuer.settings.issuer, issuer.settings.name_claim, issuer.settings.grants
        );
        let fingerprint = hex::encode(sha2::Sha256::digest(grants.as_bytes()));
        Ok(SignIn {
            fingerprint,
            issuer,
            client_id: client_id.to_owned(),
            client_secret,
            scopes: asked.join(" "),
            client: super::provider_client(TIMEOUT)?,
            endpoints: OnceCell::new(),
        })
    }
}

impl SignIn {
    /// The issuer's name, as people see it on the sign-in page.
    pub fn issuer_name(&self) -> &str {
        &self.issuer.settings.name
    }

    /// What a person's session is bound to: this issuer, this client and the grants as
    /// configured (a hex SHA-256). A session made under other grants ends at once.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The issuer's URL, as its answers' `iss` say it.
    pub fn issuer_url(&self) -> &str {
        &self.issuer.settings.issuer
    }

    /// Where to send the browser: the issuer's authorization endpoint, asking for a code for
    /// `redirect_uri`, with `state`, `nonce` and the S256 `challenge` of the sign-in's verifier.
    pub(crate) async fn authorization_url(
        &self,
        redirect_uri: &str,
        state: &str,
        nonce: &str,
        challenge: &str,
    ) -> Result<Url, SignInError> {
        let mut url = self.endpoints().await?.authorization.clone();
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", &self.scopes)
            .append_pair("state", state)
            .append_pair("nonce", nonce)
            .append_pair("code_challenge", challenge)
            .append_pair("code_challenge_method", "S256");
        Ok(url)
    }

    /// The person the browser brought `code` back for: the code exchanged (with `verifier`,
    /// for `redirect_uri`), its ID token verified, with `nonce` the sign-in's.
    pub(crate) async fn finish(
        &self,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<Principal, SignInError> {
        let token_url = self.endpoints().await?.token.clone();
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_verifier", verifier)
            .finish();
        let secret = &self.client_secret;
        let basic = Some((self.client_id.as_str(), secret.as_str()));
        let response = crate::base::form_post(&self.client, token_url, basic, body)
            .send()
            .await
            .map_err(|err| SignInError::Provider(format!("the token endpoint: {err}")))?;
        let status = response.status();
        let bytes = read_bounded(response, MAX_BYTES)
            .await
            .map_err(SignInError::Provider)?;
        let answer: Map<String, Value> = serde_json::from_slice(&bytes).unwrap_or_default();
        if !status.is_success() {
            // The provider's error code says what went wrong (an expired or reused code, say);
            // its description is not trusted into a page, so only a code-shaped error is kept.
            let error = answer
                .get("error")
                .and_then(Value::as_str)
                .filter(|e| {
                    e.len() <= 64 && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                })
                .unwrap_or("no error code");
            return Err(SignInError::Provider(format!(
                "the token endpoint answered {status} ({error})"
            )));
        }
        let id_token = answer
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| SignInError::Provider("the token endpoint sent no id_token".into()))?;
        self.verify(id_token, nonce).await
    }

    /// The person of `id_token`, if it is this issuer's, for this client, of this sign-in.
    async fn verify(&self, id_token: &str, nonce: &str) -> Result<Principal, SignInError> {
        let refused = |why: Refused| SignInError::Refused(why.message);
        let parts = verify::parts(id_token).map_err(refused)?;
        // `typ` is optional on an ID token (OpenID Connect leaves it out); when present it
        // must say JWT.
        if parts
            .typ
            .as_deref()
            .is_some_and(|typ| !typ.eq_ignore_ascii_case("jwt"))
        {
            return Err(SignInError::Refused(
                "the ID token's `typ` is not JWT".into(),
            ));
        }
        let settings = &self.issuer.settings;
        if parts.iss != settings.issuer {
            return Err(SignInError::Refused(
                "the ID token is from another issuer".into(),
            ));
        }
        let mut validation = settings
            .validation(parts.alg)
            .ok_or_else(|| {
                SignInError::Refused(format!(
                    "the ID token's algorithm {:?} is not accepted",
                    parts.alg
                ))
            })?
            .clone();
        validation.set_audience(&[&self.client_id]);
        let claims = self
            .decode(id_token, parts.kid.as_deref(), parts.alg, &validation)
            .await?;
        if let Some(azp) = claims.get("azp").and_then(Value::as_str)
            && azp != self.client_id
        {
            return Err(SignInError::Refused(
                "the ID token was issued to another client".into(),
            ));
        }
        let sent = claims.get("nonce").and_then(Value::as_str).unwrap_or("");
        if !bool::from(sent.as_bytes().ct_eq(nonce.as_bytes())) || nonce.is_empty() {
            return Err(SignInError::Refused(
                "the ID token is not of this sign-in (its nonce differs)".into(),
            ));
        }
        let principal = verify::principal(&self.issuer, &claims).map_err(|why| {
            if why.forbidden {
                SignInError::Forbidden(why.message)
            } else {
                SignInError::Refused(why.message)
            }
        })?;
        // Shown in pages and recorded on calls: what could hide or reorder text is dropped.
        let display = ["name", "email"]
            .iter()
            .filter_map(|claim| claims.get(*claim).and_then(Value::as_str))
            .map(|name| {
                let shown: String = name.chars().filter(|c| !verify::is_hidden(*c)).collect();
                shown
                    .trim()
                    .chars()
                    .take(MAX_DISPLAY_CHARS)
                    .collect::<String>()
            })
            .find(|name| !name.is_empty());
        Ok(Principal {
            display,
            ..principal
        })
    }

    /// The verified claims of `token`, with the key of `kid` (the key set fetched once if the
    /// cache does not know it).
    async fn decode(
        &self,
        token: &str,
        kid: Option<&str>,
        alg: Algorithm,
        validation: &jsonwebtoken::Validation,
    ) -> Result<Map<String, Value>, SignInError> {
        let keys = &self.issuer.keys;
        let mut cached = keys.current();
        if cached.find(kid, alg).is_none() {
            cached = keys.refetch().await;
        }
        let key = cached.find(kid, alg).ok_or_else(|| {
            SignInError::Refused("the ID token's key is not in its issuer's key set".into())
        })?;
        jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, validation)
            .map(|data| data.claims)
            .map_err(|err| SignInError::Refused(verify::refusal(err.kind()).message))
    }

    /// The issuer's endpoints, read once from its OpenID Connect discovery document (which
    /// must name this issuer); a failure is tried again on the next sign-in.
    async fn endpoints(&self) -> Result<&Endpoints, SignInError> {
        self.endpoints
            .get_or_try_init(|| async {
                let issuer = self.issuer.settings.issuer.as_str();
                let document = discovery_document(&self.client, issuer, MAX_BYTES).await?;
                let endpoint = |field: &str| {
                    document
                        .get(field)
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("the discovery document has no {field}"))
                        .and_then(secure_url)
                };
                Ok(Endpoints {
                    authorization: endpoint("authorization_endpoint")?,
                    token: endpoint("token_endpoint")?,
                })
            })
            .await
            .map_err(SignInError::Provider)
    }
}
