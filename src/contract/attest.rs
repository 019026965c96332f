//! A call's attestation, as a tool reads it: a short-lived token toolgate signs saying which
//! call this is, of which tool, by whom, and who approved it (or that nobody had to), for one
//! audience and over the arguments the tool sends on.
//!
//! The contract only carries what is known about the call ([`CallFacts`]) and the seam that
//! signs ([`Attester`], implemented by `crate::signing`): nothing is signed until a tool asks
//! ([`crate::contract::ctx::ToolCtx::attestation`]), so a tool that never asks costs nothing
//! but a pointer per attempt. An upstream MCP server's tool asks on every call, with its
//! upstream as the audience.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

/// One approval of a call, as attested: who gave it, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approver {
    /// The approver's principal name (an API key's, or `<issuer>:<subject>`); `None` when auth
    /// is off.
    pub who: Option<String>,
    /// When, in Unix milliseconds.
    pub at_ms: i64,
}

/// Why a call runs, as attested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No approval was needed: the tool has no approval policy, or its condition did not ask.
    NotRequired,
    /// People approved it (the approvals say who and when).
    Approved,
    /// A standing approval released it (its id; the approvals name who granted it).
    Standing(String),
}

impl Decision {
    /// Its name in a token: `not_required`, `approved`, `standing`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::NotRequired => "not_required",
            Decision::Approved => "approved",
            Decision::Standing(_) => "standing",
        }
    }
}

/// What toolgate knows about the call an attempt belongs to, for its attestation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFacts {
    /// The call's id.
    pub call_id: String,
    /// The tool, by its toolgate name.
    pub tool: String,
    /// The caller's principal name; `None` when auth is off.
    pub caller: Option<String>,
    /// Who approved the call, oldest first; empty when nobody had to.
    pub approvals: Vec<Approver>,
    /// Why it runs.
    pub decision: Decision,
    /// The policy that decided: `tools.<tool>.approval` (the tool's approval policy), `tool`
    /// (the tool itself asked a person), or `none`.
    pub policy: String,
}

/// Why an attestation could not be made: the call must not go on without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestError(pub String);

impl std::fmt::Display for AttestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot sign the call's attestation: {}", self.0)
    }
}

impl std::error::Error for AttestError {}

/// Signs attestations: toolgate's signing keys (`crate::signing::Signer`).
#[async_trait]
pub trait Attester: Send + Sync {
    /// A compact JWS over `facts`, for `audience`, with the SHA-256 of `arguments` (see
    /// [`arguments_sha256`]).
    async fn attest(
        &self,
        facts: &CallFacts,
        audience: &str,
        arguments: &Value,
    ) -> Result<String, AttestError>;
}

/// What a context carries to make its call's attestation on demand.
#[derive(Clone)]
pub struct Attesting {
    attester: Arc<dyn Attester>,
    facts: Arc<CallFacts>,
}

impl std::fmt::Debug for Attesting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attesting")
            .field("facts", &self.facts)
            .finish_non_exhaustive()
    }
}

impl Attesting {
    /// The attestations of the call `facts` describes, signed by `attester`.
    pub fn new(attester: Arc<dyn Attester>, facts: CallFacts) -> Self {
        Attesting {
            attester,
            facts: Arc::new(facts),
        }
    }

    /// The same signer, attesting `facts` instead.
    pub fn with_facts(&self, facts: CallFacts) -> Self {
        Attesting {
            attester: self.attester.clone(),
            facts: Arc::new(facts),
        }
    }

    /// What is attested about the call.
    pub fn facts(&self) -> &CallFacts {
        &self.facts
    }

    pub(crate) async fn sign(
        &self,
        audience: &str,
        arguments: &Value,
    ) -> Result<String, AttestError> {
        self.attester.attest(&self.facts, audience, arguments).await
    }
}

/// The hex SHA-256 of `arguments` as canonical JSON: object keys sorted, no whitespace, as
/// `json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` writes it
/// in Python. What an attestation's `args_sha256` holds.
pub fn arguments_sha256(arguments: &Value) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    canonical(arguments, &mut hash);
    hex::encode(hash.finalize())
}

fn canonical(value: &Value, out: &mut sha2::Sha256) {
    use sha2::Digest;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.update(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                out.update(Value::String(key.clone()).to_string().as_bytes());
                out.update(b":");
                canonical(&map[key], out);
            }
            out.update(b"}");
        }
        Value::Array(items) => {
            out.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                canonical(item, out);
            }
            out.update(b"]");
        }
        other => out.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_of_arguments_ignores_key_order_not_values() {
        let a = serde_json::json!({"b": [1, {"z": "é", "a": null}], "a": true});
        let b = serde_json::json!({"a": true, "b": [1, {"a": null, "z": "é"}]});
        assert_eq!(arguments_sha256(&a), arguments_sha256(&b));
        let c = serde_json::json!({"a": true, "b": [1, {"a": null, "z": "e"}]});
        assert_ne!(arguments_sha256(&a), arguments_sha256(&c));
        // What Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        // writes, hashed.
        use sha2::{Digest, Sha256};
        let python = r#"{"a":true,"b":[1,{"a":null,"z":"é"}]}"#;
        assert_eq!(arguments_sha256(&a), hex::encode(Sha256::digest(python)));
    }
}
