//! The token bucket of a rate quota, as the generic cell rate algorithm (GCRA): a bucket is one
//! number, its theoretical arrival time (TAT), so it is cheap to keep per principal and the same
//! arithmetic runs in this process and in one SQL statement on a shared database
//! (`store/postgres/quotas.rs`).
//!
//! Each call costs one emission interval (a minute over `calls_per_minute`); a call is admitted
//! when, after paying, the TAT runs at most `burst` intervals ahead of now. Times are whole
//! microseconds on whichever clock keeps the bucket.

/// A rate quota: `per_minute` calls a minute on average, `burst` of them at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// `calls_per_minute`, at least 1.
    pub per_minute: u32,
    /// `burst`, at least 1.
    pub burst: u32,
}

const MINUTE_US: i64 = 60_000_000;

impl Rate {
    /// What one call costs: the emission interval, in microseconds (at least one: past a
    /// million calls a second, a rate is as good as none).
    pub fn interval_us(self) -> i64 {
        (MINUTE_US / i64::from(self.per_minute.max(1))).max(1)
    }

    /// How far the TAT may run ahead of now: `burst` intervals, in microseconds, computed
    /// whole (a truncated interval times the burst would shrink it: at 100 million calls a
    /// minute the interval is 0.6 µs, and a burst of a million would be 0 µs, refusing any
    /// two calls whose clocks are read a microsecond apart).
    pub fn tolerance_us(self) -> i64 {
        let whole = MINUTE_US * i64::from(self.burst.max(1)) / i64::from(self.per_minute.max(1));
        whole.max(self.interval_us())
    }

    /// The window `RateLimit-Policy` advertises with `q = burst`: the seconds an empty bucket
    /// takes to fill again, rounded up.
    pub fn window_s(self) -> u64 {
        ceil_s(self.tolerance_us())
    }

    /// The calls still allowed at once by a bucket whose TAT is `tat`, at `now`.
    pub fn remaining(self, tat: i64, now: i64) -> u32 {
        let ahead = (tat - now).max(0);
        let left = (self.tolerance_us() - ahead) / self.interval_us();
        u32::try_from(left.max(0)).unwrap_or(u32::MAX)
    }
}

/// Pays for one call from a bucket whose TAT is `tat`, at `now`: the bucket's new TAT, or how
/// long (in microseconds) until it can pay.
pub fn spend(tat: i64, now: i64, rate: Rate) -> Result<i64, i64> {
    let next = tat.max(now) + rate.interval_us();
    let over = next - now - rate.tolerance_us();
    if over <= 0 { Ok(next) } else { Err(over) }
}

/// `us` microseconds as whole seconds, rounded up: a client told to wait that long never comes
/// back before the bucket can pay.
pub fn ceil_s(us: i64) -> u64 {
    u64::try_from(us.max(0)).unwrap_or(0).div_ceil(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_pays_its_burst_then_waits_one_interval() {
        let rate = Rate {
            per_minute: 6,
            burst: 3,
        };
        let interval = rate.interval_us();
        assert_eq!(interval, 10_000_000);
        let mut tat = 0;
        for _ in 0..3 {
            tat = spend(tat, 100, rate).expect("within the burst");
        }
        assert_eq!(rate.remaining(tat, 100), 0);
        assert_eq!(spend(tat, 100, rate), Err(interval));
        // One interval later, exactly one call more.
        let later = 100 + interval;
        let tat = spend(tat, later, rate).expect("refilled by one");
        assert!(spend(tat, later, rate).is_err());
        assert_eq!(rate.window_s(), 30);
    }

    #[test]
    fn a_very_high_rate_keeps_its_whole_burst() {
        let rate = Rate {
            per_minute: 1_000_000_000,
            burst: 1_000_000_000,
        };
        assert_eq!(rate.interval_us(), 1);
        assert_eq!(rate.tolerance_us(), 60_000_000);
        // Calls whose clocks were read in any order, microseconds apart, all pay.
        let mut tat = 0;
        for now in (0..10_000).rev() {
            tat = spend(tat, 1_000 + now, rate).expect("far within the burst");
        }
        // 7 million a minute: a truncated interval (8 µs, not 8.57) must not shrink the burst.
        let rate = Rate {
            per_minute: 7_000_000,
            burst: 7_000_000,
        };
        assert_eq!(rate.tolerance_us(), 60_000_000);
    }

    #[test]
    fn waits_round_up_to_whole_seconds() {
        assert_eq!(ceil_s(1), 1);
        assert_eq!(ceil_s(1_000_000), 1);
        assert_eq!(ceil_s(1_000_001), 2);
        assert_eq!(ceil_s(-5), 0);
    }
}
