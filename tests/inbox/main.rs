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

use std::collections::HashMap;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
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
struct Person {
    base: String,
    client: reqwest::Client,
    cookies: HashMap<String, String>,
}

/// An answer: status, headers, body.
struct Page {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn set_cookies(&self) -> Vec<&str> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }

    /// Asserts the page shows the person signed in as `name`.
    fn assert_signed_in_as(&self, name: &str) {
        let shown = format!("Signed in as <strong>{name}</strong>");
        assert!(self.body.contains(&shown), "{}", self.body);
    }

    /// The first hidden `csrf` field's value.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no csrf field in {}", self.body));
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl Person {
    fn new(server: &TestServer) -> Person {
        common::tls();
        Person {
            base: server.api.base.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> Page {
        let request = if self.cookies.is_empty() {
            request
        } else {
            request.header("cookie", self.cookie_header())
        };
        let response = request.send().await.expect("request sent");
        let status = response.status();
        let headers = response.headers().clone();
        for value in headers.get_all("set-cookie") {
            let text = value.to_str().unwrap();
            let pair = text.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || text.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        let body = response.text().await.unwrap();
        Page {
            status,
            headers,
            body,
        }
    }

    async fn get(&mut self, path: &str) -> Page {
        let request = self.client.get(format!("{}{path}", self.base));
        self.send(request).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send(request).await
    }

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

    /// Opens the sign-in page and signs in with `key`.
    async fn sign_in(&mut self, key: &str) -> Page {
        let page = self.get("/inbox").await;
        assert_eq!(page.status, StatusCode::OK);
        let csrf = page.csrf();
        self.post("/inbox/sign-in", &[("key", key), ("csrf", &csrf)])
            .await
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
