//! `toolgate-bench`: see BENCHMARKS.md for the command and what each figure means.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use toolgate_bench::{BareMode, Options, PgOptions, WaitOptions};

const USAGE: &str = "usage: toolgate-bench [--smoke] [--duration-ms N] [--warmup-ms N] \
[--rounds N] [--connections N] [--no-peer] [--no-scale] [--scale-calls N] [--scale-pending N] \
[--no-postgres] [--postgres-url URL] [--kills N] [--lease-ttl-ms N] [--heartbeat-ms N] \
[--no-wake] [--wake-samples N] [--no-held] [--held N] [--no-webhooks] [--deliveries N] \
[--toolgate PATH] [--data-root DIR] [--out FILE]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if args.first().map(String::as_str) == Some("bare-server") {
        let (Some(file), Some(db)) = (args.get(1), args.get(2)) else {
            eprintln!("usage: toolgate-bench bare-server TOOLS_JSON_FILE SQLITE_FILE");
            return ExitCode::from(2);
        };
        let tools = std::fs::read(file).expect("the tools JSON file");
        let _ = runtime.block_on(toolgate_bench::servers_run_bare(
            tools.into(),
            PathBuf::from(db),
        ));
        return ExitCode::SUCCESS;
    }
    if args.first().map(String::as_str) == Some("notifications") {
        // `notifications [CALLS] [ROUNDS]`: Slack notifications per second from the outbox,
        // beside webhook deliveries in the same run (see `toolgate_bench::notifications`).
        let number = |at: usize, default: usize| {
            args.get(at).map_or(Some(default), |text| text.parse().ok())
        };
        let (Some(calls), Some(rounds)) = (number(1, 5_000), number(2, 3)) else {
            eprintln!("usage: toolgate-bench notifications [CALLS] [ROUNDS]");
            return ExitCode::from(2);
        };
        let exe = std::env::current_exe().expect("the harness's own path");
        let dir = exe.parent().expect("a directory").to_path_buf();
        let run = toolgate_bench::notifications::run(
            dir.join("toolgate"),
            dir.join("bench-data"),
            calls,
            rounds,
        );
        return match runtime.block_on(run) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some("budget") {
        return budget(&args[1..], &runtime);
    }
    if args.first().map(String::as_str) == Some("load") {
        // `load ADDR[,ADDR...] SCENARIO SECONDS CONNECTIONS`: drive one scenario at a running
        // server (or replicas, connections spread over them), for profiling it
        // (perf record -p <server pid>).
        // `load DATABASE_URL commits SECONDS CONNECTIONS`: PostgreSQL's own single-row commits;
        // `load DATABASE_URL durable SECONDS CONNECTIONS`: the bare durable-write baseline.
        let [_, addrs, scenario, seconds, connections] = args.as_slice() else {
            eprintln!(
                "usage: toolgate-bench load ADDR[,ADDR...] tools|echo|mcp_echo|write|suspend_approve \
                 SECONDS CONNECTIONS\n       toolgate-bench load DATABASE_URL commits|durable \
                 SECONDS CONNECTIONS"
            );
            return ExitCode::from(2);
        };
        let duration = Duration::from_secs(seconds.parse().expect("seconds"));
        let connections = connections.parse().expect("connections");
        let result = runtime.block_on(async {
            if scenario == "commits" {
                toolgate_bench::commits_once(addrs, duration, connections).await
            } else if scenario == "durable" {
                toolgate_bench::durable_once(addrs, duration, connections).await
            } else {
                toolgate_bench::load_once(
                    addrs
                        .split(',')
                        .map(|addr| addr.parse().expect("an address"))
                        .collect(),
                    scenario,
                    duration,
                    connections,
                )
                .await
            }
        });
        match result {
            Ok(result) => {
                println!("{result:?}");
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let exe = std::env::current_exe().expect("the harness's own path");
    let dir = exe.parent().expect("a directory").to_path_buf();
    let mut options = Options {
        toolgate: dir.join("toolgate"),
        bare: BareMode::Process(exe.clone()),
        data_root: dir.join("bench-data"),
        duration: Duration::from_secs(3),
        warmup: Duration::from_secs(1),
        rounds: 3,
        connections: 32,
        peer: true,
        scale: Some((1_000_000, 100_000)),
        startups: 7,
        postgres: Some(PgOptions::from_env(false)),
        waiting: WaitOptions::full(),
    };
    let mut out: Option<PathBuf> = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<String, ExitCode> {
            args.next().ok_or_else(|| {
                eprintln!("{name} needs a value\n{USAGE}");
                ExitCode::from(2)
            })
        };
        let number = |text: String| -> Result<u64, ExitCode> {
            text.parse().map_err(|_| {
                eprintln!("not a number: {text}\n{USAGE}");
                ExitCode::from(2)
            })
        };
        let parsed: Result<(), ExitCode> = (|| {
            match arg.as_str() {
                "--smoke" => {
                    options.duration = Duration::from_millis(500);
                    options.warmup = Duration::from_millis(200);
                    options.rounds = 1;
                    options.connections = 8;
                    options.peer = false;
                    options.scale = Some((2_000, 200));
                    options.startups = 1;
                    if let Some(pg) = &mut options.postgres {
                        *pg = PgOptions::smoke(pg.admin_url.clone(), pg.required);
                    }
                    options.waiting = WaitOptions::smoke();
                }
                "--no-wake" => options.waiting.wake_samples = 0,
                "--wake-samples" => options.waiting.wake_samples = number(value(&arg)?)? as usize,
                "--no-held" => options.waiting.held = 0,
                "--held" => options.waiting.held = number(value(&arg)?)? as usize,
                "--no-webhooks" => options.waiting.deliveries = 0,
                "--deliveries" => options.waiting.deliveries = number(value(&arg)?)? as usize,
                "--no-postgres" => options.postgres = None,
                "--postgres-url" => {
                    let url = value(&arg)?;
                    if let Some(pg) = &mut options.postgres {
                        pg.admin_url = url;
                    }
                }
                "--kills" => {
                    let kills = number(value(&arg)?)? as usize;
                    if let Some(pg) = &mut options.postgres {
                        pg.kills = kills;
                    }
                }
                "--lease-ttl-ms" => {
                    let ms = Duration::from_millis(number(value(&arg)?)?);
                    if let Some(pg) = &mut options.postgres {
                        pg.lease_ttl = ms;
                    }
                }
                "--heartbeat-ms" => {
                    let ms = Duration::from_millis(number(value(&arg)?)?);
                    if let Some(pg) = &mut options.postgres {
                        pg.heartbeat = ms;
                    }
                }
                "--duration-ms" => options.duration = Duration::from_millis(number(value(&arg)?)?),
                "--warmup-ms" => options.warmup = Duration::from_millis(number(value(&arg)?)?),
                "--rounds" => options.rounds = number(value(&arg)?)? as usize,
                "--connections" => options.connections = number(value(&arg)?)? as usize,
                "--no-peer" => options.peer = false,
                "--no-scale" => options.scale = None,
                "--scale-calls" => {
                    let calls = number(value(&arg)?)?;
                    options.scale = Some((calls, options.scale.map_or(100_000, |s| s.1)));
                }
                "--scale-pending" => {
                    let pending = number(value(&arg)?)?;
                    options.scale = Some((options.scale.map_or(1_000_000, |s| s.0), pending));
                }
                "--toolgate" => options.toolgate = PathBuf::from(value(&arg)?),
                "--data-root" => options.data_root = PathBuf::from(value(&arg)?),
                "--out" => out = Some(PathBuf::from(value(&arg)?)),
                _ => {
                    eprintln!("{USAGE}");
                    return Err(ExitCode::from(2));
                }
            }
            Ok(())
        })();
        if let Err(code) = parsed {
            return code;
        }
    }
    match runtime.block_on(toolgate_bench::run(&options)) {
        Ok(report) => {
            let table = report.to_markdown();
            println!("{table}");
            if let Some(out) = out
                && let Err(e) = std::fs::write(&out, &table)
            {
                eprintln!("cannot write {}: {e}", out.display());
                return ExitCode::FAILURE;
            }
            let errors = report.errors();
            if errors > 0 {
                eprintln!("{errors} operations failed");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolgate-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `budget [--update] [--file FILE] [--toolgate PATH] [--data-root DIR] [SCENARIO...]`: the
/// instructions-per-call check of `bench/budgets.toml` (see `toolgate_bench::budget`).
fn budget(args: &[String], runtime: &tokio::runtime::Runtime) -> ExitCode {
    let exe = std::env::current_exe().expect("the harness's own path");
    let dir = exe.parent().expect("a directory").to_path_buf();
    let mut options = toolgate_bench::budget::BudgetOptions {
        file: PathBuf::from("bench/budgets.toml"),
        toolgate: dir.join("toolgate"),
        data_root: dir.join("bench-data").join("budget"),
        update: false,
        only: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().map(PathBuf::from);
        match arg.as_str() {
            "--update" => options.update = true,
            "--file" | "--toolgate" | "--data-root" => {
                let Some(path) = value() else {
                    eprintln!("{arg} needs a value");
                    return ExitCode::from(2);
                };
                match arg.as_str() {
                    "--file" => options.file = path,
                    "--toolgate" => options.toolgate = path,
                    _ => options.data_root = path,
                }
            }
            flag if flag.starts_with('-') => {
                eprintln!(
                    "usage: toolgate-bench budget [--update] [--file FILE] [--toolgate PATH] \
                     [--data-root DIR] [SCENARIO...]"
                );
                return ExitCode::from(2);
            }
            name => options.only.push(name.to_owned()),
        }
    }
    match runtime.block_on(toolgate_bench::budget::check(&options)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("toolgate-bench budget: {e}");
            ExitCode::FAILURE
        }
    }
}
