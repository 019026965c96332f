//! The inbox's stylesheet, script and icon, embedded in the binary: no build step, nothing fetched
//! from elsewhere. Each file's URL carries a hash of its content, so it may be cached for a
//! year: a new build names new URLs.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::views::secure;

const CSS: &str = include_str!("assets/inbox.css");
const JS: &str = include_str!("assets/inbox.js");
const ICON: &str = include_str!("assets/icon.svg");

/// The file names pages link to: `inbox.<hash>.css`, `inbox.<hash>.js`.
pub(crate) struct Names {
    pub(crate) css: String,
    pub(crate) js: String,
    pub(crate) icon: String,
}

/// The names of this build's files.
pub(crate) static NAMES: LazyLock<Names> = LazyLock::new(|| Names {
    css: named("css", CSS),
    js: named("js", JS),
    icon: named("svg", ICON),
});

fn named(ext: &str, content: &str) -> String {
    let hash = hex::encode(&Sha256::digest(content.as_bytes())[..6]);
    format!("inbox.{hash}.{ext}")
}

/// `GET /inbox/assets/{file}`.
pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    let (content, kind) = if file == NAMES.css {
        (CSS, "text/css; charset=utf-8")
    } else if file == NAMES.js {
        (JS, "text/javascript; charset=utf-8")
    } else if file == NAMES.icon {
        (ICON, "image/svg+xml")
    } else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut response = content.into_response();
    let headers = response.headers_mut();
    secure(headers);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    response
}

/// The stylesheet's URL path below the inbox, for the templates.
pub(crate) fn css() -> &'static str {
    &NAMES.css
}

/// The script's URL path below the inbox, for the templates.
pub(crate) fn js() -> &'static str {
    &NAMES.js
}

/// The icon's URL path below the inbox, for the templates.
pub(crate) fn icon() -> &'static str {
    &NAMES.icon
}
