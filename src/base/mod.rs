//! The ground floor: small pieces every wing uses, importing nothing of the crate.
//!
//! What lives here has no home in one subsystem because several need it, and putting it in any
//! one of them would make the others import that wing for a helper (and so run an arrow upwards,
//! or round in a circle): the process-wide TLS provider; what a request to a provider shares (a
//! bounded HTTP client, a bounded answer, a client's form POST, an issuer's discovery document); a
//! token's hash, `${NAME}` in a
//! configured value, the error a config section reports a wrong key with, and a JSON Schema's
//! local `$ref` found in its document (the contract and the provider formats both read them), and
//! a caller's access token kept as a secret ([`CallerToken`]: the gate admits it, the lifecycle
//! carries it, an upstream that acts as the caller exchanges it).
//!
//! Public are what an embedding app or a tool author meets ([`install_crypto`],
//! [`token_sha256`], [`Invalid`]); the rest serves the crate only.

mod caller_token;
mod crypto;
mod env;
pub mod invalid;
pub(crate) mod json_ref;
mod provider;
mod secure_url;

pub use caller_token::CallerToken;
pub use crypto::{hash_token_command, install_crypto, token_sha256};
pub(crate) use env::expand;
pub use invalid::{Invalid, invalid};
pub(crate) use provider::{bounded_client, discovery_document, form_post, read_bounded};
pub(crate) use secure_url::secure_url;
