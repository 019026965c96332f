//! The checker: reads a run's history, the database and the ledger (the outbox: one line per
//! email sent, naming its call), and names the first promise broken:
//!
//! - nothing is left `running` once the last restart has settled what a crash interrupted;
//! - every acknowledged call (`200`/`202` naming it) exists, and one answered completed (a
//!   call, a decision, or a long-poll of a suspended call) is stored completed with the output
//!   it was answered with; the exception is the documented
//!   one, a read's record written behind its answer when a `kill -9` came right after it;
//! - every effect has its call on record, runs at most once per call, at most once per
//!   idempotency key, and exactly once for a call answered or stored completed, with the message
//!   the answer named;
//! - a suspension is decided at most once (of two decisions at once, one wins), and the call
//!   ends as its winner said;
//! - a call's history never goes on past its end (a late outcome aside, kept as evidence), so
//!   a zombie past its lease cannot overwrite what the others settled;
//! - the event stream, read from its cursor across the faults, is the feed: in order, nothing
//!   twice, nothing missing ([`super::stream`]); and every change reaches the webhook at least
//!   once.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{Op, Record};
use super::common::outbox;
use super::{Fault, Server};

/// How long after a read's answer a `kill -9` of the process that answered may take its record
/// (written behind within 10 ms on a quiet machine; the margin covers a loaded one).
const READ_WINDOW_MS: u64 = 2000;

/// Checks the run; its summary, or the first violation.
pub async fn check(
    server: &Server,
    history: &[Record],
    faults: &[Fault],
    seen: &[super::stream::Seen],
) -> Result<String, String> {
    let stored = settled(server).await?;
    let base = server
        .base(&mut super::Rng::new(0))
        .expect("the server is up for the checker");
    let http = reqwest::Client::new();
    let record_of = async |call_id: &str| -> Value {
        let url = format!("{base}/calls/{call_id}");
        let response = http.get(url).send().await.expect("the checker's read");
        response.json().await.expect("a call's record")
    };
    let kills: Vec<(&str, u64)> = faults
        .iter()
        .filter(|f| f.kind == "kill -9")
        .map(|f| (f.base.as_str(), f.at_ms))
        .collect();
    // Acknowledged calls exist, and completed ones as they were answered.
    let mut lost_reads = 0;
    for record in history {
        let Some(call_id) = record.acknowledged() else {
            continue;
        };
        if !stored.contains_key(call_id) {
            let lost_behind = matches!(record.op, Op::Read { .. })
                && kills.iter().any(|&(base, at)| {
                    base == record.base
                        && at >= record.sent_ms
                        && at <= record.done_ms + READ_WINDOW_MS
                });
            if lost_behind {
                lost_reads += 1;
                continue;
            }
            return Err(format!(
                "an acknowledged call is not in the database: {call_id}, {record:?}"
            ));
        }
        // A decision's answer is the call's after it; a long-poll's is the call's then: both
        // say where it stays once completed.
        if record.completed() {
            let now = record_of(call_id).await;
            if now["status"] != "completed" || now["output"] != record.body["output"] {
                return Err(format!(
                    "call {call_id} was answered completed with {}, and is now {} with {}",
                    record.body["output"], now["status"], now["output"]
                ));
            }
        }
    }
    let sent = ledger(server, &stored)?;
    // Every key's effect at most once; once exactly for a key or a request answered completed.
    for record in history {
        let (body, answered) = match &record.op {
            Op::Keyed { key } => (format!("key:{key}"), record.completed()),
            Op::Unkeyed { tag } => (format!("op:{tag}"), record.completed()),
            _ => continue,
        };
        let lines = sent.get(body.as_str()).map_or(&[][..], Vec::as_slice);
        if lines.len() > 1 {
            return Err(format!(
                "the email `{body}` was sent {} times: {lines:?}",
                lines.len()
            ));
        }
        if answered {
            let message = record.body["output"]["message_id"].as_str();
            if lines.len() != 1 || Some(lines[0].as_str()) != message {
                return Err(format!(
                    "the email `{body}` was answered sent as {message:?}; the outbox has {lines:?}"
                ));
            }
        }
    }
    decisions(history, &record_of).await?;
    for call_id in stored.keys() {
        ended_once(call_id, &record_of(call_id).await)?;
    }
    let streamed = super::stream::check(server, seen).await?;
    let hooked = super::stream::check_webhooks(server).await?;
    Ok(format!(
        "{}; {lost_reads} read records lost to a kill -9 right after their answer (as \
         documented); the event stream read {streamed} events across the faults, none twice, \
         none missing; the webhook got every change of the feed ({hooked} deliveries)",
        summary(history, faults)
    ))
}

/// The calls in the database once nothing is `running` (a restart settles what a crash left;
/// an approved call's re-run finishes), by id: (tool, status).
async fn settled(server: &Server) -> Result<HashMap<String, (String, String)>, String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let calls = server.at.stored_calls().await;
        let running: Vec<&str> = calls
            .iter()
            .filter(|c| c.status == "running")
            .map(|c| c.call_id.as_str())
            .collect();
        if running.is_empty() {
            return Ok(calls
                .into_iter()
                .map(|c| (c.call_id, (c.tool, c.status)))
                .collect());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "calls still running 15 s after the last restart: {running:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The outbox by email body: the message ids sent with it. Fails when an email has no call on
/// record, when a call sent twice, or when a call stored completed sent none.
fn ledger(
    server: &Server,
    stored: &HashMap<String, (String, String)>,
) -> Result<HashMap<String, Vec<String>>, String> {
    let mut by_body: HashMap<String, Vec<String>> = HashMap::new();
    let mut by_call: HashMap<String, usize> = HashMap::new();
    let lines = server.places().flat_map(|place| outbox(&place));
    for line in lines {
        let call_id = line["call_id"].as_str().unwrap_or_default().to_owned();
        match stored.get(&call_id) {
            Some((tool, _)) if tool == "send_email" => {}
            _ => return Err(format!("an email was sent with no call on record: {line}")),
        }
        *by_call.entry(call_id.clone()).or_default() += 1;
        if by_call[&call_id] > 1 {
            return Err(format!("call {call_id} sent its email twice: {line}"));
        }
        let body = line["body"].as_str().unwrap_or_default().to_owned();
        let message = line["message_id"].as_str().unwrap_or_default().to_owned();
        by_body.entry(body).or_default().push(message);
    }
    for (call_id, (tool, status)) in stored {
        if tool == "send_email" && status == "completed" && !by_call.contains_key(call_id) {
            return Err(format!(
                "call {call_id} is stored completed, and sent nothing"
            ));
        }
    }
    Ok(by_body)
}

/// Of the decisions on each suspension, at most one won (`200`), and its call ends as it said.
async fn decisions(
    history: &[Record],
    record_of: &impl AsyncFn(&str) -> Value,
) -> Result<(), String> {
    let mut by_token: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for record in history {
        if let Op::Decide { token, .. } = &record.op {
            by_token.entry(token).or_default().push(record);
        }
    }
    for (token, decided) in by_token {
        let won: Vec<&&Record> = decided.iter().filter(|r| r.status == Some(200)).collect();
        if won.len() > 1 {
            return Err(format!("suspension {token} was decided twice: {won:?}"));
        }
        let Some(winner) = won.first() else {
            continue;
        };
        let Op::Decide {
            call_id,
            approve,
            answer,
            ..
        } = &winner.op
        else {
            unreachable!()
        };
        let now = record_of(call_id).await;
        let as_said = if *approve {
            now["status"] == "completed" && now["output"]["answer"] == answer.as_str()
        } else {
            now["status"] == "rejected"
        };
        if !as_said {
            return Err(format!(
                "suspension {token} was decided by {winner:?}, and its call is now {now}"
            ));
        }
    }
    Ok(())
}

/// The events that end a call: nothing may follow them but a late outcome, kept as evidence.
const FINAL: [&str; 5] = [
    "completed",
    "failed",
    "rejected",
    "expired",
    "completed_externally",
];

/// A call's history never goes on past its end: after a final event only `late_outcome`; after
/// `needs_reconciliation` (a write that may have happened) only a person's `reconciled`.
fn ended_once(call_id: &str, record: &Value) -> Result<(), String> {
    let kinds: Vec<&str> = record["events"]
        .as_array()
        .map(|events| events.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default();
    let mut ended: Option<&str> = None;
    for kind in &kinds {
        match ended {
            Some(_) if *kind == "late_outcome" => {}
            Some("needs_reconciliation") if *kind == "reconciled" => ended = None,
            Some(end) => {
                return Err(format!(
                    "call {call_id} went on after `{end}`: its history is {kinds:?}"
                ));
            }
            None if FINAL.contains(kind) || *kind == "needs_reconciliation" => ended = Some(kind),
            None => {}
        }
    }
    Ok(())
}

/// What the run did: requests by kind and result, the faults.
fn summary(history: &[Record], faults: &[Fault]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for record in history {
        let kind = match record.op {
            Op::Keyed { .. } => "keyed write",
            Op::Unkeyed { .. } => "unkeyed write",
            Op::Read { .. } => "read",
            Op::Ask { .. } => "suspension",
            Op::Decide { .. } => "decision",
            Op::Wait { .. } => "long-poll",
        };
        let result = record
            .status
            .map_or_else(|| "no answer".to_owned(), |s| s.to_string());
        *counts.entry(format!("{kind} {result}")).or_default() += 1;
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for fault in faults {
        *kinds.entry(fault.kind).or_default() += 1;
    }
    format!(
        "{} requests ({counts:?}); {} faults ({kinds:?}); every promise kept",
        history.len(),
        faults.len(),
    )
}
