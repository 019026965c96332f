//! Replicas on one PostgreSQL database: real `toolgate` processes on 127.0.0.1 behave as one
//! server. An approval made on one replica is listed, won and read on the others; one idempotency
//! key sends one email however many replicas are asked; a replica that dies (`kill -9`) or
//! stops (`SIGSTOP`) past its lease has its running calls settled by the survivors, and its late
//! outcome is refused and kept as evidence; a database that stops and comes back under load is
//! answered `503 store_unavailable` meanwhile, never a hang or a 500, and loses nothing that was
//! acknowledged.
//!
//! Each replica has its own data directory (so its own outbox: an email counted "in all" is
//! counted over every replica's outbox) and its log is kept in memory, printed when a test fails.

mod common;
#[path = "replicas/cut.rs"]
mod cut;
#[path = "replicas/restart.rs"]
mod restart;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::pg::TestDb;
use common::{Api, assert_error, outbox, temp_dir};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Every request gives up after this: a hang is a failure, never a stuck test.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(50);
/// A generous bound for what should take a few seconds on a quiet machine.
const DEADLINE: Duration = Duration::from_secs(30);

/// A short lease, so that a dead replica's calls are swept within about two seconds.
const LEASE_TTL: (&str, &str) = ("TOOLGATE_STORE__LEASE_TTL_MS", "1500");
const HEARTBEAT: (&str, &str) = ("TOOLGATE_STORE__HEARTBEAT_MS", "300");
const SEND_EMAIL_DELAY: &str = "TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS";

const NAMES: [&str; 3] = ["A", "B", "C"];

/// Every replica's environment, before the test's own: few pooled connections, as the shared
/// local server allows 100 in all to every test running at once.
const BASE_ENV: [(&str, &str); 1] = [("TOOLGATE_STORE__POOL_SIZE", "4")];

/// The events of a call that suspended, was approved, and ran again to completion.
const APPROVED_HISTORY: [&str; 5] = [
    "created",
    "suspended",
    "approved",
    "redispatched",
    "completed",
];

/// One `toolgate serve` process on a shared database, with its own data directory and its log.
struct Replica {
    name: &'static str,
    /// Its replica id, as `/readyz` names it.
    id: String,
    api: Api,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl Replica {
    /// Starts the binary on `url` and waits until it listens.
    fn launch(name: &'static str, url: &str, args: &[&str], env: &[(&str, &str)]) -> Replica {
        let dir = temp_dir();
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--database-url", url])
            .arg("--data-dir")
            .arg(dir.path())
            .args(args)
            // Hermetic: only the configuration the test gives reaches the replica.
            .env_clear()
            .env("RUST_LOG", "info")
            .envs(BASE_ENV.iter().chain(env).copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("the toolgate binary starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (listening, address) = std::sync::mpsc::channel();
        // Keeps draining the log (a full pipe would block the replica), and hands over the
        // address it listens on; the sender goes when the log ends, so a replica that exits
        // early is noticed at once.
        let reader = {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut listening = Some(listening);
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let addr: String =
                            rest.chars().take_while(|c| !c.is_whitespace()).collect();
                        if let Some(tx) = listening.take() {
                            let _ = tx.send(addr);
                        }
                    }
                    log.lock().unwrap().push(line);
                }
            })
        };
        let mut replica = Replica {
            name,
            id: String::new(),
            api: Api {
                base: String::new(),
                client: client(reqwest::header::HeaderMap::new()),
            },
            child,
            log,
            reader: Some(reader),
            dir,
        };
        match address.recv_timeout(DEADLINE) {
            Ok(addr) => replica.api.base = format!("http://{addr}"),
            Err(_) => panic!("replica {name} did not start listening"),
        }
        replica
    }

    /// A client of this replica that sends `token` as its bearer token.
    fn api_as(&self, token: &str) -> Api {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        Api {
            base: self.api.base.clone(),
            client: client(headers),
        }
    }

    /// The lines of its outbox (what it sent).
    fn outbox(&self) -> Vec<Value> {
        outbox(self.dir.path())
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`) to the process.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} replica {}", self.name);
    }

    /// `kill -9`, and waits until it is gone.
    fn kill(&mut self) {
        self.signal("KILL");
        self.child.wait().expect("the killed replica is reaped");
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        if std::thread::panicking() {
            let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            eprintln!(
                "----- replica {} ({}) at {}: {} log lines -----\n{}",
                self.name,
                self.id,
                self.api.base,
                log.len(),
                log.join("\n")
            );
        }
    }
}

fn client(headers: reqwest::header::HeaderMap) -> reqwest::Client {
    common::tls();
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

/// Starts `count` replicas on `url` at once (their migrations meet under the advisory lock),
/// each with `args` and `env`, and checks each is ready on PostgreSQL with its own replica id.
async fn start_replicas(
    url: &str,
    count: usize,
    args: &[&str],
    env: &[(&str, &str)],
) -> Vec<Replica> {
    let mut replicas: Vec<Replica> = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let launches: Vec<_> = NAMES[..count]
                .iter()
                .map(|name| scope.spawn(move || Replica::launch(name, url, args, env)))
                .collect();
            launches
                .into_iter()
                .map(|launch| launch.join().expect("a replica starts"))
                .collect()
        })
    });
    for replica in &mut replicas {
        let (status, body) = replica.api.get("/readyz").await;
        assert_eq!(status, StatusCode::OK, "replica {}: {body}", replica.name);
        assert_eq!(body["status"], "ready");
        assert_eq!(body["store"], "postgres");
        replica.id = body["replica"].as_str().expect("a replica id").to_owned();
    }
    let mut ids: Vec<&str> = replicas.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "every replica has its own id");
    replicas
}

/// Three replicas on `url` with a short lease, whose `send_email` waits `delay_ms` before it
/// sends.
async fn short_lease_replicas(url: &str, delay_ms: &str) -> Vec<Replica> {
    start_replicas(
        url,
        3,
        &[],
        &[LEASE_TTL, HEARTBEAT, (SEND_EMAIL_DELAY, delay_ms)],
    )
    .await
}

/// Every replica's outbox, together.
fn all_outboxes(replicas: &[Replica]) -> Vec<Value> {
    replicas.iter().flat_map(Replica::outbox).collect()
}

/// One answer: status, the `Retry-After` header, and the body (JSON, or the text as a JSON
/// string when it is not JSON).
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

async fn send(request: reqwest::RequestBuilder) -> Result<Answer, reqwest::Error> {
    let response = request.send().await?;
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = response.status();
    let bytes = response.bytes().await?;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// Calls `tool` with `input`, under an `Idempotency-Key` when `key` is given.
async fn call(
    api: &Api,
    tool: &str,
    key: Option<&str>,
    input: &Value,
) -> Result<Answer, reqwest::Error> {
    let mut request = api
        .client
        .post(format!("{}/tools/{tool}/call", api.base))
        .json(&json!({ "input": input }));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    send(request).await
}

fn email(subject: &str) -> Value {
    json!({"to": "dana@example.com", "subject": subject, "body": "attached"})
}

/// Sends an email through `api` under `key`, answered when the call ends.
fn send_email_in_background(
    api: &Api,
    key: &'static str,
) -> tokio::task::JoinHandle<Result<Answer, reqwest::Error>> {
    let api = api.clone();
    tokio::spawn(async move { call(&api, "send_email", Some(key), &email(key)).await })
}

/// Polls `probe` until it gives a value; fails naming `what` after `within`.
async fn eventually<T>(
    what: &str,
    within: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// The record of `call_id`, as `api` reads it.
async fn record(api: &Api, call_id: &str) -> Value {
    let (status, body) = api.get(&format!("/calls/{call_id}")).await;
    assert_eq!(status, StatusCode::OK, "GET /calls/{call_id}: {body}");
    body
}

/// The record of `call_id` once `api` reads it in `status`.
async fn record_in(api: &Api, call_id: &str, status: &str) -> Value {
    eventually(
        &format!("call {call_id} {status} at {}", api.base),
        DEADLINE,
        async || Some(record(api, call_id).await).filter(|r| r["status"] == status),
    )
    .await
}

/// The kinds of a record's events, in order.
fn kinds(record: &Value) -> Vec<&str> {
    record["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events in {record}"))
        .iter()
        .map(|e| e["kind"].as_str().expect("an event has a kind"))
        .collect()
}

/// The id of a running `send_email` call that `api` lists, other than those in `known`.
async fn running_email(api: &Api, known: &[&str]) -> String {
    eventually("a running send_email call", DEADLINE, async || {
        let (status, body) = api.get("/calls?tool=send_email&status=running").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["calls"]
            .as_array()?
            .iter()
            .filter_map(|c| c["call_id"].as_str())
            .find(|id| !known.contains(id))
            .map(str::to_owned)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_made_on_one_replica_is_listed_and_approved_on_another_and_read_on_a_third() {
    const CALLER: &str = "orchestrator-token-replicas";
    const APPROVER: &str = "finance-ops-token-replicas";
    let db = TestDb::create().await;
    let config_dir = temp_dir();
    let config = config_dir.path().join("toolgate.toml");
    let key = |name: &str, role: &str, token: &str| {
        let hash = hex::encode(toolgate::http::auth::token_sha256(token));
        format!("[[auth.keys]]\nname = \"{name}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n")
    };
    std::fs::write(
        &config,
        key("orchestrator", "caller", CALLER) + &key("finance-ops", "approver", APPROVER),
    )
    .unwrap();
    let replicas = start_replicas(&db.url, 3, &["--config", config.to_str().unwrap()], &[]).await;
    let [a, b, c] = &replicas[..] else {
        unreachable!()
    };

    let asked = call(
        &a.api_as(CALLER),
        "ask_human",
        None,
        &json!({"question": "Ship the release?"}),
    )
    .await
    .unwrap();
    assert_eq!(asked.status, StatusCode::ACCEPTED, "{:?}", asked.body);
    assert_eq!(asked.body["status"], "suspended");
    let call_id = asked.body["call_id"].as_str().unwrap();
    let token = asked.body["suspension"]["token"].as_str().unwrap();

    let approver = b.api_as(APPROVER);
    let (status, queue) = approver.get("/approvals").await;
    assert_eq!(status, StatusCode::OK, "{queue}");
    let listed = queue["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|approval| approval["token"] == token)
        .unwrap_or_else(|| panic!("the suspension made on A is listed on B: {queue}"));
    assert_eq!(listed["call_id"], call_id);
    assert_eq!(listed["tool"], "ask_human");
    assert_eq!(listed["reason"], "Ship the release?");

    let (status, approved) = approver
        .approve(token, json!({"answer": "yes, ship it"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["status"], "completed");
    assert_eq!(approved["output"], json!({"answer": "yes, ship it"}));

    // The caller reads its own call on a third replica.
    let done = record(&c.api_as(CALLER), call_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({"answer": "yes, ship it"}));
    assert_eq!(done["caller"], "orchestrator");
    assert_eq!(kinds(&done), APPROVED_HISTORY);
    let approval = &done["events"][2];
    assert_eq!(approval["actor"], "finance-ops", "{done}");
    assert_eq!(done["attempts"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_approvals_of_one_token_on_two_replicas_have_exactly_one_winner() {
    const TOKENS: usize = 20;
    let db = TestDb::create().await;
    let replicas = start_replicas(&db.url, 3, &[], &[]).await;
    let [a, b, c] = &replicas[..] else {
        unreachable!()
    };

    // Refunds above the approval threshold (10,000 cents) suspend; approved, they are issued.
    let mut suspended = Vec::new();
    for i in 0..TOKENS {
        let refund =
            json!({"order_id": format!("o-{i}"), "amount_cents": 25_000, "reason": "damaged"});
        let answer = call(&a.api, "issue_refund", None, &refund).await.unwrap();
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{:?}", answer.body);
        let call_id = answer.body["call_id"].as_str().unwrap().to_owned();
        let token = answer.body["suspension"]["token"]
            .as_str()
            .unwrap()
            .to_owned();
        suspended.push((call_id, token));
    }

    // Every approval of every token at once: B and C approve each.
    let start = Arc::new(tokio::sync::Barrier::new(2 * TOKENS));
    let mut races = Vec::new();
    for (index, (_, token)) in suspended.iter().enumerate() {
        for replica in [b, c] {
            let (api, token, start) = (replica.api.clone(), token.clone(), start.clone());
            let (name, note) = (replica.name, json!({"note": "refund it"}));
            races.push(tokio::spawn(async move {
                start.wait().await;
                let (status, body) = api.approve(&token, note).await;
                (index, (name, status, body))
            }));
        }
    }
    let mut answers: Vec<Vec<(&str, StatusCode, Value)>> = vec![Vec::new(); TOKENS];
    for race in races {
        let (index, answer) = race.await.unwrap();
        answers[index].push(answer);
    }

    let mut winners = Vec::new();
    for ((call_id, _), answers) in suspended.iter().zip(&answers) {
        let won: Vec<_> = answers
            .iter()
            .filter(|(_, status, _)| *status == StatusCode::OK)
            .collect();
        assert_eq!(won.len(), 1, "one winner for {call_id}: {answers:?}");
        let (winner, _, body) = won[0];
        assert_eq!(body["status"], "completed", "{body}");
        assert_eq!(body["output"]["status"], "issued", "{body}");
        winners.push(*winner);
        let (_, status, lost) = answers
            .iter()
            .find(|(_, status, _)| *status != StatusCode::OK)
            .unwrap();
        assert_eq!(*status, StatusCode::CONFLICT, "{lost}");
        assert_eq!(
            assert_error(lost, "already_resolved")["call_id"],
            call_id.as_str()
        );

        // The tool ran again once: its first attempt suspended, the second issued the refund.
        let done = record(&a.api, call_id).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["attempts"], 2, "{done}");
        assert_eq!(kinds(&done), APPROVED_HISTORY);
    }
    println!("the winners of {TOKENS} races: {}", winners.concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_called_fifty_times_across_three_replicas_sends_one_email() {
    const CALLS: usize = 50;
    let db = TestDb::create().await;
    let replicas = start_replicas(&db.url, 3, &[], &[(SEND_EMAIL_DELAY, "300")]).await;

    let start = Arc::new(tokio::sync::Barrier::new(CALLS));
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let (api, start) = (replicas[i % replicas.len()].api.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                call(&api, "send_email", Some("invoice-42"), &email("invoice"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let (mut sent, mut in_progress) = (Vec::new(), 0);
    for answer in calls {
        let answer = answer.await.unwrap();
        match answer.status {
            StatusCode::OK => sent.push(answer.body["call_id"].as_str().unwrap().to_owned()),
            StatusCode::CONFLICT => {
                assert_error(&answer.body, "call_in_progress");
                assert!(answer.retry_after.is_some(), "{answer:?}");
                in_progress += 1;
            }
            _ => panic!("neither the result nor call_in_progress: {answer:?}"),
        }
    }
    println!(
        "{} answered the result, {in_progress} call_in_progress",
        sent.len()
    );
    assert!(!sent.is_empty(), "the call that ran was answered");
    sent.dedup();
    assert_eq!(sent.len(), 1, "one call for the key: {sent:?}");
    let call_id = &sent[0];

    // Replayed on every replica: the same call, not a second email.
    for replica in &replicas {
        let (status, replayed, _, body) = replica
            .api
            .call_keyed("send_email", "invoice-42", email("invoice"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["call_id"], call_id.as_str());
        assert_eq!(replayed.as_deref(), Some("true"), "{body}");
    }
    let lines = all_outboxes(&replicas);
    assert_eq!(lines.len(), 1, "one email in all: {lines:?}");
    assert_eq!(lines[0]["call_id"], call_id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_write_leaves_its_call_needing_reconciliation_on_the_survivors() {
    let db = TestDb::create().await;
    let mut replicas = short_lease_replicas(&db.url, "3000").await;

    let started = Instant::now();
    let request = send_email_in_background(&replicas[0].api, "invoice-7");
    // Its intent is committed: A's handler now waits before it sends.
    let call_id = running_email(&replicas[1].api, &[]).await;
    replicas[0].kill();
    let killed = Instant::now();
    assert!(
        request.await.unwrap().is_err(),
        "no answer came before the kill"
    );

    let [a, b, c] = &replicas[..] else {
        unreachable!()
    };
    let swept = eventually(
        "the killed replica's call needs reconciliation",
        DEADLINE,
        async || {
            for survivor in [b, c] {
                let found = record(&survivor.api, &call_id).await;
                if found["status"] == "needs_reconciliation" {
                    return Some(found);
                }
            }
            None
        },
    )
    .await;
    println!(
        "kill -9 to needs_reconciliation: {} ms (lease 1500 ms, heartbeat 300 ms)",
        killed.elapsed().as_millis()
    );
    assert_eq!(kinds(&swept), ["created", "needs_reconciliation"]);
    assert_eq!(swept["events"][1]["details"]["replica"], a.id.as_str());
    for survivor in [b, c] {
        let seen = record(&survivor.api, &call_id).await;
        assert_eq!(
            seen["status"], "needs_reconciliation",
            "on {}",
            survivor.name
        );
    }

    // The orchestrator retries on another replica: refused, and nothing is sent.
    let retried = call(&c.api, "send_email", Some("invoice-7"), &email("invoice-7"))
        .await
        .unwrap();
    assert_eq!(retried.status, StatusCode::CONFLICT, "{retried:?}");
    assert_eq!(
        assert_error(&retried.body, "needs_reconciliation")["call_id"],
        call_id.as_str()
    );
    // Longer than the send would have taken, had anyone run it.
    tokio::time::sleep(Duration::from_millis(3500).saturating_sub(started.elapsed())).await;
    assert_eq!(all_outboxes(&replicas), Vec::<Value>::new());
    assert_eq!(
        record(&b.api, &call_id).await["status"],
        "needs_reconciliation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_replicas_long_call_is_untouched_by_the_sweep_of_a_dead_one() {
    let db = TestDb::create().await;
    let mut replicas = short_lease_replicas(&db.url, "4000").await;
    let watcher = replicas[2].api.clone();

    // A and B each run a long send; then A dies.
    let on_a = send_email_in_background(&replicas[0].api, "mail-a");
    let a_call = running_email(&watcher, &[]).await;
    let on_b = send_email_in_background(&replicas[1].api, "mail-b");
    let b_call = running_email(&watcher, &[&a_call]).await;
    replicas[0].kill();
    assert!(on_a.await.unwrap().is_err(), "A died before answering");

    // The sweep happened (A's call is settled), and passed B's call by.
    record_in(&watcher, &a_call, "needs_reconciliation").await;
    let b_meanwhile = record(&watcher, &b_call).await;
    println!(
        "B's call when A's was swept: {}",
        b_meanwhile["status"].as_str().unwrap_or("?")
    );
    assert!(
        ["running", "completed"].contains(&b_meanwhile["status"].as_str().unwrap_or("")),
        "{b_meanwhile}"
    );

    let answer = on_b.await.unwrap().unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.body["call_id"], b_call.as_str());
    let done = record(&watcher, &b_call).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(kinds(&done), ["created", "completed"]);
    let lines = all_outboxes(&replicas);
    assert_eq!(lines.len(), 1, "B's email alone: {lines:?}");
    assert_eq!(replicas[1].outbox(), lines);
    assert_eq!(lines[0]["call_id"], b_call.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_past_its_lease_has_its_late_outcome_refused_and_recorded() {
    let db = TestDb::create().await;
    let replicas = short_lease_replicas(&db.url, "3000").await;
    let [a, b, _] = &replicas[..] else {
        unreachable!()
    };

    let request = send_email_in_background(&a.api, "invoice-9");
    let call_id = running_email(&b.api, &[]).await;
    a.signal("STOP");
    let stopped = Instant::now();
    record_in(&b.api, &call_id, "needs_reconciliation").await;
    println!(
        "SIGSTOP to needs_reconciliation: {} ms",
        stopped.elapsed().as_millis()
    );
    a.signal("CONT");

    // A wakes, its handler sends, and its outcome is refused.
    let answer = request.await.unwrap().unwrap();
    assert_eq!(answer.status, StatusCode::CONFLICT, "{answer:?}");
    let now = assert_error(&answer.body, "lease_lost");
    assert_eq!(now["call_id"], call_id.as_str(), "{now}");
    assert_eq!(now["status"], "needs_reconciliation", "{now}");

    // Recorded as evidence for whoever settles it: what A did, and the email it sent.
    let settled = record(&b.api, &call_id).await;
    assert_eq!(settled["status"], "needs_reconciliation", "{settled}");
    assert_eq!(
        kinds(&settled),
        ["created", "needs_reconciliation", "late_outcome"]
    );
    let late = &settled["events"][2]["details"];
    assert_eq!(late["status"], "completed", "{settled}");
    assert_eq!(late["replica"], a.id.as_str(), "{settled}");
    let lines = all_outboxes(&replicas);
    assert_eq!(lines.len(), 1, "A sent once, late: {lines:?}");
    assert_eq!(a.outbox(), lines);
    assert_eq!(late["output"]["message_id"], lines[0]["message_id"]);
}
