//! `/inbox` over plain HTTP, as a browser would use it but without one: one binary, a module per
//! concern (sign-in and sessions, the queue, decisions and the form, what a person reads and
//! confirms, security headers and CSRF).
//! (`tests/inbox_browser.rs` drives the real page in Chromium.)

#[path = "../common/mod.rs"]
mod common;

mod decisions;
mod queue;
mod reading;
mod reasons;
mod security;
mod sessions;
mod standing;

use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::ServerBuilder;
use toolgate::http::auth::{ApiKey, Role};

use common::{Site, TestServer};

const APPROVER: &str = "approver-token-0123456789";
const OTHER_APPROVER: &str = "other-approver-token-0123";
const CALLER: &str = "caller-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";

fn keys() -> Vec<ApiKey> {
    common::api_keys(&[
        ("finance-ops", Role::Approver, APPROVER),
        ("on-call", Role::Approver, OTHER_APPROVER),
        ("orchestrator", Role::Caller, CALLER),
        ("root", Role::Admin, ADMIN),
    ])
}

async fn start(
    at: &(impl Site + ?Sized),
    configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
) -> TestServer {
    TestServer::start_with(common::example_tools(at), at, |builder| {
        configure(builder.api_keys(keys()))
    })
    .await
}

/// A fresh server (the example tools and [`keys`], its data in the directory returned, which
/// must outlive it) and a person on it, not signed in.
async fn visitor() -> (tempfile::TempDir, TestServer, Person) {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let person = Person::new(&server);
    (dir, server, person)
}

/// A fresh server, as [`visitor`]'s, and a person signed in on it with `key`.
async fn signed_in(key: &str) -> (tempfile::TempDir, TestServer, Person) {
    let (dir, server, mut person) = visitor().await;
    person.sign_in(key).await;
    (dir, server, person)
}

/// A person with a browser's cookie jar (one cookie per name, as the server sets them).
use common::browser::{Browser as Person, Page};

impl Page {
    /// Asserts the page shows the person signed in as `name`.
    fn assert_signed_in_as(&self, name: &str) {
        let shown = format!("Signed in as <strong>{name}</strong>");
        assert!(self.body.contains(&shown), "{}", self.body);
    }
}

impl Person {
    /// Opens the page's live stream (`/inbox/events`) with this person's cookies: the response,
    /// its body still streaming.
    async fn open_events(&self) -> reqwest::Response {
        self.client
            .get(format!("{}/inbox/events", self.base))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap()
    }
}

/// A request to the REST API with a bearer token.
async fn api(
    server: &TestServer,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let url = format!("{}{path}", server.api.base);
    let client = &server.api.client;
    let request = match method {
        "GET" => client.get(url),
        _ => client.post(url),
    };
    let request = request.bearer_auth(token);
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// Calls `tool` as the orchestrator; returns the call id of its suspension.
async fn suspend(server: &TestServer, tool: &str, input: Value) -> String {
    let (status, body) = api(
        server,
        "POST",
        &format!("/tools/{tool}/call"),
        CALLER,
        Some(json!({ "input": input })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["call_id"].as_str().unwrap().to_owned()
}

async fn call_record(server: &TestServer, call_id: &str) -> Value {
    let (status, body) = api(server, "GET", &format!("/calls/{call_id}"), APPROVER, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn actor_of(call: &Value, kind: &str) -> Option<String> {
    call["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == kind)
        .and_then(|e| e["actor"].as_str())
        .map(str::to_owned)
}
