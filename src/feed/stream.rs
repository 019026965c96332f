//! The change feed as a stream: what `GET /events` and the inbox's live queue both follow,
//! through the lifecycle (`Dispatcher::events`), which says which entries a principal sees.
//! This module only follows the feed: it knows nothing of who reads it.
//!
//! Each stream reads the store itself, woken by the store's feed changes, so it holds no
//! connection between reads and needs no buffer of its own; it ends at a graceful stop (or
//! when the store fails: the client reconnects from the last entry it received).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::watch;

use crate::store::{FeedCursor, FeedEntry, Store, StoreError};

/// How soon a stream reads again when newer entries are not final yet.
const SETTLING: Duration = Duration::from_millis(20);

/// The entries read per page.
const PAGE: u32 = 100;

/// One entry as a stream shows it.
#[derive(Debug, Clone)]
pub struct FeedEvent {
    /// The entry's type (`call.suspended`, ...).
    pub kind: String,
    /// Its cursor: a reconnecting client resumes right after it.
    pub id: String,
    /// `{type, at, call, suspension?, error?, approvals?, approvals_required?}`, as JSON text
    /// (see [`super::entry_data`]).
    pub data: String,
}

impl FeedEvent {
    /// `entry` as a stream shows it, its suspension's token only `with_token`.
    pub fn of(entry: FeedEntry, with_token: bool) -> Option<FeedEvent> {
        let data = serde_json::to_string(&super::entry_data(&entry, with_token)).ok()?;
        Some(FeedEvent {
            kind: entry.kind,
            id: entry.cursor.0,
            data,
        })
    }
}

/// Where a stream starts: right after `resume` (an entry's cursor a client received; checked
/// now, so that a bad or expired cursor is an answer, not a stream that ends), or with the next
/// new entry.
pub async fn start_cursor(
    store: &dyn Store,
    resume: Option<String>,
) -> Result<FeedCursor, StoreError> {
    match resume {
        Some(after) => {
            let cursor = FeedCursor(after);
            store.feed(Some(&cursor), 1).await?;
            Ok(cursor)
        }
        None => store.feed_head().await,
    }
}

/// The feed from `cursor` on, each entry as `show` shows it (`None`: not at all); it ends
/// when `released` turns true.
pub fn follow<F>(
    store: Arc<dyn Store>,
    cursor: FeedCursor,
    released: watch::Receiver<bool>,
    show: F,
) -> impl Stream<Item = FeedEvent> + Send + 'static
where
    F: FnMut(FeedEntry) -> Option<FeedEvent> + Send + 'static,
{
    let follow = Follow {
        changes: store.feed_changes(),
        store,
        cursor,
        ready: VecDeque::new(),
        released,
        show,
    };
    futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((event, follow))
    })
}

/// One stream's position in the feed.
struct Follow<F> {
    store: Arc<dyn Store>,
    cursor: FeedCursor,
    ready: VecDeque<FeedEvent>,
    changes: watch::Receiver<u64>,
    released: watch::Receiver<bool>,
    show: F,
}

impl<F: FnMut(FeedEntry) -> Option<FeedEvent>> Follow<F> {
    /// The next event, or `None` when the stream ends.
    async fn next(&mut self) -> Option<FeedEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if *self.released.borrow() {
                return None;
            }
            self.changes.borrow_and_update();
            let page = self.store.feed(Some(&self.cursor), PAGE).await.ok()?;
            let full = page.entries.len() == PAGE as usize;
            let settling = page.settling;
            self.cursor = page.cursor;
            for entry in page.entries {
                if let Some(event) = (self.show)(entry) {
                    self.ready.push_back(event);
                }
            }
            if full || !self.ready.is_empty() {
                continue;
            }
            let wait = if settling {
                SETTLING
            } else {
                Duration::from_secs(3600)
            };
            tokio::select! {
                changed = self.changes.changed() => changed.ok()?,
                () = tokio::time::sleep(wait) => {}
                _ = self.released.wait_for(|released| *released) => return None,
            }
        }
    }
}
