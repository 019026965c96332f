//! A decision link followed in a real browser: headless Chromium (Debian's `chromium`,
//! installed by `.ci/test-deps`), driven by `tests/inbox_browser/link.mjs` through npm
//! `playwright-core`, launched as `tests/inbox_browser.rs` launches it.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Backend, Location, repo_root};
use crate::{APPROVER, serve, suspend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_follows_a_link_and_approves_in_a_real_browser() {
    let node_dir = repo_root().join(".ci/node");
    assert!(
        node_dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run `bash .ci/test-deps`"
    );
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "Debian's chromium is not installed: run `bash .ci/test-deps`"
    );
    let at = Location::new(Backend::Sqlite).await;
    let served = serve(&at, Duration::from_secs(3600), true).await;
    let server = &served.server;
    let asked = suspend(server, "ask_human", json!({"question": "Ship it?"})).await;
    let refund = json!({"order_id": "o-7", "amount_cents": 25000, "reason": "broken"});
    let write = suspend(server, "issue_refund", refund).await;
    let script = std::fs::read_to_string(repo_root().join("tests/inbox_browser/link.mjs")).unwrap();
    let mut command = Command::new("node");
    command
        .current_dir(&node_dir)
        .args(["--input-type=module", "-e", &script])
        .env("LINK_BASE", &server.api.base)
        .env("LINK_APPROVER", APPROVER)
        .env("LINK_ANSWER", served.link(&asked, "finance-ops").await)
        .env("LINK_ANSWER_CALL", &asked)
        .env("LINK_WRITE", served.link(&write, "finance-ops").await)
        .env("LINK_WRITE_CALL", &write);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the browser script failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no summary ({e}): {stdout}"));
    assert_eq!(
        seen["steps"],
        json!(["answered and approved", "used", "write confirmed"]),
        "{seen}"
    );
    assert_eq!(seen["errors"], json!([]), "{seen}");
    served.server.stop().await;
}
