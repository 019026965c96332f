//! Webhook deliveries per second, to a receiver inside the harness.
//!
//! The receiver (axum, on a task of the harness) checks each `POST /` for its Standard Webhooks
//! signature, notes when each call's first delivery arrived, and answers `200` (`400` to a bad
//! signature, which toolgate then retries, and which counts as an error). It checks the
//! signature with toolgate's own `signature`: so it checks that every message is signed with the
//! configured secret over the id, timestamp and body it came with, not the algorithm, which
//! toolgate's unit test checks against the specification's example.
//!
//! - `webhook_receiver`: the receiver's own rate, a signed sample message posted by the
//!   harness's closed loop on the run's connections: the ceiling.
//! - `webhooks` (`pg_webhooks` on one PostgreSQL replica): a fresh toolgate with one webhook to
//!   the receiver. `deliveries` calls suspend (`ask_human`, on the run's connections), each a
//!   `call.suspended` feed entry, so a delivery; timed from the first call's `202` (its commit
//!   precedes it) to the last delivery's arrival. Latency: from each call's `202` to its
//!   delivery.
//! - `webhooks_backlog` (`pg_webhooks_backlog`): the same, but the receiver holds its answers
//!   until every call is made, so the sender (which sends a claimed batch at once and waits for
//!   all of it) stalls while the outbox queues the rest; timed from the moment the receiver
//!   lets go to the last arrival: the sender's own rate on a backlog. Its latencies include the
//!   hold.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use tokio::sync::watch;
use toolgate::feed::webhooks::{parse_secret, signature};

use crate::harness::Options;
use crate::harness::client::{self, metric, suspend_many};
use crate::harness::load::{self, ScenarioResult, Step};
use crate::harness::operation::Scenario;
use crate::harness::postgres::{self, Admin};
use crate::harness::servers::{ServerProcess, sqlite_server};
use crate::harness::webhook::SECRET;

/// What one delivery scenario measured, beside its [`ScenarioResult`].
#[derive(Debug, Clone)]
pub struct DeliveryRun {
    /// The scenario.
    pub name: String,
    /// Feed entries made (calls suspended) in the round kept.
    pub entries: u64,
    /// From the first call's `202` to the last one's.
    pub made_in: Duration,
    /// From the first `202` (the backlog: from the receiver letting go) to the last delivery.
    pub delivered_in: Duration,
    /// From the last call's `202` to the last delivery.
    pub lag: Duration,
    /// Deliveries per second, every round.
    pub rounds: Vec<f64>,
    /// Deliveries received again for a call already delivered (at least once).
    pub duplicates: u64,
    /// The average body of a delivery, in bytes.
    pub bytes_per_message: u64,
    /// The store's transactions (`toolgate_store_batch_size_count`) per delivery while a
    /// backlog drains (nothing else writes then).
    pub commits_per_delivery: Option<f64>,
}

/// What the receiver has seen.
struct Inbox {
    secret: Vec<u8>,
    /// When each call's first delivery arrived.
    arrived: Mutex<HashMap<String, Instant>>,
    bad: AtomicU64,
    duplicates: AtomicU64,
    received: AtomicU64,
    bytes: AtomicU64,
    /// Answers wait while this is `false`.
    open: watch::Sender<bool>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Inbox {
    /// Forgets what was received; answers wait unless `open`.
    fn reset(&self, open: bool) {
        lock(&self.arrived).clear();
        for counter in [&self.bad, &self.duplicates, &self.received, &self.bytes] {
            counter.store(0, Ordering::Relaxed);
        }
        self.open.send_replace(open);
    }
}

/// Whether `headers` carry a valid `webhook-signature` of `body` by `secret`.
fn verified(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(timestamp), Some(signatures)) = (
        header("webhook-id"),
        header("webhook-timestamp").and_then(|t| t.parse::<i64>().ok()),
        header("webhook-signature"),
    ) else {
        return false;
    };
    let Ok(body) = std::str::from_utf8(body) else {
        return false;
    };
    let expected = signature(secret, id, timestamp, body);
    // The header may carry several signatures, space-separated.
    signatures.split(' ').any(|s| s == expected)
}

async fn receive(State(inbox): State<Arc<Inbox>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let at = Instant::now();
    inbox.received.fetch_add(1, Ordering::Relaxed);
    inbox.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    let call_id = verified(&inbox.secret, &headers, &body)
        .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|message| {
            message["data"]["call"]["call_id"]
                .as_str()
                .map(str::to_owned)
        });
    let Some(call_id) = call_id else {
        inbox.bad.fetch_add(1, Ordering::Relaxed);
        return StatusCode::BAD_REQUEST;
    };
    if lock(&inbox.arrived).insert(call_id, at).is_some() {
        inbox.duplicates.fetch_add(1, Ordering::Relaxed);
    }
    let mut open = inbox.open.subscribe();
    let _ = open.wait_for(|open| *open).await;
    StatusCode::OK
}

/// The receiver, serving on 127.0.0.1 until dropped.
struct Receiver {
    addr: SocketAddr,
    inbox: Arc<Inbox>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Result<Receiver, String> {
        let inbox = Arc::new(Inbox {
            secret: parse_secret(SECRET).map_err(|e| e.to_string())?,
            arrived: Mutex::new(HashMap::new()),
            bad: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            received: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            open: watch::Sender::new(true),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let router = axum::Router::new()
            .route("/", axum::routing::post(receive))
            .with_state(inbox.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Receiver { addr, inbox, task })
    }

    /// When the first delivery of each of `calls` arrived, those that did; unless `anyway`,
    /// `None` while fewer calls than these have had one (a cheap look, which keeps the lock
    /// short).
    fn arrivals(&self, calls: &[(String, Instant)], anyway: bool) -> Option<Vec<Option<Instant>>> {
        let arrived = lock(&self.inbox.arrived);
        (anyway || arrived.len() >= calls.len()).then(|| {
            calls
                .iter()
                .map(|(id, _)| arrived.get(id).copied())
                .collect()
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// toolgate's configuration: one webhook, to the receiver at `addr`, for every entry.
fn config(addr: SocketAddr) -> String {
    format!(
        "[[webhooks]]\nurl = \"http://{addr}/\"\nsecret = \"{SECRET}\"\nallow_private = true\n\n\
         # A backlog's first batch waits for every call to be made.\n\
         [webhook_delivery]\ntimeout_ms = 120000\n"
    )
}

/// One delivery scenario on `server`: `count` calls suspended, each delivered to `receiver`;
/// with `backlog`, the receiver holds its answers until they are all made.
async fn deliveries(
    name: &str,
    server: &ServerProcess,
    receiver: &Receiver,
    count: usize,
    connections: usize,
    backlog: bool,
) -> Result<(ScenarioResult, DeliveryRun), String> {
    receiver.inbox.reset(!backlog);
    let (made, mut errors) = suspend_many(server.addr, count, connections).await?;
    let answered = |pick: fn(Instant, Instant) -> Instant| {
        made.iter()
            .map(|(_, at)| *at)
            .reduce(pick)
            .ok_or("no call suspended")
    };
    let (first, last_made) = (answered(Instant::min)?, answered(Instant::max)?);
    let mut scrape = client::connect(server.addr).await?;
    let commits = "toolgate_store_batch_size_count";
    let (released, commits_before) = if backlog {
        let before = metric(&mut scrape, commits).await?;
        receiver.inbox.open.send_replace(true);
        (Some(Instant::now()), Some(before))
    } else {
        (None, None)
    };
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_millis(count as u64);
    let arrivals = loop {
        let late = Instant::now() > deadline;
        if let Some(arrivals) = receiver.arrivals(&made, late)
            && (late || arrivals.iter().all(Option::is_some))
        {
            break arrivals;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let commits_after = match commits_before {
        Some(_) => Some(metric(&mut scrape, commits).await?),
        None => None,
    };
    let missing = arrivals.iter().filter(|a| a.is_none()).count() as u64;
    if missing > 0 {
        eprintln!(
            "{name}: {missing} of {} deliveries never arrived",
            made.len()
        );
    }
    let bad = receiver.inbox.bad.load(Ordering::Relaxed);
    if bad > 0 {
        eprintln!("{name}: {bad} deliveries with a bad signature or body");
    }
    errors += missing + bad;
    let latencies: Vec<u32> = made
        .iter()
        .zip(&arrivals)
        .filter_map(|((_, answered), arrived)| {
            let d = arrived.as_ref()?.saturating_duration_since(*answered);
            Some(u32::try_from(d.as_micros()).unwrap_or(u32::MAX))
        })
        .collect();
    let last = arrivals.iter().flatten().copied().max().unwrap_or(first);
    let from = released.unwrap_or(first);
    // In a backlog, the batch already waiting at the receiver when it lets go is not timed.
    let timed = arrivals
        .iter()
        .flatten()
        .filter(|at| released.is_none_or(|released| **at >= released))
        .count();
    let delivered_in = last.saturating_duration_since(from);
    let mut result =
        ScenarioResult::from_latencies(name, latencies, delivered_in, server.peak_rss_kib());
    result.rps = timed as f64 / delivered_in.as_secs_f64().max(1e-9);
    result.errors = errors;
    let received = receiver.inbox.received.load(Ordering::Relaxed).max(1);
    let run = DeliveryRun {
        name: name.to_owned(),
        entries: made.len() as u64,
        made_in: last_made - first,
        delivered_in,
        lag: last.saturating_duration_since(last_made),
        rounds: vec![result.rps],
        duplicates: receiver.inbox.duplicates.load(Ordering::Relaxed),
        bytes_per_message: receiver.inbox.bytes.load(Ordering::Relaxed) / received,
        // The settles of the last batch may come after the scrape: a slight undercount.
        commits_per_delivery: commits_before
            .zip(commits_after)
            .map(|(before, after)| (after - before) / timed.max(1) as f64),
    };
    eprintln!(
        "{name:<20} {:>9.0} deliveries/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}  (made in \
         {:.2} s, last delivered {:.0} ms after the last commit)",
        result.rps,
        result.p50.as_secs_f64() * 1e3,
        result.p99.as_secs_f64() * 1e3,
        errors,
        run.made_in.as_secs_f64(),
        run.lag.as_secs_f64() * 1e3,
    );
    Ok((result, run))
}

/// Keeps the best round of each scenario by rate, with the errors of all rounds.
fn keep(best: &mut Vec<ScenarioResult>, result: ScenarioResult) {
    match best.iter_mut().find(|b| b.name == result.name) {
        Some(previous) => {
            let errors = previous.errors + result.errors;
            if result.rps > previous.rps {
                *previous = result;
            }
            previous.errors = errors;
        }
        None => best.push(result),
    }
}

/// The receiver's ceiling, then the deliveries on SQLite and, with `admin`, on a PostgreSQL
/// replica, live and from a backlog, `options.rounds` times interleaved: each scenario's best
/// round, and the details of its deliveries.
pub async fn run(
    options: &Options,
    admin: Option<&Admin>,
) -> Result<(Vec<ScenarioResult>, Vec<DeliveryRun>), String> {
    let receiver = Receiver::start().await?;
    let config_file = options.data_root.join("webhooks.toml");
    std::fs::write(&config_file, config(receiver.addr))
        .map_err(|e| format!("{}: {e}", config_file.display()))?;
    let sqlite = sqlite_server(options, "webhooks", Some(&config_file), &[]).await?;
    let pg = match admin {
        Some(admin) => Some(
            postgres::pg_replicas(
                options,
                admin,
                "webhooks",
                1,
                Some(&config_file),
                &postgres::small_pool(),
            )
            .await?,
        ),
        None => None,
    };
    let result = async {
        let mut servers = vec![("webhooks", "webhooks_backlog", &sqlite)];
        if let Some((_, replicas)) = &pg {
            servers.push(("pg_webhooks", "pg_webhooks_backlog", &replicas[0]));
        }
        let one_round = Options {
            rounds: 1,
            ..options.clone()
        };
        let ceiling = Step::http(
            Scenario::WebhookPost("webhook_receiver"),
            receiver.addr,
            None,
        );
        let mut best = Vec::new();
        let mut runs: Vec<DeliveryRun> = Vec::new();
        for _ in 0..options.rounds {
            receiver.inbox.reset(true);
            for result in load::run_rounds(std::slice::from_ref(&ceiling), &one_round, None).await?
            {
                keep(&mut best, result);
            }
            for (live, backlog, server) in &servers {
                for (name, held_back) in [(*live, false), (*backlog, true)] {
                    let (result, run) = deliveries(
                        name,
                        server,
                        &receiver,
                        options.waiting.deliveries,
                        options.connections,
                        held_back,
                    )
                    .await?;
                    match runs.iter_mut().find(|r| r.name == run.name) {
                        Some(previous) => {
                            let best_so_far = previous.rounds.iter().copied().fold(0.0, f64::max);
                            let mut rounds = std::mem::take(&mut previous.rounds);
                            rounds.extend(&run.rounds);
                            if result.rps > best_so_far {
                                *previous = run;
                            }
                            previous.rounds = rounds;
                        }
                        None => runs.push(run),
                    }
                    keep(&mut best, result);
                }
            }
        }
        Ok((best, runs))
    }
    .await;
    postgres::stop(sqlite, pg, admin).await;
    result
}

/// The webhook deliveries' details for the report: `deliveries`, with their rates and the
/// receiver's ceiling from `scenarios`.
pub fn markdown(scenarios: &[ScenarioResult], deliveries: &[DeliveryRun]) -> String {
    let get = |name: &str| scenarios.iter().find(|s| s.name == name);
    if deliveries.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nWebhook deliveries to a receiver in the harness (one webhook, every entry a delivery; \
         the round kept, and every round's rate): entries made (suspended calls, one feed entry \
         each), how long they took to make, the deliveries' window (from the first 202; a \
         backlog's from the receiver letting go), the last delivery after the last commit, \
         deliveries/s, the receiver's ceiling in the same run:\n\n\
         | scenario | entries | made in | delivered in | last after the last commit | \
         deliveries/s | every round | duplicates | bytes per message | transactions per \
         delivery (backlog) | vs webhook_receiver |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n",
    );
    let ceiling = get("webhook_receiver").map(|r| r.rps);
    for run in deliveries {
        let rate = get(&run.name).map_or(0.0, |r| r.rps);
        out.push_str(&format!(
            "| {} | {} | {:.2} s | {:.2} s | {:.0} ms | {:.0} | {} | {} | {} | {} | {} |\n",
            run.name,
            run.entries,
            run.made_in.as_secs_f64(),
            run.delivered_in.as_secs_f64(),
            run.lag.as_secs_f64() * 1e3,
            rate,
            run.rounds
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            run.duplicates,
            run.bytes_per_message,
            run.commits_per_delivery
                .map_or(String::new(), |c| format!("{c:.3}")),
            ceiling
                .filter(|c| *c > 0.0)
                .map_or(String::new(), |c| format!("{:.2}x", rate / c)),
        ));
    }
    out
}
