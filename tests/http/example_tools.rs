//! The example tools through the API: `issue_refund`'s approval threshold (and its setting in the
//! examples config) and `send_email`'s outbox.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{Backend, Location, TestServer, assert_error, outbox};
use crate::examples;

async fn issue_refund_completes_under_the_threshold_and_suspends_over_it(backend: Backend) {
    let (server, _location) = examples(backend).await;
    let api = &server.api;
    let (status, body) = api
        .call(
            "issue_refund",
            json!({"order_id": "o-1", "amount_cents": 10_000, "reason": "late"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "at the threshold completes at once: {body}"
    );
    let output = &body["output"];
    assert_eq!(output["order_id"], "o-1");
    assert_eq!(output["amount_cents"], 10_000);
    assert_eq!(output["status"], "issued");
    assert!(output["refund_id"].as_str().unwrap().starts_with("rf_"));

    let (status, body) = api
        .call(
            "issue_refund",
            json!({"order_id": "o-2", "amount_cents": 10_001, "reason": "late"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let suspension = &body["suspension"];
    assert_eq!(
        suspension["reason"],
        "A refund of $100.01 for order o-2 (late) is above the $100.00 approval threshold."
    );
    assert!(suspension["input_schema"]["properties"]["note"].is_object());
    let token = suspension["token"].as_str().unwrap().to_owned();
    let call_id = body["call_id"].as_str().unwrap().to_owned();

    let (status, body) = api.approve(&token, json!({"note": 5})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&body, "invalid_resume_input");
    let (status, body) = api.approve(&token, json!({"note": "ok by finance"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["order_id"], "o-2");
    assert_eq!(body["output"]["amount_cents"], 10_001);
    assert_eq!(body["output"]["status"], "issued");
    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["attempts"], 2);

    let (status, body) = api
        .call(
            "issue_refund",
            json!({"order_id": "o-3", "amount_cents": 0, "reason": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        assert_error(&body, "invalid_input")["errors"][0]["path"],
        "/amount_cents"
    );
    server.stop().await;
}

async fn threshold_comes_from_the_examples_config(backend: Backend) {
    let location = Location::new(backend).await;
    let config = toolgate::config::ExamplesConfig {
        approval_threshold_cents: 100,
        ..Default::default()
    };
    let server = TestServer::examples_with(&location, config).await;
    let (status, _) = server
        .api
        .call(
            "issue_refund",
            json!({"order_id": "o", "amount_cents": 101, "reason": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    server.stop().await;
}

async fn send_email_appends_exactly_one_outbox_line(backend: Backend) {
    let (server, location) = examples(backend).await;
    assert!(outbox(&location).is_empty());
    let (status, body) = server
        .api
        .call(
            "send_email",
            json!({"to": "ana@example.com", "subject": "Hi", "body": "Hello, Ana."}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let message_id = body["output"]["message_id"].as_str().unwrap();
    let lines = outbox(&location);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["message_id"], message_id);
    assert_eq!(lines[0]["call_id"], body["call_id"]);
    assert_eq!(lines[0]["to"], "ana@example.com");
    assert_eq!(lines[0]["subject"], "Hi");
    assert_eq!(lines[0]["body"], "Hello, Ana.");

    let (status, _) = server
        .api
        .call(
            "send_email",
            json!({"to": "", "subject": "Hi", "body": "b"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(outbox(&location).len(), 1);
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn issue_refund_completes_under_the_threshold_and_suspends_over_it;
    #[tokio::test] async fn threshold_comes_from_the_examples_config;
    #[tokio::test] async fn send_email_appends_exactly_one_outbox_line;
}
