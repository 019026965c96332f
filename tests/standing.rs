//! Standing approvals (issue 35 §4) over REST, on both backends: an approval with
//! `"standing": {"for_s", "calls"}` releases the later calls of that tool by that caller at once
//! (each recorded with the standing approval's id and approver), and nobody else's; its call
//! limit is exact under concurrent calls (on PostgreSQL across two servers on one database);
//! it ends when it expires or is revoked; asking for more than the policy allows, or where it
//! is never offered, is `422` and decides nothing; and who may list and revoke them.
//! (The inbox's form and page: `tests/inbox/standing.rs`. The store's promises:
//! `tests/store/standing.rs`.)

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Backend, Location, TestServer, assert_error, send};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use toolgate::config::ExamplesConfig;
use toolgate::dispatch::{ApprovalGate, DispatchConfig, StandingLimits, ToolSettings};
use toolgate::http::auth::{ApiKey, Role};

const AGENT: &str = "agent-token-0123456789";
const OTHER_AGENT: &str = "other-agent-token-0123456789";
const OPS: &str = "ops-token-0123456789";
const NARROW: &str = "narrow-token-0123456789";
const ROOT: &str = "root-token-0123456789";

fn keys() -> Vec<ApiKey> {
    let mut keys = common::api_keys(&[
        ("agent", Role::Caller, AGENT),
        ("other-agent", Role::Caller, OTHER_AGENT),
        ("ops", Role::Approver, OPS),
        ("narrow", Role::Approver, NARROW),
        ("root", Role::Admin, ROOT),
    ]);
    // `narrow` decides `echo` only.
    keys[3].decides = toolgate::dispatch::who::Reach::of(&["echo".to_owned()]).unwrap();
    keys
}

/// A gate on every call, offering standing approvals up to an hour and 20 calls when `standing`.
fn gate(standing: bool, approvals: u32) -> ToolSettings {
    ToolSettings {
        approval: Some(ApprovalGate {
            approvals,
            standing: standing.then_some(StandingLimits {
                max_for: Duration::from_secs(3600),
                max_calls: 20,
            }),
            ..ApprovalGate::default()
        }),
        ..ToolSettings::default()
    }
}

/// `issue_refund` and `echo` offer standing approvals; `send_email` does not; `ask_human` needs
/// two approvers (so never offers one, whatever its keys).
fn config() -> DispatchConfig {
    DispatchConfig {
        tools: HashMap::from([
            ("issue_refund".to_owned(), gate(true, 1)),
            ("echo".to_owned(), gate(true, 1)),
            ("send_email".to_owned(), gate(false, 1)),
            ("ask_human".to_owned(), gate(true, 2)),
        ]),
        ..DispatchConfig::default()
    }
}

async fn start(location: &Location) -> TestServer {
    // `issue_refund` never asks by itself: the policy alone decides.
    let examples = ExamplesConfig {
        approval_threshold_cents: u64::MAX,
        ..ExamplesConfig::default()
    };
    let tools = common::example_tools_with(location, &examples);
    TestServer::start_with(tools, location, |builder| {
        builder.api_keys(keys()).dispatch_config(config())
    })
    .await
}

async fn as_(
    server: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, body) = send(&server.api, method, path, body, Some(token)).await;
    (status, body)
}

/// `token` calls `tool` with its example input `n`.
async fn call(server: &TestServer, token: &str, tool: &str, n: usize) -> (StatusCode, Value) {
    let input = match tool {
        "issue_refund" => {
            json!({"order_id": format!("o-{n}"), "amount_cents": 500, "reason": "Late"})
        }
        "echo" => json!({"text": format!("hello {n}")}),
        "send_email" => json!({"to": "a@example.com", "subject": format!("s{n}"), "body": "b"}),
        _ => json!({"question": format!("q{n}?")}),
    };
    let path = format!("/tools/{tool}/call");
    as_(
        server,
        token,
        Method::POST,
        &path,
        Some(json!({ "input": input })),
    )
    .await
}

/// The token of a call that suspended.
#[track_caller]
fn token_of(status: StatusCode, body: &Value) -> String {
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "suspended", "{body}");
    body["suspension"]["token"].as_str().unwrap().to_owned()
}

async fn approve(
    server: &TestServer,
    token: &str,
    as_token: &str,
    standing: Option<Value>,
) -> (StatusCode, Value) {
    let mut body = json!({"input": {}});
    if let Some(standing) = standing {
        body["standing"] = standing;
    }
    let path = format!("/approvals/{token}/approve");
    as_(server, as_token, Method::POST, &path, Some(body)).await
}

/// The standing approvals `token` sees.
async fn listed(server: &TestServer, token: &str) -> Vec<Value> {
    let (status, body) = as_(server, token, Method::GET, "/standing-approvals", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["standing_approvals"].as_array().unwrap().clone()
}

/// `agent`'s refund approved by `ops` with a standing approval of `for_s` seconds and `calls`
/// calls; its id.
async fn granted(server: &TestServer, n: usize, for_s: u64, calls: u32) -> String {
    let (status, body) = call(server, AGENT, "issue_refund", n).await;
    let token = token_of(status, &body);
    let standing = json!({"for_s": for_s, "calls": calls});
    let (status, body) = approve(server, &token, OPS, Some(standing)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    let path = format!("/calls/{}", body["call_id"].as_str().unwrap());
    let (_, record) = as_(server, OPS, Method::GET, &path, None).await;
    let grant = record["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "standing_granted")
        .unwrap_or_else(|| panic!("the grant is in the call's history: {record}"));
    assert_eq!(
        (&grant["actor"], &grant["details"]["calls"]),
        (&json!("ops"), &json!(calls))
    );
    let granted = listed(server, OPS).await;
    let mine = granted
        .iter()
        .find(|s| s["call_id"] == body["call_id"])
        .unwrap_or_else(|| panic!("the grant is listed: {granted:?}"));
    assert_eq!(grant["details"]["standing_approval_id"], mine["id"]);
    mine["id"].as_str().unwrap().to_owned()
}

async fn it_releases_that_callers_calls_of_that_tool_only(backend: Backend) {
    let location = Location::new(backend).await;
    let server = start(&location).await;
    let id = granted(&server, 1, 3600, 3).await;
    assert!(id.starts_with("sa_"), "{id}");
    let standing = &listed(&server, OPS).await[0];
    assert_eq!(standing["tool"], "issue_refund");
    assert_eq!(standing["caller"], "agent");
    assert_eq!(standing["approver"], "ops");
    assert_eq!(
        (standing["calls"].as_u64(), standing["calls_left"].as_u64()),
        (Some(3), Some(3))
    );

    // The agent's next refund runs at once, recorded with the standing approval and its approver.
    let (status, body) = call(&server, AGENT, "issue_refund", 2).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"]["order_id"], "o-2");
    let path = format!("/calls/{}", body["call_id"].as_str().unwrap());
    let (status, record) = as_(&server, AGENT, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(
        record["standing_approval"],
        json!({"id": id, "approver": "ops"})
    );
    let events: Vec<&Value> = record["events"].as_array().unwrap().iter().collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["created", "standing_approved", "completed"],
        "{record}"
    );
    assert_eq!(events[1]["actor"], "ops");
    assert_eq!(events[1]["details"]["standing_approval_id"], id.as_str());
    assert_eq!(listed(&server, OPS).await[0]["calls_left"], 2);

    // Another caller, or another tool that offers them too, still waits for a person.
    let (status, body) = call(&server, OTHER_AGENT, "issue_refund", 3).await;
    token_of(status, &body);
    let (status, body) = call(&server, AGENT, "echo", 4).await;
    let echo = token_of(status, &body);
    let (_, record) = as_(
        &server,
        OPS,
        Method::GET,
        &format!("/calls/{}", body["call_id"].as_str().unwrap()),
        None,
    )
    .await;
    assert!(record.get("standing_approval").is_none(), "{record}");

    // Two calls left, then it is spent: the fourth suspends again and it is no longer listed.
    for n in [5, 6] {
        let (status, body) = call(&server, AGENT, "issue_refund", n).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = call(&server, AGENT, "issue_refund", 7).await;
    token_of(status, &body);
    assert!(listed(&server, OPS).await.is_empty());
    let spent = server.store.standing_approval(&id).await.unwrap().unwrap();
    assert_eq!(spent.calls_left, 0);

    // Approving without `standing` grants nothing.
    let (status, body) = approve(&server, &echo, OPS, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(listed(&server, ROOT).await.is_empty());
    let metrics = server.api.metrics(ROOT).await;
    assert!(
        metrics.contains("toolgate_standing_released_total{tool=\"issue_refund\"}"),
        "{metrics}"
    );
    server.stop().await;
}

/// Asserts the approval `token` is still pending, as `ops` reads it.
async fn still_pending(server: &TestServer, token: &str) {
    let (status, body) = as_(
        server,
        OPS,
        Method::GET,
        &format!("/approvals/{token}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "still pending: {body}");
}

async fn refusals_decide_nothing(backend: Backend) {
    let location = Location::new(backend).await;
    let server = start(&location).await;
    let (status, body) = call(&server, AGENT, "issue_refund", 1).await;
    let token = token_of(status, &body);
    // More than the policy allows, either bound, or nothing: 422, naming the field.
    for (standing, field, max) in [
        (json!({"for_s": 3600, "calls": 21}), "standing.calls", 20),
        (json!({"for_s": 3601, "calls": 5}), "standing.for_s", 3600),
        (json!({"for_s": 60, "calls": 0}), "standing.calls", 20),
        (json!({"for_s": 0, "calls": 5}), "standing.for_s", 3600),
    ] {
        let (status, body) = approve(&server, &token, OPS, Some(standing.clone())).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{standing}: {body}"
        );
        let details = assert_error(&body, "standing_out_of_bounds");
        assert_eq!(details["field"], field, "{body}");
        assert_eq!(details["max"], max, "{body}");
        still_pending(&server, &token).await;
    }
    // Both bounds are required.
    let (status, body) = approve(&server, &token, OPS, Some(json!({"for_s": 60}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    still_pending(&server, &token).await;

    // Never offered: a tool whose policy sets no standing keys, one that needs two
    // approvers, the approver's own call.
    let (status, body) = call(&server, AGENT, "send_email", 2).await;
    let email = token_of(status, &body);
    let (status, body) = call(&server, AGENT, "ask_human", 3).await;
    let ask = token_of(status, &body);
    let (status, body) = call(&server, ROOT, "issue_refund", 4).await;
    let own = token_of(status, &body);
    for (token, by) in [(&email, OPS), (&ask, OPS), (&own, ROOT)] {
        let standing = json!({"for_s": 60, "calls": 1});
        let (status, body) = approve(&server, token, by, Some(standing)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_error(&body, "standing_not_allowed");
        still_pending(&server, token).await;
    }
    // Nothing was granted, and the agent's next refund still waits.
    assert!(listed(&server, ROOT).await.is_empty());
    let (status, body) = call(&server, AGENT, "issue_refund", 5).await;
    token_of(status, &body);
    // The same approval within bounds goes through.
    let (status, body) =
        approve(&server, &token, OPS, Some(json!({"for_s": 60, "calls": 1}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(listed(&server, OPS).await.len(), 1);
    server.stop().await;
}

async fn it_ends_when_it_expires_or_is_revoked(backend: Backend) {
    let location = Location::new(backend).await;
    let server = start(&location).await;
    // One second: a call within it runs, one after it waits again.
    granted(&server, 1, 1, 10).await;
    let (status, body) = call(&server, AGENT, "issue_refund", 2).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, body) = call(&server, AGENT, "issue_refund", 3).await;
    token_of(status, &body);
    assert!(
        listed(&server, OPS).await.is_empty(),
        "an expired one is not listed"
    );

    // Revoked: the next call waits again.
    let id = granted(&server, 4, 3600, 10).await;
    let (status, body) = call(&server, AGENT, "issue_refund", 5).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Who sees it, and who may revoke it: a caller is refused; an approver who does not decide
    // the tool neither sees nor revokes it; an admin sees it.
    let (status, body) = as_(&server, AGENT, Method::GET, "/standing-approvals", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(listed(&server, NARROW).await.is_empty());
    assert_eq!(listed(&server, ROOT).await.len(), 1);
    let path = format!("/standing-approvals/{id}");
    let (status, body) = as_(&server, AGENT, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = as_(&server, NARROW, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_error(&body, "unknown_standing_approval");
    let (status, body) = as_(
        &server,
        OPS,
        Method::DELETE,
        "/standing-approvals/sa_nothing",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        listed(&server, OPS).await.len(),
        1,
        "a refused revocation changes nothing"
    );

    let (status, _, _) = send(&server.api, Method::DELETE, &path, None, Some(OPS)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(&server, AGENT, "issue_refund", 6).await;
    token_of(status, &body);
    assert!(listed(&server, OPS).await.is_empty());
    let revoked = server.store.standing_approval(&id).await.unwrap().unwrap();
    assert_eq!(revoked.revoked_by.as_deref(), Some("ops"));
    assert_eq!(revoked.calls_left, 9, "it released one call before");
    // Revoking again changes nothing.
    let (status, _, _) = send(&server.api, Method::DELETE, &path, None, Some(OPS)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // On the audit chain: the grant (an event of the call approved), the use, the revocation
    // (once).
    let chain = server.store.audit_entries(0, 10_000).await.unwrap();
    let kinds = |kind: &str| {
        chain
            .iter()
            .filter(|e| e.entry.contains(&format!("\"type\":\"{kind}\"")))
            .map(|e| e.entry.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds("call.standing_granted").len(), 2);
    assert!(!kinds("call.standing_approved").is_empty());
    let revoked = kinds("standing.revoked");
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert!(
        revoked[0].contains(&format!("\"id\":\"{id}\"")) && revoked[0].contains("\"by\":\"ops\"")
    );
    server.stop().await;
}

/// The agent's refunds `ns`, all at once (alternately on `second`, when there is one): how many
/// ran and how many suspended.
async fn race(
    first: &TestServer,
    second: Option<&TestServer>,
    ns: std::ops::RangeInclusive<usize>,
) -> (usize, usize) {
    let calls = ns.map(|n| {
        let server = match (second, n % 2) {
            (Some(second), 0) => second,
            _ => first,
        };
        call(server, AGENT, "issue_refund", n)
    });
    let answers = futures_util::future::join_all(calls).await;
    let count = |status: StatusCode, state: &str| {
        answers
            .iter()
            .filter(|(s, body)| *s == status && body["status"] == state)
            .count()
    };
    let counted = (
        count(StatusCode::OK, "completed"),
        count(StatusCode::ACCEPTED, "suspended"),
    );
    assert_eq!(counted.0 + counted.1, answers.len(), "{answers:?}");
    counted
}

/// Twenty concurrent calls against five calls left: exactly five run, fifteen wait. On
/// PostgreSQL the calls go to two servers on one database, alternately.
async fn the_call_limit_is_exact_under_concurrency(backend: Backend) {
    let location = Location::new(backend).await;
    let first = start(&location).await;
    let second = match backend {
        Backend::Postgres => Some(start(&location).await),
        Backend::Sqlite => None,
    };
    let id = granted(&first, 0, 3600, 5).await;
    let (ran, waiting) = race(&first, second.as_ref(), 1..=20).await;
    assert_eq!((ran, waiting), (5, 15));
    let spent = first.store.standing_approval(&id).await.unwrap().unwrap();
    assert_eq!(spent.calls_left, 0);
    // Each that ran is recorded with it.
    let completed: Vec<_> = location
        .stored_calls()
        .await
        .into_iter()
        .filter(|call| call.status == "completed")
        .collect();
    assert_eq!(
        completed.len(),
        6,
        "the approved call and the five it released"
    );
    let mut released = 0;
    for call in &completed {
        let path = format!("/calls/{}", call.call_id);
        let (_, record) = as_(&first, OPS, Method::GET, &path, None).await;
        if record["standing_approval"]["id"] == json!(id) {
            assert_eq!(record["standing_approval"]["approver"], "ops", "{record}");
            released += 1;
        }
    }
    assert_eq!(
        released, 5,
        "each released call names the standing approval"
    );

    // Two standing approvals of three calls each (granted on two calls that waited meanwhile):
    // six of twelve run, none left.
    let mut waiting_calls = Vec::new();
    for n in [100, 101] {
        let (status, body) = call(&first, AGENT, "issue_refund", n).await;
        waiting_calls.push(token_of(status, &body));
    }
    for token in &waiting_calls {
        let standing = json!({"for_s": 3600, "calls": 3});
        let (status, body) = approve(&first, token, OPS, Some(standing)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let held = listed(&first, OPS).await;
    assert_eq!(held.len(), 2, "{held:?}");
    let (ran, waiting) = race(&first, second.as_ref(), 200..=211).await;
    assert_eq!((ran, waiting), (6, 6));
    for standing in held {
        let id = standing["id"].as_str().unwrap();
        let spent = first.store.standing_approval(id).await.unwrap().unwrap();
        assert_eq!(spent.calls_left, 0);
    }
    if let Some(second) = second {
        second.stop().await;
    }
    first.stop().await;
}

/// The keys of the approval table, as a file sets them: both or neither (one alone stops the
/// start, naming the other); both make the policy offer standing approvals within them.
#[tokio::test]
async fn standing_keys_come_from_the_approval_table() {
    let dir = common::temp_dir();
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, "[tools.echo.approval]\nstanding_max_s = 60\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .arg("--config")
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "the server started");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("tools.echo.approval.standing_max_s"), "{log}");
    assert!(log.contains("needs standing_max_calls"), "{log}");

    let hash = |token: &str| {
        let sha = toolgate::http::auth::token_sha256(token);
        sha.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let config = format!(
        "[examples]\napproval_threshold_cents = 1000000000\n\
         [[auth.keys]]\nname = \"agent\"\nrole = \"caller\"\ntoken_sha256 = \"{}\"\n\
         [[auth.keys]]\nname = \"ops\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n\
         [tools.issue_refund.approval]\nstanding_max_s = 60\nstanding_max_calls = 2\n",
        hash(AGENT),
        hash(OPS)
    );
    std::fs::write(&path, config).unwrap();
    let server = common::Binary::start_with(dir.path(), &["--config", path.to_str().unwrap()], &[]);
    let api = &server.api;
    let refund = json!({"input": {"order_id": "o-1", "amount_cents": 500, "reason": "Late"}});
    let (status, _, body) = send(
        api,
        Method::POST,
        "/tools/issue_refund/call",
        Some(refund.clone()),
        Some(AGENT),
    )
    .await;
    let token = token_of(status, &body);
    let path = format!("/approvals/{token}/approve");
    let over = json!({"input": {}, "standing": {"for_s": 60, "calls": 3}});
    let (status, _, body) = send(api, Method::POST, &path, Some(over), Some(OPS)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(assert_error(&body, "standing_out_of_bounds")["max"], 2);
    let within = json!({"input": {}, "standing": {"for_s": 60, "calls": 2}});
    let (status, _, body) = send(api, Method::POST, &path, Some(within), Some(OPS)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = send(
        api,
        Method::POST,
        "/tools/issue_refund/call",
        Some(refund),
        Some(AGENT),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A refund tool whose backend may be down (`DOWN`): `ready()` says so, as an upstream's does.
struct Flaky;

static DOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[toolgate::async_trait]
impl toolgate::DynTool for Flaky {
    fn name(&self) -> &str {
        "flaky_refund"
    }
    fn description(&self) -> &str {
        "Refunds, through a backend that may be down."
    }
    fn effect(&self) -> toolgate::Effect {
        toolgate::Effect::Write
    }
    fn input_schema(&self) -> &Value {
        static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| json!({"type": "object", "properties": {"n": {"type": "integer"}}}))
    }
    fn output_schema(&self) -> Option<&Value> {
        None
    }
    fn idempotency_key(&self, _input: &Value) -> Option<String> {
        None
    }
    fn ready(&self) -> Result<(), toolgate::contract::error::Unavailable> {
        match DOWN.load(std::sync::atomic::Ordering::SeqCst) {
            true => Err(toolgate::contract::error::Unavailable {
                message: "the refunds backend is down".into(),
                retry_after: Duration::from_secs(1),
            }),
            false => Ok(()),
        }
    }
    async fn call_json(
        &self,
        _ctx: &toolgate::ToolCtx,
        input: Value,
    ) -> Result<toolgate::ToolOutcome<Value>, toolgate::ToolError> {
        Ok(toolgate::ToolOutcome::output(
            json!({"refunded": input["n"]}),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backend_known_down_spends_nothing_of_a_standing_approval() {
    let location = Location::new(Backend::Sqlite).await;
    let mut tools = common::example_tools(&location);
    tools.register_dyn(Box::new(Flaky)).unwrap();
    let mut dispatch = config();
    dispatch
        .tools
        .insert("flaky_refund".to_owned(), gate(true, 1));
    let server = TestServer::start_with(tools, &location, |builder| {
        builder.api_keys(keys()).dispatch_config(dispatch)
    })
    .await;
    let flaky = |n: u64| {
        let server = &server;
        async move {
            let body = json!({"input": {"n": n}});
            as_(
                server,
                AGENT,
                Method::POST,
                "/tools/flaky_refund/call",
                Some(body),
            )
            .await
        }
    };
    let (status, body) = flaky(1).await;
    let standing = json!({"for_s": 3600, "calls": 2});
    let (status, body) = approve(&server, &token_of(status, &body), OPS, Some(standing)).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Down: the call waits for a person, as a call the standing approval did not release.
    DOWN.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, body) = flaky(2).await;
    token_of(status, &body);
    assert_eq!(
        listed(&server, OPS).await[0]["calls_left"],
        2,
        "nothing spent"
    );
    // Back: the standing approval releases the next one at once.
    DOWN.store(false, std::sync::atomic::Ordering::SeqCst);
    let (status, body) = flaky(3).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(listed(&server, OPS).await[0]["calls_left"], 1);
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn it_releases_that_callers_calls_of_that_tool_only;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn refusals_decide_nothing;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn it_ends_when_it_expires_or_is_revoked;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_call_limit_is_exact_under_concurrency;
}
