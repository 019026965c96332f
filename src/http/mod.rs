//! What every HTTP door shares, and no handlers: who asks ([`auth`]: keys, roles, the gate on
//! each route, its first check the `Host` against DNS rebinding, `hosts`; a bearer token that is
//! no key goes to the identity providers, [`crate::identity`]), the one error envelope
//! ([`error`]), the extractors that answer in it
//! ([`extract`]), the `Idempotency-Key` header ([`idempotency`]), the `?wait=` side of a held
//! request ([`hold`]), the change feed as Server-Sent Events ([`sse`]), and the count of
//! requests by route (`requests`); the gate, the shedding (`shed`) and the count are policies
//! on one tower layer (`layer`), with each body read before the shedding (`body`). Under the
//! router, the connections themselves: their deadlines and their number ([`connections`]).
//!
//! The doors (`crate::rest`, `crate::mcp`, `crate::inbox`) stand on this floor side by side;
//! nothing here knows any of them, and the rules about calls are the lifecycle's
//! (`crate::dispatch`), not this module's.

pub mod auth;
pub mod body;
pub mod config;
pub mod connections;
pub mod error;
pub mod extract;
pub(crate) mod gate;
pub mod hold;
pub mod hosts;
pub mod idempotency;
pub(crate) mod layer;
pub(crate) mod requests;
pub(crate) mod shed;
pub mod sse;
pub(crate) mod traces;

/// The default largest request body, in bytes (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The default most requests handled at once; more are refused with `503 overloaded`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
