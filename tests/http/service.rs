//! The server as a service: health and readiness, and what it survives without a 5xx leaking its
//! internals: a panicking handler, a client that hangs up mid-call, a store that fails.

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate::schemars::{self, JsonSchema};
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet};

use crate::common::{
    self, Api, Backend, Location, TestServer, assert_error, eventually, outbox, temp_dir,
};
use crate::examples;

/// Panics when told to.
#[derive(Tool)]
#[tool(effect = "write")]
struct Panicky;

#[derive(Deserialize, JsonSchema)]
struct PanickyInput {
    boom: bool,
}

#[toolgate::async_trait]
impl ToolHandler for Panicky {
    type Input = PanickyInput;
    type Output = Value;

    async fn call(
        &self,
        _ctx: &ToolCtx,
        input: PanickyInput,
    ) -> Result<ToolOutcome<Value>, HandlerError> {
        if input.boom {
            panic!("kaboom");
        }
        Ok(ToolOutcome::output(json!("calm")))
    }
}

async fn health_and_readiness(backend: Backend) {
    let (server, _location) = examples(backend).await;
    let (status, body) = server.api.get("/healthz").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = server.api.get("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    match backend {
        Backend::Sqlite => assert_eq!(
            body,
            json!({"status": "ready", "store": "sqlite"}),
            "no replica on the embedded store"
        ),
        Backend::Postgres => {
            let replica = body["replica"].as_str().unwrap_or_default();
            assert!(!replica.is_empty(), "a replica names itself: {body}");
            assert_eq!(
                body,
                json!({"status": "ready", "store": "postgres", "replica": replica})
            );
        }
    }
    server.stop().await;
}

async fn a_panicking_handler_fails_its_call_and_the_server_goes_on(backend: Backend) {
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools.register(Panicky).unwrap();
    let server = TestServer::start(tools, &location).await;
    let (status, body) = server.api.call("panicky", json!({"boom": true})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["status"], "failed");
    assert_error(&body, "tool_panicked");
    let (_, record) = server
        .api
        .get(&format!("/calls/{}", body["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["status"], "failed");
    assert_eq!(record["error"]["code"], "tool_panicked");

    let (status, body) = server.api.call("panicky", json!({"boom": false})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["output"], "calm");
    server.stop().await;
}

async fn a_call_whose_client_hangs_up_still_runs_to_its_recorded_outcome(backend: Backend) {
    let location = Location::new(backend).await;
    let config = toolgate::config::ExamplesConfig {
        send_email_delay_ms: 300,
        ..Default::default()
    };
    let server = TestServer::examples_with(&location, config).await;
    common::tls();
    let impatient = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(50))
        .build()
        .unwrap();
    let sent = impatient
        .post(format!("{}/tools/send_email/call", server.api.base))
        .json(&json!({"input": {"to": "c@example.com", "subject": "s", "body": "b"}}))
        .send()
        .await;
    assert!(sent.is_err(), "the client gave up before the answer");

    // The tool goes on without the client: its effect happens once and its outcome is recorded.
    let status = eventually("the send_email call is finished", async || {
        let calls = location.stored_calls().await;
        let call = calls.into_iter().find(|call| call.tool == "send_email")?;
        Some(call.status).filter(|status| status != "running")
    })
    .await;
    assert_eq!(status, "completed");
    assert_eq!(outbox(&location).len(), 1);
    server.stop().await;
}

/// A store whose every operation fails, with an error that must never reach a client.
struct BrokenStore;

const SECRET: &str = "/var/secret/toolgate.db: disk on fire";

fn broken<T>() -> Result<T, toolgate::store::StoreError> {
    Err(toolgate::store::StoreError::Backend(SECRET.into()))
}

#[toolgate::async_trait]
impl toolgate::store::Store for BrokenStore {
    async fn counts(&self) -> Result<toolgate::store::StoreCounts, toolgate::store::StoreError> {
        broken()
    }

    async fn ping(&self) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    fn backend(&self) -> &'static str {
        "broken"
    }
}

#[toolgate::async_trait]
impl toolgate::store::CallStore for BrokenStore {
    async fn insert_call(
        &self,
        _call: toolgate::store::NewCall,
        _outcome: Option<toolgate::store::Outcome>,
    ) -> Result<toolgate::store::Inserted, toolgate::store::StoreError> {
        broken()
    }

    async fn finish_call(
        &self,
        _call_id: &str,
        _run: Option<u32>,
        _attempts: u32,
        _outcome: &toolgate::store::Outcome,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn rerun_interrupted(
        &self,
        _call_id: &str,
    ) -> Result<Option<toolgate::store::Rerun>, toolgate::store::StoreError> {
        broken()
    }

    async fn call(
        &self,
        _call_id: &str,
    ) -> Result<Option<toolgate::store::CallRecord>, toolgate::store::StoreError> {
        broken()
    }

    async fn list_calls(
        &self,
        _filter: toolgate::store::CallFilter,
        _after: Option<i64>,
        _limit: u32,
    ) -> Result<toolgate::store::CallPage, toolgate::store::StoreError> {
        broken()
    }

    async fn pending_approvals_of(
        &self,
        _tool: Option<&str>,
        _after: Option<i64>,
        _limit: u32,
    ) -> Result<toolgate::store::ApprovalPage, toolgate::store::StoreError> {
        broken()
    }

    async fn approval(
        &self,
        _token: &str,
    ) -> Result<Option<toolgate::store::ApprovalState>, toolgate::store::StoreError> {
        broken()
    }

    async fn resolve_by(
        &self,
        _token: &str,
        _resolution: toolgate::store::Resolution,
        _actor: &toolgate::store::Actor,
    ) -> Result<toolgate::store::Resolved, toolgate::store::StoreError> {
        broken()
    }

    async fn reconcile_by(
        &self,
        _call_id: &str,
        _settlement: toolgate::store::Settlement,
        _actor: &toolgate::store::Actor,
    ) -> Result<toolgate::store::Reconciled, toolgate::store::StoreError> {
        broken()
    }

    async fn escalate(
        &self,
        _tool: &str,
        _created_by: toolgate::store::Timestamp,
    ) -> Result<Vec<String>, toolgate::store::StoreError> {
        broken()
    }
}

#[toolgate::async_trait]
impl toolgate::store::FeedStore for BrokenStore {
    async fn feed(
        &self,
        _after: Option<&toolgate::store::FeedCursor>,
        _limit: u32,
    ) -> Result<toolgate::store::FeedPage, toolgate::store::StoreError> {
        broken()
    }

    async fn feed_head(&self) -> Result<toolgate::store::FeedCursor, toolgate::store::StoreError> {
        broken()
    }

    async fn prune_feed(
        &self,
        _before: toolgate::store::Timestamp,
    ) -> Result<u64, toolgate::store::StoreError> {
        broken()
    }

    fn feed_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        tokio::sync::watch::channel(0).1
    }
}

#[toolgate::async_trait]
impl toolgate::store::OutboxStore for BrokenStore {
    async fn webhook_cursor(
        &self,
    ) -> Result<Option<toolgate::store::FeedCursor>, toolgate::store::StoreError> {
        broken()
    }

    async fn enqueue_deliveries(
        &self,
        _from: Option<&toolgate::store::FeedCursor>,
        _to: &toolgate::store::FeedCursor,
        _deliveries: Vec<toolgate::store::NewDelivery>,
    ) -> Result<bool, toolgate::store::StoreError> {
        broken()
    }

    async fn claim_deliveries(
        &self,
        _limit: u32,
        _lease: std::time::Duration,
    ) -> Result<Vec<toolgate::store::Delivery>, toolgate::store::StoreError> {
        broken()
    }

    async fn settle_delivery(
        &self,
        _id: i64,
        _result: toolgate::store::DeliveryResult,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn list_deliveries(
        &self,
        _status: Option<toolgate::store::DeliveryStatus>,
        _after: Option<i64>,
        _limit: u32,
    ) -> Result<toolgate::store::DeliveryPage, toolgate::store::StoreError> {
        broken()
    }

    async fn list_notifications(
        &self,
        _status: Option<toolgate::store::DeliveryStatus>,
        _after: Option<i64>,
        _limit: u32,
    ) -> Result<toolgate::store::DeliveryPage, toolgate::store::StoreError> {
        broken()
    }

    async fn call_notifications(
        &self,
        _call_id: &str,
    ) -> Result<Vec<toolgate::store::Delivery>, toolgate::store::StoreError> {
        broken()
    }

    async fn retry_delivery(
        &self,
        _id: i64,
    ) -> Result<Option<toolgate::store::Delivery>, toolgate::store::StoreError> {
        broken()
    }

    async fn disabled_webhooks(&self) -> Result<Vec<String>, toolgate::store::StoreError> {
        broken()
    }
}

#[toolgate::async_trait]
impl toolgate::store::SessionStore for BrokenStore {
    async fn create_session(
        &self,
        _session: &toolgate::store::InboxSession,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn session(
        &self,
        _id_sha256: &str,
        _now: toolgate::store::Timestamp,
    ) -> Result<Option<toolgate::store::InboxSession>, toolgate::store::StoreError> {
        broken()
    }

    async fn delete_session(&self, _id_sha256: &str) -> Result<bool, toolgate::store::StoreError> {
        broken()
    }

    async fn prune_sessions(
        &self,
        _now: toolgate::store::Timestamp,
    ) -> Result<u64, toolgate::store::StoreError> {
        broken()
    }
}

/// Keeps no standing approvals (the trait's defaults).
impl toolgate::store::StandingStore for BrokenStore {}
impl toolgate::store::PinStore for BrokenStore {}
#[toolgate::async_trait]
impl toolgate::store::AuditStore for BrokenStore {
    async fn audit_entries(
        &self,
        _after: i64,
        _limit: u32,
    ) -> Result<Vec<toolgate::store::AuditEntry>, toolgate::store::StoreError> {
        broken()
    }

    async fn audit_head(
        &self,
    ) -> Result<Option<toolgate::store::AuditEntry>, toolgate::store::StoreError> {
        broken()
    }

    async fn audit_path(
        &self,
        _call_id: &str,
        _limit: u32,
    ) -> Result<Option<toolgate::store::AuditPath>, toolgate::store::StoreError> {
        broken()
    }

    async fn append_checkpoint(
        &self,
        _checkpoint: toolgate::store::NewCheckpoint,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn claim_audit_export(
        &self,
        _sink: &str,
        _owner: &str,
        _lease_ms: i64,
    ) -> Result<Option<i64>, toolgate::store::StoreError> {
        broken()
    }

    async fn settle_audit_export(
        &self,
        _sink: &str,
        _owner: &str,
        _after: i64,
        _delivered: i64,
        _error: Option<String>,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn release_audit_export(
        &self,
        _sink: &str,
        _owner: &str,
    ) -> Result<(), toolgate::store::StoreError> {
        broken()
    }

    async fn audit_exports(
        &self,
    ) -> Result<Vec<toolgate::store::ExportState>, toolgate::store::StoreError> {
        broken()
    }
}
#[toolgate::async_trait]
impl toolgate::store::SigningKeyStore for BrokenStore {
    async fn signing_key_for(
        &self,
        _key: &toolgate::store::SigningKey,
    ) -> Result<toolgate::store::SigningKey, toolgate::store::StoreError> {
        broken()
    }

    async fn signing_keys(
        &self,
        _now: toolgate::store::Timestamp,
    ) -> Result<Vec<toolgate::store::SigningKey>, toolgate::store::StoreError> {
        broken()
    }

    async fn prune_signing_keys(
        &self,
        _now: toolgate::store::Timestamp,
    ) -> Result<u64, toolgate::store::StoreError> {
        broken()
    }
}

#[toolgate::async_trait]
impl toolgate::store::LinkKeyStore for BrokenStore {
    async fn link_key_for(
        &self,
        _key: &toolgate::store::LinkKey,
    ) -> Result<toolgate::store::LinkKey, toolgate::store::StoreError> {
        broken()
    }

    async fn link_keys(
        &self,
        _now: toolgate::store::Timestamp,
    ) -> Result<Vec<toolgate::store::LinkKey>, toolgate::store::StoreError> {
        broken()
    }

    async fn prune_link_keys(
        &self,
        _now: toolgate::store::Timestamp,
    ) -> Result<u64, toolgate::store::StoreError> {
        broken()
    }
}

#[tokio::test]
async fn a_failing_store_is_answered_without_leaking_its_internals() {
    let mut tools = ToolSet::new();
    toolgate::examples::register(&mut tools, &Default::default(), temp_dir().path()).unwrap();
    let router = toolgate::ServerBuilder::new(tools, BrokenStore).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = Api::new(listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let answers = [
        api.call("echo", json!({"text": "a"})).await,
        api.call(
            "send_email",
            json!({"to": "a", "subject": "s", "body": "b"}),
        )
        .await,
        api.get("/calls/call_x").await,
        api.get("/approvals").await,
        api.get("/approvals/sus_x").await,
        api.approve("sus_x", json!({})).await,
        api.post("/approvals/sus_x/reject", json!({"reason": "r"}))
            .await,
    ];
    for (status, body) in answers {
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert_error(&body, "internal");
        let text = body.to_string();
        assert!(
            !text.contains("disk on fire") && !text.contains("/var/secret"),
            "{text}"
        );
    }
    // Over MCP: JSON-RPC -32603, with nothing internal in it either.
    for (tool, arguments) in [
        ("echo", json!({"text": "a"})),
        (
            "send_email",
            json!({"to": "a", "subject": "s", "body": "b"}),
        ),
        (
            "toolgate_await_call",
            json!({"call_id": "call_x", "wait_seconds": 0}),
        ),
    ] {
        let (status, body) = api
            .post_raw_with(
                "/mcp",
                &[
                    ("accept", "application/json, text/event-stream"),
                    ("mcp-protocol-version", "2025-11-25"),
                ],
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["error"]["code"], -32603, "{tool}: {body}");
        let text = body.to_string();
        assert!(
            !text.contains("disk on fire") && !text.contains("/var/secret"),
            "{text}"
        );
    }
    let (status, body) = api.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_error(&body, "not_ready");
    assert!(!body.to_string().contains("disk on fire"));
    let (status, _) = api.get("/healthz").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "liveness does not depend on the store"
    );
    server.abort();
}

crate::on_each_backend! {
    #[tokio::test] async fn health_and_readiness;
    #[tokio::test] async fn a_panicking_handler_fails_its_call_and_the_server_goes_on;
    #[tokio::test] async fn a_call_whose_client_hangs_up_still_runs_to_its_recorded_outcome;
}
