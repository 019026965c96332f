//! `GET /events`: the change feed as Server-Sent Events, resumed exactly after an event's id,
//! across a restart, on both backends.

mod common;

use std::time::Duration;

use common::{Backend, Location, TestServer, assert_error};
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
        let mut request = server.api.client.get(format!("{}{path}", server.api.base));
        if let Some(id) = last_id {
            request = request.header("last-event-id", id);
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

crate::on_each_backend! {
    #[tokio::test] async fn the_stream_shows_each_change_and_resumes_exactly_after_an_id;
    #[tokio::test] async fn a_stream_resumes_across_a_restart_and_an_expired_cursor_is_410;
}
