//! The lists people read: the queue (and its fragment, for live updates), the live event
//! stream, and the calls to reconcile. One call's page is `call.rs`.

use askama::Template;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use futures_util::StreamExt;
use serde::Deserialize;

use super::session::{Visit, sign_in_page};
use super::views::{Answer, Expiry, Moment, Nav, PageError, ago, secure};
use crate::dispatch::who::Principal;
use crate::dispatch::{EventFilter, Resume};
use crate::http::sse::{resume_point, sse};
use crate::store::{CallFilter, CallStatus, Timestamp};

/// Approvals per page of the queue.
const PAGE: u32 = 50;

/// The queue's filter and page.
#[derive(Deserialize, Default)]
pub(crate) struct QueueQuery {
    tool: Option<String>,
    after: Option<String>,
}

impl QueueQuery {
    fn tool(&self) -> Option<&str> {
        self.tool
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
    }

    fn after(&self) -> Option<i64> {
        self.after.as_deref()?.parse().ok().filter(|seq| *seq > 0)
    }

    /// The query string of this filter (and `after`), for links.
    fn link(&self, after: Option<&str>) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        if let Some(tool) = self.tool() {
            query.append_pair("tool", tool);
        }
        if let Some(after) = after {
            query.append_pair("after", after);
        }
        let query = query.finish();
        if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        }
    }
}

/// One row of the queue.
pub(crate) struct QueueItem {
    call_id: String,
    tool: String,
    reason: String,
    caller: String,
    asked: String,
    asked_at: Moment,
    expiry: Expiry,
    /// "1 of 2 approvals", when its tool's policy needs several.
    progress: Option<String>,
    /// How long ago it was escalated, if it was.
    escalated: Option<String>,
}

/// The list of the queue: what the script swaps in when something changes.
pub(crate) struct QueueList {
    base: String,
    items: Vec<QueueItem>,
    tool: Option<String>,
    next: Option<String>,
    first: Option<String>,
}

/// The queue's list alone.
#[derive(Template)]
#[template(path = "queue_list.html")]
struct QueueFragment {
    list: QueueList,
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    base: String,
    nav: Option<Nav>,
    title: &'static str,
    tools: Vec<(String, bool)>,
    fragment: String,
    list: QueueList,
}

async fn queue_list(
    visit: &Visit,
    principal: &Principal,
    query: &QueueQuery,
) -> Result<QueueList, PageError> {
    let tool = query.tool();
    let page = visit
        .dispatcher()
        .pending_approvals(principal, tool, query.after(), PAGE, None)
        .await?;
    let now = Timestamp::now();
    let items = page
        .approvals
        .into_iter()
        .map(|approval| QueueItem {
            escalated: approval.escalated_at.map(|at| ago(at, now)),
            progress: (approval.approvals_required > 1).then(|| {
                format!(
                    "{} of {} approvals",
                    approval.approvals.len(),
                    approval.approvals_required
                )
            }),
            call_id: approval.call_id,
            tool: approval.tool,
            reason: approval.reason,
            caller: approval.caller.unwrap_or_else(|| "(auth off)".into()),
            asked: ago(approval.created_at, now),
            asked_at: Moment::of(approval.created_at, now),
            expiry: Expiry::of(approval.expires_at, now),
        })
        .collect();
    Ok(QueueList {
        base: visit.base.0.clone(),
        items,
        tool: tool.map(str::to_owned),
        next: page
            .next_cursor
            .map(|next| query.link(Some(&next.to_string()))),
        first: query.after().map(|_| query.link(None)),
    })
}

/// `GET /inbox`: the queue of pending approvals, oldest first; or, without a session, the
/// sign-in page.
pub(crate) async fn queue(visit: Visit, Query(query): Query<QueueQuery>) -> Answer {
    let Some(signed) = visit.signed().await? else {
        return Ok(sign_in_page(&visit, StatusCode::OK, None));
    };
    let list = queue_list(&visit, &signed.principal, &query).await?;
    let chosen = query.tool();
    let tools = visit
        .dispatcher()
        .tools()
        .iter()
        .filter(|tool| signed.principal.may_decide(tool.name()))
        .map(|tool| (tool.name().to_owned(), Some(tool.name()) == chosen))
        .collect();
    let view = QueuePage {
        base: visit.base.0.clone(),
        nav: Some(signed.nav()),
        title: "Approvals",
        tools,
        fragment: format!(
            "{}/queue{}",
            visit.base.0,
            query.link(query.after.as_deref())
        ),
        list,
    };
    Ok(signed.show(StatusCode::OK, &view))
}

/// `GET /inbox/queue`: the queue's list alone, for the page's script to swap in.
pub(crate) async fn queue_fragment(visit: Visit, Query(query): Query<QueueQuery>) -> Answer {
    let signed = visit.require().await?;
    let list = queue_list(&visit, &signed.principal, &query).await?;
    Ok(signed.show(StatusCode::OK, &QueueFragment { list }))
}

/// `GET /inbox/events`: the change feed for the page's script, over the same stream as
/// `GET /events` (authenticated by the session, as `EventSource` sends no bearer token), with
/// no suspension tokens: the page never needs one.
pub(crate) async fn events(visit: Visit) -> Answer {
    let signed = visit.require().await?;
    // An open page's stream counts against its principal's `max_held`, as `GET /events` does.
    let counted = visit
        .dispatcher()
        .quotas()
        .hold(&signed.principal)
        .map_err(|refused| PageError::OverQuota(Box::new(refused)))?;
    // A cursor too old (or from another server): start with what comes next.
    let resume = resume_point(&visit.headers, None).map_or(Resume::Now, Resume::AfterOrNow);
    let events = visit
        .dispatcher()
        .events(&signed.principal, resume, EventFilter::default())
        .await?;
    let store = visit.dispatcher().store();
    let ended = signed.ended(store.clone());
    // A stream holds no slot of `max_in_flight` (it is held, not handled).
    drop(signed);
    let stream = sse(events.take_until(ended), counted);
    let mut response = stream.into_response();
    secure(response.headers_mut());
    Ok(response)
}

/// A call as the reconcile list shows it.
pub(crate) struct ReconcileItem {
    call_id: String,
    tool: String,
    caller: String,
    since: String,
    since_at: Moment,
}

#[derive(Template)]
#[template(path = "reconcile.html")]
struct ReconcilePage {
    base: String,
    nav: Option<Nav>,
    title: &'static str,
    items: Vec<ReconcileItem>,
    next: Option<String>,
}

/// `GET /inbox/reconcile`: calls whose effect may or may not have happened, newest first, each
/// linking to its page, where it is settled.
pub(crate) async fn reconcile(visit: Visit, Query(query): Query<QueueQuery>) -> Answer {
    let Some(signed) = visit.signed().await? else {
        return Ok(visit.home());
    };
    let filter = CallFilter {
        status: Some(CallStatus::NeedsReconciliation),
        tool: query.tool().map(str::to_owned),
    };
    let page_of = visit
        .dispatcher()
        .visible_calls(&signed.principal, filter, query.after(), PAGE)
        .await?;
    let now = Timestamp::now();
    let view = ReconcilePage {
        base: visit.base.0.clone(),
        nav: Some(signed.nav()),
        title: "To reconcile",
        items: page_of
            .calls
            .into_iter()
            .map(|call| ReconcileItem {
                call_id: call.call_id,
                tool: call.tool,
                caller: call.caller.unwrap_or_else(|| "(auth off)".into()),
                since: ago(call.updated_at, now),
                since_at: Moment::of(call.updated_at, now),
            })
            .collect(),
        next: page_of
            .next_cursor
            .map(|next| query.link(Some(&next.to_string()))),
    };
    Ok(signed.show(StatusCode::OK, &view))
}
