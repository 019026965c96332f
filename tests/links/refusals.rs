//! Links refused, each with a page that says why and decides nothing: forged, altered,
//! foreign, expired, and made for a person who may not decide; and a link signed with the
//! previous key, which still serves.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use reqwest::StatusCode;
use serde_json::json;
use toolgate::notify::Links;
use toolgate::store::SqliteStore;

use crate::common::{Backend, Location};
use crate::{Browser, assert_pending, serve, store_of, suspend};

crate::on_each_backend! {
    #[tokio::test] async fn forged_altered_foreign_and_expired_links_are_refused;
    #[tokio::test] async fn a_link_signed_with_the_previous_key_still_serves;
}

/// The three parts of a link's signed path: key id, payload, tag.
fn parts(path: &str) -> (String, String, String) {
    let signed = path.rsplit('/').next().unwrap();
    let mut it = signed.split('.').map(str::to_owned);
    (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
}

async fn forged_altered_foreign_and_expired_links_are_refused(backend: Backend) {
    let at = Location::new(backend).await;
    let served = serve(&at, Duration::from_secs(3600), true).await;
    let server = &served.server;
    let asked = suspend(server, "ask_human", json!({"question": "Pay it?"})).await;
    let path = served.path(&served.link(&asked, "finance-ops").await);
    let (kid, payload, _) = parts(&path);
    let mut browser = Browser::new(server);

    // Forged: a made-up tag on a genuine key id and payload; and no link's shape at all.
    let random = B64.encode([0x5au8; 44]);
    let forged = format!("/inbox/link/{kid}.{payload}.{random}");
    browser
        .get(&forged)
        .await
        .assert_refused(StatusCode::FORBIDDEN, "forged");
    let mangled = browser.get("/inbox/link/not-a-link").await;
    mangled.assert_refused(StatusCode::FORBIDDEN, "forged");
    let posted = browser
        .post(
            &format!("{forged}/approve"),
            &[("v/answer", "yes"), ("csrf", "x")],
        )
        .await;
    posted.assert_refused(StatusCode::FORBIDDEN, "forged");

    // Altered: one character of the payload changed, the genuine tag kept.
    let (_, _, tag) = parts(&path);
    let mut json = B64.decode(&payload).unwrap();
    let at_who = json.windows(11).position(|w| w == b"finance-ops").unwrap();
    json[at_who] = b'F';
    let altered = format!("/inbox/link/{kid}.{}.{tag}", B64.encode(&json));
    browser
        .get(&altered)
        .await
        .assert_refused(StatusCode::FORBIDDEN, "altered");

    // Foreign: signed by a key this store never made (another deployment's), or made for
    // another public URL on this very store.
    let token = crate::call_record(server, &asked).await["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let elsewhere = crate::common::temp_dir();
    let other_store =
        std::sync::Arc::new(SqliteStore::open(elsewhere.path().join("t.db")).unwrap());
    let theirs = Links::new(other_store, &server.api.base, Duration::from_secs(60));
    assert!(
        theirs.link(&token, "finance-ops").await.is_err(),
        "it knows no such approval"
    );
    let stranger_key = format!("/inbox/link/{}.{payload}.{tag}", B64.encode([1u8; 16]));
    browser
        .get(&stranger_key)
        .await
        .assert_refused(StatusCode::NOT_FOUND, "foreign");
    let staging = Links::new(
        store_of(&served),
        "https://staging.example.com",
        Duration::from_secs(60),
    );
    let staged = staging.link(&token, "finance-ops").await.unwrap();
    let staged = staged.strip_prefix("https://staging.example.com").unwrap();
    browser
        .get(staged)
        .await
        .assert_refused(StatusCode::NOT_FOUND, "foreign");

    // Expired: a link that served one second.
    let brief = Links::new(store_of(&served), &server.api.base, Duration::from_secs(1));
    let short = served.path(&brief.link(&token, "finance-ops").await.unwrap());
    assert_eq!(
        browser.get(&short).await.status,
        StatusCode::OK,
        "fresh, it serves"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    browser
        .get(&short)
        .await
        .assert_refused(StatusCode::GONE, "expired");

    // A person who may not decide: told only, or deciding other tools, or unknown here.
    for person in ["corp:bob", "corp:carol", "corp:mallory"] {
        let theirs = served.path(&served.links.link(&token, person).await.unwrap());
        let page = browser.get(&theirs).await;
        page.assert_refused(StatusCode::FORBIDDEN, "not_allowed");
    }

    // And after all that, the approval still waits; the genuine link still opens.
    assert_pending(server, &asked).await;
    assert_eq!(browser.get(&path).await.status, StatusCode::OK);
    served.server.stop().await;
}

async fn a_link_signed_with_the_previous_key_still_serves(backend: Backend) {
    let at = Location::new(backend).await;
    let served = serve(&at, Duration::from_secs(3600), true).await;
    let server = &served.server;
    let asked = suspend(server, "ask_human", json!({"question": "Rotate?"})).await;
    let token = crate::call_record(server, &asked).await["suspension"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let rotating = Links::new(
        store_of(&served),
        &server.api.base,
        Duration::from_secs(3600),
    )
    .rotate_every(Duration::from_secs(1));
    let old = served.path(&rotating.link(&token, "finance-ops").await.unwrap());
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let new = served.path(&rotating.link(&token, "finance-ops").await.unwrap());
    assert_ne!(parts(&old).0, parts(&new).0, "a new period, a new key");
    let mut browser = Browser::new(server);
    for path in [&old, &new] {
        let page = browser.get(path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
    }
    assert_pending(server, &asked).await;
    served.server.stop().await;
}
