//! A value shown in a form: the controls' texts that read back (`read.rs`) as that value, so
//! that a form can open filled (the call's input, for an approver to edit).

use std::collections::HashMap;

use serde_json::Value;

use super::budget::Budget;
use super::schema::{Schema, Shape};
use super::{Submitted, child};

/// The texts of `schema`'s form that read back as `value`, each under its control's name. A
/// part of `value` the schema's controls cannot hold (a property the schema does not name, a
/// value of another type than the control's) is left out, and the lifecycle's validation says
/// so if it matters when the form is sent.
pub(crate) fn filled(schema: &Value, value: &Value) -> Submitted {
    let mut filler = Filler {
        schema: Schema { root: schema },
        budget: Budget::plan(schema),
        values: HashMap::new(),
    };
    filler.fill(schema, "", value, 0);
    Submitted {
        values: filler.values,
    }
}

struct Filler<'s> {
    schema: Schema<'s>,
    budget: Budget,
    values: HashMap<String, String>,
}

impl<'s> Filler<'s> {
    fn fill(&mut self, schema: &'s Value, pointer: &str, value: &Value, depth: usize) {
        let text = match self.budget.shape(self.schema, schema, depth) {
            Shape::Object { properties, .. } => {
                for (key, sub) in properties {
                    if let Some(inner) = value.get(key) {
                        self.fill(sub, &child(pointer, key), inner, depth + 1);
                    }
                }
                return;
            }
            Shape::Array { items, .. } => {
                for (row, inner) in value.as_array().into_iter().flatten().enumerate() {
                    self.fill(items, &format!("{pointer}/{row}"), inner, depth + 1);
                }
                return;
            }
            Shape::Text => value.as_str().map(str::to_owned),
            Shape::Number { .. } => value.is_number().then(|| value.to_string()),
            Shape::Boolean => value.as_bool().map(|b| b.to_string()),
            Shape::Enum(values) => values
                .iter()
                .position(|v| *v == value)
                .map(|index| index.to_string()),
            Shape::Json => serde_json::to_string_pretty(value).ok(),
        };
        if let Some(text) = text {
            self.values.insert(format!("v{pointer}"), text);
        }
    }
}
