//! Key material: an Ed25519 key pair made from the OS's randomness, a PEM read (Ed25519 or
//! P-256, PKCS#8), and each one's JWK (RFC 7517; RFC 8037 for Ed25519).

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD as B64};
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _,
};
use serde_json::{Value, json};

/// The signing half, parsed once: reading a PKCS#8 key derives its public half (a scalar
/// multiplication), which would otherwise cost as much as the signature on every token.
enum Pair {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
}

/// A key that signs: its id, signing half, public half, and the JWS header it signs under.
pub(super) struct Key {
    pub(super) kid: String,
    pair: Pair,
    /// Ed25519: the 32 bytes of the public key. P-256: the uncompressed point (0x04, x, y).
    public: Vec<u8>,
    /// The header every token of this key carries, base64url-encoded once.
    header: String,
    /// When the key leaves the key set (a stored key); no token of it may outlive that.
    pub(super) retire_at: Option<i64>,
}

impl std::fmt::Debug for Key {
    /// The id and algorithm: never the private half.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg())
            .finish_non_exhaustive()
    }
}

impl Key {
    /// The key from its stored parts.
    pub(super) fn of(
        kid: &str,
        alg: &str,
        private_der: &[u8],
        public: &[u8],
    ) -> Result<Key, String> {
        let pair = match alg {
            "EdDSA" => Ed25519KeyPair::from_pkcs8_maybe_unchecked(private_der)
                .map(Pair::Ed25519)
                .map_err(|_| "a stored Ed25519 signing key does not read".to_owned())?,
            "ES256" => EcdsaKeyPair::from_pkcs8(
                &ECDSA_P256_SHA256_FIXED_SIGNING,
                private_der,
                &SystemRandom::new(),
            )
            .map(Pair::P256)
            .map_err(|_| "a stored P-256 signing key does not read".to_owned())?,
            other => return Err(format!("a signing key of an unknown algorithm `{other}`")),
        };
        let header = B64.encode(json!({ "alg": alg, "kid": kid, "typ": "JWT" }).to_string());
        Ok(Key {
            kid: kid.to_owned(),
            pair,
            public: public.to_vec(),
            header,
            retire_at: None,
        })
    }

    /// Its JWS algorithm: `EdDSA` or `ES256`.
    pub(super) fn alg(&self) -> &'static str {
        match self.pair {
            Pair::Ed25519(_) => "EdDSA",
            Pair::P256(_) => "ES256",
        }
    }

    /// The compact JWS (RFC 7515) of `claims`, its header naming this key and `typ` `JWT`.
    pub(super) fn sign(&self, claims: &Value) -> Result<String, String> {
        let mut token = self.header.clone();
        token.push('.');
        B64.encode_string(claims.to_string(), &mut token);
        let signature = match &self.pair {
            Pair::Ed25519(pair) => pair.sign(token.as_bytes()).as_ref().to_vec(),
            Pair::P256(pair) => pair
                .sign(&SystemRandom::new(), token.as_bytes())
                .map_err(|_| "the P-256 signature failed".to_owned())?
                .as_ref()
                .to_vec(),
        };
        token.push('.');
        B64.encode_string(signature, &mut token);
        Ok(token)
    }

    /// The public key as a JWK, for `/.well-known/jwks.json`.
    pub(super) fn jwk(&self) -> Value {
        jwk(&self.kid, self.alg(), &self.public).unwrap_or(Value::Null)
    }
}

/// The JWK of a public key of `alg` (`EdDSA`: its 32 bytes; `ES256`: the uncompressed point),
/// from its stored parts alone; `None` for another algorithm or a point of the wrong length.
pub(super) fn jwk(kid: &str, alg: &str, public: &[u8]) -> Option<Value> {
    match alg {
        "ES256" if public.len() == 65 => {
            let (x, y) = public[1..].split_at(32);
            Some(json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256",
                "kid": kid, "x": B64.encode(x), "y": B64.encode(y),
            }))
        }
        "EdDSA" => Some(json!({
            "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA",
            "kid": kid, "x": B64.encode(public),
        })),
        _ => None,
    }
}

/// A fresh Ed25519 key pair: its PKCS#8 DER and its public key.
pub(super) fn generate() -> Result<(Vec<u8>, Vec<u8>), String> {
    let rng = SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng)
        .map_err(|_| "the OS gave no random bytes for a signing key".to_owned())?;
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
        .map_err(|_| "a signing key just made does not read back".to_owned())?;
    Ok((pkcs8.as_ref().to_vec(), pair.public_key().as_ref().to_vec()))
}

/// The key of a PEM file (`-----BEGIN PRIVATE KEY-----`, PKCS#8): Ed25519 or P-256. Its `kid`
/// is the JWK thumbprint of its public key (RFC 7638), so it stays the same across restarts
/// and replicas that read the same file.
pub(super) fn from_pem(pem: &str) -> Result<Key, String> {
    const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
    const END: &str = "-----END PRIVATE KEY-----";
    let body = pem
        .split_once(BEGIN)
        .and_then(|(_, rest)| rest.split_once(END))
        .map(|(body, _)| body)
        .ok_or_else(|| {
            "not a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`); convert an `EC PRIVATE KEY` with \
             `openssl pkcs8 -topk8 -nocrypt`"
                .to_owned()
        })?;
    let text: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let der = STANDARD
        .decode(text)
        .map_err(|_| "the PEM's body is not base64".to_owned())?;
    let (alg, public) = if let Ok(pair) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
        ("EdDSA", pair.public_key().as_ref().to_vec())
    } else if let Ok(pair) =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &SystemRandom::new())
    {
        ("ES256", pair.public_key().as_ref().to_vec())
    } else {
        return Err("the PEM holds neither an Ed25519 nor a P-256 private key".into());
    };
    let kid = thumbprint(&jwk("", alg, &public).ok_or("the PEM's public key is malformed")?);
    Key::of(&kid, alg, &der, &public)
}

/// The RFC 7638 thumbprint of a public JWK: the SHA-256 of its required members, sorted.
fn thumbprint(jwk: &Value) -> String {
    use sha2::{Digest, Sha256};
    let members: &[&str] = if jwk["kty"] == "EC" {
        &["crv", "kty", "x", "y"]
    } else {
        &["crv", "kty", "x"]
    };
    let mut required = serde_json::Map::new();
    for name in members {
        required.insert((*name).to_owned(), jwk[*name].clone());
    }
    B64.encode(Sha256::digest(Value::Object(required).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_key_reads_back_and_signs_what_its_jwk_verifies() {
        let (der, public) = generate().unwrap();
        let key = Key::of("k1", "EdDSA", &der, &public).unwrap();
        let token = key.sign(&json!({"a": 1})).unwrap();
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.jwk()).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.required_spec_claims.clear();
        jsonwebtoken::decode::<Value>(&token, &decoding, &validation).unwrap();
    }

    #[test]
    fn a_p256_pem_signs_es256_that_its_jwk_verifies_under_its_thumbprint() {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(pkcs8.as_ref())
        );
        let key = from_pem(&pem).unwrap();
        assert_eq!(key.alg(), "ES256");
        let jwk = key.jwk();
        assert_eq!(key.kid, thumbprint(&jwk));
        assert_eq!(jwk["kid"], key.kid.as_str());
        let token = key.sign(&json!({"a": 1})).unwrap();
        let parsed: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwk).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_jwk(&parsed).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        validation.required_spec_claims.clear();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(key.kid.as_str()));
        jsonwebtoken::decode::<Value>(&token, &decoding, &validation).unwrap();
        // Another key's signature does not verify under this JWK.
        let other = from_pem(
            &pem.replace(
                &STANDARD.encode(pkcs8.as_ref()),
                &STANDARD.encode(
                    EcdsaKeyPair::generate_pkcs8(
                        &ECDSA_P256_SHA256_FIXED_SIGNING,
                        &SystemRandom::new(),
                    )
                    .unwrap()
                    .as_ref(),
                ),
            ),
        )
        .unwrap();
        let forged = other.sign(&json!({"a": 1})).unwrap();
        assert!(jsonwebtoken::decode::<Value>(&forged, &decoding, &validation).is_err());
    }

    #[test]
    fn a_pem_that_is_no_private_key_is_refused_saying_why() {
        assert!(from_pem("hello").unwrap_err().contains("PKCS#8"));
        let bad = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(from_pem(bad).unwrap_err().contains("neither"));
    }
}
