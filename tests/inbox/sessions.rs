//! Signing in and out: the session cookie, refused keys and their messages, the rate limit on
//! attempts, a key removed or reissued, auth off, the inbox turned off, and a session that
//! survives a restart.

use reqwest::StatusCode;
use serde_json::json;
use toolgate::http::auth::{ApiKey, Role, token_sha256};
use toolgate::inbox::InboxOptions;

use crate::common::{self, Backend, Location, TestServer};
use crate::{APPROVER, CALLER, Person, actor_of, call_record, signed_in, start, suspend, visitor};

#[tokio::test]
async fn signing_in_with_an_approver_key_sets_a_strict_http_only_cookie() {
    let (_dir, server, mut person) = visitor().await;
    let signed = person.sign_in(APPROVER).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER);
    assert_eq!(signed.header("location"), "/inbox");
    let session = signed
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("toolgate_inbox="))
        .expect("a session cookie")
        .to_owned();
    for part in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/inbox",
        "Max-Age=43200",
    ] {
        assert!(session.contains(part), "{session}");
    }
    assert!(
        !session.contains("Secure"),
        "plain HTTP without secure_cookies: {session}"
    );
    assert!(!signed.body.contains(APPROVER));

    let queue = person.get("/inbox").await;
    assert_eq!(queue.status, StatusCode::OK);
    queue.assert_signed_in_as("finance-ops");
    assert!(
        !queue.body.contains(APPROVER),
        "the key never shows in a page"
    );
    server.stop().await;

    // `Secure` when configured so, or when a proxy says the request came over TLS.
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| {
        b.inbox(InboxOptions {
            secure_cookies: true,
            session_ttl: std::time::Duration::from_secs(60),
            ..InboxOptions::default()
        })
    })
    .await;
    let mut person = Person::new(&server);
    let signed = person.sign_in(APPROVER).await;
    let session = signed
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("toolgate_inbox="))
        .unwrap()
        .to_owned();
    assert!(
        session.contains("; Secure") && session.contains("Max-Age=60"),
        "{session}"
    );
    server.stop().await;

    let (_dir, server, mut person) = visitor().await;
    let request = person
        .client
        .get(format!("{}/inbox", person.base))
        .header("x-forwarded-proto", "https");
    let page = person.send(request).await;
    assert!(
        page.set_cookies().iter().all(|c| c.contains("; Secure")),
        "{:?}",
        page.set_cookies()
    );
    server.stop().await;
}

#[tokio::test]
async fn caller_and_unknown_keys_are_refused_with_a_message() {
    let (_dir, server, mut person) = visitor().await;
    let caller = person.sign_in(CALLER).await;
    assert_eq!(caller.status, StatusCode::FORBIDDEN);
    assert!(
        caller.body.contains("This is a caller key"),
        "{}",
        caller.body
    );
    assert!(!caller.body.contains(CALLER));
    assert!(
        caller
            .set_cookies()
            .iter()
            .all(|c| !c.starts_with("toolgate_inbox="))
    );
    let unknown = person.sign_in("not-a-key").await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert!(
        unknown.body.contains("not one this server knows"),
        "{}",
        unknown.body
    );
    assert!(
        !unknown.body.contains("not-a-key"),
        "what was typed is not echoed"
    );
    // Still signed out: the queue is not shown.
    let page = person.get("/inbox").await;
    assert!(page.body.contains("Paste an <strong>approver</strong>"));
    // A caller's bearer token does not open the page either.
    let response = server
        .api
        .client
        .get(format!("{}/inbox", server.api.base))
        .bearer_auth(CALLER)
        .send()
        .await
        .unwrap();
    assert!(response.text().await.unwrap().contains("Sign in"));
    server.stop().await;
}

#[tokio::test]
async fn sign_in_attempts_are_rate_limited() {
    let (_dir, server, mut person) = visitor().await;
    for attempt in 0..10 {
        let page = person.sign_in("wrong").await;
        assert_eq!(page.status, StatusCode::UNAUTHORIZED, "attempt {attempt}");
    }
    let limited = person.sign_in(APPROVER).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.header("retry-after").parse::<u64>().unwrap() >= 1);
    assert!(limited.body.contains("Too many sign-in attempts"));
    server.stop().await;
}

#[tokio::test]
async fn signing_out_ends_the_session() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;
    let session = person.cookies["toolgate_inbox"].clone();
    let queue = person.get("/inbox").await;
    let out = person
        .post("/inbox/sign-out", &[("csrf", &queue.csrf())])
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(
        !person.cookies.contains_key("toolgate_inbox"),
        "the cookie is cleared"
    );
    // The session is gone from the store: its old cookie, sent again, opens nothing.
    person.cookies.insert("toolgate_inbox".into(), session);
    let again = person.get("/inbox").await;
    assert!(
        again.body.contains("Paste an <strong>approver</strong>"),
        "{}",
        again.body
    );
    let fragment = person.get("/inbox/queue").await;
    assert_eq!(fragment.status, StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test]
async fn signing_out_ends_the_sessions_open_live_stream() {
    let (_dir, server, mut person) = signed_in(APPROVER).await;
    let queue = person.get("/inbox").await;
    let mut stream = person.open_events().await;
    assert_eq!(stream.status(), StatusCode::OK);
    // Open and quiet: nothing ends it on its own.
    let quiet = tokio::time::timeout(std::time::Duration::from_millis(1500), async {
        while let Some(_chunk) = stream.chunk().await.unwrap() {}
    })
    .await;
    assert!(quiet.is_err(), "the stream stays open while signed in");

    let out = person
        .post("/inbox/sign-out", &[("csrf", &queue.csrf())])
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Ok(Some(_chunk)) = stream.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "signing out ends the stream");
    server.stop().await;
}

#[tokio::test]
async fn a_key_that_is_removed_or_reissued_ends_its_sessions() {
    let (dir, server, mut person) = signed_in(APPROVER).await;
    server.stop().await;
    // The same name with a new token: the old sign-in no longer holds.
    let reissued = vec![ApiKey::new(
        "finance-ops",
        Role::Approver,
        token_sha256("a-new-token-for-finance"),
    )];
    let server = TestServer::start_with(common::example_tools(dir.path()), dir.path(), |b| {
        b.api_keys(reissued)
    })
    .await;
    person.base = server.api.base.clone();
    let page = person.get("/inbox").await;
    assert!(
        page.body.contains("Paste an <strong>approver</strong>"),
        "{}",
        page.body
    );
    server.stop().await;
}

#[tokio::test]
async fn with_auth_off_the_inbox_acts_as_the_anonymous_admin() {
    let dir = common::temp_dir();
    let server = TestServer::examples(dir.path()).await;
    let (status, body) = server
        .api
        .call("ask_human", json!({"question": "Ship?"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let asked = body["call_id"].as_str().unwrap().to_owned();
    let mut person = Person::new(&server);
    let queue = person.get("/inbox").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(queue.body.contains("auth off (admin)"), "{}", queue.body);
    assert!(
        person.cookies.contains_key("toolgate_inbox"),
        "a session of its own"
    );
    // Cookie-less visitors write nothing to the store: the anonymous session is the cookie.
    for _ in 0..5 {
        let page = Person::new(&server).get("/inbox").await;
        assert_eq!(page.status, StatusCode::OK);
    }
    let db = rusqlite::Connection::open(dir.path().join("toolgate.db")).unwrap();
    let rows: i64 = db
        .query_row("SELECT count(*) FROM inbox_sessions", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 0, "no session row for an auth-off page view");
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    // The forms are still bound to the session: a form from elsewhere is refused.
    let forged = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "x")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let approved = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "yes"), ("csrf", &page.csrf())],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER);
    let (_, call) = server.api.get(&format!("/calls/{asked}")).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(
        actor_of(&call, "approved"),
        None,
        "no key, no actor: as over REST"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_inbox_can_be_turned_off() {
    let dir = common::temp_dir();
    let server = start(dir.path(), |b| {
        b.inbox(InboxOptions {
            enabled: false,
            ..InboxOptions::default()
        })
    })
    .await;
    let mut person = Person::new(&server);
    assert_eq!(person.get("/inbox").await.status, StatusCode::NOT_FOUND);
    server.stop().await;
}

async fn the_session_survives_a_restart(backend: Backend) {
    let at = Location::new(backend).await;
    let server = start(&at, |b| b).await;
    let asked = suspend(&server, "ask_human", json!({"question": "Ship?"})).await;
    let mut person = Person::new(&server);
    person.sign_in(APPROVER).await;
    let page = person.get(&format!("/inbox/calls/{asked}")).await;
    let csrf = page.csrf();
    server.stop().await;

    let server = start(&at, |b| b).await;
    person.base = server.api.base.clone();
    let queue = person.get("/inbox").await;
    queue.assert_signed_in_as("finance-ops");
    // The page's CSRF token, bound to the session, still holds too.
    let approved = person
        .post(
            &format!("/inbox/calls/{asked}/approve"),
            &[("v/answer", "after the restart"), ("csrf", &csrf)],
        )
        .await;
    assert_eq!(approved.status, StatusCode::SEE_OTHER, "{}", approved.body);
    let call = call_record(&server, &asked).await;
    assert_eq!(call["status"], "completed");
    assert_eq!(actor_of(&call, "approved").as_deref(), Some("finance-ops"));
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn the_session_survives_a_restart;
}
