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
    let mut stream = person.open_events().await;
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
    let first = person.open_events().await;
    assert_eq!(first.status(), StatusCode::OK);
    // A second page of the same key, past its `max_held`, is refused at once, with a wait.
    let second = person.open_events().await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.headers()["retry-after"], "1");
    // Closing the first gives its count back.
    drop(first);
    common::eventually("the closed stream is counted no more", async || {
        (person.open_events().await.status() == StatusCode::OK).then_some(())
    })
    .await;
    server.stop().await;
}

/// An approver whose `decides` leaves a tool out never meets its approvals in the inbox: not in
/// the queue, not among the filter's tools, not on a call's page, and a decision posted anyway
/// is refused as a call that does not exist.
#[tokio::test]
async fn an_approver_sees_and_decides_only_the_tools_it_decides() {
    let dir = common::temp_dir();
    let mut keys = crate::keys();
    let refunds_only = toolgate::http::auth::Reach::of(&["issue_*".to_owned()]).unwrap();
    for key in keys.iter_mut().filter(|key| key.name == "finance-ops") {
        key.decides = refunds_only.clone();
    }
    let server =
        common::TestServer::start_with(common::example_tools(dir.path()), dir.path(), |b| {
            b.api_keys(keys)
        })
        .await;
    let question = suspend(&server, "ask_human", json!({"question": "Hidden?"})).await;
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-d", "amount_cents": 20000, "reason": "decides"}),
    )
    .await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let queue = person.get("/inbox").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(
        queue.body.contains(&format!("/inbox/calls/{refund}")),
        "{}",
        queue.body
    );
    assert!(
        !queue.body.contains(&question),
        "another tool's approval is absent"
    );
    assert!(
        !queue.body.contains("<option value=\"ask_human\""),
        "nor among the filters"
    );
    let filtered = person.get("/inbox?tool=ask_human").await;
    assert!(!filtered.body.contains(&question));
    let page = person.get(&format!("/inbox/calls/{question}")).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    let csrf = queue.csrf();
    let refused = person
        .post(
            &format!("/inbox/calls/{question}/approve"),
            &[("csrf", &csrf), ("answer", "yes")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    let mine = person.get(&format!("/inbox/calls/{refund}")).await;
    assert_eq!(mine.status, StatusCode::OK);
    // The other approver, deciding every tool, still sees the question.
    let mut other = Person::new(&server);
    other.sign_in(crate::OTHER_APPROVER).await;
    assert!(other.get("/inbox").await.body.contains(&question));
}
