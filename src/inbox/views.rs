//! What every inbox page shares: the answer with its security headers, the error pages, where
//! the inbox is mounted, and times as people read them.

use askama::Template;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::error::ApiError;
use crate::store::{StoreError, Timestamp};

/// Scripts and styles from this server's own files only (none inline), nothing framed, no form
/// posted elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                   base-uri 'none'";

/// Where the inbox is mounted: `/inbox`, or under the prefix the router was nested at.
#[derive(Debug, Clone)]
pub(crate) struct Base(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let seen = parts.uri.path();
        let prefix = parts
            .extensions
            .get::<OriginalUri>()
            .and_then(|original| original.path().strip_suffix(seen))
            .unwrap_or("");
        Ok(Base(format!("{prefix}/inbox")))
    }
}

/// Who is signed in, for the page's header.
#[derive(Debug, Clone)]
pub(crate) struct Nav {
    /// The key's name, or "auth off".
    pub(crate) who: String,
    /// The session's CSRF token, for the sign-out form.
    pub(crate) csrf: String,
}

/// The security headers of every inbox answer; `Cache-Control: no-store` as every page shows
/// data (or a form bound to a session).
pub(crate) fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // No page address leaves for another site; `same-origin` rather than `no-referrer`, under
    // which a browser sends `Origin: null` with the page's own form posts, which the Host and
    // Origin check of every route (against DNS rebinding) refuses.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// A rendered page (or fragment) as an answer with `status`.
pub(crate) fn page(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(body) => {
            let mut response = (status, body).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            secure(headers);
            response
        }
        Err(err) => {
            tracing::error!(error = %err, "an inbox page failed to render");
            PageError::Internal.into_response()
        }
    }
}

/// A redirect after a form was handled (`303 See Other`: the browser then GETs `to`).
pub(crate) fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    secure(response.headers_mut());
    response
}

/// What every inbox handler answers: a page (or a redirect), or why it cannot be shown.
pub(crate) type Answer = Result<Response, PageError>;

/// Why a page cannot be shown; answered as an HTML page.
#[derive(Debug)]
pub(crate) enum PageError {
    /// No session (or it ended): sign in again.
    SignedOut,
    /// A form without the session's CSRF token, or with a wrong one.
    Csrf,
    /// No call has this id.
    UnknownCall(String),
    /// Too many sign-in attempts from this address.
    RateLimited(std::time::Duration),
    /// A quota of the person's key refuses the request (its `max_held`, for a live stream).
    OverQuota(Box<crate::dispatch::quota::QuotaExceeded>),
    /// The request itself is wrong (a form too large, a value out of range).
    BadRequest(String),
    /// The person may not do this (decide a call made under their own name).
    Forbidden(String),
    /// The store cannot be reached now.
    Unavailable,
    /// Something failed inside the server; logged.
    Internal,
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    base: String,
    nav: Option<Nav>,
    title: &'a str,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, title, message) = match &self {
            PageError::SignedOut => (
                StatusCode::UNAUTHORIZED,
                "Signed out",
                "Your session has ended. Sign in again to go on.".to_owned(),
            ),
            PageError::Csrf => (
                StatusCode::FORBIDDEN,
                "Refused",
                "This form was not sent from this inbox page (its security token is missing or \
                 wrong), so nothing was done. Open the page again and resend it."
                    .to_owned(),
            ),
            PageError::UnknownCall(id) => (
                StatusCode::NOT_FOUND,
                "Not found",
                format!("No call has the id {id}."),
            ),
            PageError::RateLimited(wait) => (
                StatusCode::TOO_MANY_REQUESTS,
                "Too many attempts",
                format!(
                    "Too many sign-in attempts from your address. Try again in {} seconds.",
                    wait.as_secs().max(1)
                ),
            ),
            PageError::OverQuota(refused) => (
                StatusCode::TOO_MANY_REQUESTS,
                "Too many open pages",
                refused.message(),
            ),
            PageError::BadRequest(message) => {
                (StatusCode::BAD_REQUEST, "Bad request", message.clone())
            }
            PageError::Forbidden(message) => (
                StatusCode::FORBIDDEN,
                "Not yours to decide",
                message.clone(),
            ),
            PageError::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                "The database cannot be reached now; nothing was lost. Try again shortly."
                    .to_owned(),
            ),
            PageError::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Server error",
                "The server failed to handle this request.".to_owned(),
            ),
        };
        let body = ErrorPage {
            // The page's links work from the inbox's usual place; error pages carry no state.
            base: "/inbox".into(),
            nav: None,
            title,
            message,
        };
        let mut response = match body.render() {
            Ok(html) => (status, html).into_response(),
            Err(_) => (status, UNRENDERED).into_response(),
        };
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        secure(headers);
        let wait = match &self {
            PageError::RateLimited(wait) => Some(wait.as_secs().max(1)),
            PageError::OverQuota(refused) => Some(refused.retry_after_s()),
            _ => None,
        };
        if let Some(wait) = wait {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(wait));
        }
        response
    }
}

/// The answer when even the error page fails to render.
const UNRENDERED: &str =
    "<!doctype html><title>Error</title><p>The server failed to show this page.</p>";

impl From<StoreError> for PageError {
    fn from(err: StoreError) -> Self {
        ApiError::from(err).into()
    }
}

impl From<crate::dispatch::DispatchError> for PageError {
    fn from(err: crate::dispatch::DispatchError) -> Self {
        ApiError::from(err).into()
    }
}

impl From<ApiError> for PageError {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::StoreUnavailable | ApiError::NotReady | ApiError::Overloaded(_) => {
                PageError::Unavailable
            }
            ApiError::UnknownCall(id) => PageError::UnknownCall(id),
            ApiError::RateLimited(refused) => PageError::OverQuota(refused),
            ApiError::BadRequest(message) | ApiError::PayloadTooLarge(message) => {
                PageError::BadRequest(message)
            }
            // Logged where it was made.
            _ => PageError::Internal,
        }
    }
}

/// A moment as a page shows it, in a `<time>` element: in UTC as the server writes it, which
/// the page's script rewrites to the viewer's local time (without script, UTC stays); the UTC
/// time to the second is its hover title either way.
#[derive(Debug, Clone)]
pub(crate) struct Moment {
    /// RFC 3339 in UTC, for `datetime` (what the script reads).
    pub(crate) iso: String,
    /// `14:05 UTC` on the day it is shown, else `2025-05-01 14:05 UTC`.
    pub(crate) text: String,
    /// `2025-05-01 14:05:12 UTC`.
    pub(crate) title: String,
}

impl Moment {
    /// `at`, as shown at `now`.
    pub(crate) fn of(at: Timestamp, now: Timestamp) -> Moment {
        let iso = utc(at);
        let day = |iso: &str| iso.get(..10).map(str::to_owned);
        let (date, clock) = (iso.get(..10).unwrap_or(""), iso.get(11..16).unwrap_or(""));
        let text = if day(&iso) == day(&utc(now)) {
            format!("{clock} UTC")
        } else {
            format!("{date} {clock} UTC")
        };
        let title = format!("{date} {} UTC", iso.get(11..19).unwrap_or(""));
        Moment { iso, text, title }
    }
}

/// `at` in RFC 3339, UTC, to the second: `2025-05-01T14:05:12Z`.
fn utc(at: Timestamp) -> String {
    // The store's own form has milliseconds (`…:12.345Z`); a person needs none.
    let shown = at.to_string();
    match shown.get(..19) {
        Some(seconds) => format!("{seconds}Z"),
        None => shown,
    }
}

/// When a suspension expires, in the one wording every page uses: "Never expires", "Expires in
/// 2 h (14:05 UTC)", "Expired (14:05 UTC)".
#[derive(Debug, Clone)]
pub(crate) struct Expiry {
    /// The words before the moment.
    pub(crate) text: String,
    /// The moment it expires (or expired), if it does.
    pub(crate) at: Option<Moment>,
}

impl Expiry {
    /// The expiry of a suspension that expires at `at` (never, with `None`), as shown at `now`.
    pub(crate) fn of(at: Option<Timestamp>, now: Timestamp) -> Expiry {
        let Some(at) = at else {
            return Expiry {
                text: "Never expires".into(),
                at: None,
            };
        };
        let text = match until(at, now).as_str() {
            "expired" => "Expired".to_owned(),
            left => format!("Expires {left}"),
        };
        Expiry {
            text,
            at: Some(Moment::of(at, now)),
        }
    }
}

/// How long ago `then` was, in words: "just now", "5 min ago", "3 h ago", "2 days ago".
pub(crate) fn ago(then: Timestamp, now: Timestamp) -> String {
    let seconds = (now.0 - then.0).max(0) / 1000;
    match span(seconds) {
        None => "just now".into(),
        Some(span) => format!("{span} ago"),
    }
}

/// How long until `then`, in words: "in 5 min", "expired".
pub(crate) fn until(then: Timestamp, now: Timestamp) -> String {
    let seconds = (then.0 - now.0) / 1000;
    if then.0 <= now.0 {
        return "expired".into();
    }
    match span(seconds) {
        None => "in under a minute".into(),
        Some(span) => format!("in {span}"),
    }
}

fn span(seconds: i64) -> Option<String> {
    Some(match seconds {
        ..60 => return None,
        60..3600 => format!("{} min", seconds / 60),
        3600..86_400 => format!("{} h", seconds / 3600),
        _ if seconds / 86_400 == 1 => "1 day".into(),
        _ => format!("{} days", seconds / 86_400),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_words() {
        let now = Timestamp(10_000_000_000);
        assert_eq!(ago(Timestamp(now.0 - 5_000), now), "just now");
        assert_eq!(ago(Timestamp(now.0 - 300_000), now), "5 min ago");
        assert_eq!(ago(Timestamp(now.0 - 7_200_000), now), "2 h ago");
        assert_eq!(ago(Timestamp(now.0 - 86_400_000), now), "1 day ago");
        assert_eq!(until(Timestamp(now.0 + 600_000), now), "in 10 min");
        assert_eq!(until(Timestamp(now.0 + 1_000), now), "in under a minute");
        assert_eq!(until(Timestamp(now.0 - 1), now), "expired");
    }

    #[test]
    fn moments_are_utc_with_the_date_unless_it_is_today() {
        // 2001-09-09T01:46:40Z.
        let now = Timestamp(1_000_000_000_000);
        let later = Moment::of(Timestamp(now.0 + 3_600_000), now);
        assert_eq!(later.iso, "2001-09-09T02:46:40Z");
        assert_eq!(later.text, "02:46 UTC");
        assert_eq!(later.title, "2001-09-09 02:46:40 UTC");
        let tomorrow = Moment::of(Timestamp(now.0 + 86_400_000), now);
        assert_eq!(tomorrow.text, "2001-09-10 01:46 UTC");
    }

    #[test]
    fn expiry_has_one_wording() {
        let now = Timestamp(1_000_000_000_000);
        let never = Expiry::of(None, now);
        assert_eq!(
            (never.text.as_str(), never.at.is_none()),
            ("Never expires", true)
        );
        let soon = Expiry::of(Some(Timestamp(now.0 + 7_200_000)), now);
        assert_eq!(soon.text, "Expires in 2 h");
        assert_eq!(soon.at.map(|at| at.text).as_deref(), Some("03:46 UTC"));
        assert_eq!(Expiry::of(Some(Timestamp(now.0 - 1)), now).text, "Expired");
    }
}
