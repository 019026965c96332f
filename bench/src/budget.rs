//! The budget CI enforces: instructions per call of each path, counted by callgrind, against
//! `bench/budgets.toml`.
//!
//! Calls per second on a shared 2-core machine move by 10 % between runs; the instructions a
//! call executes move by about 2 % (how often the server's workers park and wake depends a
//! little on scheduling). So each scenario runs a fresh toolgate (the release binary) under
//! `valgrind --tool=callgrind`, warms it up, zeroes the counters, drives a fixed number of calls
//! at it on 8 connections, dumps the counters and divides their total (user space, every thread
//! of the server; the kernel's share is not counted) by the calls; of three such runs, the
//! median counts. A scenario more than `tolerance_percent` over its budget fails the check,
//! named with its figure; one more than that under it is reported, so the commit that made it
//! cheaper lowers its budget (`--update` writes the measured figures, with the commit they were
//! measured on).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::harness::client::connect;
use crate::harness::operation::{Scenario, operate};
use crate::harness::peer::Peer;
use crate::harness::servers::ServerProcess;

/// Connections the calls are driven on.
const CONNECTIONS: usize = 8;

/// Runs of each scenario, of which the median counts.
const RUNS: usize = 3;

/// The budgets file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// How far over its budget a scenario may run before the check fails, in percent.
    pub tolerance_percent: f64,
    /// The scenarios, by name.
    #[serde(rename = "scenario")]
    pub scenarios: Vec<Budget>,
}

/// One scenario's budget.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// `echo`, `tools`, `write`, `mcp_echo` or `gate_echo`.
    pub name: String,
    /// Calls counted (after a fifth as many unmeasured).
    pub calls: u64,
    /// Instructions per call allowed.
    pub instructions: u64,
    /// The commit the figure was measured on.
    pub commit: String,
}

/// What to check, and where.
#[derive(Debug, Clone)]
pub struct BudgetOptions {
    /// `bench/budgets.toml`.
    pub file: PathBuf,
    /// The `toolgate` release binary.
    pub toolgate: PathBuf,
    /// Where each scenario's data directory and profile go (and the peer's virtualenv).
    pub data_root: PathBuf,
    /// Write the measured figures into the file instead of failing on them.
    pub update: bool,
    /// Only these scenarios (all when empty).
    pub only: Vec<String>,
}

/// One scenario's measurement.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The scenario.
    pub name: String,
    /// Calls answered as expected while counting.
    pub calls: u64,
    /// Instructions per call.
    pub instructions: u64,
}

/// Reads the budgets file.
pub fn read(file: &Path) -> Result<Budgets, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let budgets: Budgets = toml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    for budget in &budgets.scenarios {
        scenario(&budget.name)?;
        if budget.calls == 0 {
            return Err(format!(
                "{}: scenario {} counts no calls",
                file.display(),
                budget.name
            ));
        }
    }
    Ok(budgets)
}

fn scenario(name: &str) -> Result<Scenario, String> {
    Ok(match name {
        "echo" => Scenario::Echo("echo"),
        "tools" => Scenario::Tools("tools"),
        "write" => Scenario::Write("write"),
        "mcp_echo" => Scenario::McpEcho("mcp_echo"),
        "gate_echo" => Scenario::GatedEcho("gate_echo"),
        other => {
            return Err(format!(
                "unknown scenario {other} (echo, tools, write, mcp_echo, gate_echo)"
            ));
        }
    })
}

/// Measures every scenario of the file (or of `options.only`) and compares: `Ok(true)` when
/// each is within its budget (or, with `update`, once the file holds the new figures).
pub async fn check(options: &BudgetOptions) -> Result<bool, String> {
    let budgets = read(&options.file)?;
    let chosen: Vec<&Budget> = budgets
        .scenarios
        .iter()
        .filter(|b| options.only.is_empty() || options.only.contains(&b.name))
        .collect();
    if let Some(unknown) = options
        .only
        .iter()
        .find(|name| !budgets.scenarios.iter().any(|b| &b.name == *name))
    {
        return Err(format!(
            "{} has no scenario {unknown}",
            options.file.display()
        ));
    }
    std::fs::create_dir_all(&options.data_root).map_err(|e| e.to_string())?;
    // The gated echo's upstream: FastMCP's own server, started once (not counted: only
    // toolgate runs under callgrind).
    let peer = match chosen.iter().any(|b| b.name == "gate_echo") {
        true => Some(Peer::start_mcp(&options.data_root).await?),
        false => None,
    };
    let mut measured = Vec::new();
    for budget in &chosen {
        // The median of RUNS runs: how often the server's workers park and wake depends a
        // little on how the machine schedules them, which moves a run by up to 2 % either way.
        let mut runs = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let figure = measure(options, budget, peer.as_ref().map(|p| p.addr)).await?;
            eprintln!(
                "{}: {} calls, {} instructions per call",
                figure.name, figure.calls, figure.instructions
            );
            runs.push(figure);
        }
        runs.sort_by_key(|figure| figure.instructions);
        measured.push(runs.swap_remove(RUNS / 2));
    }
    let commit = commit_measured();
    println!("{}", table(&budgets, &measured));
    if options.update {
        let text = updated(&budgets, &measured, &commit);
        std::fs::write(&options.file, text).map_err(|e| e.to_string())?;
        println!("{} updated (measured on {commit})", options.file.display());
        return Ok(true);
    }
    let mut within = true;
    for figure in &measured {
        let budget = budgets
            .scenarios
            .iter()
            .find(|b| b.name == figure.name)
            .expect("measured from the file");
        let over = percent_over(figure.instructions, budget.instructions);
        if beyond(
            figure.instructions,
            budget.instructions,
            budgets.tolerance_percent,
        ) {
            within = false;
            println!(
                "OVER BUDGET: {} runs {} instructions per call, {over:+.1} % against its budget \
                 of {} (measured on {}); the limit is {:+.1} %",
                figure.name,
                figure.instructions,
                budget.instructions,
                budget.commit,
                budgets.tolerance_percent
            );
        } else if beyond(
            budget.instructions,
            figure.instructions,
            budgets.tolerance_percent,
        ) {
            println!(
                "under budget: {} runs {} instructions per call, {over:+.1} % against {}: lower \
                 its budget (`bash bench/budget --update`) in the change that made it cheaper",
                figure.name, figure.instructions, budget.instructions
            );
        }
    }
    Ok(within)
}

/// Whether `measured` is more than `tolerance_percent` over `budget` (exact at the boundary:
/// 103 against 100 with 3 % is within).
fn beyond(measured: u64, budget: u64, tolerance_percent: f64) -> bool {
    measured as f64 * 100.0 > budget as f64 * (100.0 + tolerance_percent)
}

fn percent_over(measured: u64, budget: u64) -> f64 {
    (measured as f64 / budget.max(1) as f64 - 1.0) * 100.0
}

/// A markdown table of budget, measured and the difference.
pub fn table(budgets: &Budgets, measured: &[Measured]) -> String {
    let mut out = String::from(
        "| scenario | calls | budget (instructions per call) | measured | difference |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for figure in measured {
        if let Some(budget) = budgets.scenarios.iter().find(|b| b.name == figure.name) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:+.1} % |",
                figure.name,
                figure.calls,
                budget.instructions,
                figure.instructions,
                percent_over(figure.instructions, budget.instructions)
            );
        }
    }
    out
}

/// The budgets file with the measured figures in place of the old ones (the rest kept).
fn updated(budgets: &Budgets, measured: &[Measured], commit: &str) -> String {
    let mut out = String::from(HEADER);
    let _ = writeln!(out, "tolerance_percent = {}", budgets.tolerance_percent);
    for budget in &budgets.scenarios {
        let (instructions, commit) = match measured.iter().find(|m| m.name == budget.name) {
            Some(figure) => (figure.instructions, commit),
            None => (budget.instructions, budget.commit.as_str()),
        };
        let _ = write!(
            out,
            "\n[[scenario]]\nname = \"{}\"\ncalls = {}\ninstructions = {instructions}\ncommit = \"{commit}\"\n",
            budget.name, budget.calls
        );
    }
    out
}

const HEADER: &str = "\
# Instructions per call of each path: the budget `.ci/run` enforces (`bash bench/budget`).
# Each scenario runs a fresh release toolgate under callgrind, `calls` calls after a fifth as many
# unmeasured, on 8 connections; the figure is every thread's user-space instructions while they
# ran, divided by the calls, the median of three runs. A scenario more than tolerance_percent over
# its budget fails CI.
# A change that makes a path cheaper lowers its budget in the same commit:
# `bash bench/budget --update` (or `--update echo write`) rewrites the figures and the commit.
";

/// The commit the figures are measured on: `HEAD`, marked when the server's sources (anything
/// outside `bench/`) have uncommitted changes.
fn commit_measured() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short=10", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| {
        s.lines()
            .any(|line| !line.get(3..).unwrap_or("").starts_with("bench/"))
    });
    if dirty {
        format!("{head} with uncommitted changes")
    } else {
        head
    }
}

/// One scenario: a fresh toolgate under callgrind, its calls counted.
async fn measure(
    options: &BudgetOptions,
    budget: &Budget,
    peer: Option<SocketAddr>,
) -> Result<Measured, String> {
    let scenario = scenario(&budget.name)?;
    let dir = options.data_root.join(&budget.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let config = match (&budget.name[..], peer) {
        ("gate_echo", Some(peer)) => {
            let file = dir.join("toolgate.toml");
            std::fs::write(&file, crate::gate_config(peer)).map_err(|e| e.to_string())?;
            Some(file)
        }
        ("gate_echo", None) => return Err("gate_echo needs its upstream".into()),
        _ => None,
    };
    let profile = dir.join("callgrind.out");
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", profile.display()))
        .arg(&options.toolgate);
    let data = dir.join("data");
    let server = ServerProcess::toolgate_in(command, &data, config.as_deref(), &[]).await?;
    let pid = server.pid().to_string();
    let addr = server.addr;
    let warmed = drive(scenario, addr, (budget.calls / 5).max(1)).await?;
    if warmed.1 > 0 {
        return Err(format!(
            "{}: {} warm-up calls failed",
            budget.name, warmed.1
        ));
    }
    callgrind_control(&["-z", &pid])?;
    let (calls, errors) = drive(scenario, addr, budget.calls).await?;
    callgrind_control(&["-d", &pid])?;
    drop(server);
    if errors > 0 {
        return Err(format!("{}: {errors} counted calls failed", budget.name));
    }
    let instructions = dumped_instructions(&dir).await?;
    Ok(Measured {
        name: budget.name.clone(),
        calls,
        instructions: instructions / calls.max(1),
    })
}

fn callgrind_control(args: &[&str]) -> Result<(), String> {
    let output = Command::new("callgrind_control")
        .args(args)
        .output()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "callgrind_control {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The instructions of the dump `callgrind_control -d` wrote (the one numbered `.1`: the
/// counters since they were zeroed; the final dump at exit is `callgrind.out` itself).
async fn dumped_instructions(dir: &Path) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let file = dir.join("callgrind.out.1");
    loop {
        if let Ok(text) = std::fs::read_to_string(&file)
            && let Some(total) = text
                .lines()
                .find_map(|l| l.strip_prefix("totals:").or(l.strip_prefix("summary:")))
        {
            return total
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("{}: no total", file.display()));
        }
        if Instant::now() > deadline {
            return Err(format!("{} was never written", file.display()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Exactly `calls` operations of `scenario` at `addr` over [`CONNECTIONS`] connections, each
/// taking the next while any are left; the operations answered as expected, and the others.
async fn drive(scenario: Scenario, addr: SocketAddr, calls: u64) -> Result<(u64, u64), String> {
    let left = Arc::new(AtomicU64::new(calls));
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let left = left.clone();
            tokio::spawn(async move {
                let mut sender = connect(addr).await?;
                let (mut ok, mut failed) = (0u64, 0u64);
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    match operate(scenario, &mut sender).await {
                        Ok(true) => ok += 1,
                        Ok(false) => failed += 1,
                        Err(e) => return Err(e),
                    }
                }
                Ok::<_, String>((ok, failed))
            })
        })
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for task in tasks {
        let (o, f) = task.await.map_err(|e| e.to_string())??;
        ok += o;
        failed += f;
    }
    Ok((ok, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_budgets_parse_and_name_known_scenarios() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("budgets.toml");
        let budgets = read(&file).expect("bench/budgets.toml reads");
        let names: Vec<&str> = budgets.scenarios.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["echo", "tools", "write", "mcp_echo", "gate_echo"]);
        assert!(budgets.tolerance_percent > 0.0 && budgets.tolerance_percent <= 5.0);
        assert!(budgets.scenarios.iter().all(|b| b.instructions > 1_000));
    }

    #[test]
    fn an_update_rewrites_the_figures_it_measured_and_keeps_the_rest() {
        let budgets: Budgets = toml::from_str(
            "tolerance_percent = 3\n[[scenario]]\nname = \"echo\"\ncalls = 10\n\
             instructions = 100\ncommit = \"old\"\n[[scenario]]\nname = \"tools\"\ncalls = 10\n\
             instructions = 50\ncommit = \"old\"\n",
        )
        .unwrap();
        let measured = [Measured {
            name: "echo".into(),
            calls: 10,
            instructions: 90,
        }];
        let again: Budgets = toml::from_str(&updated(&budgets, &measured, "new")).unwrap();
        assert_eq!(
            (
                again.scenarios[0].instructions,
                again.scenarios[0].commit.as_str()
            ),
            (90, "new")
        );
        assert_eq!(
            (
                again.scenarios[1].instructions,
                again.scenarios[1].commit.as_str()
            ),
            (50, "old")
        );
        assert!(beyond(104, 100, 3.0) && !beyond(103, 100, 3.0));
        assert!(beyond(55_194 * 104 / 100, 55_194, 3.0));
    }
}
