//! One call's page: its approval while it waits for a person (what is asked, what approving
//! does, the input as a readable list), the confirmation step of approving a `write`, its
//! settlement while it needs reconciliation, the banner after a decision with the way on to
//! the next approval, and always its history in sentences.

use askama::Template;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::edit;
use super::form::{self, Form, Kind, Line, Node, Submitted};
use super::history::{HistoryRow, history};
use super::prose::Prose;
use super::session::{Signed, Visit};
use super::views::{Answer, Expiry, Moment, Nav, PageError, ago};
use crate::Effect;
use crate::contract::error::InputViolation;
use crate::dispatch::Withheld;
use crate::dispatch::who::Principal;
use crate::store::{CallRecord, CallStatus, RejectOption, Timestamp};

/// What was just decided on a call's page: the `?done=` of the page a decision redirects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Done {
    /// Approved (the tool ran again).
    Approved,
    /// Rejected.
    Rejected,
    /// Completed externally.
    Completed,
    /// Settled after it needed reconciliation.
    Settled,
}

impl Done {
    /// The flag in the page's URL.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Done::Approved => "approved",
            Done::Rejected => "rejected",
            Done::Completed => "completed",
            Done::Settled => "settled",
        }
    }

    /// The event that records this decision.
    fn event(self) -> &'static str {
        match self {
            Done::Approved => "approved",
            Done::Rejected => "rejected",
            Done::Completed => "completed_externally",
            Done::Settled => "reconciled",
        }
    }
}

/// The query of a call's page.
#[derive(Deserialize, Default)]
pub(crate) struct CallQuery {
    done: Option<Done>,
}

/// `GET /inbox/calls/{call_id}`: one call; after a decision (`?done=`), with a banner saying
/// what it did and a link to the next pending approval.
pub(crate) async fn call(
    visit: Visit,
    Path(call_id): Path<String>,
    Query(query): Query<CallQuery>,
) -> Answer {
    let Some(signed) = visit.signed().await? else {
        return Ok(visit.home());
    };
    let call = visit
        .dispatcher()
        .visible_call(&signed.principal, &call_id)
        .await?;
    let banner = match query.done {
        Some(done) => banner(&visit, &signed.principal, &call, done).await?,
        None => None,
    };
    let typed = Typed {
        banner,
        ..Typed::default()
    };
    Ok(call_page(&visit, &signed, &call, typed, StatusCode::OK))
}

/// The banner after `done` on `call`, with the way on; none when the call's history does not
/// record that decision last (a link followed from elsewhere, say), so a banner never claims
/// what did not happen.
pub(crate) async fn banner(
    visit: &Visit,
    principal: &Principal,
    call: &CallRecord,
    done: Done,
) -> Result<Option<Banner>, PageError> {
    let last = call.events.iter().rev().find(|event| {
        matches!(
            event.kind.as_str(),
            "approved" | "approval_recorded" | "rejected" | "completed_externally" | "reconciled"
        )
    });
    let Some(last) = last else {
        return Ok(None);
    };
    let recorded = done == Done::Approved && last.kind == "approval_recorded";
    if last.kind != done.event() && !recorded {
        return Ok(None);
    }
    let tool = &call.tool;
    let text = match (done, call.status) {
        (Done::Approved, CallStatus::Suspended) if recorded => {
            let progress = visit.dispatcher().approval_progress(call, principal);
            let (given, required) = progress.map_or((0, 1), |p| (p.approvals.len(), p.required));
            format!(
                "Your approval is recorded: {} of {required}. {tool} runs once other approvers \
                 approve it too.",
                given
            )
        }
        (Done::Approved, CallStatus::Completed) => format!("Approved. {tool} ran and completed."),
        (Done::Approved, CallStatus::Failed) => {
            format!("Approved. {tool} ran and failed: the history below says why.")
        }
        (Done::Approved, CallStatus::Suspended) => {
            format!("Approved. {tool} ran and asks again: see what is asked below.")
        }
        (Done::Approved, CallStatus::NeedsReconciliation) => format!(
            "Approved. {tool} ran, but whether its effect happened is not known: settle it below."
        ),
        (Done::Approved, CallStatus::Running) => format!("Approved. {tool} is running."),
        (Done::Approved, status) => format!("Approved. The call is {} now.", words(status)),
        (Done::Rejected, _) => format!("Rejected. {tool} did not run; the caller reads why."),
        (Done::Completed, _) => {
            format!("Completed externally. The receipt is the call's output; {tool} did not run.")
        }
        (Done::Settled, CallStatus::Completed) => "Settled as done.".to_owned(),
        (Done::Settled, _) => "Settled as not done.".to_owned(),
    };
    // The oldest approval waiting, other than this call (which may ask again).
    let waiting = visit
        .dispatcher()
        .pending_approvals(principal, None, None, 2, None)
        .await?;
    let next = waiting
        .approvals
        .into_iter()
        .find(|approval| approval.call_id != call.call_id)
        .map(|approval| Next {
            call_id: approval.call_id,
            tool: approval.tool,
            reason: approval.reason,
        });
    Ok(Some(Banner { text, next }))
}

/// A status in words: `needs_reconciliation` is "needs reconciliation".
fn words(status: CallStatus) -> String {
    status.as_str().replace('_', " ")
}

/// The line at the top of a call's page after a decision.
pub(crate) struct Banner {
    /// What the decision did.
    text: String,
    /// The oldest approval still waiting; none left, the page links back to the queue.
    next: Option<Next>,
}

/// The next approval to decide, as the banner links to it.
pub(crate) struct Next {
    call_id: String,
    tool: String,
    reason: String,
}

/// What a person typed into one of a page's forms and why it was refused, kept when the page
/// is shown again.
#[derive(Default)]
pub(crate) struct Typed {
    /// The approval's answer.
    pub(crate) approve: Option<(Submitted, Vec<InputViolation>)>,
    /// The approver's edit of the call's input (`edit.rs`).
    pub(crate) edit: Option<(Submitted, Vec<InputViolation>)>,
    /// An approval's answer to confirm: the form's pairs, carried in hidden fields, and the
    /// answer read from them.
    pub(crate) confirm: Option<(Vec<(String, String)>, Value)>,
    /// The call's input as the person edited it, with the answer to confirm.
    pub(crate) confirm_edit: Option<Value>,
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
    /// What a decision just did.
    pub(crate) banner: Option<Banner>,
}

impl Typed {
    /// An approval's answer shown again, with what is wrong with it.
    pub(crate) fn approving(typed: (Submitted, Vec<InputViolation>)) -> Typed {
        Typed {
            approve: Some(typed),
            ..Typed::default()
        }
    }

    /// An approval's answer `answer`, read from the form's `pairs`, to confirm.
    pub(crate) fn confirming(pairs: Vec<(String, String)>, answer: Value) -> Typed {
        Typed {
            confirm: Some((pairs, answer)),
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

/// A value as the page shows it: a readable list, with its JSON one click away.
pub(crate) struct Shown {
    lines: Vec<Line>,
    json: String,
}

impl Shown {
    fn of(schema: &Value, value: &Value) -> Shown {
        Shown {
            lines: form::show(schema, value),
            json: serde_json::to_string_pretty(value).unwrap_or_default(),
        }
    }
}

/// A pending suspension as the page shows it.
pub(crate) struct Pending {
    /// Whether it was escalated, undecided past its policy's time.
    escalated: bool,
    reason: String,
    asked: String,
    asked_at: Moment,
    expiry: Expiry,
}

/// Where a call that needs several approvers stands, and why the person looking may not
/// approve it, if they may not.
pub(crate) struct Progress {
    /// "1 of 2 approvals: corp:alice".
    text: String,
    /// Why there is no approve form for this person: they approved, or made the call.
    withheld: Option<&'static str>,
}

/// Where `call`'s approvals stand for `principal`, as the page says it.
fn progress(visit: &Visit, call: &CallRecord, principal: &Principal) -> Option<Progress> {
    let progress = visit.dispatcher().approval_progress(call, principal)?;
    let shown: Vec<String> = progress
        .approvals
        .iter()
        .map(|event| match (&event.actor_name, &event.actor) {
            (Some(name), Some(actor)) => format!("{name} ({actor})"),
            (None, Some(actor)) => actor.clone(),
            (_, None) => "(auth off)".to_owned(),
        })
        .collect();
    let required = progress.required;
    let text = if shown.is_empty() {
        format!("0 of {required} approvals.")
    } else {
        format!(
            "{} of {required} approvals: {}.",
            shown.len(),
            shown.join(", ")
        )
    };
    let withheld = progress.withheld.map(|why| match why {
        Withheld::OwnCall => "You made this call: another approver must approve it.",
        Withheld::ApprovedAlready => {
            "You approved this call; the other approvals must come from other approvers."
        }
    });
    Some(Progress { text, withheld })
}

/// The confirmation step of approving a `write`.
pub(crate) struct Confirm {
    /// The answer, as a readable list.
    answer: Vec<Line>,
    /// The call's input as the person edited it, when it differs from the input as it
    /// stands, as a readable list.
    edit: Option<Vec<Line>>,
    /// The answer form's pairs, sent again with the confirmation.
    hidden: Vec<(String, String)>,
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
    /// Where the page's forms post: `…/calls/{call_id}`, or a decision link's page.
    actions: String,
    tool: String,
    status: &'static str,
    effect: &'static str,
    is_write: bool,
    /// What approving does beyond running the tool: its effect, in a sentence.
    consequence: &'static str,
    caller: String,
    created: Moment,
    created_ago: String,
    description: Option<Prose>,
    input: Shown,
    /// Who edited the input, in a sentence: the edit that stands while the call waits, or
    /// the one it ran with.
    edit_note: Option<String>,
    /// The input the call was made with, when it ran with an edited one.
    original: Option<Shown>,
    output: Option<Shown>,
    error: Option<String>,
    pending: Option<Pending>,
    /// Where the approvals stand, when the policy needs several or keeps callers apart.
    progress: Option<Progress>,
    approve: Option<Form>,
    /// The call's input to edit as it is approved, where its policy allows edits.
    edit: Option<Form>,
    /// A standing approval the approve form offers, where the tool's policy makes one.
    standing: Option<super::standing::StandingOffer>,
    confirm: Option<Confirm>,
    reject: TextField,
    /// The rejection options of the tool's approval policy, to choose one of.
    reject_options: Vec<RejectOption>,
    complete: Option<Form>,
    /// Whether the external completion is shown open: when it was just refused.
    complete_open: bool,
    settle: Option<Form>,
    settle_error: TextField,
    history: Vec<HistoryRow>,
    notice: Option<String>,
    banner: Option<Banner>,
}

/// Who edited `call`'s input, in a sentence: the edit that stands while it `waits`, or the
/// one it ran with.
fn edit_note(call: &CallRecord, waits: bool) -> Option<String> {
    if waits {
        return edit::standing_editor(call).map(|who| {
            format!(
                "Edited by {who} while it waits: this is the input it runs with, and every \
                 approval counted is of it."
            )
        });
    }
    let mark = call.edited.as_ref()?;
    let who = mark.display_name.as_ref().or(mark.by.as_ref());
    Some(format!(
        "Edited by {} before it ran: it ran with this input.",
        who.map_or("an approver (auth off)", String::as_str)
    ))
}

/// What approving a tool with `effect` does to the world, in a sentence.
fn consequence(effect: Effect) -> &'static str {
    match effect {
        Effect::Write => {
            "This is a write: it changes something outside toolgate, and toolgate does not undo \
             it."
        }
        Effect::Idempotent => {
            "It is idempotent: it changes something outside toolgate, but running it again with \
             the same key changes nothing more."
        }
        Effect::Read => "It only reads: nothing outside toolgate changes.",
    }
}

/// What happened, in words.
fn event_label(kind: &str) -> String {
    match kind {
        "approved" => "Approved".into(),
        "rejected" => "Rejected".into(),
        "completed_externally" => "Completed externally".into(),
        "reconciled" => "Settled".into(),
        "expired" => "Expired".into(),
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
            words(call.status)
        ),
        None => format!(
            "This call no longer waits for a person: it is {}.",
            words(call.status)
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
    // A tool no longer served: its values are listed by their names alone.
    let any = Value::Bool(true);
    let input_schema = tool.map_or(&any, |tool| tool.input_schema());
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
    let confirm_edit = typed
        .confirm_edit
        .filter(|edit| edit != edit::standing_input(call));
    let confirm = suspension
        .zip(typed.confirm)
        .map(|(s, (hidden, answer))| Confirm {
            answer: form::show(&s.input_schema, &answer),
            edit: confirm_edit.map(|edit| form::show(input_schema, &edit)),
            hidden,
        });
    let complete_open = typed.complete.is_some();
    let rule = visit.dispatcher().approval_rule(&call.tool);
    let progress = suspension.and_then(|_| progress(visit, call, &signed.principal));
    // Whoever may not approve (they did, or made the call) is offered no approve form, and
    // completing externally would stand for every approver: offered only when one will do.
    let may_approve = progress.as_ref().is_none_or(|p| p.withheld.is_none());
    let may_complete = may_approve && rule.required <= 1;
    let view = CallPage {
        base: visit.base.0.clone(),
        nav: signed.link.is_none().then(|| signed.nav()),
        title: format!("{} · {}", call.tool, call.call_id),
        csrf: signed.csrf.clone(),
        call_id: call.call_id.clone(),
        actions: (signed.link.clone())
            .unwrap_or_else(|| format!("{}/calls/{}", visit.base.0, call.call_id)),
        tool: call.tool.clone(),
        status: call.status.as_str(),
        effect: call.effect.as_str(),
        is_write: call.effect == Effect::Write,
        consequence: consequence(call.effect),
        caller: call.caller.clone().unwrap_or_else(|| "(auth off)".into()),
        created: Moment::of(call.created_at, now),
        created_ago: ago(call.created_at, now),
        description: tool.map(|tool| Prose::parse(tool.description())),
        input: Shown::of(
            input_schema,
            suspension.map_or(&call.input, |_| edit::standing_input(call)),
        ),
        edit_note: edit_note(call, suspension.is_some()),
        original: call
            .original_input
            .as_ref()
            .map(|original| Shown::of(input_schema, original)),
        output: call
            .output
            .as_ref()
            .map(|output| Shown::of(output_schema.unwrap_or(&any), output)),
        error: call.error.as_ref().map(|error| error.message.clone()),
        pending: suspension.map(|s| Pending {
            escalated: crate::dispatch::escalated(call),
            reason: s.reason.clone(),
            asked: ago(s.created_at, now),
            asked_at: Moment::of(s.created_at, now),
            expiry: Expiry::of(s.expires_at, now),
        }),
        approve: suspension
            .filter(|_| may_approve)
            .map(|s| form_of("approve", &s.input_schema, typed.approve)),
        edit: suspension
            .filter(|_| may_approve)
            .and_then(|_| edit::edit_form(visit.dispatcher(), call, typed.edit)),
        standing: suspension
            .filter(|_| may_approve)
            .and_then(|_| super::standing::offer(visit, signed, call)),
        progress,
        confirm: confirm.filter(|_| may_approve),
        reject: text(typed.reject),
        reject_options: visit.dispatcher().reject_options(&call.tool),
        complete: suspension
            .filter(|_| may_complete && signed.link.is_none())
            .and(output_schema)
            .map(|schema| form_of("complete", schema, typed.complete)),
        complete_open,
        settle: settling.then(|| form_of("settle", output_schema.unwrap_or(&any), typed.settle)),
        settle_error: text(typed.settle_error),
        history: history(&call.events, now),
        notice: typed.notice,
        banner: typed.banner,
    };
    signed.show(status, &view)
}
