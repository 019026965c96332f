//! `kill -9` in the middle of a write: the real binary, its real database, its real outbox.

mod common;

use std::time::Duration;

use common::{Backend, Binary, Location, StoredCall, assert_error, eventually, outbox};
use reqwest::StatusCode;
use serde_json::json;

/// The one call of `tool` in the database, once it exists.
async fn stored_call(location: &Location, tool: &str) -> Option<StoredCall> {
    let calls = location.stored_calls().await;
    calls.into_iter().find(|call| call.tool == tool)
}

fn a_write_killed_mid_call_needs_reconciliation_and_is_never_sent(backend: Backend) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let location = runtime.block_on(Location::new(backend));
    let server = Binary::start(
        &location,
        &[("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "3000")],
    );
    let api = server.api.clone();
    let email = json!({"to": "dana@example.com", "subject": "invoice", "body": "attached"});
    let request = {
        let email = email.clone();
        runtime.spawn(async move { api.call_keyed("send_email", "invoice-7", email).await })
    };
    // Wait until the intent is committed: the handler is now sleeping before it sends.
    let intent = runtime.block_on(eventually("the intent is recorded", async || {
        stored_call(&location, "send_email").await
    }));
    assert_eq!(intent.status, "running");
    let call_id = intent.call_id;
    server.kill();
    // The client saw the connection die, not an answer (its task panicked on the error).
    assert!(
        runtime.block_on(request).is_err(),
        "no answer came before the kill"
    );
    assert!(outbox(&location).is_empty(), "killed before the send");

    let server = Binary::start(
        &location,
        &[("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "3000")],
    );
    let api = server.api.clone();
    runtime.block_on(async {
        let record = backend.recovered(&api, &call_id).await;
        assert_eq!(record["status"], "needs_reconciliation");
        let kinds: Vec<&str> = record["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["created", "needs_reconciliation"]);

        // The orchestrator retries with the same key: refused, and nothing is sent.
        let (status, _, _, body) = api
            .call_keyed("send_email", "invoice-7", email.clone())
            .await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(
            assert_error(&body, "needs_reconciliation")["call_id"],
            call_id.as_str()
        );
        // Longer than the send would take, had it started.
        tokio::time::sleep(Duration::from_millis(3500)).await;
    });
    assert!(
        outbox(&location).is_empty(),
        "a write is never re-run by itself"
    );
    let stored = runtime.block_on(stored_call(&location, "send_email"));
    assert_eq!(
        stored.map(|call| call.status).as_deref(),
        Some("needs_reconciliation")
    );
}

crate::on_each_backend! {
    #[test] fn a_write_killed_mid_call_needs_reconciliation_and_is_never_sent;
}
