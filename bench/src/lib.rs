//! The toolgate load harness.
//!
//! It starts every server itself, each in its own process so its memory is its own: toolgate
//! (the release binary), a bare axum server serving the same `/tools` bytes and an equivalent
//! echo route (the ceiling: what the framework costs with nothing of toolgate's), and, when it
//! can be installed from PyPI, the peer: the same echo tool in FastMCP behind mcpo. It measures
//! the disk's own fsyncs per second on the data directory's file system (the bound of any
//! durable write), then runs every scenario for a fixed time on N keep-alive connections,
//! several rounds interleaved, and reports requests/s, p50 and p99 latency, errors, peak RSS
//! and the ratio to each scenario's baseline from the same run.
//!
//! The load generator is a closed loop on hyper's HTTP/1 client: each connection sends its next
//! request when the previous answer is read, so latency includes the server's whole turn.
//!
//! When PostgreSQL answers, toolgate also runs on it (see [`postgres`]): echo and the durable
//! write on 1, 2 and 3 replicas of one database each, beside PostgreSQL's own rate of single-row
//! commits and SQLite's echo, in the same rounds; then a replica is killed in the middle of a
//! call.
//!
//! Then waiting without polling (see [`waiting`] and [`webhooks`]): how soon a request held by
//! `?wait=` hears of a decision, on SQLite and across PostgreSQL replicas, beside a plain poll;
//! what 10,000 held requests cost in memory; and webhook deliveries per second to a receiver in
//! the harness, beside the receiver's own rate.

pub mod cpu;
mod load;
mod peer;
pub mod postgres;
mod servers;
pub mod waiting;
pub mod webhooks;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use load::{Scenario, ScenarioResult, Step, Target};
pub use postgres::PgOptions;
pub use servers::{BareServer, ServerProcess, run_bare as servers_run_bare};
pub use waiting::WaitOptions;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `toolgate` binary to measure.
    pub toolgate: PathBuf,
    /// How the bare axum ceiling runs.
    pub bare: BareMode,
    /// Where data directories go (the disk measured is this one's).
    pub data_root: PathBuf,
    /// Measuring time per scenario per round.
    pub duration: Duration,
    /// Unmeasured load before each measurement.
    pub warmup: Duration,
    /// Rounds; scenarios are interleaved within each.
    pub rounds: usize,
    /// Concurrent keep-alive connections.
    pub connections: usize,
    /// Whether to try the Python peer.
    pub peer: bool,
    /// Calls and pending approvals to seed for the scale scenarios; `None` skips them.
    pub scale: Option<(u64, u64)>,
    /// Start-ups to time.
    pub startups: usize,
    /// The PostgreSQL scenarios' settings; `None` skips them.
    pub postgres: Option<PgOptions>,
    /// The sizes of the waiting scenarios (wake-ups, held requests, webhook deliveries).
    pub waiting: WaitOptions,
}

/// How the bare ceiling server runs.
#[derive(Debug, Clone)]
pub enum BareMode {
    /// As a child process running this executable with `bare-server` (its RSS is its own).
    Process(PathBuf),
    /// On a task of the harness (for smoke runs, where there is no harness binary).
    InProcess,
}

/// The configuration of the toolgate that serves the FastMCP echo at `peer` as an upstream: no
/// example tools, and echo declared a read (FastMCP does not annotate it, which would make it a
/// write: a durable intent per call, not what an echo is measured by).
fn gate_config(peer: std::net::SocketAddr) -> String {
    format!(
        "[examples]\nenabled = false\n\n[[upstreams]]\nname = \"peer\"\nurl = \"http://{peer}/mcp\"\n\n\
         [upstreams.policies.echo]\neffect = \"read\"\n"
    )
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Each scenario's best round, in the order run.
    pub scenarios: Vec<ScenarioResult>,
    /// fsync()s per second on the data directory's file system.
    pub disk_fsyncs_per_s: f64,
    /// toolgate's resident memory once started, before any load, in KiB.
    pub toolgate_idle_rss_kib: Option<u64>,
    /// toolgate's peak resident memory over the whole run, in KiB.
    pub toolgate_peak_rss_kib: Option<u64>,
    /// The bare server's peak resident memory, in KiB.
    pub bare_peak_rss_kib: Option<u64>,
    /// The peer's peak resident memory (mcpo and its FastMCP child), in KiB.
    pub peer_peak_rss_kib: Option<u64>,
    /// Median time from spawn to a ready `/readyz` on an existing database.
    pub startup: Option<Duration>,
    /// Why the peer did not run, if it did not.
    pub peer_skipped: Option<String>,
    /// What the PostgreSQL scenarios found besides their rates, when they ran.
    pub postgres: Option<postgres::PgReport>,
    /// Why the PostgreSQL scenarios did not run, if they did not.
    pub postgres_skipped: Option<String>,
    /// The wake-up latencies of held requests, by variant.
    pub wake: Vec<waiting::Wake>,
    /// The memory of held requests, by backend.
    pub held: Vec<waiting::Held>,
    /// The details of the webhook delivery scenarios (their rates are in `scenarios`).
    pub deliveries: Vec<webhooks::DeliveryRun>,
}

impl Report {
    /// The best round of scenario `name`.
    pub fn get(&self, name: &str) -> Option<&ScenarioResult> {
        self.scenarios.iter().find(|s| s.name == name)
    }

    /// The failed operations of every scenario and round, the waiting scenarios' included.
    pub fn errors(&self) -> u64 {
        self.scenarios.iter().map(|s| s.errors).sum::<u64>()
            + self.wake.iter().map(|w| w.errors).sum::<u64>()
            + self.held.iter().map(|h| h.errors).sum::<u64>()
    }

    /// The report as a Markdown table with the ratio of each scenario to its baseline.
    pub fn to_markdown(&self) -> String {
        let ratio = |name: &str, base: &str| match (self.get(name), self.get(base)) {
            (Some(a), Some(b)) if b.rps > 0.0 => format!("{:.2}x {base}", a.rps / b.rps),
            _ => String::new(),
        };
        let fsync_ratio = |name: &str| match self.get(name) {
            Some(a) if self.disk_fsyncs_per_s > 0.0 => {
                format!("{:.2}x disk fsyncs/s", a.rps / self.disk_fsyncs_per_s)
            }
            _ => String::new(),
        };
        let mut out = String::from(
            "| scenario | req/s | p50 | p99 | errors | server peak RSS | vs baseline |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
        );
        for s in &self.scenarios {
            let versus = match s.name.as_str() {
                "tools" => ratio("tools", "bare_tools"),
                "echo" => ratio("echo", "bare_echo"),
                "bare_echo_recorded" => ratio("bare_echo_recorded", "bare_echo"),
                "write" => fsync_ratio("write"),
                "peer_echo" => match (self.get("echo"), self.get("peer_echo")) {
                    (Some(t), Some(p)) if p.rps > 0.0 => {
                        format!("toolgate echo is {:.1}x this", t.rps / p.rps)
                    }
                    _ => String::new(),
                },
                "pg_echo" => ratio("pg_echo", "echo"),
                "mcp_echo" => ratio("mcp_echo", "echo"),
                "peer_mcp_echo" => match (self.get("mcp_echo"), self.get("peer_mcp_echo")) {
                    (Some(t), Some(p)) if p.rps > 0.0 => {
                        format!("toolgate mcp_echo is {:.1}x this", t.rps / p.rps)
                    }
                    _ => String::new(),
                },
                "gate_mcp_echo" | "gate_echo" => ratio(&s.name, "peer_mcp_echo"),
                "pg_echo_r2" | "pg_echo_r3" => ratio(&s.name, "pg_echo"),
                "pg_write" => ratio("pg_write", "pg_commits"),
                "pg_write_r2" | "pg_write_r3" => ratio(&s.name, "pg_write"),
                "echo_seeded" => ratio("echo_seeded", "echo_empty"),
                "write_seeded" => ratio("write_seeded", "write_empty"),
                "approvals_seeded" => ratio("approvals_seeded", "approvals_empty"),
                "webhooks" | "webhooks_backlog" | "pg_webhooks" | "pg_webhooks_backlog" => {
                    ratio(&s.name, "webhook_receiver")
                }
                _ => String::new(),
            };
            out.push_str(&format!(
                "| {} | {:.0} | {:.2} ms | {:.2} ms | {} | {} | {} |\n",
                s.name,
                s.rps,
                s.p50.as_secs_f64() * 1e3,
                s.p99.as_secs_f64() * 1e3,
                s.errors,
                s.peak_rss_kib
                    .map_or_else(String::new, |k| format!("{:.1} MiB", k as f64 / 1024.0)),
                versus
            ));
        }
        out.push_str(&format!(
            "\ndisk: {:.0} fsyncs/s on the data directory's file system\n",
            self.disk_fsyncs_per_s
        ));
        let mib =
            |k: Option<u64>| k.map_or("n/a".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
        out.push_str(&format!(
            "toolgate RSS: idle {}, peak {}; bare axum peak {}; peer peak {}\n",
            mib(self.toolgate_idle_rss_kib),
            mib(self.toolgate_peak_rss_kib),
            mib(self.bare_peak_rss_kib),
            mib(self.peer_peak_rss_kib)
        ));
        if let Some(startup) = self.startup {
            out.push_str(&format!(
                "toolgate start-up on an existing database: {:.1} ms (median)\n",
                startup.as_secs_f64() * 1e3
            ));
        }
        if let Some(why) = &self.peer_skipped {
            out.push_str(&format!("peer skipped: {why}\n"));
        }
        if let Some(why) = &self.postgres_skipped {
            out.push_str(&format!("PostgreSQL scenarios skipped: {why}\n"));
        }
        out.push_str(&self.cpu_markdown());
        if let Some(pg) = &self.postgres {
            out.push_str(&self.postgres_markdown(pg));
        }
        out.push_str(&waiting::markdown(self));
        out
    }

    /// CPU time per operation, by process, for the scenarios on toolgate and PostgreSQL.
    fn cpu_markdown(&self) -> String {
        let mut out = String::from(
            "\nCPU per operation, over every round (warm-ups included), from /proc: the \
             server (every replica); the PostgreSQL backends of the scenario's database, and all \
             of PostgreSQL (with its WAL writer, checkpointer, autovacuum, and whatever other \
             databases made it do meanwhile); the load generator (the harness); how busy the \
             machine's cores were, and how much of that was the server, those backends and the \
             load generator (the rest: anything else running meanwhile):\n\n\
             | scenario | server | its database's backends | all of PostgreSQL | load generator \
             | sum | machine busy | of which these |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        let us = |s: f64, n: f64| format!("{:.1} µs", s * 1e6 / n);
        for s in &self.scenarios {
            let Some(c) = s.cpu else { continue };
            let measured = matches!(
                s.name.as_str(),
                "echo" | "write" | "mcp_echo" | "peer_mcp_echo" | "gate_mcp_echo" | "gate_echo"
            );
            if !(measured || s.name.starts_with("pg_")) {
                continue;
            }
            let n = s.operations_all.max(1) as f64;
            let sum = c.servers_s + c.backends_s.unwrap_or(0.0) + c.harness_s;
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {:.0} % | {:.0} % |\n",
                s.name,
                if s.name == "pg_commits" {
                    "n/a".to_owned()
                } else {
                    us(c.servers_s, n)
                },
                c.backends_s.map_or("n/a".to_owned(), |p| us(p, n)),
                c.postgres_s.map_or("n/a".to_owned(), |p| us(p, n)),
                us(c.harness_s, n),
                us(sum, n),
                100.0 * c.machine_busy_s / c.machine_total_s.max(1e-9),
                100.0 * sum / c.machine_busy_s.max(1e-9),
            ));
        }
        out
    }

    /// What the PostgreSQL scenarios cost the database per operation, and the failover.
    fn postgres_markdown(&self, pg: &postgres::PgReport) -> String {
        let mut out = format!(
            "\nPostgreSQL: {} at {}, synchronous_commit {}. Over every round of each scenario \
             (warm-ups included), from the counters of its own database (pg_stat_database) and \
             the cluster's WAL (pg_current_wal_lsn(), pg_stat_wal): the operations, how many \
             shared a transaction, and per operation the rows, WAL bytes and WAL fsyncs (and \
             the time the scenario's sessions spent in fsyncs, track_wal_io_timing; the WAL \
             writer's are not timed; these three are the whole cluster's, so they are taken from \
             the round with the least WAL per operation), and the time its backends spent running statements (busy: \
             CPU, waiting for a core, a lock or I/O, commits waiting for their fsync) and \
             waiting inside a transaction for the client's next statement:\n\n\
             | scenario | operations | operations per transaction | rows inserted | rows updated \
             | WAL bytes | WAL fsyncs | in fsyncs | backend busy | backend idle in transaction |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            pg.version.split(" on ").next().unwrap_or(&pg.version),
            pg.target,
            pg.synchronous_commit
        );
        for s in &self.scenarios {
            let Some(c) = s.pg else { continue };
            let n = s.operations_all.max(1) as f64;
            out.push_str(&format!(
                "| {} | {} | {:.1} | {:.2} | {:.2} | {:.0} | {:.3} | {:.1} µs | {:.1} µs | {:.1} µs |\n",
                s.name,
                s.operations_all,
                n / c.transactions.max(1) as f64,
                c.inserted as f64 / n,
                c.updated as f64 / n,
                s.wal_per_op.map_or(0.0, |w| w[0]),
                s.wal_per_op.map_or(0.0, |w| w[1]),
                s.wal_per_op.map_or(0.0, |w| w[2] * 1e3),
                c.active_ms * 1e3 / n,
                c.idle_in_transaction_ms * 1e3 / n,
            ));
        }
        let echoes: Vec<_> = self
            .scenarios
            .iter()
            .filter_map(|s| Some((s, s.behind?)))
            .collect();
        if !echoes.is_empty() {
            out.push_str(
                "\nRecords of echo calls, written behind their answers (the round kept; \
                 committed records counted by max(seq) of calls):\n\n\
                 | scenario | answered/s | records committed/s | not committed when the load \
                 stopped | all committed after |\n\
                 | --- | ---: | ---: | ---: | ---: |\n",
            );
            for (s, b) in echoes {
                out.push_str(&format!(
                    "| {} | {:.0} | {:.0} | {} | {} |\n",
                    s.name,
                    s.rps,
                    b.committed_per_s,
                    b.backlog,
                    b.drained_after
                        .map_or("not within 60 s".to_owned(), |d| format!(
                            "{:.0} ms",
                            d.as_secs_f64() * 1e3
                        )),
                ));
            }
        }
        if !pg.tables.is_empty() {
            out.push_str(
                "\nTables at the end of the run (pg_stat_user_tables):\n\n\
                 | scenario | table | rows | inserted | updated | of which HOT | indexes | \
                 bytes per row (heap) | bytes per row (with indexes) | index scans | whole-table \
                 scans | rows they read |\n\
                 | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            );
            for t in &pg.tables {
                let rows = t.rows.max(1) as f64;
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} |\n",
                    t.scenario,
                    t.table,
                    t.rows,
                    t.inserted,
                    t.updated,
                    t.hot_updated,
                    t.indexes,
                    t.heap_bytes as f64 / rows,
                    t.total_bytes as f64 / rows,
                    t.index_scans,
                    t.seq_scans,
                    t.seq_rows_read,
                ));
            }
        }
        if let Some(f) = &pg.failover {
            let mut times = f.settled_after.clone();
            times.sort();
            let ms = |d: &Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
            out.push_str(&format!(
                "\nfailover: a replica killed (SIGKILL) in the middle of a send_email, {} times: \
                 the call needs_reconciliation, as another replica reads it, after {} \
                 (min {}, median {}, max {}); bound lease_ttl_ms + heartbeat_ms = {} ms \
                 (lease {} ms, heartbeat {} ms)\n",
                times.len(),
                f.settled_after
                    .iter()
                    .map(ms)
                    .collect::<Vec<_>>()
                    .join(", "),
                times.first().map_or("n/a".into(), ms),
                times.get(times.len() / 2).map_or("n/a".into(), ms),
                times.last().map_or("n/a".into(), ms),
                (f.lease_ttl + f.heartbeat).as_millis(),
                f.lease_ttl.as_millis(),
                f.heartbeat.as_millis(),
            ));
        }
        out
    }
}

/// fsync()s per second: appends of 512 bytes, each followed by `fdatasync`, for `duration`, on
/// a file in `dir`. SQLite in WAL mode with `synchronous=FULL` pays one such sync per commit.
pub fn disk_fsyncs_per_s(dir: &Path, duration: Duration) -> std::io::Result<f64> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = [7u8; 512];
    let start = Instant::now();
    let mut syncs = 0u64;
    while start.elapsed() < duration {
        file.write_all(&block)?;
        file.sync_data()?;
        syncs += 1;
    }
    let rate = syncs as f64 / start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(rate)
}

/// Drives one scenario (`tools`, `echo`, `write`, `suspend_approve`, `approvals`) at `addrs`,
/// the connections spread over them round robin (replicas of one database).
pub async fn load_once(
    addrs: Vec<std::net::SocketAddr>,
    scenario: &str,
    duration: Duration,
    connections: usize,
) -> Result<ScenarioResult, String> {
    let scenario = match scenario {
        "tools" => Scenario::Tools("tools"),
        "echo" => Scenario::Echo("echo"),
        "mcp_echo" => Scenario::McpEcho("mcp_echo"),
        "gate_echo" => Scenario::GatedEcho("gate_echo"),
        "gate_mcp_echo" => Scenario::GatedMcpEcho("gate_mcp_echo"),
        "echo_recorded" => Scenario::RecordedEcho("echo_recorded"),
        "write" => Scenario::Write("write"),
        "suspend_approve" => Scenario::SuspendApprove("suspend_approve"),
        "approvals" => Scenario::Approvals("approvals"),
        other => return Err(format!("unknown scenario {other}")),
    };
    if addrs.is_empty() {
        return Err("no address".into());
    }
    let options = Options {
        toolgate: PathBuf::new(),
        bare: BareMode::InProcess,
        data_root: PathBuf::new(),
        duration,
        warmup: Duration::ZERO,
        rounds: 1,
        connections,
        peer: false,
        scale: None,
        startups: 0,
        postgres: None,
        waiting: WaitOptions::smoke(),
    };
    let step = Step {
        scenario,
        target: Target::Http(addrs),
        pids: Vec::new(),
        database: None,
    };
    let mut results = load::run_rounds(&[step], &options, None).await?;
    results.pop().ok_or_else(|| "no result".to_owned())
}

/// PostgreSQL's own single-row commits (the `pg_commits` scenario) on `connections` clients of
/// the database at `url`, into a table `bench_commits` created there if missing.
pub async fn commits_once(
    url: &str,
    duration: Duration,
    connections: usize,
) -> Result<ScenarioResult, String> {
    let client = postgres::connect(url).await?;
    client
        .batch_execute(postgres::CREATE_COMMITS_TABLE)
        .await
        .map_err(|e| postgres::pg_error(&e))?;
    drop(client);
    let options = Options {
        toolgate: PathBuf::new(),
        bare: BareMode::InProcess,
        data_root: PathBuf::new(),
        duration,
        warmup: Duration::ZERO,
        rounds: 1,
        connections,
        peer: false,
        scale: None,
        startups: 0,
        postgres: None,
        waiting: WaitOptions::smoke(),
    };
    let step = Step {
        scenario: Scenario::Commits("commits"),
        target: Target::Postgres(url.to_owned()),
        pids: Vec::new(),
        database: None,
    };
    let mut results = load::run_rounds(&[step], &options, None).await?;
    results.pop().ok_or_else(|| "no result".to_owned())
}

/// Runs everything `options` asks for.
pub async fn run(options: &Options) -> Result<Report, String> {
    std::fs::create_dir_all(&options.data_root).map_err(|e| format!("data root: {e}"))?;
    let fresh_dir = |name: &str| -> Result<PathBuf, String> {
        let dir = options.data_root.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(dir)
    };

    let main_dir = fresh_dir("toolgate")?;
    let fsyncs = disk_fsyncs_per_s(&main_dir, Duration::from_secs(2).min(options.duration * 2))
        .map_err(|e| format!("fsync probe: {e}"))?;
    eprintln!("disk: {fsyncs:.0} fsyncs/s");

    let toolgate = ServerProcess::toolgate(&options.toolgate, &main_dir).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle_rss = toolgate.rss_kib();
    let tools_json = load::fetch(toolgate.addr, "/tools").await?;
    let bare_dir = fresh_dir("bare")?;
    let bare = BareServer::start(&options.bare, tools_json, &bare_dir.join("bare.db")).await?;

    let mut peer_skipped = None;
    let peer = if options.peer {
        match peer::Peer::start(&options.data_root).await {
            Ok(peer) => Some(peer),
            Err(why) => {
                eprintln!("peer skipped: {why}");
                peer_skipped = Some(why);
                None
            }
        }
    } else {
        peer_skipped = Some("not requested".into());
        None
    };

    // FastMCP's own Streamable HTTP server: the same echo over MCP, what `/mcp` is measured by.
    let mcp_peer = if peer.is_some() {
        match peer::Peer::start_mcp(&options.data_root).await {
            Ok(peer) => Some(peer),
            Err(why) => {
                eprintln!("FastMCP over HTTP skipped: {why}");
                None
            }
        }
    } else {
        None
    };

    // toolgate in front of that FastMCP server, as an upstream: what the gate costs.
    let gate = match &mcp_peer {
        Some(peer) => {
            let dir = fresh_dir("gate")?;
            let config = dir.join("toolgate.toml");
            std::fs::write(&config, gate_config(peer.addr)).map_err(|e| e.to_string())?;
            Some(ServerProcess::toolgate_with(&options.toolgate, &dir, Some(&config), &[]).await?)
        }
        None => None,
    };

    let mut postgres_skipped = None;
    let pg = match &options.postgres {
        None => {
            postgres_skipped = Some("not requested (--no-postgres)".to_owned());
            None
        }
        Some(pg) => match postgres::Admin::connect(&pg.admin_url).await {
            Ok(admin) => Some(PgRun::start(options, admin).await?),
            Err(why) if pg.required => {
                return Err(format!(
                    "PostgreSQL does not answer and must under CI=true (bash .ci/postgres \
                     starts the local cluster): {why}"
                ));
            }
            Err(why) => {
                eprintln!("PostgreSQL scenarios skipped: {why}");
                postgres_skipped = Some(format!("PostgreSQL does not answer: {why}"));
                None
            }
        },
    };

    let toolgate_step = |scenario| Step::http(scenario, toolgate.addr, Some(toolgate.pid()));
    let mut plan = vec![
        Step::http(Scenario::Tools("bare_tools"), bare.addr(), bare.pid()),
        toolgate_step(Scenario::Tools("tools")),
        Step::http(Scenario::Echo("bare_echo"), bare.addr(), bare.pid()),
        Step::http(
            Scenario::RecordedEcho("bare_echo_recorded"),
            bare.addr(),
            bare.pid(),
        ),
        toolgate_step(Scenario::Echo("echo")),
        toolgate_step(Scenario::McpEcho("mcp_echo")),
    ];
    if let Some(pg) = &pg {
        plan.extend(pg.echo_steps());
    }
    plan.push(toolgate_step(Scenario::Write("write")));
    if let Some(pg) = &pg {
        plan.extend(pg.write_steps());
    }
    plan.push(toolgate_step(Scenario::SuspendApprove("suspend_approve")));
    if let Some(peer) = &peer {
        plan.push(Step::http(
            Scenario::PeerEcho("peer_echo"),
            peer.addr,
            Some(peer.pid()),
        ));
    }
    if let Some(peer) = &mcp_peer {
        plan.push(Step::http(
            Scenario::McpEcho("peer_mcp_echo"),
            peer.addr,
            Some(peer.pid()),
        ));
    }
    if let Some(gate) = &gate {
        plan.push(Step::http(
            Scenario::GatedMcpEcho("gate_mcp_echo"),
            gate.addr,
            Some(gate.pid()),
        ));
        plan.push(Step::http(
            Scenario::GatedEcho("gate_echo"),
            gate.addr,
            Some(gate.pid()),
        ));
    }
    let rounds = load::run_rounds(&plan, options, pg.as_ref().map(|pg| &pg.admin)).await;
    // The scratch databases go whatever happened.
    let pg_report = match pg {
        Some(pg) => Some(pg.finish().await),
        None => None,
    };
    let mut best = rounds?;
    let mut pg_report = pg_report.transpose()?;
    if let Some(peer) = &peer
        && let Some(result) = best.iter_mut().find(|r| r.name == "peer_echo")
    {
        result.peak_rss_kib = peer.peak_rss_kib();
    }
    if let Some(gate) = gate {
        gate.stop().await;
    }
    drop(mcp_peer);
    let toolgate_peak = toolgate.peak_rss_kib();
    let bare_peak = bare.peak_rss_kib();
    let peer_peak = peer.as_ref().and_then(|p| p.peak_rss_kib());
    drop(peer);
    drop(bare);
    toolgate.stop().await;

    // A replica's death, on a database of its own.
    if let (Some(report), Some(pg)) = (&mut pg_report, &options.postgres)
        && pg.kills > 0
    {
        let admin = postgres::Admin::connect(&pg.admin_url).await?;
        report.failover =
            Some(postgres::failover(&options.toolgate, &options.data_root, &admin, pg).await?);
    }

    // Waiting without polling, on servers and databases of their own; on PostgreSQL only when
    // its scenarios ran.
    let admin = match (&pg_report, &options.postgres) {
        (Some(_), Some(pg)) => Some(postgres::Admin::connect(&pg.admin_url).await?),
        _ => None,
    };
    let wait = options.waiting;
    let wake = match wait.wake_samples {
        0 => Vec::new(),
        _ => waiting::wake(options, admin.as_ref()).await?,
    };
    let held = match wait.held {
        0 => Vec::new(),
        _ => waiting::held(options, admin.as_ref()).await?,
    };
    let deliveries = match wait.deliveries {
        0 => Vec::new(),
        _ => {
            let (results, runs) = webhooks::run(options, admin.as_ref()).await?;
            best.extend(results);
            runs
        }
    };
    drop(admin);

    // Start-up on the database the run just filled.
    let mut startups = Vec::new();
    for _ in 0..options.startups {
        let started = Instant::now();
        let server = ServerProcess::toolgate(&options.toolgate, &main_dir).await?;
        startups.push(started.elapsed());
        server.stop().await;
    }
    startups.sort();
    let startup = startups.get(startups.len() / 2).copied();

    if let Some((calls, pending)) = options.scale {
        let empty_dir = fresh_dir("scale-empty")?;
        let seeded_dir = fresh_dir("scale-seeded")?;
        eprintln!("seeding {calls} finished calls and {pending} pending approvals");
        let seeding = Instant::now();
        // The "empty" store holds just one full page of approvals, so both list 50.
        servers::seed(&empty_dir, 0, 50)?;
        servers::seed(&seeded_dir, calls, pending)?;
        eprintln!("seeded in {:.1} s", seeding.elapsed().as_secs_f64());
        let empty = ServerProcess::toolgate(&options.toolgate, &empty_dir).await?;
        let seeded = ServerProcess::toolgate(&options.toolgate, &seeded_dir).await?;
        let on = |server: &ServerProcess, scenario| {
            Step::http(scenario, server.addr, Some(server.pid()))
        };
        let plan = vec![
            on(&empty, Scenario::Echo("echo_empty")),
            on(&seeded, Scenario::Echo("echo_seeded")),
            on(&empty, Scenario::Write("write_empty")),
            on(&seeded, Scenario::Write("write_seeded")),
            on(&empty, Scenario::Approvals("approvals_empty")),
            on(&seeded, Scenario::Approvals("approvals_seeded")),
        ];
        best.extend(load::run_rounds(&plan, options, None).await?);
        empty.stop().await;
        seeded.stop().await;
    }

    Ok(Report {
        scenarios: best,
        disk_fsyncs_per_s: fsyncs,
        toolgate_idle_rss_kib: idle_rss,
        toolgate_peak_rss_kib: toolgate_peak,
        bare_peak_rss_kib: bare_peak,
        peer_peak_rss_kib: peer_peak,
        startup,
        peer_skipped,
        postgres: pg_report,
        postgres_skipped,
        wake,
        held,
        deliveries,
    })
}

/// The PostgreSQL scenarios of one run: a database for each, and the toolgate replicas on it.
struct PgRun {
    admin: postgres::Admin,
    /// The commits baseline's database.
    commits: postgres::ScratchDb,
    /// Each toolgate scenario: its name, what it runs, its database and its replicas.
    sets: Vec<PgSet>,
}

struct PgSet {
    scenario: Scenario,
    db: postgres::ScratchDb,
    replicas: Vec<ServerProcess>,
}

impl PgRun {
    /// Creates the databases and starts the replicas: echo and the durable write, each on 1, 2
    /// and 3 replicas (the store's default lease and heartbeat).
    async fn start(options: &Options, admin: postgres::Admin) -> Result<PgRun, String> {
        eprintln!(
            "PostgreSQL: {} (synchronous_commit {})",
            admin.version.split(" on ").next().unwrap_or(&admin.version),
            admin.synchronous_commit
        );
        let wanted = [
            (Scenario::Echo("pg_echo"), 1),
            (Scenario::Echo("pg_echo_r2"), 2),
            (Scenario::Echo("pg_echo_r3"), 3),
            (Scenario::Write("pg_write"), 1),
            (Scenario::Write("pg_write_r2"), 2),
            (Scenario::Write("pg_write_r3"), 3),
        ];
        let mut labels = vec!["commits"];
        labels.extend(wanted.iter().map(|(scenario, _)| scenario.name()));
        let mut dbs = admin.scratch_many(&labels).await?.into_iter();
        let commits = dbs.next().expect("the commits database");
        postgres::create_commits_table(&commits).await?;
        let mut starting = Vec::new();
        for ((scenario, replicas), db) in wanted.into_iter().zip(dbs) {
            let env = postgres::replica_env(&db.url, &[]);
            let (binary, root) = (options.toolgate.clone(), options.data_root.clone());
            let started = tokio::spawn(async move {
                postgres::start_replicas(&binary, &root, scenario.name(), replicas, None, &env)
                    .await
            });
            starting.push((scenario, db, started));
        }
        let mut sets = Vec::new();
        let mut failed = None;
        for (scenario, db, started) in starting {
            match started.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(replicas) => sets.push(PgSet {
                    scenario,
                    db,
                    replicas,
                }),
                Err(e) => {
                    failed.get_or_insert(format!("{}: {e}", scenario.name()));
                    db.remove(&admin).await;
                }
            }
        }
        let run = PgRun {
            admin,
            commits,
            sets,
        };
        if let Some(e) = failed {
            let _ = run.finish().await;
            return Err(e);
        }
        // What starting did is flushed to the statistics before the first round is sampled.
        tokio::time::sleep(
            options
                .postgres
                .as_ref()
                .map_or(Duration::ZERO, |pg| pg.settle),
        )
        .await;
        for set in &run.sets {
            for replica in &set.replicas {
                load::fetch(replica.addr, "/readyz").await?;
            }
        }
        Ok(run)
    }

    fn step(set: &PgSet) -> Step {
        Step {
            scenario: set.scenario,
            target: Target::Http(set.replicas.iter().map(|r| r.addr).collect()),
            pids: set.replicas.iter().map(|r| r.pid()).collect(),
            database: Some(set.db.name.clone()),
        }
    }

    /// Echo on 1, 2 and 3 replicas.
    fn echo_steps(&self) -> Vec<Step> {
        self.sets
            .iter()
            .filter(|set| matches!(set.scenario, Scenario::Echo(_)))
            .map(PgRun::step)
            .collect()
    }

    /// The commits baseline, then the durable write on 1, 2 and 3 replicas.
    fn write_steps(&self) -> Vec<Step> {
        let commits = Step {
            scenario: Scenario::Commits("pg_commits"),
            target: Target::Postgres(self.commits.url.clone()),
            pids: Vec::new(),
            database: Some(self.commits.name.clone()),
        };
        std::iter::once(commits)
            .chain(
                self.sets
                    .iter()
                    .filter(|set| matches!(set.scenario, Scenario::Write(_)))
                    .map(PgRun::step),
            )
            .collect()
    }

    /// Stops the replicas, reads each database's table statistics, and drops the databases.
    async fn finish(self) -> Result<postgres::PgReport, String> {
        let PgRun {
            admin,
            commits,
            sets,
        } = self;
        admin.close_probes().await;
        let mut tables = Vec::new();
        let mut failed = None;
        let mut dbs = Vec::new();
        let mut stopping = Vec::new();
        for set in sets {
            stopping.extend(set.replicas.into_iter().map(|r| tokio::spawn(r.stop())));
            dbs.push((set.scenario.name(), "calls", set.db));
        }
        dbs.push(("pg_commits", "bench_commits", commits));
        for stopped in stopping {
            let _ = stopped.await;
        }
        let closing: Vec<_> = dbs
            .into_iter()
            .map(|(scenario, table, db)| tokio::spawn(db.close(scenario, table)))
            .collect();
        for closed in closing {
            match closed.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(stats) => tables.push(stats),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(postgres::PgReport {
                target: postgres::shown(admin.url()),
                version: admin.version.clone(),
                synchronous_commit: admin.synchronous_commit.clone(),
                tables,
                failover: None,
            }),
        }
    }
}
