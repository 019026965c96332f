//! Signing in and out, the session cookie, and the CSRF tokens bound to it.
//!
//! A session id is 256 random bits from the OS, sent to the browser once, in the `HttpOnly`,
//! `SameSite=Strict` cookie [`SESSION_COOKIE`]; the store keeps only its SHA-256. Each request
//! finds the session by that hash, refuses it once expired, and checks that the key it was made
//! with is still configured, under the same name and token, with an approver or admin role: a
//! key removed, re-issued or demoted to `caller` ends its sessions at once.
//!
//! The CSRF token of a session is the SHA-256 of a domain-separated string with the session id:
//! only a page rendered for that session knows it (the cookie cannot be read by scripts, and
//! `SameSite=Strict` keeps it off cross-site requests too). The sign-in form has no session yet;
//! it is protected by a double-submit token: a random value in its own `SameSite=Strict` cookie
//! [`SIGN_IN_COOKIE`] that the form must repeat, so another site cannot sign a person in under
//! a key of its choosing.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::InboxState;
use super::views::{Base, Nav, PageError, page, see_other};
use crate::dispatch::Dispatcher;
use crate::http::auth::{ApiKey, Principal, Reach, Role};
use crate::identity;
use crate::slots::Slot;
use crate::store::{InboxSession, Store, Timestamp};

/// The session cookie.
pub(crate) const SESSION_COOKIE: &str = "toolgate_inbox";

/// The sign-in form's double-submit cookie.
pub(crate) const SIGN_IN_COOKIE: &str = "toolgate_inbox_sign_in";

/// How long a sign-in form stays valid, in seconds.
const SIGN_IN_TTL_S: u64 = 3600;

/// One request to the inbox, as every handler starts from it: the inbox, where it is mounted,
/// and the request's headers (its cookies, its `X-Forwarded-Proto`).
pub(crate) struct Visit {
    pub(crate) app: InboxState,
    pub(crate) base: Base,
    pub(crate) headers: HeaderMap,
}

impl FromRequestParts<InboxState> for Visit {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, app: &InboxState) -> Result<Self, Infallible> {
        let Ok(base) = Base::from_request_parts(parts, app).await;
        Ok(Visit {
            app: app.clone(),
            base,
            headers: parts.headers.clone(),
        })
    }
}

/// A signed-in person, as a page sees them.
#[derive(Debug, Clone)]
pub(crate) struct Signed {
    /// Who acts: the key's name, or `<issuer>:<subject>` for a person signed in with an
    /// identity provider (recorded as the actor of every decision), and their rights.
    pub(crate) principal: Principal,
    /// The CSRF token every form of this session carries.
    pub(crate) csrf: String,
    /// A cookie to set with the answer: a session just made (auth off makes one by itself).
    pub(crate) set_cookie: Option<HeaderValue>,
    /// The request's slot of `max_in_flight`, taken once the session checked out (a request
    /// without one never holds a slot), given back with the answer; a stream gives it back as
    /// it starts.
    pub(crate) _slot: Option<Arc<Slot>>,
    /// The session's hash in the store (none with auth off, whose sessions are not stored): a
    /// stream ends once it is gone.
    pub(crate) stored: Option<String>,
    /// On a decision link's page (`link.rs`), where its forms post: `…/inbox/link/{signed}`;
    /// the page then has no sign-in header and no form but the approval's.
    pub(crate) link: Option<String>,
}

impl Signed {
    /// The page header's facts.
    pub(crate) fn nav(&self) -> Nav {
        let name = self.principal.name.as_deref();
        Nav {
            who: match (&self.principal.display, name) {
                (Some(display), Some(name)) => format!("{display} ({name})"),
                (None, Some(name)) => name.to_owned(),
                (_, None) => "auth off (admin)".into(),
            },
            csrf: self.csrf.clone(),
        }
    }

    /// Whether `sent` is this session's CSRF token, compared in constant time.
    pub(crate) fn check_csrf(&self, sent: Option<&str>) -> Result<(), PageError> {
        match sent {
            Some(sent) if bool::from(sent.as_bytes().ct_eq(self.csrf.as_bytes())) => Ok(()),
            _ => Err(PageError::Csrf),
        }
    }

    /// Resolves once the session is gone from the store (signed out on any replica, or run
    /// out), looked up once a second; never, for the unstored sessions of auth off. A live
    /// stream of the session ends with it.
    pub(crate) fn ended(&self, store: Arc<dyn Store>) -> impl Future<Output = ()> + Send + 'static {
        let stored = self.stored.clone();
        async move {
            let Some(hash) = stored else {
                return std::future::pending().await;
            };
            let mut ticks = tokio::time::interval(std::time::Duration::from_secs(1));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                // A store that cannot answer now ends nothing: the next tick asks again.
                if let Ok(None) = store.session(&hash, Timestamp::now()).await {
                    return;
                }
            }
        }
    }

    /// `template` rendered as an answer with `status` (and the session's new cookie).
    pub(crate) fn show(&self, status: StatusCode, template: &impl Template) -> Response {
        self.answer(page(status, template))
    }

    /// `response` with the session's new cookie, if it has one.
    pub(crate) fn answer(&self, mut response: Response) -> Response {
        if let Some(cookie) = &self.set_cookie {
            response
                .headers_mut()
                .append(header::SET_COOKIE, cookie.clone());
        }
        response
    }
}

/// The client's address, when the server was started with connect info.
pub(crate) struct ClientAddr(pub(crate) Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|info| info.0.ip()),
        ))
    }
}

/// The value of the cookie `name` in the request, if it sent one.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part);
    }
    hex::encode(hash.finalize())
}

/// What the store finds a session by.
pub(super) fn id_hash(id: &str) -> String {
    sha256_hex(&[id.as_bytes()])
}

/// The CSRF token of the session `id`.
pub(super) fn csrf_token(id: &str) -> String {
    sha256_hex(&[b"toolgate inbox csrf\0", id.as_bytes()])
}

/// What a session records of its key: enough to tell it is still the same key, not its token.
fn fingerprint(key: &ApiKey) -> String {
    sha256_hex(&[b"toolgate inbox key\0", &key.token_sha256])
}

/// 256 random bits, URL-safe.
pub(crate) fn random_id() -> Result<String, PageError> {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|err| {
        tracing::error!(error = %err, "the OS gave no random bytes");
        PageError::Internal
    })?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Whether cookies are `Secure`: configured so, or the request came over TLS (as a reverse
/// proxy in front says with `X-Forwarded-Proto`).
pub(crate) fn secure_cookies(visit: &Visit) -> bool {
    visit.app.options.secure_cookies
        || visit
            .headers
            .get("x-forwarded-proto")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, for the inbox's path only.
pub(super) fn set_cookie(
    name: &str,
    value: &str,
    base: &Base,
    max_age_s: u64,
    secure: bool,
) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path={}; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{secure}",
        base.0
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

impl Visit {
    /// The signed-in person, if the request carries a live session whose key still may decide.
    /// With auth off, a request without one gets a new anonymous session (to be set with the
    /// answer).
    pub(crate) async fn signed(&self) -> Result<Option<Signed>, PageError> {
        let keys = &self.app.keys;
        if !keys.enabled() {
            // Auth off: everyone is the anonymous admin, as on every REST request, and nothing
            // is stored: the session is the cookie alone, there to bind the forms' CSRF token.
            let principal = Principal::anonymous();
            let (id, set_cookie) = match cookie(&self.headers, SESSION_COOKIE) {
                Some(id) if looks_like_id(id) => (id.to_owned(), None),
                _ => {
                    let id = random_id()?;
                    let ttl = self.app.options.session_ttl.as_secs();
                    let made =
                        set_cookie(SESSION_COOKIE, &id, &self.base, ttl, secure_cookies(self));
                    (id, Some(made))
                }
            };
            return Ok(Some(Signed {
                principal,
                csrf: csrf_token(&id),
                set_cookie,
                _slot: Some(self.slot()?),
                stored: None,
                link: None,
            }));
        }
        let Some(id) = cookie(&self.headers, SESSION_COOKIE) else {
            return Ok(None);
        };
        let hash = id_hash(id);
        let store = self.app.dispatcher.store();
        let Some(session) = store.session(&hash, Timestamp::now()).await? else {
            return Ok(None);
        };
        if let Some(bound) = session
            .key_fingerprint
            .as_deref()
            .and_then(|marker| marker.strip_prefix(PERSON_MARKER))
        {
            let bound = bound.to_owned();
            return self.person(session, &bound, id, hash).await;
        }
        // The key must still be configured, the same key, and still an approver's; and keys
        // must still sign people in.
        let key = keys
            .iter()
            .filter(|_| self.app.options.key_sign_in)
            .find(|key| {
                session.key_name.as_deref() == Some(key.name.as_str())
                    && session.key_fingerprint.as_deref() == Some(fingerprint(key).as_str())
            });
        match key {
            Some(key) if key.role != Role::Caller => Ok(Some(Signed {
                principal: key.principal(),
                csrf: csrf_token(id),
                set_cookie: None,
                _slot: Some(self.slot()?),
                stored: Some(hash),
                link: None,
            })),
            _ => {
                store.delete_session(&hash).await?;
                Ok(None)
            }
        }
    }

    /// The person of a session opened through an identity provider (`bound`: its name and the
    /// fingerprint of its sign-in, see [`person_marker`]): signed in while that provider, that
    /// client and those grants are still the inbox's, with the role and reach they gave.
    async fn person(
        &self,
        session: InboxSession,
        bound: &str,
        id: &str,
        hash: String,
    ) -> Result<Option<Signed>, PageError> {
        let still = self
            .app
            .options
            .oidc
            .as_ref()
            .is_some_and(|oidc| *bound == person_marker(&oidc.sign_in)[PERSON_MARKER.len()..]);
        let role = match session.role.as_str() {
            "admin" => Some(Role::Admin),
            "approver" => Some(Role::Approver),
            _ => None,
        };
        let decides = match session.decides.as_deref() {
            None => Some(Reach::all()),
            Some(json) => serde_json::from_str::<Vec<String>>(json)
                .ok()
                .and_then(|globs| Reach::of(&globs).ok()),
        };
        let (true, Some(role), Some(decides)) = (still, role, decides) else {
            self.app.dispatcher.store().delete_session(&hash).await?;
            return Ok(None);
        };
        Ok(Some(Signed {
            principal: Principal {
                decides,
                display: session.display_name,
                ..Principal::new(session.key_name, role)
            },
            csrf: csrf_token(id),
            set_cookie: None,
            _slot: Some(self.slot()?),
            stored: Some(hash),
            link: None,
        }))
    }

    /// A slot of the server's `max_in_flight`, for a request now known to come from a person
    /// signed in (or about to be); none left is the page that says to retry.
    pub(crate) fn slot(&self) -> Result<Arc<Slot>, PageError> {
        self.app
            .in_flight
            .try_take()
            .map(Arc::new)
            .ok_or(PageError::Unavailable)
    }

    /// The signed-in person, or [`PageError::SignedOut`].
    pub(crate) async fn require(&self) -> Result<Signed, PageError> {
        self.signed().await?.ok_or(PageError::SignedOut)
    }

    /// The dispatcher every decision goes through.
    pub(crate) fn dispatcher(&self) -> &Dispatcher {
        &self.app.dispatcher
    }

    /// A redirect to the inbox's queue (which offers the sign-in to one signed out).
    pub(crate) fn home(&self) -> Response {
        see_other(&self.base.0)
    }
}

/// What marks the session of a person signed in with an identity provider, in place of a key's
/// fingerprint: this, then the issuer's name.
const PERSON_MARKER: &str = "issuer:";

/// Makes a session for `principal`, signed in with `key`.
pub(super) async fn start(
    visit: &Visit,
    principal: Principal,
    key: &ApiKey,
) -> Result<Signed, PageError> {
    open(visit, principal, Some(fingerprint(key))).await
}

/// What stands in a person's session for a key's fingerprint: the issuer's name and the
/// fingerprint of the sign-in (issuer, client, grants), so that a session ends as soon as any
/// of them changes.
fn person_marker(sign_in: &identity::SignIn) -> String {
    format!(
        "{PERSON_MARKER}{}:{}",
        sign_in.issuer_name(),
        sign_in.fingerprint()
    )
}

/// Makes a session for `person`, signed in through `sign_in`.
pub(crate) async fn start_person(
    visit: &Visit,
    person: Principal,
    sign_in: &identity::SignIn,
) -> Result<Signed, PageError> {
    open(visit, person, Some(person_marker(sign_in))).await
}

/// Stores a new session for `principal` (`marker`: its key's fingerprint, or which identity
/// provider it came through) and makes its cookie.
async fn open(
    visit: &Visit,
    principal: Principal,
    marker: Option<String>,
) -> Result<Signed, PageError> {
    let id = random_id()?;
    let now = Timestamp::now();
    let ttl = visit.app.options.session_ttl;
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let store = visit.dispatcher().store();
    // Sessions that ran out are dropped as new ones begin (and every minute by the binary).
    if let Err(err) = store.prune_sessions(now).await {
        tracing::debug!(error = %err, "cannot prune inbox sessions now");
    }
    store
        .create_session(&InboxSession {
            id_sha256: id_hash(&id),
            key_name: principal.name.clone(),
            role: match principal.role {
                Role::Admin => "admin",
                Role::Approver => "approver",
                Role::Caller => "caller",
            }
            .into(),
            key_fingerprint: marker,
            created_at: now,
            expires_at: Timestamp(now.0.saturating_add(ttl_ms)),
            display_name: principal.display.clone(),
            decides: principal
                .decides
                .globs()
                .and_then(|globs| serde_json::to_string(globs).ok()),
        })
        .await?;
    let cookie = set_cookie(
        SESSION_COOKIE,
        &id,
        &visit.base,
        ttl.as_secs(),
        secure_cookies(visit),
    );
    Ok(Signed {
        principal,
        csrf: csrf_token(&id),
        set_cookie: Some(cookie),
        _slot: None,
        stored: Some(id_hash(&id)),
        link: None,
    })
}

/// Whether a cookie's value has the shape of a session id ([`random_id`]'s): 43 characters of
/// URL-safe base64.
fn looks_like_id(value: &str) -> bool {
    value.len() == 43
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The sign-in page.
#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage {
    base: String,
    nav: Option<Nav>,
    title: &'static str,
    csrf: String,
    message: Option<String>,
    /// The identity provider people sign in with, if any.
    sso: Option<String>,
    /// Whether the key form is offered.
    keys: bool,
}

/// The sign-in page, with a fresh double-submit token (`message`: why the last attempt failed).
pub(crate) fn sign_in_page(visit: &Visit, status: StatusCode, message: Option<String>) -> Response {
    // A sign-in form already open in another tab keeps working: its token is reused.
    let reused = cookie(&visit.headers, SIGN_IN_COOKIE).map(str::to_owned);
    let token = match reused.map_or_else(random_id, Ok) {
        Ok(token) => token,
        Err(err) => return err.into_response(),
    };
    let mut response = page(
        status,
        &SignInPage {
            base: visit.base.0.clone(),
            nav: None,
            title: "Sign in",
            csrf: token.clone(),
            message,
            sso: visit
                .app
                .options
                .oidc
                .as_ref()
                .map(|oidc| oidc.sign_in.issuer_name().to_owned()),
            keys: visit.app.options.key_sign_in,
        },
    );
    let cookie = set_cookie(
        SIGN_IN_COOKIE,
        &token,
        &visit.base,
        SIGN_IN_TTL_S,
        secure_cookies(visit),
    );
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; toolgate_inbox=abc"),
        );
        headers.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, "b"), Some("2"));
        assert_eq!(cookie(&headers, SIGN_IN_COOKIE), None);
    }

    #[test]
    fn the_csrf_token_is_bound_to_the_session_and_is_not_its_id() {
        let (a, b) = (csrf_token("one"), csrf_token("two"));
        assert_ne!(a, b);
        assert_ne!(a, id_hash("one"), "the store's hash is not the token");
        assert_eq!(a.len(), 64);
    }
}
