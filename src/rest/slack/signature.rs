//! Slack's request signature, version `v0`: `X-Slack-Signature` is `v0=` and the hex of
//! HMAC-SHA256 under the app's signing secret of `v0:{X-Slack-Request-Timestamp}:{raw body}`,
//! and the timestamp is within five minutes of now (either way), so a request captured once
//! cannot be sent again later. Checked over the body's bytes exactly as they arrived, before
//! anything of it is read; the comparison takes the same time wherever the bytes differ.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::http::error::ApiError;

/// How far a request's timestamp may be from now, in seconds, either way.
pub(super) const WINDOW_S: i64 = 300;

/// The signing secrets a request may be signed with (one per Slack app): refuses, saying why,
/// a request whose signature none of them verifies, or whose timestamp is out of the window of
/// `now` (Unix seconds).
pub(super) fn verify(
    secrets: &[Vec<u8>],
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), ApiError> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| ApiError::BadSignature(format!("The request has no `{name}` header.")))
    };
    let timestamp = header("X-Slack-Request-Timestamp")?;
    let signature = header("X-Slack-Signature")?;
    let at: i64 = timestamp.trim().parse().map_err(|_| {
        ApiError::BadSignature("`X-Slack-Request-Timestamp` is not a Unix time.".into())
    })?;
    if (now - at).abs() > WINDOW_S {
        return Err(ApiError::BadSignature(
            "`X-Slack-Request-Timestamp` is more than five minutes from now: the request is \
             refused as a replay."
                .into(),
        ));
    }
    let bad = || ApiError::BadSignature("`X-Slack-Signature` does not verify.".into());
    let given = signature
        .strip_prefix("v0=")
        .and_then(|hex| hex::decode(hex).ok())
        .ok_or_else(bad)?;
    let verified = secrets.iter().any(|secret| {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
            return false;
        };
        mac.update(b"v0:");
        mac.update(timestamp.as_bytes());
        mac.update(b":");
        mac.update(body);
        // Constant time, whatever the bytes.
        mac.verify_slice(&given).is_ok()
    });
    if verified { Ok(()) } else { Err(bad()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(secret: &[u8], timestamp: &str, body: &[u8]) -> HeaderMap {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(format!("v0:{timestamp}:").as_bytes());
        mac.update(body);
        let mut headers = HeaderMap::new();
        headers.insert("x-slack-request-timestamp", timestamp.parse().unwrap());
        let signature = format!("v0={}", hex::encode(mac.finalize().into_bytes()));
        headers.insert("x-slack-signature", signature.parse().unwrap());
        headers
    }

    #[test]
    fn only_the_secret_over_these_bytes_in_the_window_verifies() {
        let secrets = vec![b"other".to_vec(), b"secret".to_vec()];
        let body = b"payload=%7B%7D";
        let headers = signed(b"secret", "1000", body);
        assert!(verify(&secrets, &headers, body, 1000).is_ok());
        assert!(verify(&secrets, &headers, body, 1000 + WINDOW_S).is_ok());
        assert!(verify(&secrets, &headers, body, 1000 - WINDOW_S).is_ok());
        let refused = |at: i64, body: &[u8], headers: &HeaderMap| {
            matches!(
                verify(&secrets, headers, body, at),
                Err(ApiError::BadSignature(_))
            )
        };
        assert!(refused(1001 + WINDOW_S, body, &headers), "too old");
        assert!(refused(999 - WINDOW_S, body, &headers), "too far ahead");
        assert!(refused(1000, b"payload=%7B%7E", &headers), "another body");
        assert!(refused(1000, body, &signed(b"wrong", "1000", body)));
        assert!(refused(1000, body, &HeaderMap::new()), "unsigned");
        assert!(
            verify(&[], &headers, body, 1000).is_err(),
            "no app: nothing verifies"
        );
    }
}
