//! The HTTP API, route by route, against a real server on 127.0.0.1:0.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Api, Backend, Location, TestServer, assert_error, eventually, outbox, temp_dir};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{
    DynTool, Effect, HandlerError, Tool, ToolCtx, ToolError, ToolHandler, ToolOutcome, ToolSet,
    TypedTool,
};

/// Counts how often its handler runs; fails when asked to.
#[derive(Tool)]
#[tool(effect = "write")]
struct Counted {
    runs: Arc<AtomicUsize>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CountedInput {
    n: u32,
    #[serde(default)]
    fail: bool,
}

#[derive(Serialize)]
struct CountedOutput {
    n: u32,
}

#[toolgate::async_trait]
impl ToolHandler for Counted {
    type Input = CountedInput;
    type Output = CountedOutput;

    async fn call(
        &self,
        _ctx: &ToolCtx,
        input: CountedInput,
    ) -> Result<ToolOutcome<CountedOutput>, HandlerError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if input.fail {
            return Err(HandlerError::message("the counter refused"));
        }
        Ok(ToolOutcome::output(CountedOutput { n: input.n }))
    }
}

/// Suspends `times` times in a row, then returns what it was last told and its attempt.
#[derive(Tool)]
#[tool(effect = "idempotent")]
struct Twice;

#[derive(Deserialize, JsonSchema)]
struct TwiceInput {}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Go {
    ok: bool,
}

#[toolgate::async_trait]
impl ToolHandler for Twice {
    type Input = TwiceInput;
    type Output = Value;

    async fn call(
        &self,
        ctx: &ToolCtx,
        _input: TwiceInput,
    ) -> Result<ToolOutcome<Value>, HandlerError> {
        if ctx.attempt() < 3 {
            return Ok(ToolOutcome::suspend_for::<Go>(format!(
                "round {}",
                ctx.attempt()
            )));
        }
        Ok(ToolOutcome::output(json!({
            "attempt": ctx.attempt(),
            "resume": ctx.resume().cloned(),
            "call_id": ctx.call_id(),
        })))
    }
}

/// Panics when told to.
#[derive(Tool)]
#[tool(effect = "write")]
struct Panicky;

#[derive(Deserialize, JsonSchema)]
struct PanickyInput {
    boom: bool,
}

#[toolgate::async_trait]
impl ToolHandler for Panicky {
    type Input = PanickyInput;
    type Output = Value;

    async fn call(
        &self,
        _ctx: &ToolCtx,
        input: PanickyInput,
    ) -> Result<ToolOutcome<Value>, HandlerError> {
        if input.boom {
            panic!("kaboom");
        }
        Ok(ToolOutcome::output(json!("calm")))
    }
}

/// The example tools, on a fresh location on `backend`.
async fn examples(backend: Backend) -> (TestServer, Location) {
    let location = Location::new(backend).await;
    (TestServer::examples(&location).await, location)
}

#[tokio::test]
async fn get_tools_serves_every_descriptor_in_name_order() {
    let (server, _location) = examples(Backend::Sqlite).await;
    let (status, body) = server.api.get("/tools").await;
    assert_eq!(status, StatusCode::OK);
    let tools = body["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ask_human", "echo", "issue_refund", "send_email"]);
    for tool in tools {
        let keys: Vec<&String> = tool.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "description",
                "effect",
                "input_schema",
                "name",
                "output_schema"
            ]
        );
    }
    let echo = &tools[1];
    assert_eq!(echo["effect"], "read");
    assert_eq!(echo["output_schema"], Value::Null);
    assert_eq!(
        echo["description"],
        "Returns the text it is given, unchanged."
    );
    // The schema served is the one schemars generates for the tool's input type.
    let typed = TypedTool::new(toolgate::examples::Echo);
    assert_eq!(&echo["input_schema"], typed.input_schema());
    assert_eq!(echo["input_schema"]["required"], json!(["text"]));

    let refund = &tools[2];
    assert_eq!(refund["effect"], "write");
    let required = refund["output_schema"]["required"].as_array().unwrap();
    for field in ["refund_id", "order_id", "amount_cents", "status"] {
        assert!(required.contains(&json!(field)), "{field} is required");
    }
    assert_eq!(tools[3]["effect"], "write");
    server.stop().await;
}

#[tokio::test]
async fn get_one_tool_or_unknown_tool() {
    let (server, _location) = examples(Backend::Sqlite).await;
    let (status, body) = server.api.get("/tools/issue_refund").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["name"], "issue_refund");
    assert_eq!(
        body["input_schema"]["properties"]["amount_cents"]["minimum"],
        1
    );

    let (status, body) = server.api.get("/tools/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(assert_error(&body, "unknown_tool")["tool"], "nope");
    server.stop().await;
}

async fn echo_completes_and_its_record_is_readable(backend: Backend) {
    let (server, _location) = examples(backend).await;
    let (status, body) = server.api.call("echo", json!({"text": "hello"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "completed");
    assert_eq!(body["tool"], "echo");
    assert_eq!(body["output"], json!({"text": "hello"}));
    let call_id = body["call_id"].as_str().unwrap();

    let (status, record) = server.api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["call_id"], call_id);
    assert_eq!(record["tool"], "echo");
    assert_eq!(record["status"], "completed");
    assert_eq!(record["input"], json!({"text": "hello"}));
    assert_eq!(record["output"], json!({"text": "hello"}));
    assert_eq!(record["error"], Value::Null);
    assert_eq!(record["suspension"], Value::Null);
    assert_eq!(record["attempts"], 1);
    let created = record["created_at"].as_str().unwrap();
    assert!(
        humantime::parse_rfc3339(created).is_ok(),
        "RFC 3339 timestamp: {created}"
    );
    assert!(record["updated_at"].as_str().unwrap() >= created);

    let (status, body) = server.api.get("/calls/call_doesnotexist").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        assert_error(&body, "unknown_call")["call_id"],
        "call_doesnotexist"
    );
    server.stop().await;
}

async fn input_that_does_not_fit_never_runs_the_handler_and_records_nothing(backend: Backend) {
    let location = Location::new(backend).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolSet::new();
    tools.register(Counted { runs: runs.clone() }).unwrap();
    let server = TestServer::start(tools, &location).await;

    let cases = [
        (json!({"n": "three"}), "/n"),
        (json!({}), ""),
        (json!({"n": 1, "extra": true}), ""),
        (json!({"n": -1}), "/n"),
        (json!(null), ""),
        (json!([1, 2]), ""),
    ];
    for (input, path) in cases {
        let (status, body) = server.api.call("counted", input.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{input}: {body}");
        let details = assert_error(&body, "invalid_input");
        let errors = details["errors"].as_array().unwrap();
        assert!(!errors.is_empty());
        assert!(
            errors
                .iter()
                .any(|e| e["path"] == path && e["message"].is_string()),
            "{input}: expected an error at {path:?} in {errors:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler never ran");
    assert!(
        location.stored_calls().await.is_empty(),
        "nothing was recorded"
    );

    let (status, body) = server.api.call("counted", json!({"n": 7})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"n": 7}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(location.stored_calls().await.len(), 1);
    server.stop().await;
}

async fn a_failing_handler_is_a_recorded_500_tool_failed(backend: Backend) {
    let location = Location::new(backend).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolSet::new();
    tools.register(Counted { runs }).unwrap();
    let server = TestServer::start(tools, &location).await;

    let (status, body) = server
        .api
        .call("counted", json!({"n": 1, "fail": true}))
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["status"], "failed");
    let details = assert_error(&body, "tool_failed");
    assert_eq!(body["error"]["message"], "the counter refused");
    assert_eq!(details["status"], "failed");
    let call_id = body["call_id"].as_str().unwrap();
    assert_eq!(details["call_id"], call_id);

    let (_, record) = server.api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "failed");
    assert_eq!(record["error"]["code"], "tool_failed");
    assert_eq!(record["error"]["message"], "the counter refused");
    assert_eq!(record["output"], Value::Null);
    server.stop().await;
}

async fn malformed_requests_get_the_envelope_and_never_a_5xx(backend: Backend) {
    let (server, location) = examples(backend).await;
    let api = &server.api;
    let json = Some("application/json");

    let (status, body) = api.post_raw("/tools/echo/call", json, "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");

    let (status, body) = api
        .post_raw("/tools/echo/call", json, r#"{"text": "no envelope"}"#)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");

    let (status, body) = api
        .post_raw(
            "/tools/echo/call",
            json,
            r#"{"input": {"text": "a"}, "stream": true}"#,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");

    let (status, body) = api.post_raw("/tools/echo/call", json, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");

    let (status, body) = api
        .post_raw("/tools/echo/call", None, r#"{"input": {"text": "a"}}"#)
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_error(&body, "unsupported_media_type");

    let (status, body) = api
        .post_raw(
            "/tools/echo/call",
            Some("text/plain"),
            r#"{"input": {"text": "a"}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_error(&body, "unsupported_media_type");

    let huge = format!(
        r#"{{"input": {{"text": "{}"}}}}"#,
        "x".repeat(1024 * 1024 + 1)
    );
    let (status, body) = api.post_raw("/tools/echo/call", json, huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_error(&body, "payload_too_large");

    let deep = format!(
        r#"{{"input": {}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let (status, body) = api.post_raw("/tools/echo/call", json, deep).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");

    // Valid JSON nested deeper than the configured bound (64 by default).
    let nested = format!(
        r#"{{"input": {{"text": "a", "x": {}{}}}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    let (status, body) = api.post_raw("/tools/echo/call", json, nested).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nested deeper than 64")
    );

    let (status, body) = api.get("/no/such/route").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&body, "not_found");

    let response = api
        .client
        .delete(format!("{}/tools", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = response.json().await.unwrap();
    assert_error(&body, "method_not_allowed");

    assert!(
        location.stored_calls().await.is_empty(),
        "no rejected request was recorded"
    );
    server.stop().await;
}

async fn ask_human_suspends_lists_rejects_bad_answers_and_completes_once(backend: Backend) {
    let (server, _location) = examples(backend).await;
    let api = &server.api;
    let (status, body) = api.call("ask_human", json!({"question": "Ship it?"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body["status"], "suspended");
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let suspension = &body["suspension"];
    assert_eq!(suspension["reason"], "Ship it?");
    assert_eq!(suspension["input_schema"]["required"], json!(["answer"]));
    let token = suspension["token"].as_str().unwrap().to_owned();
    assert_ne!(token, call_id);
    assert!(
        token.len() >= 32
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    );

    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "suspended");
    assert_eq!(record["suspension"]["token"], token.as_str());
    assert_eq!(record["suspension"]["reason"], "Ship it?");

    let (status, list) = api.get("/approvals").await;
    assert_eq!(status, StatusCode::OK);
    let approvals = list["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0]["token"], token.as_str());
    assert_eq!(approvals[0]["call_id"], call_id.as_str());
    assert_eq!(approvals[0]["tool"], "ask_human");
    assert_eq!(approvals[0]["reason"], "Ship it?");
    assert!(approvals[0]["created_at"].is_string());
    assert_eq!(approvals[0]["input_schema"], suspension["input_schema"]);
    assert_eq!(list["next_cursor"], Value::Null);

    let (status, one) = api.get(&format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["input"], json!({"question": "Ship it?"}));
    assert_eq!(one["call_id"], call_id.as_str());

    // A resume input its schema rejects: 422, and the suspension stays pending.
    let (status, body) = api.approve(&token, json!({"answer": 42})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let details = assert_error(&body, "invalid_resume_input");
    assert_eq!(details["errors"][0]["path"], "/answer");
    let (status, body) = api.approve(&token, json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (_, list) = api.get("/approvals").await;
    assert_eq!(list["approvals"].as_array().unwrap().len(), 1);
    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "suspended");

    let (status, body) = api.approve(&token, json!({"answer": "yes"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["call_id"], call_id.as_str());
    assert_eq!(body["output"], json!({"answer": "yes"}));

    // Single use: a second approval, or a rejection, finds it resolved.
    let (status, body) = api.approve(&token, json!({"answer": "no"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let details = assert_error(&body, "already_resolved");
    assert_eq!(details["status"], "completed");
    assert_eq!(details["output"], json!({"answer": "yes"}));
    let (status, body) = api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "late"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_error(&body, "already_resolved");
    let (status, body) = api.get(&format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_error(&body, "already_resolved");

    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["output"], json!({"answer": "yes"}));
    assert_eq!(record["suspension"], Value::Null);
    assert_eq!(record["attempts"], 2);
    let (_, list) = api.get("/approvals").await;
    assert_eq!(list["approvals"], json!([]));
    server.stop().await;
}

async fn reject_finishes_the_call_without_running_the_tool(backend: Backend) {
    let (server, location) = examples(backend).await;
    let api = &server.api;
    let (status, body) = api
        .call(
            "issue_refund",
            json!({"order_id": "o-9", "amount_cents": 50_000, "reason": "broken"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let call_id = body["call_id"].as_str().unwrap().to_owned();

    let (status, body) = api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "Too much."}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["call_id"], call_id.as_str());
    assert_eq!(body["status"], "rejected");
    assert_eq!(body["error"]["code"], "rejected");
    assert_eq!(body["error"]["message"], "Too much.");
    assert_eq!(body["output"], Value::Null);
    assert_eq!(body["attempts"], 1, "the tool did not run again");

    let (status, body) = api.approve(&token, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        assert_error(&body, "already_resolved")["status"],
        "rejected"
    );
    let (_, record) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(record["status"], "rejected");

    // Bad rejection bodies.
    let (status, body) = api
        .post(&format!("/approvals/{token}/reject"), json!({}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");
    let long = "x".repeat(5000);
    let (status, _) = api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": long}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Tokens that never existed.
    for path in [
        "/approvals/sus_nope",
        "/approvals/sus_nope/approve",
        "/approvals/sus_nope/reject",
    ] {
        let (status, body) = if path.ends_with("approve") {
            api.approve("sus_nope", json!({})).await
        } else if path.ends_with("reject") {
            api.post(path, json!({"reason": "r"})).await
        } else {
            api.get(path).await
        };
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_error(&body, "unknown_token");
    }
    assert!(outbox(&location).is_empty());
    server.stop().await;
}

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
    assert!(suspension["reason"].as_str().unwrap().contains("10001"));
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

async fn approvals_page_oldest_first_with_a_cursor(backend: Backend) {
    let (server, _location) = examples(backend).await;
    let api = &server.api;
    let mut tokens = Vec::new();
    for i in 0..5 {
        let (status, body) = api
            .call("ask_human", json!({"question": format!("q{i}")}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        tokens.push(body["suspension"]["token"].as_str().unwrap().to_owned());
    }
    let mut seen = Vec::new();
    let mut path = "/approvals?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = api.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        let approvals = page["approvals"].as_array().unwrap();
        assert!(approvals.len() <= 2);
        seen.extend(
            approvals
                .iter()
                .map(|a| a["token"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/approvals?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, tokens, "every pending suspension once, oldest first");
    assert_eq!(pages, 3);

    let (_, all) = api.get("/approvals?limit=500").await;
    assert_eq!(all["approvals"].as_array().unwrap().len(), 5);
    for bad in [
        "/approvals?limit=0",
        "/approvals?limit=501",
        "/approvals?limit=ten",
        "/approvals?cursor=zzz",
        "/approvals?cursor=-4",
        "/approvals?order=desc",
    ] {
        let (status, body) = api.get(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_error(&body, "bad_request");
    }
    server.stop().await;
}

async fn concurrent_approvals_of_one_token_have_exactly_one_winner(backend: Backend) {
    let location = Location::new(backend).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolSet::new();
    tools.register(Gatekeeper { runs: runs.clone() }).unwrap();
    let server = TestServer::start(tools, &location).await;
    let (_, body) = server.api.call("gatekeeper", json!({})).await;
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let attempts: Vec<_> = (0..16)
        .map(|_| {
            let api: Api = server.api.clone();
            let token = token.clone();
            tokio::spawn(async move { api.approve(&token, json!({"ok": true})).await })
        })
        .collect();
    let mut winners = 0;
    for attempt in attempts {
        let (status, body) = attempt.await.unwrap();
        match status {
            StatusCode::OK => winners += 1,
            StatusCode::CONFLICT => {
                assert_error(&body, "already_resolved");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(winners, 1, "exactly one approval wins");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "one first run, one re-run after the approval"
    );
    let (_, record) = server
        .api
        .get(&format!("/calls/{}", body["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["output"], "through");
    assert_eq!(record["attempts"], 2);
    server.stop().await;
}

async fn an_approved_call_can_suspend_again_with_a_new_token(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(Twice).unwrap();
    let server = TestServer::start(tools, &location).await;
    let api = &server.api;
    let (status, first) = api.call("twice", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(first["suspension"]["reason"], "round 1");
    let token1 = first["suspension"]["token"].as_str().unwrap();

    let (status, second) = api.approve(token1, json!({"ok": true})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{second}");
    assert_eq!(second["call_id"], first["call_id"]);
    assert_eq!(second["suspension"]["reason"], "round 2");
    let token2 = second["suspension"]["token"].as_str().unwrap();
    assert_ne!(token1, token2);

    let (_, list) = api.get("/approvals").await;
    let listed: Vec<&Value> = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["token"])
        .collect();
    assert_eq!(listed, [&json!(token2)]);

    let (status, done) = api.approve(token2, json!({"ok": false})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["output"]["attempt"], 3);
    assert_eq!(done["output"]["resume"], json!({"ok": false}));
    assert_eq!(done["output"]["call_id"], first["call_id"]);
    server.stop().await;
}

/// A tool known only at run time, implementing `DynTool` directly.
struct Proxy;

#[toolgate::async_trait]
impl DynTool for Proxy {
    fn name(&self) -> &str {
        "remote-lookup"
    }
    fn description(&self) -> &str {
        "Looks a key up in a remote table."
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn input_schema(&self) -> &Value {
        static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| {
            json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})
        })
    }
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    fn idempotency_key(&self, _input: &Value) -> Option<String> {
        None
    }
    async fn call_json(
        &self,
        _ctx: &ToolCtx,
        input: Value,
    ) -> Result<ToolOutcome<Value>, toolgate::ToolError> {
        Ok(ToolOutcome::output(
            json!({"value": format!("v:{}", input["key"].as_str().unwrap_or(""))}),
        ))
    }
}

async fn a_dyn_tool_is_served_and_validated_like_a_typed_one(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register_dyn(Box::new(Proxy)).unwrap();
    let server = TestServer::start(tools, &location).await;
    let (status, body) = server.api.call("remote-lookup", json!({"key": "k"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["output"], json!({"value": "v:k"}));
    let (status, body) = server.api.call("remote-lookup", json!({"key": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&body, "invalid_input");
    let (_, tools) = server.api.get("/tools").await;
    assert_eq!(tools["tools"][0]["name"], "remote-lookup");
    server.stop().await;
}

/// Answers the input it was handed, exactly as the handler got it.
struct Mirror {
    schema: Value,
}

impl Mirror {
    /// Takes a required `needed`, optional `limit` (with a default) and `inner` (an object
    /// behind a `$ref`), and a nullable `note`.
    fn new() -> Self {
        let schema = json!({
            "type": "object",
            "properties": {
                "needed": {"type": "string"},
                "limit": {"type": "integer", "default": 10},
                "note": {"type": ["string", "null"]},
                "inner": {"$ref": "#/$defs/Inner"},
            },
            "required": ["needed"],
            "additionalProperties": false,
            "$defs": {"Inner": {
                "type": "object",
                "properties": {"depth": {"type": "integer"}},
                "additionalProperties": false,
            }},
        });
        Mirror { schema }
    }
}

#[toolgate::async_trait]
impl DynTool for Mirror {
    fn name(&self) -> &str {
        "mirror"
    }
    fn description(&self) -> &str {
        "Answers its input."
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn input_schema(&self) -> &Value {
        &self.schema
    }
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    fn idempotency_key(&self, _input: &Value) -> Option<String> {
        None
    }
    async fn call_json(&self, _: &ToolCtx, input: Value) -> Result<ToolOutcome<Value>, ToolError> {
        Ok(ToolOutcome::output(input))
    }
}

async fn a_null_for_an_optional_field_is_read_as_absent(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register_dyn(Box::new(Mirror::new())).unwrap();
    let server = TestServer::start(tools, &location).await;
    // As a model in OpenAI's strict mode sends it: `null` for what it leaves out.
    let (status, body) = server
        .api
        .call(
            "mirror",
            json!({"needed": "x", "limit": null, "note": null, "inner": {"depth": null}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // `limit` and `inner.depth` are optional and not nullable: absent. `note` is nullable: its
    // null is a value, and stays.
    assert_eq!(
        body["output"],
        json!({"needed": "x", "note": null, "inner": {}})
    );
    // What is recorded is the input the handler got.
    let (status, record) = server
        .api
        .get(&format!("/calls/{}", body["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["input"], body["output"]);
    // A required field's null is refused, as before.
    let (status, body) = server.api.call("mirror", json!({"needed": null})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let details = assert_error(&body, "invalid_input");
    assert_eq!(details["errors"][0]["path"], "/needed");
    // An optional object's null is its absence too.
    let (status, body) = server
        .api
        .call("mirror", json!({"needed": "y", "inner": null}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"needed": "y"}));
    server.stop().await;
}

async fn health_and_readiness(backend: Backend) {
    let (server, _location) = examples(backend).await;
    let (status, body) = server.api.get("/healthz").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = server.api.get("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    match backend {
        Backend::Sqlite => assert_eq!(
            body,
            json!({"status": "ready", "store": "sqlite"}),
            "no replica on the embedded store"
        ),
        Backend::Postgres => {
            let replica = body["replica"].as_str().unwrap_or_default();
            assert!(!replica.is_empty(), "a replica names itself: {body}");
            assert_eq!(
                body,
                json!({"status": "ready", "store": "postgres", "replica": replica})
            );
        }
    }
    server.stop().await;
}

async fn a_panicking_handler_fails_its_call_and_the_server_goes_on(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(Panicky).unwrap();
    let server = TestServer::start(tools, &location).await;
    let (status, body) = server.api.call("panicky", json!({"boom": true})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["status"], "failed");
    assert_error(&body, "tool_panicked");
    let (_, record) = server
        .api
        .get(&format!("/calls/{}", body["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["status"], "failed");
    assert_eq!(record["error"]["code"], "tool_panicked");

    let (status, body) = server.api.call("panicky", json!({"boom": false})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["output"], "calm");
    server.stop().await;
}

async fn a_call_whose_client_hangs_up_still_runs_to_its_recorded_outcome(backend: Backend) {
    let location = Location::new(backend).await;
    let config = toolgate::config::ExamplesConfig {
        send_email_delay_ms: 300,
        ..Default::default()
    };
    let server = TestServer::examples_with(&location, config).await;
    common::tls();
    let impatient = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(50))
        .build()
        .unwrap();
    let sent = impatient
        .post(format!("{}/tools/send_email/call", server.api.base))
        .json(&json!({"input": {"to": "c@example.com", "subject": "s", "body": "b"}}))
        .send()
        .await;
    assert!(sent.is_err(), "the client gave up before the answer");

    // The tool goes on without the client: its effect happens once and its outcome is recorded.
    let status = eventually("the send_email call is finished", async || {
        let calls = location.stored_calls().await;
        let call = calls.into_iter().find(|call| call.tool == "send_email")?;
        Some(call.status).filter(|status| status != "running")
    })
    .await;
    assert_eq!(status, "completed");
    assert_eq!(outbox(&location).len(), 1);
    server.stop().await;
}

/// A store whose every operation fails, with an error that must never reach a client.
struct BrokenStore;

const SECRET: &str = "/var/secret/toolgate.db: disk on fire";

fn broken<T>() -> Result<T, toolgate::store::StoreError> {
    Err(toolgate::store::StoreError::Backend(SECRET.into()))
}

#[toolgate::async_trait]
impl toolgate::store::Store for BrokenStore {
    async fn counts(&self) -> Result<toolgate::store::StoreCounts, toolgate::store::StoreError> {
        broken()
    }

    async fn ping(&self) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    fn backend(&self) -> &'static str {
        "broken"
    }
}

#[toolgate::async_trait]
impl toolgate::store::CallStore for BrokenStore {
    async fn insert_call(
        &self,
        _call: toolgate::store::NewCall,
        _outcome: Option<toolgate::store::Outcome>,
    ) -> Result<toolgate::store::Inserted, toolgate::store::StoreError> {
        broken()
    }

    async fn finish_call(
        &self,
        _call_id: &str,
        _run: Option<u32>,
        _attempts: u32,
        _outcome: &toolgate::store::Outcome,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn rerun_interrupted(
        &self,
        _call_id: &str,
    ) -> Result<Option<toolgate::store::Rerun>, toolgate::store::StoreError> {
        broken()
    }

    async fn call(
        &self,
        _call_id: &str,
    ) -> Result<Option<toolgate::store::CallRecord>, toolgate::store::StoreError> {
        broken()
    }

    async fn list_calls(
        &self,
        _filter: toolgate::store::CallFilter,
        _after: Option<i64>,
        _limit: u32,
    ) -> Result<toolgate::store::CallPage, toolgate::store::StoreError> {
        broken()
    }

    async fn pending_approvals_of(
        &self,
        _tool: Option<&str>,
        _after: Option<i64>,
        _limit: u32,
    ) -> Result<toolgate::store::ApprovalPage, toolgate::store::StoreError> {
        broken()
    }

    async fn approval(
        &self,
        _token: &str,
    ) -> Result<Option<toolgate::store::ApprovalState>, toolgate::store::StoreError> {
        broken()
    }

    async fn resolve(
        &self,
        _token: &str,
        _resolution: toolgate::store::Resolution,
        _actor: Option<&str>,
    ) -> Result<toolgate::store::Resolved, toolgate::store::StoreError> {
        broken()
    }

    async fn reconcile(
        &self,
        _call_id: &str,
        _settlement: toolgate::store::Settlement,
        _actor: Option<&str>,
    ) -> Result<toolgate::store::Reconciled, toolgate::store::StoreError> {
        broken()
    }
}

#[toolgate::async_trait]
impl toolgate::store::FeedStore for BrokenStore {
    async fn feed(
        &self,
        _after: Option<&toolgate::store::FeedCursor>,
        _limit: u32,
    ) -> Result<toolgate::store::FeedPage, toolgate::store::StoreError> {
        broken()
    }

    async fn feed_head(&self) -> Result<toolgate::store::FeedCursor, toolgate::store::StoreError> {
        broken()
    }

    async fn prune_feed(
        &self,
        _before: toolgate::store::Timestamp,
    ) -> Result<u64, toolgate::store::StoreError> {
        broken()
    }

    fn feed_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        tokio::sync::watch::channel(0).1
    }
}

#[toolgate::async_trait]
impl toolgate::store::OutboxStore for BrokenStore {
    async fn webhook_cursor(
        &self,
    ) -> Result<Option<toolgate::store::FeedCursor>, toolgate::store::StoreError> {
        broken()
    }

    async fn enqueue_deliveries(
        &self,
        _from: Option<&toolgate::store::FeedCursor>,
        _to: &toolgate::store::FeedCursor,
        _deliveries: Vec<toolgate::store::NewDelivery>,
    ) -> Result<bool, toolgate::store::StoreError> {
        broken()
    }

    async fn claim_deliveries(
        &self,
        _limit: u32,
        _lease: std::time::Duration,
    ) -> Result<Vec<toolgate::store::Delivery>, toolgate::store::StoreError> {
        broken()
    }

    async fn settle_delivery(
        &self,
        _id: i64,
        _result: toolgate::store::DeliveryResult,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn list_deliveries(
        &self,
        _status: Option<toolgate::store::DeliveryStatus>,
        _after: Option<i64>,
        _limit: u32,
    ) -> Result<toolgate::store::DeliveryPage, toolgate::store::StoreError> {
        broken()
    }

    async fn retry_delivery(
        &self,
        _id: i64,
    ) -> Result<Option<toolgate::store::Delivery>, toolgate::store::StoreError> {
        broken()
    }

    async fn disabled_webhooks(&self) -> Result<Vec<String>, toolgate::store::StoreError> {
        broken()
    }
}

#[toolgate::async_trait]
impl toolgate::store::SessionStore for BrokenStore {
    async fn create_session(
        &self,
        _session: &toolgate::store::InboxSession,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn session(
        &self,
        _id_sha256: &str,
        _now: toolgate::store::Timestamp,
    ) -> Result<Option<toolgate::store::InboxSession>, toolgate::store::StoreError> {
        broken()
    }

    async fn delete_session(&self, _id_sha256: &str) -> Result<bool, toolgate::store::StoreError> {
        broken()
    }

    async fn prune_sessions(
        &self,
        _now: toolgate::store::Timestamp,
    ) -> Result<u64, toolgate::store::StoreError> {
        broken()
    }
}

#[tokio::test]
async fn a_failing_store_is_answered_without_leaking_its_internals() {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), temp_dir().path()).unwrap();
    let router = toolgate::ServerBuilder::new(tools, BrokenStore).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = Api::new(listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let answers = [
        api.call("echo", json!({"text": "a"})).await,
        api.call(
            "send_email",
            json!({"to": "a", "subject": "s", "body": "b"}),
        )
        .await,
        api.get("/calls/call_x").await,
        api.get("/approvals").await,
        api.get("/approvals/sus_x").await,
        api.approve("sus_x", json!({})).await,
        api.post("/approvals/sus_x/reject", json!({"reason": "r"}))
            .await,
    ];
    for (status, body) in answers {
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert_error(&body, "internal");
        let text = body.to_string();
        assert!(
            !text.contains("disk on fire") && !text.contains("/var/secret"),
            "{text}"
        );
    }
    // Over MCP: JSON-RPC -32603, with nothing internal in it either.
    for (tool, arguments) in [
        ("echo", json!({"text": "a"})),
        (
            "send_email",
            json!({"to": "a", "subject": "s", "body": "b"}),
        ),
        (
            "toolgate_await_call",
            json!({"call_id": "call_x", "wait_seconds": 0}),
        ),
    ] {
        let (status, body) = api
            .post_raw_with(
                "/mcp",
                &[
                    ("accept", "application/json, text/event-stream"),
                    ("mcp-protocol-version", "2025-11-25"),
                ],
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["error"]["code"], -32603, "{tool}: {body}");
        let text = body.to_string();
        assert!(
            !text.contains("disk on fire") && !text.contains("/var/secret"),
            "{text}"
        );
    }
    let (status, body) = api.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_error(&body, "not_ready");
    assert!(!body.to_string().contains("disk on fire"));
    let (status, _) = api.get("/healthz").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "liveness does not depend on the store"
    );
    server.abort();
}

/// Counts its runs; suspends on the first.
#[derive(Tool)]
#[tool(effect = "write")]
struct Gatekeeper {
    runs: Arc<AtomicUsize>,
}

#[toolgate::async_trait]
impl ToolHandler for Gatekeeper {
    type Input = TwiceInput;
    type Output = Value;

    async fn call(
        &self,
        ctx: &ToolCtx,
        _input: TwiceInput,
    ) -> Result<ToolOutcome<Value>, HandlerError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        match ctx.resume() {
            None => Ok(ToolOutcome::suspend_for::<Go>("let it through?")),
            Some(_) => Ok(ToolOutcome::output(json!("through"))),
        }
    }
}

async fn a_rejected_call_never_runs_its_tool_again(backend: Backend) {
    let location = Location::new(backend).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tools = ToolSet::new();
    tools.register(Gatekeeper { runs: runs.clone() }).unwrap();
    let server = TestServer::start(tools, &location).await;
    let (_, body) = server.api.call("gatekeeper", json!({})).await;
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let (status, _) = server
        .api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "no"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = server.api.approve(&token, json!({"ok": true})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "neither the rejection nor a late approval ran it"
    );
    server.stop().await;
}

async fn read_records_written_behind_are_committed_without_anyone_asking(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    for i in 0..50 {
        let (status, _) = server
            .api
            .call("echo", json!({"text": format!("quiet{i}")}))
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    // Nobody reads the calls back (that would flush the queue): the writer commits them on its
    // own, within its window. Another connection sees only what is committed.
    eventually("all 50 records written behind are committed", async || {
        let calls = location.stored_calls().await;
        let quiet = calls.iter().filter(|call| call.input.contains("quiet"));
        (quiet.count() == 50).then_some(())
    })
    .await;
    server.stop().await;
}

async fn read_records_written_behind_are_found_at_once_and_survive_a_clean_stop(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let api: Api = server.api.clone();
            tokio::spawn(async move {
                let (status, body) = api.call("echo", json!({"text": format!("n{i}")})).await;
                assert_eq!(status, StatusCode::OK);
                let call_id = body["call_id"].as_str().unwrap().to_owned();
                // Straight after the answer: read-your-writes.
                let (status, record) = api.get(&format!("/calls/{call_id}")).await;
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "{call_id} not found right after its answer"
                );
                assert_eq!(record["output"]["text"], format!("n{i}"));
                call_id
            })
        })
        .collect();
    let mut ids = Vec::new();
    for call in calls {
        ids.push(call.await.unwrap());
    }
    server.stop().await;
    let calls = location.stored_calls().await;
    assert_eq!(
        calls.iter().filter(|call| call.tool == "echo").count(),
        200,
        "a clean stop commits every record written behind"
    );
}

crate::on_each_backend! {
    #[tokio::test] async fn echo_completes_and_its_record_is_readable;
    #[tokio::test] async fn input_that_does_not_fit_never_runs_the_handler_and_records_nothing;
    #[tokio::test] async fn a_null_for_an_optional_field_is_read_as_absent;
    #[tokio::test] async fn a_failing_handler_is_a_recorded_500_tool_failed;
    #[tokio::test] async fn malformed_requests_get_the_envelope_and_never_a_5xx;
    #[tokio::test] async fn ask_human_suspends_lists_rejects_bad_answers_and_completes_once;
    #[tokio::test] async fn reject_finishes_the_call_without_running_the_tool;
    #[tokio::test] async fn issue_refund_completes_under_the_threshold_and_suspends_over_it;
    #[tokio::test] async fn threshold_comes_from_the_examples_config;
    #[tokio::test] async fn send_email_appends_exactly_one_outbox_line;
    #[tokio::test] async fn approvals_page_oldest_first_with_a_cursor;
    #[tokio::test] async fn concurrent_approvals_of_one_token_have_exactly_one_winner;
    #[tokio::test] async fn an_approved_call_can_suspend_again_with_a_new_token;
    #[tokio::test] async fn a_dyn_tool_is_served_and_validated_like_a_typed_one;
    #[tokio::test] async fn health_and_readiness;
    #[tokio::test] async fn a_panicking_handler_fails_its_call_and_the_server_goes_on;
    #[tokio::test] async fn a_call_whose_client_hangs_up_still_runs_to_its_recorded_outcome;
    #[tokio::test] async fn a_rejected_call_never_runs_its_tool_again;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn read_records_written_behind_are_committed_without_anyone_asking;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn read_records_written_behind_are_found_at_once_and_survive_a_clean_stop;
}
