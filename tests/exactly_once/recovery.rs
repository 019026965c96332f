//! Calls that were cut short: an unanswered suspension expires, an interrupted read runs again,
//! an approval interrupted by a crash resumes without asking again, and an interrupted call
//! without a key can be settled by an approver.

use super::*;

async fn an_unanswered_suspension_expires(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let mut config = DispatchConfig::default();
    config.tools.insert(
        "ask_human".into(),
        ToolSettings {
            approval_ttl: Some(Duration::from_millis(200)),
            ..ToolSettings::default()
        },
    );
    let server = serve(tools, &location, config).await;
    let api = &server.api;
    let (_, body) = api.call("ask_human", json!({"question": "soon?"})).await;
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let (_, list) = api.get("/approvals").await;
    assert_eq!(list["approvals"].as_array().unwrap().len(), 1);
    assert!(list["approvals"][0]["expires_at"].is_string());

    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, list) = api.get("/approvals").await;
    assert_eq!(list["approvals"], json!([]));
    let (status, body) = api.get(&format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::GONE);
    assert_error(&body, "suspension_expired");
    let (status, body) = api.approve(&token, json!({"answer": "late"})).await;
    assert_eq!(status, StatusCode::GONE);
    assert_eq!(
        assert_error(&body, "suspension_expired")["status"],
        "expired"
    );
    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "expired");
    assert_eq!(
        record["events"].as_array().unwrap().last().unwrap()["kind"],
        "expired"
    );
    // Once the expiry is written down, it still reads as expired, never as resolved.
    let (status, body) = api.approve(&token, json!({"answer": "later"})).await;
    assert_eq!(status, StatusCode::GONE);
    assert_error(&body, "suspension_expired");
    let (status, _) = api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "late"}),
        )
        .await;
    assert_eq!(status, StatusCode::GONE);
    let (status, _) = api.get(&format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::GONE);
    let (_, listed) = api.get("/calls?status=expired").await;
    assert_eq!(listed["calls"][0]["call_id"], call_id.as_str());
    server.stop().await;
}

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
            edit: None,
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

crate::on_each_backend! {
    #[tokio::test] async fn an_unanswered_suspension_expires;
    #[tokio::test] async fn an_interrupted_read_runs_again_when_its_request_comes_back;
    #[tokio::test] async fn an_approval_interrupted_by_a_crash_resumes_without_asking_again;
    #[tokio::test] async fn an_interrupted_call_without_a_key_can_be_settled_by_an_approver;
}
