//! The sign-in limiter: a token bucket per client address, in this process's memory.
//!
//! Each address may try [`BURST`] sign-ins at once, then one every [`REFILL`]. An IPv6 address
//! counts by its /64 (one host usually holds a whole /64). The limit is per process: replicas
//! each keep their own, so a client spread over `n` replicas gets `n` times the rate, which is
//! still far too slow to guess a 256-bit key. A router served without connect info (a library
//! user's `axum::serve(listener, router)`) does not know addresses: every attempt then shares one
//! bucket. Behind a reverse proxy every client has the proxy's address; the limiter does not trust
//! `X-Forwarded-For`, which a client can write.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sign-in attempts an address may make at once.
pub(crate) const BURST: u32 = 10;

/// How often an address gets one more attempt.
pub(crate) const REFILL: Duration = Duration::from_secs(6);

/// The most addresses tracked; past it, new addresses share one bucket until old ones refill.
const MAX_ADDRESSES: usize = 10_000;

/// Buckets by address (`None`: unknown, or past [`MAX_ADDRESSES`]).
#[derive(Default)]
pub(crate) struct Limiter {
    buckets: Mutex<HashMap<Option<IpAddr>, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    /// Attempts left as of `at`.
    left: f64,
    at: Instant,
}

impl Bucket {
    fn refilled(self, now: Instant) -> f64 {
        let gained = now.duration_since(self.at).as_secs_f64() / REFILL.as_secs_f64();
        (self.left + gained).min(f64::from(BURST))
    }
}

impl Limiter {
    /// Takes one attempt for `address`; refused, how long until the next one is allowed.
    pub(crate) fn take(&self, address: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut key = address.map(network);
        if !buckets.contains_key(&key) && buckets.len() >= MAX_ADDRESSES {
            // A full bucket is the same as no bucket: forget those first.
            buckets.retain(|_, bucket| bucket.refilled(now) < f64::from(BURST));
            if buckets.len() >= MAX_ADDRESSES {
                key = None;
            }
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            left: f64::from(BURST),
            at: now,
        });
        let left = bucket.refilled(now);
        if left < 1.0 {
            return Err(REFILL.mul_f64(1.0 - left));
        }
        *bucket = Bucket {
            left: left - 1.0,
            at: now,
        };
        Ok(())
    }
}

/// The part of an address that names one client: an IPv4 address, an IPv6 /64.
fn network(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_a_burst_then_waits() {
        let limiter = Limiter::default();
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..BURST {
            assert!(limiter.take(Some(one)).is_ok());
        }
        let wait = limiter.take(Some(one)).unwrap_err();
        assert!(wait > Duration::ZERO && wait <= REFILL, "{wait:?}");
        assert!(limiter.take(Some(other)).is_ok(), "each address its own");
        assert!(limiter.take(None).is_ok(), "unknown addresses share one");
    }

    #[test]
    fn an_ipv6_host_counts_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(network(a), network(b));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(network(mapped), "192.0.2.1".parse::<IpAddr>().unwrap());
    }
}
