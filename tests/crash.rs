//! `kill -9` in the middle of a write: the real binary, its real database, its real outbox.

mod common;

use std::time::{Duration, Instant};

use common::{Binary, assert_error, outbox, temp_dir};
use reqwest::StatusCode;
use serde_json::json;

/// The status of the one call of `tool` in the database, once it exists.
fn status_in_db(dir: &std::path::Path, tool: &str) -> Option<(String, String)> {
    let conn = rusqlite::Connection::open(dir.join("toolgate.db")).ok()?;
    conn.query_row(
        "SELECT call_id, status FROM calls WHERE tool = ?1",
        [tool],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .ok()
}

#[test]
fn a_write_killed_mid_call_needs_reconciliation_and_is_never_sent() {
    let dir = temp_dir();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = Binary::start(
        dir.path(),
        &[("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "3000")],
    );
    let api = server.api.clone();
    let email = json!({"to": "dana@example.com", "subject": "invoice", "body": "attached"});
    let request = {
        let email = email.clone();
        runtime.spawn(async move { api.call_keyed("send_email", "invoice-7", email).await })
    };
    // Wait until the intent is committed: the handler is now sleeping before it sends.
    let deadline = Instant::now() + Duration::from_secs(20);
    let call_id = loop {
        if let Some((call_id, status)) = status_in_db(dir.path(), "send_email") {
            assert_eq!(status, "running");
            break call_id;
        }
        assert!(Instant::now() < deadline, "the intent was never recorded");
        std::thread::sleep(Duration::from_millis(20));
    };
    server.kill();
    // The client saw the connection die, not an answer (its task panicked on the error).
    assert!(
        runtime.block_on(request).is_err(),
        "no answer came before the kill"
    );
    assert!(outbox(dir.path()).is_empty(), "killed before the send");

    let server = Binary::start(
        dir.path(),
        &[("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "3000")],
    );
    let api = server.api.clone();
    runtime.block_on(async {
        let (status, record) = api.get(&format!("/calls/{call_id}")).await;
        assert_eq!(status, StatusCode::OK);
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
        outbox(dir.path()).is_empty(),
        "a write is never re-run by itself"
    );
    assert_eq!(
        status_in_db(dir.path(), "send_email")
            .map(|(_, s)| s)
            .as_deref(),
        Some("needs_reconciliation")
    );
}
