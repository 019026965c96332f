//! The memory of held requests: many `?wait=` requests held at once on one server, what each
//! costs (and how much of it is its connection), that calls are still answered meanwhile, and
//! that a graceful stop answers them all.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::Value;

use super::{HOLD, wait_for_waiters};
use crate::harness::client::{self, Sender, suspend_many};
use crate::harness::postgres::{self, Admin};
use crate::harness::servers::{self, BareServer, ServerProcess, sqlite_server};
use crate::harness::{BareMode, Options};

/// The `max_in_flight` of the memory scenario's server: far below the requests it holds.
const HELD_MAX_IN_FLIGHT: usize = 64;

/// Held requests sent at once before the harness waits for the server to count them: under
/// [`HELD_MAX_IN_FLIGHT`], so that none is refused while it has not yet given its slot back.
const HELD_BATCH: usize = 32;

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
                    let mut sender = client::connect(addr).await?;
                    match client::send(&mut sender, method, &path, None, body).await? {
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
    if matches!(options.bare, BareMode::InProcess) {
        return Ok(None);
    }
    let dir = options.data_root.join("held-bare");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tools = Bytes::from_static(br#"{"tools":[]}"#);
    let bare = BareServer::start(&options.bare, tools, &dir.join("bare.db")).await?;
    let pid = bare.pid().ok_or("the bare server has no process")?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = servers::rss_kib(pid).unwrap_or(0);
    let paths = vec!["/tools/echo/call".to_owned(); count];
    let connections = open_connections(bare.addr(), &paths, Method::POST, client::ECHO_BODY)
        .await
        .map_err(|e| format!("bare connections: {e}"))?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = servers::rss_kib(pid).unwrap_or(0);
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
    let mut scrape = client::connect(server.addr).await?;
    // The feed watcher starts with the first request held: before the figure, not in it.
    let first = format!(
        "/calls/{}?wait=1",
        calls.first().ok_or("no call suspended")?.0
    );
    client::fetch(server.addr, &first).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before_rss_kib = servers::rss_kib(pid).unwrap_or(0);
    let before_anon_kib = servers::anon_rss_kib(pid).unwrap_or(0);
    let tcp_before = tcp_sockets();

    // First a connection for each, which reads its call once and stays open: what the
    // connections cost without a request held on them.
    let paths: Vec<String> = calls.iter().map(|(id, _)| format!("/calls/{id}")).collect();
    let connections = open_connections(server.addr, &paths, Method::GET, "")
        .await
        .map_err(|e| format!("{name}: {e} (open files limit {fd_limit})"))?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let connected_rss_kib = servers::rss_kib(pid).unwrap_or(0);
    let connected_anon_kib = servers::anon_rss_kib(pid).unwrap_or(0);

    // Then the held requests, on those connections.
    let opening = Instant::now();
    let mut held = Vec::with_capacity(calls.len());
    let mut connections = connections.into_iter();
    for batch in calls.chunks(HELD_BATCH) {
        for ((call_id, _), mut sender) in batch.iter().zip(connections.by_ref()) {
            let path = format!("/calls/{call_id}?{HOLD}");
            held.push(tokio::spawn(async move {
                let answer = client::send(&mut sender, Method::GET, &path, None, "").await;
                (answer, Instant::now())
            }));
        }
        // Until the server counts these, they hold slots of max_in_flight.
        wait_for_waiters(&mut scrape, held.len() as u64, Duration::from_secs(10)).await?;
    }
    let counted = wait_for_waiters(&mut scrape, held.len() as u64, Duration::from_secs(10)).await?;
    let opened_in = opening.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held_rss_kib = servers::rss_kib(pid).unwrap_or(0);
    let held_anon_kib = servers::anon_rss_kib(pid).unwrap_or(0);
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
    let mut sender = client::connect(server.addr).await?;
    let mut calls_while_held = [Duration::ZERO; 2];
    let key = format!("held-{}-{name}", std::process::id());
    let probes: [(&str, Option<&str>, &'static str); 2] = [
        (
            "/tools/echo/call",
            None,
            r#"{"input":{"text":"still here"}}"#,
        ),
        ("/tools/send_email/call", Some(&key), client::EMAIL_BODY),
    ];
    for ((path, key, body), took) in probes.into_iter().zip(&mut calls_while_held) {
        let started = Instant::now();
        let (status, answer) = client::send(&mut sender, Method::POST, path, key, body).await?;
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
    // Every request is held by the one anonymous principal (auth off): its `max_held` (64 by
    // default) is lifted to what the scenario holds, which is what it measures.
    let max_held = options.waiting.held.to_string();
    let env = [
        (
            "TOOLGATE_MAX_IN_FLIGHT".to_owned(),
            HELD_MAX_IN_FLIGHT.to_string(),
        ),
        ("TOOLGATE_QUOTAS__MAX_HELD".to_owned(), max_held.clone()),
    ];
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
        let settings = [
            ("TOOLGATE_MAX_IN_FLIGHT", HELD_MAX_IN_FLIGHT.to_string()),
            ("TOOLGATE_QUOTAS__MAX_HELD", max_held),
        ];
        let (db, mut replicas) =
            postgres::pg_replicas(options, admin, "held", 1, None, &settings).await?;
        let replica = replicas.pop().expect("one replica");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let idle = replica.rss_kib().unwrap_or(0);
        let result = hold_many("pg_held", replica, fd_limit, idle, options).await;
        db.remove(admin).await;
        results.push(result?);
    }
    Ok(results)
}
