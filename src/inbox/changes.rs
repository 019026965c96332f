//! Changed upstream tools in the inbox (admins): the page that lists every held tool of every
//! pinned upstream with its pinned definition and the one listed now (escaped, as every page
//! is), and an accept button on each: a `POST` with the session's CSRF token and the hash shown,
//! so a definition that changed again since the page was read is not accepted blind. The rule is
//! `crate::upstream::pins`', as on REST.

use askama::Template;
use axum::Form;
use axum::extract::Path;
use axum::http::StatusCode;

use super::session::{Signed, Visit};
use super::views::{Answer, Nav, PageError, see_other};
use crate::dispatch::who::Role;
use crate::upstream::pins::{AcceptError, ChangeKind};

#[derive(Template)]
#[template(path = "changes.html")]
struct ChangesPage {
    base: String,
    nav: Option<Nav>,
    title: &'static str,
    csrf: String,
    items: Vec<ChangeItem>,
    accepted: bool,
}

struct ChangeItem {
    upstream: String,
    tool: String,
    served_as: String,
    kind: &'static str,
    differs: String,
    hash: String,
    /// The definitions, as indented JSON.
    pinned: String,
    listed: String,
}

/// The person signed in, if an admin: changes are an admin's to review.
async fn admin(visit: &Visit) -> Result<Signed, PageError> {
    let signed = visit.require().await?;
    if signed.principal.role != Role::Admin {
        return Err(PageError::Forbidden(
            "Only an admin reviews and accepts changes of upstream tools.".into(),
        ));
    }
    Ok(signed)
}

/// `GET /inbox/changes`: every held upstream tool, with both definitions.
pub(crate) async fn list(visit: Visit, query: axum::extract::RawQuery) -> Answer {
    let signed = admin(&visit).await?;
    let pins = &visit.app.pins;
    let pretty = |value: &serde_json::Value| {
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    };
    let mut items = Vec::new();
    for upstream in pins.upstreams() {
        for change in pins.changes(&upstream).unwrap_or_default() {
            items.push(ChangeItem {
                kind: match change.kind {
                    ChangeKind::Changed => "its definition changed",
                    ChangeKind::New => "a new tool",
                },
                differs: change.differs.join(", "),
                hash: change.upstream.hash,
                pinned: change.pinned.map_or_else(
                    || "(none: a new tool)".to_owned(),
                    |pin| pretty(&pin.definition),
                ),
                listed: pretty(&change.upstream.definition),
                served_as: change.served_as,
                tool: change.tool,
                upstream: upstream.clone(),
            });
        }
    }
    let view = ChangesPage {
        base: visit.base.0.clone(),
        nav: Some(signed.nav()),
        title: "Changed upstream tools",
        csrf: signed.csrf.clone(),
        items,
        accepted: query.0.as_deref() == Some("accepted=1"),
    };
    Ok(signed.show(StatusCode::OK, &view))
}

/// `POST /inbox/changes/{upstream}/{tool}/accept`, with the session's CSRF token and the hash
/// shown: pins it, then the list again.
pub(crate) async fn accept(
    visit: Visit,
    Path((upstream, tool)): Path<(String, String)>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Answer {
    let signed = admin(&visit).await?;
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    signed.check_csrf(field("csrf"))?;
    let hash = field("hash").unwrap_or_default();
    let app = &visit.app;
    let by = signed.principal.name.as_deref();
    match app
        .pins
        .accept(&app.dispatcher, &upstream, &tool, hash, by)
        .await
    {
        Ok(_) => Ok(see_other(&format!("{}/changes?accepted=1", visit.base.0))),
        Err(AcceptError::HashMismatch { .. }) => Err(PageError::BadRequest(
            "The tool changed again since this page was read: nothing was accepted. Read the \
             list again."
                .into(),
        )),
        Err(AcceptError::UnknownUpstream(_) | AcceptError::NoChange { .. }) => Err(
            PageError::BadRequest("This tool has no change to accept now.".into()),
        ),
        Err(AcceptError::Store(err)) => Err(crate::http::error::ApiError::from(err).into()),
    }
}
