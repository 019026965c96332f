//! PostgreSQL for the tests: a fresh database per test on the machine's PostgreSQL
//! (`TOOLGATE_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`; `.ci/
//! test-deps` starts it when it is down), dropped when the test is done.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio_postgres::NoTls;
use toolgate::store::PostgresOptions;

/// The most pooled connections of a test's store: the local server allows 100 in all, shared by
/// every test running at once.
pub const POOL_SIZE: usize = 4;
/// A test replica's lease: short, so that the calls a killed replica left running are swept by
/// the next one within seconds (its first heartbeat, at start, finds the lease still live).
pub const LEASE_TTL: Duration = Duration::from_millis(1500);
/// How often a test replica renews its lease and sweeps.
pub const HEARTBEAT: Duration = Duration::from_millis(300);

/// The options of a PostgreSQL store in a test process.
pub fn options() -> PostgresOptions {
    PostgresOptions {
        pool_size: POOL_SIZE,
        lease_ttl: LEASE_TTL,
        heartbeat: HEARTBEAT,
    }
}

/// The same options, as the environment of a `toolgate` binary.
pub fn binary_env() -> [(&'static str, String); 3] {
    [
        ("TOOLGATE_STORE__POOL_SIZE", POOL_SIZE.to_string()),
        (
            "TOOLGATE_STORE__LEASE_TTL_MS",
            LEASE_TTL.as_millis().to_string(),
        ),
        (
            "TOOLGATE_STORE__HEARTBEAT_MS",
            HEARTBEAT.as_millis().to_string(),
        ),
    ]
}

/// The server the tests create their databases on, as a URL to its maintenance database.
pub fn admin_url() -> String {
    std::env::var("TOOLGATE_TEST_DATABASE_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `url` (a `postgres://` URL) naming the database `name` instead.
pub fn with_database(url: &str, name: &str) -> String {
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

async fn admin() -> tokio_postgres::Client {
    let url = admin_url();
    let (client, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "PostgreSQL does not answer at {url} ({err}): run `bash .ci/test-deps`, which \
                 starts the local cluster, or set TOOLGATE_TEST_DATABASE_URL"
            )
        });
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A database of its own for one test; dropped (with its connections) when this is.
pub struct TestDb {
    /// The URL to give a store or a server.
    pub url: String,
    name: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "toolgate_test_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let client = admin().await;
        // Several test processes create databases at once; PostgreSQL refuses to copy a
        // template that another CREATE DATABASE is copying, so that is retried.
        let mut tries = 0;
        loop {
            match client
                .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
                .await
            {
                Ok(()) => break,
                Err(err) if tries < 50 => {
                    tries += 1;
                    let _ = err;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(err) => panic!("cannot create the test database {name}: {err}"),
            }
        }
        TestDb {
            url: with_database(&admin_url(), &name),
            name,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // A runtime of its own: the test's may be shutting down.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let client = admin().await;
                let _ = client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
    }
}
