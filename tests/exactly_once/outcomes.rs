//! What a call's outcome must be: a timed-out write needs reconciliation until an approver
//! settles it, an output that breaks its schema fails the call, an external completion must
//! carry the receipt.

use super::*;

async fn a_timed_out_write_needs_reconciliation_until_an_approver_settles_it(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools
        .register(SlowCharge)
        .unwrap()
        .register(SlowLookup)
        .unwrap();
    let config = DispatchConfig {
        defaults: ToolSettings {
            timeout: Duration::from_millis(100),
            ..ToolSettings::default()
        },
        ..DispatchConfig::default()
    };
    let server = serve(tools, &location, config).await;
    let api = &server.api;

    let (status, _, _, body) = api.call_keyed("slow_charge", "charge-1", json!({})).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(body["status"], "needs_reconciliation");
    assert_error(&body, "tool_timeout");
    let call_id = body["call_id"].as_str().unwrap().to_owned();

    // The same request does not run it again: a person must say what happened.
    let (status, _, _, body) = api.call_keyed("slow_charge", "charge-1", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let details = assert_error(&body, "needs_reconciliation");
    assert_eq!(details["call_id"], call_id.as_str());
    assert_eq!(details["status"], "needs_reconciliation");

    let resolve = format!("/calls/{call_id}/resolve");
    let (status, body) = api.post(&resolve, json!({"output": {"charge": 1}})).await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "the receipt must match: {body}"
    );
    assert_error(&body, "output_schema_violation");
    let (status, body) = api.post(&resolve, json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A settlement as not done must say why (the reasons rule of every door).
    for error in ["", "   ", &"x".repeat(4097)] {
        let (status, body) = api.post(&resolve, json!({ "error": error })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error:?}: {body}");
        assert_error(&body, "bad_request");
    }
    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "needs_reconciliation", "nothing settled");
    let (status, body) = api
        .post(&resolve, json!({"output": {"charge_id": "ch_9"}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"], json!({"charge_id": "ch_9"}));
    let kinds: Vec<&str> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["created", "needs_reconciliation", "reconciled"]);

    let (status, body) = api.post(&resolve, json!({"error": "never mind"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_error(&body, "not_reconcilable");
    let (status, replayed, _, body) = api.call_keyed("slow_charge", "charge-1", json!({})).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (StatusCode::OK, Some("true"))
    );
    assert_eq!(body["output"], json!({"charge_id": "ch_9"}));

    // A read that times out simply fails.
    let (status, body) = api.call("slow_lookup", json!({})).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(body["status"], "failed");
    assert_error(&body, "tool_timeout");
    let (status, body) = api
        .post("/calls/call_nope/resolve", json!({"error": "x"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&body, "unknown_call");
    server.stop().await;
}

/// Returns an output that breaks its own declared schema.
#[derive(Tool)]
#[tool(effect = "read")]
struct Liar;

#[toolgate::async_trait]
impl ToolHandler for Liar {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, _: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        Ok(ToolOutcome::output(json!({"charge_id": 7})))
    }
    fn output_schema() -> Option<Value> {
        Some(serde_json::to_value(schemars::schema_for!(Charge)).unwrap())
    }
}

async fn an_output_that_breaks_its_schema_fails_the_call(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(Liar).unwrap();
    let server = serve(tools, &location, DispatchConfig::default()).await;
    let (status, body) = server.api.call("liar", json!({})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["status"], "failed");
    let details = assert_error(&body, "output_schema_violation");
    assert_eq!(details["errors"][0]["path"], "/charge_id");
    let (_, record) = server
        .api
        .get(&format!("/calls/{}", body["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["status"], "failed");
    assert_eq!(
        record["output"],
        Value::Null,
        "a bad output is not recorded as one"
    );
    assert_eq!(
        record["error"]["details"]["errors"][0]["path"],
        "/charge_id"
    );
    server.stop().await;
}

async fn an_external_completion_must_carry_the_receipt(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let (_, body) = api
        .call(
            "issue_refund",
            json!({"order_id": "o-5", "amount_cents": 99_000, "reason": "x"}),
        )
        .await;
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let complete = format!("/approvals/{token}/complete");

    let (status, body) = api.post(&complete, json!({"output": {"done": true}})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        !assert_error(&body, "output_schema_violation")["errors"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let (status, _) = api.get(&format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::OK, "still pending");

    let receipt = json!({"refund_id": "re_bank_771", "order_id": "o-5", "amount_cents": 99_000, "status": "issued"});
    let (status, body) = api.post(&complete, json!({"output": receipt})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"], receipt);
    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["attempts"], 1, "the tool did not run");
    assert_eq!(
        record["events"].as_array().unwrap().last().unwrap()["kind"],
        "completed_externally"
    );
    let (status, body) = api.post(&complete, json!({"output": receipt})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_error(&body, "already_resolved");

    // A tool without an output schema cannot be completed: there is no receipt to demand.
    let (_, body) = api.call("ask_human", json!({"question": "?"})).await;
    let token = body["suspension"]["token"].as_str().unwrap();
    let (status, body) = api
        .post(
            &format!("/approvals/{token}/complete"),
            json!({"output": {"answer": "y"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_error(&body, "completion_not_allowed");
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn a_timed_out_write_needs_reconciliation_until_an_approver_settles_it;
    #[tokio::test] async fn an_output_that_breaks_its_schema_fails_the_call;
    #[tokio::test] async fn an_external_completion_must_carry_the_receipt;
}
