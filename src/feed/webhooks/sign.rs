//! Standard Webhooks v1 signing: the secret's format and the `webhook-signature` header, so a
//! receiver can check a message with any Standard Webhooks library.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::WebhookError;

/// Reads a secret: `whsec_` followed by the base64 of 24 to 64 bytes.
pub fn parse_secret(secret: &str) -> Result<Vec<u8>, WebhookError> {
    let bad = || {
        WebhookError("must be `whsec_` followed by the base64 of 24 to 64 random bytes".to_owned())
    };
    let encoded = secret.trim().strip_prefix("whsec_").ok_or_else(bad)?;
    let bytes = BASE64.decode(encoded).map_err(|_| bad())?;
    if !(24..=64).contains(&bytes.len()) {
        return Err(bad());
    }
    Ok(bytes)
}

/// `webhook-signature` for a message: `v1,` and the base64 HMAC-SHA256 of
/// `"{id}.{timestamp}.{body}"` keyed by the secret's bytes.
pub fn signature(secret: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification.
        let secret = parse_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_!!",
            "whsec_c2hvcnQ=",
        ] {
            assert!(parse_secret(bad).is_err(), "{bad}");
        }
    }
}
