//! How a captured change becomes an entry of the chain, the same on every backend: its event
//! built from what the trigger captured (inputs, outputs and answers as hashes), numbered after
//! the head, written as canonical JSON (RFC 8785) and linked to the previous hash.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{CHECKPOINT, GENESIS};
use crate::contract::attest::arguments_sha256;

/// A change captured by a trigger, not yet chained.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// Its row.
    pub pos: i64,
    /// When it happened (Unix ms).
    pub at: i64,
    /// The call it is about.
    pub call_id: Option<String>,
    /// What the trigger captured (JSON).
    pub source: String,
}

/// A pending change, chained.
#[derive(Debug, Clone)]
pub(crate) struct Chained {
    pub pos: i64,
    pub seq: i64,
    pub entry: String,
    pub hash: String,
    /// A checkpoint's: the number of the entry it signs.
    pub covers: Option<i64>,
}

/// Chains `pending`, in order, after the entry `head` (number and hash; `None`: the chain is
/// empty). A source that is not JSON is chained as an entry saying so, never skipped: the chain
/// has no gap, and what it could not read is itself on record.
pub(crate) fn chain(head: Option<(i64, String)>, pending: Vec<Pending>) -> Vec<Chained> {
    let (mut seq, mut prev) = head.unwrap_or((0, GENESIS.to_owned()));
    let mut out = Vec::with_capacity(pending.len());
    for change in pending {
        seq += 1;
        let (event, covers) = event_of(&change);
        let mut entry = Map::new();
        entry.insert("at".into(), Value::from(change.at));
        entry.insert("event".into(), event);
        entry.insert("seq".into(), Value::from(seq));
        let entry = canonical_json(&Value::Object(entry));
        let hash = link(&prev, &entry);
        prev.clone_from(&hash);
        out.push(Chained {
            pos: change.pos,
            seq,
            entry,
            hash,
            covers,
        });
    }
    out
}

/// `SHA-256(prev || entry)`, hex: `prev` the previous hash's 32 bytes (from its hex), `entry`
/// the canonical JSON's bytes.
pub fn link(prev: &str, entry: &str) -> String {
    let mut hash = Sha256::new();
    match hex::decode(prev) {
        Ok(bytes) => hash.update(bytes),
        // Never from the chain itself; a verifier's bad input hashes as given, and mismatches.
        Err(_) => hash.update(prev.as_bytes()),
    }
    hash.update(entry.as_bytes());
    hex::encode(hash.finalize())
}

/// Keys whose values are inputs, outputs or answers: kept as the hash of their canonical JSON.
const HASHED: [&str; 6] = ["answer", "input", "output", "arguments", "before", "after"];

/// The `event` of a captured change, and a checkpoint's `covers`.
fn event_of(change: &Pending) -> (Value, Option<i64>) {
    let source: Value = match serde_json::from_str(&change.source) {
        Ok(Value::Object(source)) => Value::Object(source),
        _ => {
            let mut event = Map::new();
            event.insert("type".into(), "audit.unreadable".into());
            event.insert(
                "source_sha256".into(),
                hex::encode(Sha256::digest(change.source.as_bytes())).into(),
            );
            return (Value::Object(event), None);
        }
    };
    if let Some(kind) = source["kind"].as_str() {
        let covers = (kind == CHECKPOINT)
            .then(|| source["head_seq"].as_i64())
            .flatten();
        let mut event = sanitize(&source);
        event.remove("kind");
        event.insert("type".into(), kind.into());
        return (Value::Object(event), covers);
    }
    (Value::Object(call_event(change, &source)), None)
}

/// The event of a change of a call: its type (`call.<kind>`), the call, its status and attempts
/// after the change, who made it, and its details with inputs as hashes.
fn call_event(change: &Pending, source: &Value) -> Map<String, Value> {
    let raw = &source["event"];
    let kind = raw["kind"].as_str().unwrap_or("unknown");
    let mut event = Map::new();
    event.insert("type".into(), format!("call.{kind}").into());
    if let Some(call_id) = &change.call_id {
        event.insert("call_id".into(), call_id.clone().into());
    }
    // The call's status and attempts as the change left them; a creation's are those of the
    // row written (a call recorded already finished is created and finished at once).
    let members: &[&str] = if kind == "created" {
        &["tool"]
    } else {
        &["tool", "status", "attempts"]
    };
    for &member in members {
        if !source[member].is_null() {
            event.insert(member.into(), source[member].clone());
        }
    }
    for (from, to) in [("actor", "by"), ("actor_name", "by_name")] {
        if let Some(who) = raw[from].as_str() {
            event.insert(to.into(), who.into());
        }
    }
    if let Some(details) = raw.get("details").filter(|d| d.is_object()) {
        let details = sanitize(details);
        if !details.is_empty() {
            event.insert("details".into(), Value::Object(details));
        }
    }
    if kind == "created" {
        event.insert("effect".into(), source["effect"].clone());
        if let Some(input) = source["input"].as_str() {
            event.insert("input_sha256".into(), text_sha256(input).into());
        }
    }
    if let Some(output) = source["output"].as_str() {
        event.insert("output_sha256".into(), text_sha256(output).into());
    }
    if Some(kind) == source["status"].as_str()
        && let Some(error) = source["error"].as_str()
        && let Ok(error) = serde_json::from_str::<Value>(error)
        && let Some(code) = error["code"].as_str()
    {
        event.insert("error_code".into(), code.into());
    }
    event
}

/// The SHA-256 of a stored JSON text's canonical JSON (as `args_sha256` of an attestation);
/// of the text's bytes, if it is not JSON.
fn text_sha256(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => arguments_sha256(&value),
        Err(_) => hex::encode(Sha256::digest(text.as_bytes())),
    }
}

/// An object's scalar members as they are (strings, integers, booleans; nulls dropped); each
/// other member, and every input, output or answer, as `<name>_sha256`.
fn sanitize(value: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(object) = value.as_object() else {
        return out;
    };
    for (name, member) in object {
        let plain = match member {
            Value::Null => continue,
            Value::String(_) | Value::Bool(_) => true,
            Value::Number(n) => n.is_i64() || n.is_u64(),
            Value::Array(_) | Value::Object(_) => false,
        };
        if plain && !HASHED.contains(&name.as_str()) {
            out.insert(name.clone(), member.clone());
        } else {
            out.insert(format!("{name}_sha256"), arguments_sha256(member).into());
        }
    }
    out
}

/// `value` as RFC 8785 canonical JSON: no whitespace, object members sorted by the UTF-16
/// code units of their names, strings escaped as ECMAScript's `JSON.stringify` does (which is
/// serde_json's escaping). Integers are written as they are; the chain holds no other numbers.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(name, out);
                out.push(':');
                write_canonical(member, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push_str(&Value::from(s).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_by_utf16_and_escapes_as_ecmascript() {
        let value: Value = serde_json::from_str(
            r#"{"b":1,"a":{"z":true,"y":null},"\u00e9":"x\n\u0001","\ud83d\ude00":0,"\uffff":1}"#,
        )
        .unwrap();
        // U+1F600 is the surrogate pair D83D DE00: before U+FFFF in UTF-16 order.
        assert_eq!(
            canonical_json(&value),
            "{\"a\":{\"y\":null,\"z\":true},\"b\":1,\"é\":\"x\\n\\u0001\",\"😀\":0,\"\u{ffff}\":1}"
        );
    }

    #[test]
    fn each_hash_links_the_previous_one() {
        let pending = |pos| {
            Pending {
            pos,
            at: 1000 + pos,
            call_id: Some("c1".into()),
            source: r#"{"event":{"at":1,"kind":"approved","actor":"alice","details":{"answer":{"x":1}}},"tool":"t","status":"running","attempts":1}"#.into(),
        }
        };
        let chained = chain(None, vec![pending(1), pending(2)]);
        assert_eq!(chained[0].seq, 1);
        assert_eq!(chained[0].hash, link(GENESIS, &chained[0].entry));
        assert_eq!(chained[1].hash, link(&chained[0].hash, &chained[1].entry));
        let entry: Value = serde_json::from_str(&chained[0].entry).unwrap();
        assert_eq!(entry["event"]["by"], "alice");
        assert_eq!(
            entry["event"]["details"]["answer_sha256"],
            arguments_sha256(&serde_json::json!({"x": 1}))
        );
        assert!(
            !chained[0].entry.contains("\"x\""),
            "the answer itself is not kept"
        );
    }
}
