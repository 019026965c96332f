//! What one attempt of a tool produces: an output, or a suspension that parks the call until a
//! person approves (with input of the shape the tool asked for) or rejects it.

use schemars::JsonSchema;
use serde_json::Value;

use super::meta::schema_value;

/// The result of one successful attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome<T> {
    /// The tool finished with this output.
    Output(T),
    /// The tool waits for a person.
    Suspend(Suspension),
}

impl<T> ToolOutcome<T> {
    /// Finishes with `output`.
    pub fn output(output: T) -> Self {
        ToolOutcome::Output(output)
    }

    /// Suspends for a person who answers with input matching `input_schema`.
    pub fn suspend(reason: impl Into<String>, input_schema: Value) -> Self {
        ToolOutcome::Suspend(Suspension::new(reason, input_schema))
    }

    /// Suspends for a person who answers with a value of type `R` (its schema is generated).
    pub fn suspend_for<R: JsonSchema>(reason: impl Into<String>) -> Self {
        ToolOutcome::Suspend(Suspension::expecting::<R>(reason))
    }

    /// Maps the output, leaving a suspension as it is.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> ToolOutcome<U> {
        match self {
            ToolOutcome::Output(output) => ToolOutcome::Output(f(output)),
            ToolOutcome::Suspend(suspension) => ToolOutcome::Suspend(suspension),
        }
    }
}

/// Why a call waits, and what the approver must answer with.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspension {
    /// Shown to the approver: what they are asked to decide.
    pub reason: String,
    /// The JSON Schema the approver's resume input must satisfy.
    pub input_schema: Value,
}

impl Suspension {
    /// A suspension whose resume input must match `input_schema`.
    pub fn new(reason: impl Into<String>, input_schema: Value) -> Self {
        Suspension {
            reason: reason.into(),
            input_schema,
        }
    }

    /// A suspension whose resume input must be a value of type `R`.
    pub fn expecting<R: JsonSchema>(reason: impl Into<String>) -> Self {
        Suspension::new(reason, schema_value::<R>())
    }
}
