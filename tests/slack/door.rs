//! The door: a signed press decides as the person the Slack user is, through the lifecycle; a
//! bad signature, an old timestamp, an unknown Slack user, a person who may not decide, the
//! caller under the four-eyes rule and an expired approval decide nothing, and the person is
//! told why.

use reqwest::StatusCode;
use serde_json::json;

use super::common::{self, Backend, Location};
use super::{
    AGENT, LEAD, SECRET, Slack, actors, call_as, call_record, events, post_signed, press, pressed,
    serve, sign, timestamp,
};

const APPROVE: &str = "toolgate_approve";
const REJECT: &str = "toolgate_reject";

/// Approve from a person who may decide runs the call, recorded under that person's name; the
/// same signed request sent again finds it decided and decides nothing twice.
async fn a_signed_approve_runs_the_call_once_as_the_person(backend: Backend) {
    let at = Location::new(backend).await;
    let slack = Slack::start().await;
    let server = serve(&at, &slack).await;
    let asked = call_as(&server.api, AGENT, "echo", json!({"text": "hello"})).await;
    let (call_id, token) = (
        asked["call_id"].as_str().unwrap(),
        asked["suspension"]["token"].as_str().unwrap(),
    );

    let body = pressed("U0OPS", APPROVE, token, &format!("{}/actions/1", slack.url));
    let at_now = timestamp(0);
    let signature = sign(SECRET, &at_now, &body);
    let (status, _) = post_signed(&server.api, &body, Some((&at_now, &signature))).await;
    assert_eq!(status, StatusCode::OK);
    let said = slack.reply(1).await;
    assert!(said.contains("You approved the call"), "{said}");
    assert!(said.contains("completed"), "{said}");
    let record = call_record(&server.api, call_id).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["output"], json!({"text": "hello"}));
    assert_eq!(
        actors(&record, "approved"),
        ["ops"],
        "recorded under the person's name"
    );

    // A replay of the very request (valid signature, in the window): nothing twice.
    let (status, _) = post_signed(&server.api, &body, Some((&at_now, &signature))).await;
    assert_eq!(status, StatusCode::OK);
    let said = slack.reply(2).await;
    assert!(said.contains("approved already by `ops`"), "{said}");
    assert!(said.contains("Nothing was decided."), "{said}");
    let record = call_record(&server.api, call_id).await;
    assert_eq!(events(&record, "approved"), 1, "{record}");
    assert_eq!(events(&record, "completed"), 1, "{record}");
    server.stop().await;
}

/// Reject rejects: the call does not run.
async fn a_signed_reject_rejects(backend: Backend) {
    let at = Location::new(backend).await;
    let slack = Slack::start().await;
    let server = serve(&at, &slack).await;
    let asked = call_as(&server.api, AGENT, "echo", json!({"text": "no"})).await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    press(&server.api, &slack, "U0OPS", REJECT, token).await;
    let said = slack.reply(1).await;
    assert!(said.contains("You rejected the call"), "{said}");
    let record = call_record(&server.api, asked["call_id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "rejected", "{record}");
    assert_eq!(actors(&record, "rejected"), ["ops"]);
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn a_signed_approve_runs_the_call_once_as_the_person;
    #[tokio::test] async fn a_signed_reject_rejects;
}

/// A bad signature, a timestamp six minutes old (or ahead), a signature of another secret and
/// no signature at all are `401 bad_signature`, and the call still waits.
#[tokio::test]
async fn a_bad_signature_or_an_old_timestamp_is_401_and_decides_nothing() {
    let at = Location::new(Backend::Sqlite).await;
    let slack = Slack::start().await;
    let server = serve(&at, &slack).await;
    let asked = call_as(&server.api, AGENT, "echo", json!({"text": "x"})).await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    let body = pressed("U0OPS", APPROVE, token, &format!("{}/actions/1", slack.url));

    let now = timestamp(0);
    let old = timestamp(-360);
    let ahead = timestamp(360);
    let tampered = body.replace("U0OPS", "U0LEAD");
    let cases = [
        (
            "another secret",
            now.clone(),
            sign("not-the-secret", &now, &body),
            body.clone(),
        ),
        (
            "six minutes old",
            old.clone(),
            sign(SECRET, &old, &body),
            body.clone(),
        ),
        (
            "six minutes ahead",
            ahead.clone(),
            sign(SECRET, &ahead, &body),
            body.clone(),
        ),
        (
            "another body",
            now.clone(),
            sign(SECRET, &now, &body),
            tampered,
        ),
        ("not hex", now.clone(), "v0=zz".into(), body.clone()),
    ];
    for (what, at_time, signature, sent) in &cases {
        let (status, answer) = post_signed(&server.api, sent, Some((at_time, signature))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {answer}");
        common::assert_error(&answer, "bad_signature");
    }
    let (status, answer) = post_signed(&server.api, &body, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    common::assert_error(&answer, "bad_signature");

    let record = call_record(&server.api, asked["call_id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "suspended", "{record}");
    assert!(
        slack.got().is_empty(),
        "nothing was told: {:?}",
        slack.got()
    );
    server.stop().await;
}

/// An unknown Slack user, a person whose rights leave the tool out, a caller's key, and the
/// caller itself under the four-eyes rule: each is told why in Slack, and nothing is decided.
#[tokio::test]
async fn who_may_not_decide_is_told_why_and_decides_nothing() {
    let at = Location::new(Backend::Sqlite).await;
    let slack = Slack::start().await;
    let server = serve(&at, &slack).await;
    let asked = call_as(&server.api, LEAD, "echo", json!({"text": "mine"})).await;
    let token = asked["suspension"]["token"].as_str().unwrap();

    // The inbox's link button is reported too, and decides nothing, saying nothing.
    press(&server.api, &slack, "U0OPS", "toolgate_open", token).await;
    let cases = [
        ("U0NOBODY", APPROVE, "does not know your Slack user"),
        ("U0BOB", APPROVE, "may not decide calls of `echo`"),
        ("U0BOB", REJECT, "may not decide calls of `echo`"),
        ("U0AGENT", APPROVE, "may not decide calls of `echo`"),
        ("U0LEAD", APPROVE, "made under your own name"),
    ];
    for (n, (user, action, why)) in cases.iter().enumerate() {
        press(&server.api, &slack, user, action, token).await;
        let said = slack.reply(n + 1).await;
        assert!(said.contains(why), "{user} {action}: {said}");
        assert!(said.contains("Nothing was decided."), "{said}");
    }
    let record = call_record(&server.api, asked["call_id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "suspended", "{record}");
    assert_eq!(events(&record, "approved") + events(&record, "rejected"), 0);
    assert_eq!(slack.got().len(), cases.len(), "one reply a refused press");

    // Another approver still decides it.
    press(&server.api, &slack, "U0OPS", APPROVE, token).await;
    assert!(slack.reply(cases.len() + 1).await.contains("You approved"));
    server.stop().await;
}

/// An approval that asks for an answer, or a write's, is not approved in one click: the person
/// is sent to the inbox, and it still waits; Reject still works in one click.
#[tokio::test]
async fn an_approval_that_needs_an_answer_opens_the_inbox_instead() {
    let at = Location::new(Backend::Sqlite).await;
    let slack = Slack::start().await;
    let server = serve(&at, &slack).await;
    let asked = call_as(
        &server.api,
        AGENT,
        "ask_human",
        json!({"question": "Ship?"}),
    )
    .await;
    let (call_id, token) = (
        asked["call_id"].as_str().unwrap(),
        asked["suspension"]["token"].as_str().unwrap(),
    );
    press(&server.api, &slack, "U0OPS", APPROVE, token).await;
    let said = slack.reply(1).await;
    assert!(
        said.contains("cannot be approved from Slack in one click"),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "<https://tools.example.com/inbox/calls/{call_id}|"
        )),
        "{said}"
    );
    assert_eq!(
        call_record(&server.api, call_id).await["status"],
        "suspended"
    );

    press(&server.api, &slack, "U0OPS", REJECT, token).await;
    assert!(slack.reply(2).await.contains("You rejected"));
    assert_eq!(
        call_record(&server.api, call_id).await["status"],
        "rejected"
    );

    // A write, which the inbox asks to confirm: the inbox too.
    let refund = json!({"order_id": "A-1", "amount_cents": 25_000, "reason": "damaged"});
    let asked = call_as(&server.api, AGENT, "issue_refund", refund).await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    press(&server.api, &slack, "U0OPS", APPROVE, token).await;
    let said = slack.reply(3).await;
    assert!(
        said.contains("cannot be approved from Slack in one click"),
        "{said}"
    );
    let record = call_record(&server.api, asked["call_id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "suspended", "{record}");
    server.stop().await;
}

/// A `response_url` that is neither Slack's nor the configured Web API's origin is never
/// posted to (a signed payload does not send toolgate elsewhere); the decision itself stands.
#[tokio::test]
async fn a_response_url_elsewhere_is_not_posted_to() {
    let at = Location::new(Backend::Sqlite).await;
    let slack = Slack::start().await;
    let elsewhere = Slack::start().await;
    let server = serve(&at, &slack).await;
    let asked = call_as(&server.api, AGENT, "echo", json!({"text": "hi"})).await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    let body = pressed("U0OPS", REJECT, token, &format!("{}/steal", elsewhere.url));
    let now = timestamp(0);
    let signature = sign(SECRET, &now, &body);
    let (status, _) = post_signed(&server.api, &body, Some((&now, &signature))).await;
    assert_eq!(status, StatusCode::OK);
    let record = call_record(&server.api, asked["call_id"].as_str().unwrap()).await;
    assert_eq!(
        record["status"], "rejected",
        "the door answers once it decided"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(elsewhere.requests(), 0, "nothing was posted there");
    assert!(slack.got().is_empty());
    server.stop().await;
}

/// A press on an approval nobody decided in time says so, and decides nothing.
#[tokio::test]
async fn an_expired_approval_is_told_so() {
    let at = Location::new(Backend::Sqlite).await;
    let slack = Slack::start().await;
    let server = serve(&at, &slack).await;
    let mail = json!({"to": "a@example.com", "subject": "Hi", "body": "Hello"});
    let asked = call_as(&server.api, AGENT, "send_email", mail).await;
    let token = asked["suspension"]["token"].as_str().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    press(&server.api, &slack, "U0OPS", REJECT, token).await;
    let said = slack.reply(1).await;
    assert!(said.contains("expired: nobody decided in time"), "{said}");
    let record = call_record(&server.api, asked["call_id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "expired", "{record}");
    assert_eq!(events(&record, "rejected"), 0);
    server.stop().await;
}
