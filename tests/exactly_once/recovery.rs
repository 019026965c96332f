//! A call that a crash cut off: what the next process does with it. A read runs again when
//! its request comes back, an approval already given is not asked again, and an approver
//! settles what cannot be known (a write, a call without a key), which releases its key.

use super::*;

async fn an_interrupted_read_runs_again_when_its_request_comes_back(backend: Backend) {
    let location = Location::new(backend).await;
    {
        // A previous process recorded the intent of a keyed echo, then died (its store is
        // dropped, never closed).
        let store = open_store(&location).await;
        store
            .insert_call(
                NewCall {
                    call_id: "call_before_crash".into(),
                    tool: "echo".into(),
                    effect: Effect::Read,
                    caller: None,
                    input: json!({"text": "again"}),
                    idempotency_key: Some(client_key_scope(None, "echo-1")),
                    attempts: 1,
                    created_at: Timestamp::now(),
                    trace: None,
                },
                None,
            )
            .await
            .unwrap();
    }
    let server = TestServer::examples(&location).await;
    let record = backend.recovered(&server.api, "call_before_crash").await;
    assert_eq!(record["status"], "interrupted");
    let (status, replayed, _, body) = server
        .api
        .call_keyed("echo", "echo-1", json!({"text": "again"}))
        .await;
    assert_eq!((status, replayed), (StatusCode::OK, None), "{body}");
    assert_eq!(body["call_id"], "call_before_crash");
    assert_eq!(body["output"], json!({"text": "again"}));
    let (_, record) = server.api.get("/calls/call_before_crash").await;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["attempts"], 2);
    server.stop().await;
}

async fn an_approval_interrupted_by_a_crash_resumes_without_asking_again(backend: Backend) {
    let location = Location::new(backend).await;
    let key = client_key_scope(None, "ask-1");
    {
        // A previous process suspended ask_human, an approver answered, and the process died
        // while the tool was running again with that answer.
        let store = open_store(&location).await;
        let call = NewCall {
            call_id: "call_asked".into(),
            tool: "ask_human".into(),
            effect: Effect::Read,
            caller: None,
            input: json!({"question": "ship?"}),
            idempotency_key: Some(key),
            attempts: 1,
            created_at: Timestamp::now(),
            trace: None,
        };
        let suspended = Outcome::Suspended {
            token: "sus_asked".into(),
            reason: "ship?".into(),
            input_schema: json!({"type": "object"}),
            expires_at: None,
        };
        store.insert_call(call, Some(suspended)).await.unwrap();
        let approve = Resolution::Approve {
            resume_input: json!({"answer": "yes, ship"}),
            quorum: 1,
        };
        store
            .resolve("sus_asked", approve, Some("ops"))
            .await
            .unwrap();
    }
    let server = TestServer::examples(&location).await;
    let record = backend.recovered(&server.api, "call_asked").await;
    assert_eq!(record["status"], "interrupted");
    let (status, _, _, body) = server
        .api
        .call_keyed("ask_human", "ask-1", json!({"question": "ship?"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"answer": "yes, ship"}));
    let (_, list) = server.api.get("/approvals").await;
    assert_eq!(list["approvals"], json!([]), "nobody is asked twice");
    server.stop().await;
}

async fn an_interrupted_call_without_a_key_can_be_settled_by_an_approver(backend: Backend) {
    let location = Location::new(backend).await;
    {
        // A previous process recorded the intent, then died.
        let store = open_store(&location).await;
        let call = NewCall {
            call_id: "call_unkeyed".into(),
            tool: "ask_human".into(),
            effect: Effect::Read,
            caller: None,
            input: json!({"question": "?"}),
            idempotency_key: None,
            attempts: 1,
            created_at: Timestamp::now(),
            trace: None,
        };
        store.insert_call(call, None).await.unwrap();
    }
    let server = TestServer::examples(&location).await;
    let record = backend.recovered(&server.api, "call_unkeyed").await;
    assert_eq!(record["status"], "interrupted");
    let (status, body) = server
        .api
        .post(
            "/calls/call_unkeyed/resolve",
            json!({"error": "asked again elsewhere"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "failed");
    assert_eq!(body["error"]["code"], "reconciled_as_failed");
    server.stop().await;
}

async fn a_write_settled_as_failed_releases_its_key(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(SlowCharge).unwrap();
    let config = DispatchConfig {
        defaults: ToolSettings {
            timeout: Duration::from_millis(50),
            ..ToolSettings::default()
        },
        ..DispatchConfig::default()
    };
    let server = serve(tools, &location, config).await;
    let (status, _, _, body) = server.api.call_keyed("slow_charge", "c-1", json!({})).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let first = body["call_id"].as_str().unwrap().to_owned();
    let (status, _) = server
        .api
        .post(
            &format!("/calls/{first}/resolve"),
            json!({"error": "the bank has no charge"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // The effect did not happen: the same request is a new call, not a replay of the failure.
    let (status, replayed, _, body) = server.api.call_keyed("slow_charge", "c-1", json!({})).await;
    assert_eq!((status, replayed), (StatusCode::GATEWAY_TIMEOUT, None));
    assert_ne!(body["call_id"], first.as_str());
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn an_interrupted_read_runs_again_when_its_request_comes_back;
    #[tokio::test] async fn an_approval_interrupted_by_a_crash_resumes_without_asking_again;
    #[tokio::test] async fn an_interrupted_call_without_a_key_can_be_settled_by_an_approver;
    #[tokio::test] async fn a_write_settled_as_failed_releases_its_key;
}
