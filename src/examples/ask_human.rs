//! `ask_human`: puts a question to a person. The first attempt suspends with the question; the
//! approval carries the answer, and the re-dispatched attempt returns it.

use serde::{Deserialize, Serialize};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, serde_json};

/// Asks a person a question and waits for their answer.
#[derive(Debug, Clone, Copy, Default, Tool)]
#[tool(effect = "read")]
pub struct AskHuman;

/// The input of `ask_human`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskHumanInput {
    /// The question to put to a person.
    pub question: String,
}

/// The person's answer: what the approver sends, and what the tool returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HumanAnswer {
    /// The answer.
    pub answer: String,
}

#[toolgate::async_trait]
impl ToolHandler for AskHuman {
    type Input = AskHumanInput;
    type Output = HumanAnswer;

    async fn call(
        &self,
        ctx: &ToolCtx,
        input: AskHumanInput,
    ) -> Result<ToolOutcome<HumanAnswer>, HandlerError> {
        match ctx.resume() {
            None => Ok(ToolOutcome::suspend_for::<HumanAnswer>(input.question)),
            Some(resume) => {
                let answer: HumanAnswer =
                    serde_json::from_value(resume.clone()).map_err(HandlerError::new)?;
                Ok(ToolOutcome::output(answer))
            }
        }
    }
}
