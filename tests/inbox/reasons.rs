//! A reason's rules are the lifecycle's, so every door keeps them alike: REST and the inbox
//! record the same typed reason the same way (trimmed), and refuse the same over-long one.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common;
use crate::{APPROVER, api, call_record, signed_in, suspend};

/// What the `rejected` event of `call` recorded as its reason.
fn rejected_reason(call: &Value) -> Value {
    call["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["kind"] == "rejected")
        .map(|event| event["details"]["reason"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn rest_and_the_inbox_record_a_reason_alike_and_refuse_the_same_long_one() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;
    let typed = "  Not on a Friday.\n ";
    // Past the bound once trimmed; the white space around a reason does not count.
    let too_long = format!(" {} ", "x".repeat(4097));

    // Over REST.
    let by_rest = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let token = call_record(&server, &by_rest).await["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let reject = format!("/approvals/{token}/reject");
    let (status, body) = api(
        &server,
        "POST",
        &reject,
        APPROVER,
        Some(json!({ "reason": too_long })),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    common::assert_error(&body, "bad_request");
    assert_eq!(call_record(&server, &by_rest).await["status"], "suspended");
    let (status, body) = api(
        &server,
        "POST",
        &reject,
        APPROVER,
        Some(json!({ "reason": typed })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Over the inbox.
    let by_inbox = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let path = format!("/inbox/calls/{by_inbox}/reject");
    let csrf = person.get(&format!("/inbox/calls/{by_inbox}")).await.csrf();
    let refused = person
        .post(&path, &[("reason", &too_long), ("csrf", &csrf)])
        .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        refused
            .body
            .contains("The reason is longer than 4096 characters."),
        "worded by the inbox, at its field"
    );
    assert_eq!(call_record(&server, &by_inbox).await["status"], "suspended");
    let rejected = person
        .post(&path, &[("reason", typed), ("csrf", &csrf)])
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER, "{}", rejected.body);

    // The same reason, recorded alike.
    for call_id in [&by_rest, &by_inbox] {
        let call = call_record(&server, call_id).await;
        assert_eq!(call["status"], "rejected");
        assert_eq!(rejected_reason(&call), "Not on a Friday.", "{call}");
    }
}
