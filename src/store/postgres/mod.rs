//! The PostgreSQL store: several toolgate processes (replicas) on one database behave as one
//! server.
//!
//! Where each promise of the Store traits is kept (the map of both backends is in
//! `store/mod.rs`; the traits' write half, one queued write per method, in `store/backend.rs`):
//! - durable writes, batched: [`writer`] (its loop: one transaction per batch,
//!   `synchronous_commit` on; only read records written behind commit asynchronously), the
//!   multi-row statements in `writer/batch.rs`;
//! - one call per idempotency key and outcomes only from the run that owns the call
//!   (`late_outcome` otherwise): `writer/batch.rs`; one winner per suspension, one claimant per
//!   interrupted call, one settlement per reconciliation: `writer/conditional.rs`;
//! - the feed, in commit order across replicas, and its wake-ups: [`feed`];
//! - replicas, leases, and settling the calls of a dead replica: [`leases`];
//! - schema versions under an advisory lock: [`migrations`];
//! - reading records back: [`reads`]; inbox sessions: [`sessions`]; the URL as logs may show
//!   it, without its password: [`redact`]; quota buckets shared by the replicas, one statement
//!   per paid call: [`quotas`];
//! - the webhook outbox, one cursor mover and one claimant per delivery across replicas:
//!   [`webhooks`].
//!
//! This file opens the store and implements the store's `Backend` for it: the writer's queue,
//! records written behind (bounded), each read on the pool, and leaving the database.
//!
//! Reads run on a pool of `pool_size` connections; the writer and the heartbeat have their own.
//! A database that cannot be reached makes every store call fail fast with
//! [`StoreError::Unavailable`] (never a hang: connecting, waiting for a connection and each
//! batch are bounded), and the store recovers by itself when the database is back.

mod audit;
mod feed;
mod leases;
mod link_keys;
mod migrations;
mod pins;
mod quotas;
mod reads;
mod redact;
mod sessions;
mod signing_keys;
mod webhooks;
mod writer;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{mpsc, watch};
use tokio_postgres::NoTls;

use super::backend::Backend;
use super::queue::{self, Behind, Msg, WriteOp};
use super::{
    ApprovalPage, ApprovalState, CallFilter, CallPage, CallRecord, Delivery, DeliveryPage,
    DeliveryStatus, FeedCursor, FeedPage, InboxSession, NewCall, Outcome, QuotaSpend, StoreCounts,
    StoreError, Timestamp,
};
use leases::Lease;
use reads::Conn;
use redact::Redacted;
pub use redact::redact_url;

/// How long a request waits for a pooled connection, or for a new one to be made, before it is
/// answered `Unavailable`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How a [`PostgresStore`] connects and keeps its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The most pooled connections for reads (the writer and the heartbeat have one each
    /// besides).
    pub pool_size: usize,
    /// How long a replica's lease lasts without a heartbeat; a replica silent for longer is
    /// taken for dead and its running calls are settled by the others.
    pub lease_ttl: Duration,
    /// How often a replica renews its lease and sweeps the calls of dead ones.
    pub heartbeat: Duration,
}

impl Default for PostgresOptions {
    /// 16 connections, a 30 s lease renewed every 5 s.
    fn default() -> Self {
        PostgresOptions {
            pool_size: 16,
            lease_ttl: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
        }
    }
}

/// The PostgreSQL store. Cheap to clone; all clones share one writer, one pool and one lease.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    replica: Arc<str>,
    /// The database, as logs may name it: without its password.
    target: String,
    reads: Pool,
    /// The writer's and the heartbeat's connections.
    own: Pool,
    writer: mpsc::UnboundedSender<Msg>,
    behind: Arc<Mutex<Behind>>,
    /// Stops the heartbeat and the feed listener.
    stop: watch::Sender<bool>,
    /// Bumped when the feed may have grown (see [`feed`]).
    feed: Arc<watch::Sender<u64>>,
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db` or the
    /// `key=value` form), brings its schema up to date, registers this process as a new replica
    /// with a lease, and starts the writer and the heartbeat. Fails with a message that names
    /// the database without its password.
    pub async fn open(url: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        // Redacted before it is parsed: what the parser says about a bad URL, or makes of a
        // password it misreads, may hold a piece of the password.
        let shown = Redacted::of(url);
        if shown.ambiguous {
            return Err(StoreError::Backend(format!(
                "the database URL {} is not valid: it has more than one `@`; percent-encode an \
                 `@` in the user name or password as %40",
                shown.shown
            )));
        }
        let mut config: tokio_postgres::Config = url.parse().map_err(|_| {
            // The parser's own message may quote what it took for an option's name or value,
            // which can be a piece of the password: the message given is the one the redacted
            // text gets, when it fails too.
            let reason = match shown.shown.parse::<tokio_postgres::Config>() {
                Err(err) => err.to_string(),
                Ok(_) => "check the quoting and percent-encoding of its password".to_owned(),
            };
            StoreError::Backend(format!(
                "the database URL {} is not valid: {reason}",
                shown.shown
            ))
        })?;
        config
            .application_name("toolgate")
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10));
        let target = describe(&config);
        let pool = |size: usize| {
            let manager = Manager::from_config(
                config.clone(),
                NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            Pool::builder(manager)
                .max_size(size)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(CONNECT_TIMEOUT))
                .create_timeout(Some(CONNECT_TIMEOUT))
                .recycle_timeout(Some(CONNECT_TIMEOUT))
                .build()
                .map_err(|err| StoreError::Backend(format!("cannot build a pool: {err}")))
        };
        let reads = pool(options.pool_size.max(1))?;
        let own = pool(2)?;
        let named = |err: StoreError| match err {
            StoreError::Unavailable(message) => {
                StoreError::Unavailable(format!("cannot reach PostgreSQL at {target}: {message}"))
            }
            StoreError::Backend(message) => {
                StoreError::Backend(format!("PostgreSQL at {target}: {message}"))
            }
            other => other,
        };
        migrations::migrate(&own).await.map_err(named)?;

        let replica: Arc<str> = crate::ids::new_replica_id().into();
        let lease = Lease {
            ttl: options.lease_ttl,
            heartbeat: options.heartbeat,
        };
        {
            let conn = own.get().await.map_err(pool_error).map_err(named)?;
            leases::renew(&conn, &replica, lease).await.map_err(named)?;
        }
        let (writer, queue) = mpsc::unbounded_channel();
        let behind = Arc::new(Mutex::new(Behind::default()));
        let changes = Arc::new(watch::Sender::new(0));
        tokio::spawn(
            writer::Writer {
                pool: own.clone(),
                replica: replica.clone(),
                conn: None,
                feed: changes.clone(),
            }
            .run(queue, behind.clone()),
        );
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(leases::heartbeat(
            own.clone(),
            replica.clone(),
            lease,
            changes.clone(),
            stopped.clone(),
        ));
        tokio::spawn(audit::chainer(
            reads.clone(),
            changes.subscribe(),
            stopped.clone(),
        ));
        tokio::spawn(feed::listen(config, changes.clone(), stopped));
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                replica,
                target,
                reads,
                own,
                writer,
                behind,
                stop,
                feed: changes,
            }),
        })
    }

    /// This replica's id: fresh at every start.
    pub fn replica_id(&self) -> &str {
        &self.inner.replica
    }

    /// The database, as it may be shown: `postgres://user@host:port/db`, never the password.
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// A pooled connection for reads.
    async fn reader(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.inner.reads.get().await.map_err(pool_error)
    }

    /// Runs `read` on a pooled connection, waiting for the connection included, within
    /// [`READ_TIMEOUT`].
    async fn read<T>(
        &self,
        read: impl AsyncFnOnce(&Conn<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        bounded(async {
            let conn = self.reader().await?;
            read(&Conn(&conn)).await
        })
        .await
    }
}

/// How long a read may take before it is answered `Unavailable`: a connection whose server
/// stopped answering must not hold a request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `read`, or `Unavailable` if it takes longer than [`READ_TIMEOUT`].
async fn bounded<T>(read: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "the database did not answer within {} s",
                READ_TIMEOUT.as_secs()
            )))
        })
}

/// A PostgreSQL error as a store error: the server unreachable, the connection lost, or the
/// server shutting down make [`StoreError::Unavailable`]; anything the server refused is a
/// [`StoreError::Backend`] failure.
pub(super) fn pg_error(err: tokio_postgres::Error) -> StoreError {
    let unavailable = match err.as_db_error() {
        // Connection exceptions (08), operator intervention such as a shutdown (57P), and
        // insufficient resources such as too many connections (53).
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || code.starts_with("57P") || code.starts_with("53")
        }
        // No answer from the server: a closed connection, an I/O error, a timeout. An error
        // with another cause (a parameter that would not convert) is this process's own.
        None => {
            use std::error::Error as _;
            err.is_closed()
                || err
                    .source()
                    .is_none_or(|cause| cause.downcast_ref::<std::io::Error>().is_some())
        }
    };
    // tokio-postgres says what kind of error it is; the cause (the server's message, the I/O
    // error) is its source.
    let mut message = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(inner) = cause {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        cause = inner.source();
    }
    if unavailable {
        StoreError::Unavailable(message)
    } else {
        StoreError::Backend(message)
    }
}

/// Waiting for (or making) a pooled connection failed: the database cannot be reached.
pub(super) fn pool_error(err: deadpool_postgres::PoolError) -> StoreError {
    match err {
        deadpool_postgres::PoolError::Backend(err) => pg_error(err),
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// The database a config points at, without its password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}:{port}/{db}")
}

impl Backend for PostgresStore {
    const NAME: &'static str = "postgres";
    const STOPPED: &'static str = "the store's writer has stopped";

    fn send(&self, msg: Msg) -> Result<(), StoreError> {
        self.inner.writer.send(msg).map_err(|_| Self::stopped())
    }

    fn feed_counter(&self) -> &watch::Sender<u64> {
        &self.inner.feed
    }

    async fn write_behind(&self, call: NewCall, outcome: &Outcome) -> Result<(), StoreError> {
        // Not awaited: the writer commits it with the next batch, or within the window. But
        // when the database takes records more slowly than they come, the caller waits for the
        // next commit: the queue, and what a crash would lose, stay bounded. (A database that
        // cannot be reached does not fail the call: its records are kept, up to a limit.)
        let (msg, over) = Behind::push_counted(&self.inner.behind, queue::behind(call, outcome)?);
        if over {
            self.send(Msg::BehindFull)?;
            let _ = self.write(WriteOp::Ping).await;
            return Ok(());
        }
        match msg {
            Some(msg) => self.send(msg),
            None => Ok(()),
        }
    }

    async fn find_call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        self.read(async |c| reads::find_call(c, call_id, Timestamp::now().0).await)
            .await
    }

    async fn key_taken(&self, tool: &str, key: &str) -> Result<bool, StoreError> {
        self.read(async |c| reads::key_taken(c, tool, key).await)
            .await
    }

    async fn read_calls(
        &self,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<CallPage, StoreError> {
        self.read(async |c| reads::list_calls(c, &filter, after, limit).await)
            .await
    }

    async fn read_approvals(
        &self,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError> {
        self.read(async |c| reads::pending_approvals(c, tool, after, limit).await)
            .await
    }

    async fn read_approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError> {
        self.read(async |c| reads::approval(c, token, Timestamp::now().0).await)
            .await
    }

    async fn read_counts(&self) -> Result<StoreCounts, StoreError> {
        self.read(async |c| reads::counts(c).await).await
    }

    async fn read_feed(
        &self,
        after: Option<&FeedCursor>,
        limit: u32,
    ) -> Result<FeedPage, StoreError> {
        self.read(async |c| feed::read(c, after, limit).await).await
    }

    async fn read_feed_head(&self) -> Result<FeedCursor, StoreError> {
        self.read(async |c| feed::head(c).await).await
    }

    async fn read_webhook_cursor(&self) -> Result<Option<FeedCursor>, StoreError> {
        self.read(async |c| webhooks::cursor(c).await).await
    }

    async fn read_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
        channels: bool,
    ) -> Result<DeliveryPage, StoreError> {
        self.read(async |c| webhooks::list(c, status, after, limit, channels).await)
            .await
    }

    async fn read_call_notifications(&self, call_id: &str) -> Result<Vec<Delivery>, StoreError> {
        self.read(async |c| webhooks::call_notifications(c, call_id).await)
            .await
    }

    async fn read_disabled_webhooks(&self) -> Result<Vec<String>, StoreError> {
        self.read(async |c| webhooks::disabled_webhooks(c).await)
            .await
    }

    async fn read_session(
        &self,
        id_sha256: &str,
        now: Timestamp,
    ) -> Result<Option<InboxSession>, StoreError> {
        self.read(async |c| sessions::find(c, id_sha256, now.0).await)
            .await
    }

    async fn read_link_keys(
        &self,
        now: Timestamp,
    ) -> Result<Vec<crate::store::LinkKey>, StoreError> {
        self.read(async |c| link_keys::live(c, now.0).await).await
    }

    async fn read_signing_keys(
        &self,
        now: Timestamp,
    ) -> Result<Vec<crate::store::SigningKey>, StoreError> {
        self.read(async |c| signing_keys::live(c, now.0).await)
            .await
    }

    async fn read_one(&self) -> Result<(), StoreError> {
        bounded(async {
            let conn = self.reader().await?;
            conn.simple_query("SELECT 1").await.map_err(pg_error)?;
            Ok(())
        })
        .await
    }

    fn replica(&self) -> Option<&str> {
        Some(&self.inner.replica)
    }

    fn shares_quotas(&self) -> bool {
        true
    }

    async fn spend_bucket(
        &self,
        principal: &str,
        scope: &str,
        interval_us: i64,
        tolerance_us: i64,
    ) -> Result<QuotaSpend, StoreError> {
        self.read(async |c| quotas::spend(c, principal, scope, interval_us, tolerance_us).await)
            .await
    }

    async fn refund_bucket(
        &self,
        principal: &str,
        scope: &str,
        interval_us: i64,
    ) -> Result<(), StoreError> {
        self.read(async |c| quotas::refund(c, principal, scope, interval_us).await)
            .await
    }

    async fn close(&self) -> Result<(), StoreError> {
        // What is queued (records written behind included) is committed, then the lease ends:
        // calls still running here are swept by the next heartbeat of another replica.
        let flushed = self.write(WriteOp::Ping).await;
        let _ = self.inner.stop.send(true);
        let released = leases::release(&self.inner.own, &self.inner.replica).await;
        tracing::info!(replica = %self.inner.replica, target = %self.inner.target, "left the database");
        flushed.map(drop).and(released)
    }
}

impl crate::store::audit::AuditBackend for PostgresStore {
    async fn read_audit(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<crate::store::AuditEntry>, StoreError> {
        self.read(async |c| audit::entries(c, after, limit).await)
            .await
    }

    async fn read_audit_head(&self) -> Result<Option<crate::store::AuditEntry>, StoreError> {
        self.read(async |c| audit::head(c).await).await
    }

    async fn read_audit_path(
        &self,
        call_id: &str,
        limit: u32,
    ) -> Result<Option<crate::store::AuditPath>, StoreError> {
        self.read(async |c| audit::path(c, call_id, limit).await)
            .await
    }

    async fn read_audit_exports(&self) -> Result<Vec<crate::store::ExportState>, StoreError> {
        self.read(async |c| audit::exports(c).await).await
    }

    async fn settle_audit(&self) -> Result<(), StoreError> {
        // What this process wrote is committed, then chained (once final), waiting for another
        // replica's chainer rather than reading before it is done.
        self.write(WriteOp::Ping).await?;
        self.read(async |c| audit::chain_final(c, true).await.map(drop))
            .await
    }
}
