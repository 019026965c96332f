//! The closed-loop load generator: the steps of a plan, each a kind of load ([`Scenario`]) on a
//! target, and the rounds that measure them (with the database's counters and every process's
//! CPU around each).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::Options;
use super::client::{EMAIL_BODY, connect, fetch};
use super::durable::{Durable, DurableClient};
use super::operation::{Scenario, operate};
use super::postgres::Admin;
use super::servers::peak_rss_kib;
use super::{cpu, postgres};

/// One measurement.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    /// The scenario.
    pub name: String,
    /// Operations completed with the expected answer.
    pub requests: u64,
    /// Operations that failed (a wrong status, a broken connection).
    pub errors: u64,
    /// Operations per second.
    pub rps: f64,
    /// Median operation latency.
    pub p50: Duration,
    /// 99th percentile operation latency.
    pub p99: Duration,
    /// The server's peak resident memory so far, in KiB (the largest of its replicas').
    pub peak_rss_kib: Option<u64>,
    /// Operations over every round, warm-ups and failures included: what the database
    /// counters of a PostgreSQL scenario cover.
    pub operations_all: u64,
    /// A PostgreSQL scenario's counters, summed over its rounds.
    pub pg: Option<postgres::Counters>,
    /// The cluster-wide WAL figures per operation (bytes, fsyncs, ms in fsyncs) of the round
    /// with the least WAL per operation: anything else writing to the cluster meanwhile only
    /// adds to them, so the least disturbed round has the least.
    pub wal_per_op: Option<[f64; 3]>,
    /// CPU time used over every round (warm-ups included), by whom.
    pub cpu: Option<cpu::Cpu>,
    /// Echo on PostgreSQL, in the round kept: whether the records written behind the answers
    /// kept up with them.
    pub behind: Option<WriteBehind>,
}

/// How the records of answered calls, written behind their answers, kept up with them.
#[derive(Debug, Clone, Copy)]
pub struct WriteBehind {
    /// Records committed per second during the measured window.
    pub committed_per_s: f64,
    /// Records of answered calls not yet committed when the load stopped.
    pub backlog: i64,
    /// How long after the load stopped the last of them was committed (`None`: not within a
    /// minute).
    pub drained_after: Option<Duration>,
}

/// What one connection measured.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    /// Every operation, warm-up and failures included.
    operations: u64,
    /// Every operation answered as expected, warm-up included.
    ok: u64,
    /// The commits baseline: the CPU its clients' backends used, read as each client ends.
    backends_s: f64,
}

impl Tally {
    /// Records one operation that started at `started`; it counts only from `from`.
    fn record(&mut self, ok: bool, started: Instant, from: Instant) {
        self.operations += 1;
        self.ok += u64::from(ok);
        let measured = started >= from;
        if !measured {
            return;
        }
        if ok {
            self.latencies_us
                .push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
        } else {
            self.errors += 1;
        }
    }

    fn add(&mut self, other: Tally) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        self.operations += other.operations;
        self.ok += other.ok;
        self.backends_s += other.backends_s;
    }
}

/// Where a step's load goes.
#[derive(Debug, Clone)]
pub enum Target {
    /// HTTP servers: connection `i` goes to the `i % n`-th (round robin over replicas).
    Http(Vec<SocketAddr>),
    /// A PostgreSQL database, for [`Scenario::Commits`].
    Postgres(String),
    /// A PostgreSQL database, for [`Scenario::Durable`] (see [`super::durable`]).
    Durable(String),
}

/// One scenario of a plan: what, where, whose memory to watch, and for a PostgreSQL scenario
/// the database whose counters are sampled around each of its rounds.
#[derive(Debug, Clone)]
pub struct Step {
    /// What is run.
    pub scenario: Scenario,
    /// Against what.
    pub target: Target,
    /// The processes serving it, for their peak memory.
    pub pids: Vec<u32>,
    /// The scenario's own database, when it runs on PostgreSQL.
    pub database: Option<String>,
}

impl Step {
    /// A scenario against one HTTP server.
    pub fn http(scenario: Scenario, addr: SocketAddr, pid: Option<u32>) -> Step {
        Step {
            scenario,
            target: Target::Http(vec![addr]),
            pids: pid.into_iter().collect(),
            database: None,
        }
    }
}

/// Runs `scenario` against `target` on `connections` connections until `until`, measuring
/// only from `from`.
async fn drive(
    scenario: Scenario,
    target: &Target,
    connections: usize,
    from: Instant,
    until: Instant,
) -> Tally {
    let durable = match target {
        Target::Durable(url) => match Durable::start(url).await {
            Ok(durable) => Some(durable),
            Err(e) => {
                eprintln!("{}: {e}", scenario.name());
                return Tally {
                    errors: 1,
                    operations: 1,
                    ..Tally::default()
                };
            }
        },
        _ => None,
    };
    let tasks: Vec<_> = (0..connections)
        .map(|index| match target {
            Target::Http(addrs) => {
                let addr = addrs[index % addrs.len()];
                tokio::spawn(drive_http(scenario, addr, from, until))
            }
            Target::Postgres(url) => tokio::spawn(drive_commits(url.clone(), index, from, until)),
            Target::Durable(_) => {
                let client = durable.as_ref().expect("started above").client();
                tokio::spawn(drive_durable(client, index, from, until))
            }
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        if let Ok(tally) = task.await {
            total.add(tally);
        }
    }
    if let Some(durable) = durable {
        total.backends_s += durable.finish().await;
    }
    total
}

/// One client's closed loop of calls through the bare durable-write baseline's queue.
async fn drive_durable(
    client: DurableClient,
    index: usize,
    from: Instant,
    until: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let run = std::process::id();
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let started = Instant::now();
        let ok = client.call(format!("bare-{run}-{at}-{index}-{n}")).await;
        tally.record(ok, started, from);
    }
    tally
}

/// One connection's closed loop of `scenario` against `addr`.
async fn drive_http(scenario: Scenario, addr: SocketAddr, from: Instant, until: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut sender = None;
    while Instant::now() < until {
        if sender.is_none() {
            match connect(addr).await {
                Ok(s) => sender = Some(s),
                Err(_) => {
                    tally.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let started = Instant::now();
        let result = operate(scenario, sender.as_mut().expect("connected")).await;
        tally.record(matches!(result, Ok(true)), started, from);
        if result.is_err() {
            sender = None;
        }
    }
    tally
}

/// One client's closed loop of single-row commits into the commits table of `url`.
async fn drive_commits(url: String, index: usize, from: Instant, until: Instant) -> Tally {
    let mut tally = Tally::default();
    let client_no = i32::try_from(index).unwrap_or(i32::MAX);
    let mut client = None;
    // Each backend's CPU, read before its client closes (it is gone after).
    let backend_cpu = |backend: Option<u32>| backend.and_then(cpu::process_s);
    while Instant::now() < until {
        if client.is_none() {
            let connected = async {
                let c = postgres::connect_as(&url, postgres::COMMITS_CLIENT).await?;
                let statement = c
                    .prepare(postgres::COMMIT_ONE_ROW)
                    .await
                    .map_err(|e| e.to_string())?;
                let backend = c
                    .query_one("SELECT pg_backend_pid()", &[])
                    .await
                    .ok()
                    .and_then(|row| u32::try_from(row.get::<_, i32>(0)).ok());
                Ok::<_, String>((c, statement, backend))
            };
            match connected.await {
                Ok(c) => client = Some(c),
                Err(_) => {
                    tally.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let (c, statement, backend) = client.as_ref().expect("connected");
        let started = Instant::now();
        let result = c.execute(statement, &[&client_no, &EMAIL_BODY]).await;
        tally.record(matches!(result, Ok(1)), started, from);
        if result.is_err() {
            tally.backends_s += backend_cpu(*backend).unwrap_or(0.0);
            client = None;
        }
    }
    if let Some((_, _, backend)) = &client {
        tally.backends_s += backend_cpu(*backend).unwrap_or(0.0);
    }
    tally
}

/// Runs every scenario of `plan`, `options.rounds` times interleaved, and keeps each one's best
/// round (the least disturbed by the machine's noise). With `admin`, the counters of each
/// PostgreSQL scenario's database are read before and after each of its rounds (once they
/// have settled, see `settle_statistics`) and summed.
pub async fn run_rounds(
    plan: &[Step],
    options: &Options,
    admin: Option<&Admin>,
) -> Result<Vec<ScenarioResult>, String> {
    let settle = options
        .postgres
        .as_ref()
        .map_or(Duration::ZERO, |pg| pg.settle);
    let pg_duration = options.postgres.as_ref().and_then(|pg| pg.duration);
    let mut best: Vec<Option<ScenarioResult>> = vec![None; plan.len()];
    for round in 1..=options.rounds {
        for (index, step) in plan.iter().enumerate() {
            let observed = match (admin, &step.database) {
                (Some(admin), Some(db)) => Some((admin, db, admin.sample(db).await?)),
                _ => None,
            };
            let (warmup, duration) = match pg_duration {
                Some(d) if step.database.is_some() => (d / 3, d),
                _ => (options.warmup, options.duration),
            };
            let postmaster = admin
                .and_then(|admin| admin.postmaster)
                .filter(|_| step.database.is_some());
            // Echo on PostgreSQL: its records are written behind the answers; how far behind
            // is read from the last sequence number committed (`max(seq)`, an index lookup).
            let behind_db = match (admin, &step.database, step.scenario) {
                (Some(admin), Some(db), Scenario::Echo(_)) => Some((admin, db.as_str())),
                _ => None,
            };
            let mut probes = 0;
            let start_seq = match behind_db {
                Some((admin, db)) => {
                    probes += 1;
                    admin.last_seq(db).await?
                }
                None => 0,
            };
            let cpu_before = cpu::Cpu::now(&step.pids, postmaster);
            let backends_before = match (admin, &step.database) {
                (Some(admin), Some(db)) if postmaster.is_some() => Some(admin.backends(db).await?),
                _ => None,
            };
            let from = Instant::now() + warmup;
            let until = from + duration;
            let edges = async {
                let (admin, db) = behind_db?;
                tokio::time::sleep_until(from.into()).await;
                let first = admin.last_seq(db).await;
                tokio::time::sleep_until(until.into()).await;
                let last = admin.last_seq(db).await;
                Some((first, last))
            };
            let (tally, edges) = tokio::join!(
                drive(
                    step.scenario,
                    &step.target,
                    options.connections,
                    from,
                    until,
                ),
                edges
            );
            let behind = match (behind_db, edges) {
                (Some((admin, db)), Some((first, last))) => {
                    let (first, last) = (first?, last?);
                    probes += 2;
                    let target = start_seq + i64::try_from(tally.ok).unwrap_or(i64::MAX);
                    let stopped = Instant::now();
                    let mut seq = admin.last_seq(db).await?;
                    probes += 1;
                    let backlog = target - seq;
                    while seq < target && stopped.elapsed() < Duration::from_secs(60) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        seq = admin.last_seq(db).await?;
                        probes += 1;
                    }
                    Some(WriteBehind {
                        committed_per_s: (last - first) as f64 / duration.as_secs_f64(),
                        backlog: backlog.max(0),
                        drained_after: (seq >= target).then(|| stopped.elapsed()),
                    })
                }
                _ => None,
            };
            // After the records written behind are in: their work is the calls'.
            let mut cpu = cpu::Cpu::now(&step.pids, postmaster).since(cpu_before);
            if let (Some(admin), Some(db), Some(before)) = (admin, &step.database, backends_before)
            {
                let after = admin.backends(db).await?;
                cpu.backends_s = Some(cpu::used_between(&before, &after) + tally.backends_s);
            }
            let operations = tally.operations;
            let pg = match observed {
                Some((admin, db, before)) => {
                    settle_statistics(admin, step, settle).await?;
                    let mut counters = admin.sample(db).await?.since(before);
                    // The probes above are transactions of their own in the same database.
                    counters.transactions -= probes;
                    Some(counters)
                }
                None => None,
            };
            let peak = step.pids.iter().filter_map(|&pid| peak_rss_kib(pid)).max();
            let mut result = summarize(step.scenario.name(), tally, duration, peak);
            result.behind = behind;
            eprintln!(
                "round {round} {:<18} {:>9.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}",
                result.name,
                result.rps,
                result.p50.as_secs_f64() * 1e3,
                result.p99.as_secs_f64() * 1e3,
                result.errors
            );
            let slot = &mut best[index];
            // Errors, operations and counters of every round count: a clean best round must
            // not hide a bad one.
            let wal = pg.map(|c| {
                let n = operations.max(1) as f64;
                [
                    c.wal_bytes as f64 / n,
                    c.wal_syncs as f64 / n,
                    c.wal_sync_ms / n,
                ]
            });
            let wal = match (slot.as_ref().and_then(|p| p.wal_per_op), wal) {
                (Some(a), Some(b)) => Some(if b[0] < a[0] { b } else { a }),
                (a, b) => a.or(b),
            };
            let (errors, operations, pg, cpu, peak) = match slot.as_ref() {
                Some(previous) => (
                    previous.errors + result.errors,
                    previous.operations_all + operations,
                    match (previous.pg, pg) {
                        (Some(a), Some(b)) => Some(a.plus(b)),
                        (a, b) => a.or(b),
                    },
                    previous.cpu.map_or(cpu, |c| c.plus(cpu)),
                    previous.peak_rss_kib.max(result.peak_rss_kib),
                ),
                None => (result.errors, operations, pg, cpu, result.peak_rss_kib),
            };
            let keep = slot
                .as_ref()
                .is_none_or(|previous| result.rps > previous.rps);
            if keep {
                *slot = Some(result);
            }
            let kept = slot.as_mut().expect("set above");
            kept.errors = errors;
            kept.operations_all = operations;
            kept.pg = pg;
            kept.wal_per_op = wal;
            kept.cpu = Some(cpu);
            kept.peak_rss_kib = peak;
        }
    }
    Ok(best.into_iter().flatten().collect())
}

fn summarize(name: &str, tally: Tally, duration: Duration, peak: Option<u64>) -> ScenarioResult {
    let mut result = ScenarioResult::from_latencies(name, tally.latencies_us, duration, peak);
    result.errors = tally.errors;
    result
}

impl ScenarioResult {
    /// A result of `latencies_us` (one per operation answered as expected, in µs) over
    /// `duration`, without errors or counters yet.
    pub(crate) fn from_latencies(
        name: &str,
        mut latencies_us: Vec<u32>,
        duration: Duration,
        peak: Option<u64>,
    ) -> ScenarioResult {
        latencies_us.sort_unstable();
        let at = |q: f64| {
            let n = latencies_us.len();
            if n == 0 {
                return Duration::ZERO;
            }
            let index = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
            Duration::from_micros(u64::from(latencies_us[index]))
        };
        ScenarioResult {
            name: name.to_owned(),
            requests: latencies_us.len() as u64,
            errors: 0,
            rps: latencies_us.len() as f64 / duration.as_secs_f64().max(1e-9),
            p50: at(0.50),
            p99: at(0.99),
            peak_rss_kib: peak,
            operations_all: 0,
            pg: None,
            wal_per_op: None,
            cpu: None,
            behind: None,
        }
    }
}

/// Waits until the counters of what `step` just did are all flushed to the statistics:
/// `settle`, then a `/readyz` to each server (a write and a read on its connections, whose
/// backends flush what they kept pending when they finish a transaction more than a second
/// after their last flush), or, for the commits baseline, until its backends have exited
/// (they flush when they exit).
async fn settle_statistics(admin: &Admin, step: &Step, settle: Duration) -> Result<(), String> {
    tokio::time::sleep(settle).await;
    match &step.target {
        Target::Http(addrs) => {
            for addr in addrs {
                fetch(*addr, "/readyz").await?;
            }
        }
        Target::Postgres(_) | Target::Durable(_) => {
            if let Some(db) = &step.database {
                admin.wait_for_no_backends(db).await;
            }
        }
    }
    Ok(())
}
