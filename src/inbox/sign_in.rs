//! `POST /inbox/sign-in` and `POST /inbox/sign-out`: a person signs in by pasting a key (the
//! identity provider's sign-in is `oidc`), or signs out. The session they open or end, its
//! cookie and its CSRF token are `session`'s.

use axum::Form;
use axum::http::{StatusCode, header};
use subtle::ConstantTimeEq;

use super::session::{
    ClientAddr, SESSION_COOKIE, SIGN_IN_COOKIE, Visit, cookie, csrf_token, id_hash, secure_cookies,
    set_cookie, sign_in_page, start,
};
use super::views::{Answer, PageError};
use crate::http::auth::Role;

/// The sign-in form.
#[derive(serde::Deserialize)]
pub(crate) struct SignIn {
    key: Option<String>,
    csrf: Option<String>,
}

/// `POST /inbox/sign-in`: a person pastes their key. A caller key, an unknown key or a form
/// from elsewhere is refused; the key is never echoed, logged or put in a URL.
pub(crate) async fn sign_in(
    ClientAddr(address): ClientAddr,
    visit: Visit,
    Form(form): Form<SignIn>,
) -> Answer {
    let app = &visit.app;
    app.limiter.take(address).map_err(PageError::RateLimited)?;
    // Past the per-address limit (and with its body in within the body timeout), an attempt
    // holds a slot like any request.
    let _slot = visit.slot()?;
    let expected = cookie(&visit.headers, SIGN_IN_COOKIE).unwrap_or_default();
    let sent = form.csrf.as_deref().unwrap_or_default();
    if expected.is_empty() || !bool::from(sent.as_bytes().ct_eq(expected.as_bytes())) {
        return Err(PageError::Csrf);
    }
    let keys = &app.keys;
    if !keys.enabled() {
        // Nothing to sign in with: the inbox is open (auth off).
        return Ok(visit.home());
    }
    if !app.options.key_sign_in {
        return Ok(sign_in_page(
            &visit,
            StatusCode::FORBIDDEN,
            Some("Signing in with a key is turned off here: use the identity provider.".into()),
        ));
    }
    let typed = form.key.as_deref().map(str::trim).unwrap_or_default();
    let refused =
        |status, message: &str| Ok(sign_in_page(&visit, status, Some(message.to_owned())));
    if typed.is_empty() {
        return refused(StatusCode::UNPROCESSABLE_ENTITY, "Paste your API key.");
    }
    let Some(key) = keys.find(typed) else {
        return refused(
            StatusCode::UNAUTHORIZED,
            "This key is not one this server knows. Check that you pasted all of it.",
        );
    };
    if key.role == Role::Caller {
        return refused(
            StatusCode::FORBIDDEN,
            "This is a caller key: it may call tools but never decide. Sign in with an approver \
             or admin key.",
        );
    }
    let principal = key.principal();
    let key = key.clone();
    let signed = start(&visit, principal, &key).await?;
    tracing::info!(key = %key.name, "signed in to the inbox");
    let mut response = signed.answer(visit.home());
    // The sign-in token is spent.
    let spent = set_cookie(SIGN_IN_COOKIE, "", &visit.base, 0, false);
    response.headers_mut().append(header::SET_COOKIE, spent);
    Ok(response)
}

/// The sign-out form.
#[derive(serde::Deserialize)]
pub(crate) struct SignOut {
    csrf: Option<String>,
}

/// `POST /inbox/sign-out`: ends the session, here and on every replica.
pub(crate) async fn sign_out(visit: Visit, Form(form): Form<SignOut>) -> Answer {
    let Some(id) = cookie(&visit.headers, SESSION_COOKIE) else {
        return Ok(visit.home());
    };
    if !bool::from(
        form.csrf
            .unwrap_or_default()
            .as_bytes()
            .ct_eq(csrf_token(id).as_bytes()),
    ) {
        return Err(PageError::Csrf);
    }
    visit
        .dispatcher()
        .store()
        .delete_session(&id_hash(id))
        .await?;
    let mut response = visit.home();
    let gone = set_cookie(SESSION_COOKIE, "", &visit.base, 0, secure_cookies(&visit));
    response.headers_mut().append(header::SET_COOKIE, gone);
    Ok(response)
}
