//! `[signing]`: where toolgate's signing key comes from, how often a stored one is replaced,
//! and how long an attestation is valid.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// `[signing]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SigningConfig {
    /// A PKCS#8 PEM file holding the private key (Ed25519 or P-256) that signs; unset: keys are
    /// made and kept in the store, and rotated.
    pub key_file: Option<PathBuf>,
    /// How long one stored key signs before a new one does (seconds); the old one is still
    /// published until the tokens it signed have expired.
    pub rotate_after_s: u64,
    /// How long an attestation is valid after it is signed (seconds).
    pub ttl_s: u64,
}

impl Default for SigningConfig {
    fn default() -> Self {
        SigningConfig {
            key_file: None,
            rotate_after_s: super::DEFAULT_ROTATION.as_secs(),
            ttl_s: super::DEFAULT_TTL.as_secs(),
        }
    }
}

impl SigningConfig {
    /// The rotation period.
    pub fn rotation(&self) -> Duration {
        Duration::from_secs(self.rotate_after_s.max(1))
    }

    /// The tokens' time to live.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_s.max(1))
    }
}

/// How the server signs, ready to use: with the key of `[signing] key_file` (read and checked
/// at start), or with keys made and kept in the store (the default); or not at all.
#[derive(Clone)]
pub struct Signing {
    /// `None`: nothing is signed (no attestation, no key set).
    on: Option<(Option<std::sync::Arc<super::keys::Key>>, Duration, Duration)>,
}

impl std::fmt::Debug for Signing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signing")
            .field("on", &self.on.is_some())
            .field(
                "from_file",
                &self.on.as_ref().is_some_and(|(key, _, _)| key.is_some()),
            )
            .finish_non_exhaustive()
    }
}

impl Default for Signing {
    /// Keys made and kept in the store, with the default rotation and time to live.
    fn default() -> Self {
        Signing {
            on: Some((None, super::DEFAULT_ROTATION, super::DEFAULT_TTL)),
        }
    }
}

impl Signing {
    /// Nothing signed: upstream calls carry no attestation, and no key set is served.
    pub fn off() -> Self {
        Signing { on: None }
    }

    /// As `config` says, its key file read now; why it is refused (unreadable, or no Ed25519
    /// or P-256 private key in PKCS#8).
    pub fn from_config(config: &SigningConfig) -> Result<Self, String> {
        let key = match &config.key_file {
            Some(path) => {
                let pem = std::fs::read_to_string(path)
                    .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
                Some(std::sync::Arc::new(super::keys::from_pem(&pem)?))
            }
            None => None,
        };
        Ok(Signing {
            on: Some((key, config.rotation(), config.ttl())),
        })
    }

    /// With the key of the PEM text `pem` (PKCS#8, Ed25519 or P-256).
    pub fn from_pem(pem: &str, ttl: Duration) -> Result<Self, String> {
        Ok(Signing {
            on: Some((
                Some(std::sync::Arc::new(super::keys::from_pem(pem)?)),
                super::DEFAULT_ROTATION,
                ttl,
            )),
        })
    }

    /// With stored keys, rotated every `rotation`, signing tokens valid for `ttl`.
    pub fn stored(rotation: Duration, ttl: Duration) -> Self {
        Signing {
            on: Some((None, rotation, ttl)),
        }
    }

    /// The signer over `store`, issuing as `issuer`; `None` when off.
    pub fn signer(
        &self,
        store: std::sync::Arc<dyn crate::store::Store>,
        issuer: &str,
    ) -> Option<super::Signer> {
        let (key, rotation, ttl) = self.on.clone()?;
        let mut signer = super::Signer::new(store, issuer, rotation, ttl);
        signer.fixed = key;
        Some(signer)
    }
}
