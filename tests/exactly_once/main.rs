//! Exactly-once effects: idempotency keys, replays, retries by effect, timeouts, output
//! receipts, external completion, reconciliation and expiring suspensions.

#[path = "../common/mod.rs"]
mod common;

mod keys;
mod load;
mod outcomes;
mod recovery;
mod retries;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Api, Backend, Location, Site, TestServer, assert_error, open_store, outbox};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::dispatch::{DispatchConfig, ToolSettings, client_key_scope};
use toolgate::schemars::{self, JsonSchema};
use toolgate::store::{NewCall, Outcome, Resolution, Timestamp};
use toolgate::{
    Effect, HandlerError, RetryPolicy, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet,
};

fn examples_config(delay_ms: u64) -> toolgate::config::ExamplesConfig {
    toolgate::config::ExamplesConfig {
        send_email_delay_ms: delay_ms,
        ..Default::default()
    }
}

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

fn quick_retries() -> DispatchConfig {
    DispatchConfig {
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        },
        ..DispatchConfig::default()
    }
}

async fn serve(tools: ToolSet, location: &Location, config: DispatchConfig) -> TestServer {
    TestServer::start_with(tools, location, |builder| builder.dispatch_config(config)).await
}

/// Sleeps longer than its timeout. Declares an output schema.
#[derive(Tool)]
#[tool(effect = "write")]
struct SlowCharge;

/// Sleeps longer than its timeout.
#[derive(Tool)]
#[tool(effect = "read")]
struct SlowLookup;

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Charge {
    charge_id: String,
}

#[toolgate::async_trait]
impl ToolHandler for SlowCharge {
    type Input = Nothing;
    type Output = Charge;
    async fn call(&self, _: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Charge>, HandlerError> {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(ToolOutcome::output(Charge {
            charge_id: "late".into(),
        }))
    }
    fn output_schema() -> Option<Value> {
        Some(serde_json::to_value(schemars::schema_for!(Charge)).unwrap())
    }
}

#[toolgate::async_trait]
impl ToolHandler for SlowLookup {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, _: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(ToolOutcome::output(json!(null)))
    }
}
