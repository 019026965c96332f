//! A submitted form read back into JSON, typed as the schema says.

use serde_json::{Map, Value};

use super::budget::Budget;
use super::schema::{Schema, Shape};
use super::{Submitted, child};
use crate::contract::error::InputViolation;

/// Reads the answer back from what was submitted, as `schema` says each control's text is
/// typed; a control whose text is not what its type needs is kept as text, for the schema's
/// validation to name. Fails only where a JSON text area holds no JSON.
pub(crate) fn read(schema: &Value, submitted: &Submitted) -> Result<Value, Vec<InputViolation>> {
    let mut reader = Reader {
        schema: Schema { root: schema },
        // The form's own plan: a part shown as JSON is read as JSON.
        budget: Budget::plan(schema),
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
    budget: Budget,
    submitted: &'s Submitted,
    problems: Vec<InputViolation>,
}

impl<'s> Reader<'s> {
    fn value(&mut self, schema: &'s Value, pointer: &str, depth: usize) -> Option<Value> {
        let raw = self.submitted.get(pointer).unwrap_or_default();
        match self.budget.shape(self.schema, schema, depth) {
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
