//! `/mcp`: the same tools over MCP, driven by MCP clients nobody here wrote (the official Python
//! SDK in both eras, the official TypeScript SDK), and by hand where a rule is about the bytes:
//! auth before MCP, Host and Origin, idempotency across doors, whose calls a caller may await,
//! held awaits and the request limit. No MCP answer may carry a suspension's token.
//!
//! The SDKs are installed by `.ci/test-deps`: the Python one into `.ci/venv`, the TypeScript
//! one into `.ci/node`.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{Api, Backend, Location, TestServer, assert_error, outbox, repo_root};
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::http::auth::Role;

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

fn python() -> PathBuf {
    let venv = repo_root().join(".ci/venv/bin/python");
    assert!(
        venv.exists(),
        "the MCP Python SDK is not installed: run `bash .ci/test-deps`"
    );
    venv
}

/// Runs a client script to its end (off the runtime that serves it); its last line of output
/// is what it saw, as JSON.
async fn run_client(mut command: Command, what: &str) -> Value {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{what} runs: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{what} printed no JSON ({e}): {stdout}"))
}

/// Asserts that no MCP answer the client saw holds the token it got over REST.
fn assert_no_token(seen: &Value) {
    let token = seen["token"].as_str().expect("the client approved a call");
    assert!(token.starts_with("sus_"), "a token: {token}");
    for part in ["answers", "tools"] {
        let text = seen[part].to_string();
        assert!(
            !text.contains(token),
            "an MCP answer carries the token: {text}"
        );
        assert!(
            !text.contains("sus_"),
            "an MCP answer carries a token: {text}"
        );
    }
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

/// The Python SDK, in the era `mode`, lists, calls, gets a pending answer, awaits the approval's
/// outcome and (in 2026-07-28) drives a task; the calls are recorded as its key's.
async fn the_python_sdk_lists_calls_and_awaits(backend: Backend) {
    let location = Location::new(backend).await;
    let server = server(&location).await;
    for mode in ["legacy", "2026-07-28"] {
        let mut command = Command::new(python());
        command
            .arg(repo_root().join("tests/mcp/python_client.py"))
            .args([&server.api.base, mode, CALLER, APPROVER]);
        let seen = run_client(command, &format!("the Python SDK ({mode})")).await;
        assert_no_token(&seen);
        let call_id = seen["pending_call_id"].as_str().unwrap();
        let call = server.store.call(call_id).await.unwrap().expect("recorded");
        assert_eq!(call.caller.as_deref(), Some("agent"));
        assert_eq!(call.status.as_str(), "completed");
        assert_eq!(call.output, Some(json!({"answer": "Yes, ship it."})));
        if mode != "legacy" {
            let task = server
                .store
                .call(seen["task_id"].as_str().unwrap())
                .await
                .unwrap();
            assert_eq!(task.unwrap().output, Some(json!({"answer": "Deployed."})));
        }
    }
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn the_python_sdk_lists_calls_and_awaits;
}

#[tokio::test]
async fn the_typescript_sdk_lists_calls_and_awaits() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    let node_dir = repo_root().join(".ci/node");
    assert!(
        node_dir
            .join("node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "the MCP TypeScript SDK is not installed: run `bash .ci/test-deps`"
    );
    let script = std::fs::read_to_string(repo_root().join("tests/mcp/ts_client.mjs")).unwrap();
    let mut command = Command::new("node");
    // Run where the SDK is installed, so its imports resolve.
    command
        .current_dir(&node_dir)
        .args(["--input-type=module", "-e", &script])
        .env("MCP_BASE", &server.api.base)
        .env("MCP_CALLER", CALLER)
        .env("MCP_APPROVER", APPROVER);
    let seen = run_client(command, "the TypeScript SDK").await;
    assert_no_token(&seen);
    // Its send_email ran once, as its key's.
    let sent = outbox(&location);
    assert_eq!(sent.len(), 1, "{sent:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_request_without_a_valid_key_is_refused_before_mcp() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    for token in [None, Some("not-a-key")] {
        let response = server
            .api
            .client
            .post(format!("{}/mcp", server.api.base))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .bearer_auth(token.unwrap_or(""))
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.json().await.unwrap();
        assert_error(&body, "unauthorized");
    }
    // An approver decides; it does not call tools, over MCP either.
    let (status, body) = rpc(&server.api, Some(APPROVER), "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_error(&body, "forbidden");
    // A caller may list: every tool in name order, the await tool among them, each annotated
    // from its effect.
    let (status, body) = rpc(&server.api, Some(CALLER), "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tools = body["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "ask_human",
            "echo",
            "issue_refund",
            "send_email",
            "toolgate_await_call"
        ]
    );
    let annotations =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["annotations"].clone();
    assert_eq!(
        annotations("echo"),
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true})
    );
    assert_eq!(annotations("send_email")["readOnlyHint"], false);
    assert_eq!(annotations("send_email")["idempotentHint"], false);
    // `GET /tools?format=mcp` is the same list, less the await tool (it lives on /mcp).
    let response = server
        .api
        .client
        .get(format!("{}/tools?format=mcp", server.api.base))
        .bearer_auth(CALLER)
        .send()
        .await
        .unwrap();
    let listed: Value = response.json().await.unwrap();
    let over_mcp: Vec<&Value> = tools
        .iter()
        .filter(|t| t["name"] != "toolgate_await_call")
        .collect();
    let over_rest: Vec<&Value> = listed["tools"].as_array().unwrap().iter().collect();
    assert_eq!(over_mcp, over_rest);
    server.stop().await;
}

/// `tools/list` from the caller, with this `Host` (reqwest's own when `None`) and `Origin`.
async fn list_with(api: &Api, host: Option<&str>, origin: Option<&str>) -> reqwest::Response {
    let mut request = api
        .client
        .post(format!("{}/mcp", api.base))
        .bearer_auth(CALLER)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    if let Some(host) = host {
        request = request.header("host", host);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.send().await.unwrap()
}

/// A refusal of `/mcp`'s Host and Origin check: `403`, the error envelope as JSON, saying what
/// the operator lists to allow it. Its message and details.
async fn refused(response: reqwest::Response) -> (String, Value) {
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let body: Value = response.json().await.unwrap();
    let details = assert_error(&body, "forbidden");
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("[server] allowed_hosts"), "{message}");
    (message, details)
}

#[tokio::test]
async fn a_foreign_host_or_origin_is_refused_with_the_envelope() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    let api = &server.api;
    let port = api.base.rsplit(':').next().unwrap().to_owned();
    // DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1.
    let evil = format!("Evil.Example:{port}");
    let (message, details) = refused(list_with(api, Some(&evil), None).await).await;
    assert!(
        message.starts_with("Host `evil.example` is not allowed ("),
        "{message}"
    );
    assert_eq!(details, json!({"host": "evil.example"}));
    let (message, details) = refused(list_with(api, None, Some("http://evil.example")).await).await;
    assert!(
        message.starts_with("Origin `http://evil.example` is not allowed ("),
        "{message}"
    );
    assert_eq!(details, json!({"origin": "http://evil.example"}));
    // An opaque origin (a sandboxed page, a file) is refused the same way.
    refused(list_with(api, None, Some("null")).await).await;
    // The Host comes first, before the key: a foreign name is refused without looking further.
    let response = api
        .client
        .post(format!("{}/mcp", api.base))
        .header("host", "evil.example")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    refused(response).await;

    let localhost = format!("localhost:{port}");
    let local_origin = format!("http://localhost:{port}");
    for (host, origin) in [
        (Some(localhost.as_str()), None),
        (None, Some(local_origin.as_str())),
        (None, None),
    ] {
        let response = list_with(api, host, origin).await;
        assert_eq!(response.status(), StatusCode::OK, "{host:?} {origin:?}");
    }
    server.stop().await;
}

/// A name listed in `[mcp] allowed_hosts` is accepted as Host and as an Origin's host, on
/// any port; its neighbours are not.
#[tokio::test]
async fn a_listed_host_is_accepted() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server_with(&location, |builder| {
        builder.mcp(toolgate::mcp::McpOptions {
            enabled: true,
            allowed_hosts: toolgate::mcp::McpOptions::hosts_for(
                std::net::Ipv4Addr::LOCALHOST.into(),
                &["tools.example.com".into()],
            ),
        })
    })
    .await;
    let api = &server.api;
    for (host, origin, status) in [
        ("tools.example.com", None, StatusCode::OK),
        (
            "tools.example.com:443",
            Some("https://tools.example.com"),
            StatusCode::OK,
        ),
        (
            "tools.example.com.evil.example",
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "tools.example.com",
            Some("https://evil.example"),
            StatusCode::FORBIDDEN,
        ),
    ] {
        let response = list_with(api, Some(host), origin).await;
        assert_eq!(response.status(), status, "{host} {origin:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn one_idempotency_key_over_mcp_and_rest_runs_once() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    let email = json!({"to": "ops@example.com", "subject": "Once", "body": "Only once."});
    let meta = json!({"dev.toolgate/idempotencyKey": "mail-42"});
    let first = call(
        &server.api,
        CALLER,
        "send_email",
        email.clone(),
        meta.clone(),
    )
    .await;
    assert_eq!(first["isError"], false, "{first}");
    let call_id = first["_meta"]["dev.toolgate/callId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The same key over REST (the header) is the same call: replayed, not sent again.
    let response = server
        .api
        .client
        .post(format!("{}/tools/send_email/call", server.api.base))
        .bearer_auth(CALLER)
        .header("idempotency-key", "mail-42")
        .json(&json!({"input": email}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["call_id"], call_id.as_str());
    assert_eq!(body["output"], first["structuredContent"]);
    // And over MCP again.
    let again = call(&server.api, CALLER, "send_email", email.clone(), meta).await;
    assert_eq!(again["_meta"]["dev.toolgate/replayed"], true, "{again}");
    assert_eq!(again["_meta"]["dev.toolgate/callId"], call_id.as_str());
    assert_eq!(outbox(&location).len(), 1, "one email");
    // A key that cannot be one is malformed params.
    for bad in [json!(""), json!(7), json!("has space")] {
        let (status, body) = rpc(
            &server.api,
            Some(CALLER),
            "tools/call",
            json!({"name": "send_email", "arguments": email, "_meta": {"dev.toolgate/idempotencyKey": bad}}),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["error"]["code"], -32602, "{body}");
    }
    assert_eq!(outbox(&location).len(), 1, "still one email");
    server.stop().await;
}

#[tokio::test]
async fn a_caller_awaits_and_polls_only_its_own_calls() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    let pending = call(
        &server.api,
        CALLER,
        "ask_human",
        json!({"question": "Mine?"}),
        json!({}),
    )
    .await;
    assert_eq!(
        pending["structuredContent"]["status"], "pending_approval",
        "{pending}"
    );
    let call_id = pending["structuredContent"]["call_id"].as_str().unwrap();
    // Another caller learns nothing of it, by the await tool or as a task.
    let theirs = call(
        &server.api,
        OTHER_CALLER,
        "toolgate_await_call",
        json!({"call_id": call_id, "wait_seconds": 0}),
        json!({}),
    )
    .await;
    assert_eq!(theirs["isError"], true, "{theirs}");
    assert!(
        theirs["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("unknown_call")
    );
    let (_, task) = rpc_modern(
        &server.api,
        Some(OTHER_CALLER),
        "tasks/get",
        Some(call_id),
        json!({"taskId": call_id}),
        true,
    )
    .await;
    assert_eq!(task["error"]["code"], -32602, "{task}");
    // Its own caller sees it working, and the message says why, without a token.
    let (_, task) = rpc_modern(
        &server.api,
        Some(CALLER),
        "tasks/get",
        Some(call_id),
        json!({"taskId": call_id}),
        true,
    )
    .await;
    assert_eq!(task["result"]["status"], "working", "{task}");
    assert_eq!(
        task["result"]["statusMessage"],
        "awaiting a person's decision: Mine?"
    );
    assert!(!task.to_string().contains("sus_"), "{task}");
    // Bad await input is a tool error naming the field; the tool is not known as a call.
    let bad = call(
        &server.api,
        CALLER,
        "toolgate_await_call",
        json!({"call_id": call_id, "wait_seconds": 51}),
        json!({}),
    )
    .await;
    assert_eq!(bad["isError"], true);
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("/wait_seconds")
    );
    // An unknown tool is -32602.
    let (_, unknown) = rpc(
        &server.api,
        Some(CALLER),
        "tools/call",
        json!({"name": "nope", "arguments": {}}),
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    server.stop().await;
}

/// A call held by a gate (`require_approval`) is pending over MCP with a text that gives the
/// gate's reason once, and says what to do instead of calling again.
#[tokio::test]
async fn a_gated_calls_pending_text_says_its_reason_once() {
    let location = Location::new(Backend::Sqlite).await;
    let mut dispatch = toolgate::dispatch::DispatchConfig::default();
    dispatch.tools.insert(
        "echo".into(),
        toolgate::dispatch::ToolSettings {
            approval: Some(toolgate::dispatch::ApprovalGate::default()),
            ..Default::default()
        },
    );
    let server = server_with(&location, |builder| builder.dispatch_config(dispatch)).await;
    let pending = call(
        &server.api,
        CALLER,
        "echo",
        json!({"text": "hi"}),
        json!({}),
    )
    .await;
    assert_eq!(pending["isError"], false, "{pending}");
    let call_id = pending["structuredContent"]["call_id"].as_str().unwrap();
    assert_eq!(
        pending["structuredContent"]["reason"],
        "Calls of echo need approval."
    );
    assert_eq!(
        pending["content"][0]["text"],
        format!(
            "Call {call_id} of `echo` awaits a person's decision: Calls of echo need \
             approval.\nDo not call `echo` again for this; call `toolgate_await_call` with \
             {{\"call_id\": \"{call_id}\"}} to wait for its outcome."
        )
    );
    server.stop().await;
}

#[tokio::test]
async fn held_awaits_count_against_no_request_limit() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server_with(&location, |builder| builder.max_in_flight(2)).await;
    let pending = call(
        &server.api,
        CALLER,
        "ask_human",
        json!({"question": "Hold?"}),
        json!({}),
    )
    .await;
    let call_id = pending["structuredContent"]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiters = async || -> Option<u64> {
        let response = server
            .api
            .client
            .get(format!("{}/metrics", server.api.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .ok()?;
        let text = response.text().await.ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("toolgate_waiters "))
            .and_then(|n| n.trim().parse().ok())
    };
    // Four held, one after the other (twice the limit), and the server still answers.
    let mut held = Vec::new();
    for n in 1..=4 {
        let api = server.api.clone();
        let call_id = call_id.clone();
        held.push(tokio::spawn(async move {
            call(
                &api,
                CALLER,
                "toolgate_await_call",
                json!({"call_id": call_id, "wait_seconds": 20}),
                json!({}),
            )
            .await
        }));
        common::eventually("the await held", async || {
            (waiters().await? == n).then_some(())
        })
        .await;
    }
    let (status, body) = rpc(&server.api, Some(CALLER), "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The approval answers every one of them with the outcome.
    let (_, approvals) = {
        let response = server
            .api
            .client
            .get(format!("{}/approvals", server.api.base))
            .bearer_auth(APPROVER)
            .send()
            .await
            .unwrap();
        (response.status(), response.json::<Value>().await.unwrap())
    };
    let token = approvals["approvals"][0]["token"].as_str().unwrap();
    let response = server
        .api
        .client
        .post(format!("{}/approvals/{token}/approve", server.api.base))
        .bearer_auth(APPROVER)
        .json(&json!({"input": {"answer": "Held and answered."}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    for held in held {
        let answer = held.await.unwrap();
        assert_eq!(
            answer["structuredContent"],
            json!({"answer": "Held and answered."}),
            "{answer}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn mcp_can_be_turned_off() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server_with(&location, |builder| {
        builder.mcp(toolgate::mcp::McpOptions {
            enabled: false,
            ..Default::default()
        })
    })
    .await;
    let (status, body) = rpc(&server.api, Some(CALLER), "tools/list", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&body, "not_found");
    server.stop().await;
}

/// The SDK's transport answers a request the direct way of `tools/call` would take when its
/// `Accept` has parameters (the direct way leaves those to the transport): the same request,
/// answered both ways.
const ACCEPT_FOR_THE_TRANSPORT: &str = "application/json;q=1, text/event-stream;q=0.9";

/// `tools/call` as a client of either era sends it, with `_meta` (plus `extra_meta`), headers
/// and the `Accept` given.
async fn tools_call(
    api: &Api,
    modern: bool,
    tasks: bool,
    accept: Option<&str>,
    name: &str,
    arguments: Value,
    extra_meta: Value,
) -> (StatusCode, Value) {
    let mut meta = extra_meta;
    let mut headers = vec![];
    if modern {
        let extensions = if tasks {
            json!({"io.modelcontextprotocol/tasks": {}})
        } else {
            json!({})
        };
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({"extensions": extensions});
        headers.extend([
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", name),
        ]);
    } else {
        headers.push(("mcp-protocol-version", "2025-11-25"));
    }
    if let Some(accept) = accept {
        headers.push(("accept", accept));
    }
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta}});
    let mut request = api
        .client
        .post(format!("{}/mcp", api.base))
        .bearer_auth(CALLER)
        .json(&body);
    for (header, value) in headers {
        request = request.header(header, value);
    }
    if accept.is_none() {
        request = request.header("accept", "application/json, text/event-stream");
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    (status, response.json().await.expect("a JSON answer"))
}

/// An answer with what differs between two calls of one request (call ids, times) made equal.
fn same_shape(value: Value) -> Value {
    match value {
        Value::String(text) => Value::String(without_call_ids(&text)),
        Value::Array(items) => Value::Array(items.into_iter().map(same_shape).collect()),
        Value::Object(object) => Value::Object(
            object
                .into_iter()
                .map(|(key, value)| match key.as_str() {
                    "createdAt" | "lastUpdatedAt" => (key, json!("<time>")),
                    _ => (key, same_shape(value)),
                })
                .collect(),
        ),
        other => other,
    }
}

fn without_call_ids(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("call_") {
        out.push_str(&rest[..at]);
        let id = &rest[at + 5..];
        let hex = id.chars().take_while(char::is_ascii_hexdigit).count();
        if hex == 32 {
            out.push_str("call_<id>");
            rest = &id[32..];
        } else {
            out.push_str("call_");
            rest = id;
        }
    }
    out.push_str(rest);
    out
}

/// A `tools/call` answered the direct way is answered exactly as the SDK's transport answers
/// it, in both eras: results, tool errors, a pending call, a task, the await tool, and every
/// JSON-RPC error of the door; and what the direct way must leave to the transport (a stray
/// `result`, standard headers that disagree with the body, an unknown version) is still refused
/// by it.
#[tokio::test]
async fn the_direct_way_of_tools_call_answers_as_the_sdks_transport() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    let api = &server.api;
    let deep = (0..70).fold(json!("bottom"), |inner, _| json!({ "a": inner }));
    let cases: Vec<(&str, Value, Value)> = vec![
        ("echo", json!({"text": "both ways"}), json!({})),
        ("echo", json!({"text": 7}), json!({})),
        (
            "echo",
            json!({"text": "keyed"}),
            json!({"dev.toolgate/idempotencyKey": ""}),
        ),
        ("echo", json!({"text": deep}), json!({})),
        ("no_such_tool", json!({}), json!({})),
        ("ask_human", json!({"question": "Either way?"}), json!({})),
        (
            "toolgate_await_call",
            json!({"call_id": "call_00000000000000000000000000000000", "wait_seconds": 0}),
            json!({}),
        ),
        (
            "toolgate_await_call",
            json!({"wait_seconds": 99}),
            json!({}),
        ),
    ];
    for modern in [false, true] {
        for tasks in [false, true] {
            if tasks && !modern {
                continue;
            }
            for (name, arguments, meta) in &cases {
                let direct = tools_call(
                    api,
                    modern,
                    tasks,
                    None,
                    name,
                    arguments.clone(),
                    meta.clone(),
                )
                .await;
                let transport = tools_call(
                    api,
                    modern,
                    tasks,
                    Some(ACCEPT_FOR_THE_TRANSPORT),
                    name,
                    arguments.clone(),
                    meta.clone(),
                )
                .await;
                assert_eq!(direct.0, transport.0, "{name} (modern: {modern})");
                assert_eq!(
                    same_shape(direct.1.clone()),
                    same_shape(transport.1.clone()),
                    "{name} (modern: {modern}, tasks: {tasks})"
                );
                // Each answer is the answer of its case, not an error of the transport.
                let answered = &direct.1;
                assert_eq!(answered["id"], 3, "{answered}");
                match *name {
                    "no_such_tool" => assert_eq!(answered["error"]["code"], -32602),
                    _ if arguments.to_string().contains("bottom") => {
                        assert_eq!(answered["error"]["code"], -32602)
                    }
                    _ if meta.get("dev.toolgate/idempotencyKey").is_some() => {
                        assert_eq!(answered["error"]["code"], -32602)
                    }
                    "ask_human" if tasks => {
                        assert_eq!(answered["result"]["status"], "working", "{answered}")
                    }
                    "ask_human" => assert_eq!(
                        answered["result"]["structuredContent"]["status"], "pending_approval",
                        "{answered}"
                    ),
                    "echo" if arguments["text"] == "both ways" => {
                        assert_eq!(answered["result"]["isError"], false, "{answered}");
                        assert_eq!(answered["result"]["structuredContent"]["text"], "both ways");
                    }
                    _ => assert_eq!(answered["result"]["isError"], true, "{answered}"),
                }
            }
        }
    }

    // What the transport refuses stays refused.
    let post = |body: Value, headers: Vec<(&'static str, &'static str)>| {
        let mut request = api
            .client
            .post(format!("{}/mcp", api.base))
            .bearer_auth(CALLER)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.expect("request sent");
            let status = response.status();
            let text = response.text().await.unwrap();
            (status, text)
        }
    };
    let modern_meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let call = |meta: Value| {
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": meta}})
    };
    let modern_headers = |name: &'static str| {
        vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", name),
        ]
    };
    // The standard headers disagree with the body.
    let (status, text) = post(call(modern_meta.clone()), modern_headers("send_email")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("Mcp-Name"), "{text}");
    // A version header that is no version.
    let (status, text) = post(
        call(json!({})),
        vec![("mcp-protocol-version", "1999-01-01")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    // `_meta` says one version, the header another.
    let (status, text) = post(
        call(modern_meta.clone()),
        vec![("mcp-protocol-version", "2025-11-25")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    // A request with a stray `result` is no request.
    let mut stray = call(json!({}));
    stray["result"] = json!({});
    let (status, text) = post(stray, vec![("mcp-protocol-version", "2025-11-25")]).await;
    assert!(
        !text.contains("both ways") && !text.contains("\"isError\":false"),
        "{status}: {text}"
    );
    // Incomplete 2026-07-28 metadata.
    let (status, text) = post(
        call(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"})),
        modern_headers("echo"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("clientCapabilities"), "{text}");
    // Shapes serde would read by position or skip unread, which the SDK refuses whole.
    let raw = |body: &'static str, accept: &'static str| {
        let request = api
            .client
            .post(format!("{}/mcp", api.base))
            .bearer_auth(CALLER)
            .header("accept", accept)
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body);
        async move {
            let response = request.send().await.expect("request sent");
            let status = response.status();
            (status, response.text().await.unwrap())
        }
    };
    let plain = "application/json, text/event-stream";
    for body in [
        r#"["2.0", 5, "tools/call", {"name": "echo", "arguments": {"text": "by position"}}]"#,
        r#"{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": [null, "echo", {"text": "by position"}, null, null]}"#,
        r#"{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "by position"}, "x": "\ud800"}}"#,
    ] {
        let (status, text) = raw(body, plain).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}: {text}");
        assert!(!text.contains("by position"), "{text}");
    }
    // An `Accept` whose quote hides the types.
    let (status, text) = raw(
        r#"{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "quoted"}}}"#,
        r#"x", application/json, text/event-stream"#,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "{text}");
    server.stop().await;
}
