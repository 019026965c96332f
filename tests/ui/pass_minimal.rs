//! A tool written only against `toolgate`'s re-exports (and `serde`) compiles: the derive, the
//! `async_trait` attribute, and `schemars` through `toolgate::schemars`.
use serde::Deserialize;
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolMeta, ToolOutcome, ToolSet};

/// Adds two numbers.
#[derive(Tool)]
#[tool(effect = "read")]
struct AddNumbers;

#[derive(Deserialize, JsonSchema)]
struct Pair {
    a: i64,
    b: i64,
}

#[toolgate::async_trait]
impl ToolHandler for AddNumbers {
    type Input = Pair;
    type Output = i64;

    async fn call(&self, _ctx: &ToolCtx, input: Pair) -> Result<ToolOutcome<i64>, HandlerError> {
        Ok(ToolOutcome::output(input.a + input.b))
    }
}

/// Generic tools work too.
#[derive(Tool)]
#[tool(name = "wrap", effect = "idempotent")]
struct Wrap<T: Send + Sync>(T);

fn main() {
    assert_eq!(AddNumbers::NAME, "add_numbers");
    assert_eq!(<Wrap<u8> as ToolMeta>::NAME, "wrap");
    let mut tools = ToolSet::new();
    tools.register(AddNumbers).unwrap();
    let _ = toolgate::serde_json::json!({});
}
