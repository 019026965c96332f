//! The ground floor: small pieces every wing uses, importing nothing of the crate.
//!
//! What lives here has no home in one subsystem because several need it, and putting it in any
//! one of them would make the others import that wing for a helper (and so run an arrow upwards,
//! or round in a circle): the process-wide TLS provider, a token's hash, `${NAME}` in a
//! configured value, the error a config section reports a wrong key with, and a JSON Schema's
//! local `$ref` found in its document (the contract and the provider formats both read them).
//!
//! Public are what an embedding app or a tool author meets ([`install_crypto`],
//! [`token_sha256`], [`Invalid`]); the rest serves the crate only.

mod crypto;
mod env;
pub mod invalid;
pub(crate) mod json_ref;

pub use crypto::{install_crypto, token_sha256};
pub(crate) use env::expand;
pub use invalid::{Invalid, invalid};
