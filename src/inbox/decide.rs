//! The decisions: approve, reject, complete externally, settle. Each translates its form into
//! the dispatcher's call, exactly as the REST handlers do (the same checks, the signed-in key's
//! name as the actor), and its result back into a page: the call's page after a decision (a
//! redirect, so a reload does not send the form again), the same form with each message at its
//! field after a refusal (`422`), or the call's history when someone else decided first.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::InboxState;
use super::form::{self, Submitted};
use super::pages::{Typed, call_page, decided, require};
use super::session::Signed;
use super::views::{Base, PageError, see_other};
use crate::contract::error::InputViolation;
use crate::dispatch::DispatchError;
use crate::dispatch::{MAX_REASON_CHARS, settlement_error};
use crate::store::{CallRecord, CallStatus, Settlement};

/// A submitted form: its pairs in order.
type Pairs = Form<Vec<(String, String)>>;

/// The value of the field `name`, if sent.
fn field<'p>(pairs: &'p [(String, String)], name: &str) -> Option<&'p str> {
    pairs
        .iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// What every decision starts with: the session, its CSRF token, the call.
struct Decision {
    app: InboxState,
    signed: Signed,
    base: Base,
    call: CallRecord,
}

impl Decision {
    async fn begin(
        app: InboxState,
        base: Base,
        headers: &HeaderMap,
        call_id: &str,
        pairs: &[(String, String)],
    ) -> Result<Decision, PageError> {
        let signed = require(&app, headers, &base).await?;
        signed.check_csrf(field(pairs, "csrf"))?;
        let call = app
            .dispatcher
            .store()
            .call(call_id)
            .await?
            .ok_or_else(|| PageError::UnknownCall(call_id.to_owned()))?;
        Ok(Decision {
            app,
            signed,
            base,
            call,
        })
    }

    fn actor(&self) -> Option<&str> {
        self.signed.principal.name.as_deref()
    }

    /// The pending suspension's token, looked up from the call: URLs never carry it.
    fn token(&self) -> Option<String> {
        self.call
            .suspension
            .as_ref()
            .filter(|_| self.call.status == CallStatus::Suspended)
            .map(|s| s.token.clone())
    }

    /// The call's page again, with `typed` and `status`.
    fn page(&self, typed: Typed, status: StatusCode) -> Response {
        call_page(
            &self.app,
            &self.signed,
            &self.base,
            &self.call,
            typed,
            status,
        )
    }

    /// The call's page as it is now, after it was decided (here or elsewhere).
    fn done(&self) -> Response {
        see_other(&format!("{}/calls/{}", self.base.0, self.call.call_id))
    }

    /// The call's history, saying who decided it first: the answer to a decision that came
    /// too late.
    async fn too_late(&self, status: StatusCode) -> Result<Response, PageError> {
        let now = self
            .app
            .dispatcher
            .store()
            .call(&self.call.call_id)
            .await?
            .unwrap_or_else(|| self.call.clone());
        let typed = Typed {
            notice: Some(decided(&now)),
            ..Typed::default()
        };
        Ok(call_page(
            &self.app,
            &self.signed,
            &self.base,
            &now,
            typed,
            status,
        ))
    }

    /// A refusal of the lifecycle as a page: the form again (`refused`), or the history.
    async fn refused(
        &self,
        err: DispatchError,
        refused: impl FnOnce(Vec<InputViolation>) -> Typed,
    ) -> Result<Response, PageError> {
        match err {
            DispatchError::InvalidResumeInput(violations)
            | DispatchError::OutputSchemaViolation(violations) => {
                Ok(self.page(refused(violations), StatusCode::UNPROCESSABLE_ENTITY))
            }
            DispatchError::AlreadyResolved(_)
            | DispatchError::UnknownToken
            | DispatchError::NotReconcilable(_) => self.too_late(StatusCode::CONFLICT).await,
            DispatchError::SuspensionExpired(_) => self.too_late(StatusCode::GONE).await,
            DispatchError::CompletionNotAllowed(tool) => Err(PageError::BadRequest(format!(
                "Tool {tool} declares no output schema, so it cannot be completed externally."
            ))),
            // A lost lease: the call was settled meanwhile; its page says how.
            DispatchError::Store(crate::store::StoreError::LeaseLost(_)) => Ok(self.done()),
            other => Err(crate::http::error::ApiError::from(other).into()),
        }
    }

    /// The answer `schema` reads from the form, or the form again with what is wrong.
    fn read(&self, schema: &Value, submitted: &Submitted) -> Result<Value, Vec<InputViolation>> {
        let value = form::read(schema, submitted)?;
        self.app.dispatcher.check_depth(&value).map_err(|_| {
            vec![InputViolation {
                path: String::new(),
                message: format!(
                    "The answer is nested deeper than {} levels.",
                    self.app.dispatcher.max_json_depth()
                ),
            }]
        })?;
        Ok(value)
    }
}

/// `POST /inbox/calls/{call_id}/approve`: the answer from the suspension's `input_schema` form.
pub(crate) async fn approve(
    State(app): State<InboxState>,
    base: Base,
    headers: HeaderMap,
    Path(call_id): Path<String>,
    Form(pairs): Pairs,
) -> Result<Response, PageError> {
    let decision = Decision::begin(app, base, &headers, &call_id, &pairs).await?;
    let (Some(token), Some(suspension)) = (decision.token(), decision.call.suspension.as_ref())
    else {
        return decision.too_late(StatusCode::CONFLICT).await;
    };
    let submitted = Submitted::from_pairs(&pairs);
    let typed = |violations| Typed {
        approve: Some((submitted.clone(), violations)),
        ..Typed::default()
    };
    let input = match decision.read(&suspension.input_schema, &submitted) {
        Ok(input) => input,
        Err(violations) => {
            return Ok(decision.page(typed(violations), StatusCode::UNPROCESSABLE_ENTITY));
        }
    };
    match decision
        .app
        .dispatcher
        .approve(&token, input, decision.actor())
        .await
    {
        Ok(_) => Ok(decision.done()),
        Err(err) => decision.refused(err, typed).await,
    }
}

/// `POST /inbox/calls/{call_id}/reject`: with a reason, if the person gives one.
pub(crate) async fn reject(
    State(app): State<InboxState>,
    base: Base,
    headers: HeaderMap,
    Path(call_id): Path<String>,
    Form(pairs): Pairs,
) -> Result<Response, PageError> {
    let decision = Decision::begin(app, base, &headers, &call_id, &pairs).await?;
    let Some(token) = decision.token() else {
        return decision.too_late(StatusCode::CONFLICT).await;
    };
    // The form asks for a reason (the caller reads it), but the rule is the lifecycle's, as
    // on every door: an empty one is recorded as none.
    let reason = field(&pairs, "reason")
        .unwrap_or_default()
        .trim()
        .to_owned();
    if reason.chars().count() > MAX_REASON_CHARS {
        let typed = Typed {
            reject: Some((
                reason,
                format!("The reason is longer than {MAX_REASON_CHARS} characters."),
            )),
            ..Typed::default()
        };
        return Ok(decision.page(typed, StatusCode::UNPROCESSABLE_ENTITY));
    }
    match decision
        .app
        .dispatcher
        .reject(&token, Some(reason), decision.actor())
        .await
    {
        Ok(_) => Ok(decision.done()),
        Err(err) => decision.refused(err, |_| Typed::default()).await,
    }
}

/// `POST /inbox/calls/{call_id}/complete`: the work was done outside the server; the output
/// from the tool's output-schema form is its receipt.
pub(crate) async fn complete(
    State(app): State<InboxState>,
    base: Base,
    headers: HeaderMap,
    Path(call_id): Path<String>,
    Form(pairs): Pairs,
) -> Result<Response, PageError> {
    let decision = Decision::begin(app, base, &headers, &call_id, &pairs).await?;
    let Some(token) = decision.token() else {
        return decision.too_late(StatusCode::CONFLICT).await;
    };
    let schema = decision
        .app
        .dispatcher
        .tools()
        .get(&decision.call.tool)
        .and_then(|tool| tool.output_schema())
        .cloned();
    let Some(schema) = schema else {
        return decision
            .refused(
                DispatchError::CompletionNotAllowed(decision.call.tool.clone()),
                |_| Typed::default(),
            )
            .await;
    };
    let submitted = Submitted::from_pairs(&pairs);
    let typed = |violations| Typed {
        complete: Some((submitted.clone(), violations)),
        ..Typed::default()
    };
    let output = match decision.read(&schema, &submitted) {
        Ok(output) => output,
        Err(violations) => {
            return Ok(decision.page(typed(violations), StatusCode::UNPROCESSABLE_ENTITY));
        }
    };
    match decision
        .app
        .dispatcher
        .complete(&token, output, decision.actor())
        .await
    {
        Ok(_) => Ok(decision.done()),
        Err(err) => decision.refused(err, typed).await,
    }
}

/// `POST /inbox/calls/{call_id}/resolve`: settles a call that needs reconciliation, as done
/// (`settle=output`, with the output form) or not done (`settle=error`, with a reason).
pub(crate) async fn resolve(
    State(app): State<InboxState>,
    base: Base,
    headers: HeaderMap,
    Path(call_id): Path<String>,
    Form(pairs): Pairs,
) -> Result<Response, PageError> {
    let decision = Decision::begin(app, base, &headers, &call_id, &pairs).await?;
    let settlement = match field(&pairs, "settle") {
        Some("output") => {
            let schema = decision
                .app
                .dispatcher
                .tools()
                .get(&decision.call.tool)
                .and_then(|tool| tool.output_schema())
                .cloned()
                .unwrap_or(Value::Bool(true));
            let submitted = Submitted::from_pairs(&pairs);
            match decision.read(&schema, &submitted) {
                Ok(output) => Settlement::Output(output),
                Err(violations) => {
                    let typed = Typed {
                        settle: Some((submitted, violations)),
                        ..Typed::default()
                    };
                    return Ok(decision.page(typed, StatusCode::UNPROCESSABLE_ENTITY));
                }
            }
        }
        Some("error") => {
            let error = field(&pairs, "error").unwrap_or_default().trim().to_owned();
            match settlement_error(error.clone()) {
                Ok(error) => Settlement::Error(error),
                Err(_) => {
                    let typed = Typed {
                        settle_error: Some((
                            error,
                            format!(
                                "Say why the effect did not happen (1 to {MAX_REASON_CHARS} \
                                 characters)."
                            ),
                        )),
                        ..Typed::default()
                    };
                    return Ok(decision.page(typed, StatusCode::UNPROCESSABLE_ENTITY));
                }
            }
        }
        _ => {
            return Err(PageError::BadRequest(
                "Choose how the call is settled: done (with its output) or not done.".into(),
            ));
        }
    };
    let submitted = Submitted::from_pairs(&pairs);
    match decision
        .app
        .dispatcher
        .reconcile(&decision.call.call_id, settlement, decision.actor())
        .await
    {
        Ok(_) => Ok(decision.done()),
        Err(err) => {
            decision
                .refused(err, |violations| Typed {
                    settle: Some((submitted, violations)),
                    ..Typed::default()
                })
                .await
        }
    }
}
