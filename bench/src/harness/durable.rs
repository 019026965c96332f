//! The bare durable-write baseline on PostgreSQL (`pg_durable`): the least work toolgate's
//! promise of a durable write needs, done by a client of the same database with ideal batching
//! and pipelining, and nothing else of a server.
//!
//! The promise: a write's intent is committed before its tool runs, and its outcome before it
//! is answered; a taken `(tool, idempotency key)` is refused by the database; each outcome has a
//! feed entry. So each operation here is a call: its intent (id, tool, key, input) goes to a
//! queue and is answered once committed; its outcome (the output, `completed`) likewise. Two
//! committers, each on a connection of its own, take whatever the queue holds (up to 1,024
//! entries) as one statement, which is its own transaction: the batch's intents inserted, its
//! outcomes recorded on their calls, and a feed row for each outcome, in one round trip. While
//! one batch waits for its commit the next is taken by another committer (pipelining), so the
//! queue never waits for a round trip that another connection could make.
//!
//! Nothing in it is toolgate's: no HTTP, no history of events per call, no replicas' leases,
//! no indexes beyond the primary keys and the idempotency key's. The call row is as wide as
//! toolgate's `send_email` input and output.

use std::sync::Arc;

use tokio::sync::{Mutex, mpsc, oneshot};

use super::client::EMAIL_BODY;
use super::cpu;
use super::postgres::{self, COMMITS_CLIENT};

/// The baseline's tables: calls with their primary key and the idempotency key's unique index,
/// and the feed.
pub const CREATE_TABLES: &str = "CREATE TABLE IF NOT EXISTS bare_calls (\
       call_id text PRIMARY KEY, tool text NOT NULL, status text NOT NULL, \
       idempotency_key text NOT NULL, input text NOT NULL, output text, \
       created_at bigint NOT NULL, updated_at bigint NOT NULL); \
     CREATE UNIQUE INDEX IF NOT EXISTS bare_calls_by_key ON bare_calls (tool, idempotency_key); \
     CREATE TABLE IF NOT EXISTS bare_feed (\
       seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at bigint NOT NULL, \
       type text NOT NULL, call_id text NOT NULL)";

/// One batch, one statement, one transaction: intents inserted, outcomes recorded (only on a
/// call still running), a feed row per outcome recorded. Returns the outcomes recorded.
pub const COMMIT_BATCH: &str = "WITH intents AS ( \
       INSERT INTO bare_calls (call_id, tool, status, idempotency_key, input, created_at, \
         updated_at) \
       SELECT u.call_id, 'send_email', 'running', u.key, $3, $5, $5 \
       FROM unnest($1::text[], $2::text[]) AS u(call_id, key) \
       ON CONFLICT DO NOTHING RETURNING call_id \
     ), outcomes AS ( \
       UPDATE bare_calls c SET status = 'completed', output = $6, updated_at = $5 \
       FROM unnest($4::text[]) AS u(call_id) \
       WHERE c.call_id = u.call_id AND c.status = 'running' RETURNING c.call_id \
     ), fed AS ( \
       INSERT INTO bare_feed (at, type, call_id) SELECT $5, 'call.completed', call_id FROM outcomes \
     ) SELECT (SELECT count(*) FROM intents), (SELECT count(*) FROM outcomes)";

/// What `send_email` answers, as wide as toolgate's output.
const OUTPUT: &str = r#"{"message_id":"<0123456789abcdef@toolgate.local>","delivered":true,"to":"bench@example.com"}"#;

/// Committers, each with a connection of its own, unless `BENCH_DURABLE_COMMITTERS` says.
const COMMITTERS: usize = 2;

fn committers() -> usize {
    std::env::var("BENCH_DURABLE_COMMITTERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(COMMITTERS)
}

/// The most entries one statement takes.
const MAX_BATCH: usize = 1_024;

/// What a call asks of the queue.
enum Entry {
    Intent(String, oneshot::Sender<bool>),
    Outcome(String, oneshot::Sender<bool>),
}

/// The queue the calls write into, and the committers draining it.
pub struct Durable {
    queue: mpsc::UnboundedSender<Entry>,
    committers: Vec<tokio::task::JoinHandle<f64>>,
}

impl Durable {
    /// Connects the committers to `url` (the tables made there if missing).
    pub async fn start(url: &str) -> Result<Durable, String> {
        let setup = postgres::connect(url).await?;
        setup
            .batch_execute(CREATE_TABLES)
            .await
            .map_err(|e| postgres::pg_error(&e))?;
        drop(setup);
        let (queue, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(Mutex::new(receiver));
        let count = committers();
        let mut committers = Vec::with_capacity(count);
        for _ in 0..count {
            let client = postgres::connect_as(url, COMMITS_CLIENT).await?;
            // The outcomes' join finds each call by its primary key from the first batch on:
            // planned on the fresh, empty table, it would scan the whole table instead until
            // autovacuum's first ANALYZE (a minute or more of a slower baseline).
            client
                .batch_execute("SET enable_seqscan = off")
                .await
                .map_err(|e| postgres::pg_error(&e))?;
            let statement = client
                .prepare(COMMIT_BATCH)
                .await
                .map_err(|e| postgres::pg_error(&e))?;
            let backend = client
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .ok()
                .and_then(|row| u32::try_from(row.get::<_, i32>(0)).ok());
            let receiver = receiver.clone();
            committers.push(tokio::spawn(async move {
                commit_loop(client, statement, receiver).await;
                backend.and_then(cpu::process_s).unwrap_or(0.0)
            }));
        }
        Ok(Durable { queue, committers })
    }

    /// A handle for one client.
    pub fn client(&self) -> DurableClient {
        DurableClient(self.queue.clone())
    }

    /// Waits for the committers once every client is gone; the CPU their backends used.
    pub async fn finish(self) -> f64 {
        drop(self.queue);
        let mut backends_s = 0.0;
        for committer in self.committers {
            backends_s += committer.await.unwrap_or(0.0);
        }
        backends_s
    }
}

/// One client of the queue.
pub struct DurableClient(mpsc::UnboundedSender<Entry>);

impl DurableClient {
    /// One call: its intent committed, then its outcome; whether both were.
    pub async fn call(&self, call_id: String) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.0.send(Entry::Intent(call_id.clone(), tx)).is_err() || rx.await != Ok(true) {
            return false;
        }
        // The tool runs here, and takes no time.
        let (tx, rx) = oneshot::channel();
        self.0.send(Entry::Outcome(call_id, tx)).is_ok() && rx.await == Ok(true)
    }
}

async fn commit_loop(
    client: tokio_postgres::Client,
    statement: tokio_postgres::Statement,
    receiver: Arc<Mutex<mpsc::UnboundedReceiver<Entry>>>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            let mut queue = receiver.lock().await;
            if queue.recv_many(&mut batch, MAX_BATCH).await == 0 {
                return;
            }
        }
        let mut intents = Vec::new();
        let mut outcomes = Vec::new();
        for entry in &batch {
            match entry {
                Entry::Intent(call_id, _) => intents.push(call_id.as_str()),
                Entry::Outcome(call_id, _) => outcomes.push(call_id.as_str()),
            }
        }
        let now = toolgate::store::Timestamp::now().0;
        // Each call's idempotency key is its id (unique, as the bench's write keys are).
        let committed = client
            .query_one(
                &statement,
                &[&intents, &intents, &EMAIL_BODY, &outcomes, &now, &OUTPUT],
            )
            .await
            .ok()
            .map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1)));
        // A batch is all or nothing: the counts say whether every row of it was written.
        let whole = committed
            .is_some_and(|(i, o)| i as usize == intents.len() && o as usize == outcomes.len());
        for entry in batch.drain(..) {
            let (Entry::Intent(_, reply) | Entry::Outcome(_, reply)) = entry;
            let _ = reply.send(whole);
        }
    }
}
