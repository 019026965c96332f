//! Identifiers the server hands out: call ids and suspension tokens.
//!
//! Both come from the operating system's CSPRNG. A call id starts with its creation time, so ids
//! sort roughly by age; a suspension token is 160 random bits and nothing else, since holding it
//! is what lets an approver act on a call. The prefixes keep the two from being confused.

/// Random bytes from the OS; the server cannot hand out safe tokens without them.
fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes
}

fn hex(bytes: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
}

/// A new call id: `call_` + 12 hex digits of Unix milliseconds + 80 random bits.
pub fn new_call_id(now_ms: i64) -> String {
    let mut id = String::with_capacity(5 + 12 + 20);
    id.push_str("call_");
    id.push_str(&format!("{:012x}", now_ms & 0xffff_ffff_ffff));
    hex(&random::<10>(), &mut id);
    id
}

/// A new suspension token: `sus_` + 160 random bits in hex (URL-safe, single use).
pub fn new_suspension_token() -> String {
    let mut token = String::with_capacity(4 + 40);
    token.push_str("sus_");
    hex(&random::<20>(), &mut token);
    token
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
