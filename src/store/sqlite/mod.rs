//! The embedded default store: one SQLite file in WAL mode, `synchronous = FULL`.
//!
//! Writes go through one writer thread that owns the only writing connection and commits
//! concurrent writes together (group commit: `writer.rs`; the statements of each write are in
//! `writes.rs`). Reads run on a small pool of separate connections (WAL lets them read while the
//! writer writes), on tokio's blocking threads (`reads.rs`). This file opens the store and
//! implements [`Backend`] for it: the writer's queue and each read on the pool; the Store traits
//! built on that, the same for every backend, are in `store/backend.rs`.
//!
//! Opening the store brings its schema up to date (`migrations.rs`) and recovers from a crash
//! (`recovery.rs`): calls left `running` by a previous process become `interrupted` (read,
//! idempotent) or `needs_reconciliation` (write). One server owns one SQLite file; several
//! servers share a database through a server-based backend instead.

mod audit;
mod edits;
mod link_keys;
mod migrations;
mod pins;
mod reads;
mod recovery;
mod sessions;
mod signing_keys;
mod standing;
mod webhooks;
mod writer;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::backend::Backend;
use super::queue::{self, Behind, Msg};
use super::{
    ApprovalPage, ApprovalState, CallFilter, CallPage, CallRecord, Delivery, DeliveryPage,
    DeliveryStatus, FeedCursor, FeedPage, InboxSession, NewCall, Outcome, StoreCounts, StoreError,
    Timestamp,
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

/// A SQLite error as a store error. A full disk is the store unavailable, as a PostgreSQL
/// server out of space is: nothing is written, the request may be retried, and an outcome is
/// retried in the background until there is room again. So is an I/O error: the disk failed a
/// read or a write, which a retry may not meet.
fn backend(err: rusqlite::Error) -> StoreError {
    let Some(code) = failure(&err) else {
        return StoreError::Backend(err.to_string());
    };
    // The extended code names what failed (which I/O, which constraint) where the message
    // alone does not.
    let detail = format!("{err} (SQLite code {})", code.extended_code);
    if disk_full(&err) {
        StoreError::Unavailable(format!("the disk is full: {detail}"))
    } else if cannot_write(&err) {
        StoreError::Unavailable(format!("the disk failed: {detail}"))
    } else {
        StoreError::Backend(detail)
    }
}

/// Whether SQLite had no room on the disk for what it was asked to write: `SQLITE_FULL`, or
/// `SQLITE_IOERR_SHMSIZE`, the WAL index (`-shm`) that could not grow (a thirty-minute chaos
/// run met it once the WAL had outgrown the index a restart rebuilt).
fn disk_full(err: &rusqlite::Error) -> bool {
    failure(err).is_some_and(|code| {
        code.code == ErrorCode::DiskFull
            || code.extended_code == rusqlite::ffi::SQLITE_IOERR_SHMSIZE
    })
}

/// Whether the disk could not take a write now: it is full or it failed (what [`backend`] makes
/// the store unavailable).
fn cannot_write(err: &rusqlite::Error) -> bool {
    disk_full(err) || failure(err).is_some_and(|code| code.code == ErrorCode::SystemIoFailure)
}

/// SQLite's own error codes, when the error is SQLite's.
fn failure(err: &rusqlite::Error) -> Option<&rusqlite::ffi::Error> {
    match err {
        rusqlite::Error::SqliteFailure(code, _) => Some(code),
        _ => None,
    }
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

impl Backend for SqliteStore {
    const NAME: &'static str = "sqlite";
    const STOPPED: &'static str = "the writer thread has stopped";

    fn send(&self, msg: Msg) -> Result<(), StoreError> {
        self.inner
            .writer
            .as_ref()
            .ok_or_else(Self::stopped)?
            .send(msg)
            .map_err(|_| Self::stopped())
    }

    fn feed_counter(&self) -> &tokio::sync::watch::Sender<u64> {
        &self.inner.feed
    }

    async fn write_behind(&self, call: NewCall, outcome: &Outcome) -> Result<(), StoreError> {
        // Not awaited: the writer commits it with the next batch, or within `BEHIND_WINDOW`.
        match Behind::push(&self.inner.behind, queue::behind(call, outcome)?) {
            Some(msg) => self.send(msg),
            None => Ok(()),
        }
    }

    async fn find_call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        let owned = call_id.to_owned();
        self.read(move |conn| reads::find_call(conn, &owned, Timestamp::now().0))
            .await
    }

    async fn key_taken(&self, tool: &str, key: &str) -> Result<bool, StoreError> {
        let (tool, key) = (tool.to_owned(), key.to_owned());
        self.read(move |conn| reads::key_taken(conn, &tool, &key))
            .await
    }

    async fn read_calls(
        &self,
        filter: CallFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<CallPage, StoreError> {
        self.read(move |conn| reads::list_calls(conn, filter, after, limit))
            .await
    }

    async fn read_approvals(
        &self,
        tool: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<ApprovalPage, StoreError> {
        let tool = tool.map(str::to_owned);
        self.read(move |conn| reads::pending_approvals(conn, tool.as_deref(), after, limit))
            .await
    }

    async fn read_approval(&self, token: &str) -> Result<Option<ApprovalState>, StoreError> {
        let token = token.to_owned();
        self.read(move |conn| reads::approval(conn, &token)).await
    }

    async fn read_counts(&self) -> Result<StoreCounts, StoreError> {
        self.read(reads::counts).await
    }

    async fn read_feed(
        &self,
        after: Option<&FeedCursor>,
        limit: u32,
    ) -> Result<FeedPage, StoreError> {
        let after = match after {
            Some(cursor) => Some(reads::parse_cursor(cursor)?),
            None => None,
        };
        self.read(move |conn| reads::feed(conn, after, limit)).await
    }

    async fn read_feed_head(&self) -> Result<FeedCursor, StoreError> {
        self.read(reads::feed_head).await
    }

    async fn read_webhook_cursor(&self) -> Result<Option<FeedCursor>, StoreError> {
        self.read(webhooks::cursor).await
    }

    async fn read_deliveries(
        &self,
        status: Option<DeliveryStatus>,
        after: Option<i64>,
        limit: u32,
        channels: bool,
    ) -> Result<DeliveryPage, StoreError> {
        self.read(move |conn| webhooks::list(conn, status, after, limit, channels))
            .await
    }

    async fn read_call_notifications(&self, call_id: &str) -> Result<Vec<Delivery>, StoreError> {
        let call_id = call_id.to_owned();
        self.read(move |conn| webhooks::call_notifications(conn, &call_id))
            .await
    }

    async fn read_disabled_webhooks(&self) -> Result<Vec<String>, StoreError> {
        self.read(webhooks::disabled_webhooks).await
    }

    async fn read_session(
        &self,
        id_sha256: &str,
        now: Timestamp,
    ) -> Result<Option<InboxSession>, StoreError> {
        let id = id_sha256.to_owned();
        self.read(move |conn| sessions::find(conn, &id, now.0))
            .await
    }

    async fn read_link_keys(
        &self,
        now: Timestamp,
    ) -> Result<Vec<crate::store::LinkKey>, StoreError> {
        self.read(move |conn| link_keys::live(conn, now.0)).await
    }

    async fn read_signing_keys(
        &self,
        now: Timestamp,
    ) -> Result<Vec<crate::store::SigningKey>, StoreError> {
        self.read(move |conn| signing_keys::live(conn, now.0)).await
    }

    async fn read_one(&self) -> Result<(), StoreError> {
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).map_err(backend))
            .await
    }
}

impl crate::store::audit::AuditBackend for SqliteStore {
    async fn read_audit(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<crate::store::AuditEntry>, StoreError> {
        self.read(move |conn| audit::entries(conn, after, limit))
            .await
    }

    async fn read_audit_head(&self) -> Result<Option<crate::store::AuditEntry>, StoreError> {
        self.read(audit::head).await
    }

    async fn read_audit_path(
        &self,
        call_id: &str,
        limit: u32,
    ) -> Result<Option<crate::store::AuditPath>, StoreError> {
        let call_id = call_id.to_owned();
        self.read(move |conn| audit::path(conn, &call_id, limit))
            .await
    }

    async fn read_audit_exports(&self) -> Result<Vec<crate::store::ExportState>, StoreError> {
        self.read(audit::exports).await
    }
}
