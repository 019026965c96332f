//! Deciding through a link: its page never decides, its forms need the page's CSRF token, a
//! decision is recorded under the person's name through the lifecycle, and the link then
//! serves no more.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::common::{Backend, Location};
use crate::{Browser, assert_pending, call_record, serve, serve_with, suspend};

crate::on_each_backend! {
    #[tokio::test] async fn a_link_opens_the_approval_and_decides_once_under_the_persons_name;
    #[tokio::test] async fn a_rejection_through_a_link_keeps_its_reason;
    #[tokio::test] async fn several_approvers_each_decide_once_and_the_caller_never;
}

#[tokio::test]
async fn an_edit_lets_an_earlier_approver_use_their_link_again() {
    let at = Location::new(Backend::Sqlite).await;
    let policy = "[tools.echo.approval]\napprovals = 2\nedit_input = true\n";
    let served = serve_with(&at, Duration::from_secs(3600), true, policy).await;
    let server = &served.server;
    let asked = suspend(server, "echo", json!({"text": "As asked"})).await;
    let link = served.path(&served.link(&asked, "finance-ops").await);
    let mut alice = Browser::new(server);
    let page = alice.get(&link).await;
    let recorded = alice
        .post(&format!("{link}/approve"), &[("csrf", &page.csrf())])
        .await;
    assert_eq!(recorded.status, StatusCode::SEE_OTHER, "{}", recorded.body);
    alice
        .get(&link)
        .await
        .assert_refused(StatusCode::CONFLICT, "used");
    // on-call edits the input: the count restarts, and alice's approval was of the old input.
    let token = call_record(server, &asked).await["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = crate::api(
        server,
        "POST",
        &format!("/approvals/{token}/approve"),
        crate::OTHER_APPROVER,
        Some(json!({"input": {}, "edited_input": {"text": "Edited"}})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let page = alice.get(&link).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let released = alice
        .post(&format!("{link}/approve"), &[("csrf", &page.csrf())])
        .await;
    assert_eq!(released.status, StatusCode::SEE_OTHER, "{}", released.body);
    let call = call_record(server, &asked).await;
    assert_eq!(call["status"], "completed", "{call}");
    assert_eq!(call["input"], json!({"text": "Edited"}), "{call}");
}

#[tokio::test]
async fn two_links_followed_from_a_mail_in_one_browser_each_decide() {
    let at = Location::new(Backend::Sqlite).await;
    let served = serve(&at, Duration::from_secs(3600), true).await;
    let server = &served.server;
    let first = suspend(server, "ask_human", json!({"question": "First?"})).await;
    let second = suspend(server, "ask_human", json!({"question": "Second?"})).await;
    let first_path = served.path(&served.link(&first, "finance-ops").await);
    let second_path = served.path(&served.link(&second, "finance-ops").await);
    let mut person = Browser::new(server);
    let first_page = person.get(&first_path).await;
    // The second link is followed from the mail, another site: the browser sends no
    // `SameSite=Strict` cookie with it, and keeps the one it is answered beside the first's.
    let mut from_mail = Browser::new(server);
    let second_page = from_mail.get(&second_path).await;
    person.cookies.extend(from_mail.cookies);
    for (path, page, call) in [
        (&first_path, &first_page, &first),
        (&second_path, &second_page, &second),
    ] {
        let answer = [("v/answer", "yes"), ("csrf", &page.csrf())];
        let approved = person.post(&format!("{path}/approve"), &answer).await;
        assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
        assert_eq!(call_record(server, call).await["status"], "completed");
    }
}

async fn a_link_opens_the_approval_and_decides_once_under_the_persons_name(backend: Backend) {
    let at = Location::new(backend).await;
    let served = serve(&at, Duration::from_secs(3600), true).await;
    let server = &served.server;
    let asked = suspend(
        server,
        "ask_human",
        json!({"question": "Ship the release?"}),
    )
    .await;
    let link = served.link(&asked, "finance-ops").await;
    assert!(
        link.starts_with(&format!("{}/inbox/link/", server.api.base)),
        "{link}"
    );
    assert!(
        !link.contains("sus_"),
        "no suspension token in the link: {link}"
    );
    let path = served.path(&link);

    // GET, twice (a mail scanner, then the person): the page, nothing decided.
    let mut scanner = Browser::new(server);
    let seen = scanner.get(&path).await;
    assert_eq!(seen.status, StatusCode::OK, "{}", seen.body);
    let mut person = Browser::new(server);
    let page = person.get(&path).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("ask_human") && page.body.contains("orchestrator"));
    assert!(page.body.contains("Ship the release?"));
    assert!(
        !page.body.contains("Sign out"),
        "no sign-in on a link's page"
    );
    assert!(!page.body.contains(&format!("/inbox/calls/{asked}/approve")));
    assert!(page.body.contains(&format!("action=\"{path}/approve\"")));
    assert_eq!(page.header("cache-control"), "no-store");
    assert_eq!(page.header("referrer-policy"), "same-origin");
    assert!(
        page.header("content-security-policy")
            .contains("default-src 'none'")
    );
    let cookie = page.header("set-cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert_pending(server, &asked).await;

    // Without the page's token, with another's, or without its cookie: refused, nothing done.
    let csrf = page.csrf();
    let answer = ("v/answer", "ship it");
    let none = person.post(&format!("{path}/approve"), &[answer]).await;
    assert_eq!(none.status, StatusCode::FORBIDDEN, "{}", none.body);
    let wrong = person
        .post(
            &format!("{path}/approve"),
            &[answer, ("csrf", &"0".repeat(64))],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let scanners = seen.csrf();
    let crossed = person
        .post(&format!("{path}/approve"), &[answer, ("csrf", &scanners)])
        .await;
    assert_eq!(
        crossed.status,
        StatusCode::FORBIDDEN,
        "another browser's token"
    );
    let mut stranger = Browser::new(server);
    let cookieless = stranger
        .post(&format!("{path}/approve"), &[answer, ("csrf", &csrf)])
        .await;
    assert_eq!(cookieless.status, StatusCode::FORBIDDEN);
    assert_pending(server, &asked).await;

    // With it: approved, as finance-ops, and the page says what it did.
    let approved = person
        .post(&format!("{path}/approve"), &[answer, ("csrf", &csrf)])
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    assert_eq!(approved.header("location"), format!("{path}?done=approved"));
    let call = call_record(server, &asked).await;
    assert_eq!(call["status"], "completed", "{call}");
    assert_eq!(call["output"], json!({"answer": "ship it"}));
    let by = call["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "approved");
    assert_eq!(by.unwrap()["actor"], "finance-ops", "{call}");
    let after = person.get(approved.header("location")).await;
    assert_eq!(after.status, StatusCode::OK, "{}", after.body);
    assert!(
        after
            .body
            .contains("Approved. ask_human ran and completed."),
        "{}",
        after.body
    );

    // The same link again, or its form again: used, nothing more.
    person
        .get(&path)
        .await
        .assert_refused(StatusCode::CONFLICT, "used");
    let again = person
        .post(
            &format!("{path}/reject"),
            &[("reason", "no"), ("csrf", &csrf)],
        )
        .await;
    again.assert_refused(StatusCode::CONFLICT, "used");
    assert_eq!(call_record(server, &asked).await["status"], "completed");
    served.server.stop().await;
}

async fn a_rejection_through_a_link_keeps_its_reason(backend: Backend) {
    let at = Location::new(backend).await;
    let served = serve(&at, Duration::from_secs(3600), true).await;
    let server = &served.server;
    let asked = suspend(server, "ask_human", json!({"question": "Drop the table?"})).await;
    let path = served.path(&served.link(&asked, "finance-ops").await);
    let mut person = Browser::new(server);
    let page = person.get(&path).await;
    let rejected = person
        .post(
            &format!("{path}/reject"),
            &[("reason", "Not on a Friday."), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER, "{}", rejected.body);
    let call = call_record(server, &asked).await;
    assert_eq!(call["status"], "rejected");
    assert_eq!(call["error"]["message"], "Not on a Friday.");
    let by = call["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "rejected");
    assert_eq!(by.unwrap()["actor"], "finance-ops");
    person
        .get(&path)
        .await
        .assert_refused(StatusCode::CONFLICT, "used");
    served.server.stop().await;
}

#[tokio::test]
async fn with_sign_in_links_a_link_is_the_calls_page_behind_the_sign_in() {
    let dir = crate::common::temp_dir();
    let served = serve(dir.path(), Duration::from_secs(3600), false).await;
    let server = &served.server;
    let asked = suspend(server, "ask_human", json!({"question": "Ship?"})).await;
    let link = served.link(&asked, "finance-ops").await;
    assert_eq!(link, format!("{}/inbox/calls/{asked}", server.api.base));
    let mut person = Browser::new(server);
    let page = person.get(&served.path(&link)).await;
    assert_eq!(
        page.status,
        StatusCode::SEE_OTHER,
        "signed out: to the sign-in"
    );
    // A signed link made before the switch leads there too, and its forms decide nothing.
    let signed = crate::Links::new(
        crate::store_of(&served),
        &server.api.base,
        Duration::from_secs(60),
    );
    let token = call_record(server, &asked).await["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let old = served.path(&signed.link(&token, "finance-ops").await.unwrap());
    let opened = person.get(&old).await;
    assert_eq!(opened.status, StatusCode::SEE_OTHER);
    assert_eq!(opened.header("location"), format!("/inbox/calls/{asked}"));
    let posted = person
        .post(
            &format!("{old}/approve"),
            &[("v/answer", "x"), ("csrf", "x")],
        )
        .await;
    posted.assert_refused(StatusCode::FORBIDDEN, "not_allowed");
    assert_pending(server, &asked).await;
    served.server.stop().await;
}

async fn several_approvers_each_decide_once_and_the_caller_never(backend: Backend) {
    let at = Location::new(backend).await;
    let policy = "[tools.echo.approval]\napprovals = 2\n";
    let served = serve_with(&at, Duration::from_secs(3600), true, policy).await;
    let server = &served.server;
    let asked = suspend(server, "echo", json!({"text": "Two of us?"})).await;
    // The caller, through a link of its own name: not an approver, refused.
    let own = served.path(&served.link(&asked, "orchestrator").await);
    let mut caller = Browser::new(server);
    caller
        .get(&own)
        .await
        .assert_refused(StatusCode::FORBIDDEN, "not_allowed");
    // The first approver's approval is recorded, one of two; their link then serves no more.
    let first = served.path(&served.link(&asked, "finance-ops").await);
    let mut alice = Browser::new(server);
    let page = alice.get(&first).await;
    let csrf = page.csrf();
    let recorded = alice
        .post(&format!("{first}/approve"), &[("csrf", &csrf)])
        .await;
    assert_eq!(recorded.status, StatusCode::SEE_OTHER, "{}", recorded.body);
    let after = alice.get(recorded.header("location")).await;
    assert!(
        after
            .body
            .contains("Your approval is recorded: 1 of 2. echo runs"),
        "{}",
        after.body
    );
    assert!(
        !after.body.contains("name=\"csrf\""),
        "no form left: {}",
        after.body
    );
    assert_eq!(call_record(server, &asked).await["status"], "suspended");
    alice
        .get(&first)
        .await
        .assert_refused(StatusCode::CONFLICT, "used");
    // The second approver's link releases the call.
    let second = served.path(&served.link(&asked, "on-call").await);
    let mut bob = Browser::new(server);
    let page = bob.get(&second).await;
    assert!(
        page.body.contains("1 of 2 approvals: finance-ops."),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let released = bob
        .post(&format!("{second}/approve"), &[("csrf", &csrf)])
        .await;
    assert_eq!(released.status, StatusCode::SEE_OTHER, "{}", released.body);
    let call = call_record(server, &asked).await;
    assert_eq!(call["status"], "completed", "{call}");
    let by = call["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "approved");
    assert_eq!(by.unwrap()["actor"], "on-call", "{call}");
    served.server.stop().await;
}
