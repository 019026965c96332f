//! The change feed's consumers in this process: requests that wait for a call to change
//! (long-polls) or for a suspension to arrive (this module, the watcher); the entries one
//! principal may see, which `GET /events` and the inbox's live queue follow ([`stream`]); and
//! the webhooks ([`webhooks`]). (The streams and the webhooks' outbox read the store's feed
//! themselves, each from its own cursor.)
//!
//! One watcher task per process follows the store's feed (see `Store::feed`) from where it was
//! when the watcher started: woken by the store when the feed may have grown (at once for a
//! commit of this process; on PostgreSQL by `NOTIFY` from other replicas, and on a timer), it
//! reads every new entry and wakes the requests waiting for that call, or for any suspension. A
//! waiting request holds no database connection and no thread: a registration in a map, and a
//! future parked on a channel.
//!
//! The watcher starts with the first request that waits, so a server nobody waits on reads
//! nothing more.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use serde_json::{Value, json};

use crate::store::{FeedEntry, FeedSubject, Store, StoreError};

pub mod channels;
pub mod stream;
pub mod webhooks;

/// An entry as the event stream and webhooks show it: `{"type", "at", "call", "suspension"?,
/// "error"?}`, the suspension's token only `with_token` (for those who may decide); a
/// `call.approval_recorded` entry adds `"approvals"` (the approvals so far, `{approver,
/// display_name?, at}` each, the one it records last) and `"approvals_required"`, as
/// `GET /approvals/{token}` names them. An entry of a call that ran with an input an
/// approver edited adds `"edited"` (`{by, display_name?, at}`), `"input"` (as it ran) and
/// `"original_input"`, as `GET /calls/{id}` names them.
///
/// An entry of an upstream's tool is `{"type", "at", "change"}`: the change names the
/// `upstream`, the `tool`, the name it is `served_as` and the `hash` listed (accepted) beside
/// the `pinned_hash`; `upstream.tool_changed` adds its `kind` (`changed` or `new`) and the
/// members that `differs`, `upstream.change_accepted` who it was `accepted_by`.
pub fn entry_data(entry: &FeedEntry, with_token: bool) -> Value {
    let mut data = json!({
        "type": entry.kind,
        "at": entry.at,
    });
    match &entry.subject {
        FeedSubject::Call(call) => data["call"] = json!(call),
        FeedSubject::Upstream { change, .. } => data["change"] = change.clone(),
    }
    if let Some(suspension) = &entry.suspension {
        let mut shown = json!({
            "reason": suspension.reason,
            "input_schema": suspension.input_schema,
            "expires_at": suspension.expires_at,
        });
        // Holding the token is what lets someone decide.
        if with_token {
            shown["token"] = Value::String(suspension.token.clone());
        }
        data["suspension"] = shown;
    }
    if let Some(error) = &entry.error {
        data["error"] = json!(error);
    }
    if let Some(progress) = &entry.progress {
        data["approvals"] = json!(progress.approvals);
        data["approvals_required"] = json!(progress.approvals_required);
    }
    // The call ran with an input an approver edited: said, so that an agent can learn.
    if let Some(edit) = &entry.edited {
        data["edited"] = json!(edit.mark);
        data["input"] = edit.input.clone();
        data["original_input"] = edit.original_input.clone();
    }
    data
}

/// The entries read per page.
const PAGE: u32 = 256;

/// How soon the watcher reads again when the store says newer entries are not final yet.
const SETTLING: Duration = Duration::from_millis(20);

/// How long the watcher waits before trying again after the store failed.
const RETRY: Duration = Duration::from_millis(500);

/// The longest a request waits for the watcher to start following the feed.
const FOLLOW_WAIT: Duration = Duration::from_secs(2);

/// The feed's consumers in this process. Cheap to clone.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    /// Requests waiting for a change of these calls.
    calls: Mutex<HashMap<String, Vec<oneshot::Sender<()>>>>,
    /// Bumped for every `call.suspended` and `call.escalated` entry.
    suspensions: watch::Sender<u64>,
    /// Set once the watcher runs.
    started: OnceLock<()>,
    /// `true` once the watcher knows where it starts (the feed's head when it started): from
    /// then on every change reaches the waiters registered for it.
    following: watch::Sender<bool>,
    /// Changes to `true` when held requests must be answered now (a graceful shutdown).
    released: watch::Receiver<bool>,
}

/// What a held request woke up for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// What it waited for may have happened: look again.
    Changed,
    /// Its time is up.
    TimedOut,
    /// The server is shutting down: answer now.
    Released,
}

impl Feed {
    /// The consumers of `store`'s feed; held requests are answered at once when `released`
    /// turns `true` (see `dispatch::Running::release_held`).
    pub fn new(store: Arc<dyn Store>, released: watch::Receiver<bool>) -> Self {
        Feed {
            inner: Arc::new(Inner {
                store,
                calls: Mutex::new(HashMap::new()),
                suspensions: watch::Sender::new(0),
                started: OnceLock::new(),
                following: watch::Sender::new(false),
                released,
            }),
        }
    }

    /// Starts the watcher, once; it ends when the last handle on the feed is dropped.
    fn start(&self) {
        self.inner.started.get_or_init(|| {
            tokio::spawn(follow(
                Arc::downgrade(&self.inner),
                self.inner.store.clone(),
            ));
        });
    }

    /// Waits (once per process, briefly) until the watcher knows the feed's head it follows
    /// from. A change committed before that would be behind its starting point and wake no
    /// one: a request that read its call in between would wait its whole time for nothing.
    async fn following(&self) {
        self.start();
        let mut following = self.inner.following.subscribe();
        let mut released = self.inner.released.clone();
        // Bounded: with the store down the watcher cannot start, and a request must still
        // answer (as it is) in its time.
        let _ = tokio::time::timeout(FOLLOW_WAIT, async {
            tokio::select! {
                _ = following.wait_for(|following| *following) => {}
                _ = released.wait_for(|released| *released) => {}
            }
        })
        .await;
    }

    /// Registers interest in the next change of `call_id`: the returned waiter resolves at the
    /// next feed entry about it. Register first, then read the call, then wait: a change that
    /// lands in between is not missed.
    pub async fn watch_call(&self, call_id: &str) -> CallWaiter {
        self.following().await;
        let (tx, rx) = oneshot::channel();
        let mut calls = lock(&self.inner.calls);
        let waiters = calls.entry(call_id.to_owned()).or_default();
        // Requests that gave up (timed out, went away) leave their sender behind until the call
        // changes; dropped here, so a call polled for days holds only its live waiters.
        waiters.retain(|waiter| !waiter.is_closed());
        waiters.push(tx);
        CallWaiter {
            rx,
            released: self.inner.released.clone(),
        }
    }

    /// A receiver that changes at every new suspension (registered before the caller reads the
    /// pending approvals, like [`Feed::watch_call`]).
    pub async fn watch_suspensions(&self) -> SuspensionWaiter {
        self.following().await;
        let mut rx = self.inner.suspensions.subscribe();
        rx.borrow_and_update();
        SuspensionWaiter {
            rx,
            released: self.inner.released.clone(),
        }
    }
}

/// A request waiting for a call to change; see [`Feed::watch_call`].
pub struct CallWaiter {
    rx: oneshot::Receiver<()>,
    released: watch::Receiver<bool>,
}

impl CallWaiter {
    /// Waits for the change, at most `limit`.
    pub async fn wait(mut self, limit: Duration) -> Woken {
        if *self.released.borrow() {
            return Woken::Released;
        }
        tokio::select! {
            _ = &mut self.rx => Woken::Changed,
            () = tokio::time::sleep(limit) => Woken::TimedOut,
            _ = self.released.wait_for(|released| *released) => Woken::Released,
        }
    }
}

/// A request waiting for a suspension; see [`Feed::watch_suspensions`].
pub struct SuspensionWaiter {
    rx: watch::Receiver<u64>,
    released: watch::Receiver<bool>,
}

impl SuspensionWaiter {
    /// Waits for the next suspension, at most `limit`.
    pub async fn wait(&mut self, limit: Duration) -> Woken {
        if *self.released.borrow() {
            return Woken::Released;
        }
        tokio::select! {
            changed = self.rx.changed() => match changed {
                Ok(()) => Woken::Changed,
                Err(_) => Woken::Released,
            },
            () = tokio::time::sleep(limit) => Woken::TimedOut,
            _ = self.released.wait_for(|released| *released) => Woken::Released,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The watcher: follows the feed from its head and wakes whoever waits for each entry.
async fn follow(feed: Weak<Inner>, store: Arc<dyn Store>) {
    let mut changes = store.feed_changes();
    let mut cursor = loop {
        match store.feed_head().await {
            Ok(head) => {
                if let Some(feed) = feed.upgrade() {
                    feed.following.send_replace(true);
                }
                break head;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the feed's head; retrying");
                tokio::time::sleep(RETRY).await;
            }
        }
    };
    loop {
        changes.borrow_and_update();
        let mut again = None;
        loop {
            match store.feed(Some(&cursor), PAGE).await {
                Ok(page) => {
                    let Some(feed) = feed.upgrade() else {
                        return;
                    };
                    let full = page.entries.len() == PAGE as usize;
                    for entry in page.entries {
                        feed.dispatch(entry);
                    }
                    cursor = page.cursor;
                    if full {
                        continue;
                    }
                    if page.settling {
                        again = Some(SETTLING);
                    }
                }
                Err(StoreError::CursorExpired) => {
                    // Pruned past where this watcher was (it was stopped for longer than the
                    // retention): go on from now.
                    if let Ok(head) = store.feed_head().await {
                        cursor = head;
                    }
                    continue;
                }
                Err(err) => {
                    tracing::debug!(error = %err, "cannot read the feed; retrying");
                    again = Some(RETRY);
                }
            }
            break;
        }
        if feed.strong_count() == 0 {
            return;
        }
        let wait = again.unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(wait) => {}
        }
    }
}

impl Inner {
    fn dispatch(&self, entry: FeedEntry) {
        let Some(call) = entry.call() else {
            return;
        };
        if let Some(waiters) = lock(&self.calls).remove(&call.call_id) {
            for waiter in waiters {
                let _ = waiter.send(());
            }
        }
        // An escalation brings an approval to principals it did not reach before.
        if entry.kind == "call.suspended" || entry.kind == "call.escalated" {
            self.suspensions
                .send_modify(|count| *count = count.wrapping_add(1));
        }
    }
}
