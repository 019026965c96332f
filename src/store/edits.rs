//! Approval with edits, as the store keeps it: an approver's change to a call's input, held by
//! the suspension until its approvers are all of that input, then made the call's input with
//! what it was called with kept beside it.
//!
//! Split from `suspensions.rs` because both backends write the same rule, once, from here: an
//! approval whose `edit` differs from the input as it stands restarts the count (every approval
//! counted is of one input); one without an edit, or with the input as it stands, counts toward
//! it. The SQL of each backend only reads and writes the columns (`suspensions.edit`,
//! `calls.edited`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::record::{actor_event_json, parse_json, to_json};
use super::{Actor, StoreError, Timestamp};

/// Who edited a call's input, and when: as a call's record, its approval and the feed show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EditMark {
    /// The approver's name (an API key's, or an issuer's `issuer:subject`); `null` when auth is
    /// off.
    pub by: Option<String>,
    /// The name a person signed in with an identity provider is shown by, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// When the edit was made.
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
}

/// An edit a suspension holds (`suspensions.edit`): the input as it now stands, and who made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingEdit {
    pub(crate) input: Value,
    #[serde(flatten)]
    pub(crate) mark: EditMark,
}

/// How a call ran edited (`calls.edited`): who edited it, and its input before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallEdit {
    /// Who edited it, and when.
    #[serde(flatten)]
    pub mark: EditMark,
    /// The input the call was made with.
    pub original_input: Value,
    /// The input it ran with.
    pub input: Value,
}

impl CallEdit {
    /// As stored, if it was (`calls.edited`).
    pub(crate) fn parse(stored: Option<&str>) -> Result<Option<CallEdit>, StoreError> {
        stored.map(parse_json).transpose()
    }
}

impl PendingEdit {
    /// As stored, if it was (`suspensions.edit`).
    pub(crate) fn parse(stored: Option<&str>) -> Result<Option<PendingEdit>, StoreError> {
        stored.map(parse_json).transpose()
    }

    /// `by`'s edit to `input` at `now`, when it changes the input as it stands: the edit held
    /// (`standing`, as stored) if there is one, else the call's `input` (as stored). `None`:
    /// no edit, or one that changes nothing, which approves the input as it stands.
    pub(crate) fn proposed(
        edit: Option<&Value>,
        standing: Option<&str>,
        call_input: &str,
        by: &Actor,
        now: i64,
    ) -> Result<Option<PendingEdit>, StoreError> {
        let Some(edit) = edit else {
            return Ok(None);
        };
        let current: Value = match PendingEdit::parse(standing)? {
            Some(held) => held.input,
            None => parse_json(call_input)?,
        };
        if current == *edit {
            return Ok(None);
        }
        Ok(Some(PendingEdit {
            input: edit.clone(),
            mark: EditMark {
                by: by.name.clone(),
                display_name: by.display.clone(),
                at: Timestamp(now),
            },
        }))
    }

    /// Shows on the pending `approval` the input as it stands: the call's `input`, or the
    /// edit held (`stored`), with the call's input as the original and who edited it.
    pub(crate) fn show(
        approval: &mut super::Approval,
        input: Value,
        stored: Option<&str>,
    ) -> Result<(), StoreError> {
        match PendingEdit::parse(stored)? {
            Some(held) => {
                approval.input = Some(held.input);
                approval.original_input = Some(input);
                approval.edited = Some(held.mark);
            }
            None => approval.input = Some(input),
        }
        Ok(())
    }

    /// As stored.
    pub(crate) fn stored(&self) -> Result<String, StoreError> {
        to_json(self)
    }

    /// The `edited` event of the call's history: who edited, and the input as edited.
    pub(crate) fn event(&self, by: &Actor) -> String {
        actor_event_json(
            self.mark.at.0,
            "edited",
            by,
            Some(&serde_json::json!({ "input": self.input })),
        )
    }

    /// What the call keeps once it runs with this edit: its input as stored now
    /// (`call_input`) is the original, unless it was edited before (`call_edited`, as stored),
    /// whose original it keeps. The new input and `calls.edited`, as stored.
    pub(crate) fn released(
        self,
        call_input: &str,
        call_edited: Option<&str>,
    ) -> Result<(String, String), StoreError> {
        let original_input = match CallEdit::parse(call_edited)? {
            Some(before) => before.original_input,
            None => parse_json(call_input)?,
        };
        let input = to_json(&self.input)?;
        let edited = to_json(&CallEdit {
            mark: self.mark,
            original_input,
            input: self.input,
        })?;
        Ok((input, edited))
    }
}
