//! Identifiers the server hands out: call ids and suspension tokens.
//!
//! A suspension token is 160 bits from the operating system's CSPRNG and nothing else, since
//! holding it is what lets an approver act on a call. A call id needs to be unique, not secret:
//! it is its creation time, then 80 bits drawn once per process from the CSPRNG plus a counter,
//! so ids sort roughly by age and cost no system call each. The prefixes keep the two apart.

/// Random bytes from the OS; the server cannot hand out safe tokens without them.
fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes
}

/// A new call id: `call_` + 12 hex digits of Unix milliseconds + 20 hex digits of a
/// per-process random number plus a counter (unique within the process, and across processes
/// but for an 80-bit collision).
pub fn new_call_id(now_ms: i64) -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<(u16, u64)> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (high, low) = *SEED.get_or_init(|| {
        let bytes = random::<10>();
        let high = u16::from_be_bytes([bytes[0], bytes[1]]);
        let low = u64::from_be_bytes(bytes[2..].try_into().expect("eight bytes"));
        (high, low)
    });
    let low = low.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!(
        "call_{:012x}{high:04x}{low:016x}",
        now_ms & 0xffff_ffff_ffff
    )
}

/// A new suspension token: `sus_` + 160 random bits in hex (URL-safe, single use).
pub fn new_suspension_token() -> String {
    format!("sus_{}", hex::encode(random::<20>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_shape_and_do_not_repeat() {
        let a = new_suspension_token();
        let b = new_suspension_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 44);
        assert!(a[4..].bytes().all(|c| c.is_ascii_hexdigit()));
        let c = new_call_id(1_700_000_000_000);
        assert!(c.starts_with("call_018bcfe56800"));
        assert_eq!(c.len(), 37);
        assert_ne!(c, new_call_id(1_700_000_000_000));
    }
}
