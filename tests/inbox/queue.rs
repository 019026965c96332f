//! The queue: pages of fifty, oldest first, filtered by tool; and the live stream, which needs a
//! session and carries no token.

use reqwest::StatusCode;
use serde_json::json;

use crate::common;
use crate::{APPROVER, Page, Person, start, suspend};

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

#[tokio::test]
async fn an_open_live_stream_counts_against_the_keys_max_held() {
    let dir = common::temp_dir();
    let one = toolgate::dispatch::DispatchConfig {
        quotas: toolgate::dispatch::quota::QuotaSettings::new(
            toolgate::dispatch::quota::QuotaConfig {
                max_held: Some(1),
                ..Default::default()
            },
            [],
        ),
        ..Default::default()
    };
    let server = start(dir.path(), |b| b.dispatch_config(one)).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let open = async |person: &Person| {
        person
            .client
            .get(format!("{}/inbox/events", person.base))
            .header("cookie", person.cookie_header())
            .send()
            .await
            .unwrap()
    };
    let first = open(&person).await;
    assert_eq!(first.status(), StatusCode::OK);
    // A second page of the same key, past its `max_held`, is refused at once, with a wait.
    let second = open(&person).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.headers()["retry-after"], "1");
    // Closing the first gives its count back.
    drop(first);
    common::eventually("the closed stream is counted no more", async || {
        (open(&person).await.status() == StatusCode::OK).then_some(())
    })
    .await;
    server.stop().await;
}
