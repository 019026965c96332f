//! toolgate on PostgreSQL: echo and the durable write on 1, 2 and 3 replicas of one database
//! each, beside PostgreSQL's own rate of single-row commits (a database of their own per
//! scenario, created for the run and dropped after it), and a replica's death in the middle of
//! a call.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::client::{fetch, send_email, status_of};
use crate::harness::load::{Step, Target};
use crate::harness::operation::Scenario;
use crate::harness::postgres::{self, Admin, PgOptions, TableStats};
use crate::harness::servers::ServerProcess;
use crate::harness::{Options, random_below};

/// What the PostgreSQL scenarios found besides their rates.
#[derive(Debug, Clone)]
pub struct PgReport {
    /// The server, without a password.
    pub target: String,
    /// `SELECT version()`.
    pub version: String,
    /// `synchronous_commit` of the server.
    pub synchronous_commit: String,
    /// Each scenario database's table at the end.
    pub tables: Vec<TableStats>,
    /// A replica's death, if it was measured.
    pub failover: Option<Failover>,
}

/// The failover scenario's settings and what it measured.
#[derive(Debug, Clone)]
pub struct Failover {
    /// `store.lease_ttl_ms`.
    pub lease_ttl: Duration,
    /// `store.heartbeat_ms`.
    pub heartbeat: Duration,
    /// From `kill -9` of the replica running a `send_email` to that call being
    /// `needs_reconciliation` as another replica reads it, per kill.
    pub settled_after: Vec<Duration>,
}

/// The PostgreSQL scenarios of one run: a database for each, and the toolgate replicas on it.
pub(crate) struct PgRun {
    pub(crate) admin: postgres::Admin,
    /// The commits baseline's database.
    commits: postgres::ScratchDb,
    /// The bare durable-write baseline's database.
    durable: postgres::ScratchDb,
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
    pub(crate) async fn start(options: &Options, admin: postgres::Admin) -> Result<PgRun, String> {
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
        let mut labels = vec!["commits", "durable"];
        labels.extend(wanted.iter().map(|(scenario, _)| scenario.name()));
        let mut dbs = admin.scratch_many(&labels).await?.into_iter();
        let commits = dbs.next().expect("the commits database");
        postgres::create_commits_table(&commits).await?;
        let durable = dbs.next().expect("the durable-write baseline's database");
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
            durable,
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
                fetch(replica.addr, "/readyz").await?;
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
    pub(crate) fn echo_steps(&self) -> Vec<Step> {
        self.sets
            .iter()
            .filter(|set| matches!(set.scenario, Scenario::Echo(_)))
            .map(PgRun::step)
            .collect()
    }

    /// The commits baseline, the bare durable-write baseline, then the durable write on 1, 2
    /// and 3 replicas.
    pub(crate) fn write_steps(&self) -> Vec<Step> {
        let commits = Step {
            scenario: Scenario::Commits("pg_commits"),
            target: Target::Postgres(self.commits.url.clone()),
            pids: Vec::new(),
            database: Some(self.commits.name.clone()),
        };
        let durable = Step {
            scenario: Scenario::Durable("pg_durable"),
            target: Target::Durable(self.durable.url.clone()),
            pids: Vec::new(),
            database: Some(self.durable.name.clone()),
        };
        [commits, durable]
            .into_iter()
            .chain(
                self.sets
                    .iter()
                    .filter(|set| matches!(set.scenario, Scenario::Write(_)))
                    .map(PgRun::step),
            )
            .collect()
    }

    /// Stops the replicas, reads each database's table statistics, and drops the databases.
    pub(crate) async fn finish(self) -> Result<PgReport, String> {
        let PgRun {
            admin,
            commits,
            durable,
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
        dbs.push(("pg_durable", "bare_calls", durable));
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
            None => Ok(PgReport {
                target: postgres::shown(admin.url()),
                version: admin.version.clone(),
                synchronous_commit: admin.synchronous_commit.clone(),
                tables,
                failover: None,
            }),
        }
    }
}

/// Kills a replica in the middle of a `send_email`, `pg.kills` times, and times how long the
/// other replica takes to see the call `needs_reconciliation`; checks that the same request
/// is then answered `409 needs_reconciliation` there.
pub async fn failover(
    binary: &Path,
    root: &Path,
    admin: &Admin,
    pg: &PgOptions,
) -> Result<Failover, String> {
    let db = admin.scratch("failover").await?;
    let env = postgres::replica_env(
        &db.url,
        &[
            (
                "TOOLGATE_STORE__LEASE_TTL_MS",
                pg.lease_ttl.as_millis().to_string(),
            ),
            (
                "TOOLGATE_STORE__HEARTBEAT_MS",
                pg.heartbeat.as_millis().to_string(),
            ),
            (
                "TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS",
                pg.email_delay.as_millis().to_string(),
            ),
        ],
    );
    let result = async {
        let witness = postgres::start_replicas(binary, root, "failover-witness", 1, None, &env)
            .await?
            .pop()
            .expect("one replica");
        let mut settled_after = Vec::new();
        for kill in 0..pg.kills {
            let victim = postgres::start_replicas(
                binary,
                root,
                &format!("failover-victim-{kill}"),
                1,
                None,
                &env,
            )
                .await?
                .pop()
                .expect("one replica");
            let key = format!("failover-{}-{kill}", std::process::id());
            let call = {
                let (addr, key) = (victim.addr, key.clone());
                // Its answer never comes: the replica dies first.
                tokio::spawn(async move { send_email(addr, &key).await })
            };
            let call_id = running_email(witness.addr).await?;
            // Killed at a random point of the victim's and the witness's heartbeats (they
            // started at nearly the same phase), while its call still runs.
            tokio::time::sleep(random_below(
                (pg.heartbeat * 2).min(pg.email_delay / 2),
            ))
            .await;
            let killed = Instant::now();
            victim.kill9();
            let bound = pg.lease_ttl + pg.heartbeat;
            let deadline = killed + bound * 10;
            loop {
                let body = fetch(witness.addr, &format!("/calls/{call_id}")).await?;
                if status_of(&body).as_deref() == Some("needs_reconciliation") {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "call {call_id} of the killed replica was not settled within {} ms",
                        (bound * 10).as_millis()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let elapsed = killed.elapsed();
            eprintln!(
                "failover {}: needs_reconciliation after {:.0} ms (bound {} ms)",
                kill + 1,
                elapsed.as_secs_f64() * 1e3,
                bound.as_millis()
            );
            settled_after.push(elapsed);
            call.abort();
            let (status, body) = send_email(witness.addr, &key).await?;
            if status != 409 || !String::from_utf8_lossy(&body).contains("needs_reconciliation") {
                return Err(format!(
                    "the killed call's request, sent again to another replica, answered {status} {}",
                    String::from_utf8_lossy(&body)
                ));
            }
        }
        witness.stop().await;
        Ok(Failover {
            lease_ttl: pg.lease_ttl,
            heartbeat: pg.heartbeat,
            settled_after,
        })
    }
    .await;
    db.remove(admin).await;
    result
}

/// The id of the running `send_email` call, as the replica at `addr` lists it.
async fn running_email(addr: SocketAddr) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let body = fetch(addr, "/calls?tool=send_email&status=running&limit=1").await?;
        let page: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        if let Some(id) = page["calls"][0]["call_id"].as_str() {
            return Ok(id.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err("the victim's send_email call never showed as running".into())
}
