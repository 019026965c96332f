//! Answer forms: a JSON Schema rendered as form controls, and a submitted form read back into
//! JSON with the same schema.
//!
//! Every control is named by `v` and the JSON Pointer of the value it holds (`v/order_id`,
//! `v/items/0/name`; `v` alone is the whole answer), so reading a form back needs nothing but
//! the schema and the submitted pairs. An empty control is left out of the answer, so an empty
//! required field is refused as missing by the lifecycle's own validation, which stays the one
//! judge of an answer: nothing here refuses what the schema would accept, or accepts what it
//! would refuse. What the renderer cannot show as controls (`oneOf` of objects, maps,
//! `patternProperties`, tuples, `const`, schemas nested deeper than `MAX_DEPTH`) is a JSON
//! text area, parsed on submit; so is a part too large for the page's budget (`budget.rs`:
//! 2,000 controls, about 1 MiB), and the page says why.
//!
//! The schema's shapes are read in `schema.rs`, the controls built in `render.rs`, the answer
//! read back in `read.rs`; a value is shown as a readable list, with the same schema's labels,
//! in `show.rs`.

mod budget;
mod fill;
mod read;
mod render;
mod schema;
mod show;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::prose::Prose;

pub(crate) use fill::filled;
pub(crate) use read::read;
pub(crate) use render::{render, render_named};
pub(crate) use show::{Line, show};

/// What a person submitted: each control's text by name (the last one wins), in order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Submitted {
    values: HashMap<String, String>,
}

impl Submitted {
    /// The answer's controls among a form's pairs: those named `v...`.
    pub(crate) fn from_pairs(pairs: &[(String, String)]) -> Self {
        let values = pairs
            .iter()
            .filter(|(name, _)| name == "v" || name.starts_with("v/"))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        Submitted { values }
    }

    /// The controls of the form named by `prefix` (see [`render::render_named`]) among a
    /// form's pairs, read as an answer's.
    pub(crate) fn from_pairs_named(pairs: &[(String, String)], prefix: &str) -> Self {
        let values = pairs
            .iter()
            .filter_map(|(name, value)| {
                let pointer = name.strip_prefix(prefix)?;
                (pointer.is_empty() || pointer.starts_with('/'))
                    .then(|| (format!("v{pointer}"), value.clone()))
            })
            .collect();
        Submitted { values }
    }

    fn get(&self, pointer: &str) -> Option<&str> {
        self.values.get(&format!("v{pointer}")).map(String::as_str)
    }

    /// The row indexes submitted under the array at `pointer`, in order.
    fn rows(&self, pointer: &str) -> Vec<usize> {
        let prefix = format!("v{pointer}/");
        let rows: BTreeSet<usize> = self
            .values
            .keys()
            .filter_map(|name| name.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('/').next()?.parse().ok())
            .collect();
        rows.into_iter().collect()
    }

    fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A form, ready for its template.
#[derive(Debug, Clone)]
pub(crate) struct Form {
    /// What the form is for (`approve`, `complete`, `settle`): its controls' ids start with it.
    pub(crate) id: &'static str,
    /// The controls and their groups, in document order.
    pub(crate) nodes: Vec<Node>,
    /// Every message of a refused answer, for the summary at the top of the form.
    pub(crate) problems: Vec<Problem>,
}

/// A message about a refused answer, linked to the control it is shown at (if any).
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    /// Where in the answer (a JSON Pointer; empty for the whole answer).
    pub(crate) pointer: String,
    /// What is wrong.
    pub(crate) message: String,
    /// The id of the control or group showing it.
    pub(crate) anchor: Option<String>,
}

/// One piece of a rendered form.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    /// A nested object's fieldset opens.
    Open(Group),
    /// An array's fieldset opens; its rows follow, then its row template.
    OpenArray(Group),
    /// A row of an array opens.
    OpenRow(Row),
    /// A row closes.
    CloseRow,
    /// The template a new row of the array is cloned from (`-` stands for its index).
    OpenTemplate(String),
    /// The template closes.
    CloseTemplate,
    /// An array's fieldset closes, with its button to add a row.
    CloseArray(AddRow),
    /// A nested object's fieldset closes.
    Close,
    /// One control.
    Control(Control),
}

/// A fieldset: a nested object or an array.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub(crate) id: String,
    pub(crate) legend: String,
    pub(crate) help: Option<Prose>,
    pub(crate) required: bool,
    pub(crate) error: Option<String>,
}

/// A row of an array.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) label: String,
}

/// An array's button to add a row.
#[derive(Debug, Clone)]
pub(crate) struct AddRow {
    /// The `<template>`'s id.
    pub(crate) template: String,
    /// The array's control name (`v/items`), so the script can number new rows.
    pub(crate) name: String,
    pub(crate) label: String,
}

/// One labelled control.
#[derive(Debug, Clone)]
pub(crate) struct Control {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) label: String,
    pub(crate) help: Option<Prose>,
    pub(crate) required: bool,
    pub(crate) error: Option<String>,
    pub(crate) value: String,
    pub(crate) kind: Kind,
}

impl Control {
    /// The ids of what describes the control, for `aria-describedby`.
    pub(crate) fn described_by(&self) -> String {
        let mut ids = Vec::new();
        if self.help.is_some() {
            ids.push(format!("{}-help", self.id));
        }
        if let Kind::Json {
            too_large: true, ..
        } = self.kind
        {
            ids.push(format!("{}-large", self.id));
        }
        if self.error.is_some() {
            ids.push(format!("{}-error", self.id));
        }
        ids.join(" ")
    }
}

/// What kind of control.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A one-line text input of this HTML type (`text`, `email`, `url`, `date`).
    Line {
        input_type: &'static str,
        max_length: Option<u64>,
    },
    /// A text area.
    Long { max_length: Option<u64> },
    /// A number input.
    Number {
        step: &'static str,
        min: Option<String>,
        max: Option<String>,
    },
    /// A choice: an enum, or a boolean (yes, no, or left out).
    Choice { options: Vec<Choice> },
    /// JSON typed by hand, with the schema it must fit; `too_large` when the part would fit
    /// the schema's controls but not the page's budget.
    Json { schema: String, too_large: bool },
}

/// One option of a choice.
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    pub(crate) value: String,
    pub(crate) label: String,
    pub(crate) selected: bool,
}

/// `pointer` with `key` appended, escaped as JSON Pointer wants.
fn child(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// The text of `schema`'s `key`, read from the schema as written (a property's own
/// `description` beside its `$ref`) before the one it points to.
fn text<'s>(written: &'s Value, resolved: &'s Value, key: &str) -> Option<&'s str> {
    written
        .get(key)
        .or_else(|| resolved.get(key))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}
