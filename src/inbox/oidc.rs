//! Single sign-on for the inbox (`[inbox.oidc]`): "Sign in with <issuer>", OpenID Connect's
//! authorization code flow with PKCE ([`crate::identity::SignIn`] speaks to the issuer).
//!
//! `GET /inbox/oidc/start` makes a `state`, a `nonce` and a PKCE verifier (each 256 random
//! bits), keeps them in one `HttpOnly` cookie for ten minutes, and sends the browser to the
//! issuer. The cookie is `SameSite=Lax`, not `Strict`: it must come back with the issuer's
//! redirect, a navigation from another site. `GET /inbox/oidc/callback` takes the cookie (once:
//! it is cleared with the answer that decides the sign-in), checks `state` in constant time and, when the issuer says
//! who it is (`iss`, RFC 9207), that it is the one asked; exchanges the code; and opens a
//! session for the person the ID token names, with the rights the issuer's grants give them.
//! A person whose grants make a caller, or nothing, is refused: whoever decides signs in as an
//! approver or an admin, however they sign in.
//!
//! The session is the inbox's usual one (`session.rs`). Its answer is a page that moves on to
//! the inbox by itself rather than a redirect: the session cookie is `SameSite=Strict`, and a
//! browser does not send it on a redirect chain that began on another site.

use askama::Template;
use axum::extract::Query;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::session::{ClientAddr, Visit, cookie, random_id, secure_cookies, sign_in_page};
use super::views::{Answer, PageError, page};
use crate::identity::SignInError;

/// The sign-in's cookie: `state`, `nonce` and the PKCE verifier, joined by dots.
pub(crate) const OIDC_COOKIE: &str = "toolgate_inbox_oidc";

/// How long a sign-in at the issuer may take, in seconds.
const OIDC_TTL_S: u64 = 600;

/// The `Set-Cookie` of the sign-in's cookie (`value` empty and no age: cleared).
fn oidc_cookie(visit: &Visit, value: &str, max_age_s: u64) -> HeaderValue {
    let secure = if secure_cookies(visit) {
        "; Secure"
    } else {
        ""
    };
    let text = format!(
        "{OIDC_COOKIE}={value}; Path={}/oidc; Max-Age={max_age_s}; HttpOnly; SameSite=Lax{secure}",
        visit.base.0
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The sign-on configured.
fn configured(visit: &Visit) -> Result<super::InboxOidc, PageError> {
    visit
        .app
        .options
        .oidc
        .clone()
        .ok_or_else(|| PageError::BadRequest("This inbox has no single sign-on configured.".into()))
}

/// The S256 challenge of `verifier` (RFC 7636).
fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// `GET /inbox/oidc/start`: off to the issuer. Not limited per address as the callback is:
/// it costs the server nothing but random bits, and behind a proxy one client spending the
/// limit would keep everyone from signing in.
pub(crate) async fn start(visit: Visit) -> Answer {
    let oidc = configured(&visit)?;
    let (state, nonce, verifier) = (random_id()?, random_id()?, random_id()?);
    let url = match oidc
        .sign_in
        .authorization_url(&oidc.redirect_url, &state, &nonce, &challenge(&verifier))
        .await
    {
        Ok(url) => url,
        Err(err) => return Ok(refused(&visit, err)),
    };
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    let location = HeaderValue::from_str(url.as_str()).map_err(|_| PageError::Internal)?;
    headers.insert(header::LOCATION, location);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let kept = format!("{state}.{nonce}.{verifier}");
    headers.append(header::SET_COOKIE, oidc_cookie(&visit, &kept, OIDC_TTL_S));
    Ok(response)
}

/// What the issuer sends back.
#[derive(Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
    iss: Option<String>,
    error: Option<String>,
}

/// The page that says signing in failed, and offers it again (`err` in words, never the
/// issuer's own text).
fn refused(visit: &Visit, err: SignInError) -> Response {
    let (status, message) = match &err {
        SignInError::Provider(why) => {
            tracing::warn!(error = %why, "inbox sign-in: the identity provider failed");
            (
                StatusCode::BAD_GATEWAY,
                "The identity provider could not complete the sign-in. Try again.".to_owned(),
            )
        }
        SignInError::Refused(why) => {
            tracing::warn!(error = %why, "inbox sign-in: an ID token was refused");
            (
                StatusCode::UNAUTHORIZED,
                "The sign-in could not be verified. Try again.".to_owned(),
            )
        }
        SignInError::Forbidden(_) => (
            StatusCode::FORBIDDEN,
            "You signed in, but your account may not decide approvals here. Ask for an approver's \
             access."
                .to_owned(),
        ),
    };
    let mut response = sign_in_page(visit, status, Some(message));
    response
        .headers_mut()
        .append(header::SET_COOKIE, oidc_cookie(visit, "", 0));
    response
}

/// The page a new session lands on, moving on to the inbox by itself.
#[derive(Template)]
#[template(path = "signed_in.html")]
struct SignedInPage {
    base: String,
    nav: Option<super::views::Nav>,
    title: &'static str,
}

/// `GET /inbox/oidc/callback`: the person is back from the issuer.
pub(crate) async fn callback(
    ClientAddr(address): ClientAddr,
    visit: Visit,
    Query(back): Query<Callback>,
) -> Answer {
    let oidc = configured(&visit)?;
    visit
        .app
        .limiter
        .take(address)
        .map_err(PageError::RateLimited)?;
    let _slot = visit.slot()?;
    let kept = cookie(&visit.headers, OIDC_COOKIE)
        .unwrap_or_default()
        .to_owned();
    let mut kept = kept.splitn(3, '.');
    let (Some(state), Some(nonce), Some(verifier)) = (kept.next(), kept.next(), kept.next()) else {
        return Ok(refused(
            &visit,
            SignInError::Refused("no sign-in was started in this browser".into()),
        ));
    };
    let sent = back.state.as_deref().unwrap_or_default();
    if sent.is_empty() || !bool::from(sent.as_bytes().ct_eq(state.as_bytes())) {
        return Ok(refused(
            &visit,
            SignInError::Refused("the sign-in's state differs".into()),
        ));
    }
    if back
        .iss
        .as_deref()
        .is_some_and(|iss| iss != oidc.sign_in.issuer_url())
    {
        return Ok(refused(
            &visit,
            SignInError::Refused("another issuer answered".into()),
        ));
    }
    if back.error.is_some() {
        // The person cancelled, or the issuer would not sign them in.
        return Ok(refused(
            &visit,
            SignInError::Provider("the issuer answered with an error".into()),
        ));
    }
    let Some(code) = back.code.as_deref() else {
        return Ok(refused(
            &visit,
            SignInError::Provider("the issuer sent no code".into()),
        ));
    };
    let redirect = &oidc.redirect_url;
    let person = match oidc.sign_in.finish(code, redirect, verifier, nonce).await {
        Ok(principal) => principal,
        Err(err) => return Ok(refused(&visit, err)),
    };
    if !person.sees_all_calls() {
        return Ok(refused(
            &visit,
            SignInError::Forbidden("a caller decides nothing".into()),
        ));
    }
    let name = person.name.clone().unwrap_or_default();
    let signed = super::session::start_person(&visit, person, &oidc.sign_in).await?;
    tracing::info!(person = %name, "signed in to the inbox with the identity provider");
    let mut response = page(
        StatusCode::OK,
        &SignedInPage {
            base: visit.base.0.clone(),
            nav: None,
            title: "Signed in",
        },
    );
    let headers = response.headers_mut();
    if let Some(made) = signed.set_cookie {
        headers.append(header::SET_COOKIE, made);
    }
    headers.append(header::SET_COOKIE, oidc_cookie(&visit, "", 0));
    Ok(response)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_challenge_is_rfc_7636s() {
        // RFC 7636, appendix B.
        assert_eq!(
            super::challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
