//! A native Rust tool that says `ATTESTED` signs an attestation for the service it calls, which
//! that service verifies with PyJWT (`tests/attest/verify.py`, the verifier of
//! docs/attestations.md) against the server's `GET /.well-known/jwks.json`: the claims name the
//! call, the caller, the approver and the policy, and the arguments' hash; another audience or
//! other arguments are refused. A tool that does not say `ATTESTED` gets none.

mod common;

use reqwest::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use common::attest::verify_aside;
use common::{Location, TestServer};
use toolgate::config::Config;
use toolgate::{HandlerError, Tool, ToolCtx, ToolHandler, ToolOutcome, ToolSet};

const ROOT: &str = "tg_root_0123456789abcdef";
const AGENT: &str = "tg_agent_0123456789abcdef";

#[derive(Deserialize, JsonSchema)]
struct Invoice {
    amount: u64,
}

/// What the tools answer: the token they would send, and what they were told of the call.
#[derive(Serialize, JsonSchema)]
struct Sent {
    token: Option<String>,
    caller: Option<String>,
    approvers: Vec<Option<String>>,
}

/// Pays an invoice through a billing service, with an attestation.
#[derive(Tool)]
#[tool(effect = "write")]
struct PayInvoice;

/// Looks an invoice up, saying nothing of attestations.
#[derive(Tool)]
#[tool(effect = "read")]
struct LookUpInvoice;

async fn sent(ctx: &ToolCtx, invoice: &Invoice) -> Result<ToolOutcome<Sent>, HandlerError> {
    let token = ctx
        .attestation("billing", &json!({"amount": invoice.amount}))
        .await
        .map_err(|err| HandlerError::message(err.to_string()))?;
    let facts = ctx.attested();
    Ok(ToolOutcome::output(Sent {
        token,
        caller: facts.and_then(|f| f.caller.clone()),
        approvers: facts
            .map(|f| f.approvals.iter().map(|a| a.who.clone()).collect())
            .unwrap_or_default(),
    }))
}

#[toolgate::async_trait]
impl ToolHandler for PayInvoice {
    const ATTESTED: bool = true;
    type Input = Invoice;
    type Output = Sent;

    async fn call(&self, ctx: &ToolCtx, input: Invoice) -> Result<ToolOutcome<Sent>, HandlerError> {
        sent(ctx, &input).await
    }
}

#[toolgate::async_trait]
impl ToolHandler for LookUpInvoice {
    type Input = Invoice;
    type Output = Sent;

    async fn call(&self, ctx: &ToolCtx, input: Invoice) -> Result<ToolOutcome<Sent>, HandlerError> {
        sent(ctx, &input).await
    }
}

async fn post(api: &common::Api, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let response = api
        .client
        .post(format!("{}{path}", api.base))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_tool_that_says_attested_signs_what_its_service_verifies() {
    let location = Location::new(common::Backend::Sqlite).await;
    let hash = |token: &str| hex::encode(toolgate::http::auth::token_sha256(token));
    let config = Config::from_toml(&format!(
        "[[auth.keys]]\nname = \"root\"\nrole = \"admin\"\ntoken_sha256 = \"{}\"\n\
         [[auth.keys]]\nname = \"agent\"\nrole = \"caller\"\ntoken_sha256 = \"{}\"\n\
         [tools.pay_invoice]\nrequire_approval = true\n",
        hash(ROOT),
        hash(AGENT)
    ))
    .unwrap();
    let mut tools = ToolSet::new();
    tools.register(PayInvoice).unwrap();
    tools.register(LookUpInvoice).unwrap();
    let (keys, dispatch) = (config.api_keys().unwrap(), config.dispatch_config());
    let signing = config.signing().unwrap();
    let server = TestServer::start_with(tools, &location, |builder| {
        builder
            .api_keys(keys)
            .dispatch_config(dispatch)
            .signing(signing)
    })
    .await;
    let api = &server.api;

    // The agent asks; root approves; the tool runs and signs.
    let input = json!({"input": {"amount": 120}});
    let (status, body) = post(api, AGENT, "/tools/pay_invoice/call", input).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let approval = body["suspension"]["token"].as_str().unwrap();
    let path = format!("/approvals/{approval}/approve");
    let (status, body) = post(api, ROOT, &path, json!({"input": {}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let output = &body["output"];
    assert_eq!(output["caller"], "agent", "{body}");
    assert_eq!(output["approvers"], json!(["root"]), "{body}");
    let token = output["token"].as_str().expect("an attestation");

    let claims = verify_aside(&api.base, "billing", token, Some(&json!({"amount": 120})))
        .await
        .unwrap();
    assert_eq!(claims["call_id"], call_id.as_str(), "{claims}");
    assert_eq!(claims["tool"], "pay_invoice", "{claims}");
    assert_eq!(claims["caller"], "agent", "{claims}");
    assert_eq!(claims["sub"], "agent", "{claims}");
    assert_eq!(claims["approval"], "approved", "{claims}");
    assert_eq!(claims["approvals"][0]["by"], "root", "{claims}");
    assert_eq!(claims["policy"], "tools.pay_invoice.approval", "{claims}");
    // Another service, or other arguments, refuse it.
    let refused = verify_aside(&api.base, "payroll", token, Some(&json!({"amount": 120})))
        .await
        .unwrap_err();
    assert!(refused.contains("refused"), "{refused}");
    let refused = verify_aside(&api.base, "billing", token, Some(&json!({"amount": 121})))
        .await
        .unwrap_err();
    assert!(refused.contains("arguments"), "{refused}");

    // A tool that does not say ATTESTED gets no attestation, nor the call's facts.
    let input = json!({"input": {"amount": 5}});
    let (status, body) = post(api, AGENT, "/tools/look_up_invoice/call", input).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["output"],
        json!({"token": null, "caller": null, "approvers": []})
    );
    server.stop().await;
}
