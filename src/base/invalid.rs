//! A config key that is wrong, as a section beside its subsystem reports it: the key and why.
//! It imports nothing, so every section can use it without reaching back into the loader; the
//! loader turns it into [`ConfigError::Invalid`](crate::config::ConfigError::Invalid).

/// What is wrong with a key: its path (within the section's entry, or from the top), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The key's path (`webhooks[0].secret`; under an `[[upstreams]]` entry, `name`).
    pub key: String,
    /// Why.
    pub message: String,
}

/// The key `key` is wrong, for `message`.
pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        key: key.into(),
        message: message.into(),
    }
}
