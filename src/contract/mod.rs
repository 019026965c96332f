//! The tool contract: what a tool author writes against, and the erased layer the server
//! dispatches through.
//!
//! The seams, one module each:
//! - [`meta`]: `ToolMeta` (identity, written by `#[derive(Tool)]`) and `ToolHandler` (behaviour,
//!   written by hand with typed input and output).
//! - [`outcome`]: what one attempt produces: an output, or a suspension waiting for a person.
//! - [`error`]: the handler's own failure (`HandlerError`) and the erased layer's (`ToolError`).
//! - [`ctx`]: the per-attempt context the server hands a handler.
//! - [`attest`]: what the call's attestation says (`CallFacts`), and the seam that signs it
//!   (`Attester`), read through the context.
//! - [`erased`]: `DynTool`, the object-safe face every tool is dispatched through, and
//!   `TypedTool`, the adapter from a typed handler to it.
//! - [`registry`]: `ToolSet`, the name-keyed set of tools a server serves.
//! - `nulls`: which `null`s in a tool's input stand for a property left out (as a model in
//!   OpenAI's strict mode sends them), worked out once per tool at registration.
//! - [`retry`]: `RetryPolicy`, how live failures are retried given a tool's effect.

pub mod attest;
pub mod ctx;
pub mod erased;
pub mod error;
pub mod meta;
mod nulls;
pub mod outcome;
pub mod registry;
pub mod retry;
