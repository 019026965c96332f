//! Deciding from one approval's page: approvals and rejections through the lifecycle with the
//! signed-in key as actor, the form's refusals at their fields, a decision made meanwhile, and a
//! call that needs reconciliation settled.

use reqwest::StatusCode;
use serde_json::json;
use toolgate::ToolSet;

use crate::common::{self, TestServer};
use crate::{
    ADMIN, APPROVER, CALLER, OTHER_APPROVER, Person, actor_of, api, call_record, keys, signed_in,
    suspend,
};

#[tokio::test]
async fn decisions_go_through_the_lifecycle_with_the_signed_in_key_as_actor() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;

    // Approve: the tool runs again with the answer.
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let queue = person.get("/inbox").await;
    assert!(
        queue.body.contains(&format!("/inbox/calls/{asked}")),
        "listed"
    );
    assert!(queue.body.contains("orchestrator"), "with its caller");
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    assert!(
        !page.body.contains("sus_"),
        "no suspension token in the page"
    );
    let approved = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "yes, ship it"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    assert_eq!(
        approved.header("location"),
        format!("/inbox/calls/{asked}?done=approved")
    );
    let call = call_record(&server, &asked).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(call["output"], json!({"answer": "yes, ship it"}));
    assert_eq!(actor_of(&call, "approved").as_deref(), Some("finance-ops"));
    let history = person.get(&format!("/inbox/calls/{asked}")).await;
    assert!(
        history
            .body
            .contains("<span class=\"what\">Approved by finance-ops: yes, ship it</span>"),
        "{}",
        history.body
    );

    // Reject without a reason: the rule of every door, an empty one is recorded as none.
    let quiet = suspend(&server, "ask_human", json!({"question": "Deploy?"})).await;
    let page = person.get(&format!("/inbox/calls/{quiet}")).await;
    let empty = person
        .post(
            &format!("/inbox/calls/{quiet}/reject"),
            &[("reason", " "), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(empty.status, StatusCode::SEE_OTHER, "{}", empty.body);
    let call = call_record(&server, &quiet).await;
    assert_eq!(call["status"], "rejected");
    assert_eq!(call["error"]["message"], "Rejected without a reason.");
    // Past the bound, the form again with the message at its field; nothing recorded.
    let refused = suspend(&server, "ask_human", json!({"question": "Delete prod?"})).await;
    let page = person.get(&format!("/inbox/calls/{refused}")).await;
    let csrf = page.csrf();
    let long = "x".repeat(4097);
    let too_long = person
        .post(
            &format!("/inbox/calls/{refused}/reject"),
            &[("reason", &long), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(too_long.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        too_long
            .body
            .contains("The reason is longer than 4096 characters.")
    );
    assert_eq!(call_record(&server, &refused).await["status"], "suspended");
    // Reject, with a reason.
    let rejected = person
        .post(
            &format!("/inbox/calls/{refused}/reject"),
            &[("reason", "Not on a Friday."), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER);
    let call = call_record(&server, &refused).await;
    assert_eq!(call["status"], "rejected");
    assert!(
        call["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Not on a Friday."),
        "{call}"
    );
    assert_eq!(actor_of(&call, "rejected").as_deref(), Some("finance-ops"));

    // Complete externally, through the output schema's form.
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-9", "amount_cents": 25000, "reason": "broken"}),
    )
    .await;
    let page = person.get(&format!("/inbox/calls/{refund}")).await;
    assert!(
        page.body
            .contains("write: changes something outside toolgate")
    );
    assert!(
        page.body.contains("name=\"v/refund_id\""),
        "the receipt's form"
    );
    let completed = person
        .post(
            &format!("/inbox/calls/{refund}/complete"),
            &[
                ("csrf", &page.csrf()),
                ("v/refund_id", "rf_manual_1"),
                ("v/order_id", "o-9"),
                ("v/amount_cents", "25000"),
                ("v/status", "0"),
            ],
        )
        .await;
    assert_eq!(
        completed.status,
        StatusCode::SEE_OTHER,
        "{}",
        completed.body
    );
    let call = call_record(&server, &refund).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(
        call["output"],
        json!({"refund_id": "rf_manual_1", "order_id": "o-9", "amount_cents": 25000, "status": "issued"})
    );
    assert_eq!(
        actor_of(&call, "completed_externally").as_deref(),
        Some("finance-ops")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_refused_answer_shows_each_message_at_its_field_and_keeps_what_was_typed() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    let csrf = page.csrf();
    // An empty required field is left out, and refused as missing by the real validation.
    let missing = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", ""), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        missing
            .body
            .contains("id=\"approve-f/answer-error\">This field is required.</p>"),
        "{}",
        missing.body
    );
    assert!(
        missing
            .body
            .contains("aria-invalid=\"true\" aria-describedby=\"approve-f/answer-help approve-f/answer-error\""),
        "{}",
        missing.body
    );
    assert!(
        missing.body.contains("required property"),
        "the validator's own message, in the summary"
    );
    assert_eq!(
        call_record(&server, &asked).await["status"],
        "suspended",
        "still pending"
    );

    // The output form of issue_refund: a number that is no number, and one too large.
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-3", "amount_cents": 30000, "reason": "late"}),
    )
    .await;
    let page = person.get(&format!("/inbox/calls/{refund}")).await;
    let wrong = person
        .post(
            &format!("/inbox/calls/{refund}/complete"),
            &[
                ("csrf", &page.csrf()),
                ("v/refund_id", "rf_kept"),
                ("v/order_id", "o-3"),
                ("v/amount_cents", "lots"),
            ],
        )
        .await;
    assert_eq!(
        wrong.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        wrong.body
    );
    let error_at = wrong
        .body
        .find("id=\"complete-f/amount_cents-error\"")
        .expect("a message at amount_cents");
    assert!(
        wrong.body[error_at..].starts_with(
            "id=\"complete-f/amount_cents-error\">value is not of type &#34;integer&#34;"
        ),
        "{}",
        &wrong.body[error_at..error_at + 200]
    );
    assert!(
        wrong.body.contains("value=\"rf_kept\""),
        "what was typed is kept"
    );
    assert!(wrong.body.contains("value=\"lots\""));
    assert!(
        wrong
            .body
            .contains("id=\"complete-f/status-error\">This field is required."),
        "{}",
        wrong.body
    );
    assert_eq!(call_record(&server, &refund).await["status"], "suspended");
    server.stop().await;
}

#[tokio::test]
async fn an_approval_decided_meanwhile_shows_who_decided_what() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    // Someone else approves first, over the API.
    let token = call_record(&server, &asked).await["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = api(
        &server,
        "POST",
        &format!("/approvals/{token}/approve"),
        OTHER_APPROVER,
        Some(json!({"input": {"answer": "done already"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let late = person
        .post(
            &format!("/inbox/calls/{asked}/reject"),
            &[("reason", "no"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT);
    assert!(
        late.body.contains("already decided: approved by on-call"),
        "{}",
        late.body
    );
    assert!(late.body.contains("It is completed now."), "{}", late.body);
    assert!(
        !late.body.contains("id=\"reject-form\""),
        "no form to decide again"
    );
    let call = call_record(&server, &asked).await;
    assert_eq!(
        call["status"], "completed",
        "the late rejection changed nothing"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_call_that_needs_reconciliation_is_listed_and_settled_with_the_key_as_actor() {
    let dir = common::temp_dir();
    // send_email takes longer than its timeout: a write whose effect may have happened.
    let mut tools = ToolSet::new();
    let slow = toolgate::config::ExamplesConfig {
        send_email_delay_ms: 2_000,
        ..Default::default()
    };
    toolgate::examples::register(&mut tools, &slow, dir.path()).unwrap();
    let mut dispatch = toolgate::dispatch::DispatchConfig::default();
    dispatch.tools.insert(
        "send_email".into(),
        toolgate::dispatch::ToolSettings {
            timeout: std::time::Duration::from_millis(100),
            ..Default::default()
        },
    );
    let server = TestServer::start_with(tools, dir.path(), |b| {
        b.api_keys(keys()).dispatch_config(dispatch)
    })
    .await;
    let mut sent = Vec::new();
    for to in ["a@example.com", "b@example.com"] {
        let (status, body) = api(
            &server,
            "POST",
            "/tools/send_email/call",
            CALLER,
            Some(json!({"input": {"to": to, "subject": "Hi", "body": "Hello"}})),
        )
        .await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
        sent.push(body["call_id"].as_str().unwrap().to_owned());
    }
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let list = person.get("/inbox/reconcile").await;
    for call_id in &sent {
        assert!(
            list.body.contains(&format!("/inbox/calls/{call_id}")),
            "{}",
            list.body
        );
    }
    // Settled as not done, with a reason.
    let page = person.get(&format!("/inbox/calls/{}", sent[0])).await;
    assert!(
        page.body.contains("id=\"settle-error-form\""),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let path = format!("/inbox/calls/{}/resolve", sent[0]);
    let empty = person
        .post(
            &path,
            &[("settle", "error"), ("error", ""), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(empty.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        empty
            .body
            .contains("Say why the effect did not happen (1 to 4096 characters)."),
        "{}",
        empty.body
    );
    let blank = person
        .post(
            &path,
            &[("settle", "error"), ("error", "   "), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(blank.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        call_record(&server, &sent[0]).await["status"],
        "needs_reconciliation"
    );
    let settled = person
        .post(
            &path,
            &[
                ("settle", "error"),
                ("error", "The mail server has no trace of it."),
                ("csrf", &csrf),
            ],
        )
        .await;
    assert_eq!(settled.status, StatusCode::SEE_OTHER, "{}", settled.body);
    let call = call_record(&server, &sent[0]).await;
    assert_eq!(call["status"], "failed");
    assert_eq!(
        actor_of(&call, "reconciled").as_deref(),
        Some("finance-ops")
    );
    // Settled as done, with its output, through the output schema's form.
    let page = person.get(&format!("/inbox/calls/{}", sent[1])).await;
    let path = format!("/inbox/calls/{}/resolve", sent[1]);
    let bad = person
        .post(
            &path,
            &[
                ("settle", "output"),
                ("v/message_id", ""),
                ("csrf", &page.csrf()),
            ],
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert!(
        bad.body
            .contains("id=\"settle-f/message_id-error\">This field is required."),
        "{}",
        bad.body
    );
    let done = person
        .post(
            &path,
            &[
                ("settle", "output"),
                ("v/message_id", "m-1"),
                ("csrf", &page.csrf()),
            ],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    let call = call_record(&server, &sent[1]).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(call["output"], json!({"message_id": "m-1"}));
    assert_eq!(
        actor_of(&call, "reconciled").as_deref(),
        Some("finance-ops")
    );
    // Nothing left to reconcile.
    let list = person.get("/inbox/reconcile").await;
    assert!(list.body.contains("No call needs reconciliation."));
    server.stop().await;
}

/// The tool's approval policy offers rejection options: the page lists them (its text escaped),
/// and the one chosen reaches the call's error.
#[tokio::test]
async fn a_rejection_option_is_chosen_on_the_page() {
    use toolgate::dispatch::{ApprovalGate, DispatchConfig, ToolSettings};
    use toolgate::store::RejectOption;
    let dir = common::temp_dir();
    let gate = ApprovalGate {
        reject_options: vec![
            RejectOption {
                name: "wrong_team".into(),
                description: "Ask <b>the platform team</b> instead.".into(),
            },
            RejectOption {
                name: "later".into(),
                description: "Not this week.".into(),
            },
        ],
        // ask_human asks by itself; the policy adds only its options.
        ..ApprovalGate::default().when("false").unwrap()
    };
    let settings = ToolSettings {
        approval: Some(gate),
        ..ToolSettings::default()
    };
    let config = DispatchConfig {
        tools: [("ask_human".to_owned(), settings)].into(),
        ..DispatchConfig::default()
    };
    let server = crate::start(dir.path(), |b| b.dispatch_config(config)).await;
    let mut person = crate::Person::new(&server);
    person.sign_in(APPROVER).await;
    let asked = suspend(
        &server,
        "ask_human",
        json!({"question": "Rotate the keys?"}),
    )
    .await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    assert!(page.body.contains("id=\"reject-options\""), "{}", page.body);
    assert!(page.body.contains("value=\"wrong_team\""));
    assert!(
        page.body
            .contains("Ask &#60;b&#62;the platform team&#60;/b&#62; instead.")
            || page
                .body
                .contains("Ask &lt;b&gt;the platform team&lt;/b&gt; instead."),
        "the description is escaped: {}",
        page.body
    );
    assert!(!page.body.contains("<b>the platform team</b>"));

    let rejected = person
        .post(
            &format!("/inbox/calls/{asked}/reject"),
            &[
                ("reason", "Not ours."),
                ("option", "wrong_team"),
                ("csrf", &page.csrf()),
            ],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER, "{}", rejected.body);
    let call = call_record(&server, &asked).await;
    assert_eq!(call["status"], "rejected");
    assert_eq!(call["error"]["details"]["option"], "wrong_team");
    assert_eq!(
        call["error"]["message"],
        "Rejected: wrong_team (Ask <b>the platform team</b> instead.). Not ours."
    );
}

/// A policy of two distinct approvers, callers kept apart: the queue and the page show the
/// progress; whoever approved, or made the call, is offered no approve form (and is refused if
/// they post one anyway); the second approver's approval runs the tool.
#[tokio::test]
async fn two_approvers_see_the_progress_and_no_one_approves_twice() {
    use toolgate::dispatch::ApprovalGate;
    let dir = common::temp_dir();
    let gate = ApprovalGate {
        approvals: 2,
        separate_from_caller: true,
        // ask_human asks by itself; the policy adds only its approvers.
        ..ApprovalGate::default().when("false").unwrap()
    };
    let server = crate::start(dir.path(), |b| b.dispatch_config(ask_human_policy(gate))).await;
    // The admin makes the call, and may then only watch it.
    let (status, body) = api(
        &server,
        "POST",
        "/tools/ask_human/call",
        ADMIN,
        Some(json!({"input": {"question": "Rotate the keys?"}})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let asked = body["call_id"].as_str().unwrap().to_owned();
    let path = format!("/inbox/calls/{asked}");

    let mut first = crate::Person::new(&server);
    first.sign_in(APPROVER).await;
    let queue = first.get("/inbox").await;
    assert!(queue.body.contains("0 of 2 approvals"), "{}", queue.body);
    let page = first.get(&path).await;
    assert!(page.body.contains("0 of 2 approvals."), "{}", page.body);
    assert!(page.body.contains("id=\"approve-form\""));
    let approved = first
        .post(
            &format!("{path}/approve"),
            &[("v/answer", "yes"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let after = first.get(&format!("{path}?done=approved")).await;
    assert!(
        after.body.contains("Your approval is recorded: 1 of 2."),
        "{}",
        after.body
    );
    assert!(after.body.contains("1 of 2 approvals: finance-ops."));
    assert!(after.body.contains("id=\"approve-withheld\""));
    assert!(
        !after.body.contains("id=\"approve-form\""),
        "{}",
        after.body
    );
    assert!(
        after.body.contains("id=\"reject-form\""),
        "a rejection is still theirs"
    );
    assert!(
        after.body.contains("Approval recorded by finance-ops: yes"),
        "the history says who approved: {}",
        after.body
    );
    // A second post anyway (an old tab): refused, nothing changes.
    let again = first
        .post(
            &format!("{path}/approve"),
            &[("v/answer", "yes again"), ("csrf", &after.csrf())],
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert_eq!(call_record(&server, &asked).await["status"], "suspended");

    let mut caller = crate::Person::new(&server);
    caller.sign_in(ADMIN).await;
    let own = caller.get(&path).await;
    assert!(own.body.contains("You made this call"), "{}", own.body);
    assert!(!own.body.contains("id=\"approve-form\""));

    let mut second = crate::Person::new(&server);
    second.sign_in(OTHER_APPROVER).await;
    let page = second.get(&path).await;
    assert!(page.body.contains("id=\"approve-form\""), "{}", page.body);
    let approved = second
        .post(
            &format!("{path}/approve"),
            &[("v/answer", "go"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let call = call_record(&server, &asked).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(
        call["output"],
        json!({"answer": "go"}),
        "the last approval's answer"
    );
    assert_eq!(
        actor_of(&call, "approval_recorded").as_deref(),
        Some("finance-ops")
    );
    assert_eq!(actor_of(&call, "approved").as_deref(), Some("on-call"));
    server.stop().await;
}

/// An approval left undecided past its policy's `escalate_after_s` says so in the queue, on its
/// page and in its history.
#[tokio::test]
async fn an_escalated_approval_says_so() {
    use toolgate::dispatch::ApprovalGate;
    let dir = common::temp_dir();
    let gate = ApprovalGate {
        escalate_after: Some(std::time::Duration::from_millis(300)),
        ..ApprovalGate::default().when("false").unwrap()
    };
    let server = crate::start(dir.path(), |b| b.dispatch_config(ask_human_policy(gate))).await;
    let mut person = crate::Person::new(&server);
    person.sign_in(APPROVER).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Renew the cert?"})).await;
    let path = format!("/inbox/calls/{asked}");
    let page = person.get(&path).await;
    assert!(!page.body.contains("id=\"escalated\""), "not yet");
    common::eventually("the approval is escalated", async || {
        let call = call_record(&server, &asked).await;
        let kinds = call["events"].as_array().unwrap().clone();
        kinds
            .iter()
            .any(|event| event["kind"] == "escalated")
            .then_some(())
    })
    .await;
    let page = person.get(&path).await;
    assert!(page.body.contains("id=\"escalated\""), "{}", page.body);
    assert!(
        page.body
            .contains("Escalated: nobody decided within the policy&#39;s time.")
            || page
                .body
                .contains("Escalated: nobody decided within the policy&#x27;s time."),
        "{}",
        page.body
    );
    let queue = person.get("/inbox").await;
    assert!(queue.body.contains("class=\"escalated\""), "{}", queue.body);
    server.stop().await;
}

/// The examples' settings with `gate` as `ask_human`'s approval policy.
fn ask_human_policy(gate: toolgate::dispatch::ApprovalGate) -> toolgate::dispatch::DispatchConfig {
    use toolgate::dispatch::{DispatchConfig, ToolSettings};
    let settings = ToolSettings {
        approval: Some(gate),
        ..ToolSettings::default()
    };
    DispatchConfig {
        tools: [("ask_human".to_owned(), settings)].into(),
        ..DispatchConfig::default()
    }
}
