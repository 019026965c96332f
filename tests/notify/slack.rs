//! Slack: messages posted to each person who may decide (a direct message: the channel is their
//! user id) and to the channel, against a stand-in for Slack's Web API that answers as Slack
//! does; a `429` with `Retry-After` honoured; the posted blocks judged by Slack's SDK
//! (`tests/slack/check_blocks.py`); every message updated (`chat.update`, the `channel` and
//! `ts` Slack answered) once the approval is decided on another door (REST, the inbox's page),
//! an update waiting for its post; a refusal (`channel_not_found`) failed for good, its message
//! never updated.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::response::IntoResponse;
use serde_json::json;

use super::*;
use crate::common::browser::Browser;
use crate::common::{Backend, Location};

/// A request the stand-in got.
#[derive(Debug, Clone)]
struct Got {
    method: String,
    authorization: String,
    body: Value,
    at: Instant,
}

/// A stand-in for Slack's Web API: records every request; answers the first `limited`
/// requests `429` with `Retry-After: 1`, then as Slack does (`ok`, the conversation's id, a
/// `ts`; `channel_not_found` for `C0GONE`).
#[derive(Clone)]
struct FakeSlack {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
}

impl FakeSlack {
    async fn start(limited: usize) -> FakeSlack {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let got: Arc<Mutex<Vec<Got>>> = Arc::default();
        let kept = got.clone();
        let app = axum::Router::new().route(
            "/api/{method}",
            axum::routing::post(
                move |axum::extract::Path(method): axum::extract::Path<String>,
                      headers: HeaderMap,
                      body: String| {
                    let got = kept.clone();
                    async move {
                        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                        let authorization = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let n = {
                            let mut got = got.lock().unwrap();
                            got.push(Got {
                                method: method.clone(),
                                authorization,
                                body: body.clone(),
                                at: Instant::now(),
                            });
                            got.len()
                        };
                        if n <= limited {
                            return (AxumStatus::TOO_MANY_REQUESTS, [("retry-after", "1")], "")
                                .into_response();
                        }
                        // As Slack answers for a channel the bot is not in.
                        if body["channel"] == "C0GONE" {
                            return axum::Json(json!({"ok": false, "error": "channel_not_found"}))
                                .into_response();
                        }
                        // A user's DM lives in a conversation of its own (D...); a channel is
                        // itself.
                        let channel = body["channel"].as_str().unwrap_or("").to_owned();
                        let conversation = match channel.strip_prefix('U') {
                            Some(rest) => format!("D{rest}"),
                            None => channel,
                        };
                        let ts = match method.as_str() {
                            "chat.update" => body["ts"].as_str().unwrap_or("").to_owned(),
                            _ => format!("1700000000.{n:06}"),
                        };
                        axum::Json(json!({"ok": true, "channel": conversation, "ts": ts}))
                            .into_response()
                    }
                },
            ),
        );
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeSlack { addr, got }
    }

    fn got(&self, method: &str) -> Vec<Got> {
        let got = self.got.lock().unwrap();
        got.iter().filter(|g| g.method == method).cloned().collect()
    }

    async fn wait_for(&self, method: &str, count: usize) -> Vec<Got> {
        common::eventually(&format!("{count} {method}"), async || {
            let got = self.got(method);
            (got.len() >= count).then_some(got)
        })
        .await
    }
}

/// The conversations of `got`, sorted.
fn channels(got: &[Got]) -> Vec<String> {
    let mut channels: Vec<String> = got
        .iter()
        .map(|g| g.body["channel"].as_str().unwrap().to_owned())
        .collect();
    channels.sort();
    channels.dedup();
    channels
}

/// A stand-in answering the first `limited` requests 429, and a server on `backend` with a
/// Slack channel to it that also posts to `C0FINANCE`.
async fn with_slack(backend: Backend, limited: usize) -> (FakeSlack, Location, TestServer) {
    with_slack_to(backend, limited, "C0FINANCE").await
}

/// As [`with_slack`], the channel also posting to `also`.
async fn with_slack_to(
    backend: Backend,
    limited: usize,
    also: &str,
) -> (FakeSlack, Location, TestServer) {
    let slack = FakeSlack::start(limited).await;
    let location = Location::new(backend).await;
    let channel = format!("slack-{}", slack.addr.port());
    let file = format!(
        "{}{POLICY}[[notify]]\nname = \"{channel}\"\nkind = \"slack\"\n\
         bot_token_env = \"SLACK_TEST_TOKEN\"\napi_url = \"http://{}/api\"\n\
         channel = \"{also}\"\n",
        keys_and_people(),
        slack.addr
    );
    let server = serve(&location, &file).await;
    (slack, location, server)
}

/// Approves `token` as alice, on the REST door.
async fn approve_as_alice(server: &TestServer, token: &str) {
    let (status, _, body) = common::send(
        &server.api,
        reqwest::Method::POST,
        &format!("/approvals/{token}/approve"),
        Some(json!({"input": {}})),
        Some(ALICE),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// The conversation and `ts` of each Slack message posted, as the deliveries' receipts keep
/// them, sorted.
fn receipts(delivered: &[Value]) -> Vec<(String, String)> {
    let mut receipts: Vec<(String, String)> = delivered
        .iter()
        .filter(|d| d["type"] == "call.suspended")
        .map(|d| {
            let receipt: Value = serde_json::from_str(d["receipt"].as_str().unwrap()).unwrap();
            let part = |key: &str| receipt[key].as_str().unwrap().to_owned();
            (part("channel"), part("ts"))
        })
        .collect();
    receipts.sort();
    receipts
}

/// The conversation and `ts` each update edits, sorted.
fn edited(updates: &[Got]) -> Vec<(String, String)> {
    let mut edited: Vec<(String, String)> = updates
        .iter()
        .map(|u| {
            let part = |key: &str| u.body[key].as_str().unwrap().to_owned();
            (part("channel"), part("ts"))
        })
        .collect();
    edited.sort();
    edited
}

async fn each_approver_is_messaged_and_every_message_updated_once_decided(backend: Backend) {
    let (slack, _location, server) = with_slack(backend, 1).await;

    let asked = ask_echo(&server.api, AGENT, "<!channel> *refund* everyone").await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    // One post for alice, bob and the channel; the first was answered 429 and sent again.
    let posts = slack.wait_for("chat.postMessage", 4).await;
    assert_eq!(
        channels(&posts),
        ["C0FINANCE", "U0ALICE", "U0BOB"],
        "the people who may decide, by DM, and the channel: not erin (decides issue_refund), \
         dave (no Slack user) or agent (the caller)"
    );
    assert!(
        posts
            .iter()
            .all(|p| p.authorization == format!("Bearer {SLACK_TOKEN}")),
        "the bot token: {posts:?}"
    );
    let limited = &posts[0];
    let again = posts[1..]
        .iter()
        .find(|p| p.body["channel"] == limited.body["channel"])
        .expect("the limited post is sent again");
    assert!(
        again.at.duration_since(limited.at) >= Duration::from_millis(900),
        "Retry-After: 1 is honoured (the backoff alone is 100 ms)"
    );
    let summaries =
        common::judged_by_slack_sdk(&posts.iter().map(|p| p.body.clone()).collect::<Vec<_>>());
    let texts = summaries[1].to_string();
    assert!(texts.contains("echo"), "{texts}");
    assert!(!texts.contains("<!channel>"), "no broadcast: {texts}");
    assert!(
        posts[1]
            .body
            .to_string()
            .contains(&format!("\"value\":\"{token}\"")),
        "the buttons name the approval: {}",
        posts[1].body
    );

    // Decided on another door (REST, as alice): each message is updated, in its conversation.
    approve_as_alice(&server, token).await;
    let updates = slack.wait_for("chat.update", 3).await;
    assert_eq!(channels(&updates), ["C0FINANCE", "D0ALICE", "D0BOB"]);
    for update in &updates {
        assert!(
            update.body.to_string().contains("alice"),
            "who decided: {update:?}"
        );
        assert!(
            !update.body.to_string().contains("toolgate_approve"),
            "no buttons once decided: {update:?}"
        );
    }
    common::judged_by_slack_sdk(&updates.iter().map(|u| u.body.clone()).collect::<Vec<_>>());

    // The admin sees six delivered: three posts, three updates; nothing more is sent.
    let delivered = notifications(&server.api, "delivered", 6).await;
    assert_eq!(delivered.len(), 6, "{delivered:?}");
    // Each update edits what a post's receipt names: the conversation and ts Slack answered.
    assert_eq!(receipts(&delivered).len(), 3, "{delivered:?}");
    assert_eq!(edited(&updates), receipts(&delivered));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(slack.got("chat.postMessage").len(), 4);
    assert_eq!(slack.got("chat.update").len(), 3);
    server.stop().await;
}

async fn an_update_waits_for_the_message_it_updates(backend: Backend) {
    // Every post is answered 429 first: the approval is decided before any is posted.
    let (slack, _location, server) = with_slack(backend, 3).await;
    let asked = ask_echo(&server.api, AGENT, "quick").await;
    slack.wait_for("chat.postMessage", 3).await;
    approve_as_alice(&server, asked["suspension"]["token"].as_str().unwrap()).await;
    let updates = slack.wait_for("chat.update", 3).await;
    let delivered = notifications(&server.api, "delivered", 6).await;
    assert_eq!(
        edited(&updates),
        receipts(&delivered),
        "each update edits a posted message"
    );
    let got = slack.got.lock().unwrap().clone();
    for update in &updates {
        let posted = got
            .iter()
            .rposition(|g| {
                g.method == "chat.postMessage"
                    && g.body["text"].is_string()
                    && update.body["channel"]
                        .as_str()
                        .unwrap()
                        .ends_with(&g.body["channel"].as_str().unwrap()[1..])
            })
            .unwrap();
        let updated = got.iter().position(|g| g.at == update.at).unwrap();
        assert!(posted < updated, "posted, then updated: {got:?}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_slack_fails_that_message_for_good() {
    let (slack, _location, server) = with_slack_to(Backend::Sqlite, 0, "C0GONE").await;
    let asked = ask_echo(&server.api, AGENT, "to nowhere").await;
    let failed = notifications(&server.api, "failed", 1).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["recipient"], "C0GONE");
    assert_eq!(failed[0]["attempts"], 1, "not retried: {failed:?}");
    assert!(
        failed[0]["last_error"]
            .as_str()
            .unwrap()
            .contains("channel_not_found"),
        "{failed:?}"
    );
    notifications(&server.api, "delivered", 2).await;
    // Decided: the two posted messages are updated; the one never posted is not.
    approve_as_alice(&server, asked["suspension"]["token"].as_str().unwrap()).await;
    let updates = slack.wait_for("chat.update", 2).await;
    assert_eq!(channels(&updates), ["D0ALICE", "D0BOB"]);
    let failed = notifications(&server.api, "failed", 2).await;
    assert!(
        failed
            .iter()
            .any(|d| d["last_error"].as_str().unwrap().contains("never posted")),
        "{failed:?}"
    );
    assert_eq!(slack.got("chat.update").len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_in_the_inbox_updates_every_message() {
    let (slack, _location, server) = with_slack(Backend::Sqlite, 0).await;
    let asked = ask_echo(&server.api, AGENT, "decided on the page").await;
    let call_id = asked["call_id"].as_str().unwrap().to_owned();
    slack.wait_for("chat.postMessage", 3).await;

    // bob signs in to the inbox with his key and approves on the call's page.
    let mut bob = Browser::new(&server);
    let signed_in = bob.sign_in(BOB).await;
    assert_eq!(
        signed_in.status,
        reqwest::StatusCode::SEE_OTHER,
        "signed in"
    );
    let page = bob.get(&format!("/inbox/calls/{call_id}")).await;
    assert_eq!(page.status, reqwest::StatusCode::OK);
    let approved = bob
        .post(
            &format!("/inbox/calls/{call_id}/approve"),
            &[("csrf", &page.csrf())],
        )
        .await;
    assert!(
        approved.status.is_success() || approved.status.is_redirection(),
        "{}",
        approved.body
    );

    // Every message says who decided, in the inbox, and has no buttons left.
    let updates = slack.wait_for("chat.update", 3).await;
    assert_eq!(channels(&updates), ["C0FINANCE", "D0ALICE", "D0BOB"]);
    for update in &updates {
        let body = update.body.to_string();
        assert!(body.contains("bob"), "who decided: {body}");
        assert!(!body.contains("toolgate_approve"), "no buttons: {body}");
    }
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_update_waits_for_the_message_it_updates;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_approver_is_messaged_and_every_message_updated_once_decided;
}
