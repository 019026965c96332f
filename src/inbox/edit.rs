//! Approval with edits on the inbox's page: where the tool's approval policy allows edits
//! (`edit_input`), the approve form carries the tool's input form, filled with the call's input
//! as it stands, and approving sends what the person left in it as the edit. The lifecycle
//! judges it (an edit equal to the input as it stands is no edit; one that does not fit the
//! tool's input schema is refused at its fields), as it does on every door.
//!
//! The edit form's controls are named `e/…` (the answer's are `v/…`), and a hidden `edit=1`
//! says the form was there.

use serde_json::Value;

use super::form::{self, Form, Submitted};
use crate::contract::error::InputViolation;
use crate::dispatch::Dispatcher;
use crate::store::CallRecord;

/// What the edit form's controls are named by.
pub(crate) const PREFIX: &str = "e";

/// The input of a waiting `call` as it stands: the edit an approver made since it was
/// suspended (its history's last `edited` event: the suspension holds it for the other
/// approvers), else the call's input.
pub(crate) fn standing_input(call: &CallRecord) -> &Value {
    call.events_since_suspended()
        .iter()
        .rev()
        .find(|event| event.kind == "edited")
        .and_then(|event| event.details.as_ref()?.get("input"))
        .unwrap_or(&call.input)
}

/// Who made the edit that stands on a waiting `call`, for the page to say; `None` when nobody
/// edited it since it was suspended.
pub(crate) fn standing_editor(call: &CallRecord) -> Option<String> {
    let event = call
        .events_since_suspended()
        .iter()
        .rev()
        .find(|event| event.kind == "edited")?;
    Some(match (&event.actor_name, &event.actor) {
        (Some(name), Some(actor)) => format!("{name} ({actor})"),
        (None, Some(actor)) => actor.clone(),
        (_, None) => "an approver (auth off)".to_owned(),
    })
}

/// The edit form of a waiting `call` whose tool's policy allows edits: what was typed into it
/// (`typed`, kept after a refusal), else the input as it stands; `None` where no edit is
/// allowed or the tool is no longer served.
pub(crate) fn edit_form(
    dispatcher: &Dispatcher,
    call: &CallRecord,
    typed: Option<(Submitted, Vec<InputViolation>)>,
) -> Option<Form> {
    if !dispatcher.edits_allowed(&call.tool) {
        return None;
    }
    let tools = dispatcher.tools();
    let schema = tools.get(&call.tool)?.input_schema();
    let (submitted, violations) =
        typed.unwrap_or_else(|| (form::filled(schema, standing_input(call)), Vec::new()));
    Some(form::render_named(
        "edit",
        PREFIX,
        schema,
        &submitted,
        &violations,
    ))
}

/// The edit sent with an approval, read with the tool's input schema: `None` when the form
/// had no edit form (`edit=1` missing); refused where the form cannot be read back (a JSON text
/// area that holds no JSON).
pub(crate) fn read(
    dispatcher: &Dispatcher,
    call: &CallRecord,
    pairs: &[(String, String)],
) -> Result<Option<Value>, (Submitted, Vec<InputViolation>)> {
    let sent = pairs
        .iter()
        .any(|(name, value)| name == "edit" && value == "1");
    let tools = dispatcher.tools();
    let Some(tool) = tools.get(&call.tool).filter(|_| sent) else {
        return Ok(None);
    };
    let submitted = Submitted::from_pairs_named(pairs, PREFIX);
    form::read(tool.input_schema(), &submitted)
        .map(Some)
        .map_err(|violations| (submitted, violations))
}
