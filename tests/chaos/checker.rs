//! The checker: reads a run's history, the database and the ledger (the outbox: one line per
//! email sent, naming its call), and names the first promise broken:
//!
//! - nothing is left `running` once the last restart has settled what a crash interrupted;
//! - every acknowledged call (`200`/`202` naming it) exists, and one answered completed (a
//!   call, a decision, or a long-poll of a suspended call) is stored completed with the output
//!   it was answered with; the exception is the documented one, a read's record written behind
//!   its answer when a `kill -9` came right after it (or right after the disk, full when it was
//!   answered, had room again);
//! - every effect has its call on record, runs at most once per call, at most once per
//!   idempotency key, and exactly once for a call answered or stored completed, with the message
//!   the answer named;
//! - a suspension is decided at most once (of two decisions at once, one wins), and the call
//!   ends as its winner said (approved: completed with the approver's answer, or for a gated
//!   email sent once or `needs_reconciliation`; completed externally: with the receipt;
//!   rejected: nothing sent);
//! - a suspension is escalated at most once, never before it waited its second, and always when
//!   it waited undecided well past it;
//! - a call's history never goes on past its end (a late outcome aside, kept as evidence), so
//!   a zombie past its lease cannot overwrite what the others settled;
//! - the event stream, read from its cursor across the faults, is the feed: in order, nothing
//!   twice, nothing missing ([`super::stream`]); and every change reaches the webhook at least
//!   once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;

use super::client::{Op, Record, Verb};
use super::common::outbox;
use super::{Fault, Server};

/// How long after a read's answer a `kill -9` of the process that answered may take its record
/// (written behind within 10 ms on a quiet machine; the margin covers a loaded one).
const READ_WINDOW_MS: u64 = 2000;

/// A suspension decided this long after it was made waited undecided well past the policy's
/// `escalate_after_s` (1 s): it must have been escalated, faults and sweeps (every 250 ms)
/// included.
const LATE_MS: i64 = 5000;

/// How many calls' records the checker reads at once.
const READS_AT_ONCE: usize = 16;

/// What the history says a call must be once settled.
#[derive(Debug)]
enum Expect<'a> {
    /// Answered completed (a call, a decision, a long-poll) with this output.
    Completed(&'a Value),
    /// Decided by this winning decision.
    Decided(&'a Record),
}

/// When a read's record, written behind its answer, is on disk at the latest: within the window
/// after the answer, unless the process's disk fills before then; then the record is kept (in
/// memory, lost to a `kill -9`) until the disk has room again, and written within the window
/// after that.
fn written_behind_by(record: &Record, faults: &[Fault]) -> u64 {
    let mut by = record.done_ms + READ_WINDOW_MS;
    for fault in faults {
        if fault.kind == "disk full" && fault.base == record.base && fault.at_ms <= by {
            by = by.max(fault.at_ms + fault.for_ms + READ_WINDOW_MS);
        }
    }
    by
}

/// Checks the run; its summary, or the first violation.
pub async fn check(
    server: &Server,
    history: &[Record],
    faults: &[Fault],
    seen: &[super::stream::Seen],
) -> Result<String, String> {
    let stored = settled(server).await?;
    let kills: Vec<(&str, u64)> = faults
        .iter()
        .filter(|f| f.kind == "kill -9")
        .map(|f| (f.base.as_str(), f.at_ms))
        .collect();

    // Acknowledged calls exist; what completed ones and decided ones must be is read below.
    let mut expect: HashMap<&str, Vec<Expect>> = HashMap::new();
    let mut lost_reads = 0;
    for record in history {
        let Some(call_id) = record.acknowledged() else {
            continue;
        };
        if !stored.contains_key(call_id) {
            let lost_behind = matches!(record.op, Op::Read { .. }) && {
                let written_by = written_behind_by(record, faults);
                kills.iter().any(|&(base, at)| {
                    base == record.base && at >= record.sent_ms && at <= written_by
                })
            };
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
            let output = &record.body["output"];
            expect
                .entry(call_id)
                .or_default()
                .push(Expect::Completed(output));
        }
    }
    let winners = winners(history)?;
    let (sent, sent_by) = ledger(server, &stored)?;
    // Every key's effect at most once; once exactly for a key or a request answered completed.
    for record in history {
        let (body, answered) = match &record.op {
            Op::Keyed { key } => (format!("key:{key}"), record.completed()),
            Op::Unkeyed { tag } => (format!("op:{tag}"), record.completed()),
            Op::Ask { tag, gated: true } => (format!("gated:{tag}"), false),
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
    for winner in winners {
        let Op::Decide { call_id, .. } = &winner.op else {
            unreachable!()
        };
        expect
            .entry(call_id)
            .or_default()
            .push(Expect::Decided(winner));
    }
    // Every call's record, read as a client reads it, a few at once.
    let base = server
        .base(&mut super::Rng::new(0))
        .expect("the server is up for the checker");
    let http = reqwest::Client::new();
    let (http, base, sent, sent_by, expect) = (&http, &base, &sent, &sent_by, &expect);
    let mut reads = futures_util::stream::iter(stored.keys())
        .map(|call_id| async move {
            let url = format!("{base}/calls/{call_id}");
            let response = http.get(url).send().await.expect("the checker's read");
            let record: Value = response.json().await.expect("a call's record");
            (call_id, record)
        })
        .buffer_unordered(READS_AT_ONCE);
    let mut escalated = 0;
    while let Some((call_id, record)) = reads.next().await {
        ended_once(call_id, &record)?;
        sent_once(call_id, &record, sent_by)?;
        escalated += escalations(call_id, &record)?;
        for expected in expect.get(call_id.as_str()).map_or(&[][..], Vec::as_slice) {
            as_expected(call_id, &record, expected, sent)?;
        }
    }
    let streamed = super::stream::check(server, seen).await?;
    let hooked = super::stream::check_webhooks(server).await?;
    Ok(format!(
        "{}; {escalated} suspensions escalated, each once; {lost_reads} read records lost to a \
         kill -9 right after their answer (as documented); the event stream read {streamed} \
         events across the faults, none twice, none missing; the webhook got every change of \
         the feed ({hooked} deliveries)",
        summary(history, faults)
    ))
}

/// Whether a call's `record` is what the history said it must be.
fn as_expected(
    call_id: &str,
    record: &Value,
    expected: &Expect,
    sent: &HashMap<String, Vec<String>>,
) -> Result<(), String> {
    let (status, output) = (&record["status"], &record["output"]);
    let kept = match expected {
        Expect::Completed(answered) => status == "completed" && output == *answered,
        Expect::Decided(winner) => {
            let Op::Decide {
                verb,
                answer,
                gated,
                ..
            } = &winner.op
            else {
                unreachable!()
            };
            match (verb, gated) {
                (Verb::Reject, _) => status == "rejected",
                (Verb::Complete, _) => {
                    let body = record["input"]["body"].as_str().unwrap_or_default();
                    status == "completed"
                        && output["message_id"] == answer.as_str()
                        && !sent.contains_key(body)
                }
                (_, false) => status == "completed" && output["answer"] == answer.as_str(),
                // An approved email is sent once, unless a fault interrupted it: then it may
                // have been, and a person settles it.
                (_, true) => {
                    let body = record["input"]["body"].as_str().unwrap_or_default();
                    let lines = sent.get(body).map_or(&[][..], Vec::as_slice);
                    match status.as_str() {
                        Some("completed") => {
                            lines.len() == 1 && output["message_id"] == lines[0].as_str()
                        }
                        Some("needs_reconciliation") => lines.len() <= 1,
                        _ => false,
                    }
                }
            }
        }
    };
    if kept {
        return Ok(());
    }
    Err(format!(
        "call {call_id} was {expected:?}, and is now {status} with {output}: {record}"
    ))
}

/// A suspension is escalated at most once, not before it waited its second, and surely when it
/// was decided only [`LATE_MS`] after it was made. How many times it was (0 or 1).
fn escalations(call_id: &str, record: &Value) -> Result<usize, String> {
    let events = record["events"].as_array().cloned().unwrap_or_default();
    let at = |kind: &str| -> Vec<i64> {
        events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| {
                let at = e["at"].as_str().expect("an event's time");
                let at = humantime::parse_rfc3339(at).expect("an RFC 3339 time");
                at.duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64
            })
            .collect()
    };
    let (suspended, escalated) = (at("suspended"), at("escalated"));
    let wrong = |why: &str| Err(format!("call {call_id} {why}: {record}"));
    if escalated.len() > 1 {
        return wrong("was escalated more than once");
    }
    let Some(&made) = suspended.first() else {
        return if escalated.is_empty() {
            Ok(0)
        } else {
            wrong("was escalated with no suspension")
        };
    };
    if let Some(&escalated_at) = escalated.first()
        && escalated_at < made + 1000
    {
        return wrong("was escalated before it waited its second");
    }
    let decided = ["approved", "rejected", "completed_externally"]
        .iter()
        .flat_map(|kind| at(kind))
        .min();
    if let Some(decided) = decided
        && decided >= made + LATE_MS
        && escalated.first().is_none_or(|&e| e > decided)
    {
        return wrong("waited undecided past its escalate_after_s, and was not escalated");
    }
    Ok(escalated.len())
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

/// The emails sent, by body: the message ids sent with it.
type Outbox = HashMap<String, Vec<String>>;

/// The outbox by email body (the message ids sent with it), and the calls that sent one. Fails
/// when an email has no call on record, or when a call sent twice.
fn ledger(
    server: &Server,
    stored: &HashMap<String, (String, String)>,
) -> Result<(Outbox, HashSet<String>), String> {
    let mut by_body: HashMap<String, Vec<String>> = HashMap::new();
    let mut by_call: HashSet<String> = HashSet::new();
    let lines = server.places().flat_map(|place| outbox(&place));
    for line in lines {
        let call_id = line["call_id"].as_str().unwrap_or_default().to_owned();
        match stored.get(&call_id) {
            Some((tool, _)) if tool == "send_email" => {}
            _ => return Err(format!("an email was sent with no call on record: {line}")),
        }
        if !by_call.insert(call_id.clone()) {
            return Err(format!("call {call_id} sent its email twice: {line}"));
        }
        let body = line["body"].as_str().unwrap_or_default().to_owned();
        let message = line["message_id"].as_str().unwrap_or_default().to_owned();
        by_body.entry(body).or_default().push(message);
    }
    Ok((by_body, by_call))
}

/// An email's call stored completed sent it, unless it was completed externally (the work done
/// elsewhere, with its receipt), and then the tool sent nothing.
fn sent_once(call_id: &str, record: &Value, sent_by: &HashSet<String>) -> Result<(), String> {
    if record["tool"] != "send_email" {
        return Ok(());
    }
    let sent = sent_by.contains(call_id);
    let events = record["events"].as_array().map_or(&[][..], Vec::as_slice);
    let elsewhere = events.iter().any(|e| e["kind"] == "completed_externally");
    if elsewhere && sent {
        return Err(format!(
            "call {call_id} was completed externally, and its tool sent the email too: {record}"
        ));
    }
    if record["status"] == "completed" && !elsewhere && !sent {
        return Err(format!(
            "call {call_id} is stored completed, and sent nothing: {record}"
        ));
    }
    Ok(())
}

/// Of the decisions on each suspension, at most one won (`200`): the winners.
fn winners(history: &[Record]) -> Result<Vec<&Record>, String> {
    let mut by_token: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for record in history {
        if let Op::Decide { token, .. } = &record.op {
            by_token.entry(token).or_default().push(record);
        }
    }
    let mut winners = Vec::new();
    for (token, decided) in by_token {
        let won: Vec<&Record> = decided
            .into_iter()
            .filter(|r| r.status == Some(200))
            .collect();
        if won.len() > 1 {
            return Err(format!("suspension {token} was decided twice: {won:?}"));
        }
        winners.extend(won);
    }
    Ok(winners)
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
            Op::Ask { gated: false, .. } => "suspension",
            Op::Ask { gated: true, .. } => "gated write",
            Op::Decide {
                verb: Verb::Approve,
                ..
            } => "approval",
            Op::Decide {
                verb: Verb::Reject, ..
            } => "rejection",
            Op::Decide {
                verb: Verb::Complete,
                ..
            } => "completion",
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
