//! Checking an export of the audit chain, or one call's receipt, against the public keys
//! (a `/.well-known/jwks.json`): every hash recomputed from the entry's canonical JSON and the
//! hash before it, the numbers without a gap, and each checkpoint's signature and the hash it
//! signs. The first entry that fails is named, with why.
//!
//! An export starts at entry 1 (after the 32 zero bytes), or, where the chain was cut, at a
//! checkpoint, whose hash is then taken as the start. Entries after the last checkpoint are
//! checked for their links, but no signature covers them yet: the report counts them.

use std::collections::HashMap;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::store::{CHECKPOINT, GENESIS, canonical_json, link};

/// The keys checkpoints are verified with.
pub struct Keys {
    keys: Vec<(Option<String>, DecodingKey)>,
}

impl Keys {
    /// The keys of a JWK set (`{"keys": [...]}`); those of another kind than OKP (Ed25519) or
    /// EC (P-256) are left out.
    pub fn from_jwks(jwks: &Value) -> Result<Keys, String> {
        let listed = jwks["keys"]
            .as_array()
            .ok_or("the key set has no `keys` array")?;
        let mut keys = Vec::new();
        for key in listed {
            let Ok(jwk) = serde_json::from_value::<Jwk>(key.clone()) else {
                continue;
            };
            if let Ok(decoding) = DecodingKey::from_jwk(&jwk) {
                keys.push((jwk.common.key_id.clone(), decoding));
            }
        }
        if keys.is_empty() {
            return Err("the key set holds no Ed25519 or P-256 key".into());
        }
        Ok(Keys { keys })
    }

    /// The claims of `jws` if one of the keys (the one its `kid` names) signed it; why not.
    fn verify(&self, jws: &str) -> Result<Map<String, Value>, String> {
        let header = jsonwebtoken::decode_header(jws).map_err(|e| format!("not a JWS: {e}"))?;
        if !matches!(header.alg, Algorithm::EdDSA | Algorithm::ES256) {
            return Err(format!("the algorithm {:?} is not accepted", header.alg));
        }
        let mut validation = Validation::new(header.alg);
        validation.validate_exp = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let candidates = self
            .keys
            .iter()
            .filter(|(kid, _)| header.kid.is_none() || kid.as_deref() == header.kid.as_deref());
        let mut why = format!(
            "no key {} in the key set",
            header.kid.as_deref().unwrap_or_default()
        );
        for (_, key) in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(jws, key, &validation) {
                Ok(data) => return Ok(data.claims),
                Err(err) => why = format!("the signature does not verify: {err}"),
            }
        }
        Err(why)
    }
}

/// What a verification found: the entries, checkpoints, and how far a signature covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Entries checked.
    pub entries: u64,
    /// The first and last entry's numbers.
    pub first: i64,
    pub last: i64,
    /// Checkpoints whose signature verified.
    pub checkpoints: u64,
    /// The last entry a verified checkpoint signs, if any.
    pub covered_to: Option<i64>,
    /// Entries (checkpoints aside) after the last one a checkpoint signs: linked, not signed.
    pub unsigned: u64,
}

/// The first thing that failed: the entry (by number, or by line when it has none) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The entry's number, when it could be read.
    pub seq: Option<i64>,
    /// Its line in the export (1-based), or its place in a receipt.
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.seq {
            Some(seq) => write!(f, "entry {seq} (line {}): {}", self.line, self.reason),
            None => write!(f, "line {}: {}", self.line, self.reason),
        }
    }
}

/// The walk along the chain: the last hash, what each entry hashed to, what was verified.
struct Walk<'k> {
    keys: &'k Keys,
    prev: Option<(i64, String)>,
    /// Where a chain that does not start at 1 starts: the hash before its first entry.
    start: Option<String>,
    hashes: HashMap<i64, String>,
    report: Report,
    /// The entries (checkpoints aside) no checkpoint signs yet.
    since: Vec<i64>,
}

impl<'k> Walk<'k> {
    fn new(keys: &'k Keys, start: Option<String>) -> Self {
        Walk {
            keys,
            prev: None,
            start,
            hashes: HashMap::new(),
            report: Report {
                entries: 0,
                first: 0,
                last: 0,
                checkpoints: 0,
                covered_to: None,
                unsigned: 0,
            },
            since: Vec::new(),
        }
    }

    fn step(&mut self, line: usize, value: Value) -> Result<(), Failure> {
        let fail = |seq: Option<i64>, reason: String| Failure { seq, line, reason };
        let Value::Object(mut entry) = value else {
            return Err(fail(None, "not a JSON object".into()));
        };
        let seq = entry
            .get("seq")
            .and_then(Value::as_i64)
            .ok_or_else(|| fail(None, "no entry number (`seq`)".into()))?;
        let hash = match entry.remove("hash") {
            Some(Value::String(hash)) => hash,
            _ => return Err(fail(Some(seq), "no `hash`".into())),
        };
        let event = entry.get("event").cloned().unwrap_or(Value::Null);
        let prev = match (&self.prev, &self.start) {
            (Some((last, _)), _) if seq > last + 1 => {
                return Err(fail(
                    Some(last + 1),
                    format!("missing: entry {} follows entry {last}", seq),
                ));
            }
            (Some((last, _)), _) if seq <= *last => {
                return Err(fail(
                    Some(seq),
                    format!("out of order: it follows entry {last}"),
                ));
            }
            (Some((_, prev)), _) => Some(prev.clone()),
            (None, Some(start)) => Some(start.clone()),
            (None, None) if seq == 1 => Some(GENESIS.to_owned()),
            // A chain cut below a checkpoint starts at it: its hash is the start.
            (None, None) if event["type"] == CHECKPOINT => None,
            (None, None) => {
                return Err(fail(
                    Some(seq),
                    "the export starts here, at neither entry 1 nor a checkpoint".into(),
                ));
            }
        };
        if let Some(prev) = prev {
            let computed = link(&prev, &canonical_json(&Value::Object(entry)));
            if computed != hash {
                return Err(fail(
                    Some(seq),
                    "its hash does not match its content and the hash before it (this entry \
                     was changed, or moved)"
                        .into(),
                ));
            }
        }
        if self.prev.is_none() {
            self.report.first = seq;
        }
        if event["type"] == CHECKPOINT {
            self.checkpoint(&event)
                .map_err(|reason| fail(Some(seq), reason))?;
        } else {
            self.since.push(seq);
        }
        self.hashes.insert(seq, hash.clone());
        self.prev = Some((seq, hash));
        self.report.entries += 1;
        self.report.last = seq;
        Ok(())
    }

    /// A checkpoint's signature, and that what it signs is the chain's.
    fn checkpoint(&mut self, event: &Value) -> Result<(), String> {
        let jws = event["jws"].as_str().ok_or("a checkpoint with no `jws`")?;
        let claims = self
            .keys
            .verify(jws)
            .map_err(|why| format!("the checkpoint's signature is refused: {why}"))?;
        let (Some(seq), Some(hash)) = (claims["audit_seq"].as_i64(), claims["audit_hash"].as_str())
        else {
            return Err("the checkpoint's signed claims name no entry".into());
        };
        if event["head_seq"].as_i64() != Some(seq) || event["head_hash"].as_str() != Some(hash) {
            return Err("the checkpoint's entry differs from what it signed".into());
        }
        match self.hashes.get(&seq) {
            Some(chained) if chained == hash => {}
            Some(chained) => {
                return Err(format!(
                    "the checkpoint signs hash {hash} for entry {seq}, but the chain has {chained}"
                ));
            }
            // Before the export's start: its signature is all that can be checked.
            None if seq < self.report.first || self.prev.is_none() => {}
            None => {
                return Err(format!(
                    "the checkpoint signs entry {seq}, not in the chain"
                ));
            }
        }
        self.report.checkpoints += 1;
        self.report.covered_to = Some(self.report.covered_to.map_or(seq, |c| c.max(seq)));
        // What it covers need not be kept.
        self.hashes.retain(|&at, _| at >= seq);
        self.since.retain(|&at| at > seq);
        Ok(())
    }
}

/// Verifies an export: one entry per line (blank lines skipped).
pub fn verify_export(text: &str, keys: &Keys) -> Result<Report, Failure> {
    let mut walk = Walk::new(keys, None);
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(line).map_err(|err| Failure {
            seq: None,
            line: index + 1,
            reason: format!("not JSON: {err}"),
        })?;
        walk.step(index + 1, value)?;
    }
    if walk.report.entries == 0 {
        return Err(Failure {
            seq: None,
            line: 0,
            reason: "the export holds no entry".into(),
        });
    }
    walk.report.unsigned = walk.since.len() as u64;
    Ok(walk.report)
}

/// Verifies a receipt (`GET /calls/{id}/receipt`): its entries link from its `prev` to a
/// checkpoint that verifies and covers each of the call's entries.
pub fn verify_receipt(receipt: &Value, keys: &Keys) -> Result<Report, Failure> {
    let fail = |reason: &str| Failure {
        seq: None,
        line: 0,
        reason: reason.to_owned(),
    };
    let prev = receipt["prev"].as_str().ok_or_else(|| fail("no `prev`"))?;
    let entries = receipt["entries"]
        .as_array()
        .ok_or_else(|| fail("no `entries`"))?;
    let call_id = receipt["call_id"]
        .as_str()
        .ok_or_else(|| fail("no `call_id`"))?;
    let mut walk = Walk::new(keys, Some(prev.to_owned()));
    let mut own = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if entry["event"]["call_id"] == call_id {
            own.push(entry["seq"].as_i64().unwrap_or_default());
        }
        walk.step(index + 1, entry.clone())?;
    }
    let last_own = own
        .last()
        .copied()
        .ok_or_else(|| fail("no entry of the call"))?;
    match walk.report.covered_to {
        Some(covered) if covered >= last_own => {
            walk.report.unsigned = walk.since.len() as u64;
            Ok(walk.report)
        }
        _ => Err(fail(
            "no checkpoint that verifies covers the call's last entry",
        )),
    }
}
