//! Approval with edits (issue 35, §3), on the real binary and both backends: where a tool's
//! approval policy allows it (`edit_input = true`), an approver's `edited_input` is checked
//! against the tool's input schema, the tool runs with it, and the call keeps both inputs and
//! who edited; every door tells the caller (the REST answer and record, a repeated keyed
//! request, MCP, webhooks). Where the policy allows none, an edit is refused and decides
//! nothing. With several approvers an edit restarts the count. The inbox's input form edits too.

mod common;

use std::sync::{Arc, Mutex};

use common::browser::{Browser, Page};
use common::{Api, Backend, Binary, Location, Site, assert_error};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const ROOT: &str = "tg_root_0123456789abcdef";
const ALICE: &str = "tg_alice_0123456789abcdef";
const BOB: &str = "tg_bob_0123456789abcdef";

/// `[[auth.keys]]`: `root` (an admin, who makes the calls) and the approvers `alice` and `bob`.
fn keys() -> String {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    [("root", "admin", ROOT), ("alice", "approver", ALICE)]
        .into_iter()
        .chain([("bob", "approver", BOB)])
        .map(|(name, role, token)| {
            format!(
                "[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{}\"\n",
                hash(token)
            )
        })
        .collect()
}

/// The binary on `at` with the configuration `config`.
fn serve(at: &(impl Site + ?Sized), config: &str) -> Binary {
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    Binary::start_with(at, &["--config", path.to_str().unwrap()], &[])
}

/// One request as the key `token`, with an `Idempotency-Key` when `key` is given: the status,
/// the `Idempotent-Replayed` header and the body.
async fn request(
    api: &Api,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (StatusCode, bool, Value) {
    let mut request = api
        .client
        .request(method, format!("{}{path}", api.base))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    (status, replayed, response.json().await.unwrap())
}

async fn get_as(api: &Api, token: &str, path: &str) -> (StatusCode, Value) {
    let (status, _, body) = request(api, token, Method::GET, path, None, None).await;
    (status, body)
}

/// Approves `suspension` as `token`, with `edit` as the call's `edited_input` when given.
async fn approve_as(
    api: &Api,
    token: &str,
    suspension: &str,
    edit: Option<Value>,
) -> (StatusCode, Value) {
    let mut body = json!({"input": {"note": "checked"}});
    if let Some(edit) = edit {
        body["edited_input"] = edit;
    }
    let path = format!("/approvals/{suspension}/approve");
    let (status, _, body) = request(api, token, Method::POST, &path, Some(body), None).await;
    (status, body)
}

fn email(to: &str) -> Value {
    json!({"to": to, "subject": "quarterly numbers", "body": "attached"})
}

/// A `send_email` to `to` made by `root` (under the idempotency key `key`), suspended by its
/// policy: its call id and token.
async fn suspended_email(api: &Api, to: &str, key: Option<&str>) -> (String, String) {
    let body = json!({"input": email(to)});
    let path = "/tools/send_email/call";
    let (status, _, body) = request(api, ROOT, Method::POST, path, Some(body), key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = |value: &Value| value.as_str().unwrap().to_owned();
    (id(&body["call_id"]), id(&body["suspension"]["token"]))
}

/// The recipients of the emails `send_email` sent, in order.
fn sent_to(at: &(impl Site + ?Sized)) -> Vec<String> {
    common::outbox(at)
        .iter()
        .map(|line| line["to"].as_str().unwrap().to_owned())
        .collect()
}

/// The kinds of `call`'s events, with their actors.
fn history(call: &Value) -> Vec<(String, Value)> {
    call["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["actor"].clone()))
        .collect()
}

/// A local webhook receiver: the messages it was sent, and the `[[webhooks]]` table to send
/// to it.
async fn webhook_receiver() -> (Arc<Mutex<Vec<Value>>>, String) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = got.clone();
    let hook = move |body: String| {
        kept.lock()
            .unwrap()
            .push(serde_json::from_str(&body).unwrap());
        async { StatusCode::OK }
    };
    let app = axum::Router::new().route("/hook", axum::routing::post(hook));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let table = format!(
        "[[webhooks]]\nurl = \"{url}\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
         allow_private = true\n"
    );
    (got, table)
}

async fn an_approved_edit_runs_the_edited_input_and_every_door_says_so(backend: Backend) {
    let location = Location::new(backend).await;
    let (webhooks, table) = webhook_receiver().await;
    let config = format!(
        "{}{table}[tools.send_email.approval]\nedit_input = true\n\
         [tools.issue_refund.approval]\nwhen = \"input.amount_cents > 100\"\n",
        keys()
    );
    let server = serve(&location, &config);
    let api = &server.api;
    let (call_id, token) = suspended_email(api, "all@example.com", Some("quarterly-1")).await;
    let approval = format!("/approvals/{token}");

    // An edit that does not fit the tool's input schema: 422 with pointers; nothing decided.
    let bad = json!({"to": "ops@example.com", "subject": 7, "body": "b", "cc": "x"});
    let (status, body) = approve_as(api, ALICE, &token, Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let details = assert_error(&body, "invalid_input");
    let pointers: Vec<&str> = details["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|error| error["path"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/subject"), "{body}");
    let (status, pending) = get_as(api, ALICE, &approval).await;
    assert_eq!(status, StatusCode::OK, "still pending: {pending}");
    assert_eq!(pending["input"], email("all@example.com"));
    assert!(pending.get("original_input").is_none(), "{pending}");
    assert!(sent_to(&location).is_empty(), "nothing ran");

    // The edit that fits: the tool runs with it, and the answer says so.
    let edited = json!({"to": "ops@example.com", "subject": "quarterly numbers", "body": "v2"});
    let (status, body) = approve_as(api, ALICE, &token, Some(edited.clone())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["input"], edited);
    assert_eq!(body["original_input"], email("all@example.com"));
    assert_eq!(body["edited"]["by"], "alice");
    assert_eq!(sent_to(&location), ["ops@example.com"]);
    assert_eq!(common::outbox(&location)[0]["body"], "v2");

    // The record keeps both inputs, who edited, and the edit in its history.
    let (_, call) = get_as(api, ROOT, &format!("/calls/{call_id}")).await;
    assert_eq!(call["input"], edited, "{call}");
    assert_eq!(call["original_input"], email("all@example.com"));
    assert_eq!(call["edited"]["by"], "alice");
    assert!(call["edited"]["at"].is_string(), "{call}");
    let kinds: Vec<_> = history(&call).into_iter().map(|(kind, _)| kind).collect();
    let expected = ["created", "suspended", "edited", "approved", "redispatched"];
    assert_eq!(kinds[..5], expected, "{call}");
    let event = &call["events"][2];
    assert_eq!(event["actor"], "alice");
    assert_eq!(event["details"]["input"], edited);

    // A repeated request under the call's key (as the caller made it) is answered the edited
    // outcome; nothing runs again.
    let path = "/tools/send_email/call";
    let body = Some(json!({"input": email("all@example.com")}));
    let (status, replayed, again) =
        request(api, ROOT, Method::POST, path, body, Some("quarterly-1")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert!(replayed);
    assert_eq!(again["call_id"], call_id.as_str());
    assert_eq!(again["edited"]["by"], "alice");
    assert_eq!(again["original_input"], email("all@example.com"));
    assert_eq!(sent_to(&location).len(), 1);

    // MCP: the result's text says what ran instead.
    let params = json!({"name": "toolgate_await_call",
                        "arguments": {"call_id": call_id, "wait_seconds": 0}});
    let (status, _, answer) = common::mcp_request(api, ROOT, "tools/call", params).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let texts: Vec<&str> = answer["result"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect();
    let said = texts.join("\n");
    assert!(said.contains("(alice) edited this call's input"), "{said}");
    assert!(said.contains("ops@example.com") && said.contains("all@example.com"));

    // The webhook of its outcome names the edit.
    let message = common::eventually("the call.completed webhook", async || {
        let got = webhooks.lock().unwrap().clone();
        got.into_iter().find(|m| m["type"] == "call.completed")
    })
    .await;
    assert_eq!(message["data"]["edited"]["by"], "alice", "{message}");
    assert_eq!(message["data"]["input"], edited);
    assert_eq!(message["data"]["original_input"], email("all@example.com"));
    let suspended = webhooks.lock().unwrap().clone();
    let suspended = suspended.iter().find(|m| m["type"] == "call.suspended");
    assert!(suspended.unwrap()["data"].get("edited").is_none());

    // Where the policy allows no edits, an edit is refused and decides nothing.
    let refund = json!({"order_id": "A-1", "amount_cents": 5000, "reason": "damaged"});
    let body = Some(json!({"input": refund}));
    let path = "/tools/issue_refund/call";
    let (status, _, body) = request(api, ROOT, Method::POST, path, body, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    let smaller = json!({"order_id": "A-1", "amount_cents": 50, "reason": "damaged"});
    let (status, body) = approve_as(api, ALICE, &token, Some(smaller)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        assert_error(&body, "edit_not_allowed")["tool"],
        "issue_refund"
    );
    let (status, pending) = get_as(api, ALICE, &format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::OK, "still pending: {pending}");
    assert_eq!(pending["input"]["amount_cents"], 5000);
}

/// A server whose `send_email` needs two approvers and allows edits, on `backend`.
async fn two_approvers(backend: Backend) -> (Location, Binary) {
    let location = Location::new(backend).await;
    let config = format!(
        "{}[tools.send_email.approval]\napprovals = 2\nedit_input = true\n",
        keys()
    );
    let server = serve(&location, &config);
    (location, server)
}

async fn with_two_approvers_an_edit_restarts_the_count(backend: Backend) {
    let (location, server) = two_approvers(backend).await;
    let api = &server.api;

    // Alice edits (her approval counts first, of her edit); Bob approves what he sees: it
    // runs with Alice's edit.
    let (call_id, token) = suspended_email(api, "all@example.com", None).await;
    let edited = email("board@example.com");
    let (status, body) = approve_as(api, ALICE, &token, Some(edited.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["approvals"].as_array().unwrap().len(), 1, "{body}");
    let (status, shown) = get_as(api, BOB, &format!("/approvals/{token}")).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["input"], edited, "the input as it stands");
    assert_eq!(shown["original_input"], email("all@example.com"));
    assert_eq!(shown["edited"]["by"], "alice");
    assert!(sent_to(&location).is_empty());
    let (status, body) = approve_as(api, BOB, &token, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(sent_to(&location), ["board@example.com"]);
    let (_, call) = get_as(api, ROOT, &format!("/calls/{call_id}")).await;
    assert_eq!(call["edited"]["by"], "alice", "{call}");
    assert_eq!(call["original_input"], email("all@example.com"));
    let actors: Vec<_> = history(&call).into_iter().skip(2).take(3).collect();
    let expected = [
        ("edited".to_owned(), json!("alice")),
        ("approval_recorded".to_owned(), json!("alice")),
        ("approved".to_owned(), json!("bob")),
    ];
    assert_eq!(actors, expected, "{call}");

    // Alice approves as called; Bob edits: the count restarts, with his approval alone, and
    // nothing runs until a second approval of his edit (Alice's, again).
    let (call_id, token) = suspended_email(api, "all@example.com", None).await;
    let (status, body) = approve_as(api, ALICE, &token, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let edited = email("audit@example.com");
    let (status, body) = approve_as(api, BOB, &token, Some(edited.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let approvers: Vec<_> = body["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|vote| vote["approver"].clone())
        .collect();
    assert_eq!(approvers, [json!("bob")], "the count restarted: {body}");
    assert_eq!(sent_to(&location).len(), 1, "not run on one approval");
    let (_, shown) = get_as(api, ALICE, &format!("/approvals/{token}")).await;
    assert_eq!(shown["input"], edited);
    assert_eq!(shown["approvals"].as_array().unwrap().len(), 1, "{shown}");
    // Bob's approval again (no edit) is his second of the same input: refused.
    let (status, body) = approve_as(api, BOB, &token, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_error(&body, "already_approved");
    let (status, body) = approve_as(api, ALICE, &token, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(sent_to(&location)[1], "audit@example.com");
    let (_, call) = get_as(api, ROOT, &format!("/calls/{call_id}")).await;
    assert_eq!(call["input"], edited);
    assert_eq!(call["edited"]["by"], "bob", "{call}");
}

/// The value of the first `name="<name>" value="…"` in `page`.
fn value_of<'p>(page: &'p str, name: &str) -> Option<&'p str> {
    let marker = format!("name=\"{name}\"");
    let at = page.find(&marker)? + marker.len();
    let rest = &page[at..];
    let start = rest.find("value=\"")? + "value=\"".len();
    let end = start + rest[start..].find('"')?;
    Some(&rest[start..end])
}

async fn an_inbox_approver_edits_the_input_in_its_form(backend: Backend) {
    let location = Location::new(backend).await;
    let server = serve(
        &location,
        "[tools.send_email.approval]\nedit_input = true\n",
    );
    let api = &server.api;
    let (status, body) = api.call("send_email", email("all@example.com")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let page_path = format!("/inbox/calls/{call_id}");
    let approve = format!("{page_path}/approve");

    // The page offers the tool's input form, filled with the call's input.
    let mut person = Browser::at(&api.base);
    let Page {
        status, body: page, ..
    } = person.get(&page_path).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(value_of(&page, "e/to"), Some("all@example.com"), "{page}");
    assert_eq!(value_of(&page, "edit"), Some("1"));
    let csrf = value_of(&page, "csrf").unwrap().to_owned();

    // An edit that does not fit (an empty recipient, left out): refused at its field, as the
    // tool's input schema says; nothing runs.
    let mut form = vec![
        ("csrf", csrf.as_str()),
        ("v/note", ""),
        ("edit", "1"),
        ("e/to", ""),
        ("e/subject", "quarterly numbers"),
        ("e/body", "attached"),
    ];
    let Page {
        status,
        body: refused,
        ..
    } = person.post(&approve, &form).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(refused.contains("edit-problems"), "the edit form's refusal");
    assert!(sent_to(&location).is_empty());

    // A write: the first post shows the confirmation, carrying the edit; the second approves.
    form[3] = ("e/to", "ops@example.com");
    let Page {
        status,
        body: confirm,
        ..
    } = person.post(&approve, &form).await;
    assert_eq!(status, StatusCode::OK, "{confirm}");
    assert_eq!(value_of(&confirm, "e/to"), Some("ops@example.com"));
    assert!(
        confirm.contains("id=\"confirm-edit\""),
        "the edit is shown to confirm"
    );
    assert!(sent_to(&location).is_empty(), "not before the confirmation");
    form.push(("confirm", "1"));
    let Page {
        status, body: done, ..
    } = person.post(&approve, &form).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{done}");
    assert_eq!(sent_to(&location), ["ops@example.com"]);
    let (_, call) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(call["input"]["to"], "ops@example.com", "{call}");
    assert_eq!(call["original_input"], email("all@example.com"));
    assert!(call["edited"]["at"].is_string(), "{call}");
    let page = person.get(&page_path).await.body;
    assert!(
        page.contains("id=\"edit-note\""),
        "the page says it was edited"
    );
}

/// The page's approve form posted with its edit, as `person` leaves it (`to` as the recipient),
/// and confirmed (`send_email` is a write): the answer to the confirmation.
async fn approve_on_the_page(person: &mut Browser, call_id: &str, to: &str) -> StatusCode {
    let page = person.get(&format!("/inbox/calls/{call_id}")).await.body;
    let csrf = value_of(&page, "csrf").unwrap().to_owned();
    let form = [
        ("csrf", csrf.as_str()),
        ("edit", "1"),
        ("e/to", to),
        ("e/subject", "quarterly numbers"),
        ("e/body", "attached"),
        ("confirm", "1"),
    ];
    person
        .post(&format!("/inbox/calls/{call_id}/approve"), &form)
        .await
        .status
}

async fn on_the_page_an_edit_restarts_the_count_and_the_next_approver_reads_it(backend: Backend) {
    let (location, server) = two_approvers(backend).await;
    let api = &server.api;
    let (call_id, token) = suspended_email(api, "all@example.com", None).await;
    let (status, _) = approve_as(api, ALICE, &token, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);

    // Bob edits on the page: the count restarts with his approval alone.
    let mut bob = Browser::at(&api.base);
    assert_eq!(
        bob.sign_in(BOB).await.status,
        StatusCode::SEE_OTHER,
        "signed in"
    );
    let status = approve_on_the_page(&mut bob, &call_id, "board@example.com").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, shown) = get_as(api, ALICE, &format!("/approvals/{token}")).await;
    assert_eq!(shown["input"]["to"], "board@example.com", "{shown}");
    assert_eq!(shown["approvals"][0]["approver"], "bob", "{shown}");
    assert!(sent_to(&location).is_empty());

    // Alice's page shows Bob's edit, in the form too, and lets her approve again: left as it
    // is, her approval is of that input, the second, and it runs.
    let mut alice = Browser::at(&api.base);
    assert_eq!(
        alice.sign_in(ALICE).await.status,
        StatusCode::SEE_OTHER,
        "signed in"
    );
    let page = alice.get(&format!("/inbox/calls/{call_id}")).await.body;
    assert!(page.contains("id=\"edit-note\""), "{page}");
    assert!(page.contains("1 of 2 approvals: bob."), "{page}");
    assert_eq!(value_of(&page, "e/to"), Some("board@example.com"));
    let status = approve_on_the_page(&mut alice, &call_id, "board@example.com").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(sent_to(&location), ["board@example.com"]);
    let (_, call) = get_as(api, ROOT, &format!("/calls/{call_id}")).await;
    assert_eq!(call["edited"]["by"], "bob", "{call}");
}

crate::on_each_backend! {
    #[tokio::test] async fn an_approved_edit_runs_the_edited_input_and_every_door_says_so;
    #[tokio::test] async fn with_two_approvers_an_edit_restarts_the_count;
    #[tokio::test] async fn an_inbox_approver_edits_the_input_in_its_form;
    #[tokio::test] async fn on_the_page_an_edit_restarts_the_count_and_the_next_approver_reads_it;
}
