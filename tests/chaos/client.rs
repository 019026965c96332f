//! The clients of a run: each sends one request after another to whichever process is up, and
//! records it in the history with its times and its answer (or that none came).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use super::{Fault, Rng, Server};

/// How long a client waits for an answer (a stopped server gives none).
const TIMEOUT: Duration = Duration::from_secs(3);

/// The idempotency keys the clients share: [`KEYS`] new ones every [`KEY_WINDOW_MS`], each
/// sent by several clients at once, so that faults land while keyed writes run.
const KEYS: u64 = 3;
const KEY_WINDOW_MS: u64 = 500;

/// How often a keyed write that got no answer is sent again, with its key, as an orchestrator
/// would.
const KEYED_ATTEMPTS: usize = 6;

/// What a request was.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// `send_email` with an `Idempotency-Key`; the email's body names the key.
    Keyed { key: String },
    /// `send_email` without a key; the body is the request's tag.
    Unkeyed { tag: String },
    /// `echo`.
    Read { tag: String },
    /// A suspension: `ask_human`'s own, or (`gated`) `send_email` held by the approval policy
    /// of the run's configuration (an email whose subject is `gated`, its body `gated:<tag>`).
    Ask { tag: String, gated: bool },
    /// `GET /calls/{id}?wait=5` on a suspended call, sent with its decisions.
    Wait { call_id: String },
    /// A decision on a suspension, sent at the same moment as another.
    Decide {
        token: String,
        call_id: String,
        verb: Verb,
        answer: String,
        /// Whether the suspension is a gated email's (see [`Op::Ask`]).
        gated: bool,
    },
}

/// What a decision does: `POST /approvals/{token}/<verb>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Approve,
    Reject,
    /// The work done outside the server, with its receipt (only `ask_human`'s).
    Complete,
}

/// A suspension acknowledged with its token, to be decided.
#[derive(Debug, Clone)]
pub struct Pending {
    token: String,
    call_id: String,
    tag: String,
    gated: bool,
    /// When it was deferred (the run's clock), if it was.
    since_ms: u64,
}

/// Suspensions left undecided for [`DEFER_MS`], so that the approval policy escalates them
/// (after 1 s), then decided as any other; shared by the clients.
pub type Deferred = Arc<Mutex<std::collections::VecDeque<Pending>>>;

/// How long a deferred suspension waits undecided.
const DEFER_MS: u64 = 6000;

/// One request of the history.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub client: usize,
    pub op: Op,
    /// The process it went to (its address), or `""` when none answered.
    pub base: String,
    pub sent_ms: u64,
    pub done_ms: u64,
    /// The answer's status; `None` when no answer came (the connection failed, or timed out).
    pub status: Option<u16>,
    /// The answer's body, or why none came.
    pub body: Value,
}

impl Record {
    /// Whether the server acknowledged the request with a call (`200` or `202`, naming it).
    pub fn acknowledged(&self) -> Option<&str> {
        match self.status {
            Some(200 | 202) => self.body["call_id"].as_str(),
            _ => None,
        }
    }

    /// Whether the answer was the call completed.
    pub fn completed(&self) -> bool {
        self.status == Some(200) && self.body["status"] == "completed"
    }
}

/// Client `n`'s loop until `deadline`.
pub async fn drive(
    n: usize,
    server: Arc<Server>,
    mut rng: Rng,
    deadline: Instant,
    history: Arc<Mutex<Vec<Record>>>,
    deferred: Deferred,
) {
    let http = reqwest::Client::builder().timeout(TIMEOUT).build().unwrap();
    let mut count = 0;
    while Instant::now() < deadline {
        if server.base(&mut rng).is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        count += 1;
        let tag = format!("{n}-{count}");
        let email =
            |body: String| json!({"to": "chaos@example.com", "subject": "chaos", "body": body});
        let roll = rng.between(0, 100);
        let record = if roll < 35 {
            let key = format!("k{}-{}", server.now() / KEY_WINDOW_MS, rng.between(0, KEYS));
            let input = email(format!("key:{key}"));
            let mut attempt = 1;
            loop {
                let op = Op::Keyed { key: key.clone() };
                let path = "/tools/send_email/call";
                let to = (&*server, server.base(&mut rng));
                let sent = send(&http, to, n, op, path, input.clone(), Some(&key)).await;
                if sent.status.is_some() || attempt == KEYED_ATTEMPTS {
                    break sent;
                }
                history.lock().unwrap().push(sent);
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        } else if roll < 55 {
            let op = Op::Unkeyed { tag: tag.clone() };
            let input = email(format!("op:{tag}"));
            let to = (&*server, server.base(&mut rng));
            send(&http, to, n, op, "/tools/send_email/call", input, None).await
        } else if roll < 80 {
            let op = Op::Read { tag: tag.clone() };
            let input = json!({"text": format!("op:{tag}")});
            let to = (&*server, server.base(&mut rng));
            send(&http, to, n, op, "/tools/echo/call", input, None).await
        } else {
            // A suspension: decided at once, or now and then left waiting to be escalated.
            let gated = rng.between(0, 2) == 0;
            let op = Op::Ask {
                tag: tag.clone(),
                gated,
            };
            let (path, input) = if gated {
                let input = json!({"to": "chaos@example.com", "subject": "gated", "body": format!("gated:{tag}")});
                ("/tools/send_email/call", input)
            } else {
                (
                    "/tools/ask_human/call",
                    json!({"question": format!("op:{tag}")}),
                )
            };
            let to = (&*server, server.base(&mut rng));
            let asked = send(&http, to, n, op, path, input, None).await;
            if let (Some(202), Some(token), Some(call_id)) = (
                asked.status,
                asked.body["suspension"]["token"].as_str(),
                asked.body["call_id"].as_str(),
            ) {
                let pending = Pending {
                    token: token.to_owned(),
                    call_id: call_id.to_owned(),
                    tag: tag.clone(),
                    gated,
                    since_ms: server.now(),
                };
                if rng.between(0, 5) == 0 {
                    deferred.lock().unwrap().push_back(pending);
                } else {
                    let decided = decide(&http, &server, &mut rng, n, &pending).await;
                    history.lock().unwrap().extend(decided);
                }
            }
            asked
        };
        history.lock().unwrap().push(record);
        // A suspension left waiting long enough is decided now.
        let due = {
            let mut queue = deferred.lock().unwrap();
            match queue.front() {
                Some(p) if server.now() >= p.since_ms + DEFER_MS => queue.pop_front(),
                _ => None,
            }
        };
        if let Some(pending) = due {
            let decided = decide(&http, &server, &mut rng, n, &pending).await;
            history.lock().unwrap().extend(decided);
        }
    }
}

/// Two decisions on `pending` at the same moment, each to a process of its own choosing (with
/// replicas, most often two at once), and a long-poll on its call from a third: the first
/// approves (or completes), the second approves, rejects or completes. Only a gated email is
/// completed externally, with a receipt (`ask_human` declares no output schema, so its
/// completion is refused).
async fn decide(
    http: &reqwest::Client,
    server: &Server,
    rng: &mut Rng,
    n: usize,
    pending: &Pending,
) -> [Record; 3] {
    let mut verb = |verbs: &[Verb]| {
        let verbs: Vec<Verb> = verbs
            .iter()
            .copied()
            .filter(|v| pending.gated || *v != Verb::Complete)
            .collect();
        verbs[rng.between(0, verbs.len() as u64) as usize]
    };
    let first = verb(&[Verb::Approve, Verb::Complete]);
    let second = verb(&[Verb::Approve, Verb::Reject, Verb::Complete]);
    let one = |verb: Verb, answer: String, base: Option<String>| {
        let token = &pending.token;
        let op = Op::Decide {
            token: token.clone(),
            call_id: pending.call_id.clone(),
            verb,
            answer: answer.clone(),
            gated: pending.gated,
        };
        let approved = if pending.gated {
            json!({"note": answer})
        } else {
            json!({"answer": answer})
        };
        let (path, body) = match verb {
            Verb::Approve => (
                format!("/approvals/{token}/approve"),
                json!({"input": approved}),
            ),
            Verb::Reject => (
                format!("/approvals/{token}/reject"),
                json!({"reason": answer}),
            ),
            Verb::Complete => (
                format!("/approvals/{token}/complete"),
                json!({"output": {"message_id": answer}}),
            ),
        };
        async move { send(http, (server, base), n, op, &path, body, None).await }
    };
    let tag = &pending.tag;
    let a = one(first, format!("yes-{tag}"), server.base(rng));
    let b = one(second, format!("also-{tag}"), server.base(rng));
    // What the long-poll answers must be where the call stays.
    let waited = wait(http, (server, server.base(rng)), n, &pending.call_id);
    let (a, b, waited) = tokio::join!(a, b, waited);
    [a, b, waited]
}

/// Sends one request (a call's `input`, or a decision's body as it is) to `base`, a process
/// that answered a moment ago.
async fn send(
    http: &reqwest::Client,
    (server, base): (&Server, Option<String>),
    client: usize,
    op: Op,
    path: &str,
    body: Value,
    key: Option<&str>,
) -> Record {
    let sent_ms = server.now();
    let Some(base) = base else {
        return Record {
            client,
            op,
            base: String::new(),
            sent_ms,
            done_ms: sent_ms,
            status: None,
            body: json!("the server is down"),
        };
    };
    let body = if path.starts_with("/tools/") {
        json!({"input": body})
    } else {
        body
    };
    let mut request = http.post(format!("{base}{path}")).json(&body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    exchange(server, client, op, base, sent_ms, request).await
}

/// Long-polls the call `call_id` at `base` until it leaves `suspended` (or 5 s pass).
async fn wait(
    http: &reqwest::Client,
    (server, base): (&Server, Option<String>),
    client: usize,
    call_id: &str,
) -> Record {
    let op = Op::Wait {
        call_id: call_id.to_owned(),
    };
    let sent_ms = server.now();
    let base = base.unwrap_or_default();
    let request = http.get(format!("{base}/calls/{call_id}?wait=5"));
    exchange(server, client, op, base, sent_ms, request).await
}

/// Sends `request` to `base`, and records it as `op` sent at `sent_ms`, with its answer.
async fn exchange(
    server: &Server,
    client: usize,
    op: Op,
    base: String,
    sent_ms: u64,
    request: reqwest::RequestBuilder,
) -> Record {
    let (status, body) = match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            match response.json::<Value>().await {
                Ok(body) => (Some(status), body),
                Err(err) => (None, json!(format!("the answer's body: {err}"))),
            }
        }
        Err(err) => (None, json!(err.to_string())),
    };
    Record {
        client,
        op,
        base,
        sent_ms,
        done_ms: server.now(),
        status,
        body,
    }
}

/// Writes the faults and the history to `file`, a JSON line each.
pub fn save(history: &[Record], faults: &[Fault], file: &Path) {
    let mut text = String::new();
    for fault in faults {
        let line = json!({
            "fault": fault.kind,
            "process": fault.process,
            "base": fault.base,
            "at_ms": fault.at_ms,
            "for_ms": fault.for_ms,
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    for record in history {
        text.push_str(&serde_json::to_string(record).unwrap());
        text.push('\n');
    }
    std::fs::write(file, text).unwrap();
}
