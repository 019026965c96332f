//! Decision links (`/inbox/link/{signed}`), as a person's browser uses them but without one:
//! signed through the library's `toolgate::notify::Links` on the server's own store, opened,
//! decided, and refused when forged, altered, foreign, expired, used or not the person's to
//! decide. On both backends: the links' keys are in the store. (`tests/inbox_browser.rs`
//! follows a link in Chromium.)

#[path = "../common/mod.rs"]
mod common;

mod browser;
mod decide;
mod refusals;

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::http::auth::{ApiKey, Role};
use toolgate::inbox::config::LinkMode;
use toolgate::notify::{Links, People, PersonConfig};

use common::{Site, TestServer};

const APPROVER: &str = "approver-token-0123456789";
const CALLER: &str = "caller-token-0123456789";
const OTHER_APPROVER: &str = "other-approver-token-0123";

fn keys() -> Vec<ApiKey> {
    common::api_keys(&[
        ("finance-ops", Role::Approver, APPROVER),
        ("on-call", Role::Approver, OTHER_APPROVER),
        ("orchestrator", Role::Caller, CALLER),
    ])
}

/// `finance-ops` and `on-call` (approvers' keys), `orchestrator` (a caller's), `corp:carol` (decides `send_*` only), `corp:bob` (told
/// only: no key, no decides).
fn people() -> People {
    let person = |name: &str, decides: Option<&[&str]>| PersonConfig {
        name: name.into(),
        email: Some(format!("{name}@example.com")),
        slack_user: None,
        decides: decides.map(|globs| globs.iter().map(|g| (*g).to_owned()).collect()),
    };
    let keys = keys();
    People::new(
        &[
            person("finance-ops", None),
            person("on-call", None),
            person("orchestrator", None),
            person("corp:carol", Some(&["send_*"])),
            person("corp:bob", None),
        ],
        |name| keys.iter().find(|k| k.name == name).map(ApiKey::principal),
        false,
    )
    .unwrap()
}

/// A server whose links start with its own address, and links made as it makes them.
struct Served {
    server: TestServer,
    links: Links,
}

impl Served {
    /// The link for `person` to decide the pending approval of `call_id`, made through the
    /// library on the server's store.
    async fn link(&self, call_id: &str, person: &str) -> String {
        let token = call_record(&self.server, call_id).await["suspension"]["token"]
            .as_str()
            .unwrap()
            .to_owned();
        self.links.link(&token, person).await.unwrap()
    }

    /// The path of `link` on this server.
    fn path(&self, link: &str) -> String {
        link.strip_prefix(&self.server.api.base)
            .unwrap_or_else(|| panic!("{link} is not on {}", self.server.api.base))
            .to_owned()
    }
}

/// Serves the example tools with [`keys`] and [`people`]; its links serve for `ttl`.
async fn serve(at: &(impl Site + ?Sized), ttl: Duration, signed: bool) -> Served {
    serve_with(at, ttl, signed, "").await
}

/// As [`serve`], with the tools' settings of `toml` (`[tools.<name>.approval]`, say).
async fn serve_with(at: &(impl Site + ?Sized), ttl: Duration, signed: bool, toml: &str) -> Served {
    let dispatch = toolgate::config::Config::from_toml(toml)
        .unwrap()
        .dispatch_config();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let public_url = format!("http://{}", listener.local_addr().unwrap());
    let inbox = toolgate::inbox::InboxOptions {
        public_url: public_url.clone(),
        link_ttl: ttl,
        links: if signed {
            LinkMode::Signed
        } else {
            LinkMode::SignIn
        },
        ..Default::default()
    };
    let server = TestServer::start_on(listener, common::example_tools(at), at, |builder| {
        (builder.api_keys(keys()).people(people()).inbox(inbox)).dispatch_config(dispatch)
    })
    .await;
    let links = Links::new(server.store.clone(), &public_url, ttl).sign_in_only(!signed);
    Served { server, links }
}

use common::browser::{Browser, Page};

impl Page {
    /// Asserts this is the refusal page of `code`, answered with `status`.
    fn assert_refused(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{code}: {}", self.body);
        let marker = format!("data-refusal=\"{code}\"");
        assert!(self.body.contains(&marker), "{code}: {}", self.body);
        assert!(self.body.contains("Nothing was decided."));
        assert_eq!(self.header("cache-control"), "no-store");
        assert!(!self.body.contains("name=\"csrf\""), "no form on a refusal");
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

/// Calls `tool` as the orchestrator; the call id of its suspension.
async fn suspend(server: &TestServer, tool: &str, input: Value) -> String {
    let path = format!("/tools/{tool}/call");
    let (status, body) = api(
        server,
        "POST",
        &path,
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

/// Asserts `call_id` still waits for a person, with nothing decided.
async fn assert_pending(server: &TestServer, call_id: &str) {
    let call = call_record(server, call_id).await;
    assert_eq!(call["status"], "suspended", "{call}");
    let decided = call["events"].as_array().unwrap().iter().any(|e| {
        matches!(
            e["kind"].as_str(),
            Some("approved" | "rejected" | "approval_recorded")
        )
    });
    assert!(!decided, "nothing decided: {call}");
}

/// The store of a server, shared with a second `Links` (the test's own).
fn store_of(served: &Served) -> Arc<dyn toolgate::store::Store> {
    served.server.store.clone()
}
