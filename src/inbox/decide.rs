//! The decisions: approve, reject, complete externally, settle. Each translates its form into
//! the dispatcher's call, exactly as the REST handlers do (the same checks, the signed-in key's
//! name as the actor), and its result back into a page: the call's page after a decision (a
//! redirect to `…/calls/{id}?done=…`, so a reload does not send the form again, and the page
//! says what was done), the same form with each message at its field after a refusal (`422`),
//! or the call's history when someone else decided first.
//!
//! Approving a `write` takes two posts, without script: the first (an answer the lifecycle
//! would accept) shows a confirmation that says what will happen, carrying the answer in
//! hidden fields; only the second, with `confirm=1`, approves. Reads and idempotent tools
//! approve at once. The REST API is not changed by this: it is the page's step.

use axum::Form;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::InboxState;
use super::call::{Done, Typed, call_page, decided};
use super::edit;
use super::form::{self, Submitted};
use super::session::{Signed, Visit};
use super::views::{Answer, PageError, see_other};
use crate::Effect;
use crate::contract::error::InputViolation;
use crate::dispatch::who::Principal;
use crate::dispatch::{DispatchError, Dispatcher};
use crate::dispatch::{MAX_REASON_CHARS, ReasonRefused};
use crate::store::{CallRecord, CallStatus, Settlement};

/// Where a refused answer form shows again what was typed into it, and what is wrong with it.
type Refill = fn((Submitted, Vec<InputViolation>)) -> Typed;

/// The value of the field `name`, if sent.
fn field<'p>(pairs: &'p [(String, String)], name: &str) -> Option<&'p str> {
    pairs
        .iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// A submitted decision, as every decision starts: the session (with the form's CSRF token
/// checked), the call, and the form's pairs in order.
pub(crate) struct Decision {
    visit: Visit,
    signed: Signed,
    call: CallRecord,
    pairs: Vec<(String, String)>,
}

/// `/inbox/calls/{call_id}/…` with its form, read as the handlers once took it apart (the
/// path, then the form), then checked: signed in, the CSRF token, a call with that id.
impl FromRequest<InboxState> for Decision {
    type Rejection = Response;

    async fn from_request(request: Request, app: &InboxState) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let Ok(visit) = Visit::from_request_parts(&mut parts, app).await;
        let Path(call_id) = Path::<String>::from_request_parts(&mut parts, app)
            .await
            .map_err(IntoResponse::into_response)?;
        let Form(pairs) =
            Form::<Vec<(String, String)>>::from_request(Request::from_parts(parts, body), app)
                .await
                .map_err(IntoResponse::into_response)?;
        Decision::begin(visit, &call_id, pairs)
            .await
            .map_err(IntoResponse::into_response)
    }
}

impl Decision {
    async fn begin(
        visit: Visit,
        call_id: &str,
        pairs: Vec<(String, String)>,
    ) -> Result<Decision, PageError> {
        let signed = visit.require().await?;
        signed.check_csrf(field(&pairs, "csrf"))?;
        let call = visit
            .dispatcher()
            .visible_call(&signed.principal, call_id)
            .await?;
        Ok(Decision {
            visit,
            signed,
            call,
            pairs,
        })
    }

    /// A decision sent from a decision link's page (`link.rs`), which checked the link, the
    /// person's rights and the page's CSRF token, and found the call.
    pub(crate) fn by_link(
        visit: Visit,
        signed: Signed,
        call: CallRecord,
        pairs: Vec<(String, String)>,
    ) -> Decision {
        Decision {
            visit,
            signed,
            call,
            pairs,
        }
    }

    /// The value of the form's field `name`, if sent.
    fn field(&self, name: &str) -> Option<&str> {
        field(&self.pairs, name)
    }

    fn dispatcher(&self) -> &Dispatcher {
        self.visit.dispatcher()
    }

    /// Who decides: the signed-in person.
    fn principal(&self) -> &Principal {
        &self.signed.principal
    }

    /// The pending suspension's token, looked up from the call: URLs never carry it.
    fn token(&self) -> Option<String> {
        self.call
            .suspension
            .as_ref()
            .filter(|_| self.call.status == CallStatus::Suspended)
            .map(|s| s.token.clone())
    }

    /// The output schema of the call's tool, if it declares one and is still served.
    fn output_schema(&self) -> Option<Value> {
        self.dispatcher()
            .tools()
            .get(&self.call.tool)
            .and_then(|tool| tool.output_schema())
            .cloned()
    }

    /// The call's page again, with `typed` and `status` (and the edit of the call's input as
    /// it was typed, if one was sent).
    fn page(&self, mut typed: Typed, status: StatusCode) -> Response {
        if typed.edit.is_none() && field(&self.pairs, "edit") == Some("1") {
            let submitted = Submitted::from_pairs_named(&self.pairs, edit::PREFIX);
            typed.edit = Some((submitted, Vec::new()));
        }
        call_page(&self.visit, &self.signed, &self.call, typed, status)
    }

    /// The call's page as it is now, after `done` was decided here (or, with `None`, after it
    /// was settled elsewhere).
    fn done(&self, done: Option<Done>) -> Response {
        let flag = done.map_or(String::new(), |done| format!("?done={}", done.as_str()));
        let page = (self.signed.link.clone())
            .unwrap_or_else(|| format!("{}/calls/{}", self.visit.base.0, self.call.call_id));
        see_other(&format!("{page}{flag}"))
    }

    /// The call's history, saying who decided it first: the answer to a decision that came
    /// too late.
    async fn too_late(&self, status: StatusCode) -> Answer {
        self.with_notice(decided, status).await
    }

    /// The call's page as it is now, with the `notice` about it at its top, answered with
    /// `status`.
    async fn with_notice(
        &self,
        notice: impl FnOnce(&CallRecord) -> String,
        status: StatusCode,
    ) -> Answer {
        let now = self
            .dispatcher()
            .store()
            .call(&self.call.call_id)
            .await?
            .unwrap_or_else(|| self.call.clone());
        let typed = Typed {
            notice: Some(notice(&now)),
            ..Typed::default()
        };
        Ok(call_page(&self.visit, &self.signed, &now, typed, status))
    }

    /// The answer to what the lifecycle made of the decision: the call's page, or a refusal.
    async fn outcome<T>(
        &self,
        done: Done,
        result: Result<T, DispatchError>,
        refused: impl FnOnce(Vec<InputViolation>) -> Typed,
    ) -> Answer {
        match result {
            Ok(_) => Ok(self.done(Some(done))),
            Err(err) => self.refused(err, refused).await,
        }
    }

    /// A refusal of the lifecycle as a page: the form again (`refused`), or the history.
    async fn refused(
        &self,
        err: DispatchError,
        refused: impl FnOnce(Vec<InputViolation>) -> Typed,
    ) -> Answer {
        if let Some(refused) = super::standing::refusal(&err) {
            return Err(refused);
        }
        match err {
            DispatchError::InvalidResumeInput(violations)
            | DispatchError::OutputSchemaViolation(violations) => {
                Ok(self.page(refused(violations), StatusCode::UNPROCESSABLE_ENTITY))
            }
            // The edit of the call's input does not fit the tool's: said at its fields.
            DispatchError::InvalidInput { violations, .. } => {
                let submitted = Submitted::from_pairs_named(&self.pairs, edit::PREFIX);
                let typed = Typed {
                    edit: Some((submitted, violations)),
                    ..refused(Vec::new())
                };
                Ok(self.page(typed, StatusCode::UNPROCESSABLE_ENTITY))
            }
            DispatchError::EditNotAllowed(tool) => Err(PageError::BadRequest(format!(
                "The approval policy of {tool} does not allow editing a call's input."
            ))),
            DispatchError::TooDeep(max) => Ok(self.page(
                refused(vec![too_deep(max)]),
                StatusCode::UNPROCESSABLE_ENTITY,
            )),
            DispatchError::AlreadyResolved(_)
            | DispatchError::UnknownToken
            | DispatchError::NotReconcilable(_) => self.too_late(StatusCode::CONFLICT).await,
            DispatchError::SuspensionExpired(_) => self.too_late(StatusCode::GONE).await,
            // The tool changed upstream since the call was made: the call ended, unrun.
            DispatchError::ToolChanged { tool, .. } => {
                let notice = format!(
                    "The definition of {tool} changed upstream since this call was made, so \
                     the approval failed closed: the call ended with tool_changed, and nothing \
                     was sent. An admin reviews the change at /inbox/changes."
                );
                self.with_notice(|_| notice, StatusCode::CONFLICT).await
            }
            DispatchError::DecidesOwnCall(_) => Err(PageError::Forbidden(
                "You made this call, under the same name you signed in with: whoever calls a \
                 tool never decides on it. Another approver must."
                    .into(),
            )),
            DispatchError::AlreadyApproved {
                approvals,
                required,
            } => {
                let notice = format!(
                    "You approved this call already: {} of {required} approvals so far. The \
                     others must come from other approvers.",
                    approvals.len()
                );
                self.with_notice(|_| notice, StatusCode::CONFLICT).await
            }
            DispatchError::NeedsApprovals { tool, required } => {
                Err(PageError::BadRequest(format!(
                    "Calls of {tool} need {required} distinct approvers, so no one person may \
                     complete them: approve it instead."
                )))
            }
            DispatchError::CompletionNotAllowed(tool) => Err(PageError::BadRequest(format!(
                "Tool {tool} declares no output schema, so it cannot be completed externally."
            ))),
            // A lost lease: the call was settled meanwhile; its page says how.
            DispatchError::Store(crate::store::StoreError::LeaseLost(_)) => Ok(self.done(None)),
            other => Err(crate::http::error::ApiError::from(other).into()),
        }
    }

    /// The answer `schema` asks for, read from the form and handed to `decide`; a refusal (of
    /// the form, or by the lifecycle) shows what was typed again, where `refill` says.
    async fn with_answer<T>(
        &self,
        done: Done,
        schema: &Value,
        refill: Refill,
        decide: impl AsyncFnOnce(Value) -> Result<T, DispatchError>,
    ) -> Answer {
        let submitted = Submitted::from_pairs(&self.pairs);
        let typed = |violations| refill((submitted.clone(), violations));
        match form::read(schema, &submitted) {
            Ok(answer) => self.outcome(done, decide(answer).await, typed).await,
            Err(violations) => Ok(self.page(typed(violations), StatusCode::UNPROCESSABLE_ENTITY)),
        }
    }

    /// The first step of approving a `write`: the answer checked as the lifecycle will check
    /// it, then shown to confirm, with the form's pairs to send again; or the form, refused.
    fn to_confirm(&self, schema: &Value, edited: Option<Value>) -> Answer {
        let submitted = Submitted::from_pairs(&self.pairs);
        let checked = form::read(schema, &submitted).and_then(|answer| {
            match self.dispatcher().check_resume_input(schema, &answer) {
                Ok(()) => Ok(answer),
                Err(DispatchError::InvalidResumeInput(violations)) => Err(violations),
                Err(DispatchError::TooDeep(max)) => Err(vec![too_deep(max)]),
                // Nothing else is checked before a decision.
                Err(_) => Ok(answer),
            }
        });
        match checked {
            Ok(answer) => {
                let pairs = self
                    .pairs
                    .iter()
                    .filter(|(name, _)| {
                        let answer = name == "v" || name.starts_with("v/");
                        let edit = name == "edit" || name == "e" || name.starts_with("e/");
                        answer || edit || super::standing::is_standing_field(name)
                    })
                    .cloned()
                    .collect();
                let typed = Typed {
                    confirm_edit: edited,
                    ..Typed::confirming(pairs, answer)
                };
                Ok(self.page(typed, StatusCode::OK))
            }
            Err(violations) => Ok(self.page(
                Typed::approving((submitted, violations)),
                StatusCode::UNPROCESSABLE_ENTITY,
            )),
        }
    }
}

/// The lifecycle's bound on nesting, said at the form as a whole.
fn too_deep(max: usize) -> InputViolation {
    InputViolation {
        path: String::new(),
        message: format!("The answer is nested deeper than {max} levels."),
    }
}

/// `POST /inbox/calls/{call_id}/approve`: the answer from the suspension's `input_schema` form.
/// For a `write`, a first post shows the confirmation; the one with `confirm=1` approves, and
/// one with `change=1` shows the form again with the answer typed.
pub(crate) async fn approve(decision: Decision) -> Answer {
    let (Some(token), Some(suspension)) = (decision.token(), decision.call.suspension.as_ref())
    else {
        return decision.too_late(StatusCode::CONFLICT).await;
    };
    let schema = &suspension.input_schema;
    if decision.field("change").is_some() {
        let typed = Typed::approving((Submitted::from_pairs(&decision.pairs), Vec::new()));
        return Ok(decision.page(typed, StatusCode::OK));
    }
    // The call's input as the person edited it, where the policy allows edits.
    let edited = match edit::read(decision.dispatcher(), &decision.call, &decision.pairs) {
        Ok(edited) => edited,
        Err(typed) => {
            let typed = Typed {
                edit: Some(typed),
                ..Typed::approving((Submitted::from_pairs(&decision.pairs), Vec::new()))
            };
            return Ok(decision.page(typed, StatusCode::UNPROCESSABLE_ENTITY));
        }
    };
    if decision.call.effect == Effect::Write && decision.field("confirm") != Some("1") {
        // An edit is judged before the confirmation, as the answer is.
        if let Some(edit) = &edited
            && let Err(err) = decision
                .dispatcher()
                .check_edit(&decision.call.tool, edit.clone())
        {
            let typed = |_| Typed::approving((Submitted::from_pairs(&decision.pairs), Vec::new()));
            return decision.refused(err, typed).await;
        }
        return decision.to_confirm(schema, edited);
    }
    let standing = super::standing::asked(|name| decision.field(name).map(str::to_owned))?;
    let approve = async |input| {
        let principal = decision.principal();
        decision
            .dispatcher()
            .approve_with(
                &token,
                input,
                crate::dispatch::ApproveExtras {
                    edited_input: edited,
                    standing,
                },
                principal,
            )
            .await
    };
    decision
        .with_answer(Done::Approved, schema, Typed::approving, approve)
        .await
}

/// `POST /inbox/calls/{call_id}/reject`: with a reason, if the person gives one.
pub(crate) async fn reject(decision: Decision) -> Answer {
    let Some(token) = decision.token() else {
        return decision.too_late(StatusCode::CONFLICT).await;
    };
    // The form asks for a reason (the caller reads it), but the rule is the lifecycle's, as
    // on every door: trimmed, and an empty one is recorded as none.
    let reason = decision.field("reason").unwrap_or_default().to_owned();
    // A choice among the policy's options, or none (an empty value).
    let option = decision
        .field("option")
        .filter(|option| !option.is_empty())
        .map(str::to_owned);
    let rejected = decision
        .dispatcher()
        .reject(&token, Some(reason.clone()), option, decision.principal())
        .await;
    if let Err(DispatchError::ReasonRefused(refused)) = rejected {
        let typed = Typed {
            reject: Some((reason, worded(refused))),
            ..Typed::default()
        };
        return Ok(decision.page(typed, StatusCode::UNPROCESSABLE_ENTITY));
    }
    decision
        .outcome(Done::Rejected, rejected, |_| Typed::default())
        .await
}

/// The lifecycle's refusal of a reason, as the form says it at its field.
fn worded(refused: ReasonRefused) -> String {
    match refused {
        ReasonRefused::ReasonTooLong => {
            format!("The reason is longer than {MAX_REASON_CHARS} characters.")
        }
        ReasonRefused::ErrorOutOfBounds => {
            format!("Say why the effect did not happen (1 to {MAX_REASON_CHARS} characters).")
        }
    }
}

/// `POST /inbox/calls/{call_id}/complete`: the work was done outside the server; the output
/// from the tool's output-schema form is its receipt.
pub(crate) async fn complete(decision: Decision) -> Answer {
    let Some(token) = decision.token() else {
        return decision.too_late(StatusCode::CONFLICT).await;
    };
    let Some(schema) = decision.output_schema() else {
        let tool = decision.call.tool.clone();
        return decision
            .refused(DispatchError::CompletionNotAllowed(tool), |_| {
                Typed::default()
            })
            .await;
    };
    let complete = async |output| {
        let principal = decision.principal();
        decision
            .dispatcher()
            .complete(&token, output, principal)
            .await
    };
    decision
        .with_answer(Done::Completed, &schema, Typed::completing, complete)
        .await
}

/// `POST /inbox/calls/{call_id}/resolve`: settles a call that needs reconciliation, as done
/// (`settle=output`, with the output form) or not done (`settle=error`, with a reason).
pub(crate) async fn resolve(decision: Decision) -> Answer {
    let settle = async |settlement| {
        let (call_id, principal) = (&decision.call.call_id, decision.principal());
        decision
            .dispatcher()
            .reconcile(call_id, settlement, principal)
            .await
    };
    match decision.field("settle") {
        Some("output") => {
            // A tool without an output schema (or no longer served) is settled with any JSON.
            let schema = decision.output_schema().unwrap_or(Value::Bool(true));
            let settle = async |output| settle(Settlement::Output(output)).await;
            decision
                .with_answer(Done::Settled, &schema, Typed::settling, settle)
                .await
        }
        Some("error") => {
            let error = decision.field("error").unwrap_or_default().to_owned();
            let settled = settle(Settlement::Error(error.clone())).await;
            if let Err(DispatchError::ReasonRefused(refused)) = settled {
                let typed = Typed {
                    settle_error: Some((error, worded(refused))),
                    ..Typed::default()
                };
                return Ok(decision.page(typed, StatusCode::UNPROCESSABLE_ENTITY));
            }
            let submitted = Submitted::from_pairs(&decision.pairs);
            decision
                .outcome(Done::Settled, settled, |violations| {
                    Typed::settling((submitted, violations))
                })
                .await
        }
        _ => Err(PageError::BadRequest(
            "Choose how the call is settled: done (with its output) or not done.".into(),
        )),
    }
}
