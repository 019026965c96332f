//! Answer forms: a JSON Schema rendered as form controls, and a submitted form read back into
//! JSON with the same schema.
//!
//! Every control is named by `v` and the JSON Pointer of the value it holds (`v/order_id`,
//! `v/items/0/name`; `v` alone is the whole answer), so reading a form back needs nothing but
//! the schema and the submitted pairs. An empty control is left out of the answer, so an empty
//! required field is refused as missing by the lifecycle's own validation, which stays the one
//! judge of an answer: nothing here refuses what the schema would accept, or accepts what it
//! would refuse. What the renderer cannot show as controls (`oneOf` of objects, maps,
//! `patternProperties`, tuples, `const`, schemas nested deeper than [`MAX_DEPTH`]) is a JSON
//! text area, parsed on submit.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use crate::contract::error::InputViolation;

/// How deep objects and arrays are rendered as controls; deeper, a JSON text area.
const MAX_DEPTH: usize = 6;

/// The most array rows rendered before a person adds any.
const MAX_INITIAL_ROWS: u64 = 20;

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
    pub(crate) help: Option<String>,
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
    pub(crate) help: Option<String>,
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
    /// JSON typed by hand, with the schema it must fit.
    Json { schema: String },
}

/// One option of a choice.
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    pub(crate) value: String,
    pub(crate) label: String,
    pub(crate) selected: bool,
}

/// What a schema is, as far as the form goes.
enum Shape<'s> {
    Object {
        properties: &'s Map<String, Value>,
        required: Vec<&'s str>,
    },
    Array {
        items: &'s Value,
        min_items: u64,
    },
    Text,
    Number {
        integer: bool,
    },
    Boolean,
    Enum(Vec<&'s Value>),
    /// Anything else: typed as JSON.
    Json,
}

/// A schema and the document its `$ref`s point into.
#[derive(Clone, Copy)]
struct Schema<'s> {
    root: &'s Value,
}

impl<'s> Schema<'s> {
    /// `schema` with its `$ref`s followed (local ones only, a bounded number of hops), and the
    /// single non-null member of an `anyOf`/`oneOf`/`allOf` taken for the schema.
    fn resolve(self, mut schema: &'s Value) -> &'s Value {
        for _ in 0..16 {
            if let Some(target) = schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix('#'))
                .and_then(|pointer| self.root.pointer(pointer))
            {
                schema = target;
                continue;
            }
            let single = ["anyOf", "oneOf", "allOf"].iter().find_map(|key| {
                let members: Vec<&Value> = schema
                    .get(*key)?
                    .as_array()?
                    .iter()
                    .filter(|m| m.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                (members.len() == 1).then(|| members[0])
            });
            match single {
                Some(member) => schema = member,
                None => break,
            }
        }
        schema
    }

    fn shape(self, schema: &'s Value, depth: usize) -> Shape<'s> {
        let schema = self.resolve(schema);
        let has = |key: &str| schema.get(key).is_some();
        // A choice of constants (how schemars writes an enum whose variants have docs).
        let constants = ["oneOf", "anyOf"].iter().find_map(|key| {
            let members = schema.get(*key)?.as_array()?;
            members
                .iter()
                .map(|member| {
                    member
                        .get("const")
                        .filter(|c| !c.is_object() && !c.is_array())
                })
                .collect::<Option<Vec<&Value>>>()
        });
        if let Some(values) = constants.filter(|values| !values.is_empty()) {
            return Shape::Enum(values);
        }
        if let Some(constant) = schema
            .get("const")
            .filter(|c| !c.is_object() && !c.is_array())
        {
            return Shape::Enum(vec![constant]);
        }
        if [
            "anyOf",
            "oneOf",
            "allOf",
            "not",
            "if",
            "const",
            "patternProperties",
        ]
        .iter()
        .any(|key| has(key))
        {
            return Shape::Json;
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let values: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
            if !values.is_empty() && values.iter().all(|v| !v.is_object() && !v.is_array()) {
                return Shape::Enum(values);
            }
            return Shape::Json;
        }
        // `["string", "null"]` is a string that may be left out.
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ if has("properties") => vec!["object"],
            _ => Vec::new(),
        };
        match types.as_slice() {
            ["object"] if depth < MAX_DEPTH => match schema.get("properties") {
                Some(Value::Object(properties)) if !properties.is_empty() => Shape::Object {
                    properties,
                    required: schema
                        .get("required")
                        .and_then(Value::as_array)
                        .map(|r| r.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default(),
                },
                _ => Shape::Json,
            },
            ["array"] if depth < MAX_DEPTH && !has("prefixItems") => match schema.get("items") {
                Some(items @ Value::Object(_)) => Shape::Array {
                    items,
                    min_items: schema.get("minItems").and_then(Value::as_u64).unwrap_or(0),
                },
                _ => Shape::Json,
            },
            ["string"] => Shape::Text,
            ["integer"] => Shape::Number { integer: true },
            ["number"] => Shape::Number { integer: false },
            ["boolean"] => Shape::Boolean,
            _ => Shape::Json,
        }
    }
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

/// Builds a form for `schema`, showing `submitted` (what a person typed, kept after a refusal)
/// and `violations` (the refusal's messages, each next to its control).
pub(crate) fn render(
    id: &'static str,
    schema: &Value,
    submitted: &Submitted,
    violations: &[InputViolation],
) -> Form {
    let mut builder = Builder {
        form: id,
        schema: Schema { root: schema },
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
    schema: Schema<'s>,
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
        let help = text(written, resolved, "description").map(str::to_owned);
        let value = match self.blank {
            true => String::new(),
            false => self.submitted.get(pointer).unwrap_or_default().to_owned(),
        };
        let missing = (self.refused && !self.blank && required && value.is_empty())
            .then(|| "This field is required.".to_owned());
        let control = |kind| Control {
            id: self.id(pointer),
            name: format!("v{pointer}"),
            label: label.clone(),
            help: help.clone(),
            required,
            error: missing.clone(),
            value: value.clone(),
            kind,
        };
        let node = match self.schema.shape(written, depth) {
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
                    self.field(sub, &inner, key.clone(), needed, depth + 1);
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
                        .map(Value::to_string)
                };
                control(Kind::Number {
                    step: if integer { "1" } else { "any" },
                    min: bound(["minimum", "exclusiveMinimum"]),
                    max: bound(["maximum", "exclusiveMaximum"]),
                })
            }
            Shape::Boolean => control(Kind::Choice {
                options: choices(&value, [("true", "Yes"), ("false", "No")]),
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
                control(Kind::Choice {
                    options: choices(&value, labels.iter().map(|(v, l)| (v.as_str(), l.as_str()))),
                })
            }
            Shape::Json => control(Kind::Json {
                schema: serde_json::to_string_pretty(resolved).unwrap_or_default(),
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
        help: Option<String>,
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
            let initial = min_items.max(u64::from(required)).min(MAX_INITIAL_ROWS);
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
            name: format!("v{pointer}"),
            label: format!("Add to {label}"),
        }));
    }
}

fn choices<'a>(value: &str, options: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<Choice> {
    let mut all = vec![Choice {
        value: String::new(),
        label: "(none)".into(),
        selected: value.is_empty(),
    }];
    all.extend(options.into_iter().map(|(v, label)| Choice {
        value: v.to_owned(),
        label: label.to_owned(),
        selected: v == value,
    }));
    all
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

/// Reads the answer back from what was submitted, as `schema` says each control's text is
/// typed; a control whose text is not what its type needs is kept as text, for the schema's
/// validation to name. Fails only where a JSON text area holds no JSON.
pub(crate) fn read(schema: &Value, submitted: &Submitted) -> Result<Value, Vec<InputViolation>> {
    let mut reader = Reader {
        schema: Schema { root: schema },
        submitted,
        problems: Vec::new(),
    };
    let value = reader.value(schema, "", 0);
    if !reader.problems.is_empty() {
        return Err(reader.problems);
    }
    Ok(value.unwrap_or_else(
        || match (Schema { root: schema }).resolve(schema).get("type") {
            Some(Value::String(t)) if t == "object" => Value::Object(Map::new()),
            _ => Value::Null,
        },
    ))
}

struct Reader<'s> {
    schema: Schema<'s>,
    submitted: &'s Submitted,
    problems: Vec<InputViolation>,
}

impl<'s> Reader<'s> {
    fn value(&mut self, schema: &'s Value, pointer: &str, depth: usize) -> Option<Value> {
        let raw = self.submitted.get(pointer).unwrap_or_default();
        match self.schema.shape(schema, depth) {
            Shape::Object { properties, .. } => {
                let mut map = Map::new();
                for (key, sub) in properties {
                    if let Some(value) = self.value(sub, &child(pointer, key), depth + 1) {
                        map.insert(key.clone(), value);
                    }
                }
                (pointer.is_empty() || !map.is_empty()).then_some(Value::Object(map))
            }
            Shape::Array { items, .. } => {
                let values: Vec<Value> = self
                    .submitted
                    .rows(pointer)
                    .into_iter()
                    .filter_map(|row| self.value(items, &format!("{pointer}/{row}"), depth + 1))
                    .collect();
                (!values.is_empty()).then_some(Value::Array(values))
            }
            _ if raw.is_empty() => None,
            Shape::Text => Some(Value::String(raw.to_owned())),
            Shape::Number { .. } => {
                let trimmed = raw.trim();
                let number = trimmed
                    .parse::<i64>()
                    .map(Value::from)
                    .or_else(|_| trimmed.parse::<u64>().map(Value::from))
                    .ok()
                    .or_else(|| {
                        let float = trimmed.parse::<f64>().ok()?;
                        serde_json::Number::from_f64(float).map(Value::Number)
                    });
                Some(number.unwrap_or_else(|| Value::String(raw.to_owned())))
            }
            Shape::Boolean => Some(match raw {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                other => Value::String(other.to_owned()),
            }),
            Shape::Enum(values) => match raw.parse::<usize>().ok().and_then(|i| values.get(i)) {
                Some(value) => Some((*value).clone()),
                None => {
                    self.problems.push(InputViolation {
                        path: pointer.to_owned(),
                        message: "Choose one of the options.".into(),
                    });
                    None
                }
            },
            Shape::Json => match serde_json::from_str(raw) {
                Ok(value) => Some(value),
                Err(err) => {
                    self.problems.push(InputViolation {
                        path: pointer.to_owned(),
                        message: format!("This is not valid JSON: {err}."),
                    });
                    None
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn submitted(pairs: &[(&str, &str)]) -> Submitted {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        Submitted::from_pairs(&pairs)
    }

    fn controls(form: &Form) -> Vec<&Control> {
        form.nodes
            .iter()
            .filter_map(|node| match node {
                Node::Control(control) => Some(control),
                _ => None,
            })
            .collect()
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["order_id", "amount_cents", "status"],
            "properties": {
                "order_id": {"type": "string", "title": "Order", "description": "The order."},
                "amount_cents": {"type": "integer", "minimum": 1},
                "status": {"$ref": "#/$defs/Status"},
                "note": {"type": ["string", "null"]},
                "urgent": {"type": "boolean"},
                "lines": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "number"}}
                }},
                "meta": {"type": "object", "additionalProperties": {"type": "string"}},
                "shipping": {"type": "object", "properties": {"city": {"type": "string"}}}
            },
            "$defs": {"Status": {"oneOf": [
                {"type": "string", "const": "issued", "description": "Paid back."},
                {"type": "string", "const": "held"}
            ]}}
        })
    }

    #[test]
    fn each_type_has_its_control() {
        let form = render("approve", &schema(), &Submitted::default(), &[]);
        let by_name: HashMap<&str, &Control> = controls(&form)
            .into_iter()
            .map(|c| (c.name.as_str(), c))
            .collect();
        let order = by_name["v/order_id"];
        assert_eq!(order.label, "Order");
        assert_eq!(order.help.as_deref(), Some("The order."));
        assert!(order.required);
        assert!(matches!(
            order.kind,
            Kind::Line {
                input_type: "text",
                ..
            }
        ));
        assert!(matches!(
            &by_name["v/amount_cents"].kind,
            Kind::Number { step: "1", min: Some(min), max: None } if min == "1"
        ));
        let Kind::Choice { options } = &by_name["v/status"].kind else {
            panic!("an enum is a choice");
        };
        let labels: Vec<&str> = options.iter().map(|o| o.label.as_str()).collect();
        assert_eq!(labels, ["(none)", "issued", "held"]);
        assert!(matches!(by_name["v/note"].kind, Kind::Long { .. }));
        assert!(!by_name["v/note"].required);
        assert!(matches!(by_name["v/urgent"].kind, Kind::Choice { .. }));
        assert!(matches!(by_name["v/meta"].kind, Kind::Json { .. }), "a map");
        assert!(by_name.contains_key("v/shipping/city"));
        assert!(by_name.contains_key("v/lines/-/sku"), "the row template");
        assert!(!by_name.contains_key("v/lines/0/sku"), "no rows yet");
    }

    #[test]
    fn a_form_reads_back_into_typed_json_leaving_out_what_is_empty() {
        let form = submitted(&[
            ("csrf", "x"),
            ("v/order_id", "o-1"),
            ("v/amount_cents", "250"),
            ("v/status", "1"),
            ("v/note", ""),
            ("v/urgent", "true"),
            ("v/lines/3/sku", "b"),
            ("v/lines/0/sku", "a"),
            ("v/lines/0/qty", "1.5"),
            ("v/lines/7/sku", ""),
            ("v/meta", "{\"k\": \"v\"}"),
            ("v/shipping/city", ""),
        ]);
        let value = read(&schema(), &form).unwrap();
        assert_eq!(
            value,
            json!({
                "order_id": "o-1",
                "amount_cents": 250,
                "status": "held",
                "urgent": true,
                "lines": [{"sku": "a", "qty": 1.5}, {"sku": "b"}],
                "meta": {"k": "v"}
            })
        );
        // Text that is no number stays text, for the schema to refuse where it is.
        let odd = read(&schema(), &submitted(&[("v/amount_cents", "ten")])).unwrap();
        assert_eq!(odd, json!({"amount_cents": "ten"}));
        let bad = read(&schema(), &submitted(&[("v/meta", "{nope")])).unwrap_err();
        assert_eq!(bad[0].path, "/meta");
    }

    #[test]
    fn a_refusal_is_shown_at_its_field_with_what_was_typed() {
        let typed = submitted(&[("v/amount_cents", "0"), ("v/lines/2/sku", "x")]);
        let violations = [
            InputViolation {
                path: "/amount_cents".into(),
                message: "0 is less than the minimum of 1".into(),
            },
            InputViolation {
                path: "/lines/2/qty".into(),
                message: "deep".into(),
            },
            InputViolation {
                path: "".into(),
                message: "\"order_id\" is a required property".into(),
            },
        ];
        let form = render("approve", &schema(), &typed, &violations);
        let by_name: HashMap<&str, &Control> = controls(&form)
            .into_iter()
            .map(|c| (c.name.as_str(), c))
            .collect();
        let amount = by_name["v/amount_cents"];
        assert_eq!(amount.value, "0");
        assert_eq!(
            amount.error.as_deref(),
            Some("0 is less than the minimum of 1")
        );
        assert_eq!(amount.described_by(), "approve-f/amount_cents-error");
        assert_eq!(
            by_name["v/order_id"].error.as_deref(),
            Some("This field is required.")
        );
        assert_eq!(by_name["v/lines/2/sku"].value, "x", "the row is kept");
        assert_eq!(by_name["v/lines/2/qty"].error.as_deref(), Some("deep"));
        assert_eq!(form.problems.len(), 3);
        assert_eq!(
            form.problems[2].anchor, None,
            "the whole answer: the summary"
        );
    }

    #[test]
    fn what_cannot_be_rendered_is_json() {
        let schema = json!({"oneOf": [{"type": "object"}, {"type": "string"}]});
        let form = render("approve", &schema, &Submitted::default(), &[]);
        let only = controls(&form);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].name, "v");
        assert!(matches!(only[0].kind, Kind::Json { .. }));
        let value = read(&schema, &submitted(&[("v", "\"yes\"")])).unwrap();
        assert_eq!(value, json!("yes"));
        let empty = read(&json!({"type": "object"}), &Submitted::default()).unwrap();
        assert_eq!(empty, json!({}));
    }
}
