//! `/inbox/link/{signed}`: a decision link's page, where the person a message reached decides
//! its one approval without a sign-in (the link is [`crate::notify::links`]'s).
//!
//! - `GET` never decides (mail scanners and link previews fetch links): it checks the link and
//!   shows the call's page, the approval's own forms posting back to the link, with the person
//!   as its author; after a decision, the same page with what it did (`?done=`).
//! - `POST …/approve` and `…/reject` decide through the lifecycle exactly as the inbox's own
//!   forms do (`decide.rs`), as the person's principal: the person must still be in
//!   `[[people]]` and may still decide the tool, and four-eyes and quorum rules hold as on every
//!   door. A form is accepted only with the page's CSRF token: an HMAC, under the link's key, of
//!   the link and a random double-submit cookie set with the page (`HttpOnly`,
//!   `SameSite=Strict`, one per link), so a form posted by another site, or from another link's page, is
//!   refused; the gate's `Host` and `Origin` checks hold as on every route.
//! - A refused link (forged, altered, foreign, expired, used, not allowed) gets a page that says
//!   which, with a 4xx status, and decides nothing.
//! - Pages are the inbox's: `no-store`, its Content-Security-Policy, and a `same-origin`
//!   referrer policy, so the link never leaves for another site (`no-referrer` would make the
//!   browser send `Origin: null` with the page's own forms, which the gate refuses).
//! - With `[inbox] links = "sign_in"`, a signed link made before still opens, but only as a way
//!   to the call's page behind the sign-in; its forms decide nothing.

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::call::{Done, Typed, banner, call_page};
use super::decide::{self, Decision};
use super::session::{Signed, Visit, cookie, random_id, secure_cookies, set_cookie};
use super::views::{Answer, PageError, page, see_other};
use crate::dispatch::Withheld;
use crate::dispatch::who::Principal;
use crate::notify::links::{Refusal, Verified, VerifyError};
use crate::notify::{Links, People};

/// The decision link page's double-submit cookie, one per link: a `SameSite=Strict` cookie is
/// not sent when a link is followed from a mail on another site, so a second link opened so
/// would replace a shared one and leave the first link's open page with a stale token.
fn link_cookie(signed: &str) -> String {
    format!(
        "toolgate_link_{}",
        hex::encode(&crate::base::token_sha256(signed)[..8])
    )
}

/// What the link pages need beside the inbox: the links, and who their people are.
#[derive(Clone)]
pub(crate) struct LinkPages {
    pub(crate) links: Arc<Links>,
    pub(crate) people: Arc<People>,
}

/// The query of a link's page.
#[derive(Deserialize, Default)]
pub(crate) struct LinkQuery {
    done: Option<Done>,
}

#[derive(Template)]
#[template(path = "link_refused.html")]
struct RefusedPage {
    base: String,
    nav: Option<super::views::Nav>,
    title: &'static str,
    code: &'static str,
    message: &'static str,
}

/// The page of a refused link, with its status.
fn refused(visit: &Visit, refusal: Refusal) -> Response {
    let (status, title, message) = match refusal {
        Refusal::Forged => (
            StatusCode::FORBIDDEN,
            "This link is forged",
            "Its signature was not made by this server, so it decides nothing. Use the link in \
             the message you received, or open the inbox.",
        ),
        Refusal::Altered => (
            StatusCode::FORBIDDEN,
            "This link was altered",
            "It was signed by this server, but changed since: it decides nothing. Use the link \
             exactly as the message gave it, or open the inbox.",
        ),
        Refusal::Foreign => (
            StatusCode::NOT_FOUND,
            "This link is not for this server",
            "It was made by another toolgate deployment (or so long ago that its key is gone), \
             so it decides nothing here.",
        ),
        Refusal::Expired => (
            StatusCode::GONE,
            "This link has expired",
            "Decision links serve for a limited time. The approval may still wait in the inbox: \
             sign in there to decide it.",
        ),
        Refusal::Used => (
            StatusCode::CONFLICT,
            "This link was used",
            "The approval it names is decided already (by you through this link, or by someone \
             else): a link decides once. The call's history is in the inbox.",
        ),
        Refusal::NotAllowed => (
            StatusCode::FORBIDDEN,
            "Not yours to decide",
            "The person this link was made for may not decide this approval (any longer), so \
             it decides nothing.",
        ),
    };
    page(
        status,
        &RefusedPage {
            base: visit.base.0.clone(),
            nav: None,
            title,
            code: refusal.code(),
            message,
        },
    )
}

/// A link checked, and its person's principal: the person must be known and may decide the
/// call's tool.
async fn checked(
    visit: &Visit,
    pages: &LinkPages,
    signed: &str,
) -> Result<Result<(Verified, Principal), Refusal>, PageError> {
    let verified = match pages.links.verify(signed).await {
        Ok(verified) => verified,
        Err(VerifyError::Refused(refusal)) => return Ok(Err(refusal)),
        Err(VerifyError::Store(err)) => return Err(err.into()),
    };
    // The lifecycle's rule, as every decision door applies it: the person's `decides`, or an
    // escalation that reached them; never an approver's own call.
    let principal = pages
        .people
        .named(&verified.person)
        .and_then(|person| person.principal.clone())
        .filter(|principal| {
            visit
                .dispatcher()
                .may_decide_call(principal, &verified.call)
        });
    // A link serves once: the person's approval, counted toward the input as it stands (an
    // edit restarts the count), used it.
    let approved_already = principal.as_ref().is_some_and(|principal| {
        visit
            .dispatcher()
            .approval_progress(&verified.call, principal)
            .is_some_and(|progress| progress.withheld == Some(Withheld::ApprovedAlready))
    });
    if approved_already {
        return Ok(Err(Refusal::Used));
    }
    Ok(match principal {
        Some(principal) => Ok((verified, principal)),
        None => Err(Refusal::NotAllowed),
    })
}

/// The link's page as a signed-in page of `principal`, its forms posting back to the link and
/// bound to `csrf`.
fn as_signed(
    visit: &Visit,
    principal: Principal,
    csrf: String,
    signed: &str,
) -> Result<Signed, PageError> {
    Ok(Signed {
        principal,
        csrf,
        set_cookie: None,
        _slot: Some(visit.slot()?),
        stored: None,
        link: Some(format!("{}/link/{signed}", visit.base.0)),
    })
}

/// `GET /inbox/link/{signed}`: the approval's page for the link's person; never decides.
pub(crate) async fn open(
    visit: Visit,
    Path(signed): Path<String>,
    Query(query): Query<LinkQuery>,
) -> Answer {
    let pages = visit.app.links.clone();
    let (verified, principal) = match checked(&visit, &pages, &signed).await? {
        Ok(found) => found,
        Err(Refusal::Used) if query.done.is_some() => {
            return done(&visit, &pages, &signed, query).await;
        }
        Err(refusal) => return Ok(refused(&visit, refusal)),
    };
    if !pages.links.signed() {
        // `links = "sign_in"`: the link only leads to the call's page, behind the sign-in.
        return Ok(see_other(&format!(
            "{}/calls/{}",
            visit.base.0, verified.call.call_id
        )));
    }
    // The page's double-submit cookie: the one the browser sent (another tab of the link), or
    // a new one.
    let name = link_cookie(&signed);
    let (value, new) = match cookie(&visit.headers, &name) {
        Some(value) if value.len() == 43 => (value.to_owned(), false),
        _ => (random_id()?, true),
    };
    let mut signed_page = as_signed(&visit, principal, verified.csrf(&value), &signed)?;
    if new {
        let ttl = pages.links_ttl_s(&verified);
        signed_page.set_cookie = Some(set_cookie(
            &name,
            &value,
            &visit.base,
            ttl,
            secure_cookies(&visit),
        ));
    }
    Ok(call_page(
        &visit,
        &signed_page,
        &verified.call,
        Typed::default(),
        StatusCode::OK,
    ))
}

impl LinkPages {
    /// How long the page's cookie lasts: as long as the link.
    fn links_ttl_s(&self, verified: &Verified) -> u64 {
        let left = verified.expires_at.0 - crate::store::Timestamp::now().0;
        u64::try_from(left / 1000).unwrap_or(0).max(1)
    }
}

/// The page after this link decided: what the decision did, with no form left; the `used` page
/// when the call's history does not record that decision last.
async fn done(visit: &Visit, pages: &LinkPages, signed: &str, query: LinkQuery) -> Answer {
    let Some(done) = query.done else {
        return Ok(refused(visit, Refusal::Used));
    };
    let found = match pages.links.decided(signed).await {
        Ok(found) => found,
        Err(VerifyError::Refused(refusal)) => return Ok(refused(visit, refusal)),
        Err(VerifyError::Store(err)) => return Err(err.into()),
    };
    let (call, person) = found;
    let Some(principal) = pages
        .people
        .named(&person)
        .and_then(|person| person.principal.clone())
    else {
        return Ok(refused(visit, Refusal::NotAllowed));
    };
    let Some(banner) = banner(visit, &principal, &call, done).await? else {
        return Ok(refused(visit, Refusal::Used));
    };
    let signed_page = as_signed(visit, principal, String::new(), signed)?;
    let typed = Typed {
        banner: Some(banner),
        ..Typed::default()
    };
    // What the link did, without a form: this link decides no more, even while the call still
    // waits for other approvers.
    let mut shown = call;
    shown.suspension = None;
    Ok(call_page(
        visit,
        &signed_page,
        &shown,
        typed,
        StatusCode::OK,
    ))
}

/// A form of a link's page, checked: the link, its person's rights, the page's CSRF token.
async fn decision(
    visit: Visit,
    signed: &str,
    pairs: Vec<(String, String)>,
) -> Result<Result<Decision, Response>, PageError> {
    let pages = visit.app.links.clone();
    let (verified, principal) = match checked(&visit, &pages, signed).await? {
        Ok(found) => found,
        Err(refusal) => return Ok(Err(refused(&visit, refusal))),
    };
    if !pages.links.signed() {
        return Ok(Err(refused(&visit, Refusal::NotAllowed)));
    }
    let sent = pairs
        .iter()
        .rev()
        .find(|(name, _)| name == "csrf")
        .map(|(_, value)| value.as_str());
    let value = cookie(&visit.headers, &link_cookie(signed)).map(str::to_owned);
    let (Some(value), Some(sent)) = (value, sent) else {
        return Err(PageError::Csrf);
    };
    if !verified.check_csrf(&value, sent) {
        return Err(PageError::Csrf);
    }
    let signed_page = as_signed(&visit, principal, verified.csrf(&value), signed)?;
    Ok(Ok(Decision::by_link(
        visit,
        signed_page,
        verified.call,
        pairs,
    )))
}

/// `POST /inbox/link/{signed}/approve`: as the inbox's approve form, as the link's person.
pub(crate) async fn approve(
    visit: Visit,
    Path(signed): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Answer {
    match decision(visit, &signed, pairs).await? {
        Ok(decision) => decide::approve(decision).await,
        Err(refused) => Ok(refused),
    }
}

/// `POST /inbox/link/{signed}/reject`: as the inbox's reject form, as the link's person.
pub(crate) async fn reject(
    visit: Visit,
    Path(signed): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Answer {
    match decision(visit, &signed, pairs).await? {
        Ok(decision) => decide::reject(decision).await,
        Err(refused) => Ok(refused),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn refusal_pages_are_not_cached() {
        // The page helper sets the inbox's headers on every answer, refusals included.
        let response = super::page(
            axum::http::StatusCode::GONE,
            &super::RefusedPage {
                base: "/inbox".into(),
                nav: None,
                title: "t",
                code: "expired",
                message: "m",
            },
        );
        let cache = response.headers().get(axum::http::header::CACHE_CONTROL);
        assert_eq!(cache.unwrap(), "no-store");
        assert_eq!(response.status(), axum::http::StatusCode::GONE);
    }
}
