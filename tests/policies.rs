//! Approval policies (issue 23), on the real binary and both backends: a CEL condition over the
//! call's input decides which calls wait for a person; one that cannot be evaluated suspends
//! (a policy fails closed); one that does not compile, or names a field the tool's input cannot
//! have, stops the start naming its key.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::receiver::Receiver;
use common::{Backend, Binary, Location, Site, temp_dir};
use reqwest::StatusCode;
use serde_json::json;

/// `issue_refund` never asks by itself here: the policy alone decides.
const REFUNDS: &str = "[examples]\napproval_threshold_cents = 1000000000\n";

fn config_file(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, body).unwrap();
    path
}

fn serve(at: &(impl Site + ?Sized), config: &str) -> Binary {
    let path = config_file(at.data_dir(), config);
    Binary::start_with(at, &["--config", path.to_str().unwrap()], &[])
}

/// The binary with `config`, expected to refuse to start; what it wrote to stderr.
fn refused_start(config: &str) -> String {
    let data = temp_dir();
    let path = config_file(data.path(), config);
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "the server started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Each of `tables`, as `echo`'s `[tools.echo.approval]`, stops the start naming `key`.
fn each_approval_table_stops_the_start_naming(key: &str, tables: &[&str]) {
    for table in tables {
        let log = refused_start(&format!("[tools.echo.approval]\n{table}\n"));
        assert!(log.contains(key), "{table}: {log}");
    }
}

fn refund(amount_cents: u64, order_id: &str) -> serde_json::Value {
    json!({"order_id": order_id, "amount_cents": amount_cents, "reason": "damaged"})
}

async fn a_condition_over_the_input_asks_for_the_large_refund_only(backend: Backend) {
    let location = Location::new(backend).await;
    let server = serve(
        &location,
        &format!(
            "{REFUNDS}[tools.issue_refund.approval]\n\
             when = \"input.amount_cents > 10000\"\n\
             reason = \"'Refund of ' + string(input.amount_cents) + ' cents on ' + input.order_id\"\n"
        ),
    );
    let api = &server.api;

    // Small: it runs at once. At the threshold: still small.
    for (amount, order) in [(500, "A-1"), (10_000, "A-2")] {
        let (status, body) = api.call("issue_refund", refund(amount, order)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output"]["amount_cents"], amount);
    }

    // Large: it waits, with the policy's reason, and nothing ran.
    let (status, body) = api.call("issue_refund", refund(25_000, "B-7")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "suspended");
    let suspension = &body["suspension"];
    assert_eq!(suspension["reason"], "Refund of 25000 cents on B-7");
    let token = suspension["token"].as_str().unwrap().to_owned();
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let (status, listed) = api.get("/approvals").await;
    assert_eq!(status, StatusCode::OK);
    let pending = listed["approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{listed}");
    assert_eq!(pending[0]["call_id"], call_id);
    let stored = location.stored_calls().await;
    let large = stored.iter().find(|call| call.call_id == call_id).unwrap();
    assert_eq!(large.status, "suspended");

    // Approving runs it, once.
    let (status, body) = api.approve(&token, json!({"note": "ok"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"]["amount_cents"], 25_000);
    assert_eq!(body["output"]["order_id"], "B-7");
}

async fn a_condition_that_cannot_be_evaluated_asks(backend: Backend) {
    let location = Location::new(backend).await;
    // Divides by zero for 500 cents; false for 1000.
    let server = serve(
        &location,
        &format!(
            "{REFUNDS}[tools.issue_refund.approval]\n\
             when = \"100 / (input.amount_cents - 500) > 1\"\n"
        ),
    );
    let api = &server.api;
    let (status, body) = api.call("issue_refund", refund(1_000, "C-1")).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = api.call("issue_refund", refund(500, "C-2")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let reason = body["suspension"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("Calls of issue_refund need approval when `100 / (input.amount_cents - 500) > 1`, and the condition could not be evaluated for this call:"),
        "{reason}"
    );
    assert!(reason.to_lowercase().contains("zero"), "{reason}");
    // Nothing ran: the call is recorded suspended, and is approved like any other.
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let (status, body) = api.approve(&token, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["order_id"], "C-2");
}

#[tokio::test]
async fn a_condition_may_read_the_tool_and_the_principal() {
    let location = Location::new(Backend::Sqlite).await;
    let server = serve(
        &location,
        "[tools.send_email.approval]\n\
         when = \"tool.effect == 'write' && principal.role == 'admin' && \
                 !input.to.endsWith('@example.com')\"\n",
    );
    let api = &server.api;
    let email = |to: &str| json!({"to": to, "subject": "hi", "body": "hello"});
    let (status, body) = api.call("send_email", email("ops@example.com")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = api.call("send_email", email("someone@elsewhere.org")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        body["suspension"]["reason"],
        "Calls of send_email need approval."
    );
}

#[test]
fn an_expression_that_does_not_compile_stops_the_start_naming_its_key() {
    let log = refused_start(&format!(
        "{REFUNDS}[tools.issue_refund.approval]\nwhen = \"input.amount_cents >\"\n"
    ));
    assert!(log.contains("tools.issue_refund.approval.when"), "{log}");

    let log = refused_start(&format!(
        "{REFUNDS}[tools.issue_refund.approval]\nreason = \"amount + 1\"\n"
    ));
    assert!(log.contains("tools.issue_refund.approval.reason"), "{log}");
    assert!(log.contains("`amount`"), "{log}");

    // The short form and the table together say two things.
    let log = refused_start(
        "[tools.echo]\nrequire_approval = true\n[tools.echo.approval]\nwhen = \"true\"\n",
    );
    assert!(log.contains("tools.echo.require_approval"), "{log}");
}

#[test]
fn a_field_the_input_cannot_have_stops_the_start_naming_it() {
    let log = refused_start(&format!(
        "{REFUNDS}[tools.issue_refund.approval]\nwhen = \"input.amount > 10000\"\n"
    ));
    assert!(log.contains("tools.issue_refund.approval.when"), "{log}");
    assert!(log.contains("`input.amount`"), "{log}");
}

/// One stateless JSON-RPC `tools/call` over `/mcp`; its `result`.
async fn mcp_call(
    api: &common::Api,
    tool: &str,
    arguments: serde_json::Value,
) -> serde_json::Value {
    let params = json!({"name": tool, "arguments": arguments});
    let (status, _, body) = common::mcp_request_as(api, None, "tools/call", params).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["result"].clone()
}

const OPTIONS: &str = "reject_options = [\n\
    { name = \"too_large\", description = \"Above what an agent may refund: ask for 10000 cents at most.\" },\n\
    { name = \"duplicate\", description = \"The order was refunded already.\" },\n]\n";

async fn a_rejection_option_reaches_the_caller_on_every_door(backend: Backend) {
    let location = Location::new(backend).await;
    let (receiver, webhook) = Receiver::start("").await;
    let server = serve(
        &location,
        &format!(
            "{REFUNDS}{webhook}[tools.issue_refund.approval]\nwhen = \"input.amount_cents > 10000\"\n{OPTIONS}"
        ),
    );
    let api = &server.api;

    // An MCP client's large refund waits; the approver sees the options.
    let pending = mcp_call(api, "issue_refund", refund(90_000, "D-1")).await;
    assert_eq!(
        pending["structuredContent"]["status"], "pending_approval",
        "{pending}"
    );
    let call_id = pending["structuredContent"]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, listed) = api.get("/approvals").await;
    let approval = &listed["approvals"][0];
    assert_eq!(approval["call_id"], call_id.as_str());
    assert_eq!(approval["reject_options"][0]["name"], "too_large");
    assert_eq!(approval["reject_options"][1]["name"], "duplicate");
    let token = approval["token"].as_str().unwrap().to_owned();
    let (status, one) = api.get(&format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["reject_options"], approval["reject_options"]);

    // An option the policy does not offer is refused, and the call still waits.
    let reject = format!("/approvals/{token}/reject");
    let (status, body) = api.post(&reject, json!({"option": "too_small"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    common::assert_error(&body, "bad_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`too_large`"),
        "{body}"
    );

    let (status, body) = api
        .post(
            &reject,
            json!({"option": "too_large", "reason": "Split it."}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "rejected");
    let description = "Above what an agent may refund: ask for 10000 cents at most.";
    let error = json!({
        "code": "rejected",
        "message": format!("Rejected: too_large ({description}). Split it."),
        "details": {"option": "too_large", "description": description},
    });
    assert_eq!(body["error"], error);

    // The REST reader of the call, the webhook, and the MCP client all learn which.
    let (_, call) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(call["error"], error);
    let message = receiver.of_type("call.rejected").await;
    assert_eq!(message["data"]["call"]["call_id"], call_id.as_str());
    assert_eq!(message["data"]["error"], error);
    let awaited = mcp_call(
        api,
        "toolgate_await_call",
        json!({"call_id": call_id, "wait_seconds": 0}),
    )
    .await;
    assert_eq!(awaited["isError"], true, "{awaited}");
    let text = awaited["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("too_large") && text.contains(description),
        "{text}"
    );
}

#[test]
fn bad_rejection_options_stop_the_start_naming_the_key() {
    each_approval_table_stops_the_start_naming(
        "tools.echo.approval.reject_options",
        &[
            "reject_options = []",
            "reject_options = [{ name = \"a b\", description = \"x\" }]",
            "reject_options = [{ name = \"a\", description = \"x\" }, { name = \"a\", description = \"y\" }]",
            "reject_options = [{ name = \"a\", description = \" \" }]",
        ],
    );
}

// Several approvers, and the four-eyes rule (§2).

const ROOT: &str = "tg_root_0123456789abcdef";
const ALICE: &str = "tg_alice_0123456789abcdef";
const BOB: &str = "tg_bob_0123456789abcdef";
const CAROL: &str = "tg_carol_0123456789abcdef";

/// `[[auth.keys]]`: `root` (admin), and three approvers.
fn keys() -> String {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    let mut keys = format!(
        "[[auth.keys]]\nname = \"root\"\nrole = \"admin\"\ntoken_sha256 = \"{}\"\n",
        hash(ROOT)
    );
    for (name, token) in [("alice", ALICE), ("bob", BOB), ("carol", CAROL)] {
        keys += &format!(
            "[[auth.keys]]\nname = \"{name}\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n",
            hash(token)
        );
    }
    keys
}

async fn as_key(
    api: &common::Api,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (StatusCode, serde_json::Value) {
    let (status, _, body) = common::send(api, method, path, body, Some(token)).await;
    (status, body)
}

async fn get_as(api: &common::Api, token: &str, path: &str) -> (StatusCode, serde_json::Value) {
    as_key(api, token, reqwest::Method::GET, path, None).await
}

async fn approve_as(
    api: &common::Api,
    token: &str,
    suspension: &str,
    note: &str,
) -> (StatusCode, serde_json::Value) {
    let path = format!("/approvals/{suspension}/approve");
    let body = json!({"input": {"note": note}});
    as_key(api, token, reqwest::Method::POST, &path, Some(body)).await
}

fn email(to: &str) -> serde_json::Value {
    json!({"to": to, "subject": "quarterly numbers", "body": "attached"})
}

/// A `send_email` made by `root`, suspended by its policy: its call id and token.
async fn suspended_email(api: &common::Api, to: &str) -> (String, String) {
    let body = json!({"input": email(to)});
    let (status, body) = as_key(
        api,
        ROOT,
        reqwest::Method::POST,
        "/tools/send_email/call",
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    (
        body["call_id"].as_str().unwrap().to_owned(),
        body["suspension"]["token"].as_str().unwrap().to_owned(),
    )
}

async fn two_distinct_approvers_release_a_call(backend: Backend) {
    let location = Location::new(backend).await;
    let (receiver, webhook) = Receiver::start("").await;
    let server = serve(
        &location,
        &format!(
            "{}{webhook}[tools.send_email.approval]\napprovals = 2\n",
            keys()
        ),
    );
    let api = &server.api;
    let (call_id, token) = suspended_email(api, "board@example.com").await;

    // The caller may not approve its own call, though it is an admin.
    let (status, body) = approve_as(api, ROOT, &token, "mine").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    common::assert_error(&body, "forbidden");

    // The first approval is recorded; the call still waits, under the same token.
    let (status, body) = approve_as(api, ALICE, &token, "looks right").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "suspended");
    assert_eq!(body["call_id"], call_id.as_str());
    assert_eq!(body["suspension"]["token"], token.as_str());
    assert_eq!(body["approvals_required"], 2);
    assert_eq!(body["approvals"][0]["approver"], "alice");
    assert!(common::outbox(&location).is_empty(), "nothing was sent yet");

    // Everyone who may decide sees the progress.
    let (status, shown) = get_as(api, BOB, &format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["approvals_required"], 2);
    assert_eq!(shown["approvals"].as_array().unwrap().len(), 1);
    assert_eq!(shown["approvals"][0]["approver"], "alice");

    // The same approver twice is refused, and told the approvals so far.
    let (status, body) = approve_as(api, ALICE, &token, "again").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let details = common::assert_error(&body, "already_approved");
    assert_eq!(details["approvals_required"], 2);
    assert_eq!(details["approvals"][0]["approver"], "alice");
    assert_eq!(details["approvals"].as_array().unwrap().len(), 1);

    // One person's external completion would stand for both: refused.
    let (status, body) = as_key(
        api,
        BOB,
        reqwest::Method::POST,
        &format!("/approvals/{token}/complete"),
        Some(json!({"output": {"message_id": "m-1"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    common::assert_error(&body, "completion_not_allowed");

    // The second distinct approver releases it: sent once, with the last approval's answer.
    let (status, body) = approve_as(api, BOB, &token, "ship it").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(common::outbox(&location).len(), 1);
    let (_, call) = get_as(api, ROOT, &format!("/calls/{call_id}")).await;
    let events: Vec<_> = call["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| (event["kind"].clone(), event["actor"].clone()))
        .collect();
    assert_eq!(
        events,
        [
            (json!("created"), json!("root")),
            (json!("suspended"), json!(null)),
            (json!("approval_recorded"), json!("alice")),
            (json!("approved"), json!("bob")),
            (json!("redispatched"), json!(null)),
            (json!("completed"), json!(null)),
        ],
        "{call}"
    );

    // A webhook hears of the approval short of the quorum.
    let message = receiver.of_type("call.approval_recorded").await;
    assert_eq!(message["data"]["call"]["call_id"], call_id.as_str());
    assert_eq!(message["data"]["call"]["status"], "suspended");

    // One rejection ends a call however many approved it.
    let (call_id, token) = suspended_email(api, "all@example.com").await;
    let (status, _) = approve_as(api, CAROL, &token, "fine by me").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, body) = as_key(
        api,
        BOB,
        reqwest::Method::POST,
        &format!("/approvals/{token}/reject"),
        Some(json!({"reason": "not to everyone"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "rejected");
    assert_eq!(body["call_id"], call_id.as_str());
    let (status, body) = approve_as(api, ALICE, &token, "late").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    common::assert_error(&body, "already_resolved");
    assert_eq!(
        common::outbox(&location).len(),
        1,
        "the rejected call never ran"
    );
}

/// Two replicas on one database, a call with one approval of two: the second approvals, sent at
/// once to both replicas by two approvers, run the tool once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_second_approvals_on_two_replicas_run_the_tool_once() {
    let location = Location::new(Backend::Postgres).await;
    let config = format!("{}[tools.send_email.approval]\napprovals = 2\n", keys());
    let a = serve(&location, &config);
    let b = Binary::start_with(
        &location,
        &[
            "--config",
            location.data_dir().join("toolgate.toml").to_str().unwrap(),
        ],
        &[],
    );
    for round in 0..5 {
        let (call_id, token) = suspended_email(&a.api, &format!("r{round}@example.com")).await;
        let (status, body) = approve_as(&b.api, ALICE, &token, "first").await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let (on_a, on_b) = tokio::join!(
            approve_as(&a.api, BOB, &token, "from a"),
            approve_as(&b.api, CAROL, &token, "from b"),
        );
        let mut statuses = [on_a.0, on_b.0];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::CONFLICT],
            "{} / {}",
            on_a.1,
            on_b.1
        );
        let loser = if on_a.0 == StatusCode::CONFLICT {
            &on_a.1
        } else {
            &on_b.1
        };
        common::assert_error(loser, "already_resolved");
        let (_, call) = get_as(&a.api, ROOT, &format!("/calls/{call_id}")).await;
        assert_eq!(call["status"], "completed", "{call}");
        assert_eq!(call["attempts"], 2, "{call}");
    }
    assert_eq!(common::outbox(&location).len(), 5, "each call sent once");
}

#[test]
fn a_quorum_out_of_range_stops_the_start_naming_the_key() {
    each_approval_table_stops_the_start_naming(
        "tools.echo.approval.approvals",
        &["approvals = 0", "approvals = 17"],
    );
}

// Escalation (§4).

const DESK: &str = "tg_desk_0123456789abcdef";
const MANAGER: &str = "tg_manager_0123456789abcdef";

/// An approval undecided for `escalate_after_s` is escalated once, whether or not the server
/// restarted meanwhile: a `call.escalated` webhook, `escalated_at` on the approval, and the
/// principals `escalate_to` names may decide it from then on (and not before); others still
/// may not.
async fn an_escalation_fires_once_across_a_restart_and_widens_who_decides(backend: Backend) {
    let location = Location::new(backend).await;
    let (receiver, webhook) = Receiver::start("").await;
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    let config = format!(
        "{}[[auth.keys]]\nname = \"desk\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n\
         decides = [\"ask_*\"]\n\
         [[auth.keys]]\nname = \"manager\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n\
         decides = [\"escalations\"]\n\
         {webhook}[tools.send_email.approval]\nescalate_after_s = 2\nescalate_to = [\"escalations\"]\n",
        keys(),
        hash(DESK),
        hash(MANAGER),
    );
    let server = serve(&location, &config);
    let (call_id, token) = suspended_email(&server.api, "cfo@example.com").await;
    let approval = format!("/approvals/{token}");
    // Not escalated yet: the manager's grant does not reach it.
    let (status, body) = get_as(&server.api, MANAGER, &approval).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = approve_as(&server.api, MANAGER, &token, "early").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    common::assert_error(&body, "unknown_token");

    // The server dies before the time is up, and comes back after it.
    server.kill();
    tokio::time::sleep(std::time::Duration::from_millis(2_200)).await;
    let server = serve(&location, &config);
    let api = &server.api;
    let escalated = common::eventually("the approval is escalated", async || {
        let (_, body) = get_as(api, ROOT, &approval).await;
        body.get("escalated_at").is_some().then_some(body)
    })
    .await;
    assert!(escalated["escalated_at"].as_str().is_some(), "{escalated}");
    let message = receiver.of_type("call.escalated").await;
    assert_eq!(message["data"]["call"]["call_id"], call_id.as_str());
    assert_eq!(message["data"]["call"]["status"], "suspended");

    // Now the manager sees it, listed and alone; the desk still does not.
    let (status, listed) = get_as(api, MANAGER, "/approvals").await;
    assert_eq!(status, StatusCode::OK);
    let tokens: Vec<_> = listed["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|approval| approval["token"].clone())
        .collect();
    assert_eq!(tokens, [json!(token)], "{listed}");
    let (status, _) = get_as(api, DESK, &approval).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = get_as(api, MANAGER, &format!("/calls/{call_id}")).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the manager reads the call it may decide"
    );

    // Several sweeps later, still one escalation.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let (status, body) = approve_as(api, MANAGER, &token, "approved on escalation").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(common::outbox(&location).len(), 1);
    // Decided, it stays the manager's to read; still nobody else's.
    let (status, read) = get_as(api, MANAGER, &format!("/calls/{call_id}")).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["status"], "completed");
    let (status, body) = get_as(api, MANAGER, &approval).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    common::assert_error(&body, "already_resolved");
    let (status, _) = get_as(api, DESK, &format!("/calls/{call_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, call) = get_as(api, ROOT, &format!("/calls/{call_id}")).await;
    let kinds: Vec<_> = call["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "created",
            "suspended",
            "escalated",
            "approved",
            "redispatched",
            "completed"
        ],
        "{call}"
    );
    let escalations = receiver
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|message| message["type"] == "call.escalated")
        .count();
    assert_eq!(escalations, 1);
}

#[test]
fn bad_escalation_keys_stop_the_start_naming_the_key() {
    each_approval_table_stops_the_start_naming(
        "tools.echo.approval.escalate_after_s",
        &["escalate_after_s = 0"],
    );
    each_approval_table_stops_the_start_naming(
        "tools.echo.approval.escalate_to",
        &[
            "escalate_to = [\"managers\"]",
            "escalate_after_s = 60\nescalate_to = []",
            "escalate_after_s = 60\nescalate_to = [\" \"]",
        ],
    );
}

crate::on_each_backend! {
    #[tokio::test] async fn a_condition_over_the_input_asks_for_the_large_refund_only;
    #[tokio::test] async fn a_condition_that_cannot_be_evaluated_asks;
    #[tokio::test] async fn a_rejection_option_reaches_the_caller_on_every_door;
    #[tokio::test] async fn two_distinct_approvers_release_a_call;
    #[tokio::test] async fn an_escalation_fires_once_across_a_restart_and_widens_who_decides;
}
