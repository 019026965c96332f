//! `/inbox` in a real browser: headless Chromium (Debian's `chromium`, installed by
//! `.ci/test-deps`), driven by `tests/inbox_browser/inbox.mjs` through npm `playwright-core`.
//!
//! `TOOLGATE_INBOX_SCREENSHOTS=docs cargo test --test inbox_browser` also writes the README's
//! screenshots (`docs/inbox-queue.png`, `docs/inbox-approval.png`, `docs/inbox-confirm.png`),
//! from the realistic queue of the `decide` phase, on a server of its own: the hostile strings
//! of the `main` phase never show in them.

mod common;

use std::process::Command;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate::http::auth::{ApiKey, Role, token_sha256};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet, serde_json};

use common::{Backend, Location, Site, TestServer, repo_root};

const APPROVER: &str = "approver-token-for-the-browser";
const CALLER: &str = "caller-token-for-the-browser";
const OTHER_APPROVER: &str = "other-approver-token-for-the-browser";

/// Packs an order into boxes a person lists: a suspension whose answer holds an array.
#[derive(Tool)]
#[tool(effect = "read")]
struct PackOrder;

#[derive(Deserialize, JsonSchema)]
struct PackInput {
    #[allow(dead_code, reason = "the schema's; the handler only needs the answer")]
    order_id: String,
}

/// How the order was packed.
#[derive(Serialize, Deserialize, JsonSchema)]
struct Packing {
    /// The boxes, in the order they were packed.
    boxes: Vec<Parcel>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Parcel {
    /// What is written on the box.
    label: String,
    /// Its weight, when weighed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weight_kg: Option<f64>,
}

#[toolgate::async_trait]
impl ToolHandler for PackOrder {
    type Input = PackInput;
    type Output = Packing;

    async fn call(
        &self,
        ctx: &ToolCtx,
        _: PackInput,
    ) -> Result<ToolOutcome<Packing>, HandlerError> {
        match ctx.resume() {
            None => Ok(ToolOutcome::suspend_for::<Packing>("How was it packed?")),
            Some(answer) => Ok(ToolOutcome::output(
                serde_json::from_value(answer.clone()).map_err(HandlerError::new)?,
            )),
        }
    }
}

async fn start(at: &(impl Site + ?Sized)) -> TestServer {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), at.data_dir()).unwrap();
    tools.register(PackOrder).unwrap();
    let keys = vec![
        ApiKey {
            name: "finance-ops".into(),
            role: Role::Approver,
            token_sha256: token_sha256(APPROVER),
        },
        ApiKey {
            name: "on-call".into(),
            role: Role::Approver,
            token_sha256: token_sha256(OTHER_APPROVER),
        },
        ApiKey {
            name: "orchestrator".into(),
            role: Role::Caller,
            token_sha256: token_sha256(CALLER),
        },
    ];
    TestServer::start_with(tools, at, |builder| builder.api_keys(keys)).await
}

/// Runs the browser script in `phase` against `server`; what it saw.
async fn browse(server: &TestServer, phase: &str, state: &std::path::Path) -> Value {
    let node_dir = repo_root().join(".ci/node");
    assert!(
        node_dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run `bash .ci/test-deps`"
    );
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "Debian's chromium is not installed: run `bash .ci/test-deps`"
    );
    let script =
        std::fs::read_to_string(repo_root().join("tests/inbox_browser/inbox.mjs")).unwrap();
    let mut command = Command::new("node");
    // Run where playwright-core is installed, so its import resolves.
    command
        .current_dir(&node_dir)
        .args(["--input-type=module", "-e", &script])
        .env("INBOX_BASE", &server.api.base)
        .env("INBOX_PHASE", phase)
        .env("INBOX_APPROVER", APPROVER)
        .env("INBOX_CALLER", CALLER)
        .env("INBOX_OTHER_APPROVER", OTHER_APPROVER)
        .env("INBOX_STATE", state);
    let shots = std::env::var("TOOLGATE_INBOX_SCREENSHOTS").ok();
    if let Some(dir) = shots.filter(|_| phase == "decide") {
        let dir = repo_root().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        command.env("INBOX_SCREENSHOTS", dir);
    }
    summary(command).await
}

/// Runs a browser script's `command` (blocking, off the runtime that serves the page): the
/// JSON summary it printed last, once it succeeded.
async fn summary(mut command: Command) -> Value {
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
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("no summary ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_and_decides_in_a_real_browser() {
    let at = Location::new(Backend::Sqlite).await;
    let server = start(&at).await;
    let state = at.data_dir().join("browser-state.json");
    let seen = browse(&server, "main", &state).await;
    assert_eq!(
        seen["steps"],
        serde_json::json!([
            "caller refused",
            "live queue",
            "refused, fixed, approved",
            "rejected",
            "completed externally",
            "typing kept, decided elsewhere",
            "array rows",
            "csrf 403",
            "done"
        ]),
        "{seen}"
    );
    assert_eq!(
        seen["dialogs"],
        serde_json::json!([]),
        "a script payload ran: {seen}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_reads_confirms_a_write_and_moves_on_in_a_real_browser() {
    let at = Location::new(Backend::Sqlite).await;
    let server = start(&at).await;
    let state = at.data_dir().join("browser-state.json");
    let seen = browse(&server, "decide", &state).await;
    assert_eq!(
        seen["steps"],
        serde_json::json!([
            "realistic queue, one expiry wording",
            "readable input",
            "confirm step approves nothing",
            "confirmed, banner, next",
            "rejected, next",
            "none left, back to the queue",
            "done"
        ]),
        "{seen}"
    );
    assert_eq!(seen["dialogs"], serde_json::json!([]), "{seen}");
    server.stop().await;
}

async fn the_browser_stays_signed_in_across_a_restart(backend: Backend) {
    let at = Location::new(backend).await;
    let state = at.data_dir().join("browser-state.json");
    let server = start(&at).await;
    browse(&server, "restart-1", &state).await;
    server.stop().await;
    let server = start(&at).await;
    let seen = browse(&server, "restart-2", &state).await;
    assert_eq!(
        seen["steps"],
        serde_json::json!(["still signed in after the restart"])
    );
    server.stop().await;
}

on_each_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn the_browser_stays_signed_in_across_a_restart;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_a_foreign_name_can_neither_read_nor_change_anything() {
    // Auth off, as the quick start runs: only the Host and Origin check stands in the way.
    let at = Location::new(Backend::Sqlite).await;
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), at.data_dir()).unwrap();
    let server = TestServer::start(tools, &at).await;
    let port = server.api.addr().port().to_string();
    let node_dir = repo_root().join(".ci/node");
    let script =
        std::fs::read_to_string(repo_root().join("tests/inbox_browser/rebinding.mjs")).unwrap();
    let mut command = Command::new("node");
    command
        .current_dir(&node_dir)
        .args(["--input-type=module", "-e", &script])
        .env("REBIND_PORT", &port);
    let seen = summary(command).await;
    assert_eq!(
        seen["probe"], 200,
        "the page under the foreign name loaded: {seen}"
    );
    for door in [
        "inbox_navigation",
        "list_tools",
        "call_echo",
        "send_email",
        "list_approvals",
        "list_calls",
        "openapi",
        "inbox",
        "sign_in",
        "mcp",
    ] {
        assert_eq!(seen[door], 403, "{door} from the foreign name: {seen}");
    }
    assert_eq!(seen["events"], "failed", "{seen}");
    assert_eq!(seen["own_inbox_navigation"], 200, "the control: {seen}");
    // Nothing was called, by the same-origin attempts or the cross-origin one (whose answer
    // the page could not read anyway).
    let (status, calls) = server.api.get("/calls").await;
    assert_eq!(status, 200);
    assert_eq!(calls["calls"], serde_json::json!([]), "{calls}");
    assert!(
        common::outbox(&at).is_empty(),
        "no email was sent from the foreign page"
    );
    server.stop().await;
}
