//! What keeps the page safe in a browser: CSRF tokens on every form, the security headers
//! (CSP and the rest) on every page, and script payloads in reasons and inputs shown as text.

use reqwest::StatusCode;
use serde_json::json;

use crate::common;
use crate::{APPROVER, Person, call_record, start, suspend};

#[tokio::test]
async fn forms_without_their_csrf_token_are_refused() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let call_id = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let page = person.get(&format!("/inbox/calls/{call_id}")).await;
    let csrf = page.csrf();
    let path = format!("/inbox/calls/{call_id}/approve");
    let missing = person.post(&path, &[("v/answer", "yes")]).await;
    assert_eq!(missing.status, StatusCode::FORBIDDEN);
    assert!(missing.body.contains("security token"));
    let wrong = person
        .post(
            &path,
            &[
                ("v/answer", "yes"),
                ("csrf", &csrf.replace(|c: char| c.is_ascii_digit(), "0")),
            ],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let reject = person
        .post(
            &format!("/inbox/calls/{call_id}/reject"),
            &[("reason", "no")],
        )
        .await;
    assert_eq!(reject.status, StatusCode::FORBIDDEN);
    let out = person.post("/inbox/sign-out", &[]).await;
    assert_eq!(
        out.status,
        StatusCode::FORBIDDEN,
        "signing out is a change too"
    );
    assert_eq!(call_record(&server, &call_id).await["status"], "suspended");

    // The sign-in form: without the cookie it was given with, refused.
    let mut stranger = Person::new(&server);
    let forged = stranger
        .post("/inbox/sign-in", &[("key", APPROVER), ("csrf", "made-up")])
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(!stranger.cookies.contains_key("toolgate_inbox"));

    // With the token, it goes through.
    let ok = person
        .post(&path, &[("v/answer", "yes"), ("csrf", &csrf)])
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    server.stop().await;
}

#[tokio::test]
async fn every_page_carries_its_security_headers() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let call_id = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let mut person = Person::new(&server);
    let sign_in = person.get("/inbox").await;
    person.sign_in(APPROVER).await;
    let mut pages = vec![sign_in];
    for path in [
        "/inbox".to_owned(),
        "/inbox/queue".to_owned(),
        "/inbox/reconcile".to_owned(),
        format!("/inbox/calls/{call_id}"),
        "/inbox/calls/call_nope".to_owned(),
    ] {
        pages.push(person.get(&path).await);
    }
    for page in &pages {
        let csp = page.header("content-security-policy");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(page.header("x-content-type-options"), "nosniff");
        assert_eq!(page.header("referrer-policy"), "same-origin");
        assert_eq!(page.header("cache-control"), "no-store");
        assert!(page.header("content-type").starts_with("text/html"));
        // No inline script or style: the policy would block them.
        assert!(
            !page.body.contains("<script>") && !page.body.contains("style="),
            "{}",
            page.body
        );
    }
    assert_eq!(pages.last().unwrap().status, StatusCode::NOT_FOUND);
    // The assets the page names, cached for a long time (their names change with them).
    let html = &pages[1].body;
    for ext in [".css", ".js"] {
        let end = html.find(ext).unwrap() + ext.len();
        let start = html[..end].rfind("/inbox/assets/").unwrap();
        let asset = person.get(&html[start..end]).await;
        assert_eq!(asset.status, StatusCode::OK);
        assert!(asset.header("cache-control").contains("max-age=31536000"));
        assert_eq!(asset.header("x-content-type-options"), "nosniff");
    }
    assert_eq!(
        person.get("/inbox/assets/other.js").await.status,
        StatusCode::NOT_FOUND
    );
    server.stop().await;
}

#[tokio::test]
async fn script_payloads_in_reasons_and_inputs_show_as_text() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| b).await;
    let payload = "<script>alert(1)</script>\"><img src=x onerror=alert(1)>";
    let call_id = suspend(&server, "ask_human", json!({"question": payload})).await;
    let refund = suspend(
        &server,
        "issue_refund",
        json!({"order_id": "o-<b>1</b>", "amount_cents": 50000, "reason": payload}),
    )
    .await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    for path in [
        "/inbox".to_owned(),
        "/inbox/queue".to_owned(),
        format!("/inbox/calls/{call_id}"),
        format!("/inbox/calls/{refund}"),
    ] {
        let page = person.get(&path).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            !page.body.contains("<script>alert"),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("<img src=x"), "{path}");
        assert!(!page.body.contains("<b>1</b>"), "{path}");
        assert!(
            page.body
                .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{path}: {}",
            page.body
        );
    }
    // A rejection reason with a payload, shown on the decided call's page.
    let page = person.get(&format!("/inbox/calls/{call_id}")).await;
    let rejected = person
        .post(
            &format!("/inbox/calls/{call_id}/reject"),
            &[("reason", payload), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(rejected.status, StatusCode::SEE_OTHER);
    let history = person.get(&format!("/inbox/calls/{call_id}")).await;
    assert!(!history.body.contains("<script>alert"), "{}", history.body);
    assert!(
        history
            .body
            .contains("&#60;img src=x onerror=alert(1)&#62;")
    );
    server.stop().await;
}
