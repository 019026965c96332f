//! MCP clients nobody here wrote: the official Python SDK in both eras and the official
//! TypeScript SDK list, call, get a pending answer and await it; no answer carries a token.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use super::{APPROVER, CALLER, server};
use crate::common::{Backend, Location, outbox, repo_root};

fn python() -> PathBuf {
    let venv = repo_root().join(".ci/venv/bin/python");
    assert!(
        venv.exists(),
        "the MCP Python SDK is not installed: run `bash .ci/test-deps`"
    );
    venv
}

/// Runs a client script to its end (off the runtime that serves it); its last line of output
/// is what it saw, as JSON.
async fn run_client(mut command: Command, what: &str) -> Value {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{what} runs: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{what} printed no JSON ({e}): {stdout}"))
}

/// Asserts that no MCP answer the client saw holds the token it got over REST.
fn assert_no_token(seen: &Value) {
    let token = seen["token"].as_str().expect("the client approved a call");
    assert!(token.starts_with("sus_"), "a token: {token}");
    for part in ["answers", "tools"] {
        let text = seen[part].to_string();
        assert!(
            !text.contains(token),
            "an MCP answer carries the token: {text}"
        );
        assert!(
            !text.contains("sus_"),
            "an MCP answer carries a token: {text}"
        );
    }
}

/// The Python SDK, in the era `mode`, lists, calls, gets a pending answer, awaits the approval's
/// outcome and (in 2026-07-28) drives a task; the calls are recorded as its key's.
async fn the_python_sdk_lists_calls_and_awaits(backend: Backend) {
    let location = Location::new(backend).await;
    let server = server(&location).await;
    for mode in ["legacy", "2026-07-28"] {
        let mut command = Command::new(python());
        command
            .arg(repo_root().join("tests/mcp/python_client.py"))
            .args([&server.api.base, mode, CALLER, APPROVER]);
        let seen = run_client(command, &format!("the Python SDK ({mode})")).await;
        assert_no_token(&seen);
        let call_id = seen["pending_call_id"].as_str().unwrap();
        let call = server.store.call(call_id).await.unwrap().expect("recorded");
        assert_eq!(call.caller.as_deref(), Some("agent"));
        assert_eq!(call.status.as_str(), "completed");
        assert_eq!(call.output, Some(json!({"answer": "Yes, ship it."})));
        if mode != "legacy" {
            let task = server
                .store
                .call(seen["task_id"].as_str().unwrap())
                .await
                .unwrap();
            assert_eq!(task.unwrap().output, Some(json!({"answer": "Deployed."})));
        }
    }
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn the_python_sdk_lists_calls_and_awaits;
}

#[tokio::test]
async fn the_typescript_sdk_lists_calls_and_awaits() {
    let location = Location::new(Backend::Sqlite).await;
    let server = server(&location).await;
    let node_dir = repo_root().join(".ci/node");
    assert!(
        node_dir
            .join("node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "the MCP TypeScript SDK is not installed: run `bash .ci/test-deps`"
    );
    let script = std::fs::read_to_string(repo_root().join("tests/mcp/ts_client.mjs")).unwrap();
    let mut command = Command::new("node");
    // Run where the SDK is installed, so its imports resolve.
    command
        .current_dir(&node_dir)
        .args(["--input-type=module", "-e", &script])
        .env("MCP_BASE", &server.api.base)
        .env("MCP_CALLER", CALLER)
        .env("MCP_APPROVER", APPROVER);
    let seen = run_client(command, "the TypeScript SDK").await;
    assert_no_token(&seen);
    // Its send_email ran once, as its key's.
    let sent = outbox(&location);
    assert_eq!(sent.len(), 1, "{sent:?}");
    server.stop().await;
}
