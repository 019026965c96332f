//! `/approvals`: suspending, listing and paging, approving (single use, one winner among
//! concurrent approvals, suspending again with a new token) and rejecting without a re-run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet};

use crate::common::{Api, Backend, Location, TestServer, assert_error, outbox};
use crate::examples;

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
        .post(&format!("/approvals/{token}/reject"), json!({"reason": 5}))
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

/// The reasons rule, as on every door: a rejection's reason is optional, an empty or blank one
/// is recorded as none, and one past 4,096 characters is refused with nothing recorded.
async fn a_rejection_without_a_reason_records_none(backend: Backend) {
    let (server, _location) = examples(backend).await;
    let api = &server.api;
    for body in [json!({}), json!({"reason": ""}), json!({"reason": "  \n "})] {
        let (status, suspended) = api.call("ask_human", json!({"question": "Ship?"})).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let token = suspended["suspension"]["token"].as_str().unwrap();
        let (status, call) = api
            .post(&format!("/approvals/{token}/reject"), body.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}: {call}");
        assert_eq!(call["status"], "rejected");
        assert_eq!(call["error"]["code"], "rejected");
        assert_eq!(
            call["error"]["message"], "Rejected without a reason.",
            "{body}"
        );
        let rejected = call["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|event| event["kind"] == "rejected")
            .unwrap();
        assert_eq!(
            rejected.get("details"),
            None,
            "no reason recorded: {rejected}"
        );
    }

    let (_, suspended) = api.call("ask_human", json!({"question": "Ship?"})).await;
    let token = suspended["suspension"]["token"].as_str().unwrap();
    let call_id = suspended["call_id"].as_str().unwrap();
    let (status, body) = api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "x".repeat(4097)}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, "bad_request");
    let (_, call) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(call["status"], "suspended", "nothing recorded");
    let (status, call) = api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "x".repeat(4096)}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{call}");
    assert_eq!(call["error"]["message"], "x".repeat(4096));
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

crate::on_each_backend! {
    #[tokio::test] async fn ask_human_suspends_lists_rejects_bad_answers_and_completes_once;
    #[tokio::test] async fn reject_finishes_the_call_without_running_the_tool;
    #[tokio::test] async fn a_rejection_without_a_reason_records_none;
    #[tokio::test] async fn approvals_page_oldest_first_with_a_cursor;
    #[tokio::test] async fn concurrent_approvals_of_one_token_have_exactly_one_winner;
    #[tokio::test] async fn an_approved_call_can_suspend_again_with_a_new_token;
    #[tokio::test] async fn a_rejected_call_never_runs_its_tool_again;
}
