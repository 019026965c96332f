//! A smoke run of the benchmark harness: a fraction of a second per scenario, asserting only
//! that every scenario ran and none of its operations failed. Speed is measured by the harness
//! itself (BENCHMARKS.md), never asserted here. The PostgreSQL scenarios run when PostgreSQL
//! answers (`TOOLGATE_TEST_DATABASE_URL`, or the local server); under `CI=true` it must answer.

use std::time::Duration;

use toolgate_bench::{BareMode, Options, PgOptions, WaitOptions};

#[test]
fn the_benchmark_harness_runs_every_scenario_without_errors() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        toolgate: env!("CARGO_BIN_EXE_toolgate").into(),
        bare: BareMode::InProcess,
        data_root: dir.path().to_path_buf(),
        duration: Duration::from_millis(400),
        warmup: Duration::from_millis(100),
        rounds: 1,
        connections: 4,
        peer: false,
        scale: Some((2_000, 200)),
        startups: 1,
        postgres: Some(PgOptions::from_env(true)),
        waiting: WaitOptions::smoke(),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(toolgate_bench::run(&options)).unwrap();
    for name in [
        "bare_tools",
        "tools",
        "bare_echo",
        "bare_echo_recorded",
        "echo",
        "mcp_echo",
        "write",
        "suspend_approve",
        "echo_empty",
        "echo_seeded",
        "write_empty",
        "write_seeded",
        "approvals_empty",
        "approvals_seeded",
        "webhook_receiver",
        "webhooks",
        "webhooks_backlog",
    ] {
        ran(&report, name);
    }
    match (&report.postgres, &report.postgres_skipped) {
        (Some(pg), None) => {
            for name in [
                "pg_echo",
                "pg_echo_r2",
                "pg_echo_r3",
                "pg_commits",
                "pg_durable",
                "pg_write",
                "pg_write_r2",
                "pg_write_r3",
            ] {
                let scenario = ran(&report, name);
                assert!(scenario.pg.is_some(), "{name} has no database counters");
            }
            // Webhook deliveries on PostgreSQL: no database counters are sampled.
            for name in ["pg_webhooks", "pg_webhooks_backlog"] {
                ran(&report, name);
            }
            for name in ["pg_wake", "pg_wake_cross"] {
                waited(&report, name);
            }
            held(&report, "pg_held");
            let failover = pg.failover.as_ref().expect("the failover scenario ran");
            assert_eq!(failover.settled_after.len(), 1);
            assert!(report.to_markdown().contains("| pg_write |"));
        }
        (_, Some(why)) => {
            // Only outside CI: under CI=true the harness fails instead.
            assert!(!toolgate_bench::postgres::ci());
            eprintln!("PostgreSQL scenarios skipped: {why}");
        }
        (None, None) => panic!("PostgreSQL neither ran nor was skipped"),
    }
    waited(&report, "wake");
    held(&report, "held");
    assert!(report.disk_fsyncs_per_s > 0.0);
    assert!(report.startup.is_some());
    assert!(report.toolgate_peak_rss_kib.is_some());
    assert!(report.to_markdown().contains("| write |"));
}

/// The scenario `name` ran, and none of its operations failed.
fn ran<'a>(report: &'a toolgate_bench::Report, name: &str) -> &'a toolgate_bench::ScenarioResult {
    let scenario = report
        .get(name)
        .unwrap_or_else(|| panic!("{name} did not run"));
    assert!(scenario.requests > 0, "{name} completed no operation");
    assert_eq!(scenario.errors, 0, "{name} had failed operations");
    scenario
}

/// The wake-up variant `name` ran: its held requests were woken by approvals, and so was the
/// polling client of its baseline.
fn waited(report: &toolgate_bench::Report, name: &str) {
    let wake = report
        .wake
        .iter()
        .find(|w| w.name == name)
        .unwrap_or_else(|| panic!("{name} did not run"));
    assert!(wake.samples > 0, "{name} measured no wake-up");
    assert!(wake.polled.samples > 0, "{name} measured no polling");
    assert_eq!(wake.errors, 0, "{name} had failed samples");
}

/// The memory scenario `name` ran: every request was held at once, and answered on the stop.
fn held(report: &toolgate_bench::Report, name: &str) {
    let held = report
        .held
        .iter()
        .find(|h| h.name == name)
        .unwrap_or_else(|| panic!("{name} did not run"));
    assert_eq!(held.held, WaitOptions::smoke().held as u64, "{name}");
    assert_eq!(held.errors, 0, "{name} had failures");
}
