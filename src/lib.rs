//! toolgate: one place for LLM agents to fetch tool schemas, call tools over plain REST, and wait
//! for a person to approve the calls that need one.
//!
//! # A tour
//!
//! - [`contract`]: what a tool author writes. A tool is a type with [`ToolMeta`] (usually
//!   `#[derive(Tool)]`) and a [`ToolHandler`] with typed input and output. [`TypedTool`] erases
//!   it into a [`DynTool`]; a [`ToolSet`] holds tools by name and checks them once.
//! - [`dispatch`]: the call lifecycle, the only path by which a tool runs: validate the input,
//!   record the intent, run, record the outcome; approvals re-enter the same path.
//! - [`store`]: durable calls and suspensions behind the [`Store`](store::Store) trait;
//!   [`SqliteStore`](store::SqliteStore) is the embedded default, and
//!   [`PostgresStore`](store::PostgresStore) lets several replicas share one database. Every
//!   change of a call's status lands in the store's change feed.
//! - [`feed`]: what follows the change feed in this process: requests held until a call changes
//!   or a suspension arrives.
//! - [`schema`]: JSON Schema cleaning and each LLM provider's tool-list format (OpenAI,
//!   Anthropic, Gemini, MCP), built once from the tools' own schemas.
//! - [`server`]: the axum HTTP API. [`ServerBuilder`] turns a tool set and a store into an
//!   `axum::Router` you can serve alone or mount in your own app.
//! - [`inbox`]: `/inbox`, the approvers' web page: sign-in with a key, the live queue, one
//!   approval with a form generated from its schema; every decision goes through the dispatcher.
//! - `metrics`: what the server does, counted (calls by tool and outcome, requests by route,
//!   store batches), for `GET /metrics` in the Prometheus text format.
//! - [`config`]: the binary's configuration (file, environment, flags), read once.
//! - [`examples`]: demo tools (`echo`, `ask_human`, `issue_refund`, `send_email`), written the
//!   way a user writes tools.
//!
//! A tool author needs only `toolgate` and `serde`: the derive, `async_trait`, `schemars` and
//! `serde_json` are re-exported here.

// Lets `#[derive(Tool)]`'s `::toolgate::...` paths resolve inside this crate too.
extern crate self as toolgate;

pub mod config;
pub mod contract;
pub mod dispatch;
pub mod examples;
pub mod feed;
mod ids;
pub mod inbox;
pub mod mcp;
mod metrics;
pub mod schema;
pub mod server;
mod slots;
pub mod store;
pub mod upstream;

pub use async_trait::async_trait;
pub use schemars;
pub use serde_json;
pub use toolgate_macros::Tool;

pub use contract::ctx::ToolCtx;
pub use contract::erased::{DynTool, ToolDescriptor, TypedTool};
pub use contract::error::{HandlerError, InputViolation, ToolError};
pub use contract::meta::{Effect, ToolHandler, ToolMeta};
pub use contract::outcome::{Suspension, ToolOutcome};
pub use contract::registry::{AWAIT_CALL_TOOL, RegistryError, ToolSet, is_valid_tool_name};
pub use contract::retry::RetryPolicy;
pub use server::ServerBuilder;

/// The README's Rust examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
