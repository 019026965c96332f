//! A caller's access token, kept for one thing: acting as that caller upstream (an upstream
//! whose `[upstreams.auth]` exchanges it at its issuer, RFC 8693). It is a secret: its `Debug`
//! shows whose it is and never the token, it is never serialized, never stored, and only the
//! crate reads it.

use std::fmt;
use std::sync::Arc;

/// The bearer token a principal was admitted with, from an identity provider (`[[auth.issuers]]`);
/// cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub struct CallerToken(Arc<Inner>);

#[derive(PartialEq, Eq)]
struct Inner {
    token: Box<str>,
    issuer: Box<str>,
    subject: Box<str>,
}

impl CallerToken {
    /// `token`, issued by the `[[auth.issuers]]` entry `issuer` to the principal `subject`.
    pub(crate) fn new(token: &str, issuer: &str, subject: &str) -> Self {
        CallerToken(Arc::new(Inner {
            token: token.into(),
            issuer: issuer.into(),
            subject: subject.into(),
        }))
    }

    /// The token itself: for the request that exchanges it, and nothing else.
    pub(crate) fn secret(&self) -> &str {
        &self.0.token
    }

    /// The name of the `[[auth.issuers]]` entry that issued it.
    pub fn issuer(&self) -> &str {
        &self.0.issuer
    }

    /// The principal it names (`<issuer>:<subject>`).
    pub fn subject(&self) -> &str {
        &self.0.subject
    }
}

impl fmt::Debug for CallerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallerToken")
            .field("issuer", &self.issuer())
            .field("subject", &self.subject())
            .field("token", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn its_debug_never_shows_the_token() {
        let token = super::CallerToken::new("eyJ.secret.sig", "corp", "corp:dana");
        let shown = format!("{token:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("corp:dana"), "{shown}");
        assert_eq!(token.secret(), "eyJ.secret.sig");
    }
}
