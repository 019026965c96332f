//! A value shown to a person as a readable list, the other way round from a form: each field
//! labelled from its schema (its `title`, else its name made readable, with its `description`
//! beside it), numbers with their digits grouped (`1999900` is `1,999,900`), nested objects and
//! arrays indented under their field. The page keeps the raw JSON one click away.

use serde_json::{Map, Value};

use super::super::prose::Prose;
use super::schema::Schema;
use super::text;

/// How deep a value is listed; deeper, its JSON is shown on one line.
const MAX_DEPTH: usize = 8;

/// One line of the list.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    /// How far it is indented: 0 for a field of the value itself.
    pub(crate) depth: usize,
    /// What the field is.
    pub(crate) label: String,
    /// Its schema's description.
    pub(crate) help: Option<Prose>,
    /// The value, as a person reads it; `None` for an object or array, whose lines follow.
    pub(crate) value: Option<String>,
}

impl Line {
    /// How far the page indents it: as deep as it is, up to six steps.
    pub(crate) fn indent(&self) -> usize {
        self.depth.min(6)
    }
}

/// `value`'s lines, labelled from `schema` (`true` when there is none).
pub(crate) fn show(schema: &Value, value: &Value) -> Vec<Line> {
    let mut lines = Vec::new();
    let lister = Lister {
        schema: Schema { root: schema },
    };
    match value {
        Value::Object(fields) => lister.fields(schema, fields, 0, &mut lines),
        other => lister.line(schema, "Value".into(), other, 0, &mut lines),
    }
    lines
}

struct Lister<'s> {
    schema: Schema<'s>,
}

impl<'s> Lister<'s> {
    /// The fields of an object, in the schema's order first, then any others.
    fn fields(
        &self,
        written: &'s Value,
        fields: &Map<String, Value>,
        depth: usize,
        lines: &mut Vec<Line>,
    ) {
        let resolved = self.schema.resolve(written);
        let properties = resolved.get("properties").and_then(Value::as_object);
        let mut keys: Vec<&String> = properties
            .into_iter()
            .flat_map(|p| p.keys())
            .filter(|key| fields.contains_key(*key))
            .collect();
        keys.extend(
            fields
                .keys()
                .filter(|key| !properties.is_some_and(|p| p.contains_key(*key))),
        );
        for key in keys {
            let sub = properties
                .and_then(|p| p.get(key))
                .unwrap_or(&Value::Bool(true));
            self.line(sub, readable(key), &fields[key], depth, lines);
        }
    }

    fn line(
        &self,
        written: &'s Value,
        name: String,
        value: &Value,
        depth: usize,
        lines: &mut Vec<Line>,
    ) {
        let resolved = self.schema.resolve(written);
        let label = text(written, resolved, "title").map_or(name, str::to_owned);
        let help = text(written, resolved, "description").map(Prose::parse);
        let nested = matches!(value, Value::Object(o) if !o.is_empty())
            || matches!(value, Value::Array(a) if !a.is_empty());
        if !nested || depth >= MAX_DEPTH {
            lines.push(Line {
                depth,
                label,
                help,
                value: Some(scalar(value)),
            });
            return;
        }
        lines.push(Line {
            depth,
            label,
            help,
            value: None,
        });
        match value {
            Value::Object(fields) => self.fields(resolved, fields, depth + 1, lines),
            Value::Array(items) => {
                let schema = resolved.get("items").unwrap_or(&Value::Bool(true));
                for (index, item) in items.iter().enumerate() {
                    let name = format!("Item {}", index + 1);
                    self.line(schema, name, item, depth + 1, lines);
                }
            }
            _ => {}
        }
    }
}

/// A value that is not listed further, in words.
fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "(none)".into(),
        Value::Bool(true) => "Yes".into(),
        Value::Bool(false) => "No".into(),
        Value::Number(number) => grouped(&number.to_string()),
        Value::String(text) if text.is_empty() => "(empty)".into(),
        Value::String(text) => text.clone(),
        Value::Array(_) if value.as_array().is_some_and(Vec::is_empty) => "(none)".into(),
        Value::Object(fields) if fields.is_empty() => "(none)".into(),
        // Deeper than the list goes: its JSON.
        other => other.to_string(),
    }
}

/// A number's digits grouped by thousands: `1999900` is `1,999,900`, `-12345.5` is
/// `-12,345.5`; a number in exponent form stays as written.
pub(crate) fn grouped(number: &str) -> String {
    if number.contains(['e', 'E']) {
        return number.to_owned();
    }
    let (sign, unsigned) = match number.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", number),
    };
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let mut out = String::from(sign);
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    if let Some(fraction) = fraction {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

/// A field's name as a label: `amount_cents` and `amountCents` are "Amount cents".
pub(crate) fn readable(name: &str) -> String {
    let mut words = String::with_capacity(name.len());
    let mut previous: Option<char> = None;
    for c in name.chars() {
        if c == '_' || c == '-' {
            words.push(' ');
        } else if c.is_uppercase() && previous.is_some_and(char::is_lowercase) {
            words.push(' ');
            words.extend(c.to_lowercase());
        } else {
            words.push(c);
        }
        previous = Some(c);
    }
    let words = words.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => name.to_owned(),
    }
}
