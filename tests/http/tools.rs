//! `GET /tools` and `GET /tools/{name}`: the catalog of typed tools, and a `DynTool` served and
//! validated like a typed one.

use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::{DynTool, Effect, ToolCtx, ToolOutcome, ToolSet, TypedTool};

use crate::common::{Backend, Location, TestServer, assert_error};
use crate::examples;

#[tokio::test]
async fn get_tools_serves_every_descriptor_in_name_order() {
    let (server, _location) = examples(Backend::Sqlite).await;
    let (status, body) = server.api.get("/tools").await;
    assert_eq!(status, StatusCode::OK);
    let tools = body["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ask_human", "echo", "issue_refund", "send_email"]);
    for tool in tools {
        let keys: Vec<&String> = tool.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "description",
                "effect",
                "input_schema",
                "name",
                "output_schema"
            ]
        );
    }
    let echo = &tools[1];
    assert_eq!(echo["effect"], "read");
    assert_eq!(echo["output_schema"], Value::Null);
    assert_eq!(
        echo["description"],
        "Returns the text it is given, unchanged."
    );
    // The schema served is the one schemars generates for the tool's input type.
    let typed = TypedTool::new(toolgate::examples::Echo);
    assert_eq!(&echo["input_schema"], typed.input_schema());
    assert_eq!(echo["input_schema"]["required"], json!(["text"]));

    let refund = &tools[2];
    assert_eq!(refund["effect"], "write");
    let required = refund["output_schema"]["required"].as_array().unwrap();
    for field in ["refund_id", "order_id", "amount_cents", "status"] {
        assert!(required.contains(&json!(field)), "{field} is required");
    }
    assert_eq!(tools[3]["effect"], "write");
    server.stop().await;
}

#[tokio::test]
async fn get_one_tool_or_unknown_tool() {
    let (server, _location) = examples(Backend::Sqlite).await;
    let (status, body) = server.api.get("/tools/issue_refund").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["name"], "issue_refund");
    assert_eq!(
        body["input_schema"]["properties"]["amount_cents"]["minimum"],
        1
    );

    let (status, body) = server.api.get("/tools/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(assert_error(&body, "unknown_tool")["tool"], "nope");
    server.stop().await;
}

/// A tool known only at run time, implementing `DynTool` directly.
struct Proxy;

#[toolgate::async_trait]
impl DynTool for Proxy {
    fn name(&self) -> &str {
        "remote-lookup"
    }
    fn description(&self) -> &str {
        "Looks a key up in a remote table."
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn input_schema(&self) -> &Value {
        static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| {
            json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})
        })
    }
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    fn idempotency_key(&self, _input: &Value) -> Option<String> {
        None
    }
    async fn call_json(
        &self,
        _ctx: &ToolCtx,
        input: Value,
    ) -> Result<ToolOutcome<Value>, toolgate::ToolError> {
        Ok(ToolOutcome::output(
            json!({"value": format!("v:{}", input["key"].as_str().unwrap_or(""))}),
        ))
    }
}

async fn a_dyn_tool_is_served_and_validated_like_a_typed_one(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register_dyn(Box::new(Proxy)).unwrap();
    let server = TestServer::start(tools, &location).await;
    let (status, body) = server.api.call("remote-lookup", json!({"key": "k"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["output"], json!({"value": "v:k"}));
    let (status, body) = server.api.call("remote-lookup", json!({"key": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&body, "invalid_input");
    let (_, tools) = server.api.get("/tools").await;
    assert_eq!(tools["tools"][0]["name"], "remote-lookup");
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn a_dyn_tool_is_served_and_validated_like_a_typed_one;
}
