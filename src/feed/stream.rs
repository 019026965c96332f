//! The change feed as one principal may see it: what `GET /events` and the inbox's live queue
//! both follow.
//!
//! Each stream reads the store itself, woken by the store's feed changes, so it holds no
//! connection between reads and needs no buffer of its own; it ends at a graceful stop (or
//! when the store fails: the client reconnects from the last entry it received).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::watch;

use crate::dispatch::who::Principal;
use crate::store::{FeedCursor, FeedEntry, Store, StoreError};

/// How soon a stream reads again when newer entries are not final yet.
const SETTLING: Duration = Duration::from_millis(20);

/// The entries read per page.
const PAGE: u32 = 100;

/// Which entries a stream shows, and how.
#[derive(Debug, Clone)]
pub struct Audience {
    /// Who reads: entries of the calls it may see (a caller's own; an approver's, of the tools
    /// it decides).
    pub viewer: Principal,
    /// Whether suspensions carry their token (only ever for those who may approve).
    pub tokens: bool,
    /// Only these types of entry.
    pub types: Option<HashSet<String>>,
    /// Only calls of this tool.
    pub tool: Option<String>,
}

impl Audience {
    /// Every entry `viewer` may see, without suspension tokens.
    pub fn of(viewer: Principal) -> Audience {
        Audience {
            viewer,
            tokens: false,
            types: None,
            tool: None,
        }
    }
}

/// One entry as a stream shows it.
#[derive(Debug, Clone)]
pub struct FeedEvent {
    /// The entry's type (`call.suspended`, ...).
    pub kind: String,
    /// Its cursor: a reconnecting client resumes right after it.
    pub id: String,
    /// `{type, at, call, suspension?}`, as JSON text.
    pub data: String,
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

/// The feed from `cursor` on, as `audience` may see it; it ends when `released` turns true.
pub fn follow(
    store: Arc<dyn Store>,
    cursor: FeedCursor,
    released: watch::Receiver<bool>,
    audience: Audience,
) -> impl Stream<Item = FeedEvent> + Send + 'static {
    let follow = Follow {
        changes: store.feed_changes(),
        store,
        cursor,
        ready: VecDeque::new(),
        released,
        audience,
    };
    futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((event, follow))
    })
}

/// One stream's position in the feed.
struct Follow {
    store: Arc<dyn Store>,
    cursor: FeedCursor,
    ready: VecDeque<FeedEvent>,
    changes: watch::Receiver<u64>,
    released: watch::Receiver<bool>,
    audience: Audience,
}

impl Follow {
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
                if let Some(event) = self.event(entry) {
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

    /// The entry as this stream shows it, if it may and wants to.
    fn event(&self, entry: FeedEntry) -> Option<FeedEvent> {
        let audience = &self.audience;
        if !audience
            .viewer
            .may_see(&entry.call.caller, &entry.call.tool)
        {
            return None;
        }
        if audience
            .types
            .as_ref()
            .is_some_and(|t| !t.contains(&entry.kind))
        {
            return None;
        }
        if audience
            .tool
            .as_ref()
            .is_some_and(|t| *t != entry.call.tool)
        {
            return None;
        }
        let tokens = audience.tokens && audience.viewer.sees_all_calls();
        let data = serde_json::to_string(&super::entry_data(&entry, tokens)).ok()?;
        Some(FeedEvent {
            kind: entry.kind,
            id: entry.cursor.0,
            data,
        })
    }
}
