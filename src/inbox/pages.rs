//! The pages people read: the queue (and its fragment, for live updates), the live event
//! stream, one call, and the calls to reconcile.

use askama::Template;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::form::{self, Form, Kind, Node, Submitted};
use super::session::{Signed, Visit, sign_in_page};
use super::views::{Answer, Nav, PageError, ago, secure, until};
use crate::contract::error::InputViolation;
use crate::feed::stream::{Audience, follow};
use crate::http::error::ApiError;
use crate::http::sse::{resume_point, sse, start_cursor};
use crate::store::{CallFilter, CallRecord, CallStatus, Timestamp};

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
    asked_at: String,
    left: String,
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

async fn queue_list(visit: &Visit, query: &QueueQuery) -> Result<QueueList, PageError> {
    let tool = query.tool();
    let page = visit
        .dispatcher()
        .store()
        .pending_approvals_of(tool, query.after(), PAGE)
        .await?;
    let now = Timestamp::now();
    let items = page
        .approvals
        .into_iter()
        .map(|approval| QueueItem {
            call_id: approval.call_id,
            tool: approval.tool,
            reason: approval.reason,
            caller: approval.caller.unwrap_or_else(|| "(auth off)".into()),
            asked: ago(approval.created_at, now),
            asked_at: approval.created_at.to_string(),
            left: approval
                .expires_at
                .map_or_else(|| "no expiry".into(), |at| until(at, now)),
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
    let list = queue_list(&visit, &query).await?;
    let chosen = query.tool();
    let tools = visit
        .dispatcher()
        .tools()
        .iter()
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
    let list = queue_list(&visit, &query).await?;
    Ok(signed.show(StatusCode::OK, &QueueFragment { list }))
}

/// `GET /inbox/events`: the change feed for the page's script, over the same stream as
/// `GET /events` (authenticated by the session, as `EventSource` sends no bearer token), with
/// no suspension tokens: the page never needs one.
pub(crate) async fn events(visit: Visit) -> Answer {
    let signed = visit.require().await?;
    let store = visit.dispatcher().store();
    let resume = resume_point(&visit.headers, None);
    let cursor = match start_cursor(store.as_ref(), resume).await {
        Ok(cursor) => cursor,
        // A cursor too old (or from another server): start with what comes next.
        Err(ApiError::CursorExpired | ApiError::BadRequest(_)) => {
            start_cursor(store.as_ref(), None).await?
        }
        Err(err) => return Err(err.into()),
    };
    let audience = Audience {
        only: signed.principal.only_own(),
        ..Audience::default()
    };
    let released = visit.dispatcher().running().released();
    let stream = sse(follow(store.clone(), cursor, released, audience));
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
    since_at: String,
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
        .store()
        .list_calls(filter, query.after(), PAGE)
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
                since_at: call.updated_at.to_string(),
            })
            .collect(),
        next: page_of
            .next_cursor
            .map(|next| query.link(Some(&next.to_string()))),
    };
    Ok(signed.show(StatusCode::OK, &view))
}

/// `GET /inbox/calls/{call_id}`: one call: its approval while it waits for a person, its
/// settlement while it needs reconciliation, and always its history.
pub(crate) async fn call(visit: Visit, Path(call_id): Path<String>) -> Answer {
    let Some(signed) = visit.signed().await? else {
        return Ok(visit.home());
    };
    let call = visit
        .dispatcher()
        .store()
        .call(&call_id)
        .await?
        .ok_or(PageError::UnknownCall(call_id))?;
    Ok(call_page(
        &visit,
        &signed,
        &call,
        Typed::default(),
        StatusCode::OK,
    ))
}

/// What a person typed into one of a page's forms and why it was refused, kept when the page
/// is shown again.
#[derive(Default)]
pub(crate) struct Typed {
    /// The approval's answer.
    pub(crate) approve: Option<(Submitted, Vec<InputViolation>)>,
    /// The rejection's reason, and what is wrong with it.
    pub(crate) reject: Option<(String, String)>,
    /// The external completion's output.
    pub(crate) complete: Option<(Submitted, Vec<InputViolation>)>,
    /// A settlement's output.
    pub(crate) settle: Option<(Submitted, Vec<InputViolation>)>,
    /// A settlement's error, and what is wrong with it.
    pub(crate) settle_error: Option<(String, String)>,
    /// A line at the top of the page: the call was decided meanwhile, say.
    pub(crate) notice: Option<String>,
}

impl Typed {
    /// An approval's answer shown again, with what is wrong with it.
    pub(crate) fn approving(typed: (Submitted, Vec<InputViolation>)) -> Typed {
        Typed {
            approve: Some(typed),
            ..Typed::default()
        }
    }

    /// An external completion's output shown again, with what is wrong with it.
    pub(crate) fn completing(typed: (Submitted, Vec<InputViolation>)) -> Typed {
        Typed {
            complete: Some(typed),
            ..Typed::default()
        }
    }

    /// A settlement's output shown again, with what is wrong with it.
    pub(crate) fn settling(typed: (Submitted, Vec<InputViolation>)) -> Typed {
        Typed {
            settle: Some(typed),
            ..Typed::default()
        }
    }
}

/// One entry of a call's history.
pub(crate) struct HistoryRow {
    at: String,
    what: String,
    actor: Option<String>,
    details: Option<String>,
}

/// A pending suspension as the page shows it.
pub(crate) struct Pending {
    reason: String,
    asked: String,
    left: String,
}

/// A text field and its refusal.
pub(crate) struct TextField {
    value: String,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "call.html")]
struct CallPage {
    base: String,
    nav: Option<Nav>,
    title: String,
    csrf: String,
    call_id: String,
    tool: String,
    status: &'static str,
    effect: &'static str,
    is_write: bool,
    caller: String,
    created: String,
    description: Option<String>,
    input: String,
    output: Option<String>,
    error: Option<String>,
    pending: Option<Pending>,
    approve: Option<Form>,
    reject: TextField,
    complete: Option<Form>,
    settle: Option<Form>,
    settle_error: TextField,
    history: Vec<HistoryRow>,
    notice: Option<String>,
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// What happened, in words.
fn event_label(kind: &str) -> String {
    match kind {
        "created" => "Called".into(),
        "suspended" => "Waiting for a person".into(),
        "approved" => "Approved".into(),
        "rejected" => "Rejected".into(),
        "completed_externally" => "Completed externally".into(),
        "redispatched" => "Run again".into(),
        "completed" => "Completed".into(),
        "failed" => "Failed".into(),
        "interrupted" => "Interrupted".into(),
        "needs_reconciliation" => "Needs reconciliation".into(),
        "reconciled" => "Settled".into(),
        "expired" => "Expired".into(),
        "late_outcome" => "Late outcome refused".into(),
        other => other.replace('_', " "),
    }
}

/// Who decided the call, and what, for a page that arrives too late to decide it.
pub(crate) fn decided(call: &CallRecord) -> String {
    let now = Timestamp::now();
    let decision = call.events.iter().rev().find(|event| {
        matches!(
            event.kind.as_str(),
            "approved" | "rejected" | "completed_externally" | "expired" | "reconciled"
        )
    });
    match decision {
        Some(event) => format!(
            "This call was already decided: {} by {}, {}. It is {} now.",
            event_label(&event.kind).to_lowercase(),
            event.actor.as_deref().unwrap_or("someone with auth off"),
            ago(event.at, now),
            call.status.as_str().replace('_', " ")
        ),
        None => format!(
            "This call no longer waits for a person: it is {}.",
            call.status.as_str().replace('_', " ")
        ),
    }
}

/// The page of `call`, with what was typed into its forms.
pub(crate) fn call_page(
    visit: &Visit,
    signed: &Signed,
    call: &CallRecord,
    typed: Typed,
    status: StatusCode,
) -> Response {
    let tools = visit.dispatcher().tools();
    let tool = tools.get(&call.tool);
    let output_schema = tool.and_then(|tool| tool.output_schema());
    let now = Timestamp::now();
    let suspension = call
        .suspension
        .as_ref()
        .filter(|_| call.status == CallStatus::Suspended);
    let form_of = |id, schema: &Value, typed: Option<(Submitted, Vec<InputViolation>)>| {
        let (submitted, violations) = typed.unwrap_or_default();
        form::render(id, schema, &submitted, &violations)
    };
    let text = |typed: Option<(String, String)>| match typed {
        Some((value, error)) => TextField {
            value,
            error: Some(error),
        },
        None => TextField {
            value: String::new(),
            error: None,
        },
    };
    let settling = matches!(
        call.status,
        CallStatus::NeedsReconciliation | CallStatus::Interrupted
    );
    // A tool without an output schema (or no longer served) is settled with any JSON.
    let any = Value::Bool(true);
    let view = CallPage {
        base: visit.base.0.clone(),
        nav: Some(signed.nav()),
        title: format!("{} · {}", call.tool, call.call_id),
        csrf: signed.csrf.clone(),
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        status: call.status.as_str(),
        effect: call.effect.as_str(),
        is_write: call.effect == crate::Effect::Write,
        caller: call.caller.clone().unwrap_or_else(|| "(auth off)".into()),
        created: format!("{} ({})", call.created_at, ago(call.created_at, now)),
        description: tool.map(|tool| tool.description().to_owned()),
        input: pretty(&call.input),
        output: call.output.as_ref().map(pretty),
        error: call.error.as_ref().map(|error| error.message.clone()),
        pending: suspension.map(|s| Pending {
            reason: s.reason.clone(),
            asked: ago(s.created_at, now),
            left: match s.expires_at {
                None => "never expires".into(),
                Some(at) if at.0 <= now.0 => "expired".into(),
                Some(at) => format!("expires {}", until(at, now)),
            },
        }),
        approve: suspension.map(|s| form_of("approve", &s.input_schema, typed.approve)),
        reject: text(typed.reject),
        complete: suspension
            .and(output_schema)
            .map(|schema| form_of("complete", schema, typed.complete)),
        settle: settling.then(|| form_of("settle", output_schema.unwrap_or(&any), typed.settle)),
        settle_error: text(typed.settle_error),
        history: call
            .events
            .iter()
            .map(|event| HistoryRow {
                at: format!("{} ({})", event.at, ago(event.at, now)),
                what: event_label(&event.kind),
                actor: event.actor.clone(),
                details: event
                    .details
                    .as_ref()
                    .map(|d| serde_json::to_string(d).unwrap_or_default()),
            })
            .collect(),
        notice: typed.notice,
    };
    signed.show(status, &view)
}
