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

mod load;
mod peer;
mod servers;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use load::{Scenario, ScenarioResult};
pub use servers::{BareServer, ServerProcess, run_bare as servers_run_bare};

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
}

/// How the bare ceiling server runs.
#[derive(Debug, Clone)]
pub enum BareMode {
    /// As a child process running this executable with `bare-server` (its RSS is its own).
    Process(PathBuf),
    /// On a task of the harness (for smoke runs, where there is no harness binary).
    InProcess,
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
}

impl Report {
    /// The best round of scenario `name`.
    pub fn get(&self, name: &str) -> Option<&ScenarioResult> {
        self.scenarios.iter().find(|s| s.name == name)
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
                "echo_seeded" => ratio("echo_seeded", "echo_empty"),
                "write_seeded" => ratio("write_seeded", "write_empty"),
                "approvals_seeded" => ratio("approvals_seeded", "approvals_empty"),
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

/// Drives one scenario (`tools`, `echo`, `write`, `suspend_approve`, `approvals`) at `addr`.
pub async fn load_once(
    addr: std::net::SocketAddr,
    scenario: &str,
    duration: Duration,
    connections: usize,
) -> Result<ScenarioResult, String> {
    let scenario = match scenario {
        "tools" => Scenario::Tools("tools"),
        "echo" => Scenario::Echo("echo"),
        "echo_recorded" => Scenario::RecordedEcho("echo_recorded"),
        "write" => Scenario::Write("write"),
        "suspend_approve" => Scenario::SuspendApprove("suspend_approve"),
        "approvals" => Scenario::Approvals("approvals"),
        other => return Err(format!("unknown scenario {other}")),
    };
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
    };
    let mut results = load::run_rounds(&[(scenario, addr, None)], &options).await?;
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

    let mut plan: Vec<(Scenario, std::net::SocketAddr, Option<u32>)> = vec![
        (Scenario::Tools("bare_tools"), bare.addr(), bare.pid()),
        (
            Scenario::Tools("tools"),
            toolgate.addr,
            Some(toolgate.pid()),
        ),
        (Scenario::Echo("bare_echo"), bare.addr(), bare.pid()),
        (
            Scenario::RecordedEcho("bare_echo_recorded"),
            bare.addr(),
            bare.pid(),
        ),
        (Scenario::Echo("echo"), toolgate.addr, Some(toolgate.pid())),
        (
            Scenario::Write("write"),
            toolgate.addr,
            Some(toolgate.pid()),
        ),
        (
            Scenario::SuspendApprove("suspend_approve"),
            toolgate.addr,
            Some(toolgate.pid()),
        ),
    ];
    if let Some(peer) = &peer {
        plan.push((Scenario::PeerEcho("peer_echo"), peer.addr, Some(peer.pid())));
    }
    let mut best = load::run_rounds(&plan, options).await?;
    if let Some(peer) = &peer
        && let Some(result) = best.iter_mut().find(|r| r.name == "peer_echo")
    {
        result.peak_rss_kib = peer.peak_rss_kib();
    }
    let toolgate_peak = toolgate.peak_rss_kib();
    let bare_peak = bare.peak_rss_kib();
    let peer_peak = peer.as_ref().and_then(|p| p.peak_rss_kib());
    drop(peer);
    drop(bare);
    toolgate.stop().await;

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
        let plan = vec![
            (Scenario::Echo("echo_empty"), empty.addr, Some(empty.pid())),
            (
                Scenario::Echo("echo_seeded"),
                seeded.addr,
                Some(seeded.pid()),
            ),
            (
                Scenario::Write("write_empty"),
                empty.addr,
                Some(empty.pid()),
            ),
            (
                Scenario::Write("write_seeded"),
                seeded.addr,
                Some(seeded.pid()),
            ),
            (
                Scenario::Approvals("approvals_empty"),
                empty.addr,
                Some(empty.pid()),
            ),
            (
                Scenario::Approvals("approvals_seeded"),
                seeded.addr,
                Some(seeded.pid()),
            ),
        ];
        best.extend(load::run_rounds(&plan, options).await?);
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
    })
}
