//! The embedded default store: one SQLite file in WAL mode, `synchronous = FULL`.
//!
//! Writes go through one writer thread that owns the only writing connection. It takes every
//! write waiting in its queue, applies each in its own savepoint inside one transaction, commits
//! once (one fsync for the whole batch: group commit), and only then answers each caller. So a
//! write that returned is on disk, and concurrent calls share the cost of the disk's flush
//! instead of queueing behind one flush each. Reads run on a small pool of separate connections
//! (WAL lets them read while the writer writes), on tokio's blocking threads.
//!
//! Opening the store recovers from a crash: calls left `running` by a previous process become
//! `interrupted` (read, idempotent) or `needs_reconciliation` (write). One server owns one
//! SQLite file; several servers share a database through a server-based backend instead.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::{
    Approval, ApprovalPage, ApprovalState, CallError, CallEvent, CallFilter, CallPage, CallRecord,
    CallStatus, CallSummary, Inserted, NewCall, Outcome, Reconciled, Rerun, Resolution, Resolved,
    Settlement, Store, StoreError, SuspensionView, Timestamp,
};
use crate::contract::meta::Effect;

/// Versioned schema changes, applied in order; `PRAGMA user_version` records the last applied.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/sqlite/0001_calls_and_suspensions.sql"),
    include_str!("migrations/sqlite/0002_idempotency_events_auth.sql"),
    include_str!("migrations/sqlite/0003_derived_events.sql"),
    include_str!("migrations/sqlite/0004_suspension_tool.sql"),
];

/// The most writes someone waits for committed in one transaction.
const MAX_BATCH: usize = 512;

/// How long records written behind the answer wait for company before the writer commits them
/// (unless a write someone waits for comes first and takes them along). The price of an fsync is
/// then paid by every record of that window, not by a handful each. A crash loses at most this
/// window of `read` records, which have no effect to lose; a clean shutdown loses none.
const BEHIND_WINDOW: Duration = Duration::from_millis(10);

/// Records written behind that make the writer commit at once instead of waiting out the window.
const BEHIND_FULL: usize = 2048;

/// The most reads at once, and the read connections kept open; more reads wait for a free
/// one. Few connections stay warm: each has its own page cache, and a cold one pays a system
/// call per page (and memory per cache) that a warm one does not. Two cores do not need more.
const MAX_READERS: usize = 4;
const MAX_IDLE_READERS: usize = MAX_READERS;

/// The embedded SQLite store. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// Held (an exclusive advisory lock on `<db>.lock`) for as long as the store is open: a
    /// second server on the same file would "recover" the first one's running calls.
    _lock: std::fs::File,
    /// `None` only while dropping.
    writer: Option<mpsc::Sender<Msg>>,
    /// Records written behind the answer, waiting for the writer to commit them.
    behind: Arc<Mutex<Behind>>,
    /// Joined on drop, so every queued write is committed before the store is gone.
    thread: Option<std::thread::JoinHandle<()>>,
    readers: Mutex<Vec<Connection>>,
    read_slots: tokio::sync::Semaphore,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue ends the writer thread once it has committed what is queued
        // (written-behind records included); waiting for it is what makes a clean shutdown lose
        // nothing.
        drop(self.writer.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the writer thread is sent.
#[allow(
    clippy::large_enum_variant,
    reason = "moved once into the channel's slots; a box would cost an allocation per write"
)]
enum Msg {
    /// A write someone waits for.
    Write(Job),
    /// Records written behind are waiting: commit them within [`BEHIND_WINDOW`].
    BehindWaiting,
    /// [`BEHIND_FULL`] records written behind are waiting: commit them now.
    BehindFull,
}

/// Records written behind the answer, not yet taken by the writer.
#[derive(Default)]
struct Behind {
    records: Vec<(PreparedCall, Prepared)>,
    /// `BehindWaiting` was sent for these records (the writer resets it when it takes them).
    signalled: bool,
}

impl Behind {
    fn take(this: &Mutex<Behind>) -> Vec<(PreparedCall, Prepared)> {
        let mut behind = this.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        behind.signalled = false;
        std::mem::take(&mut behind.records)
    }
}

/// One write and where its result goes once committed.
struct Job {
    op: WriteOp,
    reply: oneshot::Sender<Result<Reply, StoreError>>,
}

enum WriteOp {
    Insert(PreparedCall, Option<Prepared>),
    Finish(String, u32, Prepared),
    Rerun(String),
    Resolve(String, Resolution, Option<String>),
    Reconcile(String, Settlement, Option<String>),
    /// Nothing: proves the writer thread is alive and can take the write lock.
    Ping,
}

enum Reply {
    Done,
    Inserted(Inserted),
    Rerun(Option<Box<Rerun>>),
    Resolved(Box<Resolved>),
    Reconciled(Box<Reconciled>),
}

/// A new call with its JSON already serialized: that work is done by the caller's task, not by
/// the one writer thread everyone waits for.
struct PreparedCall {
    call_id: String,
    tool: String,
    effect: &'static str,
    caller: Option<String>,
    input: String,
    idempotency_key: Option<String>,
    attempts: u32,
    created_at: i64,
}

impl PreparedCall {
    fn new(call: NewCall) -> Self {
        PreparedCall {
            input: json_text(&call.input),
            call_id: call.call_id,
            tool: call.tool,
            effect: call.effect.as_str(),
            caller: call.caller,
            idempotency_key: call.idempotency_key,
            attempts: call.attempts,
            created_at: call.created_at.0,
        }
    }
}

/// An outcome as the rows it becomes, serialized by the caller.
struct Prepared {
    /// When the outcome came about (Unix ms): the time of its event.
    at: i64,
    status: CallStatus,
    output: Option<String>,
    error: Option<String>,
    /// token, reason, input schema, expiry
    suspension: Option<(String, String, String, Option<i64>)>,
    /// The outcome's event, as stored in the call's `events` array; `None` for `completed`,
    /// which is written only when needed (see [`Prepared::event`]).
    event: Option<String>,
    attempts: u32,
}

impl Prepared {
    fn new(outcome: &Outcome, attempts: u32) -> Result<Self, StoreError> {
        let now = Timestamp::now().0;
        Ok(match outcome {
            Outcome::Completed { output } => Prepared {
                at: now,
                status: CallStatus::Completed,
                output: Some(json_text(output)),
                error: None,
                suspension: None,
                event: None,
                attempts,
            },
            Outcome::Failed { error } => Prepared::failed(CallStatus::Failed, error, attempts)?,
            Outcome::NeedsReconciliation { error } => {
                Prepared::failed(CallStatus::NeedsReconciliation, error, attempts)?
            }
            Outcome::Suspended {
                token,
                reason,
                input_schema,
                expires_at,
            } => Prepared {
                at: now,
                status: CallStatus::Suspended,
                output: None,
                error: None,
                event: Some(event_json(
                    now,
                    "suspended",
                    None,
                    Some(&json!({ "reason": reason })),
                )),
                attempts,
                suspension: Some((
                    token.clone(),
                    reason.clone(),
                    json_text(input_schema),
                    expires_at.map(|t| t.0),
                )),
            },
        })
    }

    fn failed(status: CallStatus, error: &CallError, attempts: u32) -> Result<Self, StoreError> {
        let details = json!({ "error": error, "attempts": attempts });
        let now = Timestamp::now().0;
        Ok(Prepared {
            at: now,
            status,
            output: None,
            error: Some(to_json(error)?),
            suspension: None,
            event: Some(event_json(now, status.as_str(), None, Some(&details))),
            attempts,
        })
    }

    /// The outcome's event, as stored in the call's `events` array. A call inserted already
    /// completed does not store it (see [`DERIVED_EVENTS`]), so it is written only here.
    fn event(&self) -> std::borrow::Cow<'_, str> {
        match &self.event {
            Some(event) => event.into(),
            None => event_json(
                self.at,
                "completed",
                None,
                Some(&Attempts {
                    attempts: self.attempts,
                }),
            )
            .into(),
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, brings its schema up to date, recovers
    /// calls a previous process left running, and starts the writer thread.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let lock = lock(&path)?;
        let mut conn = open_connection(&path)?;
        // WAL lets readers work beside the writer; it is a property of the file, set once.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend)?;
        migrate(&mut conn)?;
        recover(&mut conn)?;
        let (writer, queue) = mpsc::channel();
        let behind = Arc::new(Mutex::new(Behind::default()));
        let taken = behind.clone();
        let thread = std::thread::Builder::new()
            .name("toolgate-sqlite-writer".into())
            .spawn(move || write_loop(conn, queue, &taken))
            .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                _lock: lock,
                writer: Some(writer),
                behind,
                thread: Some(thread),
                readers: Mutex::new(Vec::new()),
                read_slots: tokio::sync::Semaphore::new(MAX_READERS),
            }),
        })
    }

    /// The opened database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Queues `op` for the writer; the receiver answers once it is committed.
    fn send(&self, msg: Msg) -> Result<(), StoreError> {
        self.inner
            .writer
            .as_ref()
            .ok_or_else(stopped)?
            .send(msg)
            .map_err(|_| stopped())
    }

    /// Queues `op` for the writer and waits until it is committed.
    async fn write(&self, op: WriteOp) -> Result<Reply, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Msg::Write(Job { op, reply }))?;
        answer.await.map_err(|_| stopped())?
    }

    /// Runs `f` on a read connection, on a blocking thread.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let _slot = self
            .inner
            .read_slots
            .acquire()
            .await
            .map_err(|_| StoreError::Backend("the store is closed".into()))?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = inner.readers.lock().ok().and_then(|mut pool| pool.pop());
            let conn = match pooled {
                Some(conn) => conn,
                None => {
                    let conn = open_connection(&inner.path)?;
                    conn.pragma_update(None, "query_only", true)
                        .map_err(backend)?;
                    conn
                }
            };
            let result = f(&conn);
            if let Ok(mut pool) = inner.readers.lock()
                && pool.len() < MAX_IDLE_READERS
            {
                pool.push(conn);
            }
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("read task failed: {e}")))?
    }
}

/// Takes the exclusive lock that makes this process the store's only owner.
fn lock(path: &Path) -> Result<std::fs::File, StoreError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StoreError::Backend(format!("cannot open the lock file: {e}")))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(StoreError::Locked(path.display().to_string()))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(StoreError::Backend(format!("cannot lock the store: {e}")))
        }
    }
}

fn stopped() -> StoreError {
    StoreError::Backend("the writer thread has stopped".into())
}

fn backend(err: rusqlite::Error) -> StoreError {
    StoreError::Backend(err.to_string())
}

fn unexpected_reply() -> StoreError {
    StoreError::Backend("unexpected reply from the writer thread".into())
}

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(backend)?;
    // FULL: a commit returns only after the WAL is fsynced, so an acknowledged call survives a
    // power cut, not only a crash of this process.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(backend)?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(backend)?;
    // Another process (a second server on the same file) may hold the write lock briefly.
    conn.busy_timeout(Duration::from_secs(5)).map_err(backend)?;
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let supported = MIGRATIONS.len() as i64;
    let current: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(backend)?;
    if current > supported {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as i64 + 1;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Exclusive)
            .map_err(backend)?;
        tx.execute_batch(sql)
            .map_err(|e| StoreError::Backend(format!("migration {version} failed: {e}")))?;
        tx.pragma_update(None, "user_version", version)
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        tracing::info!(version, "applied store migration");
    }
    Ok(())
}

/// Settles calls a previous process left `running`: a read or idempotent call may run again
/// when its request comes back (`interrupted`); a write's effect may have happened, so a person
/// decides (`needs_reconciliation`).
fn recover(conn: &mut Connection) -> Result<(), StoreError> {
    let now = Timestamp::now().0;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let mut counts = [0usize; 2];
    {
        let mut running = tx
            .prepare("SELECT call_id, effect FROM calls WHERE status = 'running'")
            .map_err(backend)?;
        let rows: Vec<(String, String)> = running
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(backend)?
            .collect::<Result<_, _>>()
            .map_err(backend)?;
        for (call_id, effect) in rows {
            let (status, slot) = if effect == "write" {
                (CallStatus::NeedsReconciliation, 1)
            } else {
                (CallStatus::Interrupted, 0)
            };
            tx.execute(
                "UPDATE calls SET status = ?2, updated_at = ?3 WHERE call_id = ?1",
                params![call_id, status.as_str(), now],
            )
            .map_err(backend)?;
            append_event(
                &tx,
                &call_id,
                now,
                status.as_str(),
                None,
                Some(&json!({"reason": "the server stopped while the call was running"})),
            )?;
            counts[slot] += 1;
        }
    }
    tx.commit().map_err(backend)?;
    if counts != [0, 0] {
        tracing::warn!(
            interrupted = counts[0],
            needs_reconciliation = counts[1],
            "recovered calls left running by a previous process"
        );
    }
    Ok(())
}

/// The writer thread: batch, apply, commit once, answer. Ends when every sender is gone, after
/// committing what is left.
fn write_loop(mut conn: Connection, queue: mpsc::Receiver<Msg>, behind: &Mutex<Behind>) {
    let mut open = true;
    while open {
        let mut jobs = Vec::new();
        match queue.recv() {
            Ok(Msg::Write(job)) => jobs.push(job),
            // Records written behind wait for company for a while, unless a write someone
            // waits for (or a full queue) comes first.
            Ok(Msg::BehindWaiting) => {
                let deadline = std::time::Instant::now() + BEHIND_WINDOW;
                loop {
                    match queue
                        .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
                    {
                        Ok(Msg::Write(job)) => {
                            jobs.push(job);
                            break;
                        }
                        Ok(Msg::BehindWaiting) => continue,
                        Ok(Msg::BehindFull) | Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
            }
            Ok(Msg::BehindFull) => {}
            Err(mpsc::RecvError) => open = false,
        }
        while open && jobs.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(Msg::Write(job)) => jobs.push(job),
                Ok(Msg::BehindWaiting | Msg::BehindFull) => {}
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => open = false,
            }
        }
        // Taken after the writes: a read-your-writes probe (`Ping`) commits every record
        // written behind before it was sent.
        let records = Behind::take(behind);
        if jobs.is_empty() && records.is_empty() {
            continue;
        }
        let (ops, replies): (Vec<WriteOp>, Vec<_>) =
            jobs.into_iter().map(|job| (job.op, job.reply)).unzip();
        let results = apply_batch(&mut conn, ops, records);
        for (reply, result) in replies.into_iter().zip(results) {
            // The caller went away: a failure must still be heard.
            if let Err(Err(err)) = reply.send(result) {
                tracing::error!(error = %err, "a write whose caller went away failed");
            }
        }
    }
}

/// Applies every op in one transaction, each inside its own savepoint so one failing op does not
/// undo the others, and inserts the records written behind. If the commit itself fails, every op
/// fails and the records are lost (and logged).
fn apply_batch(
    conn: &mut Connection,
    ops: Vec<WriteOp>,
    records: Vec<(PreparedCall, Prepared)>,
) -> Vec<Result<Reply, StoreError>> {
    let count = ops.len();
    let behind = records.len();
    let fail_all = |err: rusqlite::Error| {
        tracing::error!(error = %err, lost_read_records = behind, "store commit failed");
        (0..count)
            .map(|_| Err(StoreError::Backend(err.to_string())))
            .collect()
    };
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(err) => return fail_all(err),
    };
    let now = Timestamp::now().0;
    let mut results = Vec::with_capacity(count);
    for op in ops {
        let result = match tx.savepoint() {
            Ok(sp) => match apply(&sp, op, now) {
                Ok(reply) => sp.commit().map(|()| reply).map_err(backend),
                // Dropping the savepoint rolls back what the op did.
                Err(err) => Err(err),
            },
            Err(err) => Err(backend(err)),
        };
        results.push(result);
    }
    insert_read_records(&tx, records);
    match tx.commit() {
        Ok(()) => results,
        Err(err) => fail_all(err),
    }
}

fn apply(conn: &Connection, op: WriteOp, now: i64) -> Result<Reply, StoreError> {
    match op {
        WriteOp::Insert(call, outcome) => insert(conn, call, outcome, now).map(Reply::Inserted),
        WriteOp::Finish(call_id, attempts, outcome) => {
            record_outcome(conn, &call_id, attempts, outcome, now)?;
            Ok(Reply::Done)
        }
        WriteOp::Rerun(call_id) => {
            let changed = conn
                .prepare_cached(
                    "UPDATE calls SET status = 'running', attempts = attempts + 1, \
                     updated_at = ?2 WHERE call_id = ?1 AND status = 'interrupted'",
                )
                .and_then(|mut st| st.execute(params![call_id, now]))
                .map_err(backend)?;
            if changed == 0 {
                return Ok(Reply::Rerun(None));
            }
            append_event(
                conn,
                &call_id,
                now,
                "redispatched",
                None,
                Some(&json!({"after": "interrupted"})),
            )?;
            // The call's latest suspension, if approved, is what the interrupted run resumed.
            let resume: Option<(String, Option<String>)> = conn
                .prepare_cached(
                    "SELECT status, resume_input FROM suspensions WHERE call_id = ?1 \
                     ORDER BY seq DESC LIMIT 1",
                )
                .and_then(|mut st| {
                    st.query_row([&call_id], |row| Ok((row.get(0)?, row.get(1)?)))
                        .optional()
                })
                .map_err(backend)?;
            let resume_input = match resume {
                Some((status, Some(input))) if status == "approved" => Some(parse_json(&input)?),
                _ => None,
            };
            Ok(Reply::Rerun(Some(Box::new(Rerun {
                call: load_call(conn, &call_id, now)?,
                resume_input,
            }))))
        }
        WriteOp::Resolve(token, resolution, actor) => {
            resolve(conn, &token, resolution, actor.as_deref(), now)
                .map(|resolved| Reply::Resolved(Box::new(resolved)))
        }
        WriteOp::Reconcile(call_id, settlement, actor) => {
            reconcile(conn, &call_id, settlement, actor.as_deref(), now)
                .map(|reconciled| Reply::Reconciled(Box::new(reconciled)))
        }
        WriteOp::Ping => Ok(Reply::Done),
    }
}

/// Inserts a call; with an idempotency key that another call of the tool holds, nothing.
const INSERT_CALL: &str = "INSERT INTO calls (call_id, tool, effect, caller, status, input, \
    output, error, idempotency_key, attempts, created_at, updated_at, events) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT DO NOTHING";

/// A new call's `events` array: `created`, and its outcome's event when it has one. A call
/// inserted already completed stores [`DERIVED_EVENTS`] instead.
fn events_json(call: &PreparedCall, outcome: Option<&Prepared>) -> String {
    let created = || event_json::<Value>(call.created_at, "created", call.caller.as_deref(), None);
    match outcome {
        Some(outcome) if outcome.status == CallStatus::Completed => DERIVED_EVENTS.to_owned(),
        Some(outcome) => format!("[{},{}]", created(), outcome.event()),
        None => format!("[{}]", created()),
    }
}

/// The `events` of a call inserted already completed (most of them: every read): its two
/// events, `created` and `completed`, say nothing its columns do not (`created_at` and
/// `caller`; `updated_at` and `attempts`), so they are not written, which keeps the most
/// common row at about half its size. [`RawCall::decode`] derives them. A completed call
/// never gains another event.
const DERIVED_EVENTS: &str = "";

/// The events of a call stored with [`DERIVED_EVENTS`].
fn derived_events(raw: &RawCall) -> Vec<CallEvent> {
    vec![
        CallEvent {
            at: Timestamp(raw.created_at),
            kind: "created".to_owned(),
            actor: raw.caller.clone(),
            details: None,
        },
        CallEvent {
            at: Timestamp(raw.updated_at),
            kind: CallStatus::Completed.as_str().to_owned(),
            actor: None,
            details: Some(json!({ "attempts": raw.attempts })),
        },
    ]
}

/// Runs [`INSERT_CALL`] for `call`. A call recorded with its outcome is inserted as it ends, in
/// one row with both its events: no `running` row to update a moment later.
fn execute_insert(
    statement: &mut rusqlite::Statement<'_>,
    call: &PreparedCall,
    outcome: Option<&Prepared>,
) -> rusqlite::Result<usize> {
    let (status, output, error, updated_at) = match outcome {
        Some(o) => (o.status, o.output.as_deref(), o.error.as_deref(), o.at),
        None => (CallStatus::Running, None, None, call.created_at),
    };
    statement.execute(params![
        call.call_id,
        call.tool,
        call.effect,
        call.caller,
        status.as_str(),
        call.input,
        output,
        error,
        call.idempotency_key,
        i64::from(call.attempts),
        call.created_at,
        updated_at,
        events_json(call, outcome)
    ])
}

fn insert(
    conn: &Connection,
    call: PreparedCall,
    outcome: Option<Prepared>,
    now: i64,
) -> Result<Inserted, StoreError> {
    // The conditional insert: a second call with the same (tool, idempotency key) writes
    // nothing, and the one that exists is returned instead.
    let changed = conn
        .prepare_cached(INSERT_CALL)
        .and_then(|mut st| execute_insert(&mut st, &call, outcome.as_ref()))
        .map_err(backend)?;
    if changed == 0 {
        let existing: Option<String> = match &call.idempotency_key {
            Some(key) => conn
                .prepare_cached(
                    "SELECT call_id FROM calls WHERE tool = ?1 AND idempotency_key = ?2",
                )
                .and_then(|mut st| {
                    st.query_row(params![call.tool, key], |row| row.get(0))
                        .optional()
                })
                .map_err(backend)?,
            None => None,
        };
        return match existing {
            Some(call_id) => Ok(Inserted::Existing(Box::new(load_call(
                conn, &call_id, now,
            )?))),
            None => Err(StoreError::Backend(format!(
                "call id {} already exists",
                call.call_id
            ))),
        };
    }
    if let Some(suspension) = outcome.and_then(|o| o.suspension) {
        insert_suspension(conn, &call.call_id, suspension, now)?;
    }
    Ok(Inserted::New)
}

/// Inserts records written behind the answer: finished `read` calls without an idempotency key,
/// so nothing can conflict. Completed ones go [`COMPLETED_READS_PER_INSERT`] to a statement, the
/// rest one each. No savepoints: a failing statement undoes only its own rows, which are logged.
fn insert_read_records(conn: &Connection, records: Vec<(PreparedCall, Prepared)>) {
    if records.is_empty() {
        return;
    }
    let (completed, others): (Vec<_>, Vec<_>) = records.into_iter().partition(|(call, outcome)| {
        outcome.status == CallStatus::Completed && call.idempotency_key.is_none()
    });
    let mut chunks = completed.chunks_exact(COMPLETED_READS_PER_INSERT);
    for chunk in chunks.by_ref() {
        let result = conn
            .prepare_cached(insert_completed_reads_sql(COMPLETED_READS_PER_INSERT))
            .and_then(|mut statement| {
                for (row, (call, outcome)) in chunk.iter().enumerate() {
                    bind_completed_read(
                        &mut statement,
                        row * COMPLETED_READ_PARAMS,
                        call,
                        outcome,
                    )?;
                }
                statement.raw_execute()
            });
        match result {
            Ok(written) if written == chunk.len() => {}
            Ok(written) => tracing::error!(
                lost = chunk.len() - written,
                "read call records could not be written: their call ids are taken"
            ),
            Err(err) => tracing::error!(
                error = %err,
                lost = chunk.len(),
                "read call records could not be written"
            ),
        }
    }
    for (call, outcome) in chunks.remainder() {
        let result =
            conn.prepare_cached(insert_completed_reads_sql(1))
                .and_then(|mut statement| {
                    bind_completed_read(&mut statement, 0, call, outcome)?;
                    statement.raw_execute()
                });
        log_read_record_result(&call.call_id, result);
    }
    for (call, outcome) in &others {
        let result = conn
            .prepare_cached(INSERT_CALL)
            .and_then(|mut statement| execute_insert(&mut statement, call, Some(outcome)));
        log_read_record_result(&call.call_id, result);
    }
}

fn log_read_record_result(call_id: &str, result: rusqlite::Result<usize>) {
    let error = match result {
        Ok(1) => return,
        Ok(_) => "the call id is taken".to_owned(),
        Err(err) => err.to_string(),
    };
    tracing::error!(error, call_id, "a read call's record could not be written");
}

/// How many completed reads one statement inserts: SQLite's work per statement (opening a
/// cursor on each of the table's B-trees and indexes, halting, resetting) is then shared.
const COMPLETED_READS_PER_INSERT: usize = 32;
/// The parameters [`bind_completed_read`] binds per row.
const COMPLETED_READ_PARAMS: usize = 9;

/// Binds one completed read's row as parameters `offset + 1 ..= offset + 9`.
fn bind_completed_read(
    statement: &mut rusqlite::Statement<'_>,
    offset: usize,
    call: &PreparedCall,
    outcome: &Prepared,
) -> rusqlite::Result<()> {
    statement.raw_bind_parameter(offset + 1, &call.call_id)?;
    statement.raw_bind_parameter(offset + 2, &call.tool)?;
    statement.raw_bind_parameter(offset + 3, call.effect)?;
    statement.raw_bind_parameter(offset + 4, &call.caller)?;
    statement.raw_bind_parameter(offset + 5, &call.input)?;
    statement.raw_bind_parameter(offset + 6, &outcome.output)?;
    statement.raw_bind_parameter(offset + 7, i64::from(call.attempts))?;
    statement.raw_bind_parameter(offset + 8, call.created_at)?;
    statement.raw_bind_parameter(offset + 9, outcome.at)
}

/// [`INSERT_CALL`] for the most common row by far, a completed read written behind its answer,
/// `rows` (1 or [`COMPLETED_READS_PER_INSERT`]) at a time: what is the same in every such row is
/// part of the statement instead of bound each time.
fn insert_completed_reads_sql(rows: usize) -> &'static str {
    use std::sync::OnceLock;
    static ONE: OnceLock<String> = OnceLock::new();
    static CHUNK: OnceLock<String> = OnceLock::new();
    let cell = if rows == 1 { &ONE } else { &CHUNK };
    debug_assert!(rows == 1 || rows == COMPLETED_READS_PER_INSERT);
    cell.get_or_init(|| {
        let values: Vec<String> = (0..rows)
            .map(|row| {
                let p: Vec<String> = (1..=COMPLETED_READ_PARAMS)
                    .map(|n| format!("?{}", row * COMPLETED_READ_PARAMS + n))
                    .collect();
                format!(
                    "({}, {}, {}, {}, 'completed', {}, {}, NULL, NULL, {}, {}, {}, \
                     '{DERIVED_EVENTS}')",
                    p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]
                )
            })
            .collect();
        format!(
            "INSERT INTO calls (call_id, tool, effect, caller, status, input, output, error, \
             idempotency_key, attempts, created_at, updated_at, events) VALUES {} \
             ON CONFLICT DO NOTHING",
            values.join(", ")
        )
    })
}

fn insert_suspension(
    conn: &Connection,
    call_id: &str,
    (token, reason, input_schema, expires_at): (String, String, String, Option<i64>),
    now: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO suspensions (token, call_id, tool, reason, input_schema, status, \
         created_at, expires_at) \
         SELECT ?1, ?2, c.tool, ?3, ?4, 'pending', ?5, ?6 FROM calls c WHERE c.call_id = ?2",
    )
    .and_then(|mut st| {
        st.execute(params![
            token,
            call_id,
            reason,
            input_schema,
            now,
            expires_at
        ])
    })
    .map_err(backend)
    .and_then(|inserted| match inserted {
        1 => Ok(()),
        // The call is written first, in the same transaction.
        _ => Err(StoreError::Backend(format!("no call {call_id} to suspend"))),
    })
}

/// Appends one event to the call's history.
fn append_event(
    conn: &Connection,
    call_id: &str,
    at: i64,
    kind: &str,
    actor: Option<&str>,
    details: Option<&Value>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE calls SET events = json_insert(events, '$[#]', json(?2)) WHERE call_id = ?1",
    )
    .and_then(|mut st| st.execute(params![call_id, event_json(at, kind, actor, details)]))
    .map_err(backend)?;
    Ok(())
}

/// One event as stored in a call's `events` array.
fn event_json<D>(at: i64, kind: &str, actor: Option<&str>, details: Option<&D>) -> String
where
    D: serde::Serialize + ?Sized,
{
    use std::io::Write;
    // Written straight out: one allocation, no JSON tree built only to be printed.
    let mut event = Vec::with_capacity(96);
    let written = write!(event, "{{\"at\":{at},\"kind\":")
        .map_err(serde_json::Error::io)
        .and_then(|()| serde_json::to_writer(&mut event, kind));
    let written = written.and_then(|()| match actor {
        Some(actor) => {
            event.extend_from_slice(b",\"actor\":");
            serde_json::to_writer(&mut event, actor)
        }
        None => Ok(()),
    });
    let written = written.and_then(|()| match details {
        Some(details) => {
            event.extend_from_slice(b",\"details\":");
            serde_json::to_writer(&mut event, details)
        }
        None => Ok(()),
    });
    written.expect("an event's fields are plain data, written to memory");
    event.push(b'}');
    String::from_utf8(event).expect("serde_json writes UTF-8")
}

/// The `details` of a `completed` event.
#[derive(serde::Serialize)]
struct Attempts {
    attempts: u32,
}

/// An event as read back from a call's `events` array.
#[derive(serde::Deserialize)]
struct StoredEvent {
    at: i64,
    kind: String,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    details: Option<Value>,
}

/// Moves the running call `call_id` to its outcome, with its event; a suspension is created
/// with it.
fn record_outcome(
    conn: &Connection,
    call_id: &str,
    attempts: u32,
    outcome: Prepared,
    now: i64,
) -> Result<(), StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE calls SET status = ?2, output = ?3, error = ?4, updated_at = ?5, \
             attempts = ?6, events = json_insert(events, '$[#]', json(?7)) \
             WHERE call_id = ?1 AND status = 'running'",
        )
        .and_then(|mut st| {
            st.execute(params![
                call_id,
                outcome.status.as_str(),
                outcome.output,
                outcome.error,
                now,
                i64::from(attempts),
                outcome.event()
            ])
        })
        .map_err(backend)?;
    if changed == 0 {
        return Err(StoreError::NotRunning {
            call_id: call_id.to_owned(),
        });
    }
    if let Some(suspension) = outcome.suspension {
        insert_suspension(conn, call_id, suspension, now)?;
    }
    Ok(())
}

fn resolve(
    conn: &Connection,
    token: &str,
    resolution: Resolution,
    actor: Option<&str>,
    now: i64,
) -> Result<Resolved, StoreError> {
    let status = match &resolution {
        Resolution::Approve { .. } => "approved",
        Resolution::Reject { .. } => "rejected",
        Resolution::Complete { .. } => "completed",
        // Whoever read it as expired has decided; this only writes it down.
        Resolution::Expire => return unresolved(conn, token, now),
    };
    let (resume_input, reject_reason) = match &resolution {
        Resolution::Approve { resume_input } => (Some(json_text(resume_input)), None),
        Resolution::Reject { reason } => (None, Some(reason.as_str())),
        Resolution::Complete { .. } | Resolution::Expire => (None, None),
    };
    // Conditional on `pending` and unexpired: of two resolutions of one token, the second
    // changes nothing.
    let call_id: Option<String> = conn
        .prepare_cached(
            "UPDATE suspensions SET status = ?2, resume_input = ?3, reject_reason = ?4, \
             resolved_at = ?5, resolved_by = ?6 WHERE token = ?1 AND status = 'pending' \
             AND (expires_at IS NULL OR expires_at > ?5) RETURNING call_id",
        )
        .and_then(|mut st| {
            st.query_row(
                params![token, status, resume_input, reject_reason, now, actor],
                |row| row.get(0),
            )
            .optional()
        })
        .map_err(backend)?;
    let Some(call_id) = call_id else {
        return unresolved(conn, token, now);
    };
    match resolution {
        Resolution::Approve { .. } => {
            conn.prepare_cached(
                "UPDATE calls SET status = 'running', attempts = attempts + 1, updated_at = ?2 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, now]))
            .map_err(backend)?;
            append_event(conn, &call_id, now, "approved", actor, None)?;
            append_event(conn, &call_id, now, "redispatched", None, None)?;
            Ok(Resolved::Approved(load_call(conn, &call_id, now)?))
        }
        Resolution::Reject { reason } => {
            let error = to_json(&CallError::new("rejected", reason.clone()))?;
            conn.prepare_cached(
                "UPDATE calls SET status = 'rejected', error = ?2, updated_at = ?3 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, error, now]))
            .map_err(backend)?;
            append_event(
                conn,
                &call_id,
                now,
                "rejected",
                actor,
                Some(&json!({"reason": reason})),
            )?;
            Ok(Resolved::Rejected(load_call(conn, &call_id, now)?))
        }
        Resolution::Complete { output } => {
            conn.prepare_cached(
                "UPDATE calls SET status = 'completed', output = ?2, updated_at = ?3 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, json_text(&output), now]))
            .map_err(backend)?;
            append_event(conn, &call_id, now, "completed_externally", actor, None)?;
            Ok(Resolved::Completed(load_call(conn, &call_id, now)?))
        }
        Resolution::Expire => unreachable!("handled before the update"),
    }
}

/// Why a token could not be resolved: it never existed, was resolved before, or has expired
/// (which is recorded now, so the call's record says so too).
fn unresolved(conn: &Connection, token: &str, now: i64) -> Result<Resolved, StoreError> {
    let row: Option<(String, String)> = conn
        .prepare_cached("SELECT call_id, status FROM suspensions WHERE token = ?1")
        .and_then(|mut st| {
            st.query_row([token], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(backend)?;
    let Some((call_id, status)) = row else {
        return Ok(Resolved::UnknownToken);
    };
    match status.as_str() {
        "expired" => return Ok(Resolved::Expired(load_call(conn, &call_id, now)?)),
        "pending" => {}
        _ => return Ok(Resolved::AlreadyResolved(load_call(conn, &call_id, now)?)),
    }
    conn.prepare_cached(
        "UPDATE suspensions SET status = 'expired', resolved_at = ?2 WHERE token = ?1",
    )
    .and_then(|mut st| st.execute(params![token, now]))
    .map_err(backend)?;
    let error = to_json(&expired_error())?;
    conn.prepare_cached(
        "UPDATE calls SET status = 'expired', error = ?2, updated_at = ?3 WHERE call_id = ?1",
    )
    .and_then(|mut st| st.execute(params![call_id, error, now]))
    .map_err(backend)?;
    append_event(conn, &call_id, now, "expired", None, None)?;
    Ok(Resolved::Expired(load_call(conn, &call_id, now)?))
}

fn expired_error() -> CallError {
    CallError::new(
        "suspension_expired",
        "The suspension expired before anyone approved or rejected it.",
    )
}

fn reconcile(
    conn: &Connection,
    call_id: &str,
    settlement: Settlement,
    actor: Option<&str>,
    now: i64,
) -> Result<Reconciled, StoreError> {
    let (status, output, error) = match &settlement {
        Settlement::Output(output) => (CallStatus::Completed, Some(json_text(output)), None),
        Settlement::Error(message) => (
            CallStatus::Failed,
            None,
            Some(to_json(&CallError::new(
                "reconciled_as_failed",
                message.clone(),
            ))?),
        ),
    };
    // Settled as failed, the effect did not happen: the key is released so that a new request
    // can make it.
    let changed = conn
        .prepare_cached(
            "UPDATE calls SET status = ?2, output = ?3, error = ?4, updated_at = ?5, \
             idempotency_key = CASE WHEN ?2 = 'failed' THEN NULL ELSE idempotency_key END \
             WHERE call_id = ?1 AND status IN ('needs_reconciliation', 'interrupted')",
        )
        .and_then(|mut st| st.execute(params![call_id, status.as_str(), output, error, now]))
        .map_err(backend)?;
    if changed == 0 {
        return Ok(match find_call(conn, call_id, now)? {
            Some(call) => Reconciled::NotNeeded(call),
            None => Reconciled::UnknownCall,
        });
    }
    append_event(
        conn,
        call_id,
        now,
        "reconciled",
        actor,
        Some(&json!({"status": status.as_str()})),
    )?;
    Ok(Reconciled::Settled(load_call(conn, call_id, now)?))
}

/// A JSON value as text. Written by serde_json's own writer: `Value`'s `Display` goes through
/// the formatting machinery, piece by piece, at about twice the cost.
fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value has string keys and always serializes")
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The columns `raw_call` reads, with the call's pending suspension joined.
const CALL_COLUMNS: &str = "SELECT c.call_id, c.tool, c.effect, c.status, c.caller, \
     c.idempotency_key, c.input, c.output, c.error, c.attempts, c.created_at, c.updated_at, \
     s.token, s.reason, s.input_schema, s.created_at, s.expires_at, c.events \
     FROM calls c LEFT JOIN suspensions s ON s.call_id = c.call_id AND s.status = 'pending'";

fn load_call(conn: &Connection, call_id: &str, now: i64) -> Result<CallRecord, StoreError> {
    find_call(conn, call_id, now)?
        .ok_or_else(|| StoreError::Corrupt(format!("call {call_id} vanished")))
}

fn find_call(conn: &Connection, call_id: &str, now: i64) -> Result<Option<CallRecord>, StoreError> {
    let sql = format!("{CALL_COLUMNS} WHERE c.call_id = ?1");
    let Some(raw) = conn
        .prepare_cached(&sql)
        .and_then(|mut st| st.query_row([call_id], raw_call).optional())
        .map_err(backend)?
    else {
        return Ok(None);
    };
    raw.decode(now).map(Some)
}

/// A call row as stored, before its JSON columns are parsed.
struct RawCall {
    call_id: String,
    tool: String,
    effect: String,
    status: String,
    caller: Option<String>,
    idempotency_key: Option<String>,
    input: String,
    output: Option<String>,
    error: Option<String>,
    attempts: i64,
    created_at: i64,
    updated_at: i64,
    token: Option<String>,
    reason: Option<String>,
    input_schema: Option<String>,
    suspended_at: Option<i64>,
    expires_at: Option<i64>,
    events: String,
}

fn raw_call(row: &Row<'_>) -> rusqlite::Result<RawCall> {
    Ok(RawCall {
        call_id: row.get(0)?,
        tool: row.get(1)?,
        effect: row.get(2)?,
        status: row.get(3)?,
        caller: row.get(4)?,
        idempotency_key: row.get(5)?,
        input: row.get(6)?,
        output: row.get(7)?,
        error: row.get(8)?,
        attempts: row.get(9)?,
        created_at: row.get(10)?,
        updated_at: row.get(11)?,
        token: row.get(12)?,
        reason: row.get(13)?,
        input_schema: row.get(14)?,
        suspended_at: row.get(15)?,
        expires_at: row.get(16)?,
        events: row.get(17)?,
    })
}

fn parse_effect(s: &str) -> Result<Effect, StoreError> {
    match s {
        "read" => Ok(Effect::Read),
        "idempotent" => Ok(Effect::Idempotent),
        "write" => Ok(Effect::Write),
        other => Err(StoreError::Corrupt(format!("unknown effect {other}"))),
    }
}

impl RawCall {
    /// The record as of `now`: a suspension whose time is up shows as `expired` even before
    /// anyone tries to resolve it (which records the expiry).
    fn decode(self, now: i64) -> Result<CallRecord, StoreError> {
        let events = if self.events == DERIVED_EVENTS {
            derived_events(&self)
        } else {
            parse_json::<Vec<StoredEvent>>(&self.events)?
                .into_iter()
                .map(|e| CallEvent {
                    at: Timestamp(e.at),
                    kind: e.kind,
                    actor: e.actor,
                    details: e.details,
                })
                .collect()
        };
        let mut status = CallStatus::parse(&self.status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown call status {}", self.status)))?;
        let mut error = self.error.as_deref().map(parse_json).transpose()?;
        let mut suspension = match (
            self.token,
            self.reason,
            self.input_schema,
            self.suspended_at,
        ) {
            (Some(token), Some(reason), Some(schema), Some(at)) => Some(SuspensionView {
                token,
                reason,
                input_schema: parse_json(&schema)?,
                created_at: Timestamp(at),
                expires_at: self.expires_at.map(Timestamp),
            }),
            _ => None,
        };
        if status == CallStatus::Suspended && self.expires_at.is_some_and(|at| at <= now) {
            status = CallStatus::Expired;
            suspension = None;
            error = Some(expired_error());
        }
        Ok(CallRecord {
            call_id: self.call_id,
            tool: self.tool,
            effect: parse_effect(&self.effect)?,
            status,
            caller: self.caller,
            idempotency_key: self.idempotency_key,
            input: parse_json(&self.input)?,
            output: self.output.as_deref().map(parse_json).transpose()?,
            error,
            suspension,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
            events,
        })
    }
}

/// The approvals columns: seq, token, call_id, tool, reason, input_schema, created_at,
/// expires_at.
const APPROVAL_COLUMNS: &str = "SELECT s.seq, s.token, s.call_id, s.tool, s.reason, \
     s.input_schema, s.created_at, s.expires_at";

fn approval_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, Approval, String)> {
    Ok((
        row.get(0)?,
        Approval {
            token: row.get(1)?,
            call_id: row.get(2)?,
            tool: row.get(3)?,
            reason: row.get(4)?,
            input_schema: Value::Null,
            created_at: Timestamp(row.get(6)?),
            expires_at: row.get::<_, Option<i64>>(7)?.map(Timestamp),
            input: None,
        },
        row.get(5)?,
    ))
}

#[async_trait]
impl Store for SqliteStore {
    async fn insert_call(
        &self,
        call: NewCall,
        outcome: Option<Outcome>,
    ) -> Result<Inserted, StoreError> {
        let attempts = call.attempts;
        let outcome = outcome.map(|o| Prepared::new(&o, attempts)).transpose()?;
        match self
            .write(WriteOp::Insert(PreparedCall::new(call), outcome))
            .await?
        {
            Reply::Inserted(inserted) => Ok(inserted),
            _ => Err(unexpected_reply()),
        }
    }

    async fn finish_call(
        &self,
        call_id: &str,
        attempts: u32,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let outcome = Prepared::new(&outcome, attempts)?;
        self.write(WriteOp::Finish(call_id.to_owned(), attempts, outcome))
            .await
            .map(|_| ())
    }

    async fn rerun_interrupted(&self, call_id: &str) -> Result<Option<Rerun>, StoreError> {
        match self.write(WriteOp::Rerun(call_id.to_owned())).await? {
            Reply::Rerun(rerun) => Ok(rerun.map(|r| *r)),
            _ => Err(unexpected_reply()),
        }
    }

    async fn insert_behind(&self, call: NewCall, outcome: &Outcome) -> Result<(), StoreError> {
        // Not awaited: the writer commits it with the next batch, or within `BEHIND_WINDOW`.
        let outcome = Prepared::new(outcome, call.attempts)?;
        let record = (PreparedCall::new(call), outcome);
        let wake = {
            let mut behind = self
                .inner
                .behind
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            behind.records.push(record);
            if behind.records.len() == BEHIND_FULL {
                Some(Msg::BehindFull)
            } else if !behind.signalled {
                behind.signalled = true;
                Some(Msg::BehindWaiting)
            } else {
                None
            }
        };
        match wake {
            Some(msg) => self.send(msg),
            None => Ok(()),
        }
    }

    async fn call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        let owned = call_id.to_owned();
        let found = self
            .read(move |conn| find_call(conn, &owned, Timestamp::now().0))
            .await?;
        if found.is_some() {
            return Ok(found);
        }
        // Read-your-writes: it may be written behind and still queued. The queue is committed
        // in order, so once a no-op queued after it is committed, so is the record.
        self.write(WriteOp::Ping).await?;
        let owned = call_id.to_owned();
        self.read(move |conn| find_call(conn, &owned, Timestamp::now().0))
            .await
    }

    async fn list_calls(
        &self,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<CallPage, StoreError> {
        // Records written behind are committed first, so a list shows every answered call.
        self.write(WriteOp::Ping).await?;
        self.read(move |conn| {
            // A suspended call whose time is up is expired, though stored as suspended: the
            // status is computed here so that filters and pages agree with what records show.
            let mut st = conn
                .prepare_cached(
                    "SELECT c.rowid, c.call_id, c.tool, c.effect, \
                     CASE WHEN c.status = 'suspended' AND s.expires_at IS NOT NULL \
                          AND s.expires_at <= ?5 THEN 'expired' ELSE c.status END AS shown, \
                     c.caller, c.idempotency_key, c.created_at, c.updated_at, c.attempts \
                     FROM calls c \
                     LEFT JOIN suspensions s ON s.call_id = c.call_id AND s.status = 'pending' \
                     WHERE (?1 IS NULL OR shown = ?1) AND (?2 IS NULL OR c.tool = ?2) \
                     AND c.rowid < ?3 ORDER BY c.rowid DESC LIMIT ?4",
                )
                .map_err(backend)?;
            let rows = st
                .query_map(
                    params![
                        filter.status.map(CallStatus::as_str),
                        filter.tool,
                        after.unwrap_or(i64::MAX),
                        i64::from(limit) + 1,
                        Timestamp::now().0
                    ],
                    |row| {
                        Ok((
                            row.get::<_, i64>(0)?,
                            row.get::<_, String>(3)?,
                            row.get::<_, String>(4)?,
                            CallSummary {
                                call_id: row.get(1)?,
                                tool: row.get(2)?,
                                effect: Effect::Read,
                                status: CallStatus::Running,
                                caller: row.get(5)?,
                                idempotency_key: row.get(6)?,
                                created_at: Timestamp(row.get(7)?),
                                updated_at: Timestamp(row.get(8)?),
                                attempts: u32::try_from(row.get::<_, i64>(9)?).unwrap_or(u32::MAX),
                            },
                        ))
                    },
                )
                .map_err(backend)?;
            let mut calls = Vec::with_capacity(limit as usize);
            let mut next_cursor = None;
            let mut more = false;
            for row in rows {
                let (rowid, effect, status, mut call) = row.map_err(backend)?;
                if calls.len() == limit as usize {
                    more = true;
                    break;
                }
                call.effect = parse_effect(&effect)?;
                call.status = CallStatus::parse(&status)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown call status {status}")))?;
                next_cursor = Some(rowid);
                calls.push(call);
            }
            Ok(CallPage {
                calls,
                next_cursor: if more { next_cursor } else { None },
            })
        })
        .await
    }

    async fn pending_approvals(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError> {
        self.read(move |conn| {
            let sql = format!(
                "{APPROVAL_COLUMNS} FROM suspensions s \
                 WHERE s.status = 'pending' AND s.seq > ?1 \
                 AND (s.expires_at IS NULL OR s.expires_at > ?3) ORDER BY s.seq LIMIT ?2"
            );
            let mut st = conn.prepare_cached(&sql).map_err(backend)?;
            // One more than asked tells whether another page follows.
            let rows = st
                .query_map(
                    params![after.unwrap_or(0), i64::from(limit) + 1, Timestamp::now().0],
                    approval_from_row,
                )
                .map_err(backend)?;
            let mut approvals = Vec::with_capacity(limit as usize);
            let mut next_cursor = None;
            let mut more = false;
            for row in rows {
                let (seq, mut approval, schema) = row.map_err(backend)?;
                if approvals.len() == limit as usize {
                    more = true;
                    break;
                }
                approval.input_schema = parse_json(&schema)?;
                next_cursor = Some(seq);
                approvals.push(approval);
            }
            Ok(ApprovalPage {
                approvals,
                next_cursor: if more { next_cursor } else { None },
            })
        })
        .await
    }

    async fn approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError> {
        let token = token.to_owned();
        self.read(move |conn| {
            let now = Timestamp::now().0;
            let sql = format!(
                "{APPROVAL_COLUMNS}, c.input, s.status FROM suspensions s \
                 JOIN calls c ON c.call_id = s.call_id WHERE s.token = ?1"
            );
            let row = conn
                .prepare_cached(&sql)
                .and_then(|mut st| {
                    st.query_row([&token], |row| {
                        Ok((
                            approval_from_row(row)?,
                            row.get::<_, String>(8)?,
                            row.get::<_, String>(9)?,
                        ))
                    })
                    .optional()
                })
                .map_err(backend)?;
            let Some(((_, mut approval, schema), input, status)) = row else {
                return Ok(None);
            };
            if status == "expired" {
                return Ok(Some(ApprovalState::Expired(load_call(
                    conn,
                    &approval.call_id,
                    now,
                )?)));
            }
            if status != "pending" {
                return Ok(Some(ApprovalState::Resolved(load_call(
                    conn,
                    &approval.call_id,
                    now,
                )?)));
            }
            if approval.expires_at.is_some_and(|at| at.0 <= now) {
                return Ok(Some(ApprovalState::Expired(load_call(
                    conn,
                    &approval.call_id,
                    now,
                )?)));
            }
            approval.input_schema = parse_json(&schema)?;
            approval.input = Some(parse_json(&input)?);
            Ok(Some(ApprovalState::Pending(approval)))
        })
        .await
    }

    async fn resolve(
        &self,
        token: &str,
        resolution: Resolution,
        actor: Option<&str>,
    ) -> Result<Resolved, StoreError> {
        let op = WriteOp::Resolve(token.to_owned(), resolution, actor.map(str::to_owned));
        match self.write(op).await? {
            Reply::Resolved(resolved) => Ok(*resolved),
            _ => Err(unexpected_reply()),
        }
    }

    async fn reconcile(
        &self,
        call_id: &str,
        settlement: Settlement,
        actor: Option<&str>,
    ) -> Result<Reconciled, StoreError> {
        let op = WriteOp::Reconcile(call_id.to_owned(), settlement, actor.map(str::to_owned));
        match self.write(op).await? {
            Reply::Reconciled(reconciled) => Ok(*reconciled),
            _ => Err(unexpected_reply()),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Through the writer too: a store that can read but no longer write is not ready.
        self.write(WriteOp::Ping).await?;
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).map_err(backend))
            .await
    }
}
