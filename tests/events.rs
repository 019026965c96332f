//! `GET /events`: the change feed as Server-Sent Events, resumed exactly after an event's id,
//! across a restart, on both backends; the calls a principal sees there are those it lists and
//! reads (an escalation's too); an approval short of its quorum names its approver and the
//! progress.

mod common;

use std::time::Duration;

use common::{Api, Backend, Binary, Location, Site, TestServer, assert_error};
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::store::Timestamp;

/// An open event stream, read event by event.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

/// One event: its type, id and data.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    kind: String,
    id: String,
    data: Value,
}

impl Events {
    async fn open(server: &TestServer, path: &str, last_id: Option<&str>) -> Events {
        Events::open_on(&server.api, path, last_id, None).await
    }

    /// `path` opened on `api`, after `last_id`, as the key `bearer`.
    async fn open_on(api: &Api, path: &str, last_id: Option<&str>, bearer: Option<&str>) -> Events {
        let mut request = api.client.get(format!("{}{path}", api.base));
        if let Some(id) = last_id {
            request = request.header("last-event-id", id);
        }
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next event (comments skipped), waiting at most 30 s.
    async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut kind = None;
                    let mut id = None;
                    let mut data = String::new();
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            kind = Some(v.trim().to_owned());
                        } else if let Some(v) = line.strip_prefix("id:") {
                            id = Some(v.trim().to_owned());
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.trim_start());
                        }
                    }
                    if let (Some(kind), Some(id)) = (kind, id) {
                        let data = serde_json::from_str(&data).expect("data is JSON");
                        return Received { kind, id, data };
                    }
                    continue;
                }
                let chunk = self
                    .response
                    .chunk()
                    .await
                    .unwrap()
                    .expect("the stream goes on");
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .expect("an event came")
    }
}

async fn ask(server: &TestServer) -> (String, String) {
    let (status, body) = server
        .api
        .call("ask_human", json!({"question": "Stream?"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    (
        body["call_id"].as_str().unwrap().to_owned(),
        body["suspension"]["token"].as_str().unwrap().to_owned(),
    )
}

async fn the_stream_shows_each_change_and_resumes_exactly_after_an_id(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    // Made before the stream opened. It starts after the newest entry that is final: on a shared
    // database, one committed while another transaction of the cluster is still open may come
    // after that point, so this one may be shown; nothing older is.
    let (before, _) = ask(&server).await;
    let mut events = Events::open(&server, "/events", None).await;
    let mut completed_only = Events::open(&server, "/events?types=call.completed", None).await;
    let (call_id, token) = ask(&server).await;
    let (status, _) = server.api.approve(&token, json!({"answer": "ok"})).await;
    assert_eq!(status, StatusCode::OK);
    let (other, _) = ask(&server).await;

    let mut suspended = events.next().await;
    if suspended.data["call"]["call_id"] == before.as_str() {
        suspended = events.next().await;
    }
    assert_eq!(suspended.kind, "call.suspended");
    assert_eq!(suspended.data["type"], "call.suspended");
    assert_eq!(suspended.data["call"]["call_id"], call_id.as_str());
    assert_eq!(suspended.data["call"]["status"], "suspended");
    assert_eq!(suspended.data["suspension"]["reason"], "Stream?");
    assert_eq!(suspended.data["suspension"]["token"], token.as_str());
    let completed = events.next().await;
    assert_eq!(completed.kind, "call.completed");
    assert_eq!(completed.data["call"]["call_id"], call_id.as_str());
    assert_eq!(completed.data["call"]["attempts"], 2);
    let third = events.next().await;
    assert_eq!(third.data["call"]["call_id"], other.as_str());
    assert_eq!(completed_only.next().await, completed);

    // Resumed after the first: exactly the ones after it, with the same ids.
    let mut resumed = Events::open(&server, "/events", Some(&suspended.id)).await;
    assert_eq!(resumed.next().await, completed);
    assert_eq!(resumed.next().await, third);
    let mut by_query =
        Events::open(&server, &format!("/events?after={}", completed.id), None).await;
    assert_eq!(by_query.next().await, third);

    // Bad requests are answered, not streamed.
    for bad in [
        "/events?types=call.exploded",
        "/events?after=nonsense",
        "/events?colour=red",
    ] {
        let (status, body) = server.api.get(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_error(&body, "bad_request");
    }
    drop((events, completed_only, resumed, by_query));
    server.stop().await;
}

async fn a_stream_resumes_across_a_restart_and_an_expired_cursor_is_410(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let mut events = Events::open(&server, "/events", None).await;
    ask(&server).await;
    let first = events.next().await;
    let (second_call, _) = ask(&server).await;
    let second = events.next().await;
    drop(events);
    server.stop().await;

    let server = TestServer::examples(&location).await;
    let (third_call, _) = ask(&server).await;
    let mut resumed = Events::open(&server, "/events", Some(&first.id)).await;
    assert_eq!(resumed.next().await, second);
    assert_eq!(second.data["call"]["call_id"], second_call.as_str());
    let third = resumed.next().await;
    assert_eq!(third.data["call"]["call_id"], third_call.as_str());
    drop(resumed);

    // Pruned past it: the cursor has missed entries, and is told so.
    common::eventually("the feed is pruned", async || {
        let dropped = server
            .store
            .prune_feed(Timestamp(Timestamp::now().0 + 1))
            .await
            .unwrap();
        (dropped > 0).then_some(())
    })
    .await;
    let (status, body) = server.api.get(&format!("/events?after={}", first.id)).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert_error(&body, "cursor_expired");
    server.stop().await;
}

const ROOT: &str = "tg_root_0123456789abcdef";
const ALICE: &str = "tg_alice_0123456789abcdef";
const DESK: &str = "tg_desk_0123456789abcdef";
const MANAGER: &str = "tg_manager_0123456789abcdef";

/// The binary on `at` with `[[auth.keys]]` `root` (admin), `alice` (an approver of every
/// tool), `desk` (an approver of `ask_*`) and `manager` (an approver of none but the
/// `escalations` group), then `config`.
fn serve_with_keys(at: &(impl Site + ?Sized), config: &str) -> Binary {
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    let mut file = String::new();
    for (name, role, token, decides) in [
        ("root", "admin", ROOT, None),
        ("alice", "approver", ALICE, None),
        ("desk", "approver", DESK, Some("ask_*")),
        ("manager", "approver", MANAGER, Some("escalations")),
    ] {
        file += &format!(
            "[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{}\"\n",
            hash(token)
        );
        if let Some(decides) = decides {
            file += &format!("decides = [\"{decides}\"]\n");
        }
    }
    file += config;
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(&path, file).unwrap();
    Binary::start_with(at, &["--config", path.to_str().unwrap()], &[])
}

async fn as_key(
    api: &Api,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, body) = common::send(api, method, path, body, Some(token)).await;
    (status, body)
}

async fn get_as(api: &Api, token: &str, path: &str) -> (StatusCode, Value) {
    as_key(api, token, reqwest::Method::GET, path, None).await
}

/// A `send_email` by `root`, which waits for a person: its call id and token.
async fn suspended_email(api: &Api) -> (String, String) {
    let input = json!({"to": "cfo@example.com", "subject": "numbers", "body": "attached"});
    let (status, body) = as_key(
        api,
        ROOT,
        reqwest::Method::POST,
        "/tools/send_email/call",
        Some(json!({"input": input})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    (
        body["call_id"].as_str().unwrap().to_owned(),
        body["suspension"]["token"].as_str().unwrap().to_owned(),
    )
}

/// The ids of the calls `token` lists (`GET /calls`).
async fn listed(api: &Api, token: &str) -> Vec<String> {
    let (status, body) = get_as(api, token, "/calls").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["call_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Whom an escalation of a call reached lists it, reads it and streams its events, from the
/// escalation on (and after it decided it); before, and for anyone else, the call is absent
/// from all three alike.
async fn an_escalation_lets_whom_it_reached_list_read_and_stream_the_call(backend: Backend) {
    let location = Location::new(backend).await;
    let server = serve_with_keys(
        &location,
        "[tools.send_email.approval]\nescalate_after_s = 1\nescalate_to = [\"escalations\"]\n",
    );
    let api = &server.api;
    let mut manager_events = Events::open_on(api, "/events", None, Some(MANAGER)).await;
    let (call_id, token) = suspended_email(api).await;
    let call = format!("/calls/{call_id}");
    // Not escalated yet: the manager neither lists nor reads it.
    assert!(!listed(api, MANAGER).await.contains(&call_id));
    let (status, _) = get_as(api, MANAGER, &call).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    common::eventually("the approval is escalated", async || {
        let (_, body) = get_as(api, ROOT, &format!("/approvals/{token}")).await;
        body.get("escalated_at").is_some().then_some(())
    })
    .await;
    assert!(listed(api, MANAGER).await.contains(&call_id), "listed");
    let (status, read) = get_as(api, MANAGER, &call).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["status"], "suspended");
    // The stream shows the escalation (the suspension came before it reached the manager).
    let mut escalated = manager_events.next().await;
    if escalated.kind == "call.suspended" {
        escalated = manager_events.next().await;
    }
    assert_eq!(escalated.kind, "call.escalated", "{:?}", escalated.data);
    assert_eq!(escalated.data["call"]["call_id"], call_id.as_str());
    // Others it did not reach still see nothing of it.
    assert!(!listed(api, DESK).await.contains(&call_id));
    let (status, _) = get_as(api, DESK, &call).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Decided by the manager, it stays the manager's to list, read and follow.
    let (status, body) = as_key(
        api,
        MANAGER,
        reqwest::Method::POST,
        &format!("/approvals/{token}/approve"),
        Some(json!({"input": {"note": "approved on escalation"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let completed = manager_events.next().await;
    assert_eq!(completed.kind, "call.completed", "{:?}", completed.data);
    assert_eq!(completed.data["call"]["call_id"], call_id.as_str());
    assert!(listed(api, MANAGER).await.contains(&call_id));
    // Resumed after the escalation (and filtered by tool), it goes on with what followed.
    let mut resumed = Events::open_on(
        api,
        "/events?tool=send_email",
        Some(&escalated.id),
        Some(MANAGER),
    )
    .await;
    assert_eq!(resumed.next().await, completed);
    drop((manager_events, resumed));
    server.kill();
}

/// An approval short of the quorum is a `call.approval_recorded` event that names its approver
/// and the progress, as `GET /approvals/{token}` does.
async fn an_approval_short_of_the_quorum_names_its_approver_and_the_progress(backend: Backend) {
    let location = Location::new(backend).await;
    let server = serve_with_keys(&location, "[tools.send_email.approval]\napprovals = 2\n");
    let api = &server.api;
    let mut events = Events::open_on(
        api,
        "/events?types=call.approval_recorded",
        None,
        Some(ROOT),
    )
    .await;
    let (call_id, token) = suspended_email(api).await;
    let (status, body) = as_key(
        api,
        ALICE,
        reqwest::Method::POST,
        &format!("/approvals/{token}/approve"),
        Some(json!({"input": {"note": "looks right"}})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    let recorded = events.next().await;
    assert_eq!(recorded.kind, "call.approval_recorded");
    let data = &recorded.data;
    assert_eq!(data["call"]["call_id"], call_id.as_str());
    assert_eq!(data["call"]["status"], "suspended");
    assert_eq!(data["approvals_required"], 2, "{data}");
    let approvals = data["approvals"].as_array().expect("the approvals so far");
    assert_eq!(approvals.len(), 1, "{data}");
    assert_eq!(approvals[0]["approver"], "alice");
    // Named as the approval's own page names them.
    let (_, shown) = get_as(api, ROOT, &format!("/approvals/{token}")).await;
    assert_eq!(data["approvals"], shown["approvals"], "{shown}");
    assert_eq!(data["approvals_required"], shown["approvals_required"]);
    drop(events);
    server.kill();
}

crate::on_each_backend! {
    #[tokio::test] async fn the_stream_shows_each_change_and_resumes_exactly_after_an_id;
    #[tokio::test] async fn a_stream_resumes_across_a_restart_and_an_expired_cursor_is_410;
    #[tokio::test] async fn an_escalation_lets_whom_it_reached_list_read_and_stream_the_call;
    #[tokio::test] async fn an_approval_short_of_the_quorum_names_its_approver_and_the_progress;
}
