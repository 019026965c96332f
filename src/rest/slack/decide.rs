//! A pressed button, decided: who the Slack user is (`[[people]]`), whether that person may
//! decide this approval here, and the decision itself through the lifecycle, as that person's
//! principal; and, whatever came of it, the sentence the person reads in Slack (mrkdwn, with
//! every name from a caller or a tool made literal).

use serde_json::json;

use super::SlackDoor;
use crate::Effect;
use crate::dispatch::who::Principal;
use crate::dispatch::{Approved, CallOutcome, DispatchError, one_click};
use crate::notify::slack::blocks::{code, literal, why_not_one_click};
use crate::store::{Approval, ApprovalState, CallRecord, StoreError};

/// The button pressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Press {
    /// Approve, with the empty answer.
    Approve,
    /// Reject, with no reason.
    Reject,
}

/// The longest name a reply shows.
const NAME_MAX: usize = 150;
/// What every refusal ends with.
const NOTHING: &str = "Nothing was decided.";

impl SlackDoor {
    /// Decides `token` as the person Slack user `user` is, pressing `press`; what came of it,
    /// as the person reads it.
    pub(super) async fn decide(&self, user: &str, press: Press, token: &str) -> String {
        let door = &self.0;
        let Some(person) = door.config.people.by_slack_user(user) else {
            tracing::info!(slack_user = %literal(user, 40), "a Slack user toolgate does not know pressed a button");
            return format!(
                "toolgate does not know your Slack user ({}): no `[[people]]` entry has \
                 `slack_user = \"{}\"`. Ask an admin to add you. {NOTHING}",
                code(user),
                literal(user, 40),
            );
        };
        let name = code(&person.name);
        let Some(principal) = person.principal.clone() else {
            return format!(
                "You ({name}) are told of these approvals, but toolgate gives you no right to \
                 decide them: no API key has your name, and your `[[people]]` entry has no \
                 `decides`. {NOTHING}"
            );
        };
        let state = match door.dispatcher.decidable_approval(&principal, token).await {
            Ok(state) => state,
            Err(err) => return self.refused(err, None),
        };
        let approval = match state {
            Some(ApprovalState::Pending(approval)) => approval,
            Some(ApprovalState::Resolved(call)) => return already(&call),
            Some(ApprovalState::Expired(call)) => return expired(&call),
            None => return self.not_theirs(&name, token).await,
        };
        tracing::info!(
            call_id = %approval.call_id,
            tool = %approval.tool,
            person = %person.name,
            press = ?press,
            "a decision from Slack"
        );
        match press {
            Press::Approve => self.approve(&principal, &approval).await,
            Press::Reject => self.reject(&principal, &approval).await,
        }
    }

    /// Approves `approval` in one click, where one click may (the lifecycle's [`one_click`]:
    /// the empty answer fits its schema, and it is no write to confirm); else the person is
    /// sent to the inbox.
    async fn approve(&self, principal: &Principal, approval: &Approval) -> String {
        let dispatcher = &self.0.dispatcher;
        let effect = match dispatcher.store().call(&approval.call_id).await {
            Ok(call) => call.map_or(Effect::Write, |call| call.effect),
            Err(err) => return self.refused(err.into(), Some(approval)),
        };
        if !one_click(&approval.input_schema, effect) {
            return self.to_inbox(approval);
        }
        let tool = code(&approval.tool);
        let call = code(&approval.call_id);
        match dispatcher
            .approve(&approval.token, json!({}), principal)
            .await
        {
            Ok(Approved::Ran(result)) => {
                let came = match result.outcome {
                    CallOutcome::Completed(_) => "it ran and completed.".to_owned(),
                    CallOutcome::Suspended { .. } | CallOutcome::Withheld => {
                        "it ran and asks for a person's decision again.".to_owned()
                    }
                    CallOutcome::Failed { status, failure } => format!(
                        "it ran, and it is {} now ({}).",
                        status.as_str().replace('_', " "),
                        code(failure.kind.code())
                    ),
                };
                format!("You approved the call {call} of {tool}: {came}")
            }
            Ok(Approved::Recorded(recorded)) => format!(
                "Your approval of the call {call} of {tool} is recorded: {} of the {} it needs. \
                 It waits for the other approvers.",
                recorded.approvals.len(),
                recorded.approvals_required
            ),
            Err(DispatchError::InvalidResumeInput(_)) => self.to_inbox(approval),
            Err(err) => self.refused(err, Some(approval)),
        }
    }

    /// Rejects `approval`, without a reason.
    async fn reject(&self, principal: &Principal, approval: &Approval) -> String {
        let rejected = self
            .0
            .dispatcher
            .reject(&approval.token, None, None, principal)
            .await;
        match rejected {
            Ok(call) => format!(
                "You rejected the call {} of {}: it will not run.",
                code(&call.call_id),
                code(&call.tool)
            ),
            Err(err) => self.refused(err, Some(approval)),
        }
    }

    /// The inbox's page of `call_id`, as a link.
    fn inbox_link(&self, call_id: &str, label: &str) -> String {
        let base = &self.0.config.inbox_base;
        let url = format!("{base}/inbox/calls/{call_id}")
            .replace('<', "%3C")
            .replace('>', "%3E")
            .replace('|', "%7C");
        format!("<{url}|{label}>")
    }

    /// One click may not decide `approval`: where to decide it instead.
    fn to_inbox(&self, approval: &Approval) -> String {
        format!(
            "The call {} of {} cannot be approved from Slack in one click: {}. {}. {NOTHING}",
            code(&approval.call_id),
            code(&approval.tool),
            why_not_one_click(),
            self.inbox_link(&approval.call_id, "Decide it in the inbox")
        )
    }

    /// A token `principal` may not decide: a tool outside its `decides`, or no approval at all.
    async fn not_theirs(&self, name: &str, token: &str) -> String {
        match self.0.dispatcher.store().approval(token).await {
            Ok(Some(state)) => {
                let tool = match &state {
                    ApprovalState::Pending(approval) => &approval.tool,
                    ApprovalState::Resolved(call) | ApprovalState::Expired(call) => &call.tool,
                };
                format!(
                    "You ({name}) may not decide calls of {}: they are another approver's. \
                     {NOTHING}",
                    code(tool)
                )
            }
            Ok(None) => format!("toolgate has no such approval. {NOTHING}"),
            Err(err) => self.refused(err.into(), None),
        }
    }

    /// The lifecycle's refusal, as the person reads it.
    fn refused(&self, err: DispatchError, approval: Option<&Approval>) -> String {
        let the_call = approval.map_or_else(
            || "this call".to_owned(),
            |a| format!("the call {}", code(&a.call_id)),
        );
        let call = approval.map_or_else(
            || "This call".to_owned(),
            |a| format!("The call {}", code(&a.call_id)),
        );
        match err {
            DispatchError::DecidesOwnCall(_) => format!(
                "{call} was made under your own name, and its tool's policy keeps callers apart: \
                 another approver must decide it. {NOTHING}"
            ),
            DispatchError::AlreadyResolved(record) => already(&record),
            DispatchError::SuspensionExpired(record) => expired(&record),
            DispatchError::AlreadyApproved {
                approvals,
                required,
            } => format!(
                "You approved {the_call} already: {} of the {required} approvals it needs so \
                 far, and the others must come from other approvers. {NOTHING}",
                approvals.len()
            ),
            DispatchError::UnknownToken => {
                format!("You may not decide this approval, or it no longer exists. {NOTHING}")
            }
            DispatchError::Unavailable { tool, .. } => format!(
                "The server behind {} cannot be reached now; the approval still waits: try \
                 again later. {NOTHING}",
                code(&tool)
            ),
            DispatchError::Overloaded(_) | DispatchError::RateLimited(_) => {
                format!("toolgate is busy now; try again in a moment. {NOTHING}")
            }
            DispatchError::Store(StoreError::LeaseLost(record)) => already(&record),
            other => {
                let api = crate::http::error::ApiError::from(other);
                let link = approval.map_or_else(String::new, |a| {
                    format!(
                        " {}.",
                        self.inbox_link(&a.call_id, "Decide it in the inbox")
                    )
                });
                format!(
                    "toolgate could not take this decision now ({}).{link} {NOTHING}",
                    code(api.code())
                )
            }
        }
    }
}

/// A decision on a call decided before: who decided it, how.
fn already(call: &CallRecord) -> String {
    let decision = call.events.iter().rev().find(|event| {
        matches!(
            event.kind.as_str(),
            "approved" | "rejected" | "completed_externally" | "expired"
        )
    });
    let by = decision
        .and_then(|event| event.actor.as_deref())
        .map(|actor| {
            let display = decision
                .and_then(|event| event.actor_name.as_deref())
                .filter(|display| *display != actor)
                .map(|display| format!("{} ", literal(display, NAME_MAX)))
                .unwrap_or_default();
            format!(" by {display}{}", code(actor))
        })
        .unwrap_or_default();
    let how = decision.map_or("decided", |event| match event.kind.as_str() {
        "approved" => "approved",
        "rejected" => "rejected",
        "completed_externally" => "completed externally",
        _ => "expired",
    });
    format!(
        "The call {} of {} was {how} already{by}; it is {} now. {NOTHING}",
        code(&call.call_id),
        code(&call.tool),
        call.status.as_str().replace('_', " ")
    )
}

/// A decision on an approval nobody decided in time.
fn expired(call: &CallRecord) -> String {
    format!(
        "The approval of the call {} of {} expired: nobody decided in time. {NOTHING}",
        code(&call.call_id),
        code(&call.tool)
    )
}
