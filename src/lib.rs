//! toolgate: one place for LLM agents to fetch tool schemas, call tools over plain REST, and wait
//! for a person to approve the calls that need one.
//!
//! # A tour
//!
//! Floor by floor, from the ground up: each module imports only from the floors below it, never
//! round in a circle (`tests/layout.rs` checks it).
//!
//! The ground floor, and what records the server's work from every floor above it:
//! - [`base`]: small pieces every wing uses, importing nothing of the crate: the TLS provider
//!   ([`install_crypto`]), a token's hash, `${NAME}` from the environment, a config section's
//!   error, a JSON Schema's local `$ref`.
//! - `metrics`: what the server does, counted, for `GET /metrics` in the Prometheus text format.
//! - [`telemetry`]: OpenTelemetry traces of every door and of the call lifecycle, exported over
//!   OTLP/HTTP, and the log lines' filter and format.
//!
//! Below the doors, from the tool up:
//! - [`contract`]: what a tool author writes. A tool is a type with [`ToolMeta`] (usually
//!   `#[derive(Tool)]`) and a [`ToolHandler`] with typed input and output. [`TypedTool`] erases
//!   it into a [`DynTool`]; a [`ToolSet`] holds tools by name and checks them once.
//! - [`schema`]: JSON Schema cleaning and each LLM provider's tool-list format (OpenAI,
//!   Anthropic, Gemini, MCP), built once from the tools' own schemas.
//! - [`store`]: durable calls and suspensions, the change feed, the webhooks' outbox and inbox
//!   sessions, behind the [`Store`](store::Store) traits; [`SqliteStore`](store::SqliteStore)
//!   is the embedded default, and [`PostgresStore`](store::PostgresStore) lets several replicas
//!   share one database.
//! - [`feed`]: what follows the store's change feed in this process: requests held until a
//!   call changes, the event stream a principal may see, and the webhooks.
//! - [`signing`]: toolgate's signing keys (from a PEM, or made and kept in the store, rotated),
//!   a JWS over any claims, the key set at `/.well-known/jwks.json`, and the attestation a call
//!   carries upstream.
//! - [`audit`]: the audit chain's checkpoints (its head signed with toolgate's key) and the
//!   verifier of an export or a receipt (`toolgate audit verify`); the chain itself, every
//!   change hash-linked in the transaction that makes it, is the store's.
//! - [`dispatch`]: the call lifecycle, the only path by which a tool runs (validate the input,
//!   record the intent, run, record the outcome; approvals re-enter the same path), and the
//!   rules every door shares: who sees which call and which tools and approvals a principal
//!   reaches, the bounds on what a client sends, what a person may write, how a request waits
//!   for a change.
//! - [`upstream`]: MCP servers behind toolgate, each tool of theirs one more `DynTool`, its
//!   definition pinned (a changed one held for an admin); an HTTP one may act as each caller,
//!   with the caller's token exchanged at its issuer.
//! - [`identity`]: identity providers' tokens as principals: verification, grants, the
//!   resource's metadata (RFC 9728), a person's sign-in to the inbox.
//!
//! The doors, side by side over one floor:
//! - [`http`]: what every HTTP door shares, no handlers: API keys, roles and the gate on each
//!   route, the one error envelope, extractors, `?wait=`, the feed as Server-Sent Events.
//! - [`rest`]: the REST API, one file per resource; and the door Slack's buttons call
//!   (`/integrations/slack/interactions`, signed by Slack instead of a key).
//! - [`mcp`]: `/mcp`, the same tools over the Model Context Protocol (rmcp).
//! - [`notify`]: approvers where they work: the people the channels reach, mail and Slack.
//! - [`inbox`]: `/inbox`, the approvers' web page: sign-in with a key or the identity
//!   provider, the live queue, one approval with a form generated from its schema; every
//!   decision goes through the dispatcher.
//!
//! And what puts them together:
//! - [`app`]: [`ServerBuilder`], the composition root: it builds the dispatcher, starts and
//!   stops the background work (upstreams, webhooks, the store's upkeep) and merges the doors
//!   into one `axum::Router` you can serve alone or mount in your own app.
//!   [`ServerBuilder::start`] first refuses what the binary refuses at start-up.
//! - [`config`]: the binary's configuration (file, environment, flags), read once; the top
//!   floor, as each subsystem declares its own section.
//! - [`examples`]: demo tools (`echo`, `ask_human`, `issue_refund`, `send_email`), written the
//!   way a user writes tools.
//!
//! A tool author needs only `toolgate` and `serde`: the derive, `async_trait`, `schemars` and
//! `serde_json` are re-exported here.

// Lets `#[derive(Tool)]`'s `::toolgate::...` paths resolve inside this crate too.
extern crate self as toolgate;

pub mod app;
pub mod audit;
pub mod base;
pub mod config;
pub mod contract;
pub mod dispatch;
pub mod examples;
pub mod feed;
pub mod http;
pub mod identity;
mod ids;
pub mod inbox;
pub mod mcp;
mod metrics;
pub mod notify;
pub mod rest;
pub mod schema;
pub mod signing;
mod slots;
pub mod store;
pub mod telemetry;
pub mod upstream;

pub use async_trait::async_trait;
pub use schemars;
pub use serde_json;
pub use toolgate_macros::Tool;

pub use app::{ServerBuilder, Serving, StartError};
pub use base::install_crypto;
pub use contract::ctx::ToolCtx;
pub use contract::erased::{DynTool, ToolDescriptor, TypedTool};
pub use contract::error::{HandlerError, InputViolation, ToolError};
pub use contract::meta::{Effect, ToolHandler, ToolMeta};
pub use contract::outcome::{Suspension, ToolOutcome};
pub use contract::registry::{AWAIT_CALL_TOOL, RegistryError, ToolSet, is_valid_tool_name};
pub use contract::retry::RetryPolicy;

/// The guide's Rust examples (writing tools, mounting toolgate in an axum app), compiled as
/// doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../docs/writing-tools.md")]
pub struct GuideDoctests;
