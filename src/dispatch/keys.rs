//! The idempotency keys clients send: the bounds of one as sent (REST's `Idempotency-Key`
//! header, MCP's `_meta`), and the key it stands for, scoped to its caller.

/// The longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// An idempotency key as a client sent it, trimmed: 1 to 255 visible ASCII characters; else
/// what it must be.
pub fn check_idempotency_key(key: &str) -> Result<String, String> {
    let key = key.trim();
    if key.is_empty()
        || key.len() > MAX_IDEMPOTENCY_KEY_LEN
        || !key.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(format!(
            "must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters."
        ));
    }
    Ok(key.to_owned())
}

/// The idempotency key a client's `Idempotency-Key` header stands for: scoped to the caller (the
/// tool scope comes from the store's unique index on (tool, key)), and hashed so that no choice
/// of caller name and key collides with another and the handler, which may hand it to a
/// provider, never sees the key name.
pub fn client_key_scope(caller: Option<&str>, key: &str) -> String {
    use sha2::{Digest, Sha256};
    let caller = caller.unwrap_or("");
    let mut hash = Sha256::new();
    hash.update((caller.len() as u64).to_be_bytes());
    hash.update(caller.as_bytes());
    hash.update(key.as_bytes());
    format!("client:{}", hex::encode(hash.finalize()))
}
