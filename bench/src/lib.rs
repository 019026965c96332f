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
//! When PostgreSQL answers, toolgate also runs on it (see [`replicas`]): echo and the durable
//! write on 1, 2 and 3 replicas of one database each, beside PostgreSQL's own rate of single-row
//! commits and SQLite's echo, in the same rounds; then a replica is killed in the middle of a
//! call.
//!
//! Then waiting without polling (see [`waiting`] and [`webhooks`]): how soon a request held by
//! `?wait=` hears of a decision, on SQLite and across PostgreSQL replicas, beside a plain poll;
//! what 10,000 held requests cost in memory; and webhook deliveries per second to a receiver in
//! the harness, beside the receiver's own rate.
//!
//! The layers, each importing only those below it: [`harness`] (what every scenario shares:
//! options, starting servers, the client, the load generator, measuring); the scenarios
//! ([`replicas`], [`waiting`], [`webhooks`]; the plain load scenarios are the plan of [`run`]),
//! which never import each other; and on top the report ([`Report`]) and [`run`].

pub mod budget;
pub mod harness;
pub mod notifications;
pub mod replicas;
mod report;
pub mod waiting;
pub mod webhooks;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use harness::load::{ScenarioResult, Step, Target};
pub use harness::operation::Scenario;
pub use harness::servers::{BareServer, ServerProcess, run_bare as servers_run_bare};
pub use harness::{BareMode, Options, PgOptions, WaitOptions, cpu, disk_fsyncs_per_s, postgres};
pub use report::Report;

use harness::{client, load, peer, servers};
use replicas::PgRun;

/// The configuration of the toolgate that serves the FastMCP echo at `peer` as an upstream: no
/// example tools, and echo declared a read (FastMCP does not annotate it, which would make it a
/// write: a durable intent per call, not what an echo is measured by).
fn gate_config(peer: std::net::SocketAddr) -> String {
    format!(
        "[examples]\nenabled = false\n\n[[upstreams]]\nname = \"peer\"\nurl = \"http://{peer}/mcp\"\n\n\
         [upstreams.policies.echo]\neffect = \"read\"\n"
    )
}

/// An OpenAPI document of the bare server's echo route (`POST /tools/echo/call`), and the
/// configuration of the toolgate that serves it as an upstream tool, `api__echo`, declared a
/// read as `gate_config`'s echo is.
fn api_gate_config(document: &std::path::Path, bare: std::net::SocketAddr) -> String {
    format!(
        "[examples]\nenabled = false\n\n[[upstreams]]\nname = \"api\"\nopenapi = {document:?}\n\
         base_url = \"http://{bare}\"\n\n[upstreams.policies.echo]\neffect = \"read\"\n"
    )
}

const API_DOCUMENT: &str = r#"{
  "openapi": "3.1.0",
  "info": {"title": "the bare server's echo", "version": "1"},
  "paths": {"/tools/echo/call": {"post": {
    "operationId": "echo",
    "requestBody": {"required": true, "content": {"application/json": {"schema": {
      "type": "object", "required": ["input"],
      "properties": {"input": {"type": "object", "required": ["text"],
        "properties": {"text": {"type": "string"}}}}}}}},
    "responses": {"200": {"description": "the echo", "content": {"application/json": {
      "schema": {"type": "object"}}}}}
  }}}
}"#;

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
    once(scenario, Target::Http(addrs), duration, connections).await
}

/// The bare durable-write baseline (the `pg_durable` scenario, see [`harness::durable`]) on
/// `connections` clients of the database at `url`, into tables created there if missing.
pub async fn durable_once(
    url: &str,
    duration: Duration,
    connections: usize,
) -> Result<ScenarioResult, String> {
    let target = Target::Durable(url.to_owned());
    once(Scenario::Durable("durable"), target, duration, connections).await
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
    let target = Target::Postgres(url.to_owned());
    once(Scenario::Commits("commits"), target, duration, connections).await
}

/// One round of `scenario` against `target`, without a warm-up, outside a run (`load`).
async fn once(
    scenario: Scenario,
    target: Target,
    duration: Duration,
    connections: usize,
) -> Result<ScenarioResult, String> {
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
        target,
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
    let tools_json = client::fetch(toolgate.addr, "/tools").await?;
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

    // The bare server's echo as a REST API behind toolgate: the same call, gated.
    let api_gate = {
        let dir = fresh_dir("api-gate")?;
        let document = dir.join("openapi.json");
        std::fs::write(&document, API_DOCUMENT).map_err(|e| e.to_string())?;
        let config = dir.join("toolgate.toml");
        std::fs::write(&config, api_gate_config(&document, bare.addr()))
            .map_err(|e| e.to_string())?;
        ServerProcess::toolgate_with(&options.toolgate, &dir, Some(&config), &[]).await?
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
    plan.push(Step::http(
        Scenario::ApiEcho("gate_api_echo"),
        api_gate.addr,
        Some(api_gate.pid()),
    ));
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
    api_gate.stop().await;
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
            Some(replicas::failover(&options.toolgate, &options.data_root, &admin, pg).await?);
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
