//! A schema rendered as controls: each named by the JSON Pointer of its value, showing what was
//! typed and the messages of a refusal next to their fields.

use serde_json::Value;

use super::super::prose::Prose;
use super::budget::{self, Budget};
use super::schema::{Schema, Shape};
use super::show::readable;
use super::{
    AddRow, Choice, Control, Form, Group, Kind, Node, Problem, Row, Submitted, child, text,
};
use crate::contract::error::InputViolation;

/// A string longer than this (by `maxLength`) gets a text area.
const LONG_TEXT: u64 = 120;

/// Property names whose text is usually long: they get a text area.
const LONG_NAMES: [&str; 10] = [
    "answer",
    "body",
    "comment",
    "content",
    "description",
    "details",
    "message",
    "note",
    "notes",
    "reason",
];

/// Builds a form for `schema`, showing `submitted` (what a person typed, kept after a refusal)
/// and `violations` (the refusal's messages, each next to its control).
pub(crate) fn render(
    id: &'static str,
    schema: &Value,
    submitted: &Submitted,
    violations: &[InputViolation],
) -> Form {
    render_named(id, "v", schema, submitted, violations)
}

/// [`render`], the controls named by `prefix` and their pointers (`e/amount`) instead of `v`:
/// for a second form on a page, read back with [`Submitted::from_pairs_named`].
pub(crate) fn render_named(
    id: &'static str,
    prefix: &'static str,
    schema: &Value,
    submitted: &Submitted,
    violations: &[InputViolation],
) -> Form {
    let mut builder = Builder {
        form: id,
        prefix,
        schema: Schema { root: schema },
        budget: Budget::plan(schema),
        submitted,
        refused: !violations.is_empty(),
        blank: false,
        nodes: Vec::new(),
    };
    builder.field(schema, "", "Answer".into(), false, 0);
    let mut form = Form {
        id,
        nodes: builder.nodes,
        problems: Vec::new(),
    };
    for violation in violations {
        let anchor = form.place(&violation.path, &violation.message);
        form.problems.push(Problem {
            pointer: violation.path.clone(),
            message: violation.message.clone(),
            anchor,
        });
    }
    form
}

struct Builder<'s> {
    form: &'static str,
    /// What the controls' names start with, before their pointers.
    prefix: &'static str,
    schema: Schema<'s>,
    /// The parts too large for the page, shown as JSON.
    budget: Budget,
    submitted: &'s Submitted,
    /// Whether this shows a refused answer: empty required fields are then marked.
    refused: bool,
    /// Whether this builds a row template, which shows nothing typed: it is cloned empty.
    blank: bool,
    nodes: Vec<Node>,
}

impl<'s> Builder<'s> {
    fn id(&self, pointer: &str) -> String {
        format!("{}-f{pointer}", self.form)
    }

    fn field(
        &mut self,
        written: &'s Value,
        pointer: &str,
        name: String,
        required: bool,
        depth: usize,
    ) {
        let resolved = self.schema.resolve(written);
        let label = text(written, resolved, "title").map_or(name, str::to_owned);
        let help = text(written, resolved, "description").map(Prose::parse);
        let value = match self.blank {
            true => String::new(),
            false => self.submitted.get(pointer).unwrap_or_default().to_owned(),
        };
        let missing = (self.refused && !self.blank && required && value.is_empty())
            .then(|| "This field is required.".to_owned());
        let control = |kind| Control {
            id: self.id(pointer),
            name: format!("{}{pointer}", self.prefix),
            label: label.clone(),
            help: help.clone(),
            required,
            error: missing.clone(),
            value: value.clone(),
            kind,
        };
        let node = match self.budget.shape(self.schema, written, depth) {
            Shape::Object {
                properties,
                required: needed,
            } => {
                let group = Group {
                    id: self.id(pointer),
                    legend: label,
                    help,
                    required,
                    error: None,
                };
                // The whole answer needs no fieldset of its own.
                let root = pointer.is_empty();
                if !root {
                    self.nodes.push(Node::Open(group));
                }
                for (key, sub) in properties {
                    let inner = child(pointer, key);
                    let needed = needed.contains(&key.as_str());
                    self.field(sub, &inner, readable(key), needed, depth + 1);
                }
                if !root {
                    self.nodes.push(Node::Close);
                }
                return;
            }
            Shape::Array { items, min_items } => {
                self.array(pointer, items, min_items, label, help, required, depth);
                return;
            }
            Shape::Text => {
                let max_length = resolved.get("maxLength").and_then(Value::as_u64);
                let format = resolved.get("format").and_then(Value::as_str);
                let key = pointer.rsplit('/').next().unwrap_or_default();
                let long = max_length.is_some_and(|max| max > LONG_TEXT)
                    || (format.is_none()
                        && max_length.is_none()
                        && LONG_NAMES.contains(&key.to_ascii_lowercase().as_str()));
                if long {
                    control(Kind::Long { max_length })
                } else {
                    let input_type = match format {
                        Some("email") => "email",
                        Some("uri") => "url",
                        Some("date") => "date",
                        _ => "text",
                    };
                    control(Kind::Line {
                        input_type,
                        max_length,
                    })
                }
            }
            Shape::Number { integer } => {
                let bound = |keys: [&str; 2]| {
                    keys.iter()
                        .find_map(|key| resolved.get(*key).filter(|v| v.is_number()))
                        .filter(|bound| !restates_the_type(resolved, bound))
                        .map(Value::to_string)
                };
                control(Kind::Number {
                    step: if integer { "1" } else { "any" },
                    min: bound(["minimum", "exclusiveMinimum"]),
                    max: bound(["maximum", "exclusiveMaximum"]),
                })
            }
            Shape::Boolean => control(Kind::Choice {
                options: choices(&value, false, [("true", "Yes"), ("false", "No")]),
            }),
            Shape::Enum(values) => {
                let labels: Vec<(String, String)> = values
                    .iter()
                    .enumerate()
                    .map(|(index, v)| {
                        let label = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        (index.to_string(), label)
                    })
                    .collect();
                let options = labels.iter().map(|(v, l)| (v.as_str(), l.as_str()));
                control(Kind::Choice {
                    options: choices(&value, required && !self.blank, options),
                })
            }
            Shape::Json => control(Kind::Json {
                schema: schema_text(resolved),
                too_large: self.budget.is_over(self.schema, written),
            }),
        };
        self.nodes.push(Node::Control(node));
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one field's facts, passed down once"
    )]
    fn array(
        &mut self,
        pointer: &str,
        items: &'s Value,
        min_items: u64,
        label: String,
        help: Option<Prose>,
        required: bool,
        depth: usize,
    ) {
        let id = self.id(pointer);
        self.nodes.push(Node::OpenArray(Group {
            id: id.clone(),
            legend: label.clone(),
            help,
            required,
            error: None,
        }));
        let mut rows = match self.blank {
            true => Vec::new(),
            false => self.submitted.rows(pointer),
        };
        if rows.is_empty() && (self.blank || self.submitted.is_empty()) {
            let initial = budget::initial_rows(min_items, required);
            rows = (0..initial as usize).collect();
        }
        for (shown, index) in rows.iter().enumerate() {
            self.nodes.push(Node::OpenRow(Row {
                label: format!("{label} {}", shown + 1),
            }));
            let inner = format!("{pointer}/{index}");
            self.field(
                items,
                &inner,
                format!("Item {}", shown + 1),
                false,
                depth + 1,
            );
            self.nodes.push(Node::CloseRow);
        }
        let template = format!("{id}-template");
        self.nodes.push(Node::OpenTemplate(template.clone()));
        self.nodes.push(Node::OpenRow(Row {
            label: format!("{label} (new)"),
        }));
        let blank = std::mem::replace(&mut self.blank, true);
        self.field(
            items,
            &format!("{pointer}/-"),
            "New item".into(),
            false,
            depth + 1,
        );
        self.blank = blank;
        self.nodes.push(Node::CloseRow);
        self.nodes.push(Node::CloseTemplate);
        self.nodes.push(Node::CloseArray(AddRow {
            template,
            name: format!("{}{pointer}", self.prefix),
            label: format!("Add to {label}"),
        }));
    }
}

/// `schema` pretty-printed for a person typing JSON, cut at [`budget::MAX_SCHEMA_TEXT`]: a
/// schema too large for controls may be too large to print whole.
fn schema_text(schema: &Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    if text.len() > budget::MAX_SCHEMA_TEXT {
        let mut cut = budget::MAX_SCHEMA_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (the rest of the schema is not shown)");
    }
    text
}

/// The options of a choice, with `value` selected. A choice may be left out (`(none)`), unless
/// it is `required` and has one option only: then that one is the answer, chosen already.
fn choices<'a>(
    value: &str,
    required: bool,
    options: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Choice> {
    let options: Vec<(&str, &str)> = options.into_iter().collect();
    let only = (required && options.len() == 1).then(|| options[0].0);
    let chosen = match only {
        Some(only) if value.is_empty() => only,
        _ => value,
    };
    let none = Choice {
        value: String::new(),
        label: "(none)".into(),
        selected: chosen.is_empty(),
    };
    let none = only.is_none().then_some(none);
    none.into_iter()
        .chain(options.into_iter().map(|(v, label)| Choice {
            value: v.to_owned(),
            label: label.to_owned(),
            selected: v == chosen,
        }))
        .collect()
}

/// Whether `bound` only restates the type: `minimum: 0` on an unsigned integer, as schemars
/// writes every `u8`…`u64` (`"format": "uint64"`). A person learns nothing from "At least 0"
/// on an amount; a bound the schema's author set (`minimum: 1`) is shown.
fn restates_the_type(schema: &Value, bound: &Value) -> bool {
    let unsigned = schema
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|format| format.starts_with("uint"));
    unsigned && bound.as_f64() == Some(0.0) && schema.get("minimum") == Some(bound)
}

impl Form {
    /// Shows `message` at the control or group for `pointer`, or the nearest one above it; the
    /// id of where it went.
    fn place(&mut self, pointer: &str, message: &str) -> Option<String> {
        let mut at = pointer.to_owned();
        loop {
            let id = format!("{}-f{at}", self.id);
            for node in &mut self.nodes {
                let slot = match node {
                    Node::Control(control) if control.id == id => &mut control.error,
                    Node::Open(group) | Node::OpenArray(group) if group.id == id => {
                        &mut group.error
                    }
                    _ => continue,
                };
                let joined = match slot.take() {
                    Some(before) => format!("{before} {message}"),
                    None => message.to_owned(),
                };
                *slot = Some(joined);
                return Some(id);
            }
            match at.rfind('/') {
                Some(cut) => at.truncate(cut),
                None => return None,
            }
        }
    }
}
