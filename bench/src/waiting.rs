//! Waiting without polling: how soon a held request (`?wait=`) hears of a decision, and what a
//! held request costs in memory. (Webhook deliveries, the third way not to poll, are
//! [`crate::webhooks`]'.)
//!
//! - **Wake-up latency** (`wake` on SQLite; `pg_wake` on one PostgreSQL replica and
//!   `pg_wake_cross` across two of one database): a call suspends (`ask_human`), a
//!   `GET /calls/{id}?wait=55` is sent for it, the harness reads `toolgate_waiters` from the
//!   holding server's `/metrics` until it counts the request, then approves the call. The
//!   interval is from the instant the approval's answer has arrived at the client (the decision
//!   is committed before it is answered) to the instant the held answer has. It may be negative:
//!   the commit wakes the held request, whose answer can overtake the approval's. Beside it, from
//!   the same samples: the same to the approval's start, the approval's round trip, one plain
//!   `GET /calls/{id}` (one poll), and, on every fifth sample, a client that polls the call every
//!   `poll_every` instead of waiting (the decision made at a random point of its period): what
//!   waiting replaces. One sample at a time, the variants' samples interleaved.
//! - **Memory of held requests** (`held`, `pg_held`): a fresh server with `max_in_flight` 64
//!   gets `held` suspended calls and a connection for each, which reads its call once and stays
//!   open; then one `GET /calls/{id}?wait=55` on each connection, until `toolgate_waiters`
//!   counts them all. Its resident memory before, with the connections idle, and with the
//!   requests held gives the cost of one held request and how much of it is its connection;
//!   beside it, what an idle connection costs the bare axum server. Meanwhile a read and a
//!   durable write must still be answered `200` (held requests give back their `max_in_flight`
//!   slot: were they counted, the 65th would be refused). A graceful stop must then answer
//!   every held request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, StatusCode};
use serde_json::Value;

use crate::load::{self, ANSWER_BODY};
use crate::postgres::{self, Admin};
use crate::servers::ServerProcess;
use crate::{Options, Report};

type Sender = SendRequest<Full<Bytes>>;

/// How long a request is held at most (the server's limit).
const HOLD: &str = "wait=55";

/// The `max_in_flight` of the memory scenario's server: far below the requests it holds.
const HELD_MAX_IN_FLIGHT: usize = 64;

/// Held requests sent at once before the harness waits for the server to count them: under
/// [`HELD_MAX_IN_FLIGHT`], so that none is refused while it has not yet given its slot back.
const HELD_BATCH: usize = 32;

/// How long the harness waits, once the server counts a held request, before it approves.
const SETTLE: Duration = Duration::from_millis(5);

/// Unmeasured samples of each wake-up variant first (the first wait also starts the server's
/// feed watcher).
const WAKE_WARMUP: usize = 5;

/// The sizes of the waiting scenarios; 0 skips one.
#[derive(Debug, Clone, Copy)]
pub struct WaitOptions {
    /// Wake-up samples of each variant.
    pub wake_samples: usize,
    /// The period of the polling client of the wake-up baseline.
    pub poll_every: Duration,
    /// Requests held at once for the memory figure.
    pub held: usize,
    /// Feed entries whose webhook deliveries are timed, per round and mode.
    pub deliveries: usize,
}

impl WaitOptions {
    /// The full run's: 500 wake-ups, a poll every 100 ms, 10,000 held requests, 10,000
    /// deliveries.
    pub fn full() -> Self {
        WaitOptions {
            wake_samples: 500,
            poll_every: Duration::from_millis(100),
            held: 10_000,
            deliveries: 10_000,
        }
    }

    /// A smoke run's: a few of each.
    pub fn smoke() -> Self {
        WaitOptions {
            wake_samples: 20,
            held: 100,
            deliveries: 200,
            ..WaitOptions::full()
        }
    }
}

/// Quantiles of signed intervals, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    /// How many.
    pub samples: usize,
    /// The median.
    pub p50_us: i64,
    /// The 99th percentile.
    pub p99_us: i64,
    /// The least.
    pub min_us: i64,
    /// The most.
    pub max_us: i64,
}

impl Spread {
    fn of(mut values: Vec<i64>) -> Spread {
        values.sort_unstable();
        let n = values.len();
        if n == 0 {
            return Spread::default();
        }
        let at = |q: f64| values[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
        Spread {
            samples: n,
            p50_us: at(0.50),
            p99_us: at(0.99),
            min_us: values[0],
            max_us: values[n - 1],
        }
    }
}

/// `later - earlier` in µs, negative when `later` came first.
fn signed_us(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        None => -i64::try_from((earlier - later).as_micros()).unwrap_or(i64::MAX),
    }
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// What one wake-up variant measured.
#[derive(Debug, Clone)]
pub struct Wake {
    /// `wake`, `pg_wake` or `pg_wake_cross`.
    pub name: String,
    /// Samples measured (answered as expected).
    pub samples: u64,
    /// Samples that failed (a wrong status, a held answer that was not the completed call).
    pub errors: u64,
    /// Held requests answered `running` (read between the decision and the outcome) and sent
    /// again; the sample is timed to the answer of the last.
    pub asked_again: u64,
    /// From the approval's answer to the held answer.
    pub after_answer: Spread,
    /// From the approval's request to the held answer.
    pub after_start: Spread,
    /// The approval's round trip.
    pub approve: Spread,
    /// A plain `GET /calls/{id}` (one poll) on the holding server.
    pub get: Spread,
    /// The period of the polling baseline.
    pub poll_every: Duration,
    /// From the approval's answer to the answer of the first poll that saw the call completed.
    pub polled: Spread,
}

/// What one memory scenario measured.
#[derive(Debug, Clone)]
pub struct Held {
    /// `held` or `pg_held`.
    pub name: String,
    /// Requests held at once, as the server counted them (`toolgate_waiters`).
    pub held: u64,
    /// Failures: a held request not counted, answered early or not answered on the stop, a
    /// call refused while they were held.
    pub errors: u64,
    /// The server's `max_in_flight`.
    pub max_in_flight: usize,
    /// The file-descriptor limit the harness and the server ran with.
    pub fd_limit: u64,
    /// Resident memory once started, in KiB.
    pub idle_rss_kib: u64,
    /// With the suspended calls made and the feed watcher started, before any is held.
    pub before_rss_kib: u64,
    /// Its anonymous share (heap, stacks).
    pub before_anon_kib: u64,
    /// With a connection open for each, idle after one plain read of its call.
    pub connected_rss_kib: u64,
    /// Its anonymous share.
    pub connected_anon_kib: u64,
    /// With a request held on each of those connections.
    pub held_rss_kib: u64,
    /// Its anonymous share.
    pub held_anon_kib: u64,
    /// The machine's TCP sockets and their buffers' pages (`/proc/net/sockstat`), before and
    /// while held: both ends of every connection, and anything else on the machine.
    pub tcp_before: Option<(u64, u64)>,
    /// The same while held.
    pub tcp_held: Option<(u64, u64)>,
    /// From the first held request sent (on connections already open) to the last counted by
    /// the server.
    pub opened_in: Duration,
    /// What an idle connection costs the bare axum server, in KiB, when measured.
    pub bare_connection_kib: Option<f64>,
    /// The round trips of an echo call and a durable write made while they were held.
    pub calls_while_held: [Duration; 2],
    /// From SIGTERM to the last held request answered.
    pub released_in: Duration,
}

/// A sample that failed, and why; the scenario goes on.
fn failed(name: &str, why: &str) {
    eprintln!("{name}: a sample failed: {why}");
}

/// A fresh suspended call on `sender`: its id and its suspension's token.
async fn suspend(sender: &mut Sender) -> Result<(String, String), String> {
    let (status, body) = load::ask_human(sender).await?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or_default();
    match (
        status,
        answer["call_id"].as_str(),
        answer["suspension"]["token"].as_str(),
    ) {
        (StatusCode::ACCEPTED, Some(id), Some(token)) => Ok((id.to_owned(), token.to_owned())),
        _ => Err(format!(
            "ask_human answered {status} {}",
            String::from_utf8_lossy(&body)
        )),
    }
}

/// The value of the unlabelled series `name` in the `/metrics` of the server on `sender`.
pub(crate) async fn metric(sender: &mut Sender, name: &str) -> Result<f64, String> {
    let (status, body) = load::send(sender, Method::GET, "/metrics", None, "").await?;
    if status != StatusCode::OK {
        return Err(format!("GET /metrics answered {status}"));
    }
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .ok_or_else(|| format!("no {name} in /metrics"))
}

/// `toolgate_waiters` of the server on `sender`.
async fn waiters(sender: &mut Sender) -> Result<u64, String> {
    Ok(metric(sender, "toolgate_waiters").await? as u64)
}

/// Reads `toolgate_waiters` until it is at least `count`, for at most `limit`; the last
/// figure read.
async fn wait_for_waiters(sender: &mut Sender, count: u64, limit: Duration) -> Result<u64, String> {
    let deadline = Instant::now() + limit;
    loop {
        let now = waiters(sender).await?;
        if now >= count || Instant::now() > deadline {
            return Ok(now);
        }
        tokio::task::yield_now().await;
    }
}

/// One wake-up variant: calls made and approved on `approver`, held and polled on `holder`.
struct Prober {
    name: &'static str,
    approver_addr: SocketAddr,
    holder: SocketAddr,
    approver: Sender,
    scrape: Sender,
    get: Sender,
    /// Lent to the task that holds (or polls) and given back after.
    hold: Option<Sender>,
    after_answer: Vec<i64>,
    after_start: Vec<i64>,
    approve: Vec<i64>,
    plain_get: Vec<i64>,
    polled: Vec<i64>,
    asked_again: u64,
    errors: u64,
}

impl Prober {
    async fn new(
        name: &'static str,
        approver: SocketAddr,
        holder: SocketAddr,
    ) -> Result<Self, String> {
        Ok(Prober {
            name,
            approver_addr: approver,
            holder,
            approver: load::connect(approver).await?,
            scrape: load::connect(holder).await?,
            get: load::connect(holder).await?,
            hold: None,
            after_answer: Vec::new(),
            after_start: Vec::new(),
            approve: Vec::new(),
            plain_get: Vec::new(),
            polled: Vec::new(),
            asked_again: 0,
            errors: 0,
        })
    }

    /// Approves `token`: when the approval was sent, and when its `200` had arrived.
    async fn approve(&mut self, token: &str) -> Result<(Instant, Instant), String> {
        let started = Instant::now();
        let (status, body) = load::send(
            &mut self.approver,
            Method::POST,
            &format!("/approvals/{token}/approve"),
            None,
            ANSWER_BODY,
        )
        .await?;
        let answered = Instant::now();
        if status != StatusCode::OK {
            return Err(format!(
                "the approval answered {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        Ok((started, answered))
    }

    async fn holding_connection(&mut self) -> Result<Sender, String> {
        match self.hold.take() {
            Some(sender) => Ok(sender),
            None => load::connect(self.holder).await,
        }
    }

    /// One held request woken by an approval; recorded when `measured`.
    async fn sample(&mut self, measured: bool) -> Result<(), String> {
        let (call_id, token) = suspend(&mut self.approver).await?;
        let path = format!("/calls/{call_id}");
        let started = Instant::now();
        let (status, _) = load::send(&mut self.get, Method::GET, &path, None, "").await?;
        let plain_get = started.elapsed();
        if status != StatusCode::OK {
            return Err(format!("GET {path} answered {status}"));
        }
        let mut hold = self.holding_connection().await?;
        let held = tokio::spawn(async move {
            let path = format!("{path}?{HOLD}");
            let mut again = 0;
            loop {
                let answer = load::send(&mut hold, Method::GET, &path, None, "").await;
                // An approval records the call `running` while the tool runs again (a change
                // with no feed entry): a request that reads it then is answered `running`, and
                // a client waiting for the outcome asks again.
                if let Ok((StatusCode::OK, body)) = &answer
                    && load::status_of(body).as_deref() == Some("running")
                    && again < 3
                {
                    again += 1;
                    continue;
                }
                return (hold, answer, Instant::now(), again);
            }
        });
        let counted = wait_for_waiters(&mut self.scrape, 1, Duration::from_secs(5)).await;
        if counted.as_ref().is_ok_and(|n| *n >= 1) {
            // The server counts a waiter just before it reads the call the first time; a read
            // after the approval has begun could see it `running`.
            tokio::time::sleep(SETTLE).await;
            let approved = self.approve(&token).await;
            if let Ok((started, answered)) = approved {
                let (hold, answer, woken, again) = held.await.map_err(|e| e.to_string())?;
                self.hold = Some(hold);
                self.asked_again += again;
                let (status, body) = answer?;
                let status_now = load::status_of(&body);
                if status != StatusCode::OK || status_now.as_deref() != Some("completed") {
                    return Err(format!("the held request answered {status} {status_now:?}"));
                }
                if measured {
                    self.after_answer.push(signed_us(woken, answered));
                    self.after_start.push(signed_us(woken, started));
                    self.approve.push(us(answered - started));
                    self.plain_get.push(us(plain_get));
                }
                return Ok(());
            }
            held.abort();
            return approved.map(|_| ());
        }
        held.abort();
        Err(match counted {
            Ok(n) => format!("the held request was not counted within 5 s ({n} waiters)"),
            Err(e) => e,
        })
    }

    /// One sample of the baseline: a client polling the call every `every` sees the decision.
    async fn poll_sample(&mut self, every: Duration) -> Result<(), String> {
        let (call_id, token) = suspend(&mut self.approver).await?;
        let path = format!("/calls/{call_id}");
        let mut poll = self.holding_connection().await?;
        let poller = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let deadline = Instant::now() + Duration::from_secs(55);
            while Instant::now() < deadline {
                ticks.tick().await;
                let (status, body) = load::send(&mut poll, Method::GET, &path, None, "").await?;
                match load::status_of(&body).as_deref() {
                    // Not decided, or decided and the tool runs again: not the outcome yet.
                    Some("suspended" | "running") if status == StatusCode::OK => {}
                    Some("completed") if status == StatusCode::OK => {
                        return Ok((poll, Instant::now()));
                    }
                    other => return Err(format!("a poll answered {status} {other:?}")),
                }
            }
            Err("the poller never saw the call completed".to_owned())
        });
        // Decided at a random point of the client's period, as a person would.
        tokio::time::sleep(postgres::random_below(every)).await;
        match self.approve(&token).await {
            Ok((_, answered)) => {
                let (poll, seen) = poller.await.map_err(|e| e.to_string())??;
                self.hold = Some(poll);
                self.polled.push(signed_us(seen, answered));
                Ok(())
            }
            Err(e) => {
                poller.abort();
                Err(e)
            }
        }
    }

    /// Counts a failed sample; the connections are made again.
    async fn recover(&mut self, why: &str) -> Result<(), String> {
        failed(self.name, why);
        self.errors += 1;
        self.approver = load::connect(self.approver_addr).await?;
        self.scrape = load::connect(self.holder).await?;
        self.get = load::connect(self.holder).await?;
        self.hold = None;
        Ok(())
    }

    fn finish(self, poll_every: Duration) -> Wake {
        Wake {
            name: self.name.to_owned(),
            samples: self.after_answer.len() as u64,
            errors: self.errors,
            asked_again: self.asked_again,
            after_answer: Spread::of(self.after_answer),
            after_start: Spread::of(self.after_start),
            approve: Spread::of(self.approve),
            get: Spread::of(self.plain_get),
            poll_every,
            polled: Spread::of(self.polled),
        }
    }
}

/// A fresh toolgate on SQLite in `options.data_root/<label>`, with `env`.
pub(crate) async fn sqlite_server(
    options: &Options,
    label: &str,
    config: Option<&std::path::Path>,
    env: &[(String, String)],
) -> Result<ServerProcess, String> {
    let dir = options.data_root.join(label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    ServerProcess::toolgate_with(&options.toolgate, &dir, config, env).await
}

/// A read pool of 4, for the replicas of the scenarios where its size does not matter: the
/// server's connections are shared with everyone.
pub(crate) fn small_pool() -> [(&'static str, String); 1] {
    [("TOOLGATE_STORE__POOL_SIZE", "4".to_owned())]
}

/// `count` replicas on a fresh database `label`, with `settings`; the database is the
/// caller's to remove.
pub(crate) async fn pg_replicas(
    options: &Options,
    admin: &Admin,
    label: &str,
    count: usize,
    config: Option<&std::path::Path>,
    settings: &[(&str, String)],
) -> Result<(postgres::ScratchDb, Vec<ServerProcess>), String> {
    let db = admin.scratch(label).await?;
    let env = postgres::replica_env(&db.url, settings);
    match postgres::start_replicas(
        &options.toolgate,
        &options.data_root,
        label,
        count,
        config,
        &env,
    )
    .await
    {
        Ok(replicas) => Ok((db, replicas)),
        Err(e) => {
            db.remove(admin).await;
            Err(e)
        }
    }
}

/// The wake-up variants: SQLite, and with `admin` one PostgreSQL replica and two.
pub async fn wake(options: &Options, admin: Option<&Admin>) -> Result<Vec<Wake>, String> {
    let samples = options.waiting.wake_samples;
    let poll_every = options.waiting.poll_every;
    let sqlite = sqlite_server(options, "wake", None, &[]).await?;
    let pg = match admin {
        Some(admin) => Some(pg_replicas(options, admin, "wake", 2, None, &small_pool()).await?),
        None => None,
    };
    let result = async {
        let mut probers = vec![Prober::new("wake", sqlite.addr, sqlite.addr).await?];
        if let Some((_, replicas)) = &pg {
            let (a, b) = (replicas[0].addr, replicas[1].addr);
            probers.push(Prober::new("pg_wake", a, a).await?);
            probers.push(Prober::new("pg_wake_cross", a, b).await?);
        }
        for i in 0..WAKE_WARMUP + samples {
            let measured = i >= WAKE_WARMUP;
            for prober in &mut probers {
                if let Err(why) = prober.sample(measured).await {
                    prober.recover(&why).await?;
                }
                if measured
                    && (i - WAKE_WARMUP).is_multiple_of(5)
                    && let Err(why) = prober.poll_sample(poll_every).await
                {
                    prober.recover(&why).await?;
                }
            }
        }
        let wakes: Vec<Wake> = probers
            .into_iter()
            .map(|prober| prober.finish(poll_every))
            .collect();
        for w in &wakes {
            eprintln!(
                "{:<14} wake-up after the approval's answer p50 {:.2} ms p99 {:.2} ms ({} \
                 samples, {} errors); polling every {} ms p50 {:.1} ms",
                w.name,
                w.after_answer.p50_us as f64 / 1e3,
                w.after_answer.p99_us as f64 / 1e3,
                w.samples,
                w.errors,
                w.poll_every.as_millis(),
                w.polled.p50_us as f64 / 1e3,
            );
        }
        Ok(wakes)
    }
    .await;
    stop(sqlite, pg, admin).await;
    result
}

/// Stops a scenario's servers, and removes its PostgreSQL database.
pub(crate) async fn stop(
    sqlite: ServerProcess,
    pg: Option<(postgres::ScratchDb, Vec<ServerProcess>)>,
    admin: Option<&Admin>,
) {
    sqlite.stop().await;
    if let (Some((db, replicas)), Some(admin)) = (pg, admin) {
        for replica in replicas {
            replica.stop().await;
        }
        db.remove(admin).await;
    }
}

/// Raises this process's soft limit of open files to `needed` if it is lower (children, such
/// as the servers it starts, inherit it); the limit it runs with, or why it cannot be raised.
pub fn raise_fd_limit(needed: u64) -> Result<u64, String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!(
            "getrlimit(RLIMIT_NOFILE): {}",
            std::io::Error::last_os_error()
        ));
    }
    if limit.rlim_cur >= needed {
        return Ok(limit.rlim_cur);
    }
    if limit.rlim_max < needed {
        return Err(format!(
            "needs {needed} open files, and the hard limit is {} (ulimit -Hn): raise it, or \
             hold fewer requests (--held N)",
            limit.rlim_max
        ));
    }
    limit.rlim_cur = needed;
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(format!(
            "setrlimit(RLIMIT_NOFILE, {needed}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(needed)
}

/// `count` suspended calls on `addr`, made on `connections` connections at once: each call's id
/// and when its `202` had arrived (after its commit), in no order, and the calls that failed.
pub(crate) async fn suspend_many(
    addr: SocketAddr,
    count: usize,
    connections: usize,
) -> Result<(Vec<(String, Instant)>, u64), String> {
    let next = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections.clamp(1, count.max(1)) {
        let (next, failures) = (next.clone(), failures.clone());
        let mut sender = load::connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut made = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < count as u64 {
                match suspend(&mut sender).await {
                    Ok((call_id, _)) => made.push((call_id, Instant::now())),
                    Err(why) => {
                        failed("suspending", &why);
                        failures.fetch_add(1, Ordering::Relaxed);
                        match load::connect(addr).await {
                            Ok(fresh) => sender = fresh,
                            Err(_) => break,
                        }
                    }
                }
            }
            made
        }));
    }
    let mut made = Vec::with_capacity(count);
    for task in tasks {
        made.extend(task.await.map_err(|e| e.to_string())?);
    }
    let missing = (count - made.len()) as u64;
    Ok((made, failures.load(Ordering::Relaxed).max(missing)))
}

/// A connection to `addr` for each of `paths`, each used for one `method` request of `path`
/// with `body` (answered `200`) and left open, idle; made [`HELD_BATCH`] at a time.
async fn open_connections(
    addr: SocketAddr,
    paths: &[String],
    method: Method,
    body: &'static str,
) -> Result<Vec<Sender>, String> {
    let mut connections = Vec::with_capacity(paths.len());
    for batch in paths.chunks(HELD_BATCH) {
        let opening: Vec<_> = batch
            .iter()
            .map(|path| {
                let (method, path) = (method.clone(), path.clone());
                tokio::spawn(async move {
                    let mut sender = load::connect(addr).await?;
                    match load::send(&mut sender, method, &path, None, body).await? {
                        (StatusCode::OK, _) => Ok(sender),
                        (status, _) => Err(format!("{path} answered {status}")),
                    }
                })
            })
            .collect();
        for opened in opening {
            connections.push(opened.await.map_err(|e| e.to_string())?.map_err(|e| {
                format!(
                    "could not open and use connection {} of {}: {e}",
                    connections.len() + 1,
                    paths.len()
                )
            })?);
        }
    }
    Ok(connections)
}

/// What an idle connection costs the bare axum server (the ceiling of the load scenarios, in a
/// process of its own), after one echo call, in KiB: any axum server pays this. `None` when
/// the bare server runs inside the harness (the smoke test).
async fn bare_connection_kib(options: &Options, count: usize) -> Result<Option<f64>, String> {
    if matches!(options.bare, crate::BareMode::InProcess) {
        return Ok(None);
    }
    let dir = options.data_root.join("held-bare");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tools = Bytes::from_static(br#"{"tools":[]}"#);
    let bare = crate::BareServer::start(&options.bare, tools, &dir.join("bare.db")).await?;
    let pid = bare.pid().ok_or("the bare server has no process")?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = load::rss_kib(pid).unwrap_or(0);
    let paths = vec!["/tools/echo/call".to_owned(); count];
    let connections = open_connections(bare.addr(), &paths, Method::POST, load::ECHO_BODY)
        .await
        .map_err(|e| format!("bare connections: {e}"))?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = load::rss_kib(pid).unwrap_or(0);
    drop(connections);
    Ok(Some((after as f64 - before as f64) / count.max(1) as f64))
}

/// The machine's TCP sockets in use and the pages their buffers hold (`/proc/net/sockstat`).
fn tcp_sockets() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let line = text.lines().find(|line| line.starts_with("TCP:"))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    let value = |name: &str| {
        let at = fields.iter().position(|f| *f == name)?;
        fields.get(at + 1)?.parse::<u64>().ok()
    };
    Some((value("inuse")?, value("mem")?))
}

/// Holds a request for each of `options.waiting.held` suspended calls on `server` at once, and
/// reads its memory; stops the server, which must answer them all.
async fn hold_many(
    name: &str,
    server: ServerProcess,
    fd_limit: u64,
    idle_rss_kib: u64,
    options: &Options,
) -> Result<Held, String> {
    let count = options.waiting.held;
    let pid = server.pid();
    let (calls, mut errors) =
        suspend_many(server.addr, count, options.connections.min(HELD_BATCH)).await?;
    let mut scrape = load::connect(server.addr).await?;
    // The feed watcher starts with the first request held: before the figure, not in it.
    let first = format!(
        "/calls/{}?wait=1",
        calls.first().ok_or("no call suspended")?.0
    );
    load::fetch(server.addr, &first).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before_rss_kib = load::rss_kib(pid).unwrap_or(0);
    let before_anon_kib = load::anon_rss_kib(pid).unwrap_or(0);
    let tcp_before = tcp_sockets();

    // First a connection for each, which reads its call once and stays open: what the
    // connections cost without a request held on them.
    let paths: Vec<String> = calls.iter().map(|(id, _)| format!("/calls/{id}")).collect();
    let connections = open_connections(server.addr, &paths, Method::GET, "")
        .await
        .map_err(|e| format!("{name}: {e} (open files limit {fd_limit})"))?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let connected_rss_kib = load::rss_kib(pid).unwrap_or(0);
    let connected_anon_kib = load::anon_rss_kib(pid).unwrap_or(0);

    // Then the held requests, on those connections.
    let opening = Instant::now();
    let mut held = Vec::with_capacity(calls.len());
    let mut connections = connections.into_iter();
    for batch in calls.chunks(HELD_BATCH) {
        for ((call_id, _), mut sender) in batch.iter().zip(connections.by_ref()) {
            let path = format!("/calls/{call_id}?{HOLD}");
            held.push(tokio::spawn(async move {
                let answer = load::send(&mut sender, Method::GET, &path, None, "").await;
                (answer, Instant::now())
            }));
        }
        // Until the server counts these, they hold slots of max_in_flight.
        wait_for_waiters(&mut scrape, held.len() as u64, Duration::from_secs(10)).await?;
    }
    let counted = wait_for_waiters(&mut scrape, held.len() as u64, Duration::from_secs(10)).await?;
    let opened_in = opening.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held_rss_kib = load::rss_kib(pid).unwrap_or(0);
    let held_anon_kib = load::anon_rss_kib(pid).unwrap_or(0);
    let tcp_held = tcp_sockets();
    if counted != held.len() as u64 {
        eprintln!(
            "{name}: the server counts {counted} held requests, not {}",
            held.len()
        );
        errors += 1;
    }
    let early = held.iter().filter(|task| task.is_finished()).count();
    if early > 0 {
        eprintln!("{name}: {early} held requests were answered before their time");
        errors += early as u64;
    }

    // Held requests give back their slot: a read and a durable write still go through.
    let mut sender = load::connect(server.addr).await?;
    let mut calls_while_held = [Duration::ZERO; 2];
    let key = format!("held-{}-{name}", std::process::id());
    let probes: [(&str, Option<&str>, &'static str); 2] = [
        (
            "/tools/echo/call",
            None,
            r#"{"input":{"text":"still here"}}"#,
        ),
        ("/tools/send_email/call", Some(&key), load::EMAIL_BODY),
    ];
    for ((path, key, body), took) in probes.into_iter().zip(&mut calls_while_held) {
        let started = Instant::now();
        let (status, answer) = load::send(&mut sender, Method::POST, path, key, body).await?;
        *took = started.elapsed();
        if status != StatusCode::OK {
            eprintln!(
                "{name}: {path} answered {status} while requests were held: {}",
                String::from_utf8_lossy(&answer)
            );
            errors += 1;
        }
    }
    drop(sender);
    drop(scrape);

    let stopping = Instant::now();
    server.stop().await;
    let mut released_in = Duration::ZERO;
    let mut answered = 0u64;
    // What the others got, and how many of each.
    let mut otherwise = std::collections::BTreeMap::<String, u64>::new();
    for task in held {
        let outcome = match task.await {
            Ok((Ok((StatusCode::OK, _)), at)) => {
                answered += 1;
                released_in = released_in.max(at.saturating_duration_since(stopping));
                continue;
            }
            Ok((Ok((status, body)), _)) => {
                let code =
                    serde_json::from_slice::<Value>(&body).unwrap_or_default()["error"]["code"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_default();
                format!("{status} {code}")
            }
            Ok((Err(e), _)) => e,
            Err(e) => e.to_string(),
        };
        *otherwise.entry(outcome).or_default() += 1;
    }
    if answered != counted {
        eprintln!(
            "{name}: {answered} of {counted} held requests were answered 200 on the stop; the \
             others: {otherwise:?}"
        );
        errors += counted.abs_diff(answered);
    }
    let result = Held {
        name: name.to_owned(),
        held: counted,
        errors,
        max_in_flight: HELD_MAX_IN_FLIGHT,
        fd_limit,
        idle_rss_kib,
        before_rss_kib,
        before_anon_kib,
        connected_rss_kib,
        connected_anon_kib,
        held_rss_kib,
        held_anon_kib,
        tcp_before,
        tcp_held,
        opened_in,
        bare_connection_kib: None,
        calls_while_held,
        released_in,
    };
    eprintln!(
        "{name:<14} {} held: RSS {:.1} -> {:.1} MiB (connections idle {:.1} MiB), {:.1} KiB each \
         ({:.1} KiB the idle connection); held in {:.1} s, {} errors",
        result.held,
        before_rss_kib as f64 / 1024.0,
        held_rss_kib as f64 / 1024.0,
        connected_rss_kib as f64 / 1024.0,
        result.per_request_kib(),
        result.per_connection_kib(),
        opened_in.as_secs_f64(),
        errors
    );
    Ok(result)
}

impl Held {
    /// Resident memory per held request with its connection, in KiB.
    pub fn per_request_kib(&self) -> f64 {
        self.per(self.before_rss_kib, self.held_rss_kib)
    }

    /// Of which the connection, idle, in KiB.
    pub fn per_connection_kib(&self) -> f64 {
        self.per(self.before_rss_kib, self.connected_rss_kib)
    }

    fn per(&self, from_kib: u64, to_kib: u64) -> f64 {
        (to_kib as f64 - from_kib as f64) / self.held.max(1) as f64
    }
}

/// The memory scenarios: SQLite, and with `admin` one PostgreSQL replica.
pub async fn held(options: &Options, admin: Option<&Admin>) -> Result<Vec<Held>, String> {
    // Both ends of every connection are on this machine: the harness's sockets here, the
    // server's in the child, which inherits the limit.
    let fd_limit = raise_fd_limit(options.waiting.held as u64 + 1024)?;
    let env = [(
        "TOOLGATE_MAX_IN_FLIGHT".to_owned(),
        HELD_MAX_IN_FLIGHT.to_string(),
    )];
    let bare = bare_connection_kib(options, options.waiting.held).await?;
    let server = sqlite_server(options, "held", None, &env).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle = server.rss_kib().unwrap_or(0);
    let mut sqlite = hold_many("held", server, fd_limit, idle, options).await?;
    sqlite.bare_connection_kib = bare;
    let mut results = vec![sqlite];
    if let Some(admin) = admin {
        // The default read pool (16): on the stop every held request reads its call once, all
        // at once, and a read that waits over 5 s for a connection is answered
        // `503 store_unavailable` (with a pool of 4, about 750 of 10,000 were here).
        let settings = [("TOOLGATE_MAX_IN_FLIGHT", HELD_MAX_IN_FLIGHT.to_string())];
        let (db, mut replicas) = pg_replicas(options, admin, "held", 1, None, &settings).await?;
        let replica = replicas.pop().expect("one replica");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let idle = replica.rss_kib().unwrap_or(0);
        let result = hold_many("pg_held", replica, fd_limit, idle, options).await;
        db.remove(admin).await;
        results.push(result?);
    }
    Ok(results)
}

fn ms(value_us: i64) -> String {
    format!("{:.2} ms", value_us as f64 / 1e3)
}

/// The section of the report on waiting without polling.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    if !report.wake.is_empty() {
        out.push_str(
            "\nWake-up: a suspended call's GET /calls/{id}?wait=55 held (counted by \
             toolgate_waiters), then the call approved; one sample at a time. \"after the \
             answer\" runs from the approval's answer at the client to the held answer \
             (negative: the held answer came first); \"after the request\" from the approval's \
             request; \"asked again\": held answers that were the call `running` (read between \
             the decision and the outcome), sent again and timed to the last. Baselines from the \
             same samples: the approval's round trip, one plain GET of the call, and a client \
             polling the call instead:\n\n\
             | variant | samples | errors | asked again | after the answer p50 | p99 | min | max | after the \
             request p50 | p99 | approval p50 | plain GET p50 | p99 | polling every | its p50 | \
             p99 |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
             | ---: | ---: | ---: | ---: |\n",
        );
        for w in &report.wake {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ms | {} | \
                 {} |\n",
                w.name,
                w.samples,
                w.errors,
                w.asked_again,
                ms(w.after_answer.p50_us),
                ms(w.after_answer.p99_us),
                ms(w.after_answer.min_us),
                ms(w.after_answer.max_us),
                ms(w.after_start.p50_us),
                ms(w.after_start.p99_us),
                ms(w.approve.p50_us),
                ms(w.get.p50_us),
                ms(w.get.p99_us),
                w.poll_every.as_millis(),
                ms(w.polled.p50_us),
                ms(w.polled.p99_us),
            ));
        }
    }
    if !report.held.is_empty() {
        out.push_str(
            "\nHeld requests: a connection of its own for each of as many suspended calls, \
             which reads its call once (GET /calls/{id}) and stays open, idle; then \
             GET /calls/{id}?wait=55 on each, all held at once. The server's resident memory \
             (VmRSS; in brackets RssAnon, its heap and stacks) before, with the connections \
             idle, and with the requests held; per held request, with its connection and of \
             which the idle connection; the machine's TCP sockets and their buffers' pages \
             (/proc/net/sockstat: both ends, the kernel's, not in RSS); calls made while they \
             are held:\n\n\
             | scenario | held | errors | max_in_flight | idle RSS | before | connections idle \
             | requests held | per held request | of which its idle connection | an idle \
             connection of the bare axum server | TCP sockets, buffer pages | held in | echo, \
             write while held | released by SIGTERM in |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- \
             | ---: | --- | ---: |\n",
        );
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        let both = |all: u64, anon: u64| format!("{} ({})", mib(all), mib(anon));
        let tcp = |t: Option<(u64, u64)>| t.map_or("n/a".into(), |(n, p)| format!("{n}, {p}"));
        for h in &report.held {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} KiB | {:.1} KiB | {} | {} -> {} \
                 | {:.2} s | {:.2} ms, {:.2} ms | {:.0} ms |\n",
                h.name,
                h.held,
                h.errors,
                h.max_in_flight,
                mib(h.idle_rss_kib),
                both(h.before_rss_kib, h.before_anon_kib),
                both(h.connected_rss_kib, h.connected_anon_kib),
                both(h.held_rss_kib, h.held_anon_kib),
                h.per_request_kib(),
                h.per_connection_kib(),
                h.bare_connection_kib
                    .map_or("n/a".to_owned(), |k| format!("{k:.1} KiB")),
                tcp(h.tcp_before),
                tcp(h.tcp_held),
                h.opened_in.as_secs_f64(),
                h.calls_while_held[0].as_secs_f64() * 1e3,
                h.calls_while_held[1].as_secs_f64() * 1e3,
                h.released_in.as_secs_f64() * 1e3,
            ));
        }
        if let Some(h) = report.held.first() {
            out.push_str(&format!(
                "\n(open files limit of the harness and the servers: {})\n",
                h.fd_limit
            ));
        }
    }
    out.push_str(&crate::webhooks::markdown(report));
    out
}
