//! The calls running now, and the graceful stop: a shutdown waits for every detached call to be
//! recorded, and releases the requests held waiting for a change.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Counts the calls running in detached tasks, so a shutdown can wait for them to be recorded
/// instead of cutting a tool off half-way.
#[derive(Clone, Default)]
pub struct Running {
    inner: Arc<RunningInner>,
}

struct RunningInner {
    count: AtomicUsize,
    idle: Notify,
    /// Set at a graceful shutdown: requests held waiting for a change are answered now.
    released: tokio::sync::watch::Sender<bool>,
}

impl Default for RunningInner {
    fn default() -> Self {
        RunningInner {
            count: AtomicUsize::new(0),
            idle: Notify::new(),
            released: tokio::sync::watch::Sender::new(false),
        }
    }
}

/// Held by each running call; the last one out wakes whoever waits for idleness.
pub(super) struct RunningGuard(Arc<RunningInner>);

impl Running {
    pub(super) fn enter(&self) -> RunningGuard {
        self.inner.count.fetch_add(1, Ordering::SeqCst);
        RunningGuard(self.inner.clone())
    }

    /// Answers every request held waiting for a change (`?wait=`) at once, with the state as it
    /// is, and any held from now on: a graceful shutdown calls it as it starts, so that held
    /// requests do not keep the server up.
    pub fn release_held(&self) {
        self.inner.released.send_replace(true);
    }

    /// Changes to `true` when held requests must be answered now.
    pub fn released(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.released.subscribe()
    }

    /// How many calls are running now.
    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::SeqCst)
    }

    /// Resolves once no call is running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up between the two is not lost.
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
