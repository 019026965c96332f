//! `/mcp`: the same tools over MCP, driven by MCP clients nobody here wrote (the official Python
//! SDK in both eras, the official TypeScript SDK), and by hand where a rule is about the bytes:
//! auth before MCP, Host and Origin, idempotency across doors, whose calls a caller may await,
//! held awaits and the request limit. No MCP answer may carry a suspension's token.
//!
//! The SDKs are installed by `.ci/test-deps`: the Python one into `.ci/venv`, the TypeScript
//! one into `.ci/node`.

mod calls;
#[path = "../common/mod.rs"]
mod common;
mod direct;
mod gate;
mod sdks;

use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::http::auth::Role;

use common::{Api, Location, TestServer};

const CALLER: &str = "mcp-caller-token-1b7e";
const OTHER_CALLER: &str = "mcp-other-caller-token-5c20";
const APPROVER: &str = "mcp-approver-token-90fd";
const ADMIN: &str = "mcp-admin-token-e6a4";

/// The example tools, with a caller, another caller, an approver and an admin.
async fn server_with(
    location: &Location,
    configure: impl FnOnce(toolgate::ServerBuilder) -> toolgate::ServerBuilder,
) -> TestServer {
    let keys = common::api_keys(&[
        ("agent", Role::Caller, CALLER),
        ("other-agent", Role::Caller, OTHER_CALLER),
        ("finance-ops", Role::Approver, APPROVER),
        ("root", Role::Admin, ADMIN),
    ]);
    TestServer::start_with(common::example_tools(location), location, |builder| {
        configure(builder.api_keys(keys))
    })
    .await
}

async fn server(location: &Location) -> TestServer {
    server_with(location, |builder| builder).await
}

/// A JSON-RPC request to `/mcp` in the `initialize` era, as `token`; the status and the body
/// (JSON-RPC when the MCP layer answered, toolgate's envelope when the gate did).
async fn rpc(api: &Api, token: Option<&str>, method: &str, params: Value) -> (StatusCode, Value) {
    let headers = [("mcp-protocol-version", "2025-11-25")];
    post_mcp(
        api,
        token,
        &headers,
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
    )
    .await
}

/// The same in the 2026-07-28 era: per-request `_meta`, and the standard headers.
async fn rpc_modern(
    api: &Api,
    token: Option<&str>,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    tasks: bool,
) -> (StatusCode, Value) {
    let extensions = if tasks {
        json!({"io.modelcontextprotocol/tasks": {}})
    } else {
        json!({})
    };
    let meta = params["_meta"].as_object().cloned().unwrap_or_default();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
    });
    for (k, v) in meta {
        params["_meta"][k] = v;
    }
    let mut headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(name) = name {
        headers.push(("mcp-name", name));
    }
    post_mcp(
        api,
        token,
        &headers,
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
    .await
}

async fn post_mcp(
    api: &Api,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, Value) {
    let mut request = api
        .client
        .post(format!("{}/mcp", api.base))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A `tools/call` in the `initialize` era; its result (a JSON-RPC error fails the test).
async fn call(api: &Api, token: &str, tool: &str, arguments: Value, meta: Value) -> Value {
    let (status, body) = rpc(
        api,
        Some(token),
        "tools/call",
        json!({"name": tool, "arguments": arguments, "_meta": meta}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("a result: {body}"))
}
