//! `echo`: the smallest possible tool; answers with its input.

use serde::{Deserialize, Serialize};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome};

/// Returns the text it is given, unchanged.
#[derive(Debug, Clone, Copy, Default, Tool)]
#[tool(effect = "read")]
pub struct Echo;

/// The input and output of `echo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoText {
    /// The text to echo.
    pub text: String,
}

#[toolgate::async_trait]
impl ToolHandler for Echo {
    type Input = EchoText;
    type Output = EchoText;

    async fn call(
        &self,
        _ctx: &ToolCtx,
        input: EchoText,
    ) -> Result<ToolOutcome<EchoText>, HandlerError> {
        Ok(ToolOutcome::output(input))
    }
}
