//! Who reaches `/mcp`: a valid key before MCP answers at all, the Host and Origin check against
//! DNS rebinding, and the door turned off.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{APPROVER, CALLER, rpc, server, server_with};
use crate::common::{Api, Backend, Location, assert_error};

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
