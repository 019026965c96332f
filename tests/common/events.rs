//! An open `GET /events` stream as a key sees it, read until an event about a given call.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::Api;

/// The next events of an open `/events` stream, until one about `last_call` (included).
pub async fn events_until(response: &mut reqwest::Response, last_call: &str) -> Vec<Value> {
    let mut buffer = String::new();
    let mut events = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let data: String = block
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                let event: Value = serde_json::from_str(&data).unwrap();
                let done = event["call"]["call_id"] == last_call;
                events.push(event);
                if done {
                    return;
                }
            }
            let chunk = response.chunk().await.unwrap().expect("the stream goes on");
            buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await
    .expect("the events came");
    events
}

pub async fn open_events(api: &Api, token: &str) -> reqwest::Response {
    let response = api
        .client
        .get(format!("{}/events", api.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response
}
