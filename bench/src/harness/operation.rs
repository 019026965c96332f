//! The kinds of load, one operation each: what a connection of the load generator sends, and
//! which answers count as the expected ones.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use hyper::{Method, StatusCode};

use super::client::{
    ANSWER_BODY, API_ECHO_BODY, ECHO_BODY, EMAIL_BODY, GATED_ECHO_BODY, GATED_MCP_ECHO_BODY,
    MCP_ECHO_BODY, PEER_BODY, Sender, ask_human, connect, contains, exchange, send, send_with,
    token,
};

/// One kind of load, named as it is reported.
#[derive(Debug, Clone, Copy)]
pub enum Scenario {
    /// `GET /tools`.
    Tools(&'static str),
    /// `POST /tools/echo/call`.
    Echo(&'static str),
    /// `POST /recorded/tools/echo/call` on the bare server: its echo plus a row per call.
    RecordedEcho(&'static str),
    /// `POST /tools/send_email/call` with a fresh `Idempotency-Key` each: the durable write.
    Write(&'static str),
    /// `ask_human` suspends, then its token is approved: one cycle is one operation.
    SuspendApprove(&'static str),
    /// `POST /echo` on mcpo.
    PeerEcho(&'static str),
    /// MCP `tools/call` of echo, one stateless JSON-RPC request per operation (`POST /mcp`, the
    /// 2025-11-25 era: no handshake needed): toolgate's door, or FastMCP's own server.
    McpEcho(&'static str),
    /// MCP `tools/call` of `peer__echo` on toolgate's `/mcp`: FastMCP's echo, served through
    /// toolgate as an upstream (the gate's cost, against `McpEcho` on FastMCP itself).
    GatedMcpEcho(&'static str),
    /// `POST /tools/peer__echo/call` on toolgate: the same upstream echo over REST.
    GatedEcho(&'static str),
    /// `POST /tools/api__echo/call` on toolgate: the bare server's echo route, served as a tool
    /// of an OpenAPI upstream (the gate's cost, against `Echo` on the bare server itself).
    ApiEcho(&'static str),
    /// `GET /approvals?limit=50`.
    Approvals(&'static str),
    /// PostgreSQL alone: one row inserted and committed per operation, on a client of its own
    /// per connection (the baseline of the durable write on PostgreSQL).
    Commits(&'static str),
    /// PostgreSQL alone: the bare durable-write baseline (see `harness::durable`), each
    /// operation a call's intent and outcome committed, grouped and pipelined over two
    /// connections of its own.
    Durable(&'static str),
    /// A signed sample message posted straight to the harness's webhook receiver: its own
    /// rate, the ceiling of webhook deliveries (see `crate::webhooks`).
    WebhookPost(&'static str),
}

impl Scenario {
    /// The name reported.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Tools(n)
            | Scenario::Echo(n)
            | Scenario::RecordedEcho(n)
            | Scenario::Write(n)
            | Scenario::SuspendApprove(n)
            | Scenario::PeerEcho(n)
            | Scenario::McpEcho(n)
            | Scenario::GatedMcpEcho(n)
            | Scenario::GatedEcho(n)
            | Scenario::ApiEcho(n)
            | Scenario::Approvals(n)
            | Scenario::Commits(n)
            | Scenario::Durable(n)
            | Scenario::WebhookPost(n) => n,
        }
    }
}

/// A unique suffix for idempotency keys across runs and connections.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// One MCP `tools/call` of echo, on a connection of its own.
pub async fn mcp_echo_once(addr: SocketAddr) -> Result<(), String> {
    let mut sender = connect(addr).await?;
    match operate(Scenario::McpEcho("probe"), &mut sender).await? {
        true => Ok(()),
        false => Err("MCP echo did not answer as expected".into()),
    }
}

/// One operation of `scenario`; `Ok(true)` when every answer was the expected one.
pub(crate) async fn operate(scenario: Scenario, sender: &mut Sender) -> Result<bool, String> {
    let ok = |(status, _): (StatusCode, Bytes), want: StatusCode| status == want;
    Ok(match scenario {
        Scenario::Tools(_) => ok(
            send(sender, Method::GET, "/tools", None, "").await?,
            StatusCode::OK,
        ),
        Scenario::Approvals(_) => ok(
            send(sender, Method::GET, "/approvals?limit=50", None, "").await?,
            StatusCode::OK,
        ),
        Scenario::Echo(_) => ok(
            send(sender, Method::POST, "/tools/echo/call", None, ECHO_BODY).await?,
            StatusCode::OK,
        ),
        Scenario::RecordedEcho(_) => ok(
            send(
                sender,
                Method::POST,
                "/recorded/tools/echo/call",
                None,
                ECHO_BODY,
            )
            .await?,
            StatusCode::OK,
        ),
        Scenario::PeerEcho(_) => ok(
            send(sender, Method::POST, "/echo", None, PEER_BODY).await?,
            StatusCode::OK,
        ),
        Scenario::McpEcho(_) | Scenario::GatedMcpEcho(_) => {
            let headers = [
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-11-25"),
            ];
            let body = match scenario {
                Scenario::GatedMcpEcho(_) => GATED_MCP_ECHO_BODY,
                _ => MCP_ECHO_BODY,
            };
            let (status, body) =
                send_with(sender, Method::POST, "/mcp", None, &headers, body).await?;
            status == StatusCode::OK && contains(&body, "\"isError\":false")
        }
        Scenario::GatedEcho(_) => ok(
            send(
                sender,
                Method::POST,
                "/tools/peer__echo/call",
                None,
                GATED_ECHO_BODY,
            )
            .await?,
            StatusCode::OK,
        ),
        Scenario::ApiEcho(_) => ok(
            send(
                sender,
                Method::POST,
                "/tools/api__echo/call",
                None,
                API_ECHO_BODY,
            )
            .await?,
            StatusCode::OK,
        ),
        Scenario::Write(_) => {
            let key = format!(
                "bench-{}-{}",
                std::process::id(),
                NEXT_KEY.fetch_add(1, Ordering::Relaxed)
            );
            ok(
                send(
                    sender,
                    Method::POST,
                    "/tools/send_email/call",
                    Some(&key),
                    EMAIL_BODY,
                )
                .await?,
                StatusCode::OK,
            )
        }
        Scenario::Commits(_) | Scenario::Durable(_) => {
            return Err("this scenario runs on PostgreSQL, not HTTP".into());
        }
        Scenario::WebhookPost(_) => ok(
            exchange(sender, super::webhook::sample_request()?).await?,
            StatusCode::OK,
        ),
        Scenario::SuspendApprove(_) => {
            let (status, body) = ask_human(sender).await?;
            match (status, token(&body)) {
                (StatusCode::ACCEPTED, Some(token)) => {
                    let path = format!("/approvals/{token}/approve");
                    ok(
                        send(sender, Method::POST, &path, None, ANSWER_BODY).await?,
                        StatusCode::OK,
                    )
                }
                _ => false,
            }
        }
    })
}
