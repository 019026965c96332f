//! The embedded default store: one SQLite file in WAL mode, `synchronous = FULL`.
//!
//! Writes go through one writer thread that owns the only writing connection and commits
//! concurrent writes together (group commit: `writer.rs`; the statements of each write are in
//! `writes.rs`). Reads run on a small pool of separate connections (WAL lets them read while the
//! writer writes), on tokio's blocking threads (`reads.rs`). This file opens the store and holds
//! the `Store` impl, which only turns each method into a write for the writer or a read on the
//! pool.
//!
//! Opening the store brings its schema up to date (`migrations.rs`) and recovers from a crash
//! (`recovery.rs`): calls left `running` by a previous process become `interrupted` (read,
//! idempotent) or `needs_reconciliation` (write). One server owns one SQLite file; several
//! servers share a database through a server-based backend instead.

mod migrations;
mod reads;
mod recovery;
mod sessions;
mod webhooks;
mod writer;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use super::queue::{self, Behind, Job, Msg, Reply, WriteOp};
use super::{
    ApprovalPage, ApprovalState, CallFilter, CallPage, CallRecord, Delivery, DeliveryPage,
    DeliveryResult, DeliveryStatus, FeedCursor, FeedPage, InboxSession, Inserted, NewCall,
    NewDelivery, Outcome, Reconciled, Rerun, Resolution, Resolved, Settlement, Store, StoreCounts,
    StoreError, Timestamp,
};
use migrations::migrate;
use recovery::recover;
use writer::write_loop;

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
    /// Bumped by the writer after each commit that may have grown the feed.
    feed: Arc<tokio::sync::watch::Sender<u64>>,
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
        let feed = Arc::new(tokio::sync::watch::Sender::new(0));
        let fed = feed.clone();
        let thread = std::thread::Builder::new()
            .name("toolgate-sqlite-writer".into())
            .spawn(move || write_loop(conn, queue, &taken, &fed))
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
                feed,
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

#[async_trait]
impl Store for SqliteStore {
    async fn insert_call(
        &self,
        call: NewCall,
        outcome: Option<Outcome>,
    ) -> Result<Inserted, StoreError> {
        self.write(WriteOp::insert(call, outcome)?)
            .await?
            .inserted()
    }

    async fn finish_call(
        &self,
        call_id: &str,
        run: Option<u32>,
        attempts: u32,
        outcome: &Outcome,
    ) -> Result<(), StoreError> {
        let op = WriteOp::finish(call_id, run, attempts, outcome)?;
        self.write(op).await?.finished()
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn feed(&self, after: Option<&FeedCursor>, limit: u32) -> Result<FeedPage, StoreError> {
        let after = match after {
            Some(cursor) => Some(reads::parse_cursor(cursor)?),
            None => None,
        };
        self.read(move |conn| reads::feed(conn, after, limit)).await
    }

    async fn feed_head(&self) -> Result<FeedCursor, StoreError> {
        self.read(reads::feed_head).await
    }

    async fn prune_feed(&self, before: Timestamp) -> Result<u64, StoreError> {
        self.write(WriteOp::PruneFeed(before.0)).await?.pruned()
    }

    fn feed_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.feed.subscribe()
    }

    async fn webhook_cursor(&self) -> Result<Option<FeedCursor>, StoreError> {
        self.read(webhooks::cursor).await
    }

    async fn enqueue_deliveries(
        &self,
        from: Option<&FeedCursor>,
        to: &FeedCursor,
        deliveries: Vec<NewDelivery>,
    ) -> Result<bool, StoreError> {
        let op = WriteOp::enqueue_deliveries(from, to, deliveries);
        self.write(op).await?.enqueued()
    }

    async fn claim_deliveries(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<Delivery>, StoreError> {
        let op = WriteOp::claim_deliveries(limit, lease);
        self.write(op).await?.claimed()
    }

    async fn settle_delivery(&self, id: i64, result: DeliveryResult) -> Result<(), StoreError> {
        self.write(WriteOp::SettleDelivery(id, result))
            .await?
            .settled()
    }

    async fn list_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<DeliveryPage, StoreError> {
        self.read(move |conn| webhooks::list(conn, status, after, limit))
            .await
    }

    async fn retry_delivery(&self, id: i64) -> Result<Option<Delivery>, StoreError> {
        self.write(WriteOp::RetryDelivery(id)).await?.delivery()
    }

    async fn disabled_webhooks(&self) -> Result<Vec<String>, StoreError> {
        self.read(webhooks::disabled_webhooks).await
    }

    async fn rerun_interrupted(&self, call_id: &str) -> Result<Option<Rerun>, StoreError> {
        self.write(WriteOp::Rerun(call_id.to_owned()))
            .await?
            .rerun()
    }

    async fn insert_behind(&self, call: NewCall, outcome: &Outcome) -> Result<(), StoreError> {
        // Not awaited: the writer commits it with the next batch, or within `BEHIND_WINDOW`.
        match Behind::push(&self.inner.behind, queue::behind(call, outcome)?) {
            Some(msg) => self.send(msg),
            None => Ok(()),
        }
    }

    async fn call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        let owned = call_id.to_owned();
        let found = self
            .read(move |conn| reads::find_call(conn, &owned, Timestamp::now().0))
            .await?;
        if found.is_some() {
            return Ok(found);
        }
        // Read-your-writes: it may be written behind and still queued. The queue is committed
        // in order, so once a no-op queued after it is committed, so is the record.
        self.write(WriteOp::Ping).await?;
        let owned = call_id.to_owned();
        self.read(move |conn| reads::find_call(conn, &owned, Timestamp::now().0))
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
        self.read(move |conn| reads::list_calls(conn, filter, after, limit))
            .await
    }

    async fn pending_approvals_of(
        &self,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError> {
        let tool = tool.map(str::to_owned);
        self.read(move |conn| reads::pending_approvals(conn, tool.as_deref(), after, limit))
            .await
    }

    async fn create_session(&self, session: &InboxSession) -> Result<(), StoreError> {
        self.write(WriteOp::CreateSession(Box::new(session.clone())))
            .await?
            .settled()
    }

    async fn session(
        &self,
        id_sha256: &str,
        now: Timestamp,
    ) -> Result<Option<InboxSession>, StoreError> {
        let id = id_sha256.to_owned();
        self.read(move |conn| sessions::find(conn, &id, now.0))
            .await
    }

    async fn delete_session(&self, id_sha256: &str) -> Result<bool, StoreError> {
        let op = WriteOp::DeleteSession(id_sha256.to_owned());
        Ok(self.write(op).await?.pruned()? > 0)
    }

    async fn prune_sessions(&self, now: Timestamp) -> Result<u64, StoreError> {
        self.write(WriteOp::PruneSessions(now.0)).await?.pruned()
    }

    async fn counts(&self) -> Result<StoreCounts, StoreError> {
        self.read(reads::counts).await
    }

    async fn approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError> {
        let token = token.to_owned();
        self.read(move |conn| reads::approval(conn, &token)).await
    }

    async fn resolve(
        &self,
        token: &str,
        resolution: Resolution,
        actor: Option<&str>,
    ) -> Result<Resolved, StoreError> {
        let op = WriteOp::resolve(token, resolution, actor);
        self.write(op).await?.resolved()
    }

    async fn reconcile(
        &self,
        call_id: &str,
        settlement: Settlement,
        actor: Option<&str>,
    ) -> Result<Reconciled, StoreError> {
        let op = WriteOp::reconcile(call_id, settlement, actor);
        self.write(op).await?.reconciled()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Through the writer too: a store that can read but no longer write is not ready.
        self.write(WriteOp::Ping).await?;
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).map_err(backend))
            .await
    }
}
