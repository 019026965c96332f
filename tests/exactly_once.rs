//! Exactly-once effects: idempotency keys, replays, retries by effect, timeouts, output
//! receipts, external completion, reconciliation and expiring suspensions; a call a crash cut
//! off, in `recovery.rs`.

mod common;
#[path = "exactly_once/recovery.rs"]
mod recovery;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Api, Backend, Location, Site, TestServer, assert_error, open_store, outbox};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::dispatch::{DispatchConfig, ToolSettings, client_key_scope};
use toolgate::schemars::{self, JsonSchema};
use toolgate::store::{NewCall, Outcome, Resolution, Timestamp};
use toolgate::{
    Effect, HandlerError, RetryPolicy, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet,
};

fn examples_config(delay_ms: u64) -> toolgate::config::ExamplesConfig {
    toolgate::config::ExamplesConfig {
        send_email_delay_ms: delay_ms,
        ..Default::default()
    }
}

async fn fifty_concurrent_keyed_calls_run_the_handler_once(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples_with(&location, examples_config(300)).await;
    let input = json!({"to": "ann@example.com", "subject": "once", "body": "only once"});
    let requests: Vec<_> = (0..50)
        .map(|_| {
            let api: Api = server.api.clone();
            let input = input.clone();
            tokio::spawn(async move { api.call_keyed("send_email", "mail-1", input).await })
        })
        .collect();
    let mut completed = Vec::new();
    let mut in_progress = 0;
    for request in requests {
        let (status, _, retry_after, body) = request.await.unwrap();
        match status {
            StatusCode::OK => completed.push(body),
            StatusCode::CONFLICT => {
                assert_error(&body, "call_in_progress");
                assert_eq!(retry_after.as_deref(), Some("1"));
                in_progress += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(!completed.is_empty(), "the call that ran answered");
    assert_eq!(completed.len() + in_progress, 50);
    assert!(
        completed.windows(2).all(|w| w[0] == w[1]),
        "every result is the same call's"
    );
    assert_eq!(outbox(&location).len(), 1, "one handler run, one email");

    // After it finished, the same request gets the identical answer, marked as a replay.
    let (status, replayed, _, body) = server.api.call_keyed("send_email", "mail-1", input).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(body, completed[0]);
    assert_eq!(outbox(&location).len(), 1);
    server.stop().await;
}

async fn a_key_reused_with_another_input_is_refused(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let first = json!({"to": "a@example.com", "subject": "s", "body": "1"});
    let (status, replayed, _, body) = api.call_keyed("send_email", "k", first.clone()).await;
    assert_eq!((status, replayed), (StatusCode::OK, None));
    let call_id = body["call_id"].clone();

    let other = json!({"to": "a@example.com", "subject": "s", "body": "2"});
    let (status, _, _, body) = api.call_keyed("send_email", "k", other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        assert_error(&body, "idempotency_key_reused")["call_id"],
        call_id
    );
    assert_eq!(outbox(&location).len(), 1);

    // Keys are scoped to the tool: the same key on another tool is another call.
    let (status, replayed, _, _) = api.call_keyed("echo", "k", json!({"text": "x"})).await;
    assert_eq!((status, replayed), (StatusCode::OK, None));

    // A bad header is refused before anything runs.
    for bad in ["", " ", &"x".repeat(256)] {
        let (status, body) = api
            .post_raw_with(
                "/tools/echo/call",
                &[("idempotency-key", bad)],
                json!({"input": {"text": "x"}}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
    }
    server.stop().await;
}

async fn the_tools_own_key_wins_over_the_clients(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let refund = json!({"order_id": "o-17", "amount_cents": 500, "reason": "late"});
    let (status, replayed, _, first) = api.call_keyed("issue_refund", "a", refund.clone()).await;
    assert_eq!((status, replayed), (StatusCode::OK, None));
    // Another client key, same effect (`refund:o-17`): the refund is not issued twice.
    let (status, replayed, _, second) = api.call_keyed("issue_refund", "b", refund.clone()).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (StatusCode::OK, Some("true"))
    );
    assert_eq!(second, first);
    // Without any client key too.
    let (status, body) = api.call("issue_refund", refund).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, first);
    // The same order with another amount reuses the effect's key: refused.
    let (status, body) = api
        .call(
            "issue_refund",
            json!({"order_id": "o-17", "amount_cents": 900, "reason": "late"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&body, "idempotency_key_reused");

    let (_, record) = api
        .get(&format!("/calls/{}", first["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["idempotency_key"], "refund:o-17");
    server.stop().await;
}

/// Fails its first `failures` attempts (permanently if told), then echoes its attempt.
#[derive(Tool)]
#[tool(effect = "read")]
struct FlakyRead {
    runs: Arc<AtomicUsize>,
    failures: usize,
    permanent: bool,
}

/// Fails its first attempt, then succeeds; records the keys it ran under.
#[derive(Tool)]
#[tool(effect = "idempotent")]
struct FlakyIdempotent {
    runs: Arc<AtomicUsize>,
    keys: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

/// Always fails.
#[derive(Tool)]
#[tool(effect = "write")]
struct FlakyWrite {
    runs: Arc<AtomicUsize>,
}

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

#[toolgate::async_trait]
impl ToolHandler for FlakyRead {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, ctx: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        if self.runs.fetch_add(1, Ordering::SeqCst) < self.failures {
            let error = HandlerError::message("upstream hiccup");
            return Err(if self.permanent {
                error.permanent()
            } else {
                error
            });
        }
        Ok(ToolOutcome::output(json!({"attempt": ctx.attempt()})))
    }
}

#[toolgate::async_trait]
impl ToolHandler for FlakyIdempotent {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, ctx: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        self.keys
            .lock()
            .unwrap()
            .push(ctx.idempotency_key().map(str::to_owned));
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(HandlerError::message("timeout talking to the provider"));
        }
        Ok(ToolOutcome::output(json!("done")))
    }
    fn idempotency_key(&self, _: &Nothing) -> Option<String> {
        Some("provision:42".into())
    }
}

#[toolgate::async_trait]
impl ToolHandler for FlakyWrite {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, _: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(HandlerError::message("the bank said no"))
    }
}

fn quick_retries() -> DispatchConfig {
    DispatchConfig {
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        },
        ..DispatchConfig::default()
    }
}

async fn serve(tools: ToolSet, location: &Location, config: DispatchConfig) -> TestServer {
    TestServer::start_with(tools, location, |builder| builder.dispatch_config(config)).await
}

async fn live_failures_are_retried_by_effect(backend: Backend) {
    let location = Location::new(backend).await;
    let counters: Vec<Arc<AtomicUsize>> = (0..4).map(|_| Arc::default()).collect();
    let keys = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tools = ToolSet::new();
    tools
        .register(FlakyRead {
            runs: counters[0].clone(),
            failures: 2,
            permanent: false,
        })
        .unwrap()
        .register(FlakyIdempotent {
            runs: counters[1].clone(),
            keys: keys.clone(),
        })
        .unwrap()
        .register(FlakyWrite {
            runs: counters[2].clone(),
        })
        .unwrap();
    let server = serve(tools, &location, quick_retries()).await;
    let api = &server.api;

    // A read retries until it succeeds; `attempts` counts every run.
    let (status, body) = api.call("flaky_read", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["attempt"], 3);
    assert_eq!(counters[0].load(Ordering::SeqCst), 3);
    let (_, record) = api
        .get(&format!("/calls/{}", body["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["attempts"], 3);

    // An idempotent tool retries with the same key.
    let (status, _) = api.call("flaky_idempotent", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys, vec![Some("provision:42".to_owned()); 2]);

    // A write never retries: its effect may have happened.
    let (status, body) = api.call("flaky_write", json!({})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["status"], "failed");
    assert_error(&body, "tool_failed");
    assert_eq!(counters[2].load(Ordering::SeqCst), 1);
    server.stop().await;

    // A permanent failure is never retried, even for a read.
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools
        .register(FlakyRead {
            runs: counters[3].clone(),
            failures: 5,
            permanent: true,
        })
        .unwrap();
    let server = serve(tools, &location, quick_retries()).await;
    let (status, body) = server.api.call("flaky_read", json!({})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["error"]["message"], "upstream hiccup");
    assert_eq!(counters[3].load(Ordering::SeqCst), 1);
    server.stop().await;
}

/// Sleeps longer than its timeout. Declares an output schema.
#[derive(Tool)]
#[tool(effect = "write")]
struct SlowCharge;

/// Sleeps longer than its timeout.
#[derive(Tool)]
#[tool(effect = "read")]
struct SlowLookup;

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Charge {
    charge_id: String,
}

#[toolgate::async_trait]
impl ToolHandler for SlowCharge {
    type Input = Nothing;
    type Output = Charge;
    async fn call(&self, _: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Charge>, HandlerError> {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(ToolOutcome::output(Charge {
            charge_id: "late".into(),
        }))
    }
    fn output_schema() -> Option<Value> {
        Some(serde_json::to_value(schemars::schema_for!(Charge)).unwrap())
    }
}

#[toolgate::async_trait]
impl ToolHandler for SlowLookup {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, _: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(ToolOutcome::output(json!(null)))
    }
}

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

async fn a_tool_at_its_concurrency_limit_sheds_at_once(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(SlowLookup).unwrap();
    let mut config = DispatchConfig::default();
    config.tools.insert(
        "slow_lookup".into(),
        ToolSettings {
            max_concurrency: 1,
            timeout: Duration::from_millis(700),
            ..ToolSettings::default()
        },
    );
    let server = serve(tools, &location, config).await;
    let api = server.api.clone();
    let first = tokio::spawn(async move { api.call("slow_lookup", json!({})).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = server
        .api
        .client
        .post(format!("{}/tools/slow_lookup/call", server.api.base))
        .json(&json!({"input": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_error(&body, "overloaded");
    let (status, _) = first.await.unwrap();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let (_, calls) = server.api.get("/calls").await;
    assert_eq!(
        calls["calls"].as_array().unwrap().len(),
        1,
        "the shed request left no record"
    );
    server.stop().await;
}

async fn calls_are_listed_newest_first_with_filters(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let api = &server.api;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, body) = api.call("echo", json!({"text": format!("t{i}")})).await;
        ids.push(body["call_id"].clone());
    }
    api.call("ask_human", json!({"question": "?"})).await;
    let (status, list) = api.get("/calls?tool=echo&limit=2").await;
    assert_eq!(status, StatusCode::OK);
    let listed: Vec<&Value> = list["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["call_id"])
        .collect();
    assert_eq!(listed, [&ids[2], &ids[1]]);
    // Summaries: a list carries no inputs or outputs, whose size a caller controls.
    assert!(list["calls"][0].get("input").is_none());
    assert!(list["calls"][0].get("output").is_none());
    assert_eq!(list["calls"][0]["status"], "completed");
    let cursor = list["next_cursor"].as_str().unwrap();
    let (_, rest) = api
        .get(&format!("/calls?tool=echo&limit=2&cursor={cursor}"))
        .await;
    assert_eq!(rest["calls"][0]["call_id"], ids[0]);
    assert_eq!(rest["next_cursor"], Value::Null);
    let (_, suspended) = api.get("/calls?status=suspended").await;
    assert_eq!(suspended["calls"].as_array().unwrap().len(), 1);
    assert_eq!(suspended["calls"][0]["tool"], "ask_human");
    for bad in [
        "/calls?status=sleeping",
        "/calls?limit=0",
        "/calls?colour=red",
    ] {
        let (status, body) = api.get(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_error(&body, "bad_request");
    }
    server.stop().await;
}

async fn past_max_in_flight_the_server_sheds_at_once_but_health_answers(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(SlowLookup).unwrap();
    let config = DispatchConfig {
        defaults: ToolSettings {
            timeout: Duration::from_millis(600),
            ..ToolSettings::default()
        },
        ..DispatchConfig::default()
    };
    let server = TestServer::start_with(tools, &location, |builder| {
        builder.max_in_flight(1).dispatch_config(config)
    })
    .await;
    let api = server.api.clone();
    let busy = tokio::spawn(async move { api.call("slow_lookup", json!({})).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = server.api.get("/tools").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_error(&body, "overloaded");
    let (status, _) = server.api.get("/healthz").await;
    assert_eq!(status, StatusCode::OK, "probes are never shed");
    let (status, _) = server.api.get("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(busy.await.unwrap().0, StatusCode::GATEWAY_TIMEOUT);
    let (status, _) = server.api.get("/tools").await;
    assert_eq!(status, StatusCode::OK, "served again once the slot is free");
    server.stop().await;
}

#[test]
fn client_keys_are_scoped_without_collisions() {
    assert_ne!(
        client_key_scope(Some("a:b"), "c"),
        client_key_scope(Some("a"), "b:c")
    );
    assert_ne!(
        client_key_scope(Some("a"), "k"),
        client_key_scope(Some("b"), "k")
    );
    assert_ne!(
        client_key_scope(None, "k"),
        client_key_scope(Some(""), "xk")
    );
    assert_eq!(
        client_key_scope(Some("a"), "k"),
        client_key_scope(Some("a"), "k")
    );
    assert!(!client_key_scope(Some("agent"), "k").contains("agent"));
}

crate::on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn fifty_concurrent_keyed_calls_run_the_handler_once;
    #[tokio::test] async fn a_key_reused_with_another_input_is_refused;
    #[tokio::test] async fn the_tools_own_key_wins_over_the_clients;
    #[tokio::test] async fn live_failures_are_retried_by_effect;
    #[tokio::test] async fn a_timed_out_write_needs_reconciliation_until_an_approver_settles_it;
    #[tokio::test] async fn an_output_that_breaks_its_schema_fails_the_call;
    #[tokio::test] async fn an_external_completion_must_carry_the_receipt;
    #[tokio::test] async fn an_unanswered_suspension_expires;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_tool_at_its_concurrency_limit_sheds_at_once;
    #[tokio::test] async fn calls_are_listed_newest_first_with_filters;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn past_max_in_flight_the_server_sheds_at_once_but_health_answers;
}
