//! `ServerBuilder`'s router mounted in an app of its own, as docs/writing-tools.md promises a Rust
//! developer: the app's own routes and toolgate's side by side, and the store's upkeep running
//! with nothing from the binary (feed entries past their retention and inbox sessions that ran
//! out are pruned). And an app that starts the builder itself (`ServerBuilder::start`) refused
//! what the binary refuses at start-up.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use reqwest::StatusCode;
use serde_json::json;
use toolgate::config::Config;
use toolgate::store::{InboxSession, Timestamp};
use toolgate::{ServerBuilder, StartError};

use crate::common::{Api, Backend, Location, Site, eventually, example_tools, open_store};

fn session(id: &str, expires_in_ms: i64) -> InboxSession {
    let now = Timestamp::now();
    InboxSession {
        id_sha256: id.to_owned(),
        key_name: Some("ops".into()),
        role: "approver".into(),
        key_fingerprint: None,
        created_at: now,
        expires_at: Timestamp(now.0 + expires_in_ms),
        display_name: None,
        decides: None,
    }
}

async fn a_mounted_router_runs_the_stores_upkeep(backend: Backend) {
    let location = Location::new(backend).await;
    let store = open_store(&location).await;
    store.create_session(&session("ran-out", 50)).await.unwrap();
    store
        .create_session(&session("still-on", 3_600_000))
        .await
        .unwrap();
    // Read as of the epoch, a session is found for as long as its row exists: both are there.
    let long_ago = Timestamp(0);
    for id in ["ran-out", "still-on"] {
        assert!(store.session(id, long_ago).await.unwrap().is_some(), "{id}");
    }

    let tools = example_tools(&location);
    let toolgate = ServerBuilder::with_shared_store(tools, store.clone())
        .feed_retention(Duration::from_millis(300))
        .upkeep_interval(Duration::from_millis(50))
        .build();
    let app = Router::new()
        .route("/app/hello", get(|| async { "hello from the app" }))
        .merge(toolgate);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let api = Api::new(addr);

    let hello = reqwest::get(format!("http://{addr}/app/hello"))
        .await
        .unwrap();
    assert_eq!(hello.status(), StatusCode::OK);
    assert_eq!(hello.text().await.unwrap(), "hello from the app");
    // A call that waits for a person: `call.suspended` in the feed.
    let (status, body) = api.call("ask_human", json!({"question": "Mounted?"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // On PostgreSQL an entry is read once it is final: when no feed writer older than it is
    // still in flight (a heartbeat's sweep may be), which is soon but not at once.
    let entries = eventually("the suspension's feed entry", async || {
        let entries = store.feed(None, 100).await.unwrap().entries;
        (!entries.is_empty()).then_some(entries)
    })
    .await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].kind, "call.suspended");

    // Within a few upkeep rounds past the retention: the feed's entries are gone, and so is
    // the session that ran out; the live one stays.
    eventually("the feed pruned", async || {
        let page = store.feed(None, 100).await.ok()?;
        page.entries.is_empty().then_some(())
    })
    .await;
    eventually("the ended session pruned", async || {
        let found = store.session("ran-out", long_ago).await.ok()?;
        found.is_none().then_some(())
    })
    .await;
    assert!(
        store.session("still-on", long_ago).await.unwrap().is_some(),
        "a live session is kept"
    );
    server.abort();
}

/// `builder` started; what it was refused, or, when it starts, the tools it serves on a port of
/// its own.
async fn started(builder: ServerBuilder) -> Result<Vec<String>, StartError> {
    let serving = builder.start().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, serving.router.clone()).into_future());
    let (status, body) = Api::new(addr).get("/tools").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.abort();
    serving.running().release_held();
    serving.drain().await;
    let names = body["tools"].as_array().expect("a tool list");
    Ok(names
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect())
}

#[tokio::test]
async fn an_app_starting_the_builder_is_refused_what_the_binary_refuses() {
    let location = Location::new(Backend::Sqlite).await;
    // A database file of its own for each start: a refused builder's store is dropped, not
    // closed, and its writer may still hold the file's lock for a moment.
    let starts = std::sync::atomic::AtomicUsize::new(0);
    let builder = |config: &str| {
        let config = Config::from_toml(config).unwrap();
        let n = starts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let store =
            toolgate::store::SqliteStore::open(location.data_dir().join(format!("started-{n}.db")));
        ServerBuilder::new(example_tools(&location), store.unwrap())
            .dispatch_config(config.dispatch_config())
    };
    let public = "0.0.0.0:8080".parse().unwrap();

    // Without credentials, an address other hosts reach is refused; on loopback, or when the
    // app says it means it, the server starts.
    match started(builder("").listen_address(public)).await {
        Err(StartError::NoCredentials { addr }) => assert_eq!(addr, public),
        other => panic!(
            "not refused for its credentials: {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
    let loopback = "127.0.0.1:8080".parse().unwrap();
    let tools = started(builder("").listen_address(loopback)).await.unwrap();
    assert!(tools.contains(&"issue_refund".to_owned()), "{tools:?}");
    let meant = builder("").listen_address(public).insecure_no_auth(true);
    assert!(started(meant).await.is_ok());

    // Settings for a tool that is not served: a misspelt name would leave the tool it meant
    // without its approval.
    match started(builder("[tools.issue_refnud]\nrequire_approval = true\n")).await {
        Err(StartError::UnknownTool { tool }) => assert_eq!(tool, "issue_refnud"),
        other => panic!(
            "not refused for the name: {:?}",
            other.map_err(|e| e.to_string())
        ),
    }

    // A condition over a field the tool's input cannot have.
    let condition = "[tools.issue_refund.approval]\nwhen = \"input.amount > 10000\"\n";
    match started(builder(condition)).await {
        Err(StartError::ApprovalField { tool, key, message }) => {
            assert_eq!((tool.as_str(), key), ("issue_refund", "when"));
            assert!(message.contains("`input.amount`"), "{message}");
        }
        other => panic!(
            "not refused for the field: {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
}

crate::on_each_backend! {
    #[tokio::test] async fn a_mounted_router_runs_the_stores_upkeep;
}
