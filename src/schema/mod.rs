//! JSON Schema cleaning and the tool lists of each LLM provider, in the provider's own format:
//! the value to put in its request's `tools` field, as `GET /tools?format=…` serves it.
//!
//! A tool's own schema (what schemars generates, or what a [`DynTool`](crate::DynTool)
//! declares) is what every call is checked against. Providers each take a different subset
//! of JSON Schema, so each gets a copy:
//!
//! - [`clean`]: the passes every copy goes through (no `$schema`/`$id`/root `title`, no
//!   number formats, `oneOf` as `anyOf`, objects with `properties`, arrays with `items`,
//!   `$ref`s inlined but for recursive types, an input root that is one object);
//! - [`openai`]: Chat Completions and Responses function tools, strict where strict mode can
//!   express the schema;
//! - [`anthropic`]: the Messages API's tools;
//! - [`gemini`]: function declarations with `parametersJsonSchema`;
//! - [`mcp`]: tools as MCP's `tools/list` returns them, also what the MCP door serves.
//!
//! Everything here is a pure function of `serde_json` values, run once at start-up. A copy may
//! drop a constraint its provider cannot express; the check never does.

pub mod anthropic;
pub mod clean;
pub mod gemini;
pub mod mcp;
pub mod openai;
mod refs;
pub(crate) mod walk;

pub use clean::{clean_input_schema, clean_schema};

use serde_json::Value;

use crate::contract::erased::ToolDescriptor;

/// A provider's tool-list format, as named in `GET /tools?format=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
pub enum Format {
    /// OpenAI Chat Completions: `[{"type": "function", "function": {name, description,
    /// parameters, strict}}]`.
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses: `[{"type": "function", name, description, parameters, strict}]`.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages: `[{name, description, input_schema}]`.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Gemini: `[{"functionDeclarations": [{name, description, parametersJsonSchema}]}]`.
    #[serde(rename = "gemini")]
    Gemini,
    /// MCP `tools/list`: `[{name, description, inputSchema, outputSchema?, annotations,
    /// _meta}]`.
    #[serde(rename = "mcp")]
    Mcp,
}

impl Format {
    /// Every format, in the order they are documented.
    pub const ALL: [Format; 5] = [
        Format::OpenAi,
        Format::OpenAiResponses,
        Format::Anthropic,
        Format::Gemini,
        Format::Mcp,
    ];

    /// The format's name in `?format=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::OpenAiResponses => "openai-responses",
            Format::Anthropic => "anthropic",
            Format::Gemini => "gemini",
            Format::Mcp => "mcp",
        }
    }

    /// The format named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL
            .into_iter()
            .find(|format| format.as_str() == name)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The value of the provider's `tools` request field for `tools`, in their order.
pub fn tool_list(format: Format, tools: &[ToolDescriptor]) -> Value {
    let each = |one: fn(&ToolDescriptor) -> Value| Value::Array(tools.iter().map(one).collect());
    match format {
        Format::OpenAi => each(openai::chat_tool),
        Format::OpenAiResponses => each(openai::responses_tool),
        Format::Anthropic => each(anthropic::tool),
        Format::Gemini => gemini::tools(tools),
        Format::Mcp => Value::Array(mcp::tools(tools)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_found_by_their_names_only() {
        for format in Format::ALL {
            assert_eq!(Format::from_name(format.as_str()), Some(format));
            // The name documented in the OpenAPI description is the same.
            assert_eq!(serde_json::to_value(format).unwrap(), format.as_str());
        }
        assert_eq!(Format::from_name("OpenAI"), None);
        assert_eq!(Format::from_name(""), None);
    }
}
