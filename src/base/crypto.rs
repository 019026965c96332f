//! The process-wide TLS provider every outbound HTTP client needs, and the hash a bearer token
//! is known by.

use sha2::{Digest, Sha256};

/// rustls needs a process-wide crypto provider: ring, installed once. Every client toolgate
/// builds (webhooks, identity providers, upstream MCP servers, the trace exporter) calls it
/// first; an application that makes its own `reqwest` clients beside toolgate (the crate is
/// built with `rustls-no-provider`) calls it too.
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only when a provider is installed already (the embedding app's): that one serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The SHA-256 of `token`, as configured in `token_sha256` (what `toolgate hash-token` prints).
pub fn token_sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// `toolgate hash-token`'s work: its exit code, having printed the hash (the binary is kept short).
/// The token comes from stdin, so it never shows in a process list or a
/// shell history; one trailing newline is dropped.
pub fn hash_token_command() -> u8 {
    let mut token = String::new();
    if let Err(err) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut token) {
        eprintln!("toolgate: cannot read the token from standard input: {err}");
        return 1;
    }
    let token = token
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&token);
    if token.is_empty() {
        eprintln!("toolgate: the token is empty");
        return 2;
    }
    println!("{}", hex::encode(token_sha256(token)));
    0
}
