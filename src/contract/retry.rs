//! How often a failed attempt is tried again, decided by what the tool does to the world.
//!
//! A `read` is retried: it has no effect to repeat. An `idempotent` tool is retried with the same
//! idempotency key, so the effect still happens once. A `write` is never retried by the server:
//! its effect may have happened even though the attempt failed, and only a person can tell. A
//! failure the handler marks permanent ([`HandlerError::permanent`](super::error::HandlerError))
//! is never retried.

use std::time::Duration;

use super::meta::Effect;

/// Attempts and backoff for one tool's live failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The most attempts in all, the first included (1 means never retry).
    pub max_attempts: u32,
    /// The wait before the first retry; each later retry waits twice as long as the one before.
    pub initial_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// Three attempts, waiting 100 ms then 200 ms, never more than 2 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn never() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// `base` as it applies to a tool with `effect`: unchanged for `read` and `idempotent`,
    /// [`RetryPolicy::never`] for `write`.
    pub fn for_effect(effect: Effect, base: RetryPolicy) -> Self {
        match effect {
            Effect::Read | Effect::Idempotent => base,
            Effect::Write => RetryPolicy {
                max_attempts: 1,
                ..base
            },
        }
    }

    /// Whether another attempt may follow `made` attempts.
    pub fn allows_another(&self, made: u32) -> bool {
        made < self.max_attempts
    }

    /// The wait before retry number `retry` (1 for the first retry): exponential, capped.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_never_retried_and_backoff_doubles_up_to_the_cap() {
        let base = RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(35),
        };
        assert_eq!(RetryPolicy::for_effect(Effect::Read, base), base);
        assert_eq!(RetryPolicy::for_effect(Effect::Idempotent, base), base);
        let write = RetryPolicy::for_effect(Effect::Write, base);
        assert!(!write.allows_another(1));
        assert!(base.allows_another(3) && !base.allows_another(4));
        let waits: Vec<u128> = (1..=4).map(|n| base.backoff(n).as_millis()).collect();
        assert_eq!(waits, [10, 20, 35, 35]);
    }
}
