//! The PostgreSQL scenarios: scratch databases, toolgate replicas on them, PostgreSQL's own rate
//! of single-row commits (the baseline of the durable write), the counters sampled around each
//! round (transactions, rows, WAL, time in the backend per call), and a replica's death.
//!
//! Each scenario gets a database of its own, created for the run and dropped after it, so the
//! per-database counters of `pg_stat_database` and `pg_stat_user_tables` are that scenario's
//! alone. WAL figures (`pg_current_wal_lsn()`, `pg_stat_wal`) are the whole cluster's: anything
//! else writing to the same server meanwhile is counted too.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use crate::load::{Step, Target};
use crate::servers::ServerProcess;

/// The PostgreSQL server the tests use, unless `TOOLGATE_TEST_DATABASE_URL` names another.
pub const LOCAL_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// What the PostgreSQL scenarios need.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// A URL to the server's maintenance database, as a user that may create databases.
    pub admin_url: String,
    /// Whether PostgreSQL must answer (under `CI=true`): if it does not, the run fails instead of
    /// skipping these scenarios.
    pub required: bool,
    /// The replicas' `store.lease_ttl_ms` in the failover scenario.
    pub lease_ttl: Duration,
    /// The replicas' `store.heartbeat_ms` in the failover scenario.
    pub heartbeat: Duration,
    /// `send_email`'s delay in the failover scenario: the call the victim is killed in.
    pub email_delay: Duration,
    /// Replicas killed in the failover scenario (one call each).
    pub kills: usize,
    /// The measuring time of each PostgreSQL scenario (with a third of it as warm-up), when
    /// not the run's: a smoke run keeps these short.
    pub duration: Option<Duration>,
    /// How long after a round the counters are read. A backend flushes its statistics at most
    /// once a second, so this must be over a second for the counters to be exact; the smoke run
    /// uses zero (it asserts nothing about them).
    pub settle: Duration,
}

impl PgOptions {
    /// The full run's settings against `admin_url`: a lease of 2 s renewed every 0.5 s, a
    /// 3 s `send_email`, 5 kills.
    pub fn full(admin_url: String, required: bool) -> Self {
        PgOptions {
            admin_url,
            required,
            lease_ttl: Duration::from_millis(2000),
            heartbeat: Duration::from_millis(500),
            email_delay: Duration::from_millis(3000),
            kills: 5,
            duration: None,
            settle: Duration::from_millis(1100),
        }
    }

    /// A smoke run's: 150 ms per scenario, a lease of 300 ms renewed every 100 ms, one kill,
    /// no settling.
    pub fn smoke(admin_url: String, required: bool) -> Self {
        PgOptions {
            lease_ttl: Duration::from_millis(300),
            heartbeat: Duration::from_millis(100),
            email_delay: Duration::from_millis(2000),
            kills: 1,
            duration: Some(Duration::from_millis(150)),
            settle: Duration::ZERO,
            ..PgOptions::full(admin_url, required)
        }
    }

    /// `TOOLGATE_TEST_DATABASE_URL` or the local server, and required under `CI=true`.
    pub fn from_env(smoke: bool) -> Self {
        let url = std::env::var("TOOLGATE_TEST_DATABASE_URL")
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| LOCAL_URL.to_owned());
        let required = ci();
        if smoke {
            PgOptions::smoke(url, required)
        } else {
            PgOptions::full(url, required)
        }
    }
}

/// Whether this runs under CI (`CI=true`), where PostgreSQL is started and must answer.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The `application_name` of the harness's own connections, which its CPU figures of a
/// scenario database's backends leave out (its clients of the commits baseline are named
/// [`COMMITS_CLIENT`] and counted).
pub const HARNESS_CLIENT: &str = "toolgate-bench";

/// The `application_name` of the commits baseline's clients.
pub const COMMITS_CLIENT: &str = "toolgate-bench-commits";

/// Connects to `url` within 3 s, as the harness.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client, String> {
    connect_as(url, HARNESS_CLIENT).await
}

/// Connects to `url` within 3 s, with `application_name` `name`.
pub async fn connect_as(url: &str, name: &str) -> Result<tokio_postgres::Client, String> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("bad URL {}: {e}", shown(url)))?;
    config.connect_timeout(Duration::from_secs(3));
    config.application_name(name);
    let (client, connection) = tokio::time::timeout(Duration::from_secs(5), config.connect(NoTls))
        .await
        .map_err(|_| format!("{} did not answer within 5 s", shown(url)))?
        .map_err(|e| format!("{}: {}", shown(url), pg_error(&e)))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A PostgreSQL error with its causes (`error connecting to server: Connection refused`).
pub fn pg_error(err: &tokio_postgres::Error) -> String {
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(e) = cause {
        text.push_str(&format!(": {e}"));
        cause = e.source();
    }
    text
}

/// `url` as it may be printed: without a password.
pub fn shown(url: &str) -> String {
    toolgate::store::redact_url(url)
}

/// `url` naming database `name` instead of its own (a `postgres://` URL or the `key=value`
/// form).
pub fn with_database(url: &str, name: &str) -> String {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return format!("{url} dbname={name}");
    }
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// The server, as the harness talks to it: its maintenance database.
pub struct Admin {
    client: tokio_postgres::Client,
    url: String,
    /// `SELECT version()`.
    pub version: String,
    /// `SHOW synchronous_commit`.
    pub synchronous_commit: String,
    /// The postmaster's process id, when the server runs on this machine (for its CPU time).
    pub postmaster: Option<u32>,
    /// A connection to each scenario database probed with [`Admin::last_seq`].
    probes: tokio::sync::Mutex<std::collections::HashMap<String, tokio_postgres::Client>>,
}

impl Admin {
    /// Connects; the error says why PostgreSQL cannot be used.
    pub async fn connect(url: &str) -> Result<Admin, String> {
        let client = connect(url).await?;
        let row = client
            .query_one(
                "SELECT version(), current_setting('synchronous_commit'), pg_backend_pid()",
                &[],
            )
            .await
            .map_err(|e| format!("{}: {}", shown(url), pg_error(&e)))?;
        let backend: i32 = row.get(2);
        Ok(Admin {
            client,
            url: url.to_owned(),
            version: row.get(0),
            synchronous_commit: row.get(1),
            postmaster: u32::try_from(backend)
                .ok()
                .and_then(crate::cpu::postmaster_of),
            probes: Default::default(),
        })
    }

    /// A fresh database for scenario `label`.
    pub async fn scratch(&self, label: &str) -> Result<ScratchDb, String> {
        let mut dbs = self.scratch_many(&[label]).await?;
        Ok(dbs.pop().expect("one database"))
    }

    /// A fresh database for each of `labels`, created at once (each `CREATE DATABASE` copies
    /// `template0` and waits for its WAL to be flushed, a third of a second here).
    pub async fn scratch_many(&self, labels: &[&str]) -> Result<Vec<ScratchDb>, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let creating: Vec<_> = labels
            .iter()
            .map(|label| {
                let name = format!(
                    "toolgate_bench_{}_{}_{label}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed)
                );
                let url = self.url.clone();
                tokio::spawn(async move {
                    let created = create_database(&url, &name).await;
                    let db = ScratchDb {
                        url: with_database(&url, &name),
                        admin_url: url,
                        name,
                        dropped: created.is_err(),
                    };
                    created.map(|()| db)
                })
            })
            .collect();
        let mut dbs = Vec::new();
        let mut failed = None;
        for task in creating {
            match task.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(db) => dbs.push(db),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            // Those created are dropped with `dbs`.
            Some(e) => Err(e),
            None => Ok(dbs),
        }
    }

    /// The cluster's and database `db`'s counters now.
    pub async fn sample(&self, db: &str) -> Result<Counters, String> {
        let row = self
            .client
            .query_one(
                "SELECT d.xact_commit, d.xact_rollback, d.tup_inserted, d.tup_updated, \
                   d.tup_deleted, d.active_time, d.idle_in_transaction_time, \
                   (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, w.wal_sync, w.wal_sync_time \
                 FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = $1",
                &[&db],
            )
            .await
            .map_err(|e| format!("sampling {db}: {e}"))?;
        Ok(Counters {
            transactions: row.get(0),
            rollbacks: row.get(1),
            inserted: row.get(2),
            updated: row.get(3),
            deleted: row.get(4),
            active_ms: row.get(5),
            idle_in_transaction_ms: row.get(6),
            wal_bytes: row.get(7),
            wal_syncs: row.get(8),
            wal_sync_ms: row.get(9),
        })
    }

    /// Waits until the counters of what `step` just did are all flushed to the statistics:
    /// `settle`, then a `/readyz` to each server (a write and a read on its connections, whose
    /// backends flush what they kept pending when they finish a transaction more than a second
    /// after their last flush), or, for the commits baseline, until its backends have exited
    /// (they flush when they exit).
    pub async fn settle(&self, step: &Step, settle: Duration) -> Result<(), String> {
        tokio::time::sleep(settle).await;
        match &step.target {
            Target::Http(addrs) => {
                for addr in addrs {
                    crate::load::fetch(*addr, "/readyz").await?;
                }
            }
            Target::Postgres(_) => {
                if let Some(db) = &step.database {
                    self.wait_for_no_backends(db).await;
                }
            }
        }
        Ok(())
    }

    /// Waits (up to 5 s) until no backend is connected to `db`: each flushes its statistics as
    /// it exits.
    pub async fn wait_for_no_backends(&self, db: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let connected = self
                .client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                    &[&db],
                )
                .await
                .map_or(0, |row| row.get::<_, i64>(0));
            if connected == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last sequence number of a committed call in database `db` (`max(seq)` of `calls`:
    /// the index's last entry). Calls are numbered as they are inserted, so this counts them,
    /// up to the batches of other replicas still uncommitted beneath it.
    pub async fn last_seq(&self, db: &str) -> Result<i64, String> {
        let mut probes = self.probes.lock().await;
        if !probes.contains_key(db) {
            let client = connect(&with_database(&self.url, db)).await?;
            probes.insert(db.to_owned(), client);
        }
        let row = probes[db]
            .query_one("SELECT coalesce(max(seq), 0) FROM calls", &[])
            .await
            .map_err(|e| format!("max(seq) in {db}: {}", pg_error(&e)))?;
        Ok(row.get(0))
    }

    /// Closes the probes' connections (a database with a client connected cannot be dropped
    /// cleanly, and its statistics wait for its clients).
    pub async fn close_probes(&self) {
        self.probes.lock().await.clear();
    }

    /// The backends connected to database `db` but the harness's own (its probes), with the
    /// CPU each has used so far, in seconds (when the server runs on this machine).
    pub async fn backends(&self, db: &str) -> Result<Vec<(u32, f64)>, String> {
        let rows = self
            .client
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 \
                 AND application_name <> $2",
                &[&db, &HARNESS_CLIENT],
            )
            .await
            .map_err(|e| format!("backends of {db}: {}", pg_error(&e)))?;
        Ok(rows
            .iter()
            .filter_map(|row| u32::try_from(row.get::<_, i32>(0)).ok())
            .filter_map(|pid| Some((pid, crate::cpu::process_s(pid)?)))
            .collect())
    }

    /// The URL it connected to.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Creates database `name` on a connection of its own.
async fn create_database(admin_url: &str, name: &str) -> Result<(), String> {
    let client = connect(admin_url).await?;
    // PostgreSQL refuses to copy a template that another CREATE DATABASE is copying in some
    // cases (the tests create databases too, maybe at the same time): retried.
    let mut tries = 0;
    loop {
        match client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .await
        {
            Ok(()) => {
                // The time its sessions spend in WAL fsyncs, in pg_stat_wal (a superuser's
                // setting: without it, that column stays empty).
                let _ = client
                    .batch_execute(&format!(
                        "ALTER DATABASE {name} SET track_wal_io_timing = on"
                    ))
                    .await;
                return Ok(());
            }
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("CREATE DATABASE {name}: {}", pg_error(&e))),
        }
    }
}

/// A database created for the run; dropped (its connections closed) by [`ScratchDb::remove`], or
/// when this is dropped.
pub struct ScratchDb {
    /// Its name.
    pub name: String,
    /// A URL to it, for servers and clients.
    pub url: String,
    admin_url: String,
    dropped: bool,
}

impl ScratchDb {
    /// Drops the database.
    pub async fn remove(mut self, admin: &Admin) {
        self.dropped = true;
        let _ = admin
            .client
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await;
    }

    /// Once every client has left (each backend flushes its statistics as it exits), reads the
    /// statistics of `table`, then drops the database, on connections of its own.
    pub async fn close(
        self,
        scenario: &'static str,
        table: &'static str,
    ) -> Result<TableStats, String> {
        let admin = Admin::connect(&self.admin_url).await?;
        admin.wait_for_no_backends(&self.name).await;
        let stats = self.table_stats(scenario, table).await;
        self.remove(&admin).await;
        stats
    }

    /// The table statistics of `table` in this database, and its size on disk.
    pub async fn table_stats(&self, scenario: &str, table: &str) -> Result<TableStats, String> {
        let client = connect(&self.url).await?;
        let row = client
            .query_one(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, \
                   pg_total_relation_size(relid), pg_relation_size(relid), \
                   (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid), \
                   seq_scan, seq_tup_read, coalesce(idx_scan, 0) \
                 FROM pg_stat_user_tables s WHERE relname = $1",
                &[&table],
            )
            .await
            .map_err(|e| format!("statistics of {table} in {}: {e}", self.name))?;
        let rows: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        Ok(TableStats {
            scenario: scenario.to_owned(),
            table: table.to_owned(),
            rows,
            inserted: row.get(0),
            updated: row.get(1),
            hot_updated: row.get(2),
            total_bytes: row.get(3),
            heap_bytes: row.get(4),
            indexes: row.get(5),
            seq_scans: row.get(6),
            seq_rows_read: row.get(7),
            index_scans: row.get(8),
        })
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (name, url) = (self.name.clone(), self.admin_url.clone());
        // A runtime of its own: this may run while the harness's is unwinding.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let client = connect(&url).await.ok()?;
                client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Counters of one database (transactions, rows, time in its backends) and of the cluster (WAL).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// `xact_commit`.
    pub transactions: i64,
    /// `xact_rollback`.
    pub rollbacks: i64,
    /// `tup_inserted`.
    pub inserted: i64,
    /// `tup_updated`.
    pub updated: i64,
    /// `tup_deleted`.
    pub deleted: i64,
    /// `active_time`: time its backends spent running statements, in ms.
    pub active_ms: f64,
    /// `idle_in_transaction_time`: time its backends spent in a transaction waiting for the
    /// client's next statement, in ms.
    pub idle_in_transaction_ms: f64,
    /// WAL written by the whole cluster (`pg_current_wal_lsn()`), in bytes.
    pub wal_bytes: i64,
    /// WAL fsyncs by the whole cluster (`pg_stat_wal.wal_sync`).
    pub wal_syncs: i64,
    /// Time spent in those fsyncs by sessions that time them (`wal_sync_time`, in ms): the
    /// scenario databases' sessions do (`track_wal_io_timing`), the WAL writer does not.
    pub wal_sync_ms: f64,
}

impl Counters {
    /// `self - before`.
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            transactions: self.transactions - before.transactions,
            rollbacks: self.rollbacks - before.rollbacks,
            inserted: self.inserted - before.inserted,
            updated: self.updated - before.updated,
            deleted: self.deleted - before.deleted,
            active_ms: self.active_ms - before.active_ms,
            idle_in_transaction_ms: self.idle_in_transaction_ms - before.idle_in_transaction_ms,
            wal_bytes: self.wal_bytes - before.wal_bytes,
            wal_syncs: self.wal_syncs - before.wal_syncs,
            wal_sync_ms: self.wal_sync_ms - before.wal_sync_ms,
        }
    }

    /// `self + other`.
    pub fn plus(self, other: Counters) -> Counters {
        Counters {
            transactions: self.transactions + other.transactions,
            rollbacks: self.rollbacks + other.rollbacks,
            inserted: self.inserted + other.inserted,
            updated: self.updated + other.updated,
            deleted: self.deleted + other.deleted,
            active_ms: self.active_ms + other.active_ms,
            idle_in_transaction_ms: self.idle_in_transaction_ms + other.idle_in_transaction_ms,
            wal_bytes: self.wal_bytes + other.wal_bytes,
            wal_syncs: self.wal_syncs + other.wal_syncs,
            wal_sync_ms: self.wal_sync_ms + other.wal_sync_ms,
        }
    }
}

/// A table at the end of the run.
#[derive(Debug, Clone)]
pub struct TableStats {
    /// The scenario whose database it is in.
    pub scenario: String,
    /// The table.
    pub table: String,
    /// Rows in it.
    pub rows: i64,
    /// `n_tup_ins`.
    pub inserted: i64,
    /// `n_tup_upd`.
    pub updated: i64,
    /// `n_tup_hot_upd`: updates that wrote no index entry.
    pub hot_updated: i64,
    /// The table with its indexes and TOAST, in bytes.
    pub total_bytes: i64,
    /// The table's heap alone, in bytes.
    pub heap_bytes: i64,
    /// Its indexes.
    pub indexes: i64,
    /// `seq_scan`: scans of the whole table.
    pub seq_scans: i64,
    /// `seq_tup_read`: rows those scans read.
    pub seq_rows_read: i64,
    /// `idx_scan`.
    pub index_scans: i64,
}

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

/// How toolgate runs on `db`: the store's settings as environment variables.
pub fn replica_env(url: &str, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut env = vec![("TOOLGATE_STORE__DATABASE_URL".to_owned(), url.to_owned())];
    env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    env
}

/// Starts `count` replicas of toolgate on `url`, one after the other (the first migrates the
/// schema), each with a data directory of its own under `root` (for `send_email`'s outbox) and
/// the config file `config` if given.
pub async fn start_replicas(
    binary: &Path,
    root: &Path,
    label: &str,
    count: usize,
    config: Option<&Path>,
    env: &[(String, String)],
) -> Result<Vec<ServerProcess>, String> {
    let mut replicas = Vec::with_capacity(count);
    for i in 0..count {
        let dir = root.join(format!("pg-{label}-{i}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        replicas.push(ServerProcess::toolgate_with(binary, &dir, config, env).await?);
    }
    Ok(replicas)
}

/// The commits baseline's table.
pub const CREATE_COMMITS_TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_commits (\
     id bigserial PRIMARY KEY, client integer NOT NULL, \
     at timestamptz NOT NULL DEFAULT clock_timestamp(), payload text NOT NULL)";

/// Creates the commits baseline's table in `db`.
pub async fn create_commits_table(db: &ScratchDb) -> Result<(), String> {
    let client = connect(&db.url).await?;
    client
        .batch_execute(CREATE_COMMITS_TABLE)
        .await
        .map_err(|e| format!("the commits table: {}", pg_error(&e)))
}

/// The statement of the commits baseline: one row, committed on its own (autocommit), with
/// the server's `synchronous_commit`.
pub const COMMIT_ONE_ROW: &str = "INSERT INTO bench_commits (client, payload) VALUES ($1, $2)";

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
    let env = replica_env(
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
        let witness = start_replicas(binary, root, "failover-witness", 1, None, &env)
            .await?
            .pop()
            .expect("one replica");
        let mut settled_after = Vec::new();
        for kill in 0..pg.kills {
            let victim = start_replicas(
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
                tokio::spawn(async move { crate::load::send_email(addr, &key).await })
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
                let body = crate::load::fetch(witness.addr, &format!("/calls/{call_id}")).await?;
                if crate::load::status_of(&body).as_deref() == Some("needs_reconciliation") {
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
            let (status, body) = crate::load::send_email(witness.addr, &key).await?;
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

/// A duration in `[0, bound)`, from the clock's nanoseconds (no generator needed for this).
pub(crate) fn random_below(bound: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let bound_ns = bound.as_nanos().max(1);
    // Spread over the bound by a multiplicative hash of the nanoseconds.
    let spread = (u128::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15)) % bound_ns;
    Duration::from_nanos(u64::try_from(spread).unwrap_or(0))
}

/// The id of the running `send_email` call, as the replica at `addr` lists it.
async fn running_email(addr: SocketAddr) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let body =
            crate::load::fetch(addr, "/calls?tool=send_email&status=running&limit=1").await?;
        let page: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        if let Some(id) = page["calls"][0]["call_id"].as_str() {
            return Ok(id.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err("the victim's send_email call never showed as running".into())
}
