//! Auth and roles: every route times {no token, caller, approver, admin}, a caller that can
//! never approve (its own suspensions included), who-did-what on every resolution, and the
//! binary's refusal to serve without keys on a non-loopback address.

mod common;

use common::{Api, Backend, Location, Site, TestServer, assert_error, open_store, send, temp_dir};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

use serde::Deserialize;
use toolgate::dispatch::{DispatchConfig, ToolSettings};
use toolgate::http::auth::{ApiKey, Role, token_sha256};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, ServerBuilder, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet};

const CALLER: &str = "caller-token-9f2c";
const OTHER_CALLER: &str = "other-caller-token-41aa";
const APPROVER: &str = "approver-token-77d0";
const ADMIN: &str = "admin-token-c3e1";

fn key(name: &str, role: Role, token: &str) -> ApiKey {
    ApiKey::new(name, role, token_sha256(token))
}

async fn server(location: &Location) -> TestServer {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let keys = vec![
        key("agent", Role::Caller, CALLER),
        key("other-agent", Role::Caller, OTHER_CALLER),
        key("finance-ops", Role::Approver, APPROVER),
        key("root", Role::Admin, ADMIN),
    ];
    TestServer::start_with(tools, location, |builder| builder.api_keys(keys)).await
}

/// `POST /approvals/{token}/approve` with an empty answer, as the approver.
async fn approve_as_approver(api: &Api, token: &str) -> (StatusCode, Option<String>, Value) {
    let approve = format!("/approvals/{token}/approve");
    send(
        api,
        Method::POST,
        &approve,
        Some(json!({"input": {}})),
        Some(APPROVER),
    )
    .await
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Nobody,
    Caller,
    Approver,
    Admin,
}

impl Who {
    fn token(self) -> Option<&'static str> {
        match self {
            Who::Nobody => None,
            Who::Caller => Some(CALLER),
            Who::Approver => Some(APPROVER),
            Who::Admin => Some(ADMIN),
        }
    }
}

async fn every_route_times_every_role(backend: Backend) {
    let location = Location::new(backend).await;
    let server = server(&location).await;
    let api = &server.api;
    let (_, _, call) = send(
        api,
        Method::POST,
        "/tools/echo/call",
        Some(json!({"input": {"text": "x"}})),
        Some(ADMIN),
    )
    .await;
    let call_id = call["call_id"].as_str().unwrap().to_owned();
    let (_, _, asked) = send(
        api,
        Method::POST,
        "/tools/ask_human/call",
        Some(json!({"input": {"question": "?"}})),
        Some(ADMIN),
    )
    .await;
    let token = asked["suspension"]["token"].as_str().unwrap().to_owned();

    use Who::*;
    // (method, path, body, who may use it). Resolutions use a token that does not exist, so an
    // allowed one answers 404 and the table's requests do not change each other's state.
    let routes: Vec<(Method, String, Option<Value>, Vec<Who>)> = vec![
        (Method::GET, "/tools".into(), None, vec![Caller, Admin]),
        (Method::GET, "/tools/echo".into(), None, vec![Caller, Admin]),
        (
            Method::POST,
            "/tools/echo/call".into(),
            Some(json!({"input": {"text": "t"}})),
            vec![Caller, Admin],
        ),
        (Method::GET, "/calls".into(), None, vec![Approver, Admin]),
        (
            Method::GET,
            format!("/calls/{call_id}"),
            None,
            vec![Caller, Approver, Admin],
        ),
        (
            Method::POST,
            format!("/calls/{call_id}/resolve"),
            Some(json!({"error": "x"})),
            vec![Approver, Admin],
        ),
        (
            Method::GET,
            "/approvals".into(),
            None,
            vec![Approver, Admin],
        ),
        (
            Method::GET,
            format!("/approvals/{token}"),
            None,
            vec![Approver, Admin],
        ),
        (
            Method::POST,
            "/approvals/sus_none/approve".into(),
            Some(json!({"input": {}})),
            vec![Approver, Admin],
        ),
        (
            Method::POST,
            "/approvals/sus_none/reject".into(),
            Some(json!({"reason": "r"})),
            vec![Approver, Admin],
        ),
        (
            Method::POST,
            "/approvals/sus_none/complete".into(),
            Some(json!({"output": {}})),
            vec![Approver, Admin],
        ),
        (
            Method::GET,
            "/openapi.json".into(),
            None,
            vec![Caller, Approver, Admin],
        ),
        (Method::GET, "/metrics".into(), None, vec![Admin]),
        (
            Method::GET,
            "/webhooks/deliveries".into(),
            None,
            vec![Admin],
        ),
        (
            Method::GET,
            "/notifications/deliveries".into(),
            None,
            vec![Admin],
        ),
        (
            Method::POST,
            "/webhooks/deliveries/1/retry".into(),
            Some(json!({})),
            vec![Admin],
        ),
        // A stream for whoever may read calls (answered 400 here: the cursor is not one).
        (
            Method::GET,
            "/events?after=nonsense".into(),
            None,
            vec![Caller, Approver, Admin],
        ),
        (
            Method::GET,
            "/healthz".into(),
            None,
            vec![Nobody, Caller, Approver, Admin],
        ),
        (
            Method::GET,
            "/readyz".into(),
            None,
            vec![Nobody, Caller, Approver, Admin],
        ),
    ];
    for (method, path, body, allowed) in routes {
        for who in [Nobody, Caller, Approver, Admin] {
            let (status, challenge, answer) =
                send(api, method.clone(), &path, body.clone(), who.token()).await;
            let case = format!("{method} {path} as {who:?}: {status} {answer}");
            if allowed.contains(&who) {
                assert!(
                    status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
                    "{case}"
                );
                assert!(!status.is_server_error(), "{case}");
            } else if who == Nobody {
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}");
                assert_eq!(challenge.as_deref(), Some("Bearer"), "{case}");
                assert_error(&answer, "unauthorized");
            } else {
                assert_eq!(status, StatusCode::FORBIDDEN, "{case}");
                assert_error(&answer, "forbidden");
            }
        }
    }
    // The suspension the table looked at is untouched.
    let (status, _, _) = send(
        api,
        Method::GET,
        &format!("/approvals/{token}"),
        None,
        Some(APPROVER),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn bad_credentials_are_401() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    let url = format!("{}/tools", server.api.base);
    for header in [
        "Bearer wrong-token",
        "Basic YWRtaW46YWRtaW4=",
        "Bearer",
        "",
        ADMIN,
    ] {
        let response = server
            .api
            .client
            .get(&url)
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{header:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    let response = server
        .api
        .client
        .get(&url)
        .bearer_auth(CALLER)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The scheme is case-insensitive.
    let response = server
        .api
        .client
        .get(&url)
        .header("authorization", format!("bearer {CALLER}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    server.stop().await;
}

async fn a_caller_sees_only_its_calls_and_never_approves_and_approvers_are_recorded(
    backend: Backend,
) {
    let location = Location::new(backend).await;
    let server = server(&location).await;
    let api = &server.api;
    let (status, _, asked) = send(
        api,
        Method::POST,
        "/tools/issue_refund/call",
        Some(json!({"input": {"order_id": "o-1", "amount_cents": 50_000, "reason": "r"}})),
        Some(CALLER),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let call_id = asked["call_id"].as_str().unwrap();
    let token = asked["suspension"]["token"].as_str().unwrap();

    let path = format!("/calls/{call_id}");
    let (status, _, record) = send(api, Method::GET, &path, None, Some(CALLER)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["caller"], "agent");
    assert_eq!(record["events"][0]["actor"], "agent");
    let (status, _, body) = send(api, Method::GET, &path, None, Some(OTHER_CALLER)).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "another caller's call does not exist for it"
    );
    assert_error(&body, "unknown_call");

    // Its own suspension included, a caller cannot resolve anything.
    for (action, body) in [
        ("approve", json!({"input": {}})),
        ("reject", json!({"reason": "mine"})),
        ("complete", json!({"output": {}})),
    ] {
        let (status, _, _) = send(
            api,
            Method::POST,
            &format!("/approvals/{token}/{action}"),
            Some(body),
            Some(CALLER),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{action}");
    }
    let (status, _, _) = send(api, Method::GET, &path, None, Some(APPROVER)).await;
    assert_eq!(status, StatusCode::OK);

    let (status, _, done) = send(
        api,
        Method::POST,
        &format!("/approvals/{token}/approve"),
        Some(json!({"input": {"note": "ok"}})),
        Some(APPROVER),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let (_, _, record) = send(api, Method::GET, &path, None, Some(CALLER)).await;
    let approved = record["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "approved")
        .unwrap();
    assert_eq!(approved["actor"], "finance-ops");
    assert!(approved["at"].is_string());
    server.stop().await;
}

#[test]
fn the_binary_refuses_a_public_address_without_keys() {
    let dir = temp_dir();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--bind", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0"),
        "{stderr}"
    );
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");
}

#[test]
fn hash_token_prints_the_sha256_of_stdin() {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("hash-token")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"abc\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    // SHA-256("abc"), the FIPS 180-2 test vector; the trailing newline is not part of the token.
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

async fn roles_hold_when_the_router_is_nested_in_another_app(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let store = open_store(&location).await;
    let keys = vec![
        key("agent", Role::Caller, CALLER),
        key("finance-ops", Role::Approver, APPROVER),
    ];
    let toolgate = ServerBuilder::with_shared_store(tools, store)
        .api_keys(keys)
        .build();
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "host app" }))
        .nest("/api", toolgate);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = Api::new(listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let (status, _, _) = send(&api, Method::GET, "/api/tools", None, Some(CALLER)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&api, Method::GET, "/api/approvals", None, Some(CALLER)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = send(&api, Method::GET, "/api/approvals", None, Some(APPROVER)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&api, Method::GET, "/api/tools", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = send(&api, Method::GET, "/api/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK, "probes stay open under a prefix");
    task.abort();
}

/// A charge keyed by its order (the tool's own key, so two callers asking for one order meet
/// one call): it asks a person first, and once approved it runs past its timeout.
#[derive(Tool)]
#[tool(effect = "write")]
struct SlowCharge;

#[derive(Deserialize, JsonSchema)]
struct ChargeOrder {
    order: String,
}

#[derive(Deserialize, JsonSchema)]
struct Go {}

#[toolgate::async_trait]
impl ToolHandler for SlowCharge {
    type Input = ChargeOrder;
    type Output = Value;

    async fn call(
        &self,
        ctx: &ToolCtx,
        _: ChargeOrder,
    ) -> Result<ToolOutcome<Value>, HandlerError> {
        if ctx.resume().is_none() {
            return Ok(ToolOutcome::suspend_for::<Go>("Charge it?"));
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        Ok(ToolOutcome::output(json!({})))
    }

    fn idempotency_key(&self, input: &ChargeOrder) -> Option<String> {
        Some(format!("charge:{}", input.order))
    }
}

/// Two callers hold `?wait=` on one call (the tool's own key answers the second with the
/// first's); once the approved run leaves it needing reconciliation, each is told so, and only
/// the caller that made it is shown its record.
async fn a_wait_shows_a_reconciliation_only_to_whoever_may_see_the_call(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(SlowCharge).unwrap();
    let keys = vec![
        key("agent", Role::Caller, CALLER),
        key("other-agent", Role::Caller, OTHER_CALLER),
        key("finance-ops", Role::Approver, APPROVER),
    ];
    let config = DispatchConfig {
        defaults: ToolSettings {
            timeout: Duration::from_millis(100),
            ..ToolSettings::default()
        },
        ..DispatchConfig::default()
    };
    let server = TestServer::start_with(tools, &location, |builder| {
        builder.api_keys(keys).dispatch_config(config)
    })
    .await;
    let api = server.api.clone();
    let path = "/tools/slow_charge/call";
    let input = json!({"input": {"order": "o-1"}});
    let (status, _, body) = send(&api, Method::POST, path, Some(input.clone()), Some(CALLER)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let waiting = |token: &'static str| {
        let (api, input) = (api.clone(), input.clone());
        tokio::spawn(async move {
            let waited = format!("{path}?wait=20");
            send(&api, Method::POST, &waited, Some(input), Some(token)).await
        })
    };
    let own = waiting(CALLER);
    let other = waiting(OTHER_CALLER);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, body) = approve_as_approver(&api, &token).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");

    let (status, _, body) = own.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let details = assert_error(&body, "needs_reconciliation");
    assert_eq!(
        details["caller"], "agent",
        "its own call's record: {details}"
    );
    let (status, _, body) = other.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let details = assert_error(&body, "needs_reconciliation");
    assert_eq!(
        details,
        json!({"call_id": call_id, "status": "needs_reconciliation"}),
        "another caller's call: that it waits, not what it holds"
    );
    server.stop().await;
}

/// A tool's own key (every caller shares it on purpose): a second caller's replay is told where
/// the first caller's call stands, never its suspension token or question; its `?wait=` still
/// waits for the decision; and a key reused with another input names no call of another caller.
async fn another_callers_replay_shows_where_the_call_stands_and_nothing_it_holds(backend: Backend) {
    let location = Location::new(backend).await;
    let keys = vec![
        key("agent", Role::Caller, CALLER),
        key("other-agent", Role::Caller, OTHER_CALLER),
        key("finance-ops", Role::Approver, APPROVER),
    ];
    let tools = common::example_tools(&location);
    let server = TestServer::start_with(tools, &location, |builder| builder.api_keys(keys)).await;
    let api = server.api.clone();
    let path = "/tools/issue_refund/call";
    let refund = json!({"input": {"order_id": "o-9", "amount_cents": 900_000, "reason": "Broken"}});
    let (status, _, made) =
        send(&api, Method::POST, path, Some(refund.clone()), Some(CALLER)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{made}");
    let call_id = made["call_id"].as_str().unwrap().to_owned();
    let token = made["suspension"]["token"].as_str().unwrap().to_owned();

    // The caller that made it is answered with its own suspension again.
    let (status, _, again) =
        send(&api, Method::POST, path, Some(refund.clone()), Some(CALLER)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(again["suspension"]["token"], token.as_str());

    // Another caller: the call's status, nothing of what it holds.
    let (status, _, seen) = send(
        &api,
        Method::POST,
        path,
        Some(refund.clone()),
        Some(OTHER_CALLER),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{seen}");
    assert_eq!(seen["status"], "suspended");
    assert!(
        seen.get("suspension").is_none(),
        "no token, no question: {seen}"
    );
    assert!(!seen.to_string().contains(&token), "{seen}");

    // The same key with another input: the maker is told which call has it, the other not.
    let other_input =
        json!({"input": {"order_id": "o-9", "amount_cents": 800_000, "reason": "Broken"}});
    let (status, _, reused) = send(
        &api,
        Method::POST,
        path,
        Some(other_input.clone()),
        Some(CALLER),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        assert_error(&reused, "idempotency_key_reused")["call_id"],
        call_id.as_str()
    );
    let (status, _, reused) = send(
        &api,
        Method::POST,
        path,
        Some(other_input),
        Some(OTHER_CALLER),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&reused, "idempotency_key_reused");
    assert!(!reused.to_string().contains(&call_id), "{reused}");

    // Held, the other caller's replay waits for the decision and is answered the output.
    let waited = {
        let (api, refund) = (api.clone(), refund.clone());
        tokio::spawn(async move {
            send(
                &api,
                Method::POST,
                &format!("{path}?wait=20"),
                Some(refund),
                Some(OTHER_CALLER),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _, body) = approve_as_approver(&api, &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = waited.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"]["status"], "issued", "{body}");
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn every_route_times_every_role;
    #[tokio::test]
    async fn a_caller_sees_only_its_calls_and_never_approves_and_approvers_are_recorded;
    #[tokio::test] async fn roles_hold_when_the_router_is_nested_in_another_app;
    #[tokio::test] async fn a_wait_shows_a_reconciliation_only_to_whoever_may_see_the_call;
    #[tokio::test]
    async fn another_callers_replay_shows_where_the_call_stands_and_nothing_it_holds;
}
