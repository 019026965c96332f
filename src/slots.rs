//! Load shedding: a limit on how many things run at once, where one past the limit is refused
//! at once instead of queued.
//!
//! A counter is all it takes. A semaphore would do, but nothing here ever waits for a slot, and
//! tokio's semaphore takes a lock on every release; three of them on every call's path were
//! contended between the worker threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// At most `limit` slots taken at once. Shared by `Arc`.
#[derive(Debug)]
pub(crate) struct Slots {
    taken: AtomicUsize,
    limit: usize,
}

/// A taken slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Slots>);

impl Slots {
    /// Slots for at most `limit` at once (at least one).
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Slots {
            taken: AtomicUsize::new(0),
            limit: limit.max(1),
        })
    }

    /// A slot, or `None` when all are taken.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Slot> {
        self.taken
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |taken| {
                (taken < self.limit).then_some(taken + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_past_the_limit_is_refused_until_a_slot_is_given_back() {
        let slots = Slots::new(2);
        let a = slots.try_take().expect("first");
        let _b = slots.try_take().expect("second");
        assert!(slots.try_take().is_none());
        drop(a);
        assert!(slots.try_take().is_some());
    }

    #[test]
    fn slots_taken_and_given_back_from_many_threads_balance() {
        let slots = Slots::new(3);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..10_000 {
                        if let Some(slot) = slots.try_take() {
                            assert!(slots.taken.load(Ordering::Relaxed) <= 3);
                            drop(slot);
                        }
                    }
                });
            }
        });
        assert_eq!(slots.taken.load(Ordering::Relaxed), 0);
    }
}
