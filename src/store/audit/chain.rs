//! How a captured change becomes an entry of the chain, the same on every backend: its event
//! built from what the trigger captured (inputs, outputs and answers as hashes), numbered after
//! the head, written as canonical JSON (RFC 8785) and linked to the previous hash.

use ring::digest::{Context, SHA256};
use serde_json::{Map, Value};

use super::{CHECKPOINT, GENESIS};
use crate::contract::attest::arguments_sha256;

/// The status of a completed call.
const COMPLETED: &str = "completed";

/// A change captured by a trigger, not yet chained.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// Its row.
    pub pos: i64,
    /// When it happened (Unix ms).
    pub at: i64,
    /// The call it is about.
    pub call_id: Option<String>,
    /// What changed.
    pub change: Change,
}

/// What a trigger captured.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// An event of a call, with the call's columns as the change left them.
    Call(Box<CallChange>),
    /// Any other change, as JSON naming its `kind`: a standing approval granted or revoked, an
    /// upstream change accepted, a checkpoint.
    Other(String),
}

/// An event of a call, as captured (a column each, so the hot path parses no JSON).
#[derive(Debug, Clone, Default)]
pub(crate) struct CallChange {
    pub kind: String,
    pub actor: Option<String>,
    pub actor_name: Option<String>,
    /// The event's details, as JSON text.
    pub details: Option<String>,
    pub tool: Option<String>,
    pub status: Option<String>,
    pub attempts: Option<i64>,
    pub effect: Option<String>,
    /// The call's input (with `created`) and output (with a completion), as stored.
    pub input: Option<String>,
    pub output: Option<String>,
    /// The call's error, as stored.
    pub error: Option<String>,
}

/// A pending change, chained.
#[derive(Debug, Clone)]
pub(crate) struct Chained {
    pub seq: i64,
    pub at: i64,
    pub call_id: Option<String>,
    pub entry: String,
    pub hash: String,
    /// A checkpoint's: the number of the entry it signs.
    pub covers: Option<i64>,
}

/// Chains `pending`, in order, after the entry `head` (number and hash; `None`: the chain is
/// empty). A change that cannot be read is chained as an entry saying so, never skipped: the
/// chain has no gap, and what it could not read is itself on record.
pub(crate) fn chain(head: Option<(i64, String)>, pending: Vec<Pending>) -> Vec<Chained> {
    let (mut seq, prev) = head.unwrap_or((0, GENESIS.to_owned()));
    // A stored head that is not 32 bytes of hex chains on from its text's hash: the chain then
    // fails to verify there, where it was broken, rather than here.
    let mut bytes = [0u8; 32];
    let mut prev: [u8; 32] = match hex::decode_to_slice(&prev, &mut bytes) {
        Ok(()) => bytes,
        Err(_) => {
            bytes.copy_from_slice(ring::digest::digest(&SHA256, prev.as_bytes()).as_ref());
            bytes
        }
    };
    let mut out = Vec::with_capacity(pending.len());
    for change in pending {
        seq += 1;
        let mut entry = String::with_capacity(320);
        entry.push_str("{\"at\":");
        entry.push_str(&change.at.to_string());
        entry.push_str(",\"event\":");
        let covers = match &change.change {
            Change::Call(call) => {
                write_call_event(&mut entry, change.call_id.as_deref(), call);
                None
            }
            Change::Other(source) => {
                let (event, covers) = other_event(source);
                write_canonical(&event, &mut entry);
                covers
            }
        };
        entry.push_str(",\"seq\":");
        entry.push_str(&seq.to_string());
        entry.push('}');
        prev = link_bytes(&prev, &entry);
        let hash = to_hex(&prev);
        out.push(Chained {
            seq,
            at: change.at,
            call_id: change.call_id,
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
    let mut hash = Context::new(&SHA256);
    match hex::decode(prev) {
        Ok(bytes) => hash.update(&bytes),
        // Never from the chain itself; a verifier's bad input hashes as given, and mismatches.
        Err(_) => hash.update(prev.as_bytes()),
    }
    hash.update(entry.as_bytes());
    to_hex(hash.finish().as_ref())
}

/// [`link`] from the previous hash's bytes, giving the new hash's bytes. ring's SHA-256: on
/// this path, per entry, it runs about a third fewer instructions than the `sha2` crate's
/// (measured under callgrind, `bench/budget echo`), and uses the CPU's SHA extensions where
/// there are.
fn link_bytes(prev: &[u8; 32], entry: &str) -> [u8; 32] {
    let mut hash = Context::new(&SHA256);
    hash.update(prev);
    hash.update(entry.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(hash.finish().as_ref());
    out
}

/// Lowercase hex, written straight out (`hex::encode` goes a `char` at a time).
fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = vec![0u8; bytes.len() * 2];
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// The SHA-256 of a JSON text as the store keeps it, hex. The store writes inputs, outputs and
/// answers with serde_json from a value whose objects are sorted maps, so the text is the
/// canonical JSON that `arguments_sha256` hashes (keys sorted, no whitespace): the same hash,
/// with no parse (`a_stored_text_hashes_as_its_canonical_json` checks it).
fn text_sha256(text: &str) -> String {
    to_hex(ring::digest::digest(&SHA256, text.as_bytes()).as_ref())
}

/// The members of one JSON object, written in the order given (which must be sorted).
struct Members<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Members<'a> {
    fn open(out: &'a mut String) -> Self {
        out.push('{');
        Members { out, first: true }
    }

    fn name(&mut self, name: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
    }

    fn text(&mut self, name: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.name(name);
            write_string(value, self.out);
        }
    }

    fn close(self) {
        self.out.push('}');
    }
}

/// The event of a change of a call, written as canonical JSON: its type (`call.<kind>`), the
/// call, its status and attempts after the change (not for `created`, unless the call was
/// recorded already completed), who made it, its details with inputs as hashes, the input's
/// hash (`created`) and the output's (a completion), and the error's code (a change into an
/// error).
///
/// A call recorded already completed (every read, and every call that finished before its
/// record was written) is one entry, `call.created` with `status` `completed`, its attempts
/// and its output's hash: its creation and its outcome are one write, so one entry records
/// both (and the chain's cost per read is one entry's, not two).
fn write_call_event(out: &mut String, call_id: Option<&str>, call: &CallChange) {
    let created = call.kind == "created";
    let settled = !created || call.status.as_deref() == Some(COMPLETED);
    let details = call
        .details
        .as_deref()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .map(|details| sanitize(&details))
        .filter(|details| !details.is_empty());
    let error_code = (call.status.as_deref() == Some(call.kind.as_str()))
        .then_some(call.error.as_deref())
        .flatten()
        .and_then(|error| serde_json::from_str::<Value>(error).ok())
        .and_then(|error| error["code"].as_str().map(str::to_owned));
    let input = call.input.as_deref().filter(|_| created).map(text_sha256);
    let output = call.output.as_deref().map(text_sha256);
    // In sorted order: attempts, by, by_name, call_id, details, effect, error_code,
    // input_sha256, output_sha256, status, tool, type.
    let mut event = Members::open(out);
    if let (true, Some(attempts)) = (settled, call.attempts) {
        event.name("attempts");
        event.out.push_str(&attempts.to_string());
    }
    event.text("by", call.actor.as_deref());
    event.text("by_name", call.actor_name.as_deref());
    event.text("call_id", call_id);
    if let Some(details) = details {
        event.name("details");
        write_canonical(&Value::Object(details), event.out);
    }
    event.text("effect", call.effect.as_deref().filter(|_| created));
    event.text("error_code", error_code.as_deref());
    event.text("input_sha256", input.as_deref());
    event.text("output_sha256", output.as_deref());
    event.text("status", call.status.as_deref().filter(|_| settled));
    event.text("tool", call.tool.as_deref());
    event.name("type");
    write_string(&format!("call.{}", call.kind), event.out);
    event.close();
}

/// The event of any other change, and a checkpoint's `covers`.
fn other_event(source: &str) -> (Value, Option<i64>) {
    let source: Value = match serde_json::from_str(source) {
        Ok(Value::Object(source)) => Value::Object(source),
        _ => {
            let mut event = Map::new();
            event.insert("type".into(), "audit.unreadable".into());
            event.insert("source_sha256".into(), text_sha256(source).into());
            return (Value::Object(event), None);
        }
    };
    let kind = source["kind"].as_str().unwrap_or("unknown").to_owned();
    let covers = (kind == CHECKPOINT)
        .then(|| source["head_seq"].as_i64())
        .flatten();
    let mut event = sanitize(&source);
    // A change of an upstream's tool names it, and the hashes of the definitions: kept as they
    // are (a definition is an upstream's, not a caller's secret), so the record says which.
    if let Some(change) = source.get("change").filter(|c| c.is_object()) {
        event.remove("change_sha256");
        event.insert("change".into(), Value::Object(sanitize(change)));
    }
    event.remove("kind");
    event.insert("type".into(), kind.into());
    (Value::Object(event), covers)
}

/// Keys whose values are inputs, outputs or answers: kept as the hash of their canonical JSON.
const HASHED: [&str; 6] = ["answer", "input", "output", "arguments", "before", "after"];

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

/// A string as RFC 8785 writes it: `"` and `\\` escaped, the control characters as `\\b`,
/// `\\t`, `\\n`, `\\f`, `\\r` or `\\u00xx` (lowercase), everything else as it is.
fn write_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut plain = 0;
    for (at, byte) in s.bytes().enumerate() {
        let escaped = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain..at]);
        plain = at + 1;
        if escaped.is_empty() {
            out.push_str(&format!("\\u{byte:04x}"));
        } else {
            out.push_str(escaped);
        }
    }
    out.push_str(&s[plain..]);
    out.push('"');
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
        let pending = |pos| Pending {
            pos,
            at: 1000 + pos,
            call_id: Some("c1".into()),
            change: Change::Call(Box::new(CallChange {
                kind: "approved".into(),
                actor: Some("alice".into()),
                details: Some(r#"{"answer":{"x":1},"note":"a \"quoted\"\n line"}"#.into()),
                tool: Some("t".into()),
                status: Some("running".into()),
                attempts: Some(1),
                ..CallChange::default()
            })),
        };
        let chained = chain(None, vec![pending(1), pending(2)]);
        assert_eq!(chained[0].seq, 1);
        assert_eq!(chained[0].hash, link(GENESIS, &chained[0].entry));
        assert_eq!(chained[1].hash, link(&chained[0].hash, &chained[1].entry));
        let entry: Value = serde_json::from_str(&chained[0].entry).unwrap();
        // What is written straight out is the canonical JSON of what it says.
        assert_eq!(canonical_json(&entry), chained[0].entry);
        assert_eq!(entry["event"]["by"], "alice");
        assert_eq!(entry["event"]["details"]["note"], "a \"quoted\"\n line");
        assert_eq!(
            entry["event"]["details"]["answer_sha256"],
            arguments_sha256(&serde_json::json!({"x": 1}))
        );
        assert!(
            !chained[0].entry.contains("\"x\""),
            "the answer itself is not kept"
        );
    }

    #[test]
    fn a_call_recorded_completed_is_one_entry_and_a_created_one_has_no_status() {
        let created = |status: &str, output: Option<&str>| Pending {
            pos: 1,
            at: 5,
            call_id: Some("c1".into()),
            change: Change::Call(Box::new(CallChange {
                kind: "created".into(),
                tool: Some("echo".into()),
                effect: Some("read".into()),
                status: Some(status.into()),
                attempts: Some(1),
                input: Some(r#"{"text":"hi"}"#.into()),
                output: output.map(str::to_owned),
                ..CallChange::default()
            })),
        };
        let done = chain(None, vec![created("completed", Some(r#"{"text":"hi"}"#))]);
        let entry: Value = serde_json::from_str(&done[0].entry).unwrap();
        let event = &entry["event"];
        assert_eq!(event["type"], "call.created");
        assert_eq!(event["status"], "completed");
        assert_eq!(event["attempts"], 1);
        assert_eq!(event["effect"], "read");
        assert_eq!(event["output_sha256"], event["input_sha256"]);
        assert_eq!(canonical_json(&entry), done[0].entry);
        // A created call that runs on (a row's status, as a trigger captures it) says only
        // that it was created: its outcome is an entry of its own.
        let running = chain(None, vec![created("running", None)]);
        let entry: Value = serde_json::from_str(&running[0].entry).unwrap();
        assert!(entry["event"].get("status").is_none(), "{entry}");
        assert!(entry["event"].get("attempts").is_none(), "{entry}");
    }

    #[test]
    fn a_stored_text_hashes_as_its_canonical_json() {
        let value: Value =
            serde_json::from_str(r#"{"z":[1,2.5,{"b":null,"a":"\u0007é"}],"a":{"y":true,"x":-3}}"#)
                .unwrap();
        let stored = serde_json::to_string(&value).unwrap();
        assert_eq!(text_sha256(&stored), arguments_sha256(&value));
    }
}
