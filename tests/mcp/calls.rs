//! Calls across doors: one idempotency key over MCP and REST, whose calls a caller may await, a
//! gated call's pending text, and held awaits against the request limit.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{ADMIN, APPROVER, CALLER, OTHER_CALLER, call, rpc, rpc_modern, server, server_with};
use crate::common::{Backend, Location, outbox};

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
        crate::common::eventually("the await held", async || {
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
