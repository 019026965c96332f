//! `[inbox]`: the approvers' page's config section, and its translation into
//! [`InboxOptions`](super::InboxOptions).

use std::time::Duration;

use serde::Deserialize;

use super::InboxOptions;

/// `[inbox]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InboxConfig {
    /// Whether `/inbox` is served.
    pub enabled: bool,
    /// How long a sign-in lasts, in seconds.
    pub session_ttl_s: u64,
    /// Whether the inbox's cookies are always `Secure` (HTTPS only).
    pub secure_cookies: bool,
}

impl Default for InboxConfig {
    // The inbox's own defaults, so that a server built without a file serves it alike.
    fn default() -> Self {
        let options = InboxOptions::default();
        InboxConfig {
            enabled: options.enabled,
            session_ttl_s: options.session_ttl.as_secs(),
            secure_cookies: options.secure_cookies,
        }
    }
}

impl InboxConfig {
    /// The inbox's options.
    pub fn options(&self) -> InboxOptions {
        InboxOptions {
            enabled: self.enabled,
            session_ttl: Duration::from_secs(self.session_ttl_s),
            secure_cookies: self.secure_cookies,
        }
    }
}
