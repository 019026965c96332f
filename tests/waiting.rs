//! Waiting without polling: requests held until a call changes (`GET /calls/{id}?wait=`), until
//! a person decides (`POST /tools/{name}/call?wait=`), or until an approval arrives
//! (`GET /approvals?wait=`), on both backends, in one process and across replicas.

mod common;

use std::time::Duration;

use common::{Backend, Location, Site, TestServer, assert_error};
use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::ToolSet;

/// Longer than any test takes: a held request that comes back did not time out.
const LONG: u32 = 50;

async fn ask(server: &TestServer, question: &str) -> (String, String) {
    let (status, body) = server
        .api
        .call("ask_human", json!({ "question": question }))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    (
        body["call_id"].as_str().unwrap().to_owned(),
        body["suspension"]["token"].as_str().unwrap().to_owned(),
    )
}

/// Gives a held request time to be registered before the change it waits for is made. Not a
/// correctness condition (a change made first is answered at once), only what makes the test
/// show a request that was really held.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

async fn a_long_poll_on_a_suspended_call_is_answered_by_its_approval(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let (call_id, token) = ask(&server, "Ship it?").await;
    let held = {
        let api = server.api.clone();
        let path = format!("/calls/{call_id}?wait={LONG}");
        tokio::spawn(async move { api.get(&path).await })
    };
    settle().await;
    assert!(!held.is_finished(), "held while suspended");
    let (status, _) = server.api.approve(&token, json!({"answer": "yes"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, record) = tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("woken by the approval")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["output"], json!({"answer": "yes"}));
    server.stop().await;
}

async fn a_long_poll_that_times_out_answers_the_call_as_it_is(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let (call_id, _) = ask(&server, "Anyone?").await;
    let (status, record) = server.api.get(&format!("/calls/{call_id}?wait=1")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "suspended");
    // A finished call, or wait=0, is answered at once.
    let (status, echo) = server.api.call("echo", json!({"text": "x"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, record) = server
        .api
        .get(&format!(
            "/calls/{}?wait={LONG}",
            echo["call_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        (status, &record["status"]),
        (StatusCode::OK, &json!("completed"))
    );
    let (status, record) = server.api.get(&format!("/calls/{call_id}?wait=0")).await;
    assert_eq!(
        (status, &record["status"]),
        (StatusCode::OK, &json!("suspended"))
    );
    // Anything but 0 to 55 whole seconds, or another parameter, is refused.
    for bad in [
        "wait=56",
        "wait=-1",
        "wait=1.5",
        "wait=soon",
        "wait=",
        "hold=3",
    ] {
        let (status, body) = server.api.get(&format!("/calls/{call_id}?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_error(&body, "bad_request");
    }
    server.stop().await;
}

async fn a_call_held_with_wait_answers_what_the_approval_produced(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let held = {
        let api = server.api.clone();
        tokio::spawn(async move {
            api.post(
                &format!("/tools/ask_human/call?wait={LONG}"),
                json!({"input": {"question": "Deploy?"}}),
            )
            .await
        })
    };
    // The approver finds it in the queue and decides.
    let token = common::eventually("the suspension is listed", async || {
        let (_, list) = server.api.get("/approvals").await;
        list["approvals"][0]["token"].as_str().map(str::to_owned)
    })
    .await;
    assert!(!held.is_finished(), "the caller is still held");
    let (status, _) = server.api.approve(&token, json!({"answer": "go"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("answered once decided")
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"], json!({"answer": "go"}));

    // Rejected: the caller gets the rejection.
    let held = {
        let api = server.api.clone();
        tokio::spawn(async move {
            api.post(
                &format!("/tools/ask_human/call?wait={LONG}"),
                json!({"input": {"question": "Again?"}}),
            )
            .await
        })
    };
    let token = common::eventually("the second suspension is listed", async || {
        let (_, list) = server.api.get("/approvals").await;
        list["approvals"][0]["token"].as_str().map(str::to_owned)
    })
    .await;
    let (status, _) = server
        .api
        .post(
            &format!("/approvals/{token}/reject"),
            json!({"reason": "not now"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = held.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_error(&body, "rejected");

    // Nobody decides in time: the usual 202.
    let (status, body) = server
        .api
        .post(
            "/tools/ask_human/call?wait=1",
            json!({"input": {"question": "Late?"}}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "suspended");
    server.stop().await;
}

async fn an_empty_approvals_queue_is_held_until_one_arrives(backend: Backend) {
    let location = Location::new(backend).await;
    let server = TestServer::examples(&location).await;
    let held = {
        let api = server.api.clone();
        tokio::spawn(async move { api.get(&format!("/approvals?wait={LONG}")).await })
    };
    settle().await;
    assert!(!held.is_finished(), "held while nothing is pending");
    let (_, token) = ask(&server, "Arrived?").await;
    let (status, list) = tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("woken by the suspension")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["approvals"][0]["token"], token.as_str());
    // Not empty: answered at once; and a bad wait is refused.
    let (status, list) = server.api.get(&format!("/approvals?wait={LONG}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["approvals"].as_array().unwrap().len(), 1);
    let (status, _) = server.api.get("/approvals?wait=99").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    server.stop().await;
}

async fn held_requests_count_against_no_limit_and_a_shutdown_answers_them(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), location.data_dir()).unwrap();
    let server = TestServer::start_with(tools, &location, |b| b.max_in_flight(2)).await;
    let (call_id, _) = ask(&server, "Hold?").await;
    // One after another: each takes a slot to be admitted, and gives it back as it is held.
    let mut held = Vec::new();
    for _ in 0..6 {
        let api = server.api.clone();
        let path = format!("/calls/{call_id}?wait={LONG}");
        held.push(tokio::spawn(async move { api.get(&path).await }));
        settle().await;
    }
    // Six held, a limit of two: the server still answers.
    let (status, body) = server.api.call("echo", json!({"text": "through"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A graceful shutdown answers them at once, as they are.
    let stop = tokio::spawn(server.stop());
    for request in held {
        let (status, record): (StatusCode, Value) =
            tokio::time::timeout(Duration::from_secs(30), request)
                .await
                .expect("answered at the shutdown")
                .unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(record["status"], "suspended");
    }
    stop.await.unwrap();
}

/// A transaction left open elsewhere on the PostgreSQL server, in another database or in
/// toolgate's own without touching the feed, does not hold back the feed: a caller held with
/// `?wait=` hears of the decision. (Were the feed read below the server's oldest transaction,
/// the caller would get its `202` only when the wait ran out.)
#[tokio::test]
async fn a_transaction_left_open_elsewhere_does_not_hold_back_a_wake_up() {
    let location = Location::new(Backend::Postgres).await;
    let server = TestServer::examples(&location).await;
    let open = async |url: String| {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        // With an xid: the transaction holds back the server's snapshot horizon.
        client
            .batch_execute("BEGIN; SELECT pg_current_xact_id()")
            .await
            .unwrap();
        client
    };
    let elsewhere = open(common::pg::admin_url()).await;
    let here = open(location.database_url().unwrap().to_owned()).await;

    let held = {
        let api = server.api.clone();
        tokio::spawn(async move {
            api.post(
                &format!("/tools/ask_human/call?wait={LONG}"),
                json!({"input": {"question": "Now?"}}),
            )
            .await
        })
    };
    let token = common::eventually("the suspension is listed", async || {
        let (_, list) = server.api.get("/approvals").await;
        list["approvals"][0]["token"].as_str().map(str::to_owned)
    })
    .await;
    let (status, _) = server.api.approve(&token, json!({"answer": "now"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = tokio::time::timeout(Duration::from_secs(LONG.into()), held)
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "held to the end of its wait: {body}"
    );
    assert_eq!(body["output"], json!({"answer": "now"}));
    drop((elsewhere, here));
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn a_long_poll_on_a_suspended_call_is_answered_by_its_approval;
    #[tokio::test] async fn a_long_poll_that_times_out_answers_the_call_as_it_is;
    #[tokio::test] async fn a_call_held_with_wait_answers_what_the_approval_produced;
    #[tokio::test] async fn an_empty_approvals_queue_is_held_until_one_arrives;
    #[tokio::test] async fn held_requests_count_against_no_limit_and_a_shutdown_answers_them;
}

/// Two replicas on one database: a request held on one is answered when something happens on
/// the other (woken through PostgreSQL's NOTIFY, or its re-check timer).
#[tokio::test]
async fn requests_held_on_one_replica_are_woken_by_another() {
    let location = Location::new(Backend::Postgres).await;
    let a = TestServer::examples(&location).await;
    let b = TestServer::examples(&location).await;
    // B's empty queue, woken by a suspension made on A.
    let held_queue = {
        let api = b.api.clone();
        tokio::spawn(async move { api.get(&format!("/approvals?wait={LONG}")).await })
    };
    settle().await;
    assert!(!held_queue.is_finished());
    let (call_id, token) = ask(&a, "Across?").await;
    let (status, list) = tokio::time::timeout(Duration::from_secs(30), held_queue)
        .await
        .expect("woken across replicas")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["approvals"][0]["token"], token.as_str());
    // A long-poll on A, answered by an approval made on B.
    let held_call = {
        let api = a.api.clone();
        let path = format!("/calls/{call_id}?wait={LONG}");
        tokio::spawn(async move { api.get(&path).await })
    };
    settle().await;
    assert!(!held_call.is_finished());
    let (status, _) = b.api.approve(&token, json!({"answer": "from b"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, record) = tokio::time::timeout(Duration::from_secs(30), held_call)
        .await
        .expect("woken across replicas")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "completed");
    assert_eq!(record["output"], json!({"answer": "from b"}));
    a.stop().await;
    b.stop().await;
}
