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
    // Big-endian bytes in hex, so the text sorts as the numbers do; written without the
    // formatting machinery, since every call pays for it.
    let mut raw = [0u8; 16];
    raw[..6].copy_from_slice(&now_ms.to_be_bytes()[2..]);
    raw[6..8].copy_from_slice(&high.to_be_bytes());
    raw[8..].copy_from_slice(&low.to_be_bytes());
    let mut text = [0u8; 32];
    hex::encode_to_slice(raw, &mut text).expect("32 hex digits for 16 bytes");
    let mut id = String::with_capacity(37);
    id.push_str("call_");
    id.push_str(std::str::from_utf8(&text).expect("hex digits are ASCII"));
    id
}

/// A new replica id: `rep_` + 64 random bits in hex, fresh at every start of a process on a
/// shared database.
pub fn new_replica_id() -> String {
    format!("rep_{}", hex::encode(random::<8>()))
}

/// A new standing approval id: `sa_` + 96 random bits in hex.
pub fn new_standing_id() -> String {
    format!("sa_{}", hex::encode(random::<12>()))
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
        assert!(
            c[5..]
                .bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        // Sorted by time first: the id of a later millisecond sorts after.
        assert!(new_call_id(1_700_000_000_001) > c);
        assert!(new_call_id(0x1_0000_0000_0000 + 5).starts_with("call_000000000005"));
        assert_eq!(c.len(), 37);
        assert_ne!(c, new_call_id(1_700_000_000_000));
    }
}
