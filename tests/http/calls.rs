//! `POST /tools/{name}/call` and `GET /calls/{id}`: a call's answer and its record, input that
//! does not fit its schema, a failing handler, malformed requests, and records written behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{
    DynTool, Effect, HandlerError, Tool, ToolCtx, ToolError, ToolHandler, ToolOutcome, ToolSet,
};

use crate::common::{Api, Backend, Location, TestServer, assert_error, eventually};
use crate::examples;

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
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn read_records_written_behind_are_committed_without_anyone_asking;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn read_records_written_behind_are_found_at_once_and_survive_a_clean_stop;
}
