//! The embedded default store: one SQLite file in WAL mode, `synchronous = FULL`.
//!
//! Writes go through one writer thread that owns the only writing connection. It takes every
//! write waiting in its queue, applies each in its own savepoint inside one transaction, commits
//! once (one fsync for the whole batch: group commit), and only then answers each caller. So a
//! write that returned is on disk, and concurrent calls share the cost of the disk's flush
//! instead of queueing behind one flush each. Reads run on a small pool of separate connections
//! (WAL lets them read while the writer writes), on tokio's blocking threads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use serde_json::Value;
use tokio::sync::oneshot;

use super::{
    Approval, ApprovalPage, ApprovalState, CallError, CallRecord, CallStatus, NewCall, Outcome,
    Resolution, Resolved, Store, StoreError, SuspensionView, Timestamp,
};

/// Versioned schema changes, applied in order; `PRAGMA user_version` records the last applied.
const MIGRATIONS: &[&str] = &[include_str!(
    "migrations/sqlite/0001_calls_and_suspensions.sql"
)];

/// The most writes committed in one transaction.
const MAX_BATCH: usize = 512;

/// Read connections kept open between requests.
const MAX_IDLE_READERS: usize = 8;

/// The embedded SQLite store. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: mpsc::Sender<Job>,
    readers: Mutex<Vec<Connection>>,
}

/// One write and where its result goes once committed.
struct Job {
    op: WriteOp,
    reply: oneshot::Sender<Result<Reply, StoreError>>,
}

enum WriteOp {
    Insert(NewCall, Option<Outcome>),
    Finish(String, Outcome),
    Resolve(String, Resolution),
}

enum Reply {
    Done,
    Resolved(Box<Resolved>),
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, brings its schema up to date, and
    /// starts the writer thread.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut conn = open_connection(&path)?;
        // WAL lets readers work beside the writer; it is a property of the file, set once.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend)?;
        migrate(&mut conn)?;
        let (writer, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("toolgate-sqlite-writer".into())
            .spawn(move || write_loop(conn, queue))
            .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                writer,
                readers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The opened database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    async fn write(&self, op: WriteOp) -> Result<Reply, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.inner
            .writer
            .send(Job { op, reply })
            .map_err(|_| StoreError::Backend("the writer thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Backend("the writer thread has stopped".into()))?
    }

    /// Runs `f` on a read connection, on a blocking thread.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
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

fn backend(err: rusqlite::Error) -> StoreError {
    StoreError::Backend(err.to_string())
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

/// The writer thread: batch, apply, commit once, answer. Ends when every sender is gone.
fn write_loop(mut conn: Connection, queue: mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (ops, replies): (Vec<WriteOp>, Vec<_>) =
            batch.into_iter().map(|job| (job.op, job.reply)).unzip();
        let results = apply_batch(&mut conn, ops);
        for (reply, result) in replies.into_iter().zip(results) {
            // The caller may have gone away (its request was cancelled); the write still stands.
            let _ = reply.send(result);
        }
    }
}

/// Applies every op in one transaction, each inside its own savepoint so one failing op does not
/// undo the others. If the commit itself fails, every op fails.
fn apply_batch(conn: &mut Connection, ops: Vec<WriteOp>) -> Vec<Result<Reply, StoreError>> {
    let count = ops.len();
    let fail_all = |err: rusqlite::Error| {
        tracing::error!(error = %err, "store commit failed");
        (0..count)
            .map(|_| Err(StoreError::Backend(err.to_string())))
            .collect()
    };
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(err) => return fail_all(err),
    };
    let mut results = Vec::with_capacity(count);
    for op in ops {
        let result = match tx.savepoint() {
            Ok(sp) => match apply(&sp, op) {
                Ok(reply) => sp.commit().map(|()| reply).map_err(backend),
                // Dropping the savepoint rolls back what the op did.
                Err(err) => Err(err),
            },
            Err(err) => Err(backend(err)),
        };
        results.push(result);
    }
    match tx.commit() {
        Ok(()) => results,
        Err(err) => fail_all(err),
    }
}

fn apply(conn: &Connection, op: WriteOp) -> Result<Reply, StoreError> {
    let now = Timestamp::now().0;
    match op {
        WriteOp::Insert(call, outcome) => {
            let input = call.input.to_string();
            conn.prepare_cached(
                "INSERT INTO calls (call_id, tool, status, input, idempotency_key, attempts, \
                 created_at, updated_at) VALUES (?1, ?2, 'running', ?3, ?4, 1, ?5, ?5)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    call.call_id,
                    call.tool,
                    input,
                    call.idempotency_key,
                    call.created_at.0
                ])
            })
            .map_err(backend)?;
            if let Some(outcome) = outcome {
                record_outcome(conn, &call.call_id, outcome, now)?;
            }
            Ok(Reply::Done)
        }
        WriteOp::Finish(call_id, outcome) => {
            record_outcome(conn, &call_id, outcome, now)?;
            Ok(Reply::Done)
        }
        WriteOp::Resolve(token, resolution) => resolve(conn, &token, resolution, now)
            .map(|resolved| Reply::Resolved(Box::new(resolved))),
    }
}

/// Moves the running call `call_id` to its outcome; a suspension is created with it.
fn record_outcome(
    conn: &Connection,
    call_id: &str,
    outcome: Outcome,
    now: i64,
) -> Result<(), StoreError> {
    let (status, output, error) = match &outcome {
        Outcome::Completed { output } => (CallStatus::Completed, Some(output.to_string()), None),
        Outcome::Failed { error } => (CallStatus::Failed, None, Some(to_json(error)?)),
        Outcome::Suspended { .. } => (CallStatus::Suspended, None, None),
    };
    let changed = conn
        .prepare_cached(
            "UPDATE calls SET status = ?2, output = ?3, error = ?4, updated_at = ?5 \
             WHERE call_id = ?1 AND status = 'running'",
        )
        .and_then(|mut st| st.execute(params![call_id, status.as_str(), output, error, now]))
        .map_err(backend)?;
    if changed == 0 {
        return Err(StoreError::NotRunning {
            call_id: call_id.to_owned(),
        });
    }
    if let Outcome::Suspended {
        token,
        reason,
        input_schema,
    } = outcome
    {
        conn.prepare_cached(
            "INSERT INTO suspensions (token, call_id, reason, input_schema, status, created_at) \
             VALUES (?1, ?2, ?3, ?4, 'pending', ?5)",
        )
        .and_then(|mut st| {
            st.execute(params![
                token,
                call_id,
                reason,
                input_schema.to_string(),
                now
            ])
        })
        .map_err(backend)?;
    }
    Ok(())
}

fn resolve(
    conn: &Connection,
    token: &str,
    resolution: Resolution,
    now: i64,
) -> Result<Resolved, StoreError> {
    let (status, resume_input, reject_reason) = match &resolution {
        Resolution::Approve { resume_input } => ("approved", Some(resume_input.to_string()), None),
        Resolution::Reject { reason } => ("rejected", None, Some(reason.as_str())),
    };
    // Conditional on `pending`: of two resolutions of one token, the second changes nothing.
    let call_id: Option<String> = conn
        .prepare_cached(
            "UPDATE suspensions SET status = ?2, resume_input = ?3, reject_reason = ?4, \
             resolved_at = ?5 WHERE token = ?1 AND status = 'pending' RETURNING call_id",
        )
        .and_then(|mut st| {
            st.query_row(
                params![token, status, resume_input, reject_reason, now],
                |row| row.get(0),
            )
            .optional()
        })
        .map_err(backend)?;
    let Some(call_id) = call_id else {
        let call_id: Option<String> = conn
            .prepare_cached("SELECT call_id FROM suspensions WHERE token = ?1")
            .and_then(|mut st| st.query_row([token], |row| row.get(0)).optional())
            .map_err(backend)?;
        return Ok(match call_id {
            Some(call_id) => Resolved::AlreadyResolved(load_call(conn, &call_id)?),
            None => Resolved::UnknownToken,
        });
    };
    match resolution {
        Resolution::Approve { .. } => {
            conn.prepare_cached(
                "UPDATE calls SET status = 'running', attempts = attempts + 1, updated_at = ?2 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, now]))
            .map_err(backend)?;
            Ok(Resolved::Approved(load_call(conn, &call_id)?))
        }
        Resolution::Reject { reason } => {
            let error = to_json(&CallError::new("rejected", reason))?;
            conn.prepare_cached(
                "UPDATE calls SET status = 'rejected', error = ?2, updated_at = ?3 \
                 WHERE call_id = ?1",
            )
            .and_then(|mut st| st.execute(params![call_id, error, now]))
            .map_err(backend)?;
            Ok(Resolved::Rejected(load_call(conn, &call_id)?))
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The columns `call_from_row` reads, with the call's pending suspension joined.
const CALL_SELECT: &str = "SELECT c.call_id, c.tool, c.status, c.input, c.output, c.error, \
     c.attempts, c.created_at, c.updated_at, s.token, s.reason, s.input_schema, s.created_at \
     FROM calls c LEFT JOIN suspensions s ON s.call_id = c.call_id AND s.status = 'pending' \
     WHERE c.call_id = ?1";

fn load_call(conn: &Connection, call_id: &str) -> Result<CallRecord, StoreError> {
    find_call(conn, call_id)?.ok_or_else(|| StoreError::Corrupt(format!("call {call_id} vanished")))
}

fn find_call(conn: &Connection, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
    conn.prepare_cached(CALL_SELECT)
        .and_then(|mut st| st.query_row([call_id], raw_call).optional())
        .map_err(backend)?
        .map(RawCall::decode)
        .transpose()
}

/// A call row as stored, before its JSON columns are parsed.
struct RawCall {
    call_id: String,
    tool: String,
    status: String,
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
}

fn raw_call(row: &Row<'_>) -> rusqlite::Result<RawCall> {
    Ok(RawCall {
        call_id: row.get(0)?,
        tool: row.get(1)?,
        status: row.get(2)?,
        input: row.get(3)?,
        output: row.get(4)?,
        error: row.get(5)?,
        attempts: row.get(6)?,
        created_at: row.get(7)?,
        updated_at: row.get(8)?,
        token: row.get(9)?,
        reason: row.get(10)?,
        input_schema: row.get(11)?,
        suspended_at: row.get(12)?,
    })
}

impl RawCall {
    fn decode(self) -> Result<CallRecord, StoreError> {
        let status = CallStatus::parse(&self.status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown call status {}", self.status)))?;
        let suspension = match (
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
            }),
            _ => None,
        };
        Ok(CallRecord {
            call_id: self.call_id,
            tool: self.tool,
            status,
            input: parse_json(&self.input)?,
            output: self.output.as_deref().map(parse_json).transpose()?,
            error: self.error.as_deref().map(parse_json).transpose()?,
            suspension,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
        })
    }
}

/// Reads an approvals row: seq, token, call_id, tool, reason, input_schema, created_at[, input].
fn approval_from_row(
    row: &Row<'_>,
    with_input: bool,
) -> rusqlite::Result<(i64, Approval, Option<String>, String)> {
    let schema: String = row.get(5)?;
    let input: Option<String> = if with_input { row.get(7)? } else { None };
    Ok((
        row.get(0)?,
        Approval {
            token: row.get(1)?,
            call_id: row.get(2)?,
            tool: row.get(3)?,
            reason: row.get(4)?,
            input_schema: Value::Null,
            created_at: Timestamp(row.get(6)?),
            input: None,
        },
        input,
        schema,
    ))
}

fn decode_approval(
    (seq, mut approval, input, schema): (i64, Approval, Option<String>, String),
) -> Result<(i64, Approval), StoreError> {
    approval.input_schema = parse_json(&schema)?;
    approval.input = input.as_deref().map(parse_json).transpose()?;
    Ok((seq, approval))
}

#[async_trait]
impl Store for SqliteStore {
    async fn insert_call(&self, call: NewCall, outcome: Option<Outcome>) -> Result<(), StoreError> {
        self.write(WriteOp::Insert(call, outcome)).await.map(|_| ())
    }

    async fn finish_call(&self, call_id: &str, outcome: Outcome) -> Result<(), StoreError> {
        self.write(WriteOp::Finish(call_id.to_owned(), outcome))
            .await
            .map(|_| ())
    }

    async fn call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        let call_id = call_id.to_owned();
        self.read(move |conn| find_call(conn, &call_id)).await
    }

    async fn pending_approvals(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError> {
        self.read(move |conn| {
            let mut st = conn
                .prepare_cached(
                    "SELECT s.seq, s.token, s.call_id, c.tool, s.reason, s.input_schema, \
                     s.created_at FROM suspensions s JOIN calls c ON c.call_id = s.call_id \
                     WHERE s.status = 'pending' AND s.seq > ?1 ORDER BY s.seq LIMIT ?2",
                )
                .map_err(backend)?;
            // One more than asked tells whether another page follows.
            let rows = st
                .query_map(params![after.unwrap_or(0), i64::from(limit) + 1], |row| {
                    approval_from_row(row, false)
                })
                .map_err(backend)?;
            let mut approvals = Vec::with_capacity(limit as usize);
            let mut next_cursor = None;
            for row in rows {
                let (seq, approval) = decode_approval(row.map_err(backend)?)?;
                if approvals.len() == limit as usize {
                    break;
                }
                next_cursor = Some(seq);
                approvals.push(approval);
            }
            if approvals.len() < limit as usize {
                next_cursor = None;
            }
            Ok(ApprovalPage {
                approvals,
                next_cursor,
            })
        })
        .await
    }

    async fn approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError> {
        let token = token.to_owned();
        self.read(move |conn| {
            let row = conn
                .prepare_cached(
                    "SELECT s.seq, s.token, s.call_id, c.tool, s.reason, s.input_schema, \
                     s.created_at, c.input, s.status FROM suspensions s \
                     JOIN calls c ON c.call_id = s.call_id WHERE s.token = ?1",
                )
                .and_then(|mut st| {
                    st.query_row([&token], |row| {
                        Ok((approval_from_row(row, true)?, row.get::<_, String>(8)?))
                    })
                    .optional()
                })
                .map_err(backend)?;
            match row {
                None => Ok(None),
                Some((raw, status)) if status == "pending" => {
                    Ok(Some(ApprovalState::Pending(decode_approval(raw)?.1)))
                }
                Some(((_, approval, _, _), _)) => Ok(Some(ApprovalState::Resolved(load_call(
                    conn,
                    &approval.call_id,
                )?))),
            }
        })
        .await
    }

    async fn resolve(&self, token: &str, resolution: Resolution) -> Result<Resolved, StoreError> {
        match self
            .write(WriteOp::Resolve(token.to_owned(), resolution))
            .await?
        {
            Reply::Resolved(resolved) => Ok(*resolved),
            Reply::Done => Err(StoreError::Backend("unexpected writer reply".into())),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).map_err(backend))
            .await
    }
}
