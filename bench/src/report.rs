//! The report of a run: every scenario's best round and what the scenarios found besides their
//! rates, as the Markdown tables of BENCHMARKS.md.

use std::time::Duration;

use crate::harness::load::ScenarioResult;
use crate::replicas::PgReport;
use crate::{waiting, webhooks};

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
    pub postgres: Option<PgReport>,
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
                "gate_api_echo" => ratio("gate_api_echo", "bare_echo"),
                "pg_echo_r2" | "pg_echo_r3" => ratio(&s.name, "pg_echo"),
                "pg_durable" => ratio("pg_durable", "pg_commits"),
                "pg_write" => [
                    ratio("pg_write", "pg_commits"),
                    ratio("pg_write", "pg_durable"),
                ]
                .into_iter()
                .filter(|r| !r.is_empty())
                .collect::<Vec<_>>()
                .join(", "),
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
        out.push_str(&waiting::markdown(&self.wake, &self.held));
        out.push_str(&webhooks::markdown(&self.scenarios, &self.deliveries));
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
                "echo"
                    | "write"
                    | "mcp_echo"
                    | "peer_mcp_echo"
                    | "gate_mcp_echo"
                    | "gate_echo"
                    | "gate_api_echo"
            );
            if !(measured || s.name.starts_with("pg_")) {
                continue;
            }
            let n = s.operations_all.max(1) as f64;
            let sum = c.servers_s + c.backends_s.unwrap_or(0.0) + c.harness_s;
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {:.0} % | {:.0} % |\n",
                s.name,
                if s.name == "pg_commits" || s.name == "pg_durable" {
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
    fn postgres_markdown(&self, pg: &PgReport) -> String {
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
