//! `/inbox` in a real browser: headless Chromium (Debian's `chromium`, installed by
//! `.ci/test-deps`), driven by `tests/inbox_browser/inbox.mjs` through npm `playwright-core`.
//!
//! `cargo test --test inbox_browser -- --ignored screenshots` retakes the guide's screenshots
//! (`docs/inbox-queue.png`, `docs/inbox-approval.png`, `docs/inbox-confirm.png`) from the
//! realistic queue of the `decide` phase, on a server of its own: the hostile strings of the
//! `main` phase never show in them. (`TOOLGATE_INBOX_SCREENSHOTS=<dir> cargo test --test
//! inbox_browser` writes them to `<dir>` while the suite runs.)

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
        ApiKey::new("finance-ops", Role::Approver, token_sha256(APPROVER)),
        ApiKey::new("on-call", Role::Approver, token_sha256(OTHER_APPROVER)),
        ApiKey::new("orchestrator", Role::Caller, token_sha256(CALLER)),
    ];
    TestServer::start_with(tools, at, |builder| builder.api_keys(keys)).await
}

/// Runs the browser script in `phase` against `server`; what it saw. The `decide` phase also
/// writes its screenshots to `TOOLGATE_INBOX_SCREENSHOTS` (under the repository) when it is set.
async fn browse(server: &TestServer, phase: &str, state: &std::path::Path) -> Value {
    let shots = std::env::var("TOOLGATE_INBOX_SCREENSHOTS")
        .ok()
        .filter(|_| phase == "decide")
        .map(|dir| repo_root().join(dir));
    browse_shooting(server, phase, state, shots.as_deref()).await
}

/// Runs the browser script in `phase` against `server`, writing its screenshots to `shots`
/// when given; what it saw.
async fn browse_shooting(
    server: &TestServer,
    phase: &str,
    state: &std::path::Path,
    shots: Option<&std::path::Path>,
) -> Value {
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
    if let Some(dir) = shots {
        std::fs::create_dir_all(dir).unwrap();
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
            "caught up on open",
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

/// Retakes the guide's screenshots of the inbox in `docs/`, from the `decide` phase's queue:
/// run it when the inbox's templates or styles change, and look at what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "rewrites docs/*.png: `cargo test --test inbox_browser -- --ignored screenshots`"]
async fn screenshots() {
    let at = Location::new(Backend::Sqlite).await;
    let server = start(&at).await;
    let state = at.data_dir().join("browser-state.json");
    let docs = repo_root().join("docs");
    let names = ["inbox-queue.png", "inbox-approval.png", "inbox-confirm.png"];
    let before: Vec<_> = names
        .iter()
        .map(|name| {
            std::fs::metadata(docs.join(name))
                .and_then(|m| m.modified())
                .ok()
        })
        .collect();
    let seen = browse_shooting(&server, "decide", &state, Some(&docs)).await;
    assert_eq!(
        seen["steps"].as_array().and_then(|s| s.last()),
        Some(&"done".into()),
        "{seen}"
    );
    for (name, before) in names.iter().zip(before) {
        let path = docs.join(name);
        let png = std::fs::read(&path).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        assert!(
            before.is_none() || modified > before,
            "{name} was written again"
        );
    }
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

/// Single sign-on: a person signs in through the identity provider's own login page in
/// Chromium (`[inbox.oidc]`, with the key form turned off), is refused when their grants make
/// no approver, and otherwise decides what their grants let them, recorded under their name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_with_the_identity_provider_and_the_history_names_them() {
    use common::oidc::Provider;
    let provider = Provider::start(serde_json::json!({}));
    let at = Location::new(Backend::Sqlite).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    provider
        .client(serde_json::json!({
            "client_id": "inbox",
            "redirect_uris": [format!("{base}/inbox/oidc/callback")],
        }))
        .await;
    let issuer: toolgate::identity::IssuerConfig = toml::from_str(&format!(
        "name = \"corp\"\nissuer = \"{}\"\naudiences = [\"https://toolgate.test/mcp\"]\n\
         [[grants]]\nwhen = {{ claim = \"groups\", contains = \"finance\" }}\n\
         role = \"approver\"\ndecides = [\"issue_refund\"]\n",
        provider.issuer
    ))
    .unwrap();
    let issuers = toolgate::identity::Issuers::new(&[issuer]).unwrap();
    let inbox: toolgate::inbox::config::InboxConfig = toml::from_str(&format!(
        "key_sign_in = false\n[oidc]\nissuer = \"corp\"\nclient_id = \"inbox\"\n\
         client_secret_env = \"INBOX_SECRET\"\nredirect_url = \"{base}/inbox/oidc/callback\"\n"
    ))
    .unwrap();
    let options = inbox
        .options_with(&issuers, |name| {
            (name == "INBOX_SECRET").then(|| "inbox-secret".to_owned())
        })
        .unwrap();
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), at.data_dir()).unwrap();
    let keys = vec![ApiKey::new(
        "orchestrator",
        Role::Caller,
        token_sha256(CALLER),
    )];
    let server = TestServer::start_on(listener, tools, &at, |builder| {
        builder.api_keys(keys).issuers(issuers).inbox(options)
    })
    .await;
    assert_eq!(server.api.base, base);

    let node_dir = repo_root().join(".ci/node");
    let script = std::fs::read_to_string(repo_root().join("tests/inbox_browser/sso.mjs")).unwrap();
    let mut command = Command::new("node");
    command
        .current_dir(&node_dir)
        .args(["--input-type=module", "-e", &script])
        .env("SSO_BASE", &base)
        .env("SSO_CALLER", CALLER);
    let seen = summary(command).await;
    assert_eq!(
        seen["steps"],
        serde_json::json!([
            "no grant refused",
            "signed in as a person",
            "approved, history names her",
            "signed out",
            "done"
        ]),
        "{seen}"
    );
    // The record says who, and the name shown for them.
    let refund = seen["refund"].as_str().unwrap();
    let call = server.store.call(refund).await.unwrap().unwrap();
    assert_eq!(call.status, toolgate::store::CallStatus::Completed);
    let approved = call.events.iter().find(|e| e.kind == "approved").unwrap();
    assert_eq!(approved.actor.as_deref(), Some("corp:dana"));
    assert_eq!(approved.actor_name.as_deref(), Some("Dana Reyes"));
    // A key posted to the form anyway (with the form's own double-submit token) is refused.
    let page = server
        .api
        .client
        .get(format!("{base}/inbox"))
        .send()
        .await
        .unwrap();
    let token = page
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("toolgate_inbox_sign_in="))
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_owned();
    let response = server
        .api
        .client
        .post(format!("{base}/inbox/sign-in"))
        .header("cookie", format!("toolgate_inbox_sign_in={token}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("key={CALLER}&csrf={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::FORBIDDEN);
    assert!(response.text().await.unwrap().contains("turned off"));
    server.stop().await;
}
