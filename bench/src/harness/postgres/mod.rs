//! PostgreSQL for the scenarios: their options, connections, scratch databases and the
//! counters sampled around each round ([`Admin`]: transactions, rows, WAL, time in the backend
//! per call), toolgate replicas on a database, and the commits baseline's table.
//!
//! Each scenario gets a database of its own, created for the run and dropped after it, so the
//! per-database counters of `pg_stat_database` and `pg_stat_user_tables` are that scenario's
//! alone. WAL figures (`pg_current_wal_lsn()`, `pg_stat_wal`) are the whole cluster's: anything
//! else writing to the same server meanwhile is counted too.

use std::path::Path;
use std::time::Duration;

use tokio_postgres::NoTls;

use super::Options;
use super::servers::ServerProcess;

mod admin;

pub use admin::{Admin, Counters, ScratchDb, TableStats};

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

/// A read pool of 4, for the replicas of the scenarios where its size does not matter: the
/// server's connections are shared with everyone.
pub(crate) fn small_pool() -> [(&'static str, String); 1] {
    [("TOOLGATE_STORE__POOL_SIZE", "4".to_owned())]
}

/// `count` replicas on a fresh database `label`, with `settings`; the database is the
/// caller's to remove.
pub(crate) async fn pg_replicas(
    options: &Options,
    admin: &Admin,
    label: &str,
    count: usize,
    config: Option<&std::path::Path>,
    settings: &[(&str, String)],
) -> Result<(ScratchDb, Vec<ServerProcess>), String> {
    let db = admin.scratch(label).await?;
    let env = replica_env(&db.url, settings);
    match start_replicas(
        &options.toolgate,
        &options.data_root,
        label,
        count,
        config,
        &env,
    )
    .await
    {
        Ok(replicas) => Ok((db, replicas)),
        Err(e) => {
            db.remove(admin).await;
            Err(e)
        }
    }
}

/// Stops a scenario's servers, and removes its PostgreSQL database.
pub(crate) async fn stop(
    sqlite: ServerProcess,
    pg: Option<(ScratchDb, Vec<ServerProcess>)>,
    admin: Option<&Admin>,
) {
    sqlite.stop().await;
    if let (Some((db, replicas)), Some(admin)) = (pg, admin) {
        for replica in replicas {
            replica.stop().await;
        }
        db.remove(admin).await;
    }
}
