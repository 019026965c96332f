//! `/inbox` over plain HTTP, as a browser would use it but without one: sign-in and its cookie,
//! refusals, the rate limit, CSRF, security headers, escaping, decisions and their actor, the
//! form's refusals at their fields, decisions made meanwhile, and sessions across restarts.
//! (`tests/inbox_browser.rs` drives the real page in Chromium.)

mod common;

use std::collections::HashMap;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use toolgate::http::auth::{ApiKey, Role, token_sha256};
use toolgate::inbox::InboxOptions;
use toolgate::{ServerBuilder, ToolSet};

use common::{Backend, Location, Site, TestServer};

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

#[tokio::test]
async fn signing_in_with_an_approver_key_sets_a_strict_http_only_cookie() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    let signed = person.sign_in(APPROVER).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER);
    assert_eq!(signed.header("location"), "/inbox");
    let session = signed
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("toolgate_inbox="))
        .expect("a session cookie")
        .to_owned();
    for part in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/inbox",
        "Max-Age=43200",
    ] {
        assert!(session.contains(part), "{session}");
    }
    assert!(
        !session.contains("Secure"),
        "plain HTTP without secure_cookies: {session}"
    );
    assert!(!signed.body.contains(APPROVER));

    let queue = person.get("/inbox").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(
        queue
            .body
            .contains("Signed in as <strong>finance-ops</strong>"),
        "{}",
        queue.body
    );
    assert!(
        !queue.body.contains(APPROVER),
        "the key never shows in a page"
    );
    server.stop().await;

    // `Secure` when configured so, or when a proxy says the request came over TLS.
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| {
        b.inbox(InboxOptions {
            secure_cookies: true,
            session_ttl: std::time::Duration::from_secs(60),
            ..InboxOptions::default()
        })
    })
    .await;
    let mut person = Person::new(&server);
    let signed = person.sign_in(APPROVER).await;
    let session = signed
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("toolgate_inbox="))
        .unwrap()
        .to_owned();
    assert!(
        session.contains("; Secure") && session.contains("Max-Age=60"),
        "{session}"
    );
    server.stop().await;

    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    let request = person
        .client
        .get(format!("{}/inbox", person.base))
        .header("x-forwarded-proto", "https");
    let page = person.send(request).await;
    assert!(
        page.set_cookies().iter().all(|c| c.contains("; Secure")),
        "{:?}",
        page.set_cookies()
    );
    server.stop().await;
}

#[tokio::test]
async fn caller_and_unknown_keys_are_refused_with_a_message() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    let caller = person.sign_in(CALLER).await;
    assert_eq!(caller.status, StatusCode::FORBIDDEN);
    assert!(
        caller.body.contains("This is a caller key"),
        "{}",
        caller.body
    );
    assert!(!caller.body.contains(CALLER));
    assert!(
        caller
            .set_cookies()
            .iter()
            .all(|c| !c.starts_with("toolgate_inbox="))
    );
    let unknown = person.sign_in("not-a-key").await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert!(
        unknown.body.contains("not one this server knows"),
        "{}",
        unknown.body
    );
    assert!(
        !unknown.body.contains("not-a-key"),
        "what was typed is not echoed"
    );
    // Still signed out: the queue is not shown.
    let page = person.get("/inbox").await;
    assert!(page.body.contains("Paste an <strong>approver</strong>"));
    // A caller's bearer token does not open the page either.
    let response = server
        .api
        .client
        .get(format!("{}/inbox", server.api.base))
        .bearer_auth(CALLER)
        .send()
        .await
        .unwrap();
    assert!(response.text().await.unwrap().contains("Sign in"));
    server.stop().await;
}

#[tokio::test]
async fn sign_in_attempts_are_rate_limited() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    for attempt in 0..10 {
        let page = person.sign_in("wrong").await;
        assert_eq!(page.status, StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    let limited = person.sign_in(APPROVER).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.header("retry-after").parse::<u64>().unwrap() >= 1);
    assert!(limited.body.contains("Too many sign-in attempts"));
    server.stop().await;
}

#[tokio::test]
async fn signing_out_ends_the_session() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let session = person.cookies["toolgate_inbox"].clone();
    let queue = person.get("/inbox").await;
    let out = person
        .post("/inbox/sign-out", &[("csrf", &queue.csrf())])
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(
        !person.cookies.contains_key("toolgate_inbox"),
        "the cookie is cleared"
    );
    // The session is gone from the store: its old cookie, sent again, opens nothing.
    person.cookies.insert("toolgate_inbox".into(), session);
    let again = person.get("/inbox").await;
    assert!(
        again.body.contains("Paste an <strong>approver</strong>"),
        "{}",
        again.body
    );
    let fragment = person.get("/inbox/queue").await;
    assert_eq!(fragment.status, StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test]
async fn forms_without_their_csrf_token_are_refused() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let call_id = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let page = person.get(&format!("/inbox/calls/{call_id}")).await;
    let csrf = page.csrf();
    let path = format!("/inbox/calls/{call_id}/approve");
    let missing = person.post(&path, &[("v/answer", "yes")]).await;
    assert_eq!(missing.status, StatusCode::FORBIDDEN);
    assert!(missing.body.contains("security token"));
    let wrong = person
        .post(
            &path,
            &[
                ("v/answer", "yes"),
                ("csrf", &csrf.replace(|c: char| c.is_ascii_digit(), "0")),
            ],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let reject = person
        .post(
            &format!("/inbox/calls/{call_id}/reject"),
            &[("reason", "no")],
        )
        .await;
    assert_eq!(reject.status, StatusCode::FORBIDDEN);
    let out = person.post("/inbox/sign-out", &[]).await;
    assert_eq!(
        out.status,
        StatusCode::FORBIDDEN,
        "signing out is a change too"
    );
    assert_eq!(call_record(&server, &call_id).await["status"], "suspended");

    // The sign-in form: without the cookie it was given with, refused.
    let mut stranger = Person::new(&server);
    let forged = stranger
        .post("/inbox/sign-in", &[("key", APPROVER), ("csrf", "made-up")])
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(!stranger.cookies.contains_key("toolgate_inbox"));

    // With the token, it goes through.
    let ok = person
        .post(&path, &[("v/answer", "yes"), ("csrf", &csrf)])
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    server.stop().await;
}

#[tokio::test]
async fn every_page_carries_its_security_headers() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let call_id = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let mut person = Person::new(&server);
    let sign_in = person.get("/inbox").await;
    person.sign_in(APPROVER).await;
    let mut pages = vec![sign_in];
    for path in [
        "/inbox".to_owned(),
        "/inbox/queue".to_owned(),
        "/inbox/reconcile".to_owned(),
        format!("/inbox/calls/{call_id}"),
        "/inbox/calls/call_nope".to_owned(),
    ] {
        pages.push(person.get(&path).await);
    }
    for page in &pages {
        let csp = page.header("content-security-policy");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(page.header("x-content-type-options"), "nosniff");
        assert_eq!(page.header("referrer-policy"), "no-referrer");
        assert_eq!(page.header("cache-control"), "no-store");
        assert!(page.header("content-type").starts_with("text/html"));
        // No inline script or style: the policy would block them.
        assert!(
            !page.body.contains("<script>") && !page.body.contains("style="),
            "{}",
            page.body
        );
    }
    assert_eq!(pages.last().unwrap().status, StatusCode::NOT_FOUND);
    // The assets the page names, cached for a long time (their names change with them).
    let html = &pages[1].body;
    for ext in [".css", ".js"] {
        let end = html.find(ext).unwrap() + ext.len();
        let start = html[..end].rfind("/inbox/assets/").unwrap();
        let asset = person.get(&html[start..end]).await;
        assert_eq!(asset.status, StatusCode::OK);
        assert!(asset.header("cache-control").contains("max-age=31536000"));
        assert_eq!(asset.header("x-content-type-options"), "nosniff");
    }
    assert_eq!(
        person.get("/inbox/assets/other.js").await.status,
        StatusCode::NOT_FOUND
    );
    server.stop().await;
}

#[tokio::test]
async fn script_payloads_in_reasons_and_inputs_show_as_text() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let payload = "<script>alert(1)</script>\"><img src=x onerror=alert(1)>";
    let call_id = suspend(&server, "ask_human", json!({"question": payload})).await;
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-<b>1</b>", "amount_cents": 50000, "reason": payload}),
    )
    .await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    for path in [
        "/inbox".to_owned(),
        "/inbox/queue".to_owned(),
        format!("/inbox/calls/{call_id}"),
        format!("/inbox/calls/{refund}"),
    ] {
        let page = person.get(&path).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            !page.body.contains("<script>alert"),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("<img src=x"), "{path}");
        assert!(!page.body.contains("<b>1</b>"), "{path}");
        assert!(
            page.body
                .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{path}: {}",
            page.body
        );
    }
    // A rejection reason with a payload, shown on the decided call's page.
    let page = person.get(&format!("/inbox/calls/{call_id}")).await;
    let rejected = person
        .post(
            &format!("/inbox/calls/{call_id}/reject"),
            &[("reason", payload), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER);
    let history = person.get(&format!("/inbox/calls/{call_id}")).await;
    assert!(!history.body.contains("<script>alert"), "{}", history.body);
    assert!(
        history
            .body
            .contains("&#60;img src=x onerror=alert(1)&#62;")
    );
    server.stop().await;
}

#[tokio::test]
async fn decisions_go_through_the_lifecycle_with_the_signed_in_key_as_actor() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;

    // Approve: the tool runs again with the answer.
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let queue = person.get("/inbox").await;
    assert!(
        queue.body.contains(&format!("/inbox/calls/{asked}")),
        "listed"
    );
    assert!(queue.body.contains("orchestrator"), "with its caller");
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    assert!(
        !page.body.contains("sus_"),
        "no suspension token in the page"
    );
    let approved = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "yes, ship it"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    assert_eq!(approved.header("location"), format!("/inbox/calls/{asked}"));
    let call = call_record(&server, &asked).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(call["output"], json!({"answer": "yes, ship it"}));
    assert_eq!(actor_of(&call, "approved").as_deref(), Some("finance-ops"));
    let history = person.get(&format!("/inbox/calls/{asked}")).await;
    assert!(
        history
            .body
            .contains("Approved</span> by <strong class=\"actor\">finance-ops</strong>"),
        "{}",
        history.body
    );

    // Reject, with a reason (required).
    let refused = suspend(&server, "ask_human", json!({"question": "Delete prod?"})).await;
    let page = person.get(&format!("/inbox/calls/{refused}")).await;
    let csrf = page.csrf();
    let empty = person
        .post(
            &format!("/inbox/calls/{refused}/reject"),
            &[("reason", " "), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(empty.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(empty.body.contains("Say why the call is rejected"));
    let rejected = person
        .post(
            &format!("/inbox/calls/{refused}/reject"),
            &[("reason", "Not on a Friday."), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER);
    let call = call_record(&server, &refused).await;
    assert_eq!(call["status"], "rejected");
    assert!(
        call["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Not on a Friday."),
        "{call}"
    );
    assert_eq!(actor_of(&call, "rejected").as_deref(), Some("finance-ops"));

    // Complete externally, through the output schema's form.
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-9", "amount_cents": 25000, "reason": "broken"}),
    )
    .await;
    let page = person.get(&format!("/inbox/calls/{refund}")).await;
    assert!(
        page.body
            .contains("write: changes something outside toolgate")
    );
    assert!(
        page.body.contains("name=\"v/refund_id\""),
        "the receipt's form"
    );
    let completed = person
        .post(
            &format!("/inbox/calls/{refund}/complete"),
            &[
                ("csrf", &page.csrf()),
                ("v/refund_id", "rf_manual_1"),
                ("v/order_id", "o-9"),
                ("v/amount_cents", "25000"),
                ("v/status", "0"),
            ],
        )
        .await;
    assert_eq!(
        completed.status,
        StatusCode::SEE_OTHER,
        "{}",
        completed.body
    );
    let call = call_record(&server, &refund).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(
        call["output"],
        json!({"refund_id": "rf_manual_1", "order_id": "o-9", "amount_cents": 25000, "status": "issued"})
    );
    assert_eq!(
        actor_of(&call, "completed_externally").as_deref(),
        Some("finance-ops")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_refused_answer_shows_each_message_at_its_field_and_keeps_what_was_typed() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    let csrf = page.csrf();
    // An empty required field is left out, and refused as missing by the real validation.
    let missing = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", ""), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        missing
            .body
            .contains("id=\"approve-f/answer-error\">This field is required.</p>"),
        "{}",
        missing.body
    );
    assert!(
        missing
            .body
            .contains("aria-invalid=\"true\" aria-describedby=\"approve-f/answer-help approve-f/answer-error\""),
        "{}",
        missing.body
    );
    assert!(
        missing.body.contains("required property"),
        "the validator's own message, in the summary"
    );
    assert_eq!(
        call_record(&server, &asked).await["status"],
        "suspended",
        "still pending"
    );

    // The output form of issue_refund: a number that is no number, and one too large.
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-3", "amount_cents": 30000, "reason": "late"}),
    )
    .await;
    let page = person.get(&format!("/inbox/calls/{refund}")).await;
    let wrong = person
        .post(
            &format!("/inbox/calls/{refund}/complete"),
            &[
                ("csrf", &page.csrf()),
                ("v/refund_id", "rf_kept"),
                ("v/order_id", "o-3"),
                ("v/amount_cents", "lots"),
            ],
        )
        .await;
    assert_eq!(
        wrong.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        wrong.body
    );
    let error_at = wrong
        .body
        .find("id=\"complete-f/amount_cents-error\"")
        .expect("a message at amount_cents");
    assert!(
        wrong.body[error_at..].starts_with(
            "id=\"complete-f/amount_cents-error\">value is not of type &#34;integer&#34;"
        ),
        "{}",
        &wrong.body[error_at..error_at + 200]
    );
    assert!(
        wrong.body.contains("value=\"rf_kept\""),
        "what was typed is kept"
    );
    assert!(wrong.body.contains("value=\"lots\""));
    assert!(
        wrong
            .body
            .contains("id=\"complete-f/status-error\">This field is required."),
        "{}",
        wrong.body
    );
    assert_eq!(call_record(&server, &refund).await["status"], "suspended");
    server.stop().await;
}

#[tokio::test]
async fn an_approval_decided_meanwhile_shows_who_decided_what() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    // Someone else approves first, over the API.
    let token = call_record(&server, &asked).await["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = api(
        &server,
        "POST",
        &format!("/approvals/{token}/approve"),
        OTHER_APPROVER,
        Some(json!({"input": {"answer": "done already"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let late = person
        .post(
            &format!("/inbox/calls/{asked}/reject"),
            &[("reason", "no"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT);
    assert!(
        late.body.contains("already decided: approved by on-call"),
        "{}",
        late.body
    );
    assert!(late.body.contains("It is completed now."), "{}", late.body);
    assert!(
        !late.body.contains("id=\"reject-form\""),
        "no form to decide again"
    );
    let call = call_record(&server, &asked).await;
    assert_eq!(
        call["status"], "completed",
        "the late rejection changed nothing"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_key_that_is_removed_or_reissued_ends_its_sessions() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    server.stop().await;
    // The same name with a new token: the old sign-in no longer holds.
    let reissued = vec![ApiKey {
        name: "finance-ops".into(),
        role: Role::Approver,
        token_sha256: token_sha256("a-new-token-for-finance"),
    }];
    let server = TestServer::start_with(common::example_tools(dir.path()), dir.path(), |b| {
        b.api_keys(reissued)
    })
    .await;
    person.base = server.api.base.clone();
    let page = person.get("/inbox").await;
    assert!(
        page.body.contains("Paste an <strong>approver</strong>"),
        "{}",
        page.body
    );
    server.stop().await;
}

#[tokio::test]
async fn with_auth_off_the_inbox_acts_as_the_anonymous_admin() {
    let dir = common::temp_dir();
    let server = TestServer::examples(dir.path()).await;
    let (status, body) = server
        .api
        .call("ask_human", json!({"question": "Ship?"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let asked = body["call_id"].as_str().unwrap().to_owned();
    let mut person = Person::new(&server);
    let queue = person.get("/inbox").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(queue.body.contains("auth off (admin)"), "{}", queue.body);
    assert!(
        person.cookies.contains_key("toolgate_inbox"),
        "a session of its own"
    );
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    // The forms are still bound to the session: a form from elsewhere is refused.
    let forged = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "x")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let approved = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "yes"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER);
    let (_, call) = server.api.get(&format!("/calls/{asked}")).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(
        actor_of(&call, "approved"),
        None,
        "no key, no actor: as over REST"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_inbox_can_be_turned_off() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| {
        b.inbox(InboxOptions {
            enabled: false,
            ..InboxOptions::default()
        })
    })
    .await;
    let mut person = Person::new(&server);
    assert_eq!(person.get("/inbox").await.status, StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn a_call_that_needs_reconciliation_is_listed_and_settled_with_the_key_as_actor() {
    let dir = common::temp_dir();
    // send_email takes longer than its timeout: a write whose effect may have happened.
    let mut tools = ToolSet::new();
    let slow = toolgate::config::ExamplesConfig {
        send_email_delay_ms: 2_000,
        ..Default::default()
    };
    toolgate::examples::register(&mut tools, &slow, dir.path()).unwrap();
    let mut dispatch = toolgate::dispatch::DispatchConfig::default();
    dispatch.tools.insert(
        "send_email".into(),
        toolgate::dispatch::ToolSettings {
            timeout: std::time::Duration::from_millis(100),
            ..Default::default()
        },
    );
    let server = TestServer::start_with(tools, dir.path(), |b| {
        b.api_keys(keys()).dispatch_config(dispatch)
    })
    .await;
    let mut sent = Vec::new();
    for to in ["a@example.com", "b@example.com"] {
        let (status, body) = api(
            &server,
            "POST",
            "/tools/send_email/call",
            CALLER,
            Some(json!({"input": {"to": to, "subject": "Hi", "body": "Hello"}})),
        )
        .await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
        sent.push(body["call_id"].as_str().unwrap().to_owned());
    }
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let list = person.get("/inbox/reconcile").await;
    for call_id in &sent {
        assert!(
            list.body.contains(&format!("/inbox/calls/{call_id}")),
            "{}",
            list.body
        );
    }
    // Settled as not done, with a reason.
    let page = person.get(&format!("/inbox/calls/{}", sent[0])).await;
    assert!(
        page.body.contains("id=\"settle-error-form\""),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let path = format!("/inbox/calls/{}/resolve", sent[0]);
    let empty = person
        .post(
            &path,
            &[("settle", "error"), ("error", ""), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(empty.status, StatusCode::UNPROCESSABLE_ENTITY);
    let settled = person
        .post(
            &path,
            &[
                ("settle", "error"),
                ("error", "The mail server has no trace of it."),
                ("csrf", &csrf),
            ],
        )
        .await;
    assert_eq!(settled.status, StatusCode::SEE_OTHER, "{}", settled.body);
    let call = call_record(&server, &sent[0]).await;
    assert_eq!(call["status"], "failed");
    assert_eq!(
        actor_of(&call, "reconciled").as_deref(),
        Some("finance-ops")
    );
    // Settled as done, with its output, through the output schema's form.
    let page = person.get(&format!("/inbox/calls/{}", sent[1])).await;
    let path = format!("/inbox/calls/{}/resolve", sent[1]);
    let bad = person
        .post(
            &path,
            &[
                ("settle", "output"),
                ("v/message_id", ""),
                ("csrf", &page.csrf()),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert!(
        bad.body
            .contains("id=\"settle-f/message_id-error\">This field is required."),
        "{}",
        bad.body
    );
    let done = person
        .post(
            &path,
            &[
                ("settle", "output"),
                ("v/message_id", "m-1"),
                ("csrf", &page.csrf()),
            ],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    let call = call_record(&server, &sent[1]).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(call["output"], json!({"message_id": "m-1"}));
    assert_eq!(
        actor_of(&call, "reconciled").as_deref(),
        Some("finance-ops")
    );
    // Nothing left to reconcile.
    let list = person.get("/inbox/reconcile").await;
    assert!(list.body.contains("No call needs reconciliation."));
    server.stop().await;
}

#[tokio::test]
async fn the_queue_pages_by_fifty_oldest_first_and_filters_by_tool() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut asked = Vec::new();
    for n in 0..52 {
        asked.push(
            suspend(
                &server,
                "ask_human",
                json!({"question": format!("Question {n}?")}),
            )
            .await,
        );
    }
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-p", "amount_cents": 20000, "reason": "paging"}),
    )
    .await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let first = person.get("/inbox").await;
    let links = |page: &Page| -> Vec<String> {
        page.body
            .split("href=\"/inbox/calls/")
            .skip(1)
            .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
            .collect()
    };
    let shown = links(&first);
    assert_eq!(shown, asked[..50], "the oldest 50, oldest first");
    let next = first
        .body
        .split("href=\"/inbox?after=")
        .nth(1)
        .expect("a next page");
    let next = &next[..next.find('"').unwrap()];
    let second = person.get(&format!("/inbox?after={next}")).await;
    let rest: Vec<String> = links(&second);
    assert_eq!(rest, [asked[50].clone(), asked[51].clone(), refund.clone()]);
    assert!(second.body.contains("First page"));
    // Filtered by tool.
    let refunds = person.get("/inbox?tool=issue_refund").await;
    assert_eq!(links(&refunds), std::slice::from_ref(&refund));
    assert!(
        refunds
            .body
            .contains("<option value=\"issue_refund\" selected>"),
        "the filter shows"
    );
    let fragment = person.get("/inbox/queue?tool=issue_refund").await;
    assert_eq!(links(&fragment), [refund]);
    assert!(!fragment.body.contains("<html"), "a fragment, not a page");
    let none = person.get("/inbox?tool=echo").await;
    assert!(none.body.contains("Nothing waits for a person in echo."));
    server.stop().await;
}

#[tokio::test]
async fn the_live_stream_needs_a_session_and_carries_no_token() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let mut stranger = Person::new(&server);
    assert_eq!(
        stranger.get("/inbox/events").await.status,
        StatusCode::UNAUTHORIZED
    );
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let mut stream = person
        .client
        .get(format!("{}/inbox/events", person.base))
        .header("cookie", person.cookie_header())
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(
        stream.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let call_id = suspend(&server, "ask_human", json!({"question": "Live?"})).await;
    let mut seen = String::new();
    while !seen.contains(&call_id) {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), stream.chunk())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: call.suspended"), "{seen}");
    assert!(seen.contains("\"reason\":\"Live?\""), "{seen}");
    assert!(
        !seen.contains("sus_"),
        "no suspension token reaches the page: {seen}"
    );
    server.stop().await;
}

async fn the_session_survives_a_restart(backend: Backend) {
    let at = Location::new(backend).await;
    let server = start(&at, |b| b).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    let csrf = page.csrf();
    server.stop().await;

    let server = start(&at, |b| b).await;
    person.base = server.api.base.clone();
    let queue = person.get("/inbox").await;
    assert!(
        queue
            .body
            .contains("Signed in as <strong>finance-ops</strong>"),
        "{}",
        queue.body
    );
    // The page's CSRF token, bound to the session, still holds too.
    let approved = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "after the restart"), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let call = call_record(&server, &asked).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(actor_of(&call, "approved").as_deref(), Some("finance-ops"));
    server.stop().await;
}

on_each_backend! {
    #[tokio::test] async fn the_session_survives_a_restart;
}
