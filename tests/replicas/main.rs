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

#[path = "../common/mod.rs"]
mod common;

mod approvals;
mod cut;
mod leases;
mod one_email;
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
