//! PyJWT's verdict on toolgate's attestations: `tests/attest/verify.py`, the verifier of
//! docs/attestations.md, fetching the server's key set as an upstream would.

use std::process::Command;

use serde_json::Value;

/// PyJWT's verdict on `token` for `audience` (and `arguments`): the claims, or why refused.
pub fn verify(
    base: &str,
    audience: &str,
    token: &str,
    arguments: Option<&Value>,
) -> Result<Value, String> {
    let mut command = Command::new(super::ci_python());
    command
        .arg(super::repo_root().join("tests/attest/verify.py"))
        .arg(format!("{base}/.well-known/jwks.json"))
        .arg(audience)
        .arg(token);
    if let Some(arguments) = arguments {
        command.arg(arguments.to_string());
    }
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() {
        Ok(serde_json::from_str(&text).unwrap())
    } else {
        assert_eq!(
            out.status.code(),
            Some(1),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Err(text)
    }
}

/// [`verify`], run aside from the test's runtime: for a server in this process, which must go on
/// answering the key set's fetch meanwhile.
pub async fn verify_aside(
    base: &str,
    audience: &str,
    token: &str,
    arguments: Option<&Value>,
) -> Result<Value, String> {
    let (base, audience, token) = (base.to_owned(), audience.to_owned(), token.to_owned());
    let arguments = arguments.cloned();
    tokio::task::spawn_blocking(move || verify(&base, &audience, &token, arguments.as_ref()))
        .await
        .unwrap()
}
