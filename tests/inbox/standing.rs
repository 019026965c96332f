//! Standing approvals on the page: the approve form of a tool whose policy offers them has a
//! box, for how long and for how many calls (kept through a write's confirmation); approving
//! with it grants one, which the "Standing approvals" page lists with a revoke button (a `POST`
//! with the session's CSRF token). A tool whose policy offers none has no box.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::dispatch::{ApprovalGate, DispatchConfig, StandingLimits, ToolSettings};

use super::{APPROVER, CALLER, Person, api, call_record, start, suspend};

fn config() -> DispatchConfig {
    let gate = |standing: Option<StandingLimits>| ToolSettings {
        approval: Some(ApprovalGate {
            standing,
            ..ApprovalGate::default()
        }),
        ..ToolSettings::default()
    };
    let limits = StandingLimits {
        max_for: Duration::from_secs(3600),
        max_calls: 20,
    };
    DispatchConfig {
        tools: HashMap::from([
            ("issue_refund".to_owned(), gate(Some(limits))),
            ("echo".to_owned(), gate(None)),
        ]),
        ..DispatchConfig::default()
    }
}

fn refund(n: u32) -> Value {
    json!({"order_id": format!("o-{n}"), "amount_cents": 500, "reason": "Late"})
}

#[tokio::test]
async fn a_standing_approval_is_granted_listed_and_revoked_on_the_page() {
    let dir = common_dir();
    let server = start(dir.path(), |b| b.dispatch_config(config())).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;

    // A tool without standing keys: no box.
    let echo = suspend(&server, "echo", json!({"text": "hi"})).await;
    let page = person.get(&format!("/inbox/calls/{echo}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("name=\"standing\""), "{}", page.body);

    let call_id = suspend(&server, "issue_refund", refund(1)).await;
    let page = person.get(&format!("/inbox/calls/{call_id}")).await;
    assert!(page.body.contains("name=\"standing\""), "{}", page.body);
    assert!(page.body.contains("max=\"3600\""), "{}", page.body);
    let csrf = page.csrf();
    let approve = format!("/inbox/calls/{call_id}/approve");

    // Beyond the policy's bound: refused, and nothing decided.
    let over = [
        ("csrf", csrf.as_str()),
        ("standing", "1"),
        ("standing_for_s", "7200"),
        ("standing_calls", "2"),
        ("confirm", "1"),
    ];
    let refused = person.post(&approve, &over).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert!(refused.body.contains("3600"), "{}", refused.body);
    assert_eq!(call_record(&server, &call_id).await["status"], "suspended");

    // A write: the first post shows the confirmation, carrying the standing fields along.
    let asked = [
        ("csrf", csrf.as_str()),
        ("standing", "1"),
        ("standing_for_s", "600"),
        ("standing_calls", "2"),
    ];
    let confirm = person.post(&approve, &asked).await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
    assert!(
        confirm.body.contains("name=\"standing_calls\" value=\"2\""),
        "{}",
        confirm.body
    );
    let mut confirmed = asked.to_vec();
    confirmed.push(("confirm", "1"));
    let done = person.post(&approve, &confirmed).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(call_record(&server, &call_id).await["status"], "completed");
    let granted = person.get(&format!("/inbox/calls/{call_id}")).await;
    assert!(
        granted
            .body
            .contains("Standing approval granted by finance-ops: the caller&#39;s next 2 calls"),
        "{}",
        granted.body
    );

    // The orchestrator's next refund runs at once, released by it.
    let (status, body) = api(
        &server,
        "POST",
        "/tools/issue_refund/call",
        CALLER,
        Some(json!({"input": refund(2)})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let released = call_record(&server, body["call_id"].as_str().unwrap()).await;
    assert_eq!(released["standing_approval"]["approver"], "finance-ops");

    let history = person
        .get(&format!(
            "/inbox/calls/{}",
            body["call_id"].as_str().unwrap()
        ))
        .await;
    assert!(
        history
            .body
            .contains("Released by a standing approval granted by finance-ops"),
        "{}",
        history.body
    );

    // Listed, with what is left of it.
    let list = person.get("/inbox/standing").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.body.contains("orchestrator"), "{}", list.body);
    assert!(list.body.contains("1 of 2"), "{}", list.body);
    let at = list.body.find("/standing/sa_").expect("a revoke form");
    let rest = &list.body[at + "/standing/".len()..];
    let id = &rest[..rest.find('/').unwrap()];
    let revoke = format!("/inbox/standing/{id}/revoke");

    // Revoking needs the session's CSRF token.
    let forged = person.post(&revoke, &[("csrf", "forged")]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(person.get("/inbox/standing").await.body.contains(id));
    let revoked = person.post(&revoke, &[("csrf", &list.csrf())]).await;
    assert_eq!(revoked.status, StatusCode::SEE_OTHER, "{}", revoked.body);
    assert!(
        revoked
            .header("location")
            .ends_with("/inbox/standing?revoked=1")
    );
    let after = person.get("/inbox/standing?revoked=1").await;
    assert!(after.body.contains("standing-revoked"), "{}", after.body);
    assert!(!after.body.contains(id), "{}", after.body);

    // And the next refund waits for a person again.
    suspend(&server, "issue_refund", refund(3)).await;
    server.stop().await;
}

fn common_dir() -> tempfile::TempDir {
    super::common::temp_dir()
}
