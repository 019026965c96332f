//! Standing approvals in the inbox: the page that lists those that hold (with a revoke button
//! on each, a `POST` with the session's CSRF token), the offer on a call's approve form (a
//! checkbox, for how long and for how many calls) where the tool's policy makes one, and that
//! form's fields read back. The rule is the lifecycle's (`crate::dispatch`), as on REST.

use askama::Template;
use axum::Form;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;

use super::session::{Signed, Visit};
use super::views::{Answer, Moment, Nav, PageError, see_other};
use crate::dispatch::DispatchError;
use crate::dispatch::StandingAsk;
use crate::store::{CallRecord, Timestamp};

/// The fields of the approve form that ask for a standing approval: kept through a write's
/// confirmation step.
pub(super) fn is_standing_field(name: &str) -> bool {
    matches!(name, "standing" | "standing_for_s" | "standing_calls")
}

/// What a call's approve form offers, when the tool's policy offers standing approvals to the
/// person deciding.
pub(super) struct StandingOffer {
    /// The caller whose later calls it would release.
    pub(super) caller: String,
    /// The longest, in seconds, and the default.
    pub(super) max_s: u64,
    /// The most calls, and the default.
    pub(super) max_calls: u32,
}

/// The offer on the approve form of `call`, to `signed`: none where the policy makes none.
pub(super) fn offer(visit: &Visit, signed: &Signed, call: &CallRecord) -> Option<StandingOffer> {
    let limits = visit
        .dispatcher()
        .standing_offer(
            &call.tool,
            call.caller.as_deref(),
            signed.principal.name.as_deref(),
        )
        .ok()?;
    Some(StandingOffer {
        caller: call.caller.clone().unwrap_or_default(),
        max_s: limits.max_for.as_secs(),
        max_calls: limits.max_calls,
    })
}

/// The standing approval the approve form asks for: none unless its box is ticked; then both
/// numbers, as whole numbers (their bounds are the lifecycle's to check).
pub(super) fn asked(
    field: impl Fn(&str) -> Option<String>,
) -> Result<Option<StandingAsk>, PageError> {
    if field("standing").as_deref() != Some("1") {
        return Ok(None);
    }
    let number = |name: &str, what: &str| {
        field(name)
            .and_then(|value| value.trim().parse::<u64>().ok())
            .ok_or_else(|| PageError::BadRequest(format!("Say {what}, as a whole number.")))
    };
    let for_s = number(
        "standing_for_s",
        "for how many seconds the standing approval holds",
    )?;
    let calls = number(
        "standing_calls",
        "how many calls the standing approval releases",
    )?;
    Ok(Some(StandingAsk {
        for_s,
        calls: u32::try_from(calls).unwrap_or(u32::MAX),
    }))
}

/// The lifecycle's refusal of a standing approval, as a page says it; `None` for any other.
pub(super) fn refusal(err: &DispatchError) -> Option<PageError> {
    match err {
        DispatchError::StandingNotAllowed(why) => {
            Some(PageError::BadRequest(format!("{why} Nothing was decided.")))
        }
        DispatchError::StandingOutOfBounds { field, max } => {
            let what = if *field == "calls" {
                "calls"
            } else {
                "seconds"
            };
            Some(PageError::BadRequest(format!(
                "A standing approval of this tool may hold for 1 to {max} {what}. Nothing was \
                 decided."
            )))
        }
        _ => None,
    }
}

#[derive(Template)]
#[template(path = "standing.html")]
struct StandingPage {
    base: String,
    nav: Option<Nav>,
    title: &'static str,
    csrf: String,
    items: Vec<StandingItem>,
    revoked: bool,
}

struct StandingItem {
    id: String,
    tool: String,
    caller: String,
    approver: String,
    calls_left: u32,
    calls: u32,
    expires_at: Moment,
    call_id: String,
}

/// `GET /inbox/standing`: the standing approvals that hold now, of the tools the person
/// decides, each with its revoke button.
pub(crate) async fn list(visit: Visit, query: axum::extract::RawQuery) -> Answer {
    let Some(signed) = visit.signed().await? else {
        return Ok(visit.home());
    };
    let now = Timestamp::now();
    let held = visit
        .dispatcher()
        .standing_approvals(&signed.principal)
        .await
        .map_err(|err| PageError::from(crate::http::error::ApiError::from(err)))?;
    let view = StandingPage {
        base: visit.base.0.clone(),
        nav: Some(signed.nav()),
        title: "Standing approvals",
        csrf: signed.csrf.clone(),
        items: held
            .into_iter()
            .map(|standing| StandingItem {
                approver: match (standing.approver_name, standing.approver) {
                    (Some(display), Some(name)) => format!("{display} ({name})"),
                    (_, Some(name)) => name,
                    (_, None) => "(auth off)".into(),
                },
                id: standing.id,
                tool: standing.tool,
                caller: standing.caller,
                calls_left: standing.calls_left,
                calls: standing.calls,
                expires_at: Moment::of(standing.expires_at, now),
                call_id: standing.call_id,
            })
            .collect(),
        revoked: query.0.as_deref() == Some("revoked=1"),
    };
    Ok(signed.show(StatusCode::OK, &view))
}

/// `POST /inbox/standing/{id}/revoke`, with the session's CSRF token: revokes it, then the
/// list again.
pub(crate) async fn revoke(
    visit: Visit,
    Path(id): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Answer {
    let signed = visit.require().await?;
    let csrf = pairs
        .iter()
        .find(|(name, _)| name == "csrf")
        .map(|(_, value)| value.as_str());
    signed.check_csrf(csrf)?;
    match visit
        .dispatcher()
        .revoke_standing(&id, &signed.principal)
        .await
    {
        Ok(_) => Ok(revoked(&visit)),
        Err(DispatchError::UnknownStandingApproval(_)) => Err(PageError::BadRequest(
            "No standing approval you may revoke has this id.".into(),
        )),
        Err(err) => Err(crate::http::error::ApiError::from(err).into()),
    }
}

/// The list after a revocation, saying so (a redirect: a reload sends nothing again).
fn revoked(visit: &Visit) -> Response {
    see_other(&format!("{}/standing?revoked=1", visit.base.0))
}
