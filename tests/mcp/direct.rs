//! The direct way of `tools/call` answers exactly as the SDK's transport does, in both eras.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{CALLER, server};
use crate::common::{Api, Backend, Location};

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
