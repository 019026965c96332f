//! A smoke run of the benchmark harness: a fraction of a second per scenario, asserting only
//! that every scenario ran and none of its operations failed. Speed is measured by the harness
//! itself (BENCHMARKS.md), never asserted here.

use std::time::Duration;

use toolgate_bench::{BareMode, Options};

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
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(toolgate_bench::run(&options)).unwrap();
    for name in [
        "bare_tools",
        "tools",
        "bare_echo",
        "bare_echo_recorded",
        "echo",
        "write",
        "suspend_approve",
        "echo_empty",
        "echo_seeded",
        "write_empty",
        "write_seeded",
        "approvals_empty",
        "approvals_seeded",
    ] {
        let scenario = report
            .get(name)
            .unwrap_or_else(|| panic!("{name} did not run"));
        assert!(scenario.requests > 0, "{name} completed no operation");
        assert_eq!(scenario.errors, 0, "{name} had failed operations");
    }
    assert!(report.disk_fsyncs_per_s > 0.0);
    assert!(report.startup.is_some());
    assert!(report.toolgate_peak_rss_kib.is_some());
    assert!(report.to_markdown().contains("| write |"));
}
